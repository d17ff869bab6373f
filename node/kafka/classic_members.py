"""JoinGroup (11) 0-9, SyncGroup (14) 0-5, Heartbeat (12) 0-4 and LeaveGroup (13) 0-5: the
classic group protocol's members, hosted in Tidelog's consumer groups as Kafka 4 hosts them
in its consumer groups (docs/architecture/coordinators.md; `coordinator.consumer_groups`).

The server assigns: the member's subscription comes from its JoinGroup's protocol metadata
(the consumer protocol's subscription); the answer's generation is its member epoch; no member
is the leader, so every client is a follower whose SyncGroup returns its assignment, the
consumer protocol's assignment bytes; Heartbeat answers REBALANCE_IN_PROGRESS when the member
must join again. A protocol type other than "consumer", or protocols whose names share none
with what every other classic member of the group names, is INCONSISTENT_GROUP_PROTOCOL, as
Kafka answers it for a consumer group.

These requests are answered by the group's coordinator only (NOT_COORDINATOR elsewhere, as in
Kafka: the client asks FindCoordinator); READ on the group is checked first, as Tidelog's
ConsumerGroupHeartbeat checks it (node/api/consumer_groups.py).
"""

from __future__ import annotations

import datetime
import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from tidelog import errors
from tidelog.coordinator.consumer_groups import PROTOCOL_TYPE, HeartbeatRequest
from tidelog.node.api.consumer_groups import ConsumerGroupApi, client_host
from tidelog.node.kafka.call import KafkaCall
from tidelog.node.kafka.codec import response_type
from tidelog.node.kafka.consumer_protocol import (
    BadSubscription,
    assignment_bytes,
    read_subscription,
)
from tidelog.node.kafka.fields import build, entity_of, error_code, millis
from tidelog.node.kafka.registry import ApiRegistry

JOIN_GROUP_KEY = 11
HEARTBEAT_KEY = 12
LEAVE_GROUP_KEY = 13
SYNC_GROUP_KEY = 14
#: From this JoinGroup version on, a member joining without an id is given one and asked to
#: join again with it (MEMBER_ID_REQUIRED), so that a lost answer leaves no orphan member.
_KNOWN_MEMBER_ID_VERSION = 4
#: Errors about the group as a whole, not one member (LeaveGroup's top-level error).
_GROUP_ERRORS = (errors.NotCoordinatorError, errors.CoordinatorLoadInProgressError,
                 errors.CoordinatorNotAvailableError, errors.AuthorizationError)
_NO_THROTTLE = datetime.timedelta(0)


def add_classic_members(registry: ApiRegistry, servicer: Any) -> None:
    """JoinGroup 0-9, Heartbeat 0-4, LeaveGroup 0-5, SyncGroup 0-5 (Kafka 4's ranges)."""
    adapter = ClassicMembers(servicer.consumer_groups)
    registry.add(JOIN_GROUP_KEY, 0, 9, adapter.join_group)
    registry.add(HEARTBEAT_KEY, 0, 4, adapter.heartbeat)
    registry.add(LEAVE_GROUP_KEY, 0, 5, adapter.leave_group)
    registry.add(SYNC_GROUP_KEY, 0, 5, adapter.sync_group)


class ClassicMembers:
    def __init__(self, api: ConsumerGroupApi) -> None:
        self._api = api

    def _refused(self, call: KafkaCall, group: str) -> errors.TidelogError | None:
        if not group:
            return errors.InvalidGroupIdError("the group id is empty")
        return self._api.read_refused(call, group)

    async def join_group(self, request: Any, call: KafkaCall) -> Any:
        version = call.api_version
        response = response_type(JOIN_GROUP_KEY, version)

        def answer(code: ErrorCode, member_id: str, generation: int = -1,
                   protocol: str | None = None) -> Any:
            return build(
                response, throttle_time=_NO_THROTTLE, error_code=code,
                generation_id=generation,
                protocol_type=PROTOCOL_TYPE if protocol is not None else None,
                protocol_name=protocol if protocol is not None or version >= 7 else "",
                leader="", skip_assignment=False, member_id=member_id, members=(),
            )

        member_id = request.member_id
        instance_id = getattr(request, "group_instance_id", None)
        if request.protocol_type != PROTOCOL_TYPE or not request.protocols:
            return answer(ErrorCode.inconsistent_group_protocol, member_id)
        refused = self._refused(call, request.group_id)
        if refused is not None:
            return answer(error_code(refused.code), member_id)
        if not member_id:
            member_id = str(uuid.uuid4())
            if version >= _KNOWN_MEMBER_ID_VERSION and instance_id is None:
                return answer(ErrorCode.member_id_required, member_id)
        protocol = request.protocols[0]
        try:
            subscription = read_subscription(protocol.metadata)
        except BadSubscription:
            return answer(ErrorCode.inconsistent_group_protocol, member_id)
        session_ms = millis(request.session_timeout)
        if session_ms <= 0:
            return answer(ErrorCode.invalid_session_timeout, member_id)
        rebalance = getattr(request, "rebalance_timeout", None)
        rebalance_ms = millis(rebalance) if rebalance is not None else session_ms
        try:
            joined = await self._api.driver.classic_join(HeartbeatRequest(
                group_id=request.group_id, member_id=member_id, member_epoch=0,
                instance_id=instance_id, rack_id=subscription.rack_id,
                rebalance_timeout_ms=rebalance_ms if rebalance_ms > 0 else session_ms,
                subscribed_topics=subscription.topics, owned=subscription.owned,
                client_id=call.client_id or "", client_host=client_host(call.peer()),
                classic_session_timeout_ms=session_ms,
                classic_protocols=tuple(p.name for p in request.protocols),
            ))
        except errors.TidelogError as exc:
            return answer(error_code(exc.code), member_id)
        return answer(ErrorCode.none, member_id, joined.member_epoch, protocol.name)

    async def sync_group(self, request: Any, call: KafkaCall) -> Any:
        response = response_type(SYNC_GROUP_KEY, call.api_version)
        protocol_type = getattr(request, "protocol_type", None)
        protocol_name = getattr(request, "protocol_name", None)

        def answer(code: ErrorCode, assignment: bytes = b"") -> Any:
            return build(response, throttle_time=_NO_THROTTLE, error_code=code,
                         protocol_type=protocol_type, protocol_name=protocol_name,
                         assignment=assignment)

        if protocol_type not in (None, PROTOCOL_TYPE):
            return answer(ErrorCode.inconsistent_group_protocol)
        refused = self._refused(call, request.group_id)
        if refused is not None:
            return answer(error_code(refused.code))
        try:
            assignment = await self._api.driver.classic_sync(
                request.group_id, request.member_id, request.generation_id
            )
        except errors.TidelogError as exc:
            return answer(error_code(exc.code))
        return answer(ErrorCode.none, assignment_bytes(assignment))

    async def heartbeat(self, request: Any, call: KafkaCall) -> Any:
        response = response_type(HEARTBEAT_KEY, call.api_version)
        refused = self._refused(call, request.group_id)
        try:
            if refused is not None:
                raise refused
            rejoin = await self._api.driver.classic_heartbeat(
                request.group_id, request.member_id, request.generation_id
            )
            code = ErrorCode.rebalance_in_progress if rejoin else ErrorCode.none
        except errors.TidelogError as exc:
            code = error_code(exc.code)
        return build(response, throttle_time=_NO_THROTTLE, error_code=code)

    async def leave_group(self, request: Any, call: KafkaCall) -> Any:
        """v0-2 name one member; v3+ a list (each answered on its own; the top-level error
        is the group's: authorization, not the coordinator)."""
        response = response_type(LEAVE_GROUP_KEY, call.api_version)
        members = getattr(request, "members", None)
        leaving = ([(m.member_id, m.group_instance_id) for m in members]
                   if members is not None else [(request.member_id, None)])
        refused = self._refused(call, request.group_id)
        if refused is not None:
            return build(response, throttle_time=_NO_THROTTLE,
                         error_code=error_code(refused.code), members=())
        codes: list[ErrorCode] = []
        for member_id, instance_id in leaving:
            try:
                await self._api.driver.classic_leave(request.group_id, member_id, instance_id)
                codes.append(ErrorCode.none)
            except _GROUP_ERRORS as exc:
                return build(response, throttle_time=_NO_THROTTLE,
                             error_code=error_code(exc.code), members=())
            except errors.TidelogError as exc:
                codes.append(error_code(exc.code))
        if members is None:
            return build(response, throttle_time=_NO_THROTTLE, error_code=codes[0])
        member_type = entity_of(response, "MemberResponse")
        return build(response, throttle_time=_NO_THROTTLE, error_code=ErrorCode.none,
                     members=tuple(
                         build(member_type, member_id=member_id, group_instance_id=instance_id,
                               error_code=code)
                         for (member_id, instance_id), code in zip(leaving, codes, strict=True)
                     ))
