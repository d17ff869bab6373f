"""The offset requests of the client API (OffsetCommit, OffsetFetch, OffsetDelete, ListGroups,
DeleteGroups), translated to the group coordinator's calls (`group_coordinator_driver`).

Any node accepts them: a request for a group that another node coordinates is
forwarded to that node's client port, once (`forwarding`): a forwarded request is answered
where it lands, NOT_COORDINATOR (16) if that node does not coordinate the group after all. The
coordinator checks each partition as Kafka's API layer does (kafka-mapping §7.5): a topic or
partition that does not exist gets UNKNOWN_TOPIC_OR_PARTITION (3), one named twice
INVALID_REQUEST (42); group-level errors go on every partition of a commit, and in the
group-level error code of the other answers. Authorization comes first, where the request is
answered (kafka-mapping §11.3): the group (30) before anything else, then each topic (29).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from functools import partial
from typing import Any, Final, TypeVar

import grpc

from tidelog import errors
from tidelog.acl import Operation, ResourceType
from tidelog.coordinator.consumer_groups import PROTOCOL_TYPE
from tidelog.coordinator.group_coordinator import CommitEntry
from tidelog.node.api.authorization import Authorization
from tidelog.node.api.forwarding import (
    Forwarder,
    at_coordinator,
    coordinator_answer,
    was_forwarded,
)
from tidelog.node.api.rules import Answers, each_once, error_answer, or_unset, partitions_of
from tidelog.node.cluster.controller_driver import ControllerDriver
from tidelog.node.config import NodeConfig
from tidelog.node.coordinators.consumer_group_driver import ConsumerGroupDriver
from tidelog.node.coordinators.group_driver import GroupCoordinatorDriver
from tidelog.node.coordinators.topic import CoordinatorTopic
from tidelog.records import MAX_PRODUCER_EPOCH
from tidelog.types import TopicPartition
from tidelog.v1 import tidelog_pb2 as pb

#: What an unset generation_id means: a simple consumer, no generation (Kafka's -1).
_NO_GENERATION = -1
_NO_LEADER_EPOCH = -1
#: The only state a group of committed offsets alone has (Kafka's name for a memberless group).
_EMPTY = "Empty"

R = TypeVar("R", pb.OffsetCommitResponse, pb.TxnOffsetCommitResponse)
#: The RPCs whose per-partition errors the handler counts as it answers (the node's metrics
#: then skip walking their answers, node/metrics.py): an OffsetCommit names many partitions.
COUNTED_RPCS: Final = ("OffsetCommit", "TxnOffsetCommit")


class GroupApi:
    def __init__(
        self,
        config: NodeConfig,
        controller: ControllerDriver,
        offsets_topic: CoordinatorTopic,
        groups: GroupCoordinatorDriver,
        forwarder: Forwarder,
        authorization: Authorization,
        partition_error: Callable[[str, int], None],
        consumer_groups: ConsumerGroupDriver | None = None,
    ) -> None:
        """`partition_error(rpc, code)` counts each per-partition error of OffsetCommit and
        TxnOffsetCommit answers (the node's metrics, `COUNTED_RPCS`)."""
        self.node_id = config.node_id
        self._partition_error = partition_error
        #: The consumer groups (KIP-848) among the groups, for their states in ListGroups.
        self.consumer_groups = consumer_groups
        self.authorization = authorization
        self.controller = controller
        self.offsets_topic = offsets_topic
        self.groups = groups
        self.forwarder = forwarder

    # ---- routing to the coordinator --------------------------------------------------------------

    async def coordinator_answer(
        self, method: str, group: str, request: Any, context: grpc.aio.ServicerContext,
        failed: Callable[[errors.TidelogError], Any] | None = None,
    ) -> Any | None:
        """None when this node answers for `group` (it coordinates the group, or the request
        was forwarded here); else the coordinator's answer (`forwarding.coordinator_answer`);
        `failed(error)` is the answer when there is none to forward to, by default this
        module's answer of `method` failing whole. The per-partition errors of such an answer
        of OffsetCommit or TxnOffsetCommit are counted here (`COUNTED_RPCS`)."""
        answer = await coordinator_answer(
            self.forwarder, self.offsets_topic, group, method, request, context,
            self.authorization.principal(context), failed or partial(_failed, method, request),
        )
        if answer is not None and method in COUNTED_RPCS:
            self._counted(method, answer)
        return answer

    def _group_refused(
        self, context: grpc.aio.ServicerContext, operation: Operation, group: str
    ) -> tuple[str, errors.AuthorizationError | None]:
        """The caller's principal, and the refusal of `operation` on `group` (None: allowed)."""
        principal = self.authorization.principal(context)
        return principal, self.authorization.refused(
            principal, operation, ResourceType.GROUP, group
        )

    def _topics_refused(
        self, principal: str, operation: Operation, tps: Iterable[TopicPartition]
    ) -> dict[str, errors.AuthorizationError]:
        return self.authorization.refusals(
            principal, operation, ResourceType.TOPIC, (tp.topic for tp in tps)
        )

    def _partition_count(self, topic: str) -> int:
        """Partitions of `topic` in the metadata image, 0 for a topic it does not have."""
        described = self.controller.image.topics.get(topic)
        return 0 if described is None else described.partition_count

    # ---- the RPCs --------------------------------------------------------------------------------

    @at_coordinator("OffsetCommit", "group_id")
    async def offset_commit(
        self, request: pb.OffsetCommitRequest, context: grpc.aio.ServicerContext
    ) -> pb.OffsetCommitResponse:
        principal, group_refused = self._group_refused(context, Operation.READ, request.group_id)
        if group_refused is not None:
            failed: pb.OffsetCommitResponse = _failed("OffsetCommit", request, group_refused)
            return self._counted("OffsetCommit", failed)
        return await self._commit(
            "OffsetCommit", principal, request, pb.OffsetCommitResponse(),
            partial(self.groups.commit, request.group_id),
        )

    @at_coordinator("TxnOffsetCommit", "group_id")
    async def txn_offset_commit(
        self, request: pb.TxnOffsetCommitRequest, context: grpc.aio.ServicerContext
    ) -> pb.TxnOffsetCommitResponse:
        """TxnOffsetCommit at the group's coordinator (kafka-mapping §8.5): WRITE on the
        transactional id (53), READ on the group (30) and on each topic (29), as Kafka."""
        principal = self.authorization.principal(context)
        refused: errors.TidelogError | None = self.authorization.refused(
            principal, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id
        )
        if refused is None:
            refused = self._group_refused(context, Operation.READ, request.group_id)[1]
        if refused is None and not request.transactional_id:
            refused = errors.InvalidRequestError("a TxnOffsetCommit needs its transactional id")
        if refused is None and (
            request.producer_id < 0 or not 0 <= request.producer_epoch <= MAX_PRODUCER_EPOCH
        ):
            refused = errors.InvalidRequestError(
                f"producer id {request.producer_id} epoch {request.producer_epoch}: an id >= 0 "
                f"and an epoch in [0, {MAX_PRODUCER_EPOCH}] are needed"
            )
        if refused is not None:
            failed: pb.TxnOffsetCommitResponse = _failed("TxnOffsetCommit", request, refused)
            return self._counted("TxnOffsetCommit", failed)
        return await self._commit(
            "TxnOffsetCommit", principal, request, pb.TxnOffsetCommitResponse(),
            partial(self.groups.txn_commit, request.group_id, request.producer_id,
                    request.producer_epoch),
        )

    def _counted(self, rpc: str, response: R) -> R:
        """`response` (an answer `_commit` did not build: forwarded, or failing whole) with its
        per-partition errors counted."""
        for topic in response.topics:
            for answer in topic.partitions:
                if answer.error_code:
                    self._partition_error(rpc, answer.error_code)
        return response

    async def _commit(
        self,
        rpc: str,
        principal: str,
        request: pb.OffsetCommitRequest | pb.TxnOffsetCommitRequest,
        response: R,
        commit: Callable[
            [int, list[CommitEntry], str], Awaitable[dict[TopicPartition, errors.TidelogError]]
        ],
    ) -> R:
        """The partitions of an OffsetCommit or TxnOffsetCommit checked as Kafka's API layer
        does, the valid ones committed with `commit(generation, entries, member id)`, and the
        answer of each in `response`, its errors counted for `rpc`'s metrics (the node does
        not walk the answer for them: a commit of many partitions is mostly all OK, and then
        nothing is counted at all).

        One pass over the request reads each partition into the commit's entry (no object per
        partition but that tuple); each topic is looked up and authorized once, not once per
        partition (a commit names many partitions of few topics: the offsets benchmark 100 of
        one). A `TopicPartition` is made only for a partition answered with an error."""
        topics = request.topics
        refused = self.authorization.refusals(
            principal, Operation.READ, ResourceType.TOPIC, (t.name for t in topics)
        )
        failed: dict[TopicPartition, errors.TidelogError] = {}
        entries: list[CommitEntry] = []
        #: Per topic, the partitions named so far; and those named more than once.
        named: dict[str, set[int]] = {}
        twice: set[TopicPartition] = set()
        new_tp = tuple.__new__
        for t in topics:
            topic = t.name
            refusal = refused.get(topic)
            count = self._partition_count(topic)
            seen = named.setdefault(topic, set())
            for p in t.partitions:
                partition = p.partition
                if partition in seen:
                    twice.add(new_tp(TopicPartition, (topic, partition)))
                    continue
                seen.add(partition)
                if refusal is not None:
                    failed[new_tp(TopicPartition, (topic, partition))] = refusal
                elif not 0 <= partition < count:
                    tp = new_tp(TopicPartition, (topic, partition))
                    failed[tp] = errors.UnknownTopicOrPartitionError(f"{tp} does not exist")
                else:
                    # Unset metadata (Kafka's null) reads as "", as Kafka stores it.
                    entries.append((
                        topic, partition, p.committed_offset,
                        p.committed_leader_epoch if p.HasField("committed_leader_epoch")
                        else _NO_LEADER_EPOCH,
                        p.committed_metadata,
                    ))
        if twice:
            for tp in twice:
                if tp.topic not in refused:
                    failed[tp] = errors.InvalidRequestError(f"{tp} appears more than once")
            entries = [e for e in entries if (e[0], e[1]) not in twice]
        if entries:
            generation = or_unset(request, "generation_id", _NO_GENERATION)
            try:
                failed.update(await commit(generation, entries, request.member_id))
            except errors.TidelogError as exc:
                failed.update({new_tp(TopicPartition, (topic, partition)): exc
                               for topic, partition, *_ in entries})
        # Each partition answered once, in the order first named.
        answers = Answers(response)
        count_error = self._partition_error
        answered: set[TopicPartition] = set()
        for t in topics:
            topic = t.name
            add = answers.add_to(topic)
            if not failed:  # all committed (so none named twice): nothing to look up
                for p in t.partitions:
                    add(partition=p.partition)
                continue
            for p in t.partitions:
                tp = new_tp(TopicPartition, (topic, p.partition))
                if twice:
                    if tp in answered:
                        continue
                    answered.add(tp)
                answer = add(partition=tp.partition)
                if (error := failed.get(tp)) is not None:
                    answer.error_code = error.code
                    answer.error_message = str(error)
                    count_error(rpc, error.code)
        return response

    @at_coordinator("OffsetFetch", "group_id")
    async def offset_fetch(
        self, request: pb.OffsetFetchRequest, context: grpc.aio.ServicerContext
    ) -> pb.OffsetFetchResponse:
        principal, group_refused = self._group_refused(
            context, Operation.DESCRIBE, request.group_id
        )
        if group_refused is not None:
            return error_answer(pb.OffsetFetchResponse, group_refused)
        named, twice = each_once(
            (TopicPartition(t.name, p), None) for t in request.topics for p in t.partitions
        )
        refused = self._topics_refused(principal, Operation.DESCRIBE, named)
        wanted = (
            [tp for tp in named if tp not in twice and tp.topic not in refused]
            if request.topics else None
        )
        response = pb.OffsetFetchResponse()
        try:
            found = await self.groups.fetch(
                request.group_id, wanted, request.require_stable, request.member_id,
                request.member_epoch if request.HasField("member_epoch") else -1,
            )
            # KIP-447: a partition whose transactional offsets await their marker is unstable.
            unstable = (
                self.groups.pending_txn_partitions(request.group_id)
                if request.require_stable else set()
            )
        except errors.TidelogError as exc:
            return error_answer(pb.OffsetFetchResponse, exc)
        if not request.topics:  # "all": the topics the caller may not describe are left out
            refused = self._topics_refused(principal, Operation.DESCRIBE, found)
            found = {tp: v for tp, v in found.items() if tp.topic not in refused}
        answers = Answers(response)
        for tp in named if request.topics else sorted(found):
            answer = answers.add(tp)
            value = found.get(tp)
            if (error := refused.get(tp.topic)) is not None:
                answer.error_code = error.code
                answer.committed_offset = answer.committed_leader_epoch = -1
                continue
            if tp in twice:
                answer.error_code = errors.InvalidRequestError.code
            elif tp in unstable:
                answer.error_code = errors.UnstableOffsetCommitError.code
                value = None
            if value is None:  # none committed (or asked twice): -1 and no error, as Kafka
                answer.committed_offset = answer.committed_leader_epoch = -1
            else:
                answer.committed_offset = value.offset
                answer.committed_leader_epoch = value.leader_epoch
                answer.metadata = value.metadata
        return response

    @at_coordinator("OffsetDelete", "group_id")
    async def offset_delete(
        self, request: pb.OffsetDeleteRequest, context: grpc.aio.ServicerContext
    ) -> pb.OffsetDeleteResponse:
        principal, group_refused = self._group_refused(context, Operation.DELETE, request.group_id)
        if group_refused is not None:
            return error_answer(pb.OffsetDeleteResponse, group_refused)
        named, twice = each_once(
            (TopicPartition(t.name, p), None) for t in request.topics for p in t.partitions
        )
        topics_refused = self._topics_refused(principal, Operation.READ, named)
        refused: dict[TopicPartition, errors.TidelogError] = {}
        for tp in named:
            if tp.topic in topics_refused:
                refused[tp] = topics_refused[tp.topic]
            elif tp in twice:
                refused[tp] = errors.InvalidRequestError(f"{tp} appears more than once")
            elif tp.topic not in self.controller.image.topics:  # Kafka checks the topic only
                refused[tp] = errors.UnknownTopicOrPartitionError(f"{tp.topic} does not exist")
        try:
            await self.groups.delete_offsets(
                request.group_id, [tp for tp in named if tp not in refused]
            )
        except errors.TidelogError as exc:
            return error_answer(pb.OffsetDeleteResponse, exc)
        response = pb.OffsetDeleteResponse()
        answers = Answers(response)
        for tp in named:
            answer = answers.add(tp)
            if (error := refused.get(tp)) is not None:
                answer.error_code = error.code
                answer.error_message = str(error)
        return response

    def list_groups(
        self, request: pb.ListGroupsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListGroupsResponse:
        """The groups this node coordinates (a client asks every node and merges the answers,
        as Kafka's admin client does); COORDINATOR_LOAD_IN_PROGRESS beside those it has while
        a partition it leads is still loading. Without DESCRIBE on the cluster, the groups
        the caller may not describe are left out."""
        groups, loading = self.groups.list_groups()
        principal = self.authorization.principal(context)
        if self.authorization.cluster_refused(principal, Operation.DESCRIBE) is not None:
            refused = self.authorization.refusals(
                principal, Operation.DESCRIBE, ResourceType.GROUP, (g for g, _ in groups)
            )
            groups = [(g, c) for g, c in groups if g not in refused]
        wanted = {state.lower() for state in request.states_filter}
        response = pb.ListGroupsResponse(
            error_code=errors.CoordinatorLoadInProgressError.code if loading else 0
        )
        states = self.consumer_groups.group_states() if self.consumer_groups else {}
        for group, coordinator in sorted(groups):
            state = states.get(group, _EMPTY)
            if not wanted or state.lower() in wanted:
                response.groups.add(group_id=group, group_state=state,
                                    protocol_type=PROTOCOL_TYPE if group in states else "",
                                    coordinator_id=coordinator)
        return response

    async def delete_groups(
        self, request: pb.DeleteGroupsRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteGroupsResponse:
        """Each group deleted by its coordinator: this node's own at once, the others'
        forwarded to theirs, one request per coordinator."""
        names, twice = each_once((name, name) for name in request.group_ids)
        results: dict[str, errors.TidelogError | None] = {
            name: errors.InvalidRequestError(f"group {name!r} appears more than once")
            for name in twice
        }
        results.update(self.authorization.refusals(
            self.authorization.principal(context), Operation.DELETE, ResourceType.GROUP,
            (name for name in names if name not in twice),
        ))
        here: list[str] = []
        elsewhere: dict[int, list[str]] = {}
        for name in names:
            if name in results:
                continue
            try:
                _, leader = self.offsets_topic.coordinator_of(name)
            except errors.TidelogError as exc:
                results[name] = exc
                continue
            if leader == self.node_id or was_forwarded(context):
                here.append(name)
            else:
                elsewhere.setdefault(leader, []).append(name)

        async def forward(leader: int, group_ids: list[str]) -> None:
            request = pb.DeleteGroupsRequest(group_ids=group_ids)
            forwarded = await self.coordinator_answer("DeleteGroups", group_ids[0], request,
                                                       context)
            if forwarded is None:  # the coordinator moved here meanwhile
                results.update(await self.groups.delete_groups(group_ids))
                return
            for result in forwarded.results:
                code = result.error_code
                results[result.group_id] = (
                    errors.for_code(code)(result.error_message) if code else None
                )

        async def delete_here() -> None:
            if here:
                results.update(await self.groups.delete_groups(here))

        await asyncio.gather(
            delete_here(), *(forward(leader, ids) for leader, ids in elsewhere.items())
        )
        response = pb.DeleteGroupsResponse()
        for name in names:
            error = results.get(name)
            response.results.add(
                group_id=name,
                error_code=error.code if error is not None else 0,
                error_message=str(error) if error is not None else "",
            )
        return response


def _failed(method: str, request: Any, exc: errors.TidelogError) -> Any:
    """The answer of a whole request that failed with `exc`: on every partition of a commit
    (Kafka's OffsetCommit has no group-level code), at the group level otherwise."""
    if method in ("OffsetCommit", "TxnOffsetCommit"):
        response = (
            pb.OffsetCommitResponse() if method == "OffsetCommit" else pb.TxnOffsetCommitResponse()
        )
        answers = Answers(response)
        for tp, _ in each_once(partitions_of(request.topics))[0].items():
            answer = answers.add(tp)
            answer.error_code = exc.code
            answer.error_message = str(exc)
        return response
    if method == "OffsetFetch":
        return error_answer(pb.OffsetFetchResponse, exc)
    if method == "OffsetDelete":
        return error_answer(pb.OffsetDeleteResponse, exc)
    response_d = pb.DeleteGroupsResponse()
    for name in dict.fromkeys(request.group_ids):
        response_d.results.add(group_id=name, error_code=exc.code, error_message=str(exc))
    return response_d
