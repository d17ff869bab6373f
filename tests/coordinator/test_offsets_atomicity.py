"""All or nothing (contract §8.5) at the moment of a SIGKILL: the committers of four
groups write sets of 100 partitions (every partition the set's generation), one attempt each,
and stop when the coordinator is killed with commits in flight. After the failover every live
node answers, for each group, one whole set whose generation lies between the last one
acknowledged and the last one sent: the log held each set whole or not at all, and lost nothing
acknowledged. Twice, the second time killing the new coordinator. (The SIGKILL test of
test_offsets_failover commits on, with retries, after the failover; here nothing written after
the kill can mask what the log held at it.) Fetches from every node, before, across and after
each kill, go into a chaos history whose checker must find them linearizable and atomic."""

from __future__ import annotations

import concurrent.futures
import itertools
import threading
from pathlib import Path

import pytest

from tidelog.chaos.checker import check_offsets
from tidelog.chaos.history import OK, UNKNOWN, History, load
from tidelog.chaos.workload import Workload, WorkloadConfig
from tidelog.client import Client
from tidelog.errors import TidelogError
from tidelog.testing import LocalCluster, wait_for
from tidelog.types import OffsetAndMetadata

pytestmark = pytest.mark.timeout(150)

TOPIC = "sets"
PARTITIONS = 100
GROUPS = 4
ROUNDS = 2


class Committer(threading.Thread):
    """One group's committer: sets of every partition, one after another, each at a value
    (its generation) higher than the last, each a single attempt (a retry would land after
    the kill and hide what the log held at it)."""

    def __init__(self, workload: Workload, group: str, values: itertools.count[int],
                 stop: threading.Event) -> None:
        super().__init__(name=f"commit-{group}", daemon=True)
        self.workload, self.group, self.values, self.stop_event = workload, group, values, stop
        #: The generation of the last acknowledged commit, and how many were.
        self.acked = -1
        self.acks = 0
        self.invoked = -1

    def run(self) -> None:
        client = Client(self.workload.bootstrap, request_timeout_ms=5_000)
        consumer = client.consumer(group_id=self.group, enable_auto_commit=False)
        history = self.workload.history
        try:
            while not self.stop_event.is_set():
                value = next(self.values)
                fields = {"group": self.group, "value": value,
                          "partitions": list(range(PARTITIONS))}
                op = history.invoke(self.name, "offset_commit", **fields)
                self.invoked = value
                try:
                    consumer.commit_async(
                        {tp: OffsetAndMetadata(value) for tp in self.workload.tps}
                    ).result(timeout=15)
                except (TidelogError, concurrent.futures.TimeoutError) as exc:
                    history.complete(op, self.name, "offset_commit", UNKNOWN,
                                     error=str(exc) or type(exc).__name__, **fields)
                    continue
                self.acked = value
                self.acks += 1
                history.complete(op, self.name, "offset_commit", OK, **fields)
        finally:
            client.close()


def test_each_group_holds_one_whole_commit_after_its_coordinator_is_killed(
    tmp_path: Path,
) -> None:
    with LocalCluster(3, offsets_topic_num_partitions=1) as cluster, \
            Client(cluster.bootstrap) as admin:
        admin.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=1)
        history = History(tmp_path / "history.jsonl")
        workload = Workload(cluster.bootstrap, WorkloadConfig(
            TOPIC, PARTITIONS, groups=GROUPS, offsets_partitions=1), history)
        values = itertools.count()
        try:
            for round_ in range(ROUNDS):
                kill_during_commits(cluster, admin, workload, values, round_)
        finally:
            workload.close()
            history.close()
        entries = load(history.path)
        fetched = [e for e in entries if e["f"] == "offset_fetch" and e["type"] == OK]
        assert len(fetched) > 20, len(fetched)
        for invariant in check_offsets(entries):
            assert invariant.ok, (invariant.name, invariant.violations)


def kill_during_commits(cluster: LocalCluster, admin: Client, workload: Workload,
                        values: itertools.count[int], round_: int) -> None:
    """Committers and fetchers run; the coordinator is killed while commits are in flight and
    the committers stop there, so what each group holds after the failover is what the log
    held at the kill: checked on every live node. The killed node is restarted at the end."""
    old = admin.admin.find_coordinator(workload.groups[0], timeout_ms=60_000)
    stop_commits, stop_fetches = threading.Event(), threading.Event()
    committers = [Committer(workload, group, values, stop_commits) for group in workload.groups]
    fetchers = [threading.Thread(target=fetch_until, daemon=True,
                                 args=(workload, node, stop_fetches))
                for node in cluster.node_ids]
    for thread in [*committers, *fetchers]:
        thread.start()
    try:
        wait_for(lambda: all(c.acks >= 10 for c in committers), 60,
                 "ten acknowledged commits of every group")
        cluster.kill(old)
    finally:
        stop_commits.set()
        for committer in committers:
            committer.join(30)
    try:
        for committer in committers:
            for node in (n for n in cluster.node_ids if n != old):
                found = final_set(workload, committer.group, node)
                assert len(set(found)) == 1, (round_, committer.group, node, found)
                assert committer.acked <= found[0] <= committer.invoked, (
                    round_, committer.group, node, found[0], committer.acked, committer.invoked)
    finally:
        stop_fetches.set()
        for fetcher in fetchers:
            fetcher.join(30)
    cluster.restart(old)


def fetch_until(workload: Workload, node: int, stop: threading.Event) -> None:
    """Every group's set from one node, round after round, recorded in the history."""
    client = Client(workload.bootstrap, request_timeout_ms=5_000)
    try:
        client.connections.metadata.ensure(client.connections.deadline(30_000))
        for group in itertools.cycle(workload.groups):
            if stop.is_set():
                return
            workload.fetch_offsets(f"fetch-n{node}", client, group, node)
            stop.wait(0.02)  # a pace, not a synchronisation: the committers need the cores too
    finally:
        client.close()


def final_set(workload: Workload, group: str, node: int) -> list[int]:
    """The group's whole set as `node` answers once the new coordinator serves it."""
    client = Client(workload.bootstrap, request_timeout_ms=5_000)
    try:
        client.connections.metadata.ensure(client.connections.deadline(30_000))
        answer = wait_for(lambda: workload.fetch_offsets("final", client, group, node), 60,
                          f"node {node} to answer the offsets of {group}")
    finally:
        client.close()
    return [value for _, value in answer]
