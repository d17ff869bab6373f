"""Consumer groups with server-side assignment (Kafka's KIP-848 protocol): the state machine of
the groups of one `__consumer_offsets` partition.

Design (kafka-mapping §10; issue 15):

* State is records. A group is the six record types of `consumer_group_records` in its
  partition of the offsets topic: group epoch (3), subscription metadata (4), member metadata
  (5), target assignment epoch (6), a member's target (7), a member's current assignment (8).
  The state here changes only in `apply_record`, from committed records, exactly as the offset
  table does; a new coordinator replays them and has the same groups, epochs and assignments,
  so a coordinator failover does not restart a group. Planning works on a copy of one group:
  each record it emits is applied to the copy at once by the same code (`_apply`), so what a
  heartbeat answers is what the records will make of the group once committed.
* Epochs. The group epoch moves (+1) when a member joins, leaves or is fenced, changes its
  subscribed topics, or the subscribed topics' partition counts change (a topic created,
  deleted or grown is seen at the next heartbeat). When it is past the target assignment
  epoch, the next heartbeat runs the group's assignor and writes the new target (7s, then 6).
  A member's epoch reaches the target epoch only by reconciliation.
* Reconciliation (`reconcile`, Kafka's CurrentAssignmentBuilder). Per member: keep = assigned
  ∩ target, revoke = assigned − keep, add = target − keep − partitions another member still
  holds (assigned or pending revocation). While revoke is non-empty and the member still
  reports owning some of it, the member stays at its epoch with the rest assigned and revoke
  pending (UNREVOKED_PARTITIONS); only a heartbeat whose owned partitions leave them out
  releases them. So a partition moves to its new owner only after the previous owner revoked
  it, and no partition is ever held by two members (the property test checks it).
* Time is an argument. Session and rebalance deadlines are soft state, not records: set when a
  heartbeat is answered (`heartbeat_answered`), started afresh for every member when loading
  ends, and read by `expired(now_ms)`; the driver then fences what expired (`plan_fence`).
* Static members (`group.instance.id`): epoch -2 leaves for a while, keeping the member's
  assignment; a new member id with the same instance id takes it over (same partitions, same
  epochs, no group epoch bump) if the holder is away, else UNRELEASED_INSTANCE_ID (111).
* Classic members (JoinGroup/SyncGroup/Heartbeat/LeaveGroup, as Kafka 4 hosts them in consumer
  groups) are members of the same groups, assigned by the same assignor and reconciled by the
  same `reconcile`; only how they report and learn differs. A classic member reports what it
  owns only when it joins (its subscription's owned partitions; an eager client revoked
  everything before joining, so none), so its assignment moves only at its JoinGroup; between
  joins it counts as owning everything assigned to it. The generation is its member epoch,
  SyncGroup answers its current assignment, and Heartbeat writes nothing: it answers
  REBALANCE_IN_PROGRESS when the member must join again (the group epoch moved past it, it
  holds partitions to revoke, or partitions it waits for were released), and starts the
  rebalance timer by which it must. Revocation before handover holds for them as for the
  others, and a group may mix both kinds of member. A classic member's session timeout is its
  own (its JoinGroup's), kept in its member metadata record. A classic static member joining
  under a new member id (its instance restarted) replaces the holder of its instance id at
  once, keeping its partitions, as Kafka does.

No I/O, no clock, no threads: the node's driver
(`node/coordinators/consumer_group_driver.py`) holds those.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from tidelog.coordinator import consumer_group_records as rec
from tidelog.coordinator.assignors import ASSIGNORS, UNIFORM
from tidelog.coordinator.consumer_group_records import (
    LEFT_STATIC_EPOCH,
    STABLE,
    UNRELEASED_PARTITIONS,
    UNREVOKED_PARTITIONS,
    Assignment,
    CurrentAssignment,
    GroupKey,
    GroupValue,
    MemberMetadata,
)
from tidelog.errors import (
    FencedInstanceIdError,
    FencedMemberEpochError,
    GroupIdNotFoundError,
    GroupMaxSizeReachedError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidRequestError,
    NonEmptyGroupError,
    StaleMemberEpochError,
    UnknownMemberIdError,
    UnreleasedInstanceIdError,
    UnsupportedAssignorError,
)
from tidelog.records import RecordInput

log = logging.getLogger(__name__)

JOIN_EPOCH = 0
LEAVE_EPOCH = -1

#: Derived group states (ConsumerGroupDescribe, ListGroups), Kafka's names.
EMPTY = "Empty"
ASSIGNING = "Assigning"
RECONCILING = "Reconciling"
STABLE_GROUP = "Stable"
PROTOCOL_TYPE = "consumer"


@dataclass(frozen=True)
class ConsumerGroupConfig:
    """The node options of consumer groups (Kafka's names and defaults)."""

    session_timeout_ms: int = 45_000  # group.consumer.session.timeout.ms
    heartbeat_interval_ms: int = 5_000  # group.consumer.heartbeat.interval.ms
    max_size: int = 0x7FFF_FFFF  # group.consumer.max.size
    assignors: tuple[str, ...] = (UNIFORM, "range")  # group.consumer.assignors; first = default
    #: Tests only, a planted bug: a partition goes to its new owner before the previous owner
    #: revoked it, so the chaos checker can show it catches double ownership.
    test_grant_before_revoke: bool = False


#: The current assignment of a member that has just joined.
_JOINED = CurrentAssignment(0, 0, STABLE, {}, {})
_NO_METADATA = MemberMetadata(None, None, "", "", (), 0, None)
#: The longest string a record holds (an int16 length).
_MAX_STRING = 0x7FFF


class HeartbeatRequest(NamedTuple):
    """A ConsumerGroupHeartbeat; None (or -1 for the timeout) means unchanged."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topics: tuple[str, ...] | None = None
    server_assignor: str | None = None
    owned: Assignment | None = None
    client_id: str = ""
    client_host: str = ""
    #: A classic member's JoinGroup: its session timeout; None for ConsumerGroupHeartbeat.
    classic_session_timeout_ms: int | None = None
    #: A classic member's JoinGroup: its protocol names; None: not checked, kept as they were.
    classic_protocols: tuple[str, ...] | None = None


class HeartbeatResponse(NamedTuple):
    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    #: The complete set the member may own now; None = no change.
    assignment: Assignment | None


class HeartbeatPlan(NamedTuple):
    records: list[RecordInput]
    response: HeartbeatResponse


@dataclass
class Member:
    member_id: str
    metadata: MemberMetadata = _NO_METADATA
    current: CurrentAssignment = _JOINED

    @property
    def classic(self) -> bool:
        """A member speaking the classic protocol (JoinGroup/SyncGroup/Heartbeat)."""
        return self.metadata.classic_session_timeout_ms is not None

    @property
    def held(self) -> Iterable[tuple[str, int]]:
        """Every partition this member holds: assigned or pending revocation."""
        for parts in (self.current.assigned, self.current.pending_revocation):
            for topic, partitions in parts.items():
                for p in partitions:
                    yield topic, p


@dataclass
class Group:
    group_id: str
    epoch: int = 0
    assignment_epoch: int = 0
    subscription_metadata: dict[str, int] = field(default_factory=dict)
    members: dict[str, Member] = field(default_factory=dict)
    targets: dict[str, Assignment] = field(default_factory=dict)

    @property
    def state(self) -> str:
        if not self.members:
            return EMPTY
        if self.epoch > self.assignment_epoch:
            return ASSIGNING
        for member in self.members.values():
            current = member.current
            if current.member_epoch != self.assignment_epoch and \
                    current.member_epoch != LEFT_STATIC_EPOCH:
                return RECONCILING
            if current.state != STABLE:
                return RECONCILING
        return STABLE_GROUP

    def static_member(self, instance_id: str) -> Member | None:
        for member in self.members.values():
            if member.metadata.instance_id == instance_id:
                return member
        return None


class MemberDescription(NamedTuple):
    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topics: tuple[str, ...]
    assignment: Assignment
    target: Assignment


class GroupDescription(NamedTuple):
    group_id: str
    state: str
    epoch: int
    assignment_epoch: int
    assignor: str
    members: list[MemberDescription]


def _apply(groups: dict[str, Group], key: GroupKey, value: GroupValue | None) -> None:
    """One record into `groups`: the one place group state changes (replay and planning)."""
    group = groups.get(key.group)
    if group is None:
        if value is None:
            return
        group = groups[key.group] = Group(key.group)
    kind = key.record_type
    if kind == rec.GROUP_METADATA:
        if value is None:
            del groups[key.group]
            return
        assert isinstance(value, int)
        group.epoch = value
    elif kind == rec.PARTITION_METADATA:
        group.subscription_metadata = {} if value is None else dict(value)  # type: ignore[arg-type]
    elif kind == rec.TARGET_METADATA:
        assert value is None or isinstance(value, int)
        group.assignment_epoch = 0 if value is None else value
    elif kind == rec.TARGET_MEMBER:
        if value is None:
            group.targets.pop(key.member_id, None)
        else:
            group.targets[key.member_id] = value  # type: ignore[assignment]
    elif kind == rec.MEMBER_METADATA:
        if value is None:
            group.members.pop(key.member_id, None)
        else:
            assert isinstance(value, MemberMetadata)
            group.members.setdefault(key.member_id, Member(key.member_id)).metadata = value
    elif kind == rec.CURRENT_ASSIGNMENT:
        member = group.members.get(key.member_id)
        if value is None:
            if member is not None:
                member.current = _JOINED
        else:
            assert isinstance(value, CurrentAssignment)
            group.members.setdefault(key.member_id, Member(key.member_id)).current = value


class _Work:
    """A copy of one group that planning changes by emitting records."""

    def __init__(self, group: Group | None, group_id: str, now_ms: int) -> None:
        self.groups = {group_id: copy.deepcopy(group)} if group is not None else {}
        self.group_id = group_id
        self.records: list[RecordInput] = []
        self.now_ms = now_ms

    @property
    def group(self) -> Group:
        return self.groups.get(self.group_id) or Group(self.group_id)

    def emit(self, record_type: int, value: GroupValue | None, member_id: str = "") -> None:
        key = GroupKey(record_type, self.group_id, member_id)
        self.records.append(RecordInput(
            None if value is None else rec.encode_value(record_type, value),
            rec.encode_key(key),
            self.now_ms,
        ))
        _apply(self.groups, key, value)

    def bump_epoch(self) -> None:
        self.emit(rec.GROUP_METADATA, self.group.epoch + 1)

    def remove_member(self, member_id: str) -> None:
        """Kafka's order: current assignment, target, metadata; then the epoch moves."""
        self.emit(rec.CURRENT_ASSIGNMENT, None, member_id)
        self.emit(rec.TARGET_MEMBER, None, member_id)
        self.emit(rec.MEMBER_METADATA, None, member_id)


class ConsumerGroups:
    """The consumer groups of one `__consumer_offsets` partition."""

    def __init__(self, config: ConsumerGroupConfig) -> None:
        self.config = config
        self.groups: dict[str, Group] = {}
        #: (group, member) -> session deadline (ms); soft state, not records.
        self._sessions: dict[tuple[str, str], int] = {}
        #: (group, member) -> rebalance deadline (ms), while the member holds revoked partitions.
        self._rebalances: dict[tuple[str, str], int] = {}

    # ---- committed records ---------------------------------------------------------------------

    def apply_record(self, key_bytes: bytes, value_bytes: bytes | None) -> None:
        """A committed consumer-group record; raises `GroupRecordError` for a bad one (the
        caller logs and skips it)."""
        key = rec.decode_key(key_bytes)
        value = None if value_bytes is None else rec.decode_value(key.record_type, value_bytes)
        _apply(self.groups, key, value)

    def start_timers(self, now_ms: int) -> None:
        """Loading ended: every member gets a full session from now (Kafka does the same)."""
        self._sessions = {
            (g.group_id, m.member_id): now_ms + self._session_ms(m)
            for g in self.groups.values() for m in g.members.values()
        }
        self._rebalances.clear()

    # ---- heartbeats -----------------------------------------------------------------------------

    def plan_heartbeat(
        self, request: HeartbeatRequest, topics: Mapping[str, int], now_ms: int
    ) -> HeartbeatPlan:
        """The records a heartbeat writes and what it answers once they are committed; raises
        the request's error (nothing is written then). `topics`: every topic's partition count,
        from the metadata image."""
        self._validate(request)
        if request.member_epoch in (LEAVE_EPOCH, LEFT_STATIC_EPOCH):
            return self._plan_leave(request, now_ms)
        existing = self.groups.get(request.group_id)
        if existing is None and request.member_epoch != JOIN_EPOCH:
            raise GroupIdNotFoundError(f"group {request.group_id!r} does not exist")
        work = _Work(existing, request.group_id, now_ms)
        if existing is None:
            work.emit(rec.GROUP_METADATA, 0)
        group = work.group
        member = group.members.get(request.member_id)
        previous = member.current if member is not None else None
        full = request.member_epoch == JOIN_EPOCH or (
            request.rebalance_timeout_ms != -1 and request.subscribed_topics is not None
            and request.owned is not None
        )
        bump = False
        if request.member_epoch == JOIN_EPOCH:
            holder = (group.static_member(request.instance_id)
                      if request.instance_id is not None else None)
            if holder is not None and holder.current.member_epoch == LEFT_STATIC_EPOCH \
                    and holder.member_id == request.member_id:
                current = holder.current  # back under the same member id
                work.emit(rec.CURRENT_ASSIGNMENT, CurrentAssignment(
                    current.previous_member_epoch, current.previous_member_epoch, STABLE,
                    current.assigned, {}), request.member_id)
            elif holder is not None and holder.member_id != request.member_id:
                # A classic static member joining under a new member id is its instance
                # restarted: it replaces the holder at once, as Kafka does.
                if holder.current.member_epoch != LEFT_STATIC_EPOCH and not (
                    holder.classic and request.classic_session_timeout_ms is not None
                ):
                    raise UnreleasedInstanceIdError(
                        f"instance {request.instance_id!r} is held by member "
                        f"{holder.member_id!r}, which has not left"
                    )
                self._replace_static(work, holder, request.member_id)
                member = work.group.members[request.member_id]
                previous = None
            elif member is None:
                if len(group.members) >= self.config.max_size:
                    raise GroupMaxSizeReachedError(
                        f"group {request.group_id!r} has {len(group.members)} members, the "
                        f"most group.consumer.max.size allows"
                    )
                bump = True
            elif member.current != _JOINED:
                # A member joining again (after it lost its partitions, as one fenced by
                # its own client does; Kafka's KAFKA-19233): it holds nothing now.
                work.emit(rec.CURRENT_ASSIGNMENT, _JOINED, request.member_id)
        else:
            if member is None or member.classic != (
                request.classic_session_timeout_ms is not None
            ):
                raise UnknownMemberIdError(
                    f"member {request.member_id!r} is not in group {request.group_id!r}"
                    if member is None else
                    f"member {request.member_id!r} speaks the other group protocol"
                )
            self._check_epoch(member, request)
        group = work.group
        member = group.members.get(request.member_id)
        old_meta = member.metadata if member is not None else None
        meta = _merged_metadata(old_meta, request)
        if meta != old_meta:
            work.emit(rec.MEMBER_METADATA, meta, request.member_id)
            if old_meta is None or old_meta.subscribed_topics != meta.subscribed_topics:
                bump = True
        group = work.group
        subscribed = {t for m in group.members.values() for t in m.metadata.subscribed_topics}
        metadata = {t: topics[t] for t in sorted(subscribed) if t in topics}
        if metadata != group.subscription_metadata:
            work.emit(rec.PARTITION_METADATA, metadata)
            bump = True
        if bump:
            work.bump_epoch()
        self._maybe_assign(work)
        group = work.group
        member = group.members[request.member_id]
        current = reconcile(
            member.current,
            group.assignment_epoch,
            group.targets.get(request.member_id, {}),
            request.owned,
            _nobody if self.config.test_grant_before_revoke
            else _holders(group, request.member_id),
        )
        if current != member.current:
            work.emit(rec.CURRENT_ASSIGNMENT, current, request.member_id)
        # Also whenever the member reports owning something else than it is assigned: the
        # answer that told it may have been lost (a timeout after the records committed), and
        # without it a member that must revoke never would.
        changed = previous is None or previous.assigned != current.assigned or (
            request.owned is not None and request.owned != current.assigned
        )
        return HeartbeatPlan(work.records, HeartbeatResponse(
            request.member_id,
            current.member_epoch,
            self._interval_for(current),
            dict(current.assigned) if full or changed else None,
        ))

    def _interval_for(self, current: CurrentAssignment) -> int:
        """The heartbeat interval a member is given: the configured one, or a quarter of it
        while the member waits for partitions other members still have to release
        (UNRELEASED_PARTITIONS), so that it learns of their release sooner and a rebalance
        takes about one interval after the owners learnt of it, not two. (Kafka always
        answers the configured interval; the field is the coordinator's to choose, and only
        members in the middle of a rebalance heartbeat faster.)"""
        interval = self.config.heartbeat_interval_ms
        if current.state == UNRELEASED_PARTITIONS:
            return max(interval // 4, 1)
        return interval

    def _validate(self, request: HeartbeatRequest) -> None:
        def bad(why: str) -> InvalidRequestError:
            return InvalidRequestError(f"ConsumerGroupHeartbeat: {why}")

        if not request.group_id:
            raise bad("the group id is empty")
        if request.instance_id == "" or request.rack_id == "":
            raise bad("an instance or rack id is empty (null means unchanged)")
        epoch = request.member_epoch
        if epoch == JOIN_EPOCH:
            if request.rebalance_timeout_ms == -1:
                raise bad("joining needs a rebalance timeout")
            if request.owned:
                raise bad("joining owns no partitions")
            if not request.subscribed_topics:
                raise bad("joining needs subscribed topics")
        elif epoch == LEFT_STATIC_EPOCH and request.instance_id is None:
            raise bad("epoch -2 is for static members: it needs an instance id")
        elif epoch < LEFT_STATIC_EPOCH:
            raise bad(f"member epoch {epoch}")
        if not request.member_id:
            raise bad("the member id is empty")
        if request.rebalance_timeout_ms < -1:
            raise bad(f"rebalance timeout {request.rebalance_timeout_ms}")
        if request.server_assignor is not None and \
                request.server_assignor not in self.config.assignors:
            raise UnsupportedAssignorError(
                f"assignor {request.server_assignor!r}; this node has {self.config.assignors}"
            )
        for topic in request.subscribed_topics or ():
            if not topic or len(topic.encode()) > _MAX_STRING:
                raise bad(f"subscribed topic {topic!r}")
        for what, text in (("group id", request.group_id), ("member id", request.member_id),
                           ("instance id", request.instance_id), ("rack id", request.rack_id),
                           ("assignor", request.server_assignor),
                           ("client id", request.client_id),
                           ("client host", request.client_host)):
            if text is not None and len(text.encode()) > _MAX_STRING:
                raise bad(f"the {what} is longer than {_MAX_STRING} bytes of UTF-8")

    def _check_epoch(self, member: Member, request: HeartbeatRequest) -> None:
        """Kafka's throwIfMemberEpochIsInvalid: a newer epoch than the member's, or an older
        one that is not the previous epoch with its partitions a subset of what the member
        has (the answer that moved it on was lost), is fenced."""
        current = member.current
        received = request.member_epoch
        if received == current.member_epoch:
            return
        if received < current.member_epoch and received == current.previous_member_epoch \
                and request.owned is not None and _subset(request.owned, current.assigned):
            return
        raise FencedMemberEpochError(
            f"member {member.member_id!r} sent epoch {received}; its epoch is "
            f"{current.member_epoch}"
        )

    def _replace_static(self, work: _Work, holder: Member, member_id: str) -> None:
        """The new incarnation of a static member takes over the holder's subscription,
        target and assigned partitions, at the epoch the holder had (before it left, for one
        away); the group epoch stays (nothing moves)."""
        group = work.group
        target = group.targets.get(holder.member_id)
        current = holder.current
        epoch = current.previous_member_epoch if current.member_epoch == LEFT_STATIC_EPOCH \
            else current.member_epoch
        work.remove_member(holder.member_id)
        work.emit(rec.MEMBER_METADATA, holder.metadata, member_id)
        if target is not None:
            work.emit(rec.TARGET_MEMBER, target, member_id)
        work.emit(rec.CURRENT_ASSIGNMENT, CurrentAssignment(
            epoch, epoch, STABLE, current.assigned, {}), member_id)

    def _maybe_assign(self, work: _Work) -> None:
        """A new target when the group epoch is past the assignment epoch."""
        group = work.group
        if group.epoch <= group.assignment_epoch:
            return
        subscriptions = {
            m.member_id: m.metadata.subscribed_topics for m in group.members.values()
        }
        assignor = ASSIGNORS[self.assignor_of(group)]
        targets = assignor(subscriptions, group.subscription_metadata, group.targets)
        for member_id in sorted(targets):
            if targets[member_id] != group.targets.get(member_id, {}) or \
                    member_id not in group.targets:
                work.emit(rec.TARGET_MEMBER, targets[member_id], member_id)
        work.emit(rec.TARGET_METADATA, group.epoch)

    def assignor_of(self, group: Group) -> str:
        """The assignor most members ask for (ties: the first configured), else the default."""
        wanted: dict[str, int] = {}
        for member in group.members.values():
            name = member.metadata.server_assignor
            if name is not None and name in self.config.assignors:
                wanted[name] = wanted.get(name, 0) + 1
        if not wanted:
            return self.config.assignors[0]
        return max(self.config.assignors, key=lambda a: wanted.get(a, 0))

    def _plan_leave(self, request: HeartbeatRequest, now_ms: int) -> HeartbeatPlan:
        group = self.groups.get(request.group_id)
        if group is None:
            raise GroupIdNotFoundError(f"group {request.group_id!r} does not exist")
        work = _Work(group, request.group_id, now_ms)
        member = group.members.get(request.member_id)
        if request.instance_id is not None:
            holder = group.static_member(request.instance_id)
            if holder is None:
                raise UnknownMemberIdError(f"no member has instance id {request.instance_id!r}")
            if holder.member_id != request.member_id:
                raise FencedInstanceIdError(
                    f"instance {request.instance_id!r} belongs to member {holder.member_id!r}"
                )
        if member is None:
            raise UnknownMemberIdError(
                f"member {request.member_id!r} is not in group {request.group_id!r}"
            )
        if request.member_epoch == LEFT_STATIC_EPOCH:
            current = member.current
            work.emit(rec.CURRENT_ASSIGNMENT, CurrentAssignment(
                LEFT_STATIC_EPOCH, current.member_epoch, STABLE, current.assigned, {}),
                request.member_id)
        else:
            self._plan_removal(work, request.member_id)
        return HeartbeatPlan(work.records, HeartbeatResponse(
            request.member_id, request.member_epoch, self.config.heartbeat_interval_ms, None))

    def _plan_removal(self, work: _Work, member_id: str) -> None:
        work.remove_member(member_id)
        group = work.group
        subscribed = {t for m in group.members.values() for t in m.metadata.subscribed_topics}
        metadata = {t: n for t, n in group.subscription_metadata.items() if t in subscribed}
        if metadata != group.subscription_metadata:
            work.emit(rec.PARTITION_METADATA, metadata)
        work.bump_epoch()

    # ---- classic members (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) --------------------------

    def plan_classic_join(
        self, request: HeartbeatRequest, topics: Mapping[str, int], now_ms: int
    ) -> HeartbeatPlan:
        """A classic member's JoinGroup (Kafka's classicGroupJoinToConsumerGroup), planned as
        the heartbeat of a member that reports its subscription and what it owns: a new member
        joins (epoch 0); a known one is reconciled with `request.owned` (its subscription's
        owned partitions; {} when it lists none, as an eager client that revoked everything
        before joining). `request.member_epoch` is not read; the answer's member epoch is the
        generation. Raises the request's error; nothing is written then."""
        if request.classic_session_timeout_ms is None or request.classic_session_timeout_ms <= 0:
            raise InvalidRequestError(
                f"JoinGroup: session timeout {request.classic_session_timeout_ms}"
            )
        group = self.groups.get(request.group_id)
        if group is not None and request.classic_protocols is not None:
            _check_classic_protocols(group, request.member_id, request.classic_protocols)
        member = group.members.get(request.member_id) if group is not None else None
        if member is None:
            request = request._replace(member_epoch=JOIN_EPOCH, owned=None)
        else:
            request = request._replace(member_epoch=member.current.member_epoch,
                                       owned=request.owned or {})
        return self.plan_heartbeat(request, topics, now_ms)

    def _classic_member(self, group_id: str, member_id: str, generation: int) -> Member:
        """The classic member a SyncGroup or Heartbeat names, at `generation`; raises
        UNKNOWN_MEMBER_ID (no such classic member) or ILLEGAL_GENERATION."""
        group = self.groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        if member is None or not member.classic:
            raise UnknownMemberIdError(
                f"group {group_id!r} has no classic member {member_id!r}"
            )
        if generation != member.current.member_epoch:
            raise IllegalGenerationError(
                f"member {member_id!r} sent generation {generation}; its epoch is "
                f"{member.current.member_epoch}"
            )
        return member

    def classic_assignment(
        self, group_id: str, member_id: str, generation: int, now_ms: int
    ) -> Assignment:
        """A classic member's SyncGroup: what it is assigned now (its current assignment,
        which moved at its JoinGroup); its session starts again."""
        member = self._classic_member(group_id, member_id, generation)
        self.heartbeat_answered(group_id, member_id, now_ms)
        return dict(member.current.assigned)

    def classic_heartbeat(
        self, group_id: str, member_id: str, generation: int, now_ms: int
    ) -> bool:
        """A classic member's Heartbeat (writes nothing); True when it must join again
        (REBALANCE_IN_PROGRESS): the group epoch moved past its epoch, it holds partitions to
        revoke, or partitions it waits for are free now. Its session starts again; when it
        must join, its rebalance timer starts too, and a member that does not join before it
        runs out is fenced (Kafka's join timeout)."""
        member = self._classic_member(group_id, member_id, generation)
        group = self.groups[group_id]
        current = member.current
        rejoin = current.member_epoch < group.epoch or current.state == UNREVOKED_PARTITIONS
        if not rejoin and current.state == UNRELEASED_PARTITIONS:
            holder = _holders(group, member_id)
            rejoin = any(
                p not in current.assigned.get(topic, ()) and holder(topic, p) is None
                for topic, partitions in group.targets.get(member_id, {}).items()
                for p in partitions
            )
        self.heartbeat_answered(group_id, member_id, now_ms)
        if rejoin:
            self._rebalances.setdefault(
                (group_id, member_id), now_ms + member.metadata.rebalance_timeout_ms
            )
        return rejoin

    def plan_classic_leave(
        self, group_id: str, member_id: str, instance_id: str | None, now_ms: int
    ) -> list[RecordInput]:
        """A classic member's LeaveGroup (named by member id, or by instance id alone when
        the member id is empty): its records removed and the group epoch bumped, so its
        partitions go to the others. UNKNOWN_MEMBER_ID for no such classic member,
        FENCED_INSTANCE_ID when the instance id belongs to another member."""
        group = self.groups.get(group_id)
        if group is None:
            raise UnknownMemberIdError(f"group {group_id!r} has no members")
        if instance_id is not None:
            holder = group.static_member(instance_id)
            if holder is None:
                raise UnknownMemberIdError(f"no member has instance id {instance_id!r}")
            if member_id and holder.member_id != member_id:
                raise FencedInstanceIdError(
                    f"instance {instance_id!r} belongs to member {holder.member_id!r}"
                )
            member_id = holder.member_id
        member = group.members.get(member_id)
        if member is None or not member.classic:
            raise UnknownMemberIdError(f"group {group_id!r} has no classic member {member_id!r}")
        return self.plan_fence(group_id, member_id, now_ms)

    def _session_ms(self, member: Member) -> int:
        """A classic member's own session timeout, else the coordinator's."""
        own = member.metadata.classic_session_timeout_ms
        return self.config.session_timeout_ms if own is None else own

    def heartbeat_answered(self, group_id: str, member_id: str, now_ms: int) -> None:
        """A heartbeat's records are committed and it was answered: the member's session
        starts again, and its rebalance timer runs while it holds partitions to revoke."""
        key = (group_id, member_id)
        group = self.groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        if member is None:
            self._sessions.pop(key, None)
            self._rebalances.pop(key, None)
            return
        self._sessions[key] = now_ms + self._session_ms(member)
        if member.current.state == UNREVOKED_PARTITIONS:
            self._rebalances.setdefault(key, now_ms + member.metadata.rebalance_timeout_ms)
        else:
            self._rebalances.pop(key, None)

    def expired(self, now_ms: int) -> list[tuple[str, str, str]]:
        """(group, member, why) of every member whose session or rebalance timeout ran out."""
        out: list[tuple[str, str, str]] = []
        for group in self.groups.values():
            for member_id, member in group.members.items():
                key = (group.group_id, member_id)
                deadline = self._sessions.setdefault(key, now_ms + self._session_ms(member))
                if now_ms >= deadline:
                    out.append((group.group_id, member_id, "session timeout"))
                elif now_ms >= self._rebalances.get(key, now_ms + 1):
                    out.append((group.group_id, member_id, "rebalance timeout"))
        return out

    def plan_fence(self, group_id: str, member_id: str, now_ms: int) -> list[RecordInput]:
        """Remove a member whose session or rebalance timeout expired; [] if it is gone."""
        group = self.groups.get(group_id)
        if group is None or member_id not in group.members:
            return []
        work = _Work(group, group_id, now_ms)
        self._plan_removal(work, member_id)
        self._sessions.pop((group_id, member_id), None)
        self._rebalances.pop((group_id, member_id), None)
        return work.records

    # ---- offsets, describe, delete -----------------------------------------------------------

    def validate_offset_commit(self, group_id: str, member_id: str, member_epoch: int) -> bool:
        """Kafka's ConsumerGroup.validateOffsetCommit: False when `group_id` is no consumer
        group (the caller's simple-group rules apply); raises UNKNOWN_MEMBER_ID or
        STALE_MEMBER_EPOCH for a commit the group refuses."""
        group = self.groups.get(group_id)
        if group is None:
            return False
        if member_epoch < 0 and not group.members:
            return True
        _check_member_epoch(group, member_id, member_epoch, "committed")
        return True

    def validate_offset_fetch(self, group_id: str, member_id: str, member_epoch: int) -> None:
        """Kafka's ConsumerGroup.validateOffsetFetch (OffsetFetch v9): a fetch without a
        member id and with a negative epoch (an admin client, a consumer outside the group) is
        not checked, nor is one of a group that is no consumer group (a classic or simple
        group's fetch carries no member epoch); else UNKNOWN_MEMBER_ID or STALE_MEMBER_EPOCH as
        for a commit, so that a member fenced or behind does not read offsets as if it still
        owned its partitions."""
        group = self.groups.get(group_id)
        if group is None or (not member_id and member_epoch < 0):
            return
        _check_member_epoch(group, member_id, member_epoch, "fetched offsets")

    def describe(self, group_id: str) -> GroupDescription | None:
        group = self.groups.get(group_id)
        if group is None:
            return None
        return GroupDescription(
            group_id, group.state, group.epoch, group.assignment_epoch, self.assignor_of(group),
            [
                MemberDescription(
                    m.member_id, m.metadata.instance_id, m.metadata.rack_id,
                    m.current.member_epoch, m.metadata.client_id, m.metadata.client_host,
                    m.metadata.subscribed_topics, dict(m.current.assigned),
                    dict(group.targets.get(m.member_id, {})),
                )
                for m in sorted(group.members.values(), key=lambda m: m.member_id)
            ],
        )

    def plan_delete(self, group_id: str, now_ms: int) -> list[RecordInput] | None:
        """Tombstones of an empty group's records; None when it is not a consumer group;
        NON_EMPTY_GROUP while it has members."""
        group = self.groups.get(group_id)
        if group is None:
            return None
        if group.members:
            raise NonEmptyGroupError(f"group {group_id!r} has {len(group.members)} members")
        work = _Work(group, group_id, now_ms)
        work.emit(rec.TARGET_METADATA, None)
        work.emit(rec.PARTITION_METADATA, None)
        work.emit(rec.GROUP_METADATA, None)
        return work.records



def _check_member_epoch(group: Group, member_id: str, member_epoch: int,
                        what: str) -> None:
    """UNKNOWN_MEMBER_ID for a member the group does not have, STALE_MEMBER_EPOCH for an
    epoch that is not the member's current one (older or newer); ILLEGAL_GENERATION instead
    for a classic member, whose clients know that code (their generation is the epoch)."""
    member = group.members.get(member_id)
    if member is None:
        raise UnknownMemberIdError(f"member {member_id!r} is not in group {group.group_id!r}")
    if member_epoch != member.current.member_epoch:
        if member.classic:
            raise IllegalGenerationError(
                f"classic member {member_id!r} {what} with generation {member_epoch}; its "
                f"epoch is {member.current.member_epoch}"
            )
        raise StaleMemberEpochError(
            f"member {member_id!r} {what} with epoch {member_epoch}; its epoch is "
            f"{member.current.member_epoch}"
        )

def reconcile(
    current: CurrentAssignment,
    target_epoch: int,
    target: Assignment,
    owned: Assignment | None,
    holders: Callable[[str, int], str | None],
) -> CurrentAssignment:
    """The member's next current assignment (Kafka's CurrentAssignmentBuilder). `owned` is
    what the member reports owning (None: unchanged, which counts as still owning everything);
    `holders(topic, partition)` names another member holding it, if any."""
    if current.member_epoch == LEFT_STATIC_EPOCH:
        return current
    if current.state == UNREVOKED_PARTITIONS:
        if owned is None or _overlaps(owned, current.pending_revocation):
            return current
        current = current._replace(pending_revocation={})
    elif current.member_epoch == target_epoch and current.state == STABLE:
        return current
    keep: dict[str, set[int]] = {}
    revoke: dict[str, set[int]] = {}
    for topic, partitions in current.assigned.items():
        wanted = set(target.get(topic, ()))
        for p in partitions:
            (keep if p in wanted else revoke).setdefault(topic, set()).add(p)
    if revoke and (owned is None or _overlaps(owned, _frozen(revoke))):
        return CurrentAssignment(current.member_epoch, current.previous_member_epoch,
                                 UNREVOKED_PARTITIONS, _frozen(keep), _frozen(revoke))
    unreleased = False
    assigned = {t: set(ps) for t, ps in keep.items()}
    for topic, partitions in target.items():
        for p in partitions:
            if p in keep.get(topic, ()):
                continue
            if holders(topic, p) is not None:
                unreleased = True
            else:
                assigned.setdefault(topic, set()).add(p)
    previous = current.member_epoch if current.member_epoch != target_epoch \
        else current.previous_member_epoch
    return CurrentAssignment(target_epoch, previous,
                             UNRELEASED_PARTITIONS if unreleased else STABLE,
                             _frozen(assigned), {})


def _holders(group: Group, member_id: str) -> Callable[[str, int], str | None]:
    held: dict[tuple[str, int], str] = {}
    for other in group.members.values():
        if other.member_id != member_id:
            for tp in other.held:
                held[tp] = other.member_id
    return lambda topic, p: held.get((topic, p))


def _nobody(topic: str, partition: int) -> None:
    return None


def _check_classic_protocols(group: Group, member_id: str, names: tuple[str, ...]) -> None:
    """A classic member joins only with a protocol name every other classic member of the
    group supports (Kafka's check for classic members of a consumer group): a group's
    classic members can then all run the same assignor's client side. Members speaking
    ConsumerGroupHeartbeat, and classic ones whose names are not known, do not constrain."""
    common = set(names)
    for other in group.members.values():
        if other.member_id != member_id and other.metadata.classic_protocols:
            common &= set(other.metadata.classic_protocols)
    if not common:
        raise InconsistentGroupProtocolError(
            f"member {member_id!r} names the protocols {', '.join(names) or 'none'}; the "
            f"classic members of group {group.group_id!r} share none of them"
        )


def _frozen(parts: Mapping[str, Iterable[int]]) -> Assignment:
    return {t: tuple(sorted(ps)) for t, ps in sorted(parts.items()) if ps}


def _overlaps(a: Assignment, b: Assignment) -> bool:
    return any(set(a.get(t, ())) & set(ps) for t, ps in b.items())


def _subset(a: Assignment, b: Assignment) -> bool:
    return all(set(ps) <= set(b.get(t, ())) for t, ps in a.items())


def _merged_metadata(old: MemberMetadata | None, request: HeartbeatRequest) -> MemberMetadata:
    base = old or _NO_METADATA
    return MemberMetadata(
        request.instance_id if request.instance_id is not None else base.instance_id,
        request.rack_id if request.rack_id is not None else base.rack_id,
        request.client_id or base.client_id,
        request.client_host or base.client_host,
        tuple(sorted(set(request.subscribed_topics)))
        if request.subscribed_topics is not None else base.subscribed_topics,
        request.rebalance_timeout_ms if request.rebalance_timeout_ms != -1
        else base.rebalance_timeout_ms,
        request.server_assignor if request.server_assignor is not None
        else base.server_assignor,
        request.classic_session_timeout_ms if request.classic_session_timeout_ms is not None
        else base.classic_session_timeout_ms,
        request.classic_protocols if request.classic_protocols is not None
        else base.classic_protocols,
    )

