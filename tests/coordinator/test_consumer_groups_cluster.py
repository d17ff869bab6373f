"""Consumer groups (KIP-848) on a real cluster with real member processes (issue 15's Tests):
incremental rebalances that pause only the moved partitions, a killed member's partitions taken
over from its commits, a coordinator killed during a rebalance, static members, fenced
commits, and the `tidelog groups describe` / `tidelog consume --group` commands.

One cluster for the module, with short session timeouts (node options), shared by few tests
that each check several points: the processes are what costs."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tidelog import Client, ConsumerRebalanceListener, OffsetAndMetadata, TopicPartition, errors
from tidelog.cli import main
from tidelog.member_history import MemberProcess, double_ownership, histories_of
from tidelog.testing import LocalCluster, wait_for
from tidelog.transport import CallObserver
from tidelog.v1 import tidelog_pb2 as pb

pytestmark = pytest.mark.timeout(400)

SESSION_MS = 5000
TOPIC = "cg-events"


@pytest.fixture(scope="module")
def cluster_options() -> dict[str, Any]:
    return {
        "offsets_topic_num_partitions": 3,
        "group_consumer_session_timeout_ms": SESSION_MS,
        "group_consumer_heartbeat_interval_ms": 250,
    }


@pytest.fixture(scope="module")
def client(cluster: LocalCluster) -> Iterator[Client]:
    with Client(cluster.bootstrap) as shared:
        shared.create_topic(TOPIC, partitions=6, replication_factor=3)
        yield shared


class Producing:
    """Records into every partition, round after round, until stopped."""

    def __init__(self, client: Client, topic: str) -> None:
        self.producer = client.producer(acks="all")
        self.topic = topic
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            for p in range(6):
                self.producer.send(self.topic, b"x", partition=p)
            self.producer.flush()
            self.stop.wait(0.02)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)
        self.producer.close()


@pytest.fixture
def members(cluster: LocalCluster) -> Iterator[list[MemberProcess]]:
    started: list[MemberProcess] = []
    yield started
    for member in started:
        member.kill()


def _start(members: list[MemberProcess], cluster: LocalCluster, group: str, name: str,
           *extra: str) -> MemberProcess:
    member = MemberProcess(cluster.bootstrap, group, TOPIC, name, *extra)
    members.append(member)
    return member


def _settled(live: list[MemberProcess], counts: list[int]) -> bool:
    owned = [m.owned for m in live]
    return sorted(len(o) for o in owned) == sorted(counts) and \
        len(set().union(*owned)) == sum(counts)


def test_members_share_rebalance_incrementally_and_take_over_from_commits(
    cluster: LocalCluster, client: Client, members: list[MemberProcess]
) -> None:
    producing = Producing(client, TOPIC)
    try:
        first = [_start(members, cluster, "cg-a", f"m{i}") for i in range(3)]
        wait_for(lambda: _settled(first, [2, 2, 2]), 60, "three members own two each")
        before = {m.name: m.owned for m in first}

        # A fourth joins: one partition moves to it; the other five are never revoked and
        # their owners keep returning their records while the group rebalances.
        joining_at = time.time()
        fourth = _start(members, cluster, "cg-a", "m3")
        live = [*first, fourth]
        wait_for(lambda: _settled(live, [2, 2, 1, 1]), 60, "four members own all six")
        moved = fourth.owned
        revoked = {p for m in first for e in m.history()
                   if e["ev"] == "revoked" and e["t"] >= joining_at for p in e["p"]}
        assert revoked == moved and len(moved) == 1
        (moved_p,) = moved
        old_owner = next(m for m in first if moved_p in before[m.name])
        # The handover: the old owner's position was committed before it revoked, so the new
        # owner starts right after the last record the old one returned.
        revoked_at = next(e["t"] for e in old_owner.history()
                          if e["ev"] == "revoked" and e["t"] >= joining_at)
        last_old = max(o for p, o, t in old_owner.consumed() if p == moved_p and t <= revoked_at)
        wait_for(lambda: any(p == moved_p for p, _, _ in fourth.consumed()), 30, "4th reads")
        assert min(o for p, o, _ in fourth.consumed() if p == moved_p) == last_old + 1
        first_grant = next(e["t"] for e in fourth.history() if e["ev"] == "assigned" and e["p"])
        for member in first:
            kept = before[member.name] - moved
            during = {p for p, _, t in member.consumed() if joining_at <= t <= first_grant}
            assert kept <= during, (member.name, kept, during)
            for p in kept:  # one owner throughout: every offset once, in order
                offsets = [o for q, o, _ in member.consumed() if q == p]
                assert offsets == list(range(offsets[0], offsets[0] + len(offsets)))

        # SIGKILL one member: after the session timeout the others own its partitions, and
        # nothing it committed before the kill is consumed again.
        victim = next(m for m in live if m is not old_owner and len(m.owned) == 2)
        victim_parts = victim.owned
        committed = client.admin.list_consumer_group_offsets(
            "cg-a", [TopicPartition(TOPIC, p) for p in victim_parts])
        victim.kill()
        last_seen = {p: max(o for q, o, _ in victim.consumed() if q == p) for p in victim_parts}
        survivors = [m for m in live if m is not victim]
        wait_for(lambda: _settled(survivors, [2, 2, 2]), 60, "survivors own the victim's")
        for p in victim_parts:
            taker = next(m for m in survivors if p in m.owned)
            taken_at = max(e["t"] for e in taker.history()
                           if e["ev"] == "assigned" and p in e["p"])

            def taken(taker: MemberProcess = taker, p: int = p, at: float = taken_at
                      ) -> list[int]:
                return [o for q, o, t in taker.consumed() if q == p and t >= at]

            wait_for(taken, 90, "the taker reads")
            first_offset = min(taken())
            before_kill = committed.get(TopicPartition(TOPIC, p))
            assert (before_kill.offset if before_kill else 0) <= first_offset <= last_seen[p] + 1

        # SIGKILL the group's coordinator while a member joins: the group converges again.
        coordinator = client.admin.find_coordinator("cg-a")
        late = _start(members, cluster, "cg-a", "m4")
        wait_for(lambda: len(client.admin.describe_consumer_group("cg-a").members) == 4, 30,
                 "the fifth member joined")
        cluster.kill(coordinator)
        try:
            everyone = [*survivors, late]
            wait_for(lambda: _settled(everyone, [2, 2, 1, 1]), 90, "converged again")
            # The members own their target before their next heartbeats tell the new
            # coordinator so; the group is Stable once they have (KIP-848's reconciliation).
            def stable() -> bool:
                description = client.admin.describe_consumer_group("cg-a")
                return description.state == "Stable" and len(description.members) == 4

            wait_for(stable, 30, "the group to be Stable with four members")
        finally:
            cluster.restart(coordinator)
        overlaps = double_ownership(histories_of(members))
        assert [o for o in overlaps if not o.startswith("zombie")] == [], [
            (m.name, [e for e in m.history() if e["ev"] != "recs"]) for m in members]
    finally:
        producing.close()


def test_static_member_fenced_commits_and_the_commands(
    cluster: LocalCluster, client: Client, members: list[MemberProcess],
    capsys: pytest.CaptureFixture[str],
) -> None:
    producer = client.producer(acks="all")
    for i in range(12):
        producer.send(TOPIC, b"s", partition=i % 6)
    producer.flush()
    # A static member closes (epoch -2) and its next incarnation gets its partitions back
    # within the session timeout, without a rebalance (the group epoch stays).
    static = _start(members, cluster, "cg-s", "s1", "--instance-id", "box-1")
    other = _start(members, cluster, "cg-s", "o1")
    lone = _start(members, cluster, "cg-l", "l1")  # fenced below, beside the raw member
    wait_for(lambda: _settled([static, other], [3, 3]), 60, "two members own three each")
    owned = static.owned
    epoch = client.admin.describe_consumer_group("cg-s").group_epoch
    again = _start(members, cluster, "cg-s", "s2", "--instance-id", "box-1", "--wait-for-go")
    wait_for(lambda: again.ready, 30, "s2 started")
    static.close()
    again.send("go")
    wait_for(lambda: again.owned == owned, 30, "the static member's partitions back")
    after = client.admin.describe_consumer_group("cg-s")
    assert after.group_epoch == epoch and other.owned == {0, 1, 2, 3, 4, 5} - owned
    assert {m.instance_id for m in after.members} == {"box-1", None}

    # `tidelog groups describe` shows the members, their partitions and epochs.
    described = _cli(capsys, cluster, "groups", "describe", "cg-s")
    for member in after.members:
        assert member.member_id in described and str(member.member_epoch) in described
    assert "Stable" in described and "box-1" in described
    # ... and each partition's committed offset, lag and owner.
    assert "LAG" in described and "CONSUMER-ID" in described
    assert f"{TOPIC}:" in described

    # A member's commit with an old epoch is STALE_MEMBER_EPOCH; once the member is fenced
    # (silent past its session), UNKNOWN_MEMBER_ID. A member process is silenced (SIGSTOP)
    # just before, in a group of its own, so that its session runs out in the same wait.
    wait_for(lambda: len(lone.owned) == 6, 30, "the lone member owns every partition")
    lone.pause()
    node = client.admin.find_coordinator("cg-f")
    call = client.connections.call
    joined = call(node, "ConsumerGroupHeartbeat", pb.ConsumerGroupHeartbeatRequest(
        group_id="cg-f", member_id="raw-1", member_epoch=0, rebalance_timeout_ms=1000,
        subscribed_topic_names=pb.ConsumerGroupTopicNames(names=[TOPIC]),
        topic_partitions=pb.ConsumerGroupAssignment()), 10)
    assert joined.error_code == 0 and joined.member_epoch == 1, joined

    def commit(epoch: int) -> int:
        answer = call(node, "OffsetCommit", pb.OffsetCommitRequest(
            group_id="cg-f", member_id="raw-1", generation_id=epoch, topics=[
                pb.OffsetCommitTopic(name=TOPIC, partitions=[pb.OffsetCommitPartition(
                    partition=0, committed_offset=1)])]), 10)
        return int(answer.topics[0].partitions[0].error_code)

    def fetch(member_id: str, epoch: int | None) -> tuple[int, int]:
        """OffsetFetch v9 (KIP-848): (group error, committed offset of partition 0)."""
        answer = call(node, "OffsetFetch", pb.OffsetFetchRequest(
            group_id="cg-f", member_id=member_id, member_epoch=epoch,
            topics=[pb.OffsetFetchTopic(name=TOPIC, partitions=[0])]), 10)
        offset = answer.topics[0].partitions[0].committed_offset if answer.topics else -1
        return int(answer.error_code), int(offset)

    assert commit(1) == 0
    assert commit(0) == 113  # STALE_MEMBER_EPOCH
    assert fetch("raw-1", 1) == (0, 1) and fetch("", None) == (0, 1)  # an admin's: no check
    assert fetch("raw-1", 0)[0] == 113 and fetch("raw-2", 1)[0] == 25
    wait_for(lambda: commit(1) == 25, 30, "the silent member fenced")  # UNKNOWN_MEMBER_ID
    assert fetch("raw-1", 1)[0] == 25 and fetch("", None) == (0, 1)
    # The paused consumer, fenced too, learns it at its next heartbeat once resumed: its
    # partitions are lost (on_partitions_lost, never revoked, as Kafka's consumer), and it
    # joins again and gets them back.
    wait_for(lambda: not client.admin.describe_consumer_group("cg-l").members, 30, "lone fenced")
    paused_at = len(lone.history())
    lone.resume()

    def since_pause() -> list[tuple[str, list[int]]]:
        return [(e["ev"], e["p"]) for e in lone.history()[paused_at:] if e["ev"] != "recs"]

    everything = [0, 1, 2, 3, 4, 5]
    wait_for(lambda: len(since_pause()) >= 2, 30, "lost, then assigned again")
    assert since_pause() == [("lost", everything), ("assigned", everything)], since_pause()
    stale = call(node, "ConsumerGroupHeartbeat", pb.ConsumerGroupHeartbeatRequest(
        group_id="cg-f", member_id="raw-1", member_epoch=1), 10)
    assert stale.error_code == 25

    # ListGroups and DeleteGroups cover consumer groups: a group with members is not deleted.
    listed = {g.group_id: g for g in client.admin.list_consumer_groups()}
    assert (listed["cg-s"].protocol_type, listed["cg-s"].state) == ("consumer", "Stable")
    assert listed["cg-f"].state == "Empty"
    with pytest.raises(errors.NonEmptyGroupError):
        client.admin.delete_consumer_groups(["cg-s"])
    client.admin.delete_consumer_groups(["cg-f"])
    with pytest.raises(errors.GroupIdNotFoundError):
        client.admin.describe_consumer_group("cg-f")

    # A pattern subscription, and the listener's calls in Kafka's order: revoked before
    # assigned, every callback inside poll(); unsubscribe() revokes what is left.
    client.create_topic("cg-pat-1", partitions=2, replication_factor=3)
    calls: list[tuple[str, str, list[int]]] = []

    class Recording(ConsumerRebalanceListener):
        """Records the calls; with a consumer whose auto-commit is off, commits its positions
        of the revoked partitions there, as such an application must."""

        def __init__(self, name: str, committing: Any = None) -> None:
            self.name = name
            self.committing = committing

        def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
            calls.append((self.name, "revoked", sorted(tp.partition for tp in revoked)))
            if self.committing is not None and revoked:
                self.committing.commit({tp: OffsetAndMetadata(
                    self.committing.position(tp)) for tp in revoked})

        def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
            calls.append((self.name, "assigned", sorted(tp.partition for tp in assigned)))

    class Fetches(CallObserver):
        """The (member id, epoch) of each OffsetFetch the members' client sends."""

        def __init__(self) -> None:
            self.sent: list[tuple[str, int | None]] = []

        def on_request(self, node_id: int | None, method: str, request: Any) -> None:
            if method == "OffsetFetch":
                self.sent.append((request.member_id, request.member_epoch
                                  if request.HasField("member_epoch") else None))

    fetches = Fetches()
    members_client = Client(cluster.bootstrap, observers=[fetches])
    first = members_client.consumer(group_id="cg-p", auto_offset_reset="earliest",
                                    enable_auto_commit=False)
    second = members_client.consumer(group_id="cg-p", auto_offset_reset="earliest")
    first.subscribe(pattern=r"cg-pat-\d+", listener=Recording("first", first))
    assert first.subscription() == {"cg-pat-1"}
    wait_for(lambda: first.poll(50) is not None and len(first.assignment()) == 2, 30,
             "the pattern's partitions")
    # A member's OffsetFetch (its starting positions, committed()) carries its id and epoch.
    first.committed([TopicPartition("cg-pat-1", 0)])
    assert fetches.sent and all(m and e is not None and e > 0 for m, e in fetches.sent), \
        fetches.sent
    second.subscribe(pattern=r"cg-pat-\d+", listener=Recording("second"))
    wait_for(lambda: (first.poll(50), second.poll(50)) and len(first.assignment()) == 1
             and len(second.assignment()) == 1, 30, "one partition each")
    (last,) = first.assignment()
    first.unsubscribe()
    # With auto-commit off, the listener's commit is the only one of the partition first
    # kept (second never owned it).
    assert client.admin.list_consumer_group_offsets("cg-p", [last]).get(last) is not None
    second.close()
    members_client.close()
    mine = [(kind, parts) for name, kind, parts in calls if name == "first"]
    assert mine[0] == ("assigned", [0, 1])
    assert [kind for kind, _ in mine[1:3]] == ["revoked", "assigned"] and mine[2][1] == []
    assert mine[-1][0] == "revoked" and len(mine[-1][1]) == 1

    # `tidelog consume --group` consumes as a member and commits what it printed.
    out = _cli(capsys, cluster, "consume", TOPIC, "--group", "cg-c", "--max-records", "5")
    assert len(out.strip().splitlines()) == 5
    assert client.admin.list_consumer_group_offsets("cg-c")


def _cli(capsys: pytest.CaptureFixture[str], cluster: LocalCluster, *args: str) -> str:
    capsys.readouterr()
    assert main([*args, "--bootstrap", cluster.bootstrap]) == 0
    return capsys.readouterr().out
