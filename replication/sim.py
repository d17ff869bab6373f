"""A deterministic cluster simulator for the Raft core: one seed, one run.

Everything random (derived parameters, network delay/drop/duplication, partitions, crashes,
disk latency, torn writes, client behaviour, each core's election timeouts) comes from one
``random.Random(seed)``, so ``Simulator(SimConfig.derive(seed)).run()`` replays exactly.

Each node runs what a real node runs below the network: the one driver
(`tidelog.replication.driver`) over the real storage log (`storage.Log`, through the node's
`LogStore`), in a directory of its own (on tmpfs when the machine has one). A round's writes
reach the files when the round begins and are synced when the simulated fsync completes; a
crash in between loses them, or tears the last (`sim_disk.SimDisk`), and the restarted node
recovers through the storage loader. The oracle keeps its own copy of what each node has
synced (``durable``) and checks the recovered log against it.

A run has three phases: faults (the nemesis injects failures while clients propose and readers
read), liveness (every fault healed: a leader must appear and every client request must commit,
and every reader read, within a bound in ticks), convergence (all replicas reach the same HW;
then every acknowledged entry must be in every log). Invariants are checked as events happen,
against an oracle of committed entries.

Reads are linearizable: a reader asks a node for a read index (`RaftCore.read_index`), and the
index a Ready releases for it must cover the committed end that any node had published (so
every acknowledged write) before the read was asked, and must itself be committed.
"""

from __future__ import annotations

import bisect
import heapq
import logging
import random
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import NamedTuple

from tidelog.errors import TidelogError
from tidelog.records import RecordInput, build_batch
from tidelog.replication.driver import DrivenReplica, Driver, Leadership, Round
from tidelog.replication.lease import ReadLease, lease_seconds
from tidelog.replication.log_store import LogCodec, LogStore
from tidelog.replication.membership import (
    ConfChange,
    ConfChangeError,
    ConfChangeType,
    ConfState,
    Membership,
    majorities_intersect,
    membership_of,
)
from tidelog.replication.messages import Message
from tidelog.replication.raft import NotLeaderError, RaftConfig, RaftCore, Ready, Role
from tidelog.replication.replica_log import Entry, MemoryLog
from tidelog.replication.sim_disk import SimDisk, close_descriptors
from tidelog.replication.term_votes import TERM_VOTES_FILE, TermVotes
from tidelog.storage import Log, LogConfig

#: Virtual time units per tick of a node's clock (nodes' clocks are skewed around it).
TICK = 10

(_TICK, _DELIVER, _FSYNC, _CLIENT, _NEMESIS, _RESTART, _HEAL_LINKS, _HEAL_ALL, _DEADLINE,
 _READ, _WIPE, _MEMBERSHIP) = range(12)


class InvariantViolation(AssertionError):
    pass


def _learner(node: int) -> Membership:
    return Membership.of((), (node,))


@dataclass(frozen=True)
class SimConfig:
    """Every parameter of a run. ``derive`` draws them from the seed's RNG (``swarm`` also
    switches fault kinds on or off and picks their rates per seed, so a range of seeds explores
    many different mixes rather than one average)."""

    seed: int
    swarm: bool
    nodes: int
    fault_ticks: int
    election_ticks: int
    heartbeat_ticks: int
    clock_skew: float
    net_delay_max: int
    drop_rate: float
    dup_rate: float
    disk_latency_max: int
    nemesis_interval_ticks: int
    crash_weight: int
    partition_weight: int
    asymmetric_share: float
    transfer_weight: int
    retention_weight: int
    clients: int
    client_interval: int
    max_records: int
    max_payload: int
    max_append_bytes: int
    max_inflight_appends: int
    segment_bytes: int
    liveness_requests: int
    liveness_bound_ticks: int
    readers: int
    quiesce: bool
    #: The share of client requests that follow a pause of up to a few election timeouts, so
    #: groups go quiet and wake under faults.
    pause_share: float
    #: Nodes outside the initial configuration, which membership changes may add.
    spares: int
    #: Ticks between two membership changes (0: none). A schedule of their own, so they
    #: thin out none of the other faults.
    membership_interval_ticks: int
    #: Followers are sent each new HW at once (`RaftConfig.eager_hw`, the metadata log's
    #: setting) rather than with the next append or heartbeat.
    eager_hw: bool
    #: Weight of the pause fault: a node's process stops (SIGSTOP) for a while and then runs
    #: on from where it was, its timers unaware of the lost time and what reached it
    #: meanwhile handled only then.
    pause_weight: int
    #: Leadership held by node liveness (`RaftConfig.fortify`, the node's setting): checked
    #: by `Simulator._check_campaign`, and by reads answered under the lease.
    fortify: bool
    #: `RaftConfig.stall_timeouts` of a fortified run: the node's 4 for two seeds in three,
    #: the core's default 1 for the others.
    stall_timeouts: int = 1
    #: A `steady` leader is ticked this many ticks at once, as the node ticks them once a
    #: heartbeat interval (`ReplicaSet._tick_steady`): twice the heartbeat interval's ticks
    #: for odd fortified seeds, one at a time (as before) for the others.
    steady_ticks: int = 1
    #: The same for a steady follower, which the node ticks once an election timeout: twice
    #: the election timeout's ticks for odd fortified seeds.
    following_ticks: int = 1

    @classmethod
    def derive(
        cls, rng: random.Random, seed: int, swarm: bool, nodes: int | None = None,
        fault_ticks: int = 200,
    ) -> SimConfig:
        def on(weight: int) -> int:
            return weight if not swarm or rng.random() < 0.6 else 0

        election_ticks = rng.randint(5, 20) if swarm else 10
        # A round trip (two delays, two syncs) must fit well inside an election timeout, as in
        # any deployment; otherwise check-quorum rightly deposes every leader.
        latency_cap = max(1, election_ticks * TICK // 6)
        config = cls(
            seed=seed,
            swarm=swarm,
            nodes=nodes if nodes is not None else rng.choice((3, 3, 5)) if swarm else 3,
            fault_ticks=fault_ticks,
            election_ticks=election_ticks,
            heartbeat_ticks=rng.randint(1, max(1, election_ticks // 4)) if swarm else 2,
            clock_skew=rng.uniform(0.0, 0.3) if swarm else 0.1,
            net_delay_max=rng.randint(1, latency_cap) if swarm else TICK,
            drop_rate=rng.choice((0.0, rng.uniform(0.0, 0.3))) if swarm else 0.05,
            dup_rate=rng.choice((0.0, rng.uniform(0.0, 0.2))) if swarm else 0.02,
            disk_latency_max=rng.randint(0, latency_cap) if swarm else TICK // 2,
            nemesis_interval_ticks=rng.randint(2, 3 * election_ticks) if swarm else 8,
            crash_weight=on(rng.randint(1, 5)) if swarm else 2,
            partition_weight=on(rng.randint(1, 5)) if swarm else 2,
            asymmetric_share=rng.random() if swarm else 0.3,
            transfer_weight=on(rng.randint(1, 5)) if swarm else 1,
            retention_weight=on(rng.randint(1, 5)) if swarm else 1,
            clients=rng.randint(1, 4) if swarm else 2,
            client_interval=rng.randint(2, 3 * TICK) if swarm else TICK,
            max_records=rng.randint(1, 20) if swarm else 5,
            max_payload=rng.randint(1, 200) if swarm else 40,
            max_append_bytes=rng.randint(1, 600) if swarm else 256,
            max_inflight_appends=rng.randint(1, 8) if swarm else 4,
            # Small segments: rolls, deletions and multi-segment recovery happen in every run.
            segment_bytes=rng.choice((4096, 16384, 1 << 20)) if swarm else 16384,
            liveness_requests=3,
            liveness_bound_ticks=12 * election_ticks,
            # Drawn last, so the parameters above stay what they were for every seed.
            readers=rng.randint(1, 3) if swarm else 1,
            quiesce=rng.random() < 0.8 if swarm else True,
            pause_share=rng.choice((0.0, rng.uniform(0.0, 0.3))) if swarm else 0.05,
            spares=rng.randint(0, 2) if swarm else 1,
            membership_interval_ticks=(on(rng.randint(2, 3 * election_ticks)) if swarm
                                       else 8),
            pause_weight=on(rng.randint(1, 5)) if swarm else 1,
            # Picked by the seed, not drawn: every other seed's run stays what it was.
            eager_hw=swarm and seed % 4 == 3,
            fortify=False,
        )
        # Most seeds run as the node does; a fifth of the quiescing swarm seeds keep
        # quiescence alone. Picked by the seed, not drawn.
        fortify = config.quiesce and not (swarm and seed % 5 == 0)
        return replace(config, fortify=fortify,
                       stall_timeouts=4 if fortify and seed % 3 else 1,
                       steady_ticks=2 * config.heartbeat_ticks if fortify and seed % 2 else 1,
                       following_ticks=2 * config.election_ticks if fortify and seed % 2 else 1)

    def describe(self) -> str:
        return " ".join(f"{f.name}={getattr(self, f.name)}" for f in fields(self))


@dataclass
class SimResult:
    config: SimConfig
    ok: bool
    failure: str = ""
    events: int = 0
    ticks: int = 0
    acked: int = 0
    #: Reads answered to the reader that asked (and checked linearizable).
    reads: int = 0
    #: How often a core went quiet (`RaftConfig.quiesce`).
    quiesces: int = 0
    #: Ticks without a leader: after the faults healed (``elections``, a clean network), and at
    #: cold start or after a leader crashed or stepped down while faults were on (``failovers``).
    elections: list[float] = field(default_factory=list)
    failovers: list[float] = field(default_factory=list)
    #: Membership changes appended, and committed (configurations in the committed chain).
    conf_changes: int = 0
    conf_commits: int = 0


class _Ping(NamedTuple):
    """Node liveness's own heartbeat, one a heartbeat interval per node pair whatever the
    group does: quiesced groups send nothing, and a node must still learn that a peer died.
    ``incarnation`` tells a restart (the node's envelopes say how many ticks its loop ran,
    which a restart sets back: `PeerPacing.report`)."""

    src: int
    dst: int
    incarnation: int


class _Node:
    __slots__ = ("bootstrap", "confs", "core", "disk", "durable", "fresh", "heard", "id",
                 "incarnation", "incarnations", "lease", "owed", "paused_until", "pending",
                 "published_hw", "quiesced", "replica", "reported", "round", "seen", "store",
                 "tick_interval", "ticks", "up", "wiped")

    def __init__(self, node_id: int, tick_interval: int, directory: Path,
                 bootstrap: Membership) -> None:
        self.id = node_id
        #: The configuration its replica is created with: the initial one for the initial
        #: voters; for any other node, and for one whose replica was deleted, itself as a
        #: learner (as the controller creates a replica it adds).
        self.bootstrap = bootstrap
        #: Never a member: it may be added. A node whose replica was deleted is never added
        #: again, and keeps no replica at all: a new one would have forgotten the votes the
        #: old one gave (a restart keeps them), and could vote twice in a term (seeds 190, 785
        #: and 2601 --swarm, when the simulator re-added such nodes or let their fresh replica
        #: answer). Re-adding needs an incarnation id beside the node id in the configuration
        #: (KRaft's directory id, KIP-853), not built.
        self.fresh = node_id not in bootstrap.voters
        self.wiped = False
        #: (committed, newest) configurations of its core when last checked.
        self.confs: tuple[ConfState, ConfState] | None = None
        self.tick_interval = tick_interval
        self.disk = SimDisk(directory)
        #: The oracle's copy of what this node has synced: what a crash must not lose.
        self.durable = MemoryLog()
        self.store: LogStore | None = None
        self.replica: DrivenReplica | None = None
        self.core: RaftCore | None = None
        self.round: Round[_Node] | None = None
        self.incarnation = 0
        self.up = False
        self.published_hw = 0
        self.pending: list[tuple[Entry, int, int]] = []  # (entry, client, request id)
        #: Until when its process is stopped (the pause fault): its events wait till then.
        self.paused_until = 0
        #: Node liveness: at which of its ticks this node last received anything from each
        #: peer (counted in ticks, as the node counts them, so a pause of its own is not
        #: taken for its peers' silence), the
        #: incarnation of the peer it last heard, and when it last reported a peer down to
        #: its core (silent, or restarted).
        self.heard: dict[int, int] = {}
        self.incarnations: dict[int, int] = {}
        self.reported: dict[int, int] = {}
        self.quiesced = False
        self.ticks = 0
        #: The ticks its core was not given yet while `steady` (`SimConfig.steady_ticks`,
        #: `SimConfig.following_ticks`).
        self.owed = 0
        #: The read lease of its replica (`tidelog.replication.lease`), forgotten at a crash.
        self.lease = ReadLease(0)
        #: (role, term, leader) of its core when last looked at (`Simulator._check_campaign`).
        self.seen: tuple[Role, int, int | None] = (Role.FOLLOWER, 0, None)


class _Client:
    __slots__ = ("acked_at", "budget", "done", "id", "idle", "idle_until", "leader_guess",
                 "request", "sent_at")

    def __init__(self, client_id: int) -> None:
        self.id = client_id
        self.request = 0  # id of the outstanding request; 0: none
        self.sent_at: int | None = None  # None: not submitted (or failed), resubmit
        self.leader_guess = 0
        self.done = 0
        self.budget: int | None = None  # requests left in the liveness phase
        #: When its last request committed (None: one is outstanding, or none was made).
        self.acked_at: int | None = None
        #: Time of the liveness phase the client itself let pass (see `Simulator._deadline`),
        #: counted up to ``idle_until`` (its events come in more than one chain after healing).
        self.idle = 0
        self.idle_until = 0

    def let_pass(self, start: int, end: int) -> None:
        """The client waited idle from ``start`` to ``end``; a stretch counted before is not
        counted again."""
        start = max(start, self.idle_until)
        if end > start:
            self.idle += end - start
            self.idle_until = end


class _Reader:
    __slots__ = ("budget", "ctx", "done", "id", "leader_guess", "sent_at")

    def __init__(self, reader_id: int) -> None:
        self.id = reader_id
        self.ctx = 0  # context of the outstanding read; 0: none
        self.sent_at = 0
        self.leader_guess = 0
        self.done = 0
        self.budget: int | None = None  # reads left in the liveness phase


class _Read(NamedTuple):
    """An outstanding read: who asked, where, and the committed end it must cover; when it
    was asked, in which term, and whether its confirmation may renew the lease (no transfer
    under way or begun in the term)."""

    reader: int
    node: int
    bound: int
    asked_at: int
    term: int
    renews: bool


class Simulator:
    def __init__(self, config: SimConfig, rng: random.Random) -> None:
        self.cfg = config
        self.rng = rng
        self.raft_config = RaftConfig(
            election_ticks=config.election_ticks,
            heartbeat_ticks=config.heartbeat_ticks,
            max_append_bytes=config.max_append_bytes,
            max_inflight_appends=config.max_inflight_appends,
            quiesce=config.quiesce,
            eager_hw=config.eager_hw,
            fortify=config.fortify,
            stall_timeouts=config.stall_timeouts,
        )
        self.log_config = LogConfig(segment_bytes=config.segment_bytes,
                                    index_interval_bytes=min(4096, config.segment_bytes // 4))
        #: The initial configuration; spare nodes follow (`SimConfig.spares`).
        self.voters = tuple(range(config.nodes))
        self.ids = tuple(range(config.nodes + config.spares))
        initial = Membership.of(self.voters)
        shm = Path("/dev/shm")
        self.root = Path(tempfile.mkdtemp(prefix="tidelog-sim-",
                                          dir=shm if shm.is_dir() else None))
        self.nodes = [
            _Node(i, max(1, round(TICK * (1 + rng.uniform(-config.clock_skew, config.clock_skew)))),
                  self.root / f"node-{i}", initial if i in self.voters else _learner(i))
            for i in self.ids
        ]
        self.driver: Driver[_Node] = Driver(self)
        #: A read lease's length (`tidelog.replication.lease`), as the node derives it
        #: (`lease_seconds`), in virtual time: the followers'
        #: refusals are counted in their own ticks, so the shortest tick interval is the
        #: one that bounds them (the node's clocks differ by ppm, these by up to 30 %).
        self.lease_duration = lease_seconds(self.raft_config, min(n.tick_interval
                                                                  for n in self.nodes))
        self.clients = [_Client(i) for i in range(config.clients)]
        self.readers = [_Reader(i) for i in range(config.readers)]
        self.reads: dict[int, _Read] = {}
        self.read_ctx = 0
        self.reads_done = 0
        self.now = 0
        self.events = 0
        self._heap: list[tuple[int, int, int, object, int]] = []
        self._seq = 0
        self.blocked: frozenset[tuple[int, int]] = frozenset()
        self._links_gen = 0
        self.faults_on = True
        self.drop_rate = config.drop_rate
        self.finished = False
        # Oracle: the committed chain (every HW any node published), append registry, acks.
        self.chain: list[Entry] = []
        self.chain_bases: list[int] = []
        self.chain_end = 0
        #: The committed end each time it grew, and the term that committed it.
        self.commit_terms: list[int] = []
        self.commit_ends: list[int] = []
        self.registry: dict[tuple[int, int], tuple[int, bytes, int | None]] = {}
        #: The configurations in the committed chain, oldest first.
        self.chain_confs = [ConfState(-1, initial)]
        self.conf_changes = 0
        #: The leader's removal under way: leadership was moved off it first.
        self.leaving: int | None = None
        self.leaders: dict[int, int] = {}
        self.acked: list[Entry] = []
        self.elections: list[float] = []
        self.failovers: list[float] = []
        self.quiesces = 0
        self._leader_lost_at: int | None = 0
        self._lost_to_fault = True  # the cold start happens under the fault phase's network
        self._heal_at = 0

    # ---- scheduling ------------------------------------------------------------------------

    def _at(self, t: int, kind: int, a: object = None, b: int = 0) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, self._seq, kind, a, b))

    def run(self) -> SimResult:
        cfg = self.cfg
        for node in self.nodes:
            self._start(node)
        for c in self.clients:
            self._at(self.rng.randrange(cfg.client_interval), _CLIENT, c)
        for r in self.readers:
            self._at(self.rng.randrange(cfg.client_interval), _READ, r)
        if (cfg.crash_weight + cfg.partition_weight + cfg.transfer_weight + cfg.retention_weight
                + cfg.pause_weight):
            self._at(cfg.nemesis_interval_ticks * TICK, _NEMESIS)
        if cfg.membership_interval_ticks:
            self._at(cfg.membership_interval_ticks * TICK, _MEMBERSHIP)
        self._heal_at = cfg.fault_ticks * TICK
        self._at(self._heal_at, _HEAL_ALL)
        result = SimResult(cfg, ok=True)
        # Crashes make storage warn (torn batches cut, indexes rebuilt): expected here.
        storage_log = logging.getLogger("tidelog.storage")
        level = storage_log.level
        storage_log.setLevel(logging.ERROR)
        try:
            self._loop()
            self._final_check()
        except (InvariantViolation, AssertionError, ValueError, TidelogError) as exc:
            result.ok = False
            result.failure = f"t={self.now} ({self.now // TICK} ticks): {exc}"
        finally:
            storage_log.setLevel(level)
            close_descriptors(self.root)
            shutil.rmtree(self.root, ignore_errors=True)
        result.events = self.events
        result.ticks = self.now // TICK
        result.acked = len(self.acked)
        result.reads = self.reads_done
        result.elections = self.elections
        result.failovers = self.failovers
        result.quiesces = self.quiesces
        result.conf_changes = self.conf_changes
        result.conf_commits = len(self.chain_confs) - 1
        return result

    def _loop(self) -> None:
        heap = self._heap
        pop = heapq.heappop
        while heap and not self.finished:
            t, _, kind, a, b = pop(heap)
            self.now = t
            self.events += 1
            if kind in (_DELIVER, _TICK, _FSYNC):
                node: _Node = self.nodes[a.dst] if kind == _DELIVER else a  # type: ignore
                if node.paused_until > t:  # its process is stopped: later, in this order
                    self._at(node.paused_until, kind, a, b)
                    continue
            if kind == _DELIVER:
                self._deliver(a)  # type: ignore[arg-type]
            elif kind == _TICK:
                self._tick(a, b)  # type: ignore[arg-type]
            elif kind == _FSYNC:
                self._fsync_done(a, b)  # type: ignore[arg-type]
            elif kind == _CLIENT:
                self._client(a)  # type: ignore[arg-type]
            elif kind == _READ:
                self._reader(a)  # type: ignore[arg-type]
            elif kind == _NEMESIS:
                self._nemesis()
            elif kind == _RESTART:
                node = self.nodes[b]
                if not node.up and not node.wiped:
                    self._start(node)
            elif kind == _HEAL_LINKS:
                if b == self._links_gen:
                    self.blocked = frozenset()
            elif kind == _HEAL_ALL:
                self._heal_all()
            elif kind == _WIPE:
                self._wipe(self.nodes[b])
            elif kind == _MEMBERSHIP:
                self._membership()
            else:
                self._deadline(b)
        if not self.finished:
            raise InvariantViolation("the event queue ran dry")

    # ---- nodes -----------------------------------------------------------------------------

    def _start(self, node: _Node) -> None:
        node.up = True
        node.incarnation += 1
        store = node.store = LogStore(
            Log.open(node.disk.directory, self.log_config, clock=lambda: self.now),
            TermVotes(node.disk.directory / TERM_VOTES_FILE),
        )
        node.disk.record_sync()  # what recovery left is what the disk holds
        self._check_recovered(node, store)
        hard_state = store.hard_state()
        node.core = RaftCore(
            node.id, node.bootstrap.voters, store.replica_log,
            random.Random(self.rng.getrandbits(64)), self.raft_config, hard_state,
            LogCodec(store.log), repair_floor=store.log.repair_floor,
            learners=node.bootstrap.learners, conf_state=store.conf_state(),
        )
        node.replica = DrivenReplica(node.core, store, hard_state)
        # The HW is not written with every round (the node checkpoints it every few seconds,
        # as Kafka does): a restarted replica starts from the checkpointed one, never above
        # what it published before, and learns the rest from the leader.
        node.published_hw = node.core.high_watermark
        node.heard = {v: node.ticks for v in self.ids if v != node.id}
        node.incarnations = {}
        node.reported = {}
        node.lease = ReadLease(self.lease_duration)
        node.seen = (Role.FOLLOWER, node.core.term, None)
        node.confs = None
        node.quiesced = False
        self._at(self.now + self.rng.randrange(1, node.tick_interval + 1), _TICK, node,
                 node.incarnation)

    @staticmethod
    def _stored(store: LogStore) -> list[Entry]:
        log = store.replica_log
        start = log.log_start_offset
        return log.read(start, 1 << 62) if start < log.log_end_offset else []

    def _check_holds(self, node: _Node, store: LogStore, stored: list[Entry], what: str) -> None:
        """``stored`` (the node's storage log, read back) holds every batch the oracle saw it
        sync, from its log start on (a lost retention pass may have left that lower)."""
        start = store.log.log_start_offset
        held = {e.base_offset: e for e in stored}
        for e in node.durable.entries:
            if e.base_offset >= start and held.get(e.base_offset) != e:
                raise InvariantViolation(f"node {node.id}: {what} the synced batch at "
                                         f"{e.base_offset} (epoch {e.epoch})")

    def _check_recovered(self, node: _Node, store: LogStore) -> None:
        """The reopened log holds everything the node synced; what it holds beyond survived a
        torn write and is the node's durable log from now on."""
        recovered = self._stored(store)
        self._check_holds(node, store, recovered, "the crash lost")
        durable = node.durable
        node.durable = MemoryLog(store.log.log_start_offset)
        node.durable.append(recovered)
        fresh = [e for e in recovered if e.base_offset >= durable.log_end_offset]
        if fresh:
            self._register(node, fresh, node.durable.epoch_at(fresh[0].base_offset - 1))

    def _crash(self, node: _Node) -> None:
        assert node.core is not None
        if node.core.role is Role.LEADER:
            self._leader_lost(fault=True)
        node.up = False
        node.paused_until = 0
        node.lease.end()
        node.core = node.replica = node.store = None
        node.round = None  # never synced: lost or torn, and nothing in it was promised
        node.disk.crash(self.rng)
        node.incarnation += 1
        self._fail_pending(node)
        for ctx in [ctx for ctx, read in self.reads.items() if read.node == node.id]:
            self._read_over(ctx)

    def _leader_lost(self, fault: bool) -> None:
        if self._leader_lost_at is None:
            self._leader_lost_at = self.now
            self._lost_to_fault = fault

    def _tick(self, node: _Node, incarnation: int) -> None:
        if node.incarnation != incarnation:
            return
        core = node.core
        assert core is not None
        was_leader = core.role is Role.LEADER
        down = self._liveness(node, core) if self.cfg.quiesce else set()
        if not core.steady:
            # What it was owed is dropped, as the node drops it: the timer of a core that
            # stopped supporting its leader was set by whatever ended the support.
            node.owed = 0
            core.tick(down=down)
        elif node.owed + 1 < (self.cfg.steady_ticks if was_leader
                              else self.cfg.following_ticks):
            node.owed += 1
        else:
            core.tick(down=down, ticks=node.owed + 1)
            node.owed = 0
        if was_leader and core.role is not Role.LEADER:
            self._leader_lost(fault=self.faults_on)
        self._after(node, core)
        self._at(self.now + node.tick_interval, _TICK, node, incarnation)

    def _liveness(self, node: _Node, core: RaftCore) -> set[int]:
        """What a node's liveness does on each tick: a ping to every peer each heartbeat
        interval, and `RaftCore.peer_down` for every peer not heard from for an election
        timeout on this node's clock; those peers, for the tick."""
        node.ticks += 1
        if node.ticks % self.cfg.heartbeat_ticks == 0:
            for peer in node.heard:
                self._send(_Ping(node.id, peer, node.incarnation))
        silent = node.ticks - self.cfg.election_ticks
        down = {peer for peer, heard in node.heard.items() if heard <= silent}
        for peer in down:
            node.reported[peer] = self.now
            core.peer_down(peer)
        return down

    def _deliver(self, m: Message | _Ping) -> None:
        node = self.nodes[m.dst]
        core = node.core
        if core is None or (m.src, m.dst) in self.blocked:
            return
        node.heard[m.src] = node.ticks
        if isinstance(m, _Ping):
            if node.incarnations.setdefault(m.src, m.incarnation) != m.incarnation:
                node.incarnations[m.src] = m.incarnation
                node.reported[m.src] = self.now  # it restarted
                core.peer_down(m.src)
                self._after(node, core)
            return
        core.step(m)
        self._after(node, core)

    def _after(self, node: _Node, core: RaftCore) -> None:
        """Invariant checks that concern the core's state, then what may leave at once, then a
        round of the driver."""
        if core.role is Role.LEADER:
            term = core.term
            holder = self.leaders.get(term)
            if holder is None:
                self.leaders[term] = node.id
                self._check_leader_completeness(node, core)
                if self._leader_lost_at is not None:
                    ticks = (self.now - self._leader_lost_at) / TICK
                    (self.failovers if self._lost_to_fault else self.elections).append(ticks)
                    self._leader_lost_at = None
            elif holder != node.id:
                raise InvariantViolation(f"two leaders in term {term}: {holder} and {node.id}")
        if self.cfg.fortify:
            self._check_campaign(node, core)
        if core.quiesced != node.quiesced:
            node.quiesced = core.quiesced
            self.quiesces += node.quiesced
        confs = (core.conf_state, core.latest_conf)
        if confs != node.confs:
            node.confs = confs
            self._check_majorities()
        assert node.replica is not None
        self.driver.send_prompt(((node, node.replica),))
        self._drive(node)

    def _check_campaign(self, node: _Node, core: RaftCore) -> None:
        """Fortification: a follower stands for election (a pre-vote: a transfer's forced
        election needs none) only once its support of its leader ended. So if its leader
        still leads the term and is a voter here, its node must have been reported silent or
        restarted within the last two election timeouts (a lapse counts the timer as run
        out, and the random part of a timeout is at most one more)."""
        seen = node.seen
        node.seen = now = (core.role, core.term, core.leader_id)
        role, term, leader = seen
        if (now[0] is not Role.PRE_CANDIDATE or role is not Role.FOLLOWER or leader is None
                or leader not in core.membership.voters):
            return
        holder = self.nodes[leader].core
        if holder is None or holder.role is not Role.LEADER or holder.term != term:
            return
        window = 2 * self.cfg.election_ticks * node.tick_interval
        if self.now - node.reported.get(leader, -window - 1) > window:
            raise InvariantViolation(
                f"fortification: node {node.id} campaigned while its leader {leader} led term "
                f"{term} and node liveness heard {leader}'s node")

    def _drive(self, node: _Node) -> None:
        """Rounds of the driver until the node has no Ready or one waits for the disk: its
        writes reach the files now, the fsync completes after the disk's latency."""
        assert node.replica is not None
        while node.round is None:
            rnd = self.driver.begin(((node, node.replica),))
            if rnd is None:
                return
            writes = rnd.writes
            if not writes:
                continue
            for write in writes:
                if write.rd.truncate_to is not None or write.rd.reset_to is not None:
                    node.disk.rewritten = True
                write.apply()
            node.round = rnd
            self._at(self.now + self.rng.randint(0, self.cfg.disk_latency_max), _FSYNC,
                     node, node.incarnation)

    def _fsync_done(self, node: _Node, incarnation: int) -> None:
        rnd = node.round
        if node.incarnation != incarnation or rnd is None:
            return
        node.round = None
        for write in rnd.writes:
            write.sync()
            self._persist(node, write.rd)
        node.disk.record_sync()
        self.driver.complete(rnd)
        assert node.core is not None
        self._after(node, node.core)

    # ---- the driver's port -----------------------------------------------------------------

    def send(self, node: _Node, message: Message) -> None:
        self._send(message)

    def flush(self) -> None:
        pass

    def publish(self, node: _Node, rd: Ready) -> None:
        self.publish_hw(node, rd.high_watermark)
        for state in rd.read_states:
            ctx, index = state.ctx, state.index
            read = self._read_over(ctx, done=True)
            if index < read.bound:
                raise InvariantViolation(
                    f"linearizability: node {node.id} answered read {ctx} at {index}, below "
                    f"the committed end {read.bound} published before it was asked")
            if index > self.chain_end:
                raise InvariantViolation(f"node {node.id} answered read {ctx} at {index}, "
                                         f"above the committed end {self.chain_end}")
            if read.renews:
                node.lease.confirmed(read.term, read.asked_at)
        for ctx in rd.failed_reads:
            self._read_over(ctx)

    def publish_hw(self, node: _Node, high_watermark: int) -> None:
        if high_watermark != node.published_hw:
            assert node.store is not None
            node.store.log.update_high_watermark(high_watermark)
            self._publish_hw(node, high_watermark)

    def leadership(self, node: _Node, change: Leadership) -> None:
        """The epoch start the driver read from the Ready is where the term's entries begin
        (the node answers ListOffsets by it, KIP-207)."""
        start = change.epoch_start
        core = node.core
        assert core is not None
        if start is not None and (
            core.epoch_at(start - 1) == change.term
            or (start < core.log_end_offset and core.epoch_at(start) != change.term)
        ):
            raise InvariantViolation(f"node {node.id}: epoch {change.term} said to start at "
                                     f"{start}, but its log disagrees")

    def _send(self, m: Message | _Ping) -> None:
        rng = self.rng
        if self.drop_rate and rng.random() < self.drop_rate:
            return
        self._at(self.now + rng.randint(1, self.cfg.net_delay_max), _DELIVER, m)
        if self.cfg.dup_rate and rng.random() < self.cfg.dup_rate:
            self._at(self.now + rng.randint(1, self.cfg.net_delay_max), _DELIVER, m)

    # ---- the disk and the oracle -----------------------------------------------------------

    def _chain_epoch(self, offset: int) -> int:
        i = bisect.bisect_right(self.chain_bases, offset) - 1
        return self.chain[i].epoch

    def _persist(self, node: _Node, rd: Ready) -> None:
        """The oracle's side of a sync: check the writes, then count them durable."""
        log = node.durable
        if rd.reset_to is not None:
            if rd.reset_to > self.chain_end:
                raise InvariantViolation(f"node {node.id} reset to {rd.reset_to}, above the "
                                         f"committed end {self.chain_end}")
            self._check_not_committed(node, rd.reset_to, "reset")
        if rd.truncate_to is not None:
            self._check_not_committed(node, rd.truncate_to, "truncation")
        if rd.reset_to is not None or rd.truncate_to is not None:
            rd.apply_log_writes(log)  # also appends: the entries are checked after
            appended_from = len(log.entries) - len(rd.entries)
            prev = log.epoch_at(rd.entries[0].base_offset - 1) if rd.entries else None
            self._register(node, log.entries[appended_from:], prev)
        elif rd.entries:
            self._register(node, rd.entries, log.epoch_at(rd.entries[0].base_offset - 1))
            log.append(rd.entries)

    def _check_not_committed(self, node: _Node, offset: int, what: str) -> None:
        """Removing the entry at ``offset`` must not remove a committed entry. By log matching,
        if the first removed entry is not the committed one, no later one is either."""
        if offset >= self.chain_end:
            return
        epoch = node.durable.epoch_at(offset)
        if epoch is not None and epoch == self._chain_epoch(offset):
            raise InvariantViolation(f"node {node.id}: {what} at {offset} removes a committed "
                                     f"entry (committed end {self.chain_end})")

    def _register(self, node: _Node, entries: Sequence[Entry], prev_epoch: int | None) -> None:
        """Log matching, checked on every append: an (offset, epoch) pair names one batch with
        one predecessor epoch, on every node, forever."""
        registry = self.registry
        for e in entries:
            key = (e.base_offset, e.epoch)
            seen = registry.get(key)
            if seen is None or seen[2] is None:
                registry[key] = (e.last_offset, bytes(e.data), prev_epoch)
            # A log that starts at this batch (reset below a leader's log start) cannot say
            # what preceded it; everything else must agree.
            if seen is not None and (
                seen[:2] != (e.last_offset, e.data)
                or (seen[2] != prev_epoch and seen[2] is not None and prev_epoch is not None)
            ):
                raise InvariantViolation(f"log matching: node {node.id} has a different batch at "
                                         f"offset {e.base_offset} epoch {e.epoch}")
            prev_epoch = e.epoch

    def _publish_hw(self, node: _Node, hw: int) -> None:
        if hw < node.published_hw:
            raise InvariantViolation(f"node {node.id}: HW went back from {node.published_hw} "
                                     f"to {hw}")
        log = node.durable
        if hw > log.log_end_offset:
            raise InvariantViolation(f"node {node.id}: HW {hw} beyond its durable log end "
                                     f"{log.log_end_offset}")
        start = max(node.published_hw, log.log_start_offset)
        node.published_hw = hw
        if start < hw:
            end = self.chain_end
            for e in log.read(start, 1 << 62):
                if e.base_offset >= hw:
                    break
                self._commit_entry(node, e)
            if self.chain_end > end:
                # The first to publish an HW is its leader (it publishes before it sends it),
                # whose entry below it is of the term that committed it.
                self.commit_terms.append(log.epoch_at(self.chain_end - 1) or 0)
                self.commit_ends.append(self.chain_end)
        if hw > log.log_start_offset:
            epoch = log.epoch_at(hw - 1)
            held = set()
            for other in self.nodes:
                olog = other.durable
                if olog.log_start_offset >= hw or olog.epoch_at(hw - 1) == epoch:
                    held.add(other.id)
            # The leader counted the configuration in effect on it: the one committed at the
            # HW, or one appended since (which some core's log holds).
            configs = [self._chain_conf_at(hw - 1).membership]
            configs += [n.core.membership for n in self.nodes if n.core is not None]
            if not any(len(held & set(c.voters)) > len(c.voters) // 2 for c in configs):
                raise InvariantViolation(f"node {node.id}: HW {hw} but the durable logs hold "
                                         f"offset {hw - 1} only on {sorted(held)}, no majority "
                                         f"of {configs[0].voters} or of a newer configuration")
        self._ack(node, hw)

    def _commit_entry(self, node: _Node, e: Entry) -> None:
        if e.base_offset >= self.chain_end:
            if e.base_offset != self.chain_end and self.chain_end:
                raise InvariantViolation(f"committed chain has a gap at {self.chain_end}")
            self.chain.append(e)
            self.chain_bases.append(e.base_offset)
            self.chain_end = e.end_offset
            membership = membership_of(e.data)
            if membership is not None:
                self._committed_conf(ConfState(e.base_offset, membership))
            return
        i = bisect.bisect_right(self.chain_bases, e.base_offset) - 1
        if i < 0 or self.chain[i] != e:
            raise InvariantViolation(f"node {node.id} committed a batch at {e.base_offset} "
                                     f"(epoch {e.epoch}) unlike the committed one")

    def _chain_conf_at(self, offset: int) -> ConfState:
        """The configuration committed at ``offset``: the newest chain entry at or below it."""
        for conf in reversed(self.chain_confs):
            if conf.offset <= offset:
                return conf
        return self.chain_confs[0]

    def _committed_conf(self, conf: ConfState) -> None:
        """A configuration entered the committed chain: one change from the one before. The
        node it removes has its replica deleted (`_wipe`), as the controller does once a
        removal is committed. Not a node it merely leaves out: one whose addition a leader
        appended but no commit has yet held may still join, with the replica it has, when a
        crashed member holding that addition leads again (seed 71 --swarm wiped one so, which
        then joined without a replica)."""
        before = self.chain_confs[-1].membership
        if not majorities_intersect(before, conf.membership):
            raise InvariantViolation(f"never two majorities: configuration {conf} committed "
                                     f"after {before}")
        self.chain_confs.append(conf)
        for other in self.nodes:
            if other.id in before.members and other.id not in conf.membership.members:
                self._at(self.now + TICK, _WIPE, None, other.id)

    def _check_majorities(self) -> None:
        """Never two majorities. Every committed configuration a core knows is committed (its
        HW is the leader's, and a reset takes the leader's), so the newest of them is; a core
        whose log holds that one uses it or, one change at a time, a configuration one change
        beyond: never one whose majorities can miss its majorities."""
        cores = [n.core for n in self.nodes if n.core is not None]
        holder = max(cores, key=lambda c: c.conf_state.offset)
        known = holder.conf_state
        epoch = holder.epoch_at(known.offset)
        if known.offset >= 0 and epoch is None:
            return  # its entry is gone from the holder's log (retention, a reset)
        for core in cores:
            latest = core.latest_conf
            if latest.offset < max(known.offset, 0) or (
                    known.offset >= 0 and core.epoch_at(known.offset) != epoch):
                continue  # its log does not hold the newest committed configuration
            if not majorities_intersect(latest.membership, known.membership):
                raise InvariantViolation(f"never two majorities: node {core.id} uses "
                                         f"{latest}, whose majorities miss those of the "
                                         f"committed {known}")

    def _check_leader_completeness(self, node: _Node, core: RaftCore) -> None:
        """A leader of a term holds every entry committed in an earlier term (an entry
        committed in a later one, by votes counted while a candidate's process was stopped,
        a leader of a stale term may lack: it is deposed by the first message it sends)."""
        i = bisect.bisect_left(self.commit_terms, core.term)
        last = (self.commit_ends[i - 1] if i else 0) - 1
        if last >= max(0, core.log_start_offset) and core.epoch_at(last) != self._chain_epoch(
                last):
            raise InvariantViolation(f"leader completeness: node {node.id} leads term "
                                     f"{core.term} without committed offset {last}")

    # ---- clients ---------------------------------------------------------------------------

    def _ack(self, node: _Node, hw: int) -> None:
        keep = []
        for entry, client_id, request in node.pending:
            if entry.last_offset >= hw:
                keep.append((entry, client_id, request))
                continue
            client = self.clients[client_id]
            if node.durable.entry_at(entry.base_offset) == entry:
                self.acked.append(entry)
                if client.request == request:
                    client.request = 0
                    client.done += 1
                    client.acked_at = self.now
            elif client.request == request:
                client.sent_at = None  # truncated by a newer leader: the client retries
        node.pending = keep

    def _fail_pending(self, node: _Node) -> None:
        for _, client_id, request in node.pending:
            client = self.clients[client_id]
            if client.request == request:
                client.sent_at = None
        node.pending = []

    def _client(self, c: _Client) -> None:
        cfg = self.cfg
        rng = self.rng
        if c.budget is not None and c.acked_at is not None:
            c.let_pass(c.acked_at, self.now)  # its request committed, and it made no other
            c.acked_at = None
        if c.request == 0 and (c.budget is None or c.budget > 0):
            self._seq += 1
            c.request = self._seq
            c.sent_at = None
            if c.budget is not None:
                c.budget -= 1
        timeout = 3 * cfg.election_ticks * TICK
        if c.request and (c.sent_at is None or self.now - c.sent_at > timeout):
            node = self.nodes[c.leader_guess]
            core = node.core
            if node.paused_until > self.now:  # the request waits for the node to run
                self._at(node.paused_until, _CLIENT, c)
                return
            if core is None:
                c.leader_guess = rng.randrange(len(self.nodes))
            else:
                value = f"c{c.id}r{c.request}:".encode() + b"x" * rng.randrange(cfg.max_payload)
                count = rng.randint(1, cfg.max_records)
                data = build_batch([RecordInput(value), *[RecordInput(b"")] * (count - 1)])
                try:
                    entry = core.propose(data, count)
                except NotLeaderError as exc:
                    guess = exc.leader_id
                    c.leader_guess = rng.randrange(len(self.nodes)) if guess is None else guess
                else:
                    c.sent_at = self.now
                    node.pending.append((entry, c.id, c.request))
                    self._after(node, core)
        if c.request or c.budget is None or c.budget > 0:
            wait = self._client_wait()
            if c.budget is not None and c.request and c.sent_at is None and any(
                    n.core is not None and n.core.role is Role.LEADER for n in self.nodes):
                # No node took its request yet, and it waits before asking again: not the
                # group's time when a leader was there to ask.
                c.let_pass(self.now, self.now + wait)
            self._at(self.now + wait, _CLIENT, c)

    def _reader(self, r: _Reader) -> None:
        cfg = self.cfg
        rng = self.rng
        timeout = 3 * cfg.election_ticks * TICK
        if r.ctx and self.now - r.sent_at > timeout:
            r.ctx = 0  # lost with a message or a crash: ask again (a late answer is checked)
        if r.ctx == 0 and (r.budget is None or r.budget > 0):
            node = self.nodes[r.leader_guess]
            core = node.core
            if node.paused_until > self.now:  # the read waits for the node to run
                self._at(node.paused_until, _READ, r)
                return
            if core is None:
                r.leader_guess = rng.randrange(len(self.nodes))
            elif node.lease.holds(core, self.now) and rng.random() < 0.5:
                # Answered under the lease, from the HW, with no round (as the node's
                # `LeaderReads.leased_index`): it must cover every write acknowledged so far,
                # and what makes it so must hold: no other leader was elected meanwhile.
                newer = [n.id for n in self.nodes if n.core is not None
                         and n.core.role is Role.LEADER and n.core.term > core.term]
                if newer or core.high_watermark < self.chain_end:
                    raise InvariantViolation(
                        f"lease: node {node.id} answered a read under its lease of term "
                        f"{core.term} at {core.high_watermark} (the committed end is "
                        f"{self.chain_end}) while nodes {newer} led newer terms")
                r.done += 1
                self.reads_done += 1
                if r.budget is not None:
                    r.budget -= 1
            else:
                self.read_ctx += 1
                try:
                    core.read_index(self.read_ctx)
                except NotLeaderError as exc:
                    guess = exc.leader_id
                    r.leader_guess = rng.randrange(len(self.nodes)) if guess is None else guess
                else:
                    r.ctx, r.sent_at = self.read_ctx, self.now
                    renews = core.transferring_to is None and not core.transferred_this_term
                    self.reads[r.ctx] = _Read(r.id, node.id, self.chain_end, self.now,
                                              core.term, renews)
                    self._after(node, core)
        if r.ctx or r.budget is None or r.budget > 0:
            self._at(self.now + self._client_wait(), _READ, r)

    def _client_wait(self) -> int:
        cfg = self.cfg
        rng = self.rng
        if cfg.pause_share and rng.random() < cfg.pause_share:
            return rng.randint(1, 4 * cfg.election_ticks) * TICK
        return rng.randint(1, cfg.client_interval)

    def _read_over(self, ctx: int, done: bool = False) -> _Read:
        """The read ``ctx`` was answered (``done``), failed or lost with its node."""
        read = self.reads.pop(ctx, None)
        if read is None:
            raise InvariantViolation(f"read {ctx} answered twice or never asked")
        reader = self.readers[read.reader]
        if reader.ctx == ctx:
            reader.ctx = 0
            if done:
                reader.done += 1
                self.reads_done += 1
                if reader.budget is not None:
                    reader.budget -= 1
        return read

    # ---- faults ----------------------------------------------------------------------------

    def _nemesis(self) -> None:
        if not self.faults_on:
            return
        cfg = self.cfg
        rng = self.rng
        kinds = (cfg.crash_weight, cfg.partition_weight, cfg.transfer_weight,
                 cfg.retention_weight, cfg.pause_weight)
        kind = rng.choices(range(5), weights=kinds)[0]
        duration = rng.randint(1, 4 * cfg.election_ticks) * TICK
        up = [n for n in self.nodes if n.up]
        # A stopped process takes no request: only a crash reaches it.
        running = [n for n in up if n.paused_until <= self.now]
        if kind == 0 and up:
            node = rng.choice(up)
            self._crash(node)
            self._at(self.now + duration, _RESTART, None, node.id)
        elif kind == 1 and len(self.ids) > 1:
            self._links_gen += 1
            side = set(rng.sample(self.ids, rng.randint(1, len(self.ids) - 1)))
            other = [v for v in self.ids if v not in side]
            pairs = {(a, b) for a in side for b in other}
            if rng.random() >= cfg.asymmetric_share:
                pairs |= {(b, a) for a, b in pairs}
            self.blocked = frozenset(pairs)
            self._at(self.now + duration, _HEAL_LINKS, None, self._links_gen)
        elif kind == 2:
            for n in running:
                if n.core is not None and n.core.role is Role.LEADER:
                    target = rng.choice([v for v in n.core.membership.voters if v != n.id]
                                        or [n.id])
                    if target != n.id:
                        n.core.transfer_leadership(target)
                        self._after(n, n.core)
                    break
        elif kind == 3:
            candidates = [n for n in running if n.round is None]
            if candidates:
                node = rng.choice(candidates)
                assert node.store is not None
                log = node.store.log
                hw = min(node.published_hw, log.high_watermark)
                bases = [e.base_offset for e in node.durable.entries[1:] if e.base_offset < hw]
                if bases:
                    # As the node's retention pass: start moved, old segments deleted, offsets
                    # checkpointed; none of it synced until the next round (a crash undoes it).
                    base = rng.choice(bases)
                    log.maybe_increment_log_start_offset(base)
                    log.delete_old_segments()
                    log.checkpoint()
                    node.durable.advance_log_start(base)
        elif kind == 4 and running:
            node = rng.choice(running)
            node.paused_until = max(node.paused_until, self.now + duration)
        self._at(self.now + cfg.nemesis_interval_ticks * TICK, _NEMESIS)

    def _membership(self) -> None:
        if not self.faults_on:
            return
        for n in self.nodes:
            if (n.core is not None and n.core.role is Role.LEADER
                    and n.paused_until <= self.now):
                self._change_membership(n, n.core)
                break
        self._at(self.now + self.cfg.membership_interval_ticks * TICK, _MEMBERSHIP)

    def _change_membership(self, node: _Node, core: RaftCore) -> None:
        """A step of a replica move, as the controller takes it (`_next_change`); sometimes a
        second one at once, which a core must refuse while the first is pending."""
        for _ in range(2):
            change = self._next_change(node, core)
            if change is None:
                break
            try:
                core.propose_conf_change(change)
            except (ConfChangeError, NotLeaderError):
                break
            self.conf_changes += 1
            if self.rng.random() < 0.5:
                break
        self._after(node, core)

    def _next_change(self, node: _Node, core: RaftCore) -> ConfChange | None:
        """Grow by a fresh node as a learner, promote a learner once it caught up (or now and
        then before: legal, only slower), or shrink by a voter, never below one less than the
        initial size. A leaving leader first hands leadership over (`transfer_leadership`)
        and is removed by its successor; sometimes it removes itself and steps down."""
        rng = self.rng
        membership = core.membership
        leaving, self.leaving = self.leaving, None
        if leaving is not None and leaving != node.id and leaving in membership.voters:
            return ConfChange(ConfChangeType.REMOVE, leaving)
        if membership.learners:
            learner = rng.choice(membership.learners)
            if core.match_of(learner) >= core.high_watermark or rng.random() < 0.2:
                return ConfChange(ConfChangeType.PROMOTE, learner)
            return ConfChange(ConfChangeType.REMOVE, learner) if rng.random() < 0.2 else None
        fresh = [n.id for n in self.nodes if n.fresh and n.id not in membership.members]
        if fresh and (len(membership.voters) < len(self.voters) or rng.random() < 0.5):
            added = rng.choice(fresh)
            self.nodes[added].fresh = False
            return ConfChange(ConfChangeType.ADD_LEARNER, added)
        if len(membership.voters) <= max(1, len(self.voters) - 1):
            return None
        voter = rng.choice(membership.voters)
        if voter == node.id and rng.random() < 0.7:
            core.transfer_leadership(rng.choice([v for v in membership.voters if v != voter]))
            self.leaving = voter
            return None
        return ConfChange(ConfChangeType.REMOVE, voter)

    def _wipe(self, node: _Node) -> None:
        """The replica of a node whose removal committed is deleted, files and all (never to
        be added again: see `_Node.fresh`). Not while a member's newer configuration (a change
        not yet committed) still names it: then later."""
        if node.fresh or node.wiped:
            return
        latest = self.chain_confs[-1].membership
        if node.id in latest.members:
            return
        if any(n.core is not None and n.id in latest.members and node.id in
               n.core.membership.members for n in self.nodes):
            self._at(self.now + self.cfg.election_ticks * TICK, _WIPE, None, node.id)
            return
        if node.up:
            self._crash(node)
        shutil.rmtree(node.disk.directory, ignore_errors=True)
        node.durable = MemoryLog()
        # No replica is left to answer anything: a fresh one answering votes under the old id
        # elected a stale candidate that still counted it (seed 2601 --swarm).
        node.wiped = True

    def _heal_all(self) -> None:
        self.faults_on = False
        self.blocked = frozenset()
        self.drop_rate = 0.0
        for node in self.nodes:
            if not node.up and not node.wiped:
                self._start(node)
        if not any(n.core is not None and n.core.role is Role.LEADER for n in self.nodes):
            self._leader_lost_at = None
            self._leader_lost(fault=False)
        for c in self.clients:
            c.budget = self.cfg.liveness_requests
            self._at(self.now + 1, _CLIENT, c)
        for r in self.readers:
            r.budget = self.cfg.liveness_requests
            self._at(self.now + 1, _READ, r)
        self._at(self.now + self.cfg.liveness_bound_ticks * TICK, _DEADLINE, None, 0)

    def _deadline(self, phase: int) -> None:
        """Phase 0: the liveness bound, after the faults healed. It measures the group, not the
        clients: a client that waits with no request out (after a commit, before its next
        request; or, while a leader is there, before it asks again a node that did not take
        its request: a pause draws up to 4 election timeouts) has that time added to its
        bound. Seed 2029 --swarm spent 164 of its 240 ticks so on one client (its last request
        reached the leader 5 ticks before the bound and committed a tenth of a tick after it),
        while every request committed within 7 ticks of reaching the leader. The addition is
        capped at the bound itself, so a group that never recovers still fails, at twice the
        bound at most."""
        if phase == 0:
            late = [c for c in self.clients if c.request or (c.budget or 0) > 0]
            bound = self.cfg.liveness_bound_ticks * TICK
            due = max((self._heal_at + bound + min(c.idle, bound) for c in late), default=0)
            if self.now < due:
                self._at(due, _DEADLINE, None, 0)
                return
            if late:
                raise InvariantViolation(f"liveness: clients {[c.id for c in late]} still have "
                                         f"uncommitted requests {self.cfg.liveness_bound_ticks} "
                                         f"ticks (and the time they waited idle) after the faults "
                                         f"healed")
            unread = [r.id for r in self.readers if (r.budget or 0) > 0]
            if unread:
                raise InvariantViolation(f"liveness: readers {unread} still wait for reads "
                                         f"{self.cfg.liveness_bound_ticks} ticks after the "
                                         f"faults healed")
            self._at(self.now + self.cfg.liveness_bound_ticks * TICK, _DEADLINE, None, 1)
            return
        members = self._members()
        hws = {n.published_hw for n in members}
        ends = {n.durable.log_end_offset for n in members}
        if len(hws) != 1 or hws != ends:
            raise InvariantViolation(f"convergence: HWs {sorted(hws)} and log ends "
                                     f"{sorted(ends)} differ after healing")
        awake = [n.id for n in members if n.core is not None and not n.core.quiesced]
        if self.cfg.quiesce and awake:
            raise InvariantViolation(f"quiescence: nodes {awake} still tick with nothing to do "
                                     f"{self.cfg.liveness_bound_ticks} ticks after the last "
                                     f"request")
        self.finished = True

    def _members(self) -> list[_Node]:
        """The nodes of the newest committed configuration (removed ones hold no replica)."""
        members = self.chain_confs[-1].membership.members
        return [n for n in self.nodes if n.id in members]

    def _final_check(self) -> None:
        for entry in self.acked:
            for node in self._members():
                if entry.base_offset >= node.durable.log_start_offset and \
                        node.durable.entry_at(entry.base_offset) != entry:
                    raise InvariantViolation(f"acknowledged batch at {entry.base_offset} "
                                             f"(epoch {entry.epoch}) lost on node {node.id}")
        for node in self.nodes:
            if node.store is not None and node.round is None:
                stored = self._stored(node.store)
                self._check_holds(node, node.store, stored, "the storage log lost")


def run_seed(seed: int, swarm: bool = False, nodes: int | None = None,
             fault_ticks: int = 200) -> SimResult:
    rng = random.Random(seed)
    config = SimConfig.derive(rng, seed, swarm, nodes, fault_ticks)
    return Simulator(config, rng).run()
