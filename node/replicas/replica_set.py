"""The replicas a node hosts and the loops that drive their Raft cores.

Everything that touches a core runs on the asyncio loop. The Ready loop runs the one Raft
driver (`tidelog.replication.driver`, the same that the simulator runs): each round collects
the Readies of every partition that has one, sends a leader's appends at once, applies and
fsyncs all the writes in a single trip to the disk thread (group commit: one fsync per touched
log per round, however many requests arrived meanwhile), and only then sends the rest of
their messages and publishes their high watermarks. This class is the driver's port: it
queues messages into one frame per peer, publishes, and tells each replica about its
leadership as the driver reads it from the Readies.

What happens once a partition's Ready is published (the controller applying its committed
records) is not this module's business: a hook registered with `on_published` runs then.

Thousands of partitions: idle groups quiesce (`tidelog.replication.raft`, "Quiescence"), and
nothing here costs per hosted partition while they do. The tick loop ticks only the replicas
whose cores are awake; the Ready loop looks only at the replicas touched since its last round
(stepped, ticked, proposed to: ``_dirty``), all of them only after `wake`. Node liveness stands
in for the heartbeats of quiesced groups: every envelope from a peer counts as hearing from it,
each node sends every peer an envelope a few times an election timeout from a thread of its own
(`tidelog.node.replicas.liveness`: a busy loop does not silence the node), and a peer silent for an
election timeout of this node's ticks is reported (`RaftCore.peer_down`) to the replicas it
leads here, as is a peer whose node restarted (its tick count went back). Awake groups are
held by it too (`RaftConfig.fortify`): their followers' timers stand still while the leader's
node is heard, and leaders heartbeat only on demand.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import time
from collections.abc import Callable, Collection, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import grpc

from tidelog import errors
from tidelog.coordinator.controller import METADATA_TP
from tidelog.errors import CorruptMessageError
from tidelog.node.config import NodeConfig
from tidelog.node.edge.security import PeerDialer
from tidelog.node.replicas.liveness import LivenessBeacon
from tidelog.node.replicas.loop_owned import loop_owned_dict
from tidelog.node.replicas.partition import PartitionReplica
from tidelog.node.replicas.reads import wait_read
from tidelog.node.replicas.strays import delete_directory, delete_strays
from tidelog.node.replicas.transport import CHANNEL_OPTIONS, Outgoing, PeerLink, messages_of
from tidelog.replication import (
    AppendResponse,
    Heartbeat,
    HeartbeatResponse,
    Message,
    PreVoteRequest,
    RaftConfig,
    Ready,
    Role,
    VoteRequest,
)
from tidelog.replication.driver import Driver, Leadership, Write
from tidelog.replication.log_store import LogStore
from tidelog.replication.pacing import PeerPacing, tick_paced
from tidelog.replication.term_votes import TERM_VOTES_FILE, TermVotes
from tidelog.storage import LogConfig
from tidelog.storage.fs_sync import FilesystemSync
from tidelog.types import TopicPartition
from tidelog.v1 import raft_pb2 as rpb

log = logging.getLogger(__name__)

_FLUSH_THREADS = 8
#: `RaftConfig.stall_timeouts`: election timeouts (1.2 s at the default 300 ms) a group waits
#: for word before asking whether a message was lost. A node's links are gRPC streams, which
#: lose messages only when they break; a longer silence at a live peer is its load (fsyncs
#: and loops queued behind thousands of groups), which questions and resends only add to: at
#: 1,000 partitions on a loaded machine they were most of the heartbeat traffic. Kafka's
#: follower waits replica.fetch.backoff.ms (1 s) after a failed fetch in the same way.
STALL_TIMEOUTS = 4
#: Node liveness's envelopes per election timeout (each heartbeat interval, when that is
#: more often): a peer is found silent after an election timeout without one, so it misses
#: this many in a row first, and a live peer is taken for dead only when an envelope is late
#: by two thirds of an election timeout (200 ms at the defaults). At every heartbeat interval
#: (six, which tolerated 250 ms), the envelopes were a quarter of an idle node's CPU at 5,000
#: partitions. Raft's safety does not rest on them (`tidelog.node.replicas.liveness`); the
#: simulator pings at least four times an election timeout (`tidelog.replication.sim`).
LIVENESS_BEATS_PER_ELECTION_TIMEOUT = 3
#: Election timeouts a new partition's other replicas leave its preferred one to stand first.
_CREATION_DEFERRAL_TIMEOUTS = 3
#: How soon, then how often at most, a replica whose disk refused a write tries again.
_STORAGE_RETRY_S = 1.0
_STORAGE_RETRY_MAX_S = 8.0
#: New replicas opened per trip to the disk thread (`_open_queued`): a few tens of ms of
#: opens, so the rounds of writes queued behind them wait no longer than an fsync or two.
_OPEN_SLICE = 32
#: Vote requests kept per replica still being opened (a candidate's first tries).
_EARLY_VOTES_KEPT = 4
#: New replicas that may be settling (electing, catching up: awake) before the opener waits
#: for some to go quiet (`_open_queued`), and how long it waits at most for them.
_SETTLING_LIMIT = 256
_SETTLING_WAIT_S = 5.0
#: Logs to fsync in a round from which one ``syncfs`` of their filesystem replaces their
#: fsyncs (`tidelog.storage.fs_sync`): 16 files took 10.9 ms fsynced side by side and 4.0 ms
#: by syncfs on the shared VM; 3 took 0.4-0.5 ms either way.
_SYNCFS_MIN_LOGS = 8

T = TypeVar("T")
#: A partition's replicas (the preferred leader first), its topic's configs, and the replicas
#: a reassignment is adding (created as learners).
_Assignment = tuple[tuple[int, ...], dict[str, str], tuple[int, ...]]
#: What the disk thread needs to open a replica: its partition, replicas, log config (worked out
#: on the loop, from state the loop owns) and the replicas being added.
_Opening = tuple[TopicPartition, tuple[int, ...], LogConfig, tuple[int, ...]]


class ReplicaSet:
    """The hosted replicas, the links to peers, the disk thread, and the tick and Ready loops."""

    def __init__(self, config: NodeConfig) -> None:
        self.config = config
        self.node_id = config.node_id
        #: The replicas in service. The loop's alone: another thread gets a snapshot taken
        #: on the loop (`tidelog.node.replicas.loop_owned`).
        self.partitions: dict[TopicPartition, PartitionReplica] = loop_owned_dict(
            "ReplicaSet.partitions")
        self.links: dict[int, PeerLink] = {}
        #: Links to unregistered peers while they close (the loop keeps only weak references).
        self._closing_links: set[asyncio.Task[None]] = set()
        self.dialer = PeerDialer(config)
        #: The only writer of every log: Ready rounds, replica creation and deletion,
        #: checkpoints and retention all run here, one after another.
        self.disk = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"disk-{self.node_id}")
        #: The term and vote of every hosted group, one file for all (one replacement of it
        #: per round of writes, however many groups changed term in the round).
        self.term_votes = TermVotes(config.data_dir / TERM_VOTES_FILE)
        #: Helpers of the disk thread, for work of its own it runs side by side: a round of
        #: writes (`_persist_all`), a slice of new replicas, the checkpoint pass.
        self.flushers = ThreadPoolExecutor(
            max_workers=_FLUSH_THREADS, thread_name_prefix=f"flush-{self.node_id}"
        )
        #: One syncfs of the data directory's filesystem for a round that touched many logs
        #: (None where the platform lacks a sound one); opened with the first such round.
        self._fs_sync: FilesystemSync | None = None
        self._fs_sync_opened = False
        self._work = asyncio.Event()
        self._driver: Driver[PartitionReplica] = Driver(self)
        self._outbox: dict[int, Outgoing] = {}
        self._published_hooks: dict[TopicPartition, Callable[[], None]] = {}
        self._topic_published_hooks: dict[str, Callable[[PartitionReplica], None]] = {}
        self._round_hooks: list[Callable[[], None]] = []
        #: Replicas whose disk refused a write, and the task that brings each back.
        self._offline: dict[TopicPartition, asyncio.Task[None]] = {}
        #: Replicas assigned here whose logs the disk refused to create, and their retries.
        self._unopened: dict[TopicPartition, asyncio.Task[None]] = {}
        #: The last retry delay of a replica that came back, and when it came back.
        self._storage_retry: dict[TopicPartition, tuple[float, float]] = {}
        #: Replicas assigned here that wait to be opened, those being opened now (a removal
        #: takes a replica out of it), and the task that opens them (`add_replica`).
        self._to_open: dict[TopicPartition, _Assignment] = loop_owned_dict("ReplicaSet._to_open")
        self._opening: set[TopicPartition] = set()
        self._opener: asyncio.Task[None] | None = None
        #: Replicas the opener put in service that have not gone quiet yet.
        self._settling: set[PartitionReplica] = set()
        #: The nodes' dynamic topic defaults that apply here (IncrementalAlterConfigs of the
        #: node resource: every node's, then this node's own): between the properties' and a
        #: topic's own configs.
        self.dynamic_defaults: dict[str, str] = {}
        #: Vote requests that came for replicas still being opened (`_keep_early`).
        self._early: dict[TopicPartition, list[Message]] = {}
        self.raft_config = RaftConfig(
            election_ticks=max(2, config.election_timeout_ms // config.raft_tick_ms),
            heartbeat_ticks=max(1, config.heartbeat_interval_ms // config.raft_tick_ms),
            quiesce=True,
            fortify=True,
            stall_timeouts=STALL_TIMEOUTS,
        )
        #: Every metadata voter applies what commits (`controller_driver`), so its followers
        #: are sent each new HW at once (`RaftConfig.eager_hw`); metadata commits are rare.
        self._metadata_raft_config = dataclasses.replace(self.raft_config, eager_hw=True)
        #: Replicas whose cores are not quiesced and not `steady`: the tick loop ticks them
        #: each tick.
        self._awake: set[PartitionReplica] = set()
        #: Replicas whose cores lead and are `steady` (their ticks only count between two
        #: heartbeat intervals), with the tick they were last ticked at: the tick loop ticks
        #: them once a heartbeat interval, with the ticks since (`_tick_steady`). During a
        #: produce over 1,000 partitions 150-250 groups were awake on a node, and a tick of
        #: each every 10 ms was up to a fifth of the main thread.
        self._steady: dict[PartitionReplica, int] = {}
        #: The same for steady followers (they support their leader): their timers only count
        #: toward the stall question, asked after `STALL_TIMEOUTS` election timeouts, so the
        #: tick loop ticks them once an election timeout. Two in three awake replicas of a
        #: produce are followers; ticked each heartbeat interval, they were most of the visits.
        self._following: dict[PartitionReplica, int] = {}
        #: The replicas the driver saw win leadership and not lose it since (`leadership`):
        #: what the chores over the partitions led here walk (`Housekeeping`), a third of the
        #: replicas of a 3-node cluster instead of all. One may have stopped leading since
        #: (taken offline, its core built again): they check `is_leader`.
        self.led: set[PartitionReplica] = set()
        #: Counts the changes of the replicas in service (one registered, removed, taken
        #: offline or back, its log reopened): a chore over their logs that found nothing to do
        #: need not look again until it changes (`tidelog.node.replicas.scrubber`).
        self.changes = 0
        #: Counts the changes of which peers node liveness finds silent (`_liveness`): the
        #: in-sync replicas of every quiet partition led here change with it, so the leaders'
        #: announcements look at all of them again (`Housekeeping`).
        self.liveness_changes = 0
        #: Replicas whose announced state may have changed while their cores were not awake:
        #: those that just went quiet (a quiet group's in-sync replicas are its followers'
        #: live nodes, no longer those that caught up lately) and those whose log start
        #: DeleteRecords moved. The next announcement looks at them with the awake ones
        #: (`Housekeeping`), and empties it.
        self.restated: set[PartitionReplica] = set()
        #: Replicas the next round of the Ready loop looks at; every replica when ``_all``.
        self._dirty: set[PartitionReplica] = set()
        self._all = True
        #: Node liveness: the tick of the tick loop at which each peer was last heard from,
        #: and the peers silent for an election timeout. Counted in ticks, not seconds, for
        #: the reason ticks are (`tick_loop`): a node whose own loop stalled must not take
        #: the envelopes still queued for it for silence.
        self._ticks = 0
        #: The tick loop's sleep: the ticks counted when it began, when the last of them was
        #: due (`time.monotonic`), and how many ticks it lasts (one while a core is awake);
        #: and what wakes the loop then (`_hurry` brings it forward).
        self._window: tuple[int, float, int] = (0, 0.0, 1)
        self._alarm: tuple[asyncio.Future[None], asyncio.TimerHandle] | None = None
        self._heard: dict[int, int] = {}
        #: Heartbeats and heartbeat answers of Raft groups this node sent (node liveness's
        #: envelopes not counted): per proposal (`PartitionReplica.proposals`), what the
        #: groups' heartbeats cost a write (bench/partitions.py reads both from the metrics).
        self.heartbeat_items = 0
        self._down: set[int] = set()
        #: The peers' tick counts, as their liveness threads report them: the timers that wait
        #: on a peer run at its pace (`tidelog.replication.pacing`).
        beat_ticks = max(self.raft_config.heartbeat_ticks,
                         self.raft_config.election_ticks // LIVENESS_BEATS_PER_ELECTION_TIMEOUT)
        self._pacing = PeerPacing(self.raft_config, report_ticks=beat_ticks)
        #: When the tick loop last turned (`time.monotonic`): the liveness thread vouches for
        #: this node only while it is recent.
        self.loop_turned = time.monotonic()
        self.beacon = LivenessBeacon(
            self.node_id,
            {p: a for p, a in config.peers.items() if p != self.node_id},
            self.dialer,
            beat_ticks * config.raft_tick_ms / 1000,
            lambda: self.loop_turned,
            self.tick_count,
        )

    def connect_peer(self, address: str) -> grpc.aio.Channel:
        """A channel to a peer's node-to-node listener, as this node's settings secure it."""
        return self.dialer.channel(address, CHANNEL_OPTIONS)

    def start_links(self) -> None:
        for peer_id, address in self.config.peers.items():
            if peer_id != self.node_id:
                self.link_peer(peer_id, address)
        self.beacon.start()

    def link_peer(self, peer_id: int, address: str) -> None:
        """Stream to `peer_id` at `address`: a new link, or the link redirected when the peer
        moved (a node learned from the metadata, registered at a new address); the liveness
        beacon follows."""
        link = self.links.get(peer_id)
        if link is not None:
            if link.address != address:
                link.redirect(address)
                self.beacon.add_peer(peer_id, address)
            return
        link = PeerLink(self.node_id, peer_id, address, self.dialer)
        link.start()
        self.links[peer_id] = link
        self._heard[peer_id] = self.tick_count()
        self.beacon.add_peer(peer_id, address)

    def unlink_peer(self, peer_id: int) -> None:
        """Stop streaming to a peer that left the cluster for good (unregistered): its link,
        and the beacon's, would otherwise redial it, and warn that the link broke, for as
        long as this node runs."""
        self.beacon.remove_peer(peer_id)
        self._heard.pop(peer_id, None)
        link = self.links.pop(peer_id, None)
        if link is not None:
            task = asyncio.get_running_loop().create_task(link.close())
            self._closing_links.add(task)
            task.add_done_callback(self._closing_links.discard)

    async def close(self) -> None:
        """After the loops stopped: close the links, then every log on the disk thread."""
        self.beacon.stop()
        for link in self.links.values():
            await link.close()
        tasks = [*self._offline.values(), *self._unopened.values()]
        if self._opener is not None:
            tasks.append(self._opener)
        for task in tasks:
            task.cancel()
        loop = asyncio.get_running_loop()
        for replica in list(self.partitions.values()):
            replica.abandon()
            try:
                await loop.run_in_executor(self.disk, replica.log.close)
            except OSError as exc:  # the next start recovers it, as after a crash
                log.warning("%s: the log was not closed cleanly: %s", replica.tp, exc)
        self.disk.shutdown(wait=True)
        self.flushers.shutdown(wait=True)
        if self._fs_sync is not None:
            self._fs_sync.close()

    def wake(self) -> None:
        """Cores were changed from outside (a leadership transfer, a new core): run a round of
        the Ready loop over every replica."""
        self._all = True
        self._work.set()

    def wake_touched(self) -> None:
        """New proposals are waiting in some cores (`PartitionReplica.propose` marks its
        replica): run a round of the Ready loop over the replicas touched since the last."""
        self._work.set()

    def changed(self, replica: PartitionReplica) -> None:
        """`replica`'s core was changed from outside (a proposal, a leadership transfer): what
        it has to send leaves with the next round of the Ready loop, which looks at it alone
        (`wake` would have it look at every replica)."""
        self._touch(replica)
        self._work.set()

    def _touch(self, replica: PartitionReplica) -> None:
        self._dirty.add(replica)
        core = replica.core
        if core.quiesced:
            self._went_quiet(replica)
        elif core.steady:
            # Still steady in the same role, it keeps the tick it was last ticked at: its
            # timer runs on. In the other role, the ticks since are dropped, as below.
            self._awake.discard(replica)
            if core.role is Role.LEADER:
                self._following.pop(replica, None)
                self._steady.setdefault(replica, self._ticks)
            else:
                self._steady.pop(replica, None)
                self._following.setdefault(replica, self._ticks)
        else:
            # The ticks it had not been given since it was last ticked are dropped: its
            # timer only runs slower for it, and whatever ended its support (`_lapse`) set
            # the timer itself.
            self._steady.pop(replica, None)
            self._following.pop(replica, None)
            if not self._awake and self._alarm is not None:
                self._hurry()
            self._awake.add(replica)

    def _went_quiet(self, replica: PartitionReplica) -> None:
        """`replica`'s core is quiesced: the tick loop no longer ticks it, and the next
        announcement says what its leadership is now (`restated`)."""
        self._awake.discard(replica)
        self._steady.pop(replica, None)
        self._following.pop(replica, None)
        if replica.is_leader:
            self.restated.add(replica)

    def on_published(self, tp: TopicPartition, hook: Callable[[], None]) -> None:
        """Run `hook` on the loop each time a Ready of `tp` has been published."""
        self._published_hooks[tp] = hook

    def on_published_topic(self, topic: str, hook: Callable[[PartitionReplica], None]) -> None:
        """Run `hook` on the loop with the replica each time a Ready of a partition of `topic`
        has been published (partitions come and go with the topic: no hook per partition)."""
        self._topic_published_hooks[topic] = hook

    def before_round(self, hook: Callable[[], None]) -> None:
        """Run `hook` on the loop before each round of the Ready loop takes the Readies: what
        it proposes joins that round, so requests that came while the previous round was on
        disk can be appended together (the group coordinator's group commit)."""
        self._round_hooks.append(hook)

    # ---- replicas --------------------------------------------------------------------------

    def validate_topic_configs(self, configs: dict[str, str]) -> None:
        """Raises INVALID_CONFIG (40) for a topic config storage would refuse."""
        self._log_config(configs)

    def static_topic_defaults(self) -> dict[str, str]:
        """The topic defaults of this node's properties (its own settings of topic-config
        names and the `extra` ones), before any dynamic config."""
        return {
            "segment.bytes": str(self.config.segment_bytes),
            "index.interval.bytes": str(self.config.index_interval_bytes),
            "segment.ms": str(self.config.segment_ms),
            "retention.ms": str(self.config.retention_ms),
            "retention.bytes": str(self.config.retention_bytes),
            **self.config.extra,
        }

    def _log_config(self, topic_configs: dict[str, str]) -> LogConfig:
        return LogConfig.from_kafka_props(
            {**self.static_topic_defaults(), **self.dynamic_defaults, **topic_configs}
        )

    def reconfigure(self, tp: TopicPartition, configs: dict[str, str]) -> None:
        """A topic's configs, or the defaults under them, changed while the node runs: the
        replica's log takes them from its next append or retention pass (and a replica still
        waiting to be opened opens with them)."""
        queued = self._to_open.get(tp)
        if queued is not None:
            self._to_open[tp] = (queued[0], configs, queued[2])
        replica = self.partitions.get(tp)
        if replica is not None:
            replica.log.config = self._log_config(configs)

    def open_replica(
        self, tp: TopicPartition, replicas: tuple[int, ...], configs: dict[str, str],
        adding: tuple[int, ...] = (),
    ) -> None:
        """Open (or create) one replica on the calling thread, the set's own, and put it in
        service at once (a test's single replica). A node opens its replicas at start with
        `open_replicas`, and while it runs with `add_replica`: both off the loop."""
        if tp not in self.partitions:
            self._register(self._new_replica(tp, replicas, self._log_config(configs), adding))

    async def open_replicas(
        self, assigned: Iterable[tuple[TopicPartition, tuple[int, ...], dict[str, str],
                                       tuple[int, ...]]],
    ) -> None:
        """For the node's start, before the loops run: open (or create) the replicas
        `assigned` here (partition, replicas, topic configs, replicas being added) on the disk
        thread, one after another, then put them in service on the loop, whose registry it is
        (its requests read it meanwhile). Raises the OSError of a log the disk refused to
        open: the node does not start."""
        wanted: list[_Opening] = [(tp, replicas, self._log_config(configs), adding)
                  for tp, replicas, configs, adding in assigned if tp not in self.partitions]
        opened = await asyncio.get_running_loop().run_in_executor(
            self.disk, lambda: [self._new_replica(*item) for item in wanted])
        for replica in opened:
            self._register(replica)

    def _new_replica(
        self, tp: TopicPartition, replicas: tuple[int, ...], log_config: LogConfig,
        adding: tuple[int, ...] = (),
    ) -> PartitionReplica:
        """The replica with its log opened (created when new): touches the disk and nothing
        the loop owns (its config comes worked out by the loop), so it runs on any thread."""
        directory = self.config.data_dir / f"{tp.topic}-{tp.partition}"
        seed = hash((self.node_id, tp.topic, tp.partition)) & 0xFFFFFFFF
        return PartitionReplica(
            tp, self.node_id, replicas, directory, log_config,
            self._metadata_raft_config if tp == METADATA_TP else self.raft_config, seed,
            self.term_votes, sync_writes=self.config.log_flush_policy == "always",
            tick_s=self.config.raft_tick_ms / 1000, touched=self.changed,
            peer_live=self.peer_live, adding=adding,
            replica_lag_max_ms=self.config.replica_lag_max_ms,
            verify_transactions=self.config.transaction_partition_verification_enable,
        )

    def _register(self, replica: PartitionReplica) -> None:
        """Put an opened replica in service: its messages are stepped from now on."""
        self.partitions[replica.tp] = replica
        self.changes += 1
        core = replica.core
        early = self._early.pop(replica.tp, ())
        if core.term == 0 and core.log_end_offset == 0:
            # A new partition: the vote requests that came while it was being opened are
            # answered (it promised nobody anything yet). Its preferred replica stands at once
            # (unless it just voted in a real election), so the topic is led without waiting
            # an election timeout, and by the replica meant to lead it; the others give it a
            # few election timeouts before they would stand themselves (its node may apply
            # the new topic late: a loaded node was 0.4 s late in a test).
            for message in early:
                core.step(message)
            if replica.replicas[0] != self.node_id:
                core.defer_election(_CREATION_DEFERRAL_TIMEOUTS)
            elif core.term == 0:
                core.campaign()  # not a learner's: a core only campaigns as a voter
        self._touch(replica)
        self._work.set()

    def add_replica(
        self, tp: TopicPartition, replicas: tuple[int, ...], configs: dict[str, str],
        adding: tuple[int, ...] = (),
    ) -> None:
        """A partition assigned here while the node runs (on the loop): its log is opened on
        the disk thread, a slice of new replicas at a time (`_open_queued`), never on the loop.
        An open costs milliseconds (two directory fsyncs to create a log): a topic of 1,000
        partitions opened on the loop blocked it for 5-50 s, long enough for its peers to take
        the node for dead (node liveness) and for clients to get no Metadata answer, and the
        elections that followed fed on themselves. A disk that refuses to create a log leaves
        the replica to a retry every few seconds, rather than failing the node."""
        if tp in self.partitions or tp in self._unopened or tp in self._opening:
            return
        self._to_open[tp] = (replicas, configs, adding)
        if self._opener is None:
            self._opener = asyncio.create_task(self._open_queued())

    async def _open_queued(self) -> None:
        """Open the replicas `add_replica` queued, `_OPEN_SLICE` at a time on the disk thread
        (in order with the rounds of writes, which go on between slices), their opens side by
        side on the flush helpers (ext4 folds their directory fsyncs into shared journal
        commits); each slice goes into service on the loop as soon as it is open.

        A new topic of thousands of partitions is opened and elected in waves: while
        `_SETTLING_LIMIT` replicas it opened are still awake, it waits for some to go quiet
        (`_SETTLING_WAIT_S` at most: a group with a follower down never does). Every awake
        group costs its nodes a tick every 10 ms, heartbeats every 50 ms and its rounds: 5,000
        of them at once saturated each node's loop (a tick took hundreds of ms), leaders'
        heartbeats came late, followers stood, and the elections fed themselves (5,000
        partitions were not all led in 300-600 s). The nodes open a topic's partitions in the
        same order, so their waves hold the same groups."""
        loop = asyncio.get_running_loop()
        try:
            while self._to_open:
                await self._settle()
                batch = list(itertools.islice(self._to_open.items(), _OPEN_SLICE))
                for tp, _ in batch:
                    del self._to_open[tp]
                self._opening = {tp for tp, _ in batch}
                opened = await loop.run_in_executor(self.disk, self._open_slice, [
                    (tp, replicas, self._log_config(configs), adding)
                    for tp, (replicas, configs, adding) in batch
                ])
                wanted, self._opening = self._opening, set()
                for (tp, (replicas, configs, adding)), result in zip(batch, opened, strict=True):
                    if isinstance(result, OSError):
                        self._early.pop(tp, None)
                        if tp in wanted:
                            log.error("%s: the replica cannot be created (%s): retrying until "
                                      "the disk takes writes", tp, result)
                            self._unopened[tp] = asyncio.create_task(
                                self._open_later(tp, replicas, configs, adding))
                    elif tp in wanted:
                        self._register(result)
                        self._settling.add(result)
                    else:  # removed while it was being opened
                        result.abandon()
                        self.disk.submit(_delete_replica_files, result)
        finally:
            self._opener = None

    async def _settle(self) -> None:
        """Until fewer than `_SETTLING_LIMIT` of the replicas the opener put in service are
        awake, or `_SETTLING_WAIT_S` passed (the stragglers are then no longer waited for)."""
        deadline = time.monotonic() + _SETTLING_WAIT_S
        while True:
            self._settling = {r for r in self._settling if not r.closed and not r.core.quiesced}
            if len(self._settling) < _SETTLING_LIMIT:
                return
            if time.monotonic() >= deadline:
                self._settling.clear()
                return
            await asyncio.sleep(self.raft_config.heartbeat_ticks * self.config.raft_tick_ms / 1000)

    def _open_slice(
        self, batch: list[_Opening]
    ) -> list[PartitionReplica | OSError]:
        """On the disk thread: a slice of new replicas opened side by side on the flush
        helpers; a log the disk refused to create is its OSError."""

        def open_one(item: _Opening) -> PartitionReplica | OSError:
            try:
                return self._new_replica(*item)
            except OSError as exc:
                return exc

        return list(self.flushers.map(open_one, batch))

    async def _open_later(
        self, tp: TopicPartition, replicas: tuple[int, ...], configs: dict[str, str],
        adding: tuple[int, ...],
    ) -> None:
        delay = _STORAGE_RETRY_S
        loop = asyncio.get_running_loop()
        try:
            while True:
                await asyncio.sleep(delay)
                try:
                    replica = await loop.run_in_executor(
                        self.disk, self._new_replica, tp, replicas,
                        self._log_config(configs), adding)
                except OSError as exc:
                    log.warning("%s: the replica still cannot be created (%s)", tp, exc)
                    delay = min(2 * delay, _STORAGE_RETRY_MAX_S)
                    continue
                log.warning("%s: the replica is created", tp)
                self._register(replica)
                self.wake()
                return
        finally:
            del self._unopened[tp]

    def hosts(self, tp: TopicPartition) -> bool:
        """Whether a replica of `tp` is here, or on its way (queued, being opened, retried)."""
        return (tp in self.partitions or tp in self._to_open or tp in self._opening
                or tp in self._unopened)

    def set_replicas(self, tp: TopicPartition, replicas: tuple[int, ...]) -> None:
        """The metadata lists other nodes for `tp` now (a reassignment): who its preferred
        leader is and whose sync it reports. Its Raft membership is the log's business."""
        queued = self._to_open.get(tp)
        if queued is not None:
            self._to_open[tp] = (replicas, queued[1], queued[2])
        replica = self.partitions.get(tp)
        if replica is not None:
            replica.replicas = replicas

    def remove_replica(self, tp: TopicPartition) -> None:
        """Forget a replica of a deleted topic, or of a partition whose reassignment left this
        node out, now; its files go on the disk thread, after any round of writes already
        under way for it."""
        unopened = self._unopened.get(tp)
        if unopened is not None:
            unopened.cancel()
        self._to_open.pop(tp, None)
        self._opening.discard(tp)  # `_open_queued` deletes what it opened
        self._early.pop(tp, None)
        replica = self.partitions.pop(tp, None)
        if replica is not None:
            self.changes += 1
            self._awake.discard(replica)
            self._steady.pop(replica, None)
            self._following.pop(replica, None)
            self.led.discard(replica)
            self._dirty.discard(replica)
            self._settling.discard(replica)
            replica.abandon()
            self.disk.submit(_delete_replica_files, replica)

    def delete_strays(self, assigned: Collection[TopicPartition]) -> None:
        """Delete the replica directories neither `assigned` (by metadata caught up with the
        controller's) nor known to this set name (`tidelog.node.replicas.strays`), on the disk
        thread after the writes, opens and deletions queued before: a replica this set is opening or
        removing is its own business."""
        known = {*assigned, *self.partitions, *self._to_open, *self._opening, *self._unopened}
        keep = {f"{tp.topic}-{tp.partition}" for tp in known}
        self.disk.submit(delete_strays, self.config.data_dir, keep, self.term_votes)

    async def rewrite_storage(self, replica: PartitionReplica, job: Callable[[], T]) -> T:
        """Run `job`, which changes `replica`'s log under its core (the scrubber cutting a
        damaged log), on the disk thread after any round of writes already under way, with
        the replica out of the Ready loop meanwhile; then give it a new core built from what
        its storage holds, as a restart would. A job the disk refuses raises its OSError once
        the replica is taken offline (`storage_failed`)."""
        replica.offline = True
        self.changes += 1
        try:
            result = await asyncio.get_running_loop().run_in_executor(self.disk, job)
        except OSError as exc:
            self.storage_failed(replica, exc)
            raise
        if replica.tp in self._offline:
            return result  # a round's write failed meanwhile: `_bring_back` restarts it
        if not replica.closed:
            replica.restart_core()
        replica.offline = False
        self.changes += 1
        self.wake()
        return result

    # ---- a disk that refuses writes --------------------------------------------------------

    def storage_failed(self, replica: PartitionReplica, exc: Exception) -> None:
        """A write to `replica`'s log failed: the disk refused it (full, an I/O error), or a
        batch received from the leader failed its checks (its CRC: the leader's copy is
        damaged). As Kafka takes a log directory offline, the replica leaves the Ready loop:
        what the failed Ready promised is never sent, a leader stops heartbeating so the others
        elect one that can write, and clients get KAFKA_STORAGE_ERROR. Every few seconds the
        log is reopened, as after a crash (recovery drops what the failed write left), and once
        the disk takes a write again the replica comes back as a follower with a core built
        from its durable state."""
        if replica.closed or replica.tp in self._offline:
            return
        what = ("a batch from the leader failed its checks"
                if isinstance(exc, CorruptMessageError) else "the disk refused a write")
        log.error("%s: %s (%s): the replica is offline until it takes writes again",
                  replica.tp, what, exc)
        replica.storage_failed()
        self.changes += 1
        # A replica that fails again soon after it came back waits longer each time.
        delay, back_at = self._storage_retry.get(replica.tp, (0.0, 0.0))
        soon = time.monotonic() - back_at < 4 * _STORAGE_RETRY_MAX_S
        delay = min(2 * delay, _STORAGE_RETRY_MAX_S) if soon and delay else _STORAGE_RETRY_S
        self._offline[replica.tp] = asyncio.create_task(self._bring_back(replica, delay))

    async def _bring_back(self, replica: PartitionReplica, delay: float) -> None:
        loop = asyncio.get_running_loop()
        try:
            while not replica.closed:
                await asyncio.sleep(delay)
                try:
                    await loop.run_in_executor(self.disk, replica.reopen_log)
                except OSError as exc:
                    log.warning("%s: the disk still refuses writes (%s); next try in %.0fs",
                                replica.tp, exc, delay)
                    delay = min(2 * delay, _STORAGE_RETRY_MAX_S)
                    continue
                if not replica.closed:
                    replica.restart_core()
                    replica.offline = False
                    self.changes += 1
                    self._storage_retry[replica.tp] = (delay, time.monotonic())
                    self.wake()
                    log.warning("%s: the disk takes writes again: the replica is back as a "
                                "follower", replica.tp)
                return
        finally:
            del self._offline[replica.tp]

    # ---- linearizable reads ---------------------------------------------------------------

    async def read_index(self, tp: TopicPartition, timeout_s: float) -> int:
        """An offset R such that every record acknowledged as committed before this call lies
        below R, proven while this replica leads `tp` (`tidelog.node.replicas.reads`: a lease, else
        a ReadIndex round shared with concurrent callers); the caller then waits until its
        state has applied everything below R. Raises NOT_LEADER_OR_FOLLOWER when this replica
        is not, or no longer provably, the leader, and REQUEST_TIMED_OUT after `timeout_s`."""
        replica = self.partitions.get(tp)
        if replica is None or not replica.is_leader:
            raise errors.NotLeaderOrFollowerError(f"this node does not lead {tp}")
        rounds = replica.reads.rounds
        index = replica.reads.leased_index(replica.core)
        if index is None:
            future = replica.reads.join(replica.core)
        if replica.reads.rounds != rounds:
            # The round's heartbeats leave now. A read the lease answered started none: it
            # sends nothing, and needs no round of the Ready loop.
            self._send_prompt((replica,))
            self._touch(replica)
            self._work.set()
        if index is not None:
            return index
        return await wait_read(future, timeout_s)

    # ---- the Raft driver -------------------------------------------------------------------

    async def tick_loop(self) -> None:
        """One tick per interval, for the replicas whose cores are awake, then node liveness.
        Ticks a stalled loop missed are dropped, not replayed back to back: a node that was
        starved of CPU for 300 ms must not count 30 ticks at once and start an election
        against a leader whose heartbeats are merely queued.

        While no core here is awake but `steady` ones, a tick has nothing to do but count and,
        each heartbeat interval, tick those and node liveness: the loop then sleeps to the next
        heartbeat interval's tick and counts the ticks that came due meanwhile, at most the
        sleep's (one that wakes late drops the rest), so node liveness and pacing see the same
        counts a fifth of the wake-ups later (each wake-up of a node's loop cost about as much
        as a tick's work, 100 a second on every node of an idle cluster). Unlike a loop waking
        each tick, a loop stalled within such a sleep still counts its ticks (a heartbeat
        interval's at most, within pacing's slack) where that one counted one after the stall. A
        core that wakes meanwhile (`_touch`) brings the wake-up forward to the next tick due
        (`_hurry`): it is ticked from the tick after it woke, as before; and the peers'
        envelopes are counted as heard at the tick that would have run last (`tick_count`)."""
        loop = asyncio.get_running_loop()
        interval = self.config.raft_tick_ms / 1000
        due = time.monotonic()  # when the last tick counted was due
        while True:
            # The next tick is due an interval after the last, or now if that passed.
            due = max(due, time.monotonic() - interval)
            heartbeat = self.raft_config.heartbeat_ticks
            ticks = 1 if self._awake else heartbeat - self._ticks % heartbeat
            self._window = (self._ticks, due, ticks)
            alarm: asyncio.Future[None] = loop.create_future()
            self._alarm = (alarm, loop.call_at(due + ticks * interval, _ring, alarm))
            try:
                await alarm
            finally:
                self._alarm[1].cancel()
                self._alarm = None
            # The ticks due by now. A timer may ring up to a millisecond early (libuv's clock
            # is cached and counts whole ms): as the loop that woke for each tick did, it
            # counts the tick it rang for.
            counted = min(ticks, max(1, int((time.monotonic() - due) / interval + 0.1)))
            due += counted * interval
            self.tick(counted)

    def tick_count(self) -> int:
        """The ticks the tick loop counted by now, as a loop that woke for each tick would
        have: while it sleeps over ticks with no core awake (`tick_loop`), those that came
        due meanwhile, but the last. Node liveness counts a peer heard at this tick
        (`step`), and the beacon reports it to the peers (`tidelog.replication.pacing`);
        called from the beacon's thread too (`_window` is replaced whole)."""
        ticks, due, window = self._window
        if window == 1:
            return ticks
        elapsed = int((time.monotonic() - due) / (self.config.raft_tick_ms / 1000))
        return ticks + max(0, min(window - 1, elapsed))

    def _hurry(self) -> None:
        """A core woke while the tick loop sleeps over a heartbeat interval's ticks: it wakes
        at the next tick due instead, which ticks the core as a loop ticking every interval
        would have."""
        alarm = self._alarm
        ticks, due, window = self._window
        if alarm is None or window == 1:
            return
        interval = self.config.raft_tick_ms / 1000
        passed = int((time.monotonic() - due) / interval)
        if passed + 1 >= window:
            return  # it rings at that tick anyway
        future, handle = alarm
        handle.cancel()
        at = due + (passed + 1) * interval
        self._alarm = (future, asyncio.get_running_loop().call_at(at, _ring, future))
        self._window = (ticks, due, passed + 1)

    def tick(self, ticks: int = 1) -> None:
        """`ticks` ticks of the tick loop (`tick_loop`: more than one only while no core but
        steady ones is awake): the awake cores ticked once, then, when a heartbeat interval's
        tick is among them, the steady ones (`_tick_steady`) and node liveness."""
        first = self._ticks
        self._ticks += ticks
        self._window = (self._ticks, 0.0, 1)  # until the loop sleeps again
        self.loop_turned = time.monotonic()
        # Pacing counts each tick; only the cores whose tick did more than count
        # (`RaftCore.tick`) are looked at.
        lagging: set[int] = set()
        for tick in range(first + 1, self._ticks + 1):
            lagging = self._pacing.lagging(tick, self._down)
        down = self._down
        if lagging:
            acted = [r for r in self._awake
                     if not r.offline and tick_paced(r.core, lagging, down)]
        else:
            acted = [r for r in self._awake if not r.offline and r.core.tick(True, down)]
        for replica in acted:
            if replica.core.quiesced:
                self._went_quiet(replica)
        self._dirty.update(acted)
        self._send_prompt(acted)
        heartbeat = self.raft_config.heartbeat_ticks
        if self._ticks // heartbeat != first // heartbeat:
            self._tick_steady(following=False, lagging=lagging)
            election = self.raft_config.election_ticks
            if self._ticks // election != first // election:
                self._tick_steady(following=True, lagging=lagging)
            self._liveness()
        if self._dirty:
            self._work.set()

    def _tick_steady(self, following: bool, lagging: set[int]) -> None:
        """The ticks since each steady core of `_following` (or of `_steady`) was last ticked,
        all at once, paced as `tick_paced` paces them. A core is steady or not by what
        reaches it through `_touch`, or by its own tick (a leader that steps down or goes
        quiet): only one whose core was built again, or taken offline, changes untouched, and
        is ticked each tick again from now; one whose tick did more than count is touched."""
        now, down = self._ticks, self._down
        acted: list[PartitionReplica] = []
        unsteady: list[PartitionReplica] = []
        steady = self._following if following else self._steady
        for replica, since in steady.items():
            core = replica.core
            if replica.offline or not core.steady:
                unsteady.append(replica)
            elif since < now and tick_paced(core, lagging, down, now - since):
                acted.append(replica)
        ticked = dict.fromkeys(steady, now)
        if following:
            self._following = ticked
        else:
            self._steady = ticked
        for replica in unsteady:
            del ticked[replica]
            self._awake.add(replica)
        for replica in acted:
            # It went quiet, or changed role or steadiness, or stays where it is.
            del ticked[replica]
            self._touch(replica)
        self._send_prompt(acted)

    def awake(self) -> list[PartitionReplica]:
        """The replicas whose cores are not quiesced (the only ones whose state changes)."""
        return [*self._awake, *self._steady, *self._following]

    def peer_live(self, peer: int) -> bool:
        return peer not in self._down

    def _liveness(self) -> None:
        """Node liveness, each heartbeat interval: the replicas here that are out of service
        named to every peer (their followers must not take this node's liveness for theirs:
        see `step`), and every peer that has been silent for an election timeout reported to
        the replicas it leads here. That this node lives its liveness thread says
        (`tidelog.node.replicas.liveness`), not this loop. Silence is counted in this loop's ticks,
        so a stall of this loop is not taken for the peers' silence. A peer found silent is
        reported again each interval while it stays so: a replica that learned of it as its
        leader meanwhile (a late message) must hear it too."""
        if self._offline:
            for peer, link in self.links.items():
                outgoing = Outgoing(self.node_id, peer)
                for tp in self._offline:
                    outgoing.offline(tp)
                link.send(outgoing)
        silent = self._ticks - self.raft_config.election_ticks
        down = {p for p, heard in self._heard.items() if heard <= silent}
        if down != self._down:
            self.liveness_changes += 1
        self._down = down
        if not down:
            return
        for replica in self.partitions.values():
            core = replica.core
            if core.leader_id in down and not replica.offline and not replica.is_leader:
                core.peer_down(core.leader_id)
                self._touch(replica)

    def step(self, env: rpb.RaftEnvelope, payload: memoryview) -> None:
        """Step the Raft messages of one envelope addressed to this node into their cores."""
        stepped: dict[TopicPartition, PartitionReplica] = {}
        now = time.monotonic()
        ticks = self.tick_count()
        self._heard[env.src] = ticks
        if env.ticks and self._pacing.report(env.src, env.ticks, ticks):
            # Its node restarted: what its replicas led before, they lead no more.
            for led in self.partitions.values():
                if led.core.leader_id == env.src and not led.offline:
                    led.core.peer_down(env.src)
                    stepped[led.tp] = led
        for group in env.offline:
            # The sender's replica cannot write: as good as down for a group it leads.
            replica = self.partitions.get(TopicPartition(group.topic, group.partition))
            if replica is not None and not replica.offline and replica.core.leader_id == env.src:
                replica.core.peer_down(env.src)
                stepped[replica.tp] = replica
        for tp, message in messages_of(env, payload):
            replica = self.partitions.get(tp)
            if replica is None:
                self._keep_early(tp, message)
                continue
            if replica.offline:
                continue
            if (replica.refuses_votes_until > now
                    and isinstance(message, PreVoteRequest | VoteRequest)
                    and not (isinstance(message, VoteRequest) and message.transfer)):
                continue  # a new core stays out of elections for a while (`_new_core`)
            replica.core.step(message)
            if replica.is_leader and isinstance(message, AppendResponse | HeartbeatResponse):
                replica.record_follower(message.src)
            stepped[tp] = replica
        if not stepped:
            return
        for replica in stepped.values():
            self._touch(replica)
        self._send_prompt(stepped.values())
        self._work.set()

    def _keep_early(self, tp: TopicPartition, message: Message) -> None:
        """A vote request for a replica assigned here that is still being opened is kept for
        it (`_register` steps it): a new topic's preferred replica stands as soon as its own
        node opened it, and its peers, opening the same partitions a little later, would
        otherwise drop its requests and leave the partition leaderless until it stood again
        an election timeout later (on a loaded node of 5,000 new partitions, minutes)."""
        if (isinstance(message, PreVoteRequest | VoteRequest)
                and (tp in self._to_open or tp in self._opening)):
            early = self._early.setdefault(tp, [])
            if len(early) < _EARLY_VOTES_KEPT:
                early.append(message)

    def _send_prompt(self, replicas: Iterable[PartitionReplica]) -> None:
        """Heartbeats and their answers leave now, not after the round of disk writes under
        way (`Driver.send_prompt`): a slow fsync must not cost an election. The Ready loop's
        outbox is always flushed before it awaits, so this may use it."""
        self._driver.send_prompt((r, r.driven) for r in replicas)

    async def ready_loop(self) -> None:
        loop = asyncio.get_running_loop()
        driver = self._driver
        while True:
            await self._work.wait()
            self._work.clear()
            while True:
                for hook in self._round_hooks:
                    hook()
                if self._all:
                    self._all = False
                    self._dirty.clear()
                    looked = list(self.partitions.values())
                    for replica in looked:
                        self._touch(replica)
                else:
                    looked = list(self._dirty)
                self._dirty = set()
                rnd = driver.begin([(r, r.driven) for r in looked if not r.offline])
                if rnd is None:
                    break
                # What the round advances may have more to send (a commit, the next appends).
                self._dirty.update(rnd.keys)
                writes = rnd.early + rnd.late
                if writes:
                    failed = await loop.run_in_executor(
                        self.disk, _persist_all, writes, self.flushers,
                        self._filesystem() if len(writes) >= _SYNCFS_MIN_LOGS else None,
                    )
                    for replica, exc in failed:
                        self.storage_failed(replica, exc)
                driver.complete(rnd)
                # A leader may go quiet as its Ready is advanced (its last write was held
                # everywhere before its own fsync): the tick loop stops ticking it, and sleeps
                # over idle ticks again once no core is awake.
                for replica in rnd.keys:
                    if replica.core.quiesced:
                        self._went_quiet(replica)

    def _filesystem(self) -> FilesystemSync | None:
        """The syncfs of the data directory's filesystem, opened on first use."""
        if not self._fs_sync_opened:
            self._fs_sync_opened = True
            self._fs_sync = FilesystemSync.open(self.config.data_dir)
        return self._fs_sync

    # ---- the driver's port -----------------------------------------------------------------

    def send(self, replica: PartitionReplica, message: Message) -> None:
        self._queue_message(replica.tp, message)

    def flush(self) -> None:
        """One frame per peer for what a step of the round sent."""
        for dst, outgoing in self._outbox.items():
            link = self.links.get(dst)
            if link is not None:
                link.send(outgoing)
        self._outbox = {}

    def publish(self, replica: PartitionReplica, rd: Ready) -> None:
        replica.publish(rd)
        hook = self._published_hooks.get(replica.tp)
        if hook is not None:
            hook()
        topic_hook = self._topic_published_hooks.get(replica.tp.topic)
        if topic_hook is not None:
            topic_hook(replica)

    def publish_hw(self, replica: PartitionReplica, high_watermark: int) -> None:
        replica.publish_hw(high_watermark)

    def leadership(self, replica: PartitionReplica, change: Leadership) -> None:
        if change.epoch_start is None:
            self.led.discard(replica)
        else:
            self.led.add(replica)
        replica.on_leadership(change)

    def _queue_message(self, tp: TopicPartition, message: Any) -> None:
        if isinstance(message, Heartbeat | HeartbeatResponse):
            self.heartbeat_items += 1
        outgoing = self._outbox.get(message.dst)
        if outgoing is None:
            outgoing = self._outbox[message.dst] = Outgoing(self.node_id, message.dst)
        outgoing.add(tp, message)



def _ring(alarm: asyncio.Future[None]) -> None:
    """The tick loop's alarm (`ReplicaSet.tick_loop`)."""
    if not alarm.done():
        alarm.set_result(None)


def _delete_replica_files(replica: PartitionReplica) -> None:
    """On the disk thread, after any round of writes under way for the replica: its term and
    vote leave the book before its directory goes (a topic created again under the same name
    must not inherit them)."""
    replica.log.close()
    replica.store.term_votes.forget(replica.store.name)
    replica.store.term_votes.sync()
    delete_directory(replica.log.directory)


def _persist_all(
    writes: list[tuple[PartitionReplica, Write]], flushers: ThreadPoolExecutor,
    filesystem: FilesystemSync | None = None,
) -> list[tuple[PartitionReplica, Exception]]:
    """On the disk thread: apply and fsync a round of Readies (group commit).

    The partitions' writes are applied one after another on the disk thread: they go to the page
    cache, and handing each to a helper thread cost more than the write (a produce over 1,000
    partitions applies about 25 a round). Their fsyncs run side by side on `flushers`: one after
    another, a round costs the sum of a few fsyncs per partition (several ms each on a busy VM),
    while ext4 folds concurrent fsyncs into one journal commit. Every write is applied before
    any is synced, so the terms and votes of the whole round are in the node's book
    (`TermVotes`) when the first sync writes it: one file replacement for all the round's
    elections. When `filesystem` is given and at least `_SYNCFS_MIN_LOGS` of the logs to sync
    are on it, one ``syncfs`` after every write replaces their fsyncs
    (`tidelog.storage.fs_sync`: as durable, ten times cheaper at 64 logs on the VM measured); a
    syncfs that fails says only that the filesystem lost a write, so each log is then fsynced as
    usual, and the one that lost it fails. The disk thread still waits for the whole round, so
    work it runs later (deleting a replica, closing a log) never overlaps it, and the loop sends
    nothing of the round that waits for the disk before all of it is durable. A removed
    replica's store drops its writes (`LogStore.closed`). Returns the replicas whose writes
    failed (`ReplicaSet.storage_failed`), with the error: their Readies must not complete."""

    Item = tuple[PartitionReplica, Write]

    def run(step: Callable[[Item], None], item: Item) -> Exception | None:
        try:
            step(item)
        except (OSError, CorruptMessageError) as exc:
            return exc
        return None

    def each(step: Callable[[Item], None], items: list[Item]) -> list[tuple[Item, Exception]]:
        if len(items) == 1:
            errors = [run(step, items[0])]
        else:
            errors = list(flushers.map(lambda item: run(step, item), items))
        return [(item, exc) for item, exc in zip(items, errors, strict=True) if exc is not None]

    failed = [(item, exc) for item in writes if (exc := run(_apply, item)) is not None]
    refused = {id(item) for item, _ in failed}
    to_sync = [item for item in writes if id(item) not in refused]
    if filesystem is not None:
        covered = [item for item in to_sync
                   if isinstance(store := item[1].replica.store, LogStore) and store.needs_sync
                   and filesystem.covers(store.log.directory)]
        if len(covered) >= _SYNCFS_MIN_LOGS and _synced(filesystem):
            done = {id(item) for item in covered}
            to_sync = [item for item in to_sync if id(item) not in done]
            failed += [(item, exc) for item in covered
                       if (exc := run(_synced_by_filesystem, item)) is not None]
    failed += each(lambda item: item[1].sync(), to_sync)
    return [(item[0], exc) for item, exc in failed]


def _apply(item: tuple[PartitionReplica, Write]) -> None:
    item[1].apply()


def _synced_by_filesystem(item: tuple[PartitionReplica, Write]) -> None:
    store = item[1].replica.store
    assert isinstance(store, LogStore)  # `_persist_all` picked LogStores
    store.synced_by_filesystem()


def _synced(filesystem: FilesystemSync) -> bool:
    """One syncfs; False when the filesystem reports a lost write (each log's fsync then says
    whose), logged."""
    try:
        filesystem.sync()
    except OSError as exc:
        log.warning("syncfs of the data directory failed (%s): each log is fsynced instead", exc)
        return False
    return True
