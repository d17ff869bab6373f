"""The consumer-group state machine (KIP-848): joins, epochs, assignors, incremental
reconciliation, timeouts, static members, error codes, and the records that survive failover.

Every plan's records are applied as the log would commit them (through the offsets partition's
own `GroupCoordinatorState.apply`), so the state under test is always the one replay builds."""

from __future__ import annotations

import contextlib
import random
import struct

import pytest

from tidelog import errors
from tidelog.coordinator import consumer_group_records as rec
from tidelog.coordinator.assignors import range_assign, uniform_assign
from tidelog.coordinator.consumer_groups import (
    ConsumerGroupConfig,
    HeartbeatRequest,
    HeartbeatResponse,
)
from tidelog.coordinator.group_coordinator import (
    GroupCoordinatorState,
    OffsetsConfig,
)
from tidelog.records import RecordInput, build_batch

SESSION_MS = 1000
TOPICS = {"t": 6}


class Cluster:
    """One offsets partition: plans are appended as batches and applied, as the driver does."""

    def __init__(self, topics: dict[str, int] | None = None, **config: object) -> None:
        self.config = ConsumerGroupConfig(session_timeout_ms=SESSION_MS, heartbeat_interval_ms=100,
                                          **config)  # type: ignore[arg-type]
        self.state = GroupCoordinatorState(OffsetsConfig(), self.config)
        self.topics = dict(topics or TOPICS)
        self.now = 0
        self.log: list[bytes] = []
        self.offset = 0

    @property
    def groups(self):  # type: ignore[no-untyped-def]
        return self.state.consumer_groups

    def commit(self, records: list[RecordInput]) -> None:
        if not records:
            return
        batch = bytearray(build_batch(records))
        struct.pack_into(">q", batch, 0, self.offset)
        self.offset += len(records)
        self.log.append(bytes(batch))
        self.state.apply(bytes(batch))

    def heartbeat(self, request: HeartbeatRequest) -> HeartbeatResponse:
        plan = self.groups.plan_heartbeat(request, self.topics, self.now)
        self.commit(plan.records)
        self.groups.heartbeat_answered(request.group_id, request.member_id, self.now)
        return plan.response

    def reloaded(self) -> GroupCoordinatorState:
        state = GroupCoordinatorState(OffsetsConfig(), self.config)
        for batch in self.log:
            state.apply(batch)
        state.finish_loading(self.now)
        return state


class Client:
    """A member that behaves as the protocol asks: it owns what the last answer assigned and
    reports it in every heartbeat."""

    def __init__(self, cluster: Cluster, member_id: str, topics: tuple[str, ...] = ("t",),
                 instance_id: str | None = None, group: str = "g") -> None:
        self.cluster = cluster
        self.member_id = member_id
        self.topics = topics
        self.instance_id = instance_id
        self.group = group
        self.epoch = 0
        self.owned: rec.Assignment = {}

    def beat(self, **changes: object) -> HeartbeatResponse:
        joining = self.epoch == 0
        request = HeartbeatRequest(
            self.group, self.member_id, self.epoch, instance_id=self.instance_id,
            rebalance_timeout_ms=5000 if joining else -1,
            subscribed_topics=self.topics if joining else None,
            owned=dict(self.owned),
        )._replace(**changes)
        response = self.cluster.heartbeat(request)
        self.epoch = response.member_epoch
        if response.assignment is not None:
            self.owned = response.assignment
        return response

    def leave(self, epoch: int = -1) -> HeartbeatResponse:
        response = self.cluster.heartbeat(HeartbeatRequest(
            self.group, self.member_id, epoch, instance_id=self.instance_id))
        self.owned = {}
        return response

    @property
    def count(self) -> int:
        return sum(len(ps) for ps in self.owned.values())


def settle(clients: list[Client], rounds: int = 10) -> None:
    for _ in range(rounds):
        for client in clients:
            client.beat()
        check_disjoint(clients)


def check_disjoint(clients: list[Client]) -> None:
    seen: dict[tuple[str, int], str] = {}
    for client in clients:
        for topic, partitions in client.owned.items():
            for p in partitions:
                assert (topic, p) not in seen, (topic, p, seen[(topic, p)], client.member_id)
                seen[(topic, p)] = client.member_id


def held_disjoint(cluster: Cluster, group: str = "g") -> None:
    seen: set[tuple[str, int]] = set()
    for member in cluster.groups.groups[group].members.values():
        for tp in member.held:
            assert tp not in seen, tp
            seen.add(tp)


def test_three_members_share_six_partitions_and_epochs_follow_kip848() -> None:
    cluster = Cluster()
    a = Client(cluster, "a")
    first = a.beat()
    assert first.member_epoch == 1 and first.assignment == {"t": (0, 1, 2, 3, 4, 5)}
    assert first.heartbeat_interval_ms == 100
    b, c = Client(cluster, "b"), Client(cluster, "c")
    clients = [a, b, c]
    settle(clients)
    assert [x.count for x in clients] == [2, 2, 2]
    group = cluster.groups.groups["g"]
    assert group.epoch == 3 and group.assignment_epoch == 3
    assert {x.epoch for x in clients} == {3}
    assert group.state == "Stable"
    description = cluster.groups.describe("g")
    assert description is not None and description.assignor == "uniform"
    assert [m.member_epoch for m in description.members] == [3, 3, 3]


def test_a_fourth_member_gets_partitions_only_after_their_owners_revoked_them() -> None:
    cluster = Cluster(topics={"t": 12})
    clients = [Client(cluster, m) for m in "abc"]
    settle(clients)
    before = {c.member_id: dict(c.owned) for c in clients}
    d = Client(cluster, "d")
    joined = d.beat()
    # Every partition is still held by a, b or c: d gets nothing yet and waits.
    assert joined.assignment == {} and joined.member_epoch == 4
    assert joined.heartbeat_interval_ms == 25  # waiting for releases: a quarter interval
    assert cluster.groups.groups["g"].members["d"].current.state == rec.UNRELEASED_PARTITIONS
    a = clients[0]
    revoking = a.beat()  # a learns its new target: it must give one up, at its old epoch
    assert revoking.member_epoch == 3 and a.count == 3
    assert cluster.groups.groups["g"].members["a"].current.state == rec.UNREVOKED_PARTITIONS
    # An answer that loses the client's owned list (None) does not count as a revocation.
    assert cluster.heartbeat(HeartbeatRequest("g", "a", 3)).member_epoch == 3
    a.beat()  # the acknowledgement: a no longer reports the revoked partition
    assert a.epoch == 4
    settle([*clients, d])
    assert sorted(c.count for c in [*clients, d]) == [3, 3, 3, 3]
    # Sticky: every old member kept 3 of its 4 partitions.
    for client in clients:
        kept = set(client.owned["t"]) & set(before[client.member_id]["t"])
        assert len(kept) == 3


def test_leave_and_session_timeout_release_partitions() -> None:
    cluster = Cluster()
    a, b, c = (Client(cluster, m) for m in "abc")
    settle([a, b, c])
    assert c.leave().member_epoch == -1
    settle([a, b])
    assert a.count + b.count == 6
    # b goes silent: after the session timeout it is fenced, and a gets everything.
    cluster.now += SESSION_MS - 1
    a.beat()
    assert cluster.groups.expired(cluster.now) == []
    cluster.now += 1
    assert cluster.groups.expired(cluster.now) == [("g", "b", "session timeout")]
    cluster.commit(cluster.groups.plan_fence("g", "b", cluster.now))
    assert cluster.groups.plan_fence("g", "b", cluster.now) == []
    settle([a])
    assert a.count == 6
    with pytest.raises(errors.UnknownMemberIdError):
        b.beat()


def test_a_member_that_does_not_revoke_within_the_rebalance_timeout_is_fenced() -> None:
    cluster = Cluster()
    a = Client(cluster, "a")
    a.beat(rebalance_timeout_ms=300)
    Client(cluster, "b").beat()
    cluster.now += 10
    cluster.heartbeat(HeartbeatRequest("g", "a", a.epoch))  # never acknowledges
    assert cluster.groups.expired(cluster.now + 299) == []
    assert cluster.groups.expired(cluster.now + 300) == [("g", "a", "rebalance timeout")]


def test_error_codes() -> None:
    cluster = Cluster(max_size=2)
    a = Client(cluster, "a")
    a.beat()
    with pytest.raises(errors.FencedMemberEpochError):
        a.beat(member_epoch=a.epoch + 1)
    with pytest.raises(errors.UnknownMemberIdError):
        Client(cluster, "zz").beat(member_epoch=1)
    with pytest.raises(errors.GroupIdNotFoundError):
        Client(cluster, "a", group="other").beat(member_epoch=1)
    with pytest.raises(errors.UnsupportedAssignorError):
        Client(cluster, "b").beat(server_assignor="sticky")
    Client(cluster, "s", instance_id="i1").beat()
    with pytest.raises(errors.UnreleasedInstanceIdError):
        Client(cluster, "s2", instance_id="i1").beat()
    with pytest.raises(errors.GroupMaxSizeReachedError):
        Client(cluster, "c").beat()
    with pytest.raises(errors.FencedInstanceIdError):
        Client(cluster, "a", instance_id="i1").leave()
    for bad in (
        {"group_id": ""}, {"member_id": ""}, {"instance_id": ""},
        {"subscribed_topics": ()}, {"rebalance_timeout_ms": -1}, {"owned": {"t": (1,)}},
        {"member_epoch": -3}, {"group_id": "g" * 40_000}, {"member_id": "m" * 40_000},
        {"subscribed_topics": ("t" * 40_000,)},
    ):
        with pytest.raises(errors.InvalidRequestError):
            Client(cluster, "n").beat(**bad)
    # A lost answer: the previous epoch with owned partitions it still has is accepted.
    b = Client(cluster, "a")
    b.epoch, b.owned = a.epoch, a.owned
    cluster.heartbeat(HeartbeatRequest("g", "a", a.epoch, owned=a.owned))


def test_offset_commit_member_epoch_checks() -> None:
    cluster = Cluster()
    a = Client(cluster, "a")
    a.beat()
    groups = cluster.groups
    assert groups.validate_offset_commit("simple", "", -1) is False
    assert groups.validate_offset_commit("g", "a", a.epoch) is True
    with pytest.raises(errors.StaleMemberEpochError):
        groups.validate_offset_commit("g", "a", a.epoch - 1)
    with pytest.raises(errors.UnknownMemberIdError):
        groups.validate_offset_commit("g", "", -1)
    a.leave()
    assert groups.validate_offset_commit("g", "", -1) is True


def test_offset_fetch_member_epoch_checks() -> None:
    """OffsetFetch v9 (kafka-mapping §10.9): a member's fetch carries its id and epoch; no
    id with a negative epoch (an admin client) and groups that are no consumer group are not
    checked."""
    cluster = Cluster()
    a = Client(cluster, "a")
    a.beat()
    b = Client(cluster, "b")
    b.beat()  # b's join moves the group epoch; a's epoch moves at its next heartbeat
    groups = cluster.groups
    groups.validate_offset_fetch("g", "a", a.epoch)
    groups.validate_offset_fetch("g", "", -1)
    groups.validate_offset_fetch("simple", "x", 7)
    previous = a.epoch
    settle([a, b], rounds=3)  # a revokes b's share, then moves to the new epoch
    assert a.epoch > previous
    groups.validate_offset_fetch("g", "a", a.epoch)
    for behind_or_ahead in (previous, a.epoch + 1, -1):
        with pytest.raises(errors.StaleMemberEpochError):
            groups.validate_offset_fetch("g", "a", behind_or_ahead)
    for unknown, epoch in (("z", a.epoch), ("", 0)):
        with pytest.raises(errors.UnknownMemberIdError):
            groups.validate_offset_fetch("g", unknown, epoch)
    cluster.now += SESSION_MS + 1  # a is fenced: its fetches are refused, an admin's are not
    for group, member_id, _ in cluster.groups.expired(cluster.now):
        cluster.commit(cluster.groups.plan_fence(group, member_id, cluster.now))
    with pytest.raises(errors.UnknownMemberIdError):
        groups.validate_offset_fetch("g", "a", a.epoch)
    groups.validate_offset_fetch("g", "", -1)


def test_a_static_member_back_within_the_session_keeps_its_partitions() -> None:
    cluster = Cluster()
    s = Client(cluster, "s1", instance_id="i")
    o = Client(cluster, "o")
    settle([s, o])
    owned = s.owned
    epoch = cluster.groups.groups["g"].epoch
    assert s.leave(epoch=-2).member_epoch == -2
    settle([o])
    assert o.count == 3  # nothing moved to o
    back = Client(cluster, "s2", instance_id="i")
    answer = back.beat()
    assert answer.assignment == owned and answer.member_epoch == epoch
    assert cluster.groups.groups["g"].epoch == epoch  # no rebalance
    assert set(cluster.groups.groups["g"].members) == {"o", "s2"}


def test_new_partitions_and_subscription_changes_move_the_group_epoch() -> None:
    cluster = Cluster(topics={"t": 2, "u": 2})
    a, b = Client(cluster, "a"), Client(cluster, "b")
    settle([a, b])
    epoch = cluster.groups.groups["g"].epoch
    cluster.topics["t"] = 4
    settle([a, b])
    assert cluster.groups.groups["g"].epoch == epoch + 1 and a.count + b.count == 4
    a.beat(subscribed_topics=("t", "u"))
    settle([a, b])
    assert cluster.groups.groups["g"].epoch == epoch + 2
    assert "u" in a.owned and "u" not in b.owned
    del cluster.topics["u"]  # deleted
    settle([a, b])
    assert "u" not in a.owned
    epoch = cluster.groups.groups["g"].epoch
    a.beat(subscribed_topics=("t", "v"))  # v does not exist yet: nothing of it to assign
    settle([a, b])
    assert "v" not in a.owned and cluster.groups.groups["g"].epoch == epoch + 1
    cluster.topics["v"] = 2  # created
    settle([a, b])
    assert a.owned.get("v") == (0, 1) and cluster.groups.groups["g"].epoch == epoch + 2


def test_range_assignor_per_group() -> None:
    cluster = Cluster(topics={"t": 5})
    a = Client(cluster, "a")
    a.beat(server_assignor="range")
    b = Client(cluster, "b")
    b.beat(server_assignor="range")
    settle([a, b])
    assert a.owned == {"t": (0, 1, 2)} and b.owned == {"t": (3, 4)}
    assert cluster.groups.describe("g").assignor == "range"  # type: ignore[union-attr]


def test_assignors() -> None:
    subs = {m: ("t", "u") for m in "abc"}
    out = range_assign(subs, {"t": 7, "u": 3}, {})
    assert out["a"] == {"t": (0, 1, 2), "u": (0,)} and out["c"] == {"t": (5, 6), "u": (2,)}
    uniform = uniform_assign(subs, {"t": 7, "u": 3}, {})
    assert sorted(sum(len(p) for p in a.values()) for a in uniform.values()) == [3, 3, 4]
    # Heterogeneous: only subscribers get a topic.
    mixed = uniform_assign({"a": ("t",), "b": ("t", "u")}, {"t": 4, "u": 4}, {})
    assert "u" not in mixed["a"] and len(mixed["a"]["t"]) == 4
    # Sticky: a member joining moves only what it takes.
    prev = uniform_assign({"a": ("t",), "b": ("t",)}, {"t": 6}, {})
    nxt = uniform_assign({"a": ("t",), "b": ("t",), "c": ("t",)}, {"t": 6}, prev)
    for m in "ab":
        assert set(nxt[m]["t"]) <= set(prev[m]["t"]) and len(nxt[m]["t"]) == 2


def test_group_state_survives_a_reload_and_delete_groups() -> None:
    cluster = Cluster()
    a, b = Client(cluster, "a"), Client(cluster, "b", instance_id="i")
    settle([a, b])
    reloaded = cluster.reloaded().consumer_groups
    assert reloaded.describe("g") == cluster.groups.describe("g")
    assert reloaded.expired(cluster.now + SESSION_MS - 1) == []
    assert "g" in cluster.state.groups()
    with pytest.raises(errors.NonEmptyGroupError):
        cluster.groups.plan_delete("g", 0)
    a.leave()
    b.leave()
    records, refused = cluster.state.plan_delete_groups(["g"])
    assert refused == {}
    cluster.commit(records)
    assert "g" not in cluster.groups.groups and "g" not in cluster.state.groups()
    assert "g" not in cluster.reloaded().consumer_groups.groups


def test_records_round_trip_and_every_damaged_byte_is_refused() -> None:
    values: list[tuple[int, rec.GroupValue]] = [
        (rec.GROUP_METADATA, 7),
        (rec.PARTITION_METADATA, {"t": 3, "ü": 1}),
        (rec.MEMBER_METADATA, rec.MemberMetadata("i", None, "c", "h", ("a", "b"), 5, "range")),
        (rec.MEMBER_METADATA, rec.MemberMetadata("i", None, "c", "h", ("a",), 5, None, 3000,
                                                 ("range", "roundrobin"))),
        (rec.TARGET_METADATA, 7),
        (rec.TARGET_MEMBER, {"t": (0, 2)}),
        (rec.CURRENT_ASSIGNMENT, rec.CurrentAssignment(3, 2, 1, {"t": (1,)}, {"t": (0,)})),
    ]
    for kind, value in values:
        key = rec.GroupKey(kind, "g", "m" if kind in (5, 7, 8) else "")
        data = rec.encode_key(key)
        assert rec.decode_key(data) == key
        encoded = rec.encode_value(kind, value)
        assert rec.decode_value(kind, encoded) == value
        for cut in range(len(encoded)):
            with pytest.raises(rec.GroupRecordError):
                rec.decode_value(kind, encoded[:cut])
        with pytest.raises(rec.GroupRecordError):
            rec.decode_value(kind, encoded + b"\0")
        for cut in range(len(data)):
            with pytest.raises(rec.GroupRecordError):
                rec.decode_key(data[:cut])
    bad_values = [
        (rec.GROUP_METADATA, struct.pack(">hi", 1, 1)),  # version
        (rec.GROUP_METADATA, struct.pack(">hi", 0, -1)),  # epoch
        (rec.TARGET_MEMBER, struct.pack(">hih1sii", 0, 1, 1, b"t", 2, 1) + struct.pack(">i", 1)),
        (rec.TARGET_MEMBER, struct.pack(">hih1sii", 0, 1, 1, b"t", 1, -4)),
        (rec.CURRENT_ASSIGNMENT, struct.pack(">hiibii", 0, 1, 0, 9, 0, 0)),  # state
        (rec.TARGET_MEMBER, struct.pack(">hi", 0, 1 << 30)),  # lying count
    ]
    for kind, data in bad_values:
        with pytest.raises(rec.GroupRecordError):
            rec.decode_value(kind, data)
    rng = random.Random(5)
    for _ in range(2000):  # nothing but GroupRecordError, whatever the bytes
        blob = bytes(rng.randrange(256) for _ in range(rng.randrange(24)))
        for kind in rec.RECORD_TYPES:
            with contextlib.suppress(rec.GroupRecordError):
                rec.decode_value(kind, blob)
        with contextlib.suppress(rec.GroupRecordError):
            rec.decode_key(struct.pack(">h", rng.choice(sorted(rec.RECORD_TYPES))) + blob)


def test_a_damaged_group_record_is_skipped_on_replay() -> None:
    cluster = Cluster()
    Client(cluster, "a").beat()
    key = rec.encode_key(rec.GroupKey(rec.MEMBER_METADATA, "g", "x"))
    cluster.commit([RecordInput(b"\0\0garbage", key, 0)])
    assert "x" not in cluster.groups.groups["g"].members
    assert cluster.reloaded().consumer_groups.describe("g") == cluster.groups.describe("g")


@pytest.mark.parametrize("seed", range(5))
def test_random_membership_never_gives_a_partition_to_two_members(seed: int) -> None:
    """Members join, leave, go silent and get fenced, rejoin, change subscriptions and
    assignors while topics grow, heartbeating in random order; after every step no partition
    is held by two members (server side) or owned by two live clients (client side), and once
    things calm down every partition is owned."""
    rng = random.Random(seed)
    cluster = Cluster(topics={"t": 8, "u": 3})
    live: dict[str, Client] = {}
    names = iter(f"m{i}" for i in range(1000))
    for _ in range(300):
        action = rng.random()
        if action < 0.15 and len(live) < 6:
            client = Client(cluster, next(names), topics=rng.choice([("t",), ("t", "u")]))
            live[client.member_id] = client
            client.beat(server_assignor=rng.choice([None, "range", "uniform"]))
        elif action < 0.22 and live:
            live.pop(rng.choice(sorted(live))).leave()
        elif action < 0.28 and live:
            victim = live.pop(rng.choice(sorted(live)))  # dies: fenced by its session timeout
            cluster.commit(cluster.groups.plan_fence("g", victim.member_id, cluster.now))
        elif action < 0.31:
            cluster.topics["t"] += 1
        elif action < 0.34 and live:
            rng.choice(list(live.values())).beat(subscribed_topics=rng.choice([("t",), ("u",)]))
        elif live:
            client = live[rng.choice(sorted(live))]
            try:
                client.beat()
            except errors.FencedMemberEpochError:
                client.epoch, client.owned = 0, {}
        check_disjoint(list(live.values()))
        if live:
            held_disjoint(cluster)
    settle(list(live.values()), rounds=6)
    if live:
        group = cluster.groups.groups["g"]
        subscribed = {
            t for c in live.values() for t in group.members[c.member_id].metadata.subscribed_topics
        }
        total = sum(cluster.topics[t] for t in subscribed)
        assert sum(c.count for c in live.values()) == total


def test_the_planted_bug_hands_a_partition_over_before_its_revocation() -> None:
    """The chaos suite's self-test (test.groups.grant.before.revoke): the joiner gets a
    partition its owner still holds, which the property above and the chaos checker catch."""
    cluster = Cluster(test_grant_before_revoke=True)
    a = Client(cluster, "a")
    a.beat()
    b = Client(cluster, "b")
    b.beat()  # b gets its share at once, while a still owns it
    with pytest.raises(AssertionError):
        check_disjoint([a, b])


def test_a_lost_answer_does_not_hide_an_assignment_from_the_member() -> None:
    """The answer that shrank a member's assignment is lost (a timeout after the records
    committed) and the member sends the same heartbeat again: it still owns the partitions to
    revoke, so the answer carries the assignment again, or the member would never revoke."""
    cluster = Cluster(topics={"t": 12})
    clients = [Client(cluster, m) for m in "abc"]
    settle(clients)
    Client(cluster, "d").beat()
    a = clients[0]
    request = HeartbeatRequest("g", "a", a.epoch, owned=dict(a.owned))
    lost = cluster.heartbeat(request)
    assert lost.assignment is not None and len(lost.assignment["t"]) == 3
    again = cluster.heartbeat(request)
    assert again.assignment == lost.assignment


def test_a_consumer_group_with_members_keeps_its_offsets_past_the_retention() -> None:
    cluster = Cluster()
    a = Client(cluster, "a")
    a.beat()
    plan = cluster.state.plan_commit(
        "g", [("t", 0, 5, -1, "")], cluster.now)
    cluster.commit(plan.records)
    later = cluster.now + OffsetsConfig().retention_ms
    assert cluster.state.plan_expiration(later) == []
    a.leave()
    assert len(cluster.state.plan_expiration(later)) == 1


# ---- classic members (JoinGroup/SyncGroup/Heartbeat/LeaveGroup) ---------------------------------


class ClassicClient:
    """An eager classic member, as kafka-python's: before every JoinGroup it revokes all it
    owns; it owns what SyncGroup answers; it rejoins when Heartbeat says REBALANCE_IN_PROGRESS
    (its owned partitions are what its rebalance listener would say it owns)."""

    def __init__(self, cluster: Cluster, member_id: str, topics: tuple[str, ...] = ("t",),
                 session_ms: int = 3000) -> None:
        self.cluster = cluster
        self.member_id = member_id
        self.topics = topics
        self.session_ms = session_ms
        self.generation = -1
        self.owned: rec.Assignment = {}

    def join(self) -> None:
        self.owned = {}  # eager: everything revoked before joining
        groups = self.cluster.groups
        plan = groups.plan_classic_join(HeartbeatRequest(
            "g", self.member_id, 0, rebalance_timeout_ms=5000, subscribed_topics=self.topics,
            owned={}, classic_session_timeout_ms=self.session_ms,
        ), self.cluster.topics, self.cluster.now)
        self.cluster.commit(plan.records)
        groups.heartbeat_answered("g", self.member_id, self.cluster.now)
        self.generation = plan.response.member_epoch
        self.owned = groups.classic_assignment("g", self.member_id, self.generation,
                                               self.cluster.now)

    def beat(self) -> None:
        """A heartbeat, and the rejoin it asks for."""
        if self.cluster.groups.classic_heartbeat("g", self.member_id, self.generation,
                                                 self.cluster.now):
            self.join()

    def leave(self) -> None:
        self.cluster.commit(self.cluster.groups.plan_classic_leave(
            "g", self.member_id, None, self.cluster.now))
        self.owned = {}

    @property
    def count(self) -> int:
        return sum(len(ps) for ps in self.owned.values())


def test_a_classic_member_hands_partitions_over_only_after_rejoining_without_them() -> None:
    """Revocation before handover with classic members: a newcomer waits (no partition of the
    first member) until the first member, told REBALANCE_IN_PROGRESS, rejoined having revoked
    them; then the newcomer's heartbeat says rejoin, and it gets them."""
    cluster = Cluster()
    a, b = ClassicClient(cluster, "a"), ClassicClient(cluster, "b")
    a.join()
    assert a.count == 6 and a.generation == 1
    a.beat()
    assert a.generation == 1  # nothing moved: no rejoin
    b.join()
    assert b.owned == {} and a.count == 6  # b waits for a to release its share
    check_disjoint([a, b])  # type: ignore[list-item]
    assert not cluster.groups.classic_heartbeat("g", "b", b.generation, cluster.now)
    assert cluster.groups.classic_heartbeat("g", "a", a.generation, cluster.now)
    a.join()
    assert a.count == 3 and b.owned == {}
    b.beat()  # its partitions are free now: rejoin and take them
    assert a.count == b.count == 3
    check_disjoint([a, b])  # type: ignore[list-item]
    held_disjoint(cluster)
    a.beat()
    b.beat()
    assert a.count == b.count == 3 and a.generation == b.generation == 2


def test_classic_member_errors_and_generation() -> None:
    cluster = Cluster()
    a = ClassicClient(cluster, "a")
    a.join()
    groups = cluster.groups
    with pytest.raises(errors.IllegalGenerationError):
        groups.classic_heartbeat("g", "a", a.generation + 1, cluster.now)
    with pytest.raises(errors.IllegalGenerationError):
        groups.classic_assignment("g", "a", 0, cluster.now)
    with pytest.raises(errors.UnknownMemberIdError):
        groups.classic_heartbeat("g", "nobody", 1, cluster.now)
    with pytest.raises(errors.UnknownMemberIdError):
        groups.classic_heartbeat("other", "a", 1, cluster.now)
    # an offset commit of a classic member with another generation is ILLEGAL_GENERATION
    with pytest.raises(errors.IllegalGenerationError):
        groups.validate_offset_commit("g", "a", a.generation + 5)
    assert groups.validate_offset_commit("g", "a", a.generation)
    # a KIP-848 member and a classic member cannot speak each other's protocol
    k = Client(cluster, "k")
    k.beat()
    with pytest.raises(errors.UnknownMemberIdError):
        groups.classic_heartbeat("g", "k", k.epoch, cluster.now)
    with pytest.raises(errors.UnknownMemberIdError):
        k.cluster.heartbeat(HeartbeatRequest("g", "a", a.generation))
    with pytest.raises(errors.UnknownMemberIdError):
        groups.plan_classic_leave("g", "k", None, cluster.now)
    with pytest.raises(errors.InvalidRequestError):
        groups.plan_classic_join(HeartbeatRequest(
            "g", "z", 0, rebalance_timeout_ms=5000, subscribed_topics=("t",),
            classic_session_timeout_ms=0), cluster.topics, cluster.now)


def test_a_classic_join_needs_a_protocol_name_every_other_classic_member_supports() -> None:
    """INCONSISTENT_GROUP_PROTOCOL when the names share none with another classic member's
    (nothing written then); a ConsumerGroupHeartbeat member does not constrain them."""
    cluster = Cluster()
    groups = cluster.groups

    def join(member: str, *names: str) -> None:
        cluster.commit(groups.plan_classic_join(HeartbeatRequest(
            "g", member, 0, rebalance_timeout_ms=5000, subscribed_topics=("t",),
            classic_session_timeout_ms=3000, classic_protocols=names),
            cluster.topics, cluster.now).records)

    Client(cluster, "k").beat()
    join("a", "range", "roundrobin")
    with pytest.raises(errors.InconsistentGroupProtocolError):
        join("b", "sticky")
    join("b", "sticky", "roundrobin")
    with pytest.raises(errors.InconsistentGroupProtocolError):
        join("c", "range")
    assert sorted(groups.groups["g"].members) == ["a", "b", "k"]
    assert groups.groups["g"].members["b"].metadata.classic_protocols == ("sticky", "roundrobin")


def test_a_classic_member_has_its_own_session_timeout_and_survives_a_reload() -> None:
    cluster = Cluster()
    a = ClassicClient(cluster, "a", session_ms=SESSION_MS * 5)
    k = Client(cluster, "k")
    a.join()
    k.beat()
    cluster.now += SESSION_MS + 1
    assert [m for _, m, _ in cluster.groups.expired(cluster.now)] == ["k"]
    reloaded = cluster.reloaded().consumer_groups
    member = reloaded.groups["g"].members["a"]
    assert member.classic and member.metadata.classic_session_timeout_ms == SESSION_MS * 5
    assert reloaded.classic_assignment("g", "a", a.generation, cluster.now) == a.owned
    cluster.now += SESSION_MS * 5
    assert "a" in [m for _, m, _ in cluster.groups.expired(cluster.now)]


def test_a_classic_member_told_to_rejoin_that_does_not_is_fenced() -> None:
    cluster = Cluster()
    a, b = ClassicClient(cluster, "a", session_ms=60_000), ClassicClient(cluster, "b")
    a.join()
    b.join()
    assert cluster.groups.classic_heartbeat("g", "a", a.generation, cluster.now)
    cluster.now += 5001  # its rebalance timeout, well within its session
    assert ("g", "a", "rebalance timeout") in cluster.groups.expired(cluster.now)


def test_a_classic_member_leaves_by_member_id_or_by_instance_id() -> None:
    cluster = Cluster()
    a, b = ClassicClient(cluster, "a"), ClassicClient(cluster, "b")
    a.join()
    b.join()
    a.beat()
    b.beat()
    a.leave()
    b.beat()
    assert b.count == 6
    with pytest.raises(errors.UnknownMemberIdError):
        cluster.groups.plan_classic_leave("g", "", "no-such-instance", cluster.now)
    assert "a" not in cluster.groups.groups["g"].members


@pytest.mark.parametrize("seed", range(6))
def test_random_mixed_group_never_gives_a_partition_to_two_members(seed: int) -> None:
    """Classic and KIP-848 members in one group join, beat, leave and die in random order;
    no partition is ever owned by two of them, and once calm every partition is owned."""
    rng = random.Random(seed)
    cluster = Cluster(topics={"t": 7})
    live: dict[str, Client | ClassicClient] = {}
    names = iter(f"m{i}" for i in range(1000))
    for _ in range(250):
        action = rng.random()
        if action < 0.12 and len(live) < 5:
            name = next(names)
            member: Client | ClassicClient
            if rng.random() < 0.5:
                member = ClassicClient(cluster, name)
                member.join()
            else:
                member = Client(cluster, name)
                member.beat()
            live[name] = member
        elif action < 0.18 and live:
            live.pop(rng.choice(sorted(live))).leave()
        elif action < 0.23 and live:
            victim = live.pop(rng.choice(sorted(live)))
            cluster.commit(cluster.groups.plan_fence("g", victim.member_id, cluster.now))
        elif live:
            live[rng.choice(sorted(live))].beat()
        check_disjoint(list(live.values()))  # type: ignore[arg-type]
        if live:
            held_disjoint(cluster)
    for _ in range(8):
        for member in live.values():
            member.beat()
        check_disjoint(list(live.values()))  # type: ignore[arg-type]
    if live:
        assert sum(m.count for m in live.values()) == 7


def test_classic_member_metadata_records_round_trip_and_refuse_bad_timeouts() -> None:
    value = rec.MemberMetadata(None, None, "c", "h", ("t",), 5000, None, 10_000)
    data = rec.encode_value(rec.MEMBER_METADATA, value)
    assert rec.decode_value(rec.MEMBER_METADATA, data) == value
    assert data[:2] == b"\x00\x02" and data[-4:] == struct.pack(">i", 0)  # no names
    with pytest.raises(rec.GroupRecordError):
        rec.decode_value(rec.MEMBER_METADATA, data[:-8] + struct.pack(">ii", 0, 0))
    # version 1, written before the protocol names were kept: a member with none known
    assert rec.decode_value(rec.MEMBER_METADATA, b"\x00\x01" + data[2:-4]) == value
    with pytest.raises(rec.GroupRecordError):  # version 1 is for member metadata only
        rec.decode_value(rec.GROUP_METADATA, b"\x00\x01" + struct.pack(">i", 3))


def test_a_cooperative_classic_member_keeps_what_it_may_and_revokes_by_joining_again() -> None:
    """A cooperative classic client (librdkafka's cooperative-sticky) joins again reporting
    what it owns: the coordinator keeps its partitions pending revocation until a JoinGroup
    no longer lists them, and only then hands them over."""
    cluster = Cluster()
    groups = cluster.groups

    def join(member_id: str, owned: rec.Assignment) -> int:
        plan = groups.plan_classic_join(HeartbeatRequest(
            "g", member_id, 0, rebalance_timeout_ms=5000, subscribed_topics=("t",),
            owned=owned, classic_session_timeout_ms=3000), cluster.topics, cluster.now)
        cluster.commit(plan.records)
        groups.heartbeat_answered("g", member_id, cluster.now)
        return plan.response.member_epoch

    a_epoch = join("a", {})
    everything = {"t": (0, 1, 2, 3, 4, 5)}
    assert groups.classic_assignment("g", "a", a_epoch, cluster.now) == everything
    b_epoch = join("b", {})
    assert groups.classic_assignment("g", "b", b_epoch, cluster.now) == {}
    assert groups.classic_heartbeat("g", "a", a_epoch, cluster.now)
    # a joins again still owning everything: it keeps its share, the rest pending revocation
    a_epoch = join("a", everything)
    kept = groups.classic_assignment("g", "a", a_epoch, cluster.now)
    assert sum(map(len, kept.values())) == 3
    assert groups.groups["g"].members["a"].current.state == rec.UNREVOKED_PARTITIONS
    assert groups.classic_heartbeat("g", "a", a_epoch, cluster.now)  # must revoke: rejoin
    assert not groups.classic_heartbeat("g", "b", b_epoch, cluster.now)  # nothing free yet
    held_disjoint(cluster)
    a_epoch = join("a", kept)  # revoked the rest
    assert groups.classic_heartbeat("g", "b", b_epoch, cluster.now)  # free now
    b_epoch = join("b", {})
    given = groups.classic_assignment("g", "b", b_epoch, cluster.now)
    assert sum(map(len, given.values())) == 3
    assert not set(given["t"]) & set(kept["t"])
    held_disjoint(cluster)
    assert not groups.classic_heartbeat("g", "a", a_epoch, cluster.now)
    assert not groups.classic_heartbeat("g", "b", b_epoch, cluster.now)


def test_a_restarted_classic_static_member_replaces_its_holder_at_once() -> None:
    """A classic member with an instance id joining under a new member id (its process
    restarted) takes over the holder's partitions and epoch at once, the group epoch unmoved;
    the old member id is unknown from then on. A KIP-848 static member still waits for its
    holder to leave (UNRELEASED_INSTANCE_ID)."""
    cluster = Cluster()
    groups = cluster.groups

    def join(member_id: str) -> int:
        plan = groups.plan_classic_join(HeartbeatRequest(
            "g", member_id, 0, instance_id="i1", rebalance_timeout_ms=5000,
            subscribed_topics=("t",), owned={}, classic_session_timeout_ms=3000),
            cluster.topics, cluster.now)
        cluster.commit(plan.records)
        groups.heartbeat_answered("g", member_id, cluster.now)
        return plan.response.member_epoch

    first = join("old")
    other = ClassicClient(cluster, "other")
    other.join()
    first = join("old")  # rejoin: the group's epoch now, its share kept
    kept = groups.classic_assignment("g", "old", first, cluster.now)
    epoch = groups.groups["g"].epoch
    second = join("new")
    assert second == first and groups.groups["g"].epoch == epoch
    assert groups.classic_assignment("g", "new", second, cluster.now) == kept
    with pytest.raises(errors.UnknownMemberIdError):
        groups.classic_heartbeat("g", "old", first, cluster.now)
    held_disjoint(cluster)
    with pytest.raises(errors.UnreleasedInstanceIdError):
        Client(cluster, "k848", instance_id="i1").beat()
