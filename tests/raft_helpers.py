"""A hand-driven group of Raft cores for scenario and property tests: in-memory logs under the
one driver (`tidelog.replication.driver`), and messages that move only when the test says so."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable

from tidelog.replication import (
    ConfState,
    Entry,
    HardState,
    MemoryLog,
    Message,
    RaftConfig,
    RaftCore,
    Ready,
    Role,
)
from tidelog.replication.driver import DrivenReplica, Driver, Leadership, TermVote

ELECTION = 10
Filter = Callable[[Message], bool]


class _Port:
    """Collects what the driver sends and publishes; messages move only when a test says."""

    def __init__(self, ids: Iterable[int]) -> None:
        self.out: list[Message] = []
        self.readies: dict[int, list[Ready]] = {i: [] for i in ids}
        self.leaderships: dict[int, list[Leadership]] = {i: [] for i in ids}
        #: The high watermarks published before their Ready was durable (`publish_hw`).
        self.early_hws: dict[int, list[int]] = {i: [] for i in ids}

    def send(self, key: int, message: Message) -> None:
        self.out.append(message)

    def flush(self) -> None:
        pass

    def publish(self, key: int, rd: Ready) -> None:
        self.readies[key].append(rd)

    def publish_hw(self, key: int, high_watermark: int) -> None:
        self.early_hws[key].append(high_watermark)

    def leadership(self, key: int, change: Leadership) -> None:
        self.leaderships[key].append(change)


class MemoryStore:
    """A replica's store in memory: durable as soon as applied."""

    def __init__(self, log: MemoryLog, hard: dict[int, HardState], node: int,
                 confs: dict[int, ConfState]) -> None:
        self.log, self.hard, self.node, self.confs = log, hard, node, confs

    def apply(self, rd: Ready, term_vote: TermVote | None) -> None:
        rd.apply_log_writes(self.log)
        if term_vote is not None:
            self.hard[self.node] = HardState(*term_vote, rd.high_watermark)
        if rd.conf_state is not None:
            self.confs[self.node] = rd.conf_state

    def sync(self) -> None:
        pass


class Cluster:
    """Cores on in-memory logs under the one driver (`tidelog.replication.driver`); messages
    move only when the test calls ``settle``."""

    def __init__(self, n: int = 3, logs: dict[int, list[Entry]] | None = None,
                 hard: dict[int, HardState] | None = None, max_append_bytes: int = 1 << 20,
                 max_inflight_appends: int = 64, max_inflight_bytes: int = 8 << 20,
                 check_quorum: bool = True, quiesce: bool = False,
                 eager_hw: bool = False, fortify: bool = False,
                 stall_timeouts: int = 1) -> None:
        self.ids = list(range(n))
        self.config = RaftConfig(election_ticks=ELECTION, heartbeat_ticks=1,
                                 max_append_bytes=max_append_bytes,
                                 max_inflight_appends=max_inflight_appends,
                                 max_inflight_bytes=max_inflight_bytes,
                                 check_quorum=check_quorum, quiesce=quiesce,
                                 eager_hw=eager_hw, fortify=fortify,
                                 stall_timeouts=stall_timeouts)
        self.logs = {i: MemoryLog() for i in self.ids}
        for i, entries in (logs or {}).items():
            self.logs[i].append(entries)
        self.hard = dict(hard or {})
        #: Each replica's stored committed configuration (`Ready.conf_state`).
        self.confs: dict[int, ConfState] = {}
        #: The configuration each replica is created with (its bootstrap); all voters unless
        #: a test adds a replica (`add_node`).
        self.bootstrap: dict[int, tuple[list[int], list[int]]] = {}
        self.port = _Port(self.ids)
        self.readies = self.port.readies
        self.driver: Driver[int] = Driver(self.port)
        self.replicas: dict[int, DrivenReplica] = {}
        self.cores: dict[int, RaftCore] = {}
        for i in self.ids:
            self.restart(i)
        self.sent: list[Message] = []

    def restart(self, i: int) -> RaftCore:
        hs = self.hard.get(i, HardState(0, None, 0))
        voters, learners = self.bootstrap.get(i, (self.ids, []))
        core = RaftCore(i, voters, self.logs[i], random.Random(i), self.config, hs,
                        learners=learners, conf_state=self.confs.get(i))
        self.replicas[i] = DrivenReplica(core, MemoryStore(self.logs[i], self.hard, i,
                                                           self.confs), hs)
        self.cores[i] = core
        return core

    def add_node(self) -> RaftCore:
        """A new, empty replica, created as a learner (as a replica added to a running group
        is): it takes part once the leader adds it (`RaftCore.add_learner`)."""
        i = len(self.ids)
        self.ids.append(i)
        self.logs[i] = MemoryLog()
        self.port.readies[i] = []
        self.port.leaderships[i] = []
        self.port.early_hws[i] = []
        self.bootstrap[i] = ([], [i])
        return self.restart(i)

    def flush(self, i: int) -> list[Message]:
        """Run node i's driver until its core has no Ready; what it sent."""
        while (rnd := self.driver.begin([(i, self.replicas[i])])) is not None:
            for write in rnd.writes:
                write.persist()
            self.driver.complete(rnd)
        out, self.port.out = self.port.out, []
        self.sent.extend(out)
        return out

    def settle(self, drop: Filter = lambda m: False, limit: int = 10_000,
               pending: Iterable[Message] = ()) -> None:
        queue = [*pending, *(m for i in self.ids for m in self.flush(i))]
        while queue:
            limit -= 1
            assert limit > 0, "messages never settled"
            m = queue.pop(0)
            if not drop(m):
                self.cores[m.dst].step(m)
                queue.extend(self.flush(m.dst))

    def elect(self, i: int, drop: Filter = lambda m: False) -> RaftCore:
        for _ in range(4 * ELECTION):
            self.cores[i].tick()
            self.settle(drop)
            if self.cores[i].role is Role.LEADER:
                return self.cores[i]
        raise AssertionError(f"node {i} was not elected")

    def heartbeat(self, drop: Filter = lambda m: False) -> None:
        """One leader tick with its heartbeats answered; followers do not tick."""
        for core in self.cores.values():
            if core.role is Role.LEADER:
                core.tick()
        self.settle(drop)

    def propose(self, leader: int, payloads: Iterable[bytes], drop: Filter = lambda m: False
                ) -> list[Entry]:
        out = [self.cores[leader].propose(p, 1) for p in payloads]
        self.settle(drop)
        return out


def to(node: int) -> Filter:
    return lambda m: m.dst == node or m.src == node


def batches(epochs: Iterable[int], start: int = 0) -> list[Entry]:
    return [Entry(start + i, start + i, e, f"e{e}o{start + i}".encode())
            for i, e in enumerate(epochs)]
