"""The node's chores over its replicas cost nothing per idle partition: leadership
announcements (`Housekeeping._announce_leadership`) tell a peer what changed of the partitions
led here, and everything again only when its link may have lost a frame; the scrubber looks
at the logs only when one is due or the replicas changed; the retention pass looks at a log
again only when it changed or its retention time came."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest
from replica_helpers import running
from waiting_helpers import async_wait_for

from tidelog.coordinator.controller import METADATA_TP
from tidelog.node.config import NodeConfig
from tidelog.node.replicas import housekeeping as housekeeping_module
from tidelog.node.replicas import scrubber as scrubber_module
from tidelog.node.replicas.housekeeping import Housekeeping
from tidelog.node.replicas.replica_set import ReplicaSet
from tidelog.node.replicas.scrubber import Scrubber
from tidelog.node.replicas.transport import Outgoing, PeerLink, frames
from tidelog.records import RecordInput, build_batch
from tidelog.replication import AppendResponse, PreVoteResponse, VoteResponse
from tidelog.storage import Log
from tidelog.types import TopicPartition
from tidelog.v1 import raft_pb2 as rpb


def _announced(link: PeerLink) -> list[list[tuple[str, int, int]]]:
    """Per frame queued on `link` (never started): the (topic, partition, epoch) announced."""
    out = []
    for _, pieces in link._queue:
        (env, _), = frames(b"".join(pieces))
        out.append([(a.group.topic, a.group.partition, a.epoch) for a in env.leaders])
    return out


async def _leading(replicas: ReplicaSet, led: TopicPartition) -> dict[int, PeerLink]:
    """Node 1's replica of `led` (replicas 1, 2, 3; node 1 its preferred one, so it campaigns)
    elected with node 2's votes, once the driver has seen the leadership; the links to nodes 2
    and 3, never started, so the frames sent to them stay queued."""
    links = {peer: PeerLink(1, peer, "127.0.0.1:1", replicas.dialer) for peer in (2, 3)}
    replicas.links = links
    replicas.open_replica(led, (1, 2, 3), {})
    for response in (PreVoteResponse(1, 2, 1, True), VoteResponse(1, 2, 1, True)):
        answer = Outgoing(2, 1)
        answer.add(led, response)
        replicas.step(answer.env, memoryview(b""))
    replica = replicas.partitions[led]
    await async_wait_for(lambda: replica.leader_epoch_start_offset is not None, 30,
                         "the leadership seen by the driver")
    return links


def test_a_peer_is_told_what_changed_and_everything_again_after_a_loss(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, every peer was told every partition led here every 2 s, changed or not (the
    second look below sent both peers everything again)."""
    monkeypatch.setattr(housekeeping_module, "_ANNOUNCE_ALL_EVERY_S", 0.0)
    led = TopicPartition("t", 0)

    async def scenario() -> None:
        replicas = ReplicaSet(NodeConfig(node_id=1, listen="127.0.0.1:0", data_dir=tmp_path))
        async with running(replicas):
            links = await _leading(replicas, led)
            for link in links.values():
                link._queue.clear()  # the election's own messages
            housekeeping = Housekeeping(replicas.config, replicas, METADATA_TP)
            housekeeping._announce_leadership()
            assert [_announced(link) for link in links.values()] == [[[("t", 0, 1)]]] * 2
            housekeeping._announce_leadership()  # every partition looked at: none changed
            assert [len(link._queue) for link in links.values()] == [1, 1]
            links[3].dropped += 1  # its queue was full: a frame was lost
            housekeeping._announce_leadership()
            assert [len(link._queue) for link in links.values()] == [1, 2]
            assert _announced(links[3])[1] == [("t", 0, 1)]
            replicas.remove_replica(led)  # no longer led here: nothing more to tell
            links[2].dropped += 1
            housekeeping._announce_leadership()
            assert [len(link._queue) for link in links.values()] == [1, 2]

    asyncio.run(scenario())


def test_a_quiet_partitions_in_sync_replicas_are_announced_when_they_change(
    tmp_path: Path
) -> None:
    """A quiesced group's in-sync replicas are its followers' live nodes. They are announced
    when the group goes quiet (its followers caught up in the step that quieted it), and when
    node liveness finds a follower's node silent, though every partition led here was looked
    at a moment ago. Before, only the look at all of them every 2 s found either change (the
    assertions after each announcement below failed: nothing was announced)."""
    led = TopicPartition("t", 0)

    async def scenario() -> None:
        replicas = ReplicaSet(NodeConfig(node_id=1, listen="127.0.0.1:0", data_dir=tmp_path))
        async with running(replicas):
            links = await _leading(replicas, led)
            replica = replicas.partitions[led]
            housekeeping = Housekeeping(replicas.config, replicas, METADATA_TP)
            housekeeping._announce_leadership()  # everything: the followers have not caught up
            assert [_isrs(link) for link in links.values()] == [[(0, [1])]] * 2
            end = replica.core.log_end_offset
            for follower in (2, 3):  # both hold the new term's first entry: the group quiets
                answer = Outgoing(follower, 1)
                answer.add(led, AppendResponse(1, follower, 1, True, match_end=end))
                replicas.step(answer.env, memoryview(b""))
            await async_wait_for(lambda: replica.core.quiesced, 30, "the group to quiesce")
            housekeeping._announce_leadership()
            assert [_isrs(link) for link in links.values()] == [[(0, [1, 2, 3])]] * 2
            replicas._heard = {2: replicas.tick_count(), 3: -replicas.raft_config.election_ticks}
            replicas._liveness()  # node 3 has been silent for an election timeout
            assert replica.in_sync_replicas(replicas.config.replica_lag_max_ms) == [1, 2]
            housekeeping._announce_leadership()
            assert [_isrs(link) for link in links.values()] == [[(0, [1, 2])]] * 2

    asyncio.run(scenario())


def _isrs(link: PeerLink) -> list[tuple[int, list[int]]]:
    """(partition, in-sync replicas) of the announcements queued on `link` (never started)
    since the last call, which takes them off its queue."""
    announced = [(a.group.partition, list(a.isr)) for a in _announcements(link)]
    link._queue.clear()
    return announced


def _announcements(link: PeerLink) -> list[rpb.LeaderAnnouncement]:
    """The announcements queued on `link` (never started)."""
    return [a for _, pieces in link._queue for env, _ in frames(b"".join(pieces))
            for a in env.leaders]


def test_the_scrubber_looks_again_only_when_a_log_is_due_or_the_replicas_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once every log rests, its ticks scan nothing (before, each tick handed the scrub thread
    every log: the second assertion failed); a new replica is verified at the next tick."""
    monkeypatch.setattr(scrubber_module, "_TICK_S", 0.01)
    scans: list[int] = []
    turns: list[None] = []

    async def scenario() -> None:
        config = NodeConfig(node_id=1, listen="127.0.0.1:0", data_dir=tmp_path)
        replicas = ReplicaSet(config)
        async with running(replicas):
            for p in range(3):
                replicas.open_replica(TopicPartition("t", p), (1,), {})
            scrubber = Scrubber(config, replicas)
            scan, resolve = scrubber._scan, scrubber._resolve_pending

            def counted_scan(logs: dict[TopicPartition, object], budget: int) -> object:
                scans.append(len(logs))
                return scan(logs, budget)  # type: ignore[arg-type]

            async def counted_turn() -> None:
                turns.append(None)
                await resolve()

            monkeypatch.setattr(scrubber, "_scan", counted_scan)
            monkeypatch.setattr(scrubber, "_resolve_pending", counted_turn)
            scrubbing = asyncio.create_task(scrubber.loop())
            try:
                await async_wait_for(lambda: len(scrubber._rest_until) == 3, 30, "one pass")
                rested, turned = len(scans), len(turns)
                await async_wait_for(lambda: len(turns) >= turned + 20, 30, "idle ticks")
                assert len(scans) <= rested + 1  # the scan under way when the pass ended
                replicas.open_replica(TopicPartition("t", 3), (1,), {})
                await async_wait_for(lambda: len(scrubber._rest_until) == 4, 30, "the new log")
                assert scans[-1] == 4
            finally:
                scrubbing.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await scrubbing

    asyncio.run(scenario())


def test_retention_looks_again_at_a_log_only_once_it_changed_or_its_time_came(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, every pass looked at every log (the second pass below looked at both)."""
    looked: list[str] = []
    delete_old_segments = Log.delete_old_segments

    def recording(log_: Log) -> int:
        looked.append(log_.directory.name)
        return delete_old_segments(log_)

    monkeypatch.setattr(Log, "delete_old_segments", recording)
    now = [1_000_000_000_000]
    monkeypatch.setattr(housekeeping_module, "wall_clock_ms", lambda: now[0])

    async def scenario() -> None:
        config = NodeConfig(node_id=1, listen="127.0.0.1:0", data_dir=tmp_path)
        replicas = ReplicaSet(config)
        try:
            for p in range(2):
                replicas.open_replica(TopicPartition("t", p), (1,), {"retention.ms": "60000"})
            written, empty = (replicas.partitions[TopicPartition("t", p)] for p in range(2))
            written.log.append_as_leader(build_batch([RecordInput(b"v", None, now[0])]), 0)
            housekeeping = Housekeeping(config, replicas, METADATA_TP)
            in_service = [written, empty]
            assert housekeeping._retention_pass(in_service) == []
            assert sorted(looked) == ["t-0", "t-1"]
            housekeeping._retention_pass(in_service)  # nothing changed, nothing due
            assert sorted(looked) == ["t-0", "t-1"]
            written.log.append_as_leader(build_batch([RecordInput(b"w", None, now[0])]), 0)
            housekeeping._retention_pass(in_service)
            assert looked[2:] == ["t-0"]
            replicas.reconfigure(empty.tp, {"retention.ms": "1000"})
            housekeeping._retention_pass(in_service)
            assert looked[3:] == ["t-1"]
            now[0] += 60_001  # the written log's oldest segment may go now; never the empty one
            housekeeping._retention_pass(in_service)
            assert looked[4:] == ["t-0"]
        finally:
            await replicas.close()

    asyncio.run(scenario())
