"""The one driver of Raft cores: it turns their Readies into writes, sends and published high
watermarks, for the node's event loop, the simulator and the scenario tests alike, so the rules
below are exercised by every simulated seed exactly as the node runs them.

A round takes the Ready of every replica that has one (group commit: one trip to the disk for
many partitions) and:

1. observes role changes from the Readies themselves (`Leadership`), never from the callers of
   ``step``/``tick``;
2. completes at once the Readies that write nothing: what came before them is durable (a core
   has one Ready in flight at most), so their messages promise nothing new about this disk, and
   heartbeats and their answers never wait for another partition's fsync;
3. sends before the fsync the messages that `may_send_before_sync` allows: a leader's appends,
   so the followers' fsyncs overlap the leader's instead of following it (Raft thesis §10.2.1,
   as etcd does). The core counts its own replica only up to its durable prefix, so a commit
   still takes a majority of fsynced copies. Such a Ready's high watermark is published at
   once too (`DriverPort.publish_hw`): every entry below it is durable here already
   (`Driver.begin` says why), and under load a leader's next Ready nearly always carries new
   entries, so holding its HW back for their fsync made every acks=all producer wait a round
   more than its commit took;
4. leaves ``round.writes`` to its caller, who makes each durable (`Write.apply`, then
   `Write.sync`) on a disk thread (the node) or at simulated times (the simulator);
5. `Driver.complete`: sends what had to wait for the disk (acknowledgements, votes, anything
   stamped with a new term: promises that must survive a crash), publishes every Ready's high
   watermark, advances the cores.

Outside rounds, `Driver.send_prompt` sends at once what promises nothing at all (heartbeats and
their answers of a durable term), so they never wait for a round's fsync.

The driver is synchronous and does no I/O of its own: the `DriverPort` sends and publishes,
the `ReplicaStore` of each replica writes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from tidelog.replication.messages import Message
from tidelog.replication.raft import HardState, RaftCore, Ready, Role

K = TypeVar("K")
K_contra = TypeVar("K_contra", contravariant=True)

#: The part of the hard state that is written with every change: (term, vote). The high
#: watermark is not: a restarted replica learns it again from the leader (as in Kafka).
TermVote = tuple[int, int | None]


class ReplicaStore(Protocol):
    """One replica's durable state. ``apply`` may leave its writes in a page cache; ``sync``
    makes everything applied so far durable."""

    def apply(self, rd: Ready, term_vote: TermVote | None) -> None: ...

    def sync(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Leadership:
    """A change of role read from a Ready. ``epoch_start`` is where this replica's epoch starts
    in its log while it leads (its marker, or the log end when it wrote none: KIP-207's
    leader epoch start offset); None when it stopped leading."""

    term: int
    epoch_start: int | None


class DriverPort(Protocol[K_contra]):
    """What the driver does through its owner: the network and the replicas' readers."""

    def send(self, key: K_contra, message: Message) -> None: ...

    def flush(self) -> None:
        """The messages sent since the last flush may travel together (one frame per peer)."""
        ...

    def publish(self, key: K_contra, rd: Ready) -> None:
        """``rd`` is durable: expose its high watermark, complete what it decided."""
        ...

    def publish_hw(self, key: K_contra, high_watermark: int) -> None:
        """The high watermark of a leader's Ready whose writes are not durable yet, though
        every entry below the HW is: expose it, complete what waits for it. ``publish`` of the
        same Ready follows once its writes are durable."""
        ...

    def leadership(self, key: K_contra, change: Leadership) -> None: ...


class DrivenReplica:
    """The driver's per-replica state: the core, its store, and what the store holds of the
    term and vote (written only when they change). An owner that replaces the core (storage
    changed under it) marks the old one ``retired``: a Ready of it still in flight is then
    dropped when its round completes (neither its late messages, nor its HW, nor its advance:
    they describe storage that changed)."""

    __slots__ = ("core", "led_term", "retired", "store", "stored_term_vote")

    def __init__(self, core: RaftCore, store: ReplicaStore, hard_state: HardState) -> None:
        self.core = core
        self.store = store
        self.stored_term_vote: TermVote = (hard_state.term, hard_state.vote)
        self.led_term = -1
        self.retired = False


def writes(rd: Ready, stored: TermVote) -> bool:
    """Whether `rd` has anything to write (a new high watermark alone is not written)."""
    hs = rd.hard_state
    return (
        bool(rd.entries)
        or rd.conf_state is not None
        or rd.truncate_to is not None
        or rd.reset_to is not None
        or (hs is not None and (hs.term, hs.vote) != stored)
    )


def may_send_before_sync(rd: Ready, stored: TermVote) -> bool:
    """Whether `rd`'s messages may leave before `rd` is durable: those of a leader that keeps
    the term and vote already stored and truncates nothing, i.e. appends and heartbeats (a node
    cannot stop leading and lead again within one term, so nothing in `rd` was decided in
    another role). A follower's acknowledgement or a vote never may."""
    hs = rd.hard_state
    return (
        rd.role is Role.LEADER
        and rd.truncate_to is None
        and rd.reset_to is None
        and (hs is None or (hs.term, hs.vote) == stored)
    )


@dataclass(slots=True)
class Write:
    """One Ready's writes, to be made durable before the round completes."""

    replica: DrivenReplica
    rd: Ready
    #: The (term, vote) to store, when they changed.
    term_vote: TermVote | None

    def apply(self) -> None:
        self.replica.store.apply(self.rd, self.term_vote)

    def sync(self) -> None:
        self.replica.store.sync()

    def persist(self) -> None:
        self.apply()
        self.sync()


@dataclass(slots=True)
class Round(Generic[K]):
    """The Readies a round took that must be durable before it completes. The messages of
    ``early`` are sent already; those of ``late`` wait for `Driver.complete`."""

    early: list[tuple[K, Write]] = field(default_factory=list)
    late: list[tuple[K, Write]] = field(default_factory=list)
    #: Every replica whose Ready the round took (those that wrote nothing, completed at once,
    #: too): after the round completes, only these may have a new Ready without being touched.
    keys: list[K] = field(default_factory=list)

    @property
    def writes(self) -> list[Write]:
        return [w for _, w in self.early] + [w for _, w in self.late]


class Driver(Generic[K]):
    """Runs rounds over replicas named by keys of the owner's choosing (the node's partition
    replicas, the simulator's nodes). One round at a time: `begin`, persist ``round.writes``,
    `complete`, and again while `begin` finds Readies."""

    def __init__(self, port: DriverPort[K]) -> None:
        self._port = port

    def begin(self, replicas: Iterable[tuple[K, DrivenReplica]]) -> Round[K] | None:
        """Take the Readies of `replicas`; None when none has one. Readies that write nothing
        are completed now, and the early messages sent."""
        port = self._port
        rnd: Round[K] = Round()
        instant: list[tuple[K, DrivenReplica, Ready]] = []
        for key, replica in replicas:
            core = replica.core
            if not core.has_ready():
                continue
            rd = core.ready()
            rnd.keys.append(key)
            self._observe(key, replica, rd)
            stored = replica.stored_term_vote
            if not writes(rd, stored):
                instant.append((key, replica, rd))
                continue
            hs = rd.hard_state
            term_vote = None
            if hs is not None and (hs.term, hs.vote) != stored:
                term_vote = replica.stored_term_vote = (hs.term, hs.vote)
            write = Write(replica, rd, term_vote)
            (rnd.early if may_send_before_sync(rd, stored) else rnd.late).append((key, write))
        if not instant and not rnd.early and not rnd.late:
            return None
        for key, _, rd in instant:
            for message in rd.messages:
                port.send(key, message)
            port.publish(key, rd)
        for _, replica, rd in instant:
            replica.core.advance(rd)
        for key, write in rnd.early:
            # A leader's Ready is taken only after its previous one was advanced, and its
            # appends leave only with the Ready that hands their entries out, so every entry it
            # sent anyone is durable here; the core counts itself only up to that durable
            # prefix, so the HW lies within it (the simulator checks each published HW against
            # the durable log end).
            port.publish_hw(key, write.rd.high_watermark)
            for message in write.rd.messages:
                port.send(key, message)
        port.flush()
        return rnd

    def send_prompt(self, replicas: Iterable[tuple[K, DrivenReplica]]) -> None:
        """Send now what the cores let leave whatever their disks do
        (`RaftCore.take_prompt_messages`: heartbeats and their answers of a durable term), so
        a round's slow fsync is never taken for a dead leader or dead followers. Called after
        stepping or ticking; what is left goes with the next Ready."""
        port = self._port
        sent = False
        for key, replica in replicas:
            for message in replica.core.take_prompt_messages():
                port.send(key, message)
                sent = True
        if sent:
            port.flush()

    def complete(self, rnd: Round[K]) -> None:
        """``rnd.writes`` are durable: send the late messages, publish, advance."""
        port = self._port
        early = [(key, w) for key, w in rnd.early if not w.replica.retired]
        late = [(key, w) for key, w in rnd.late if not w.replica.retired]
        for key, write in early:
            port.publish(key, write.rd)
        for key, write in late:
            for message in write.rd.messages:
                port.send(key, message)
            port.publish(key, write.rd)
        for _, write in early + late:
            write.replica.core.advance(write.rd)
        port.flush()

    def _observe(self, key: K, replica: DrivenReplica, rd: Ready) -> None:
        leads = rd.role is Role.LEADER
        if replica.led_term >= 0 and (not leads or rd.term != replica.led_term):
            replica.led_term = -1
            self._port.leadership(key, Leadership(rd.term, None))
        if leads and replica.led_term < 0:
            # Every entry of this term is still in this Ready (a leader's own entries reach a
            # Ready first in the one that shows it leading), so the epoch starts at the first
            # of them, or at the log end when there is none yet.
            start = next((e.base_offset for e in rd.entries if e.epoch == rd.term),
                         replica.core.log_end_offset)
            replica.led_term = rd.term
            self._port.leadership(key, Leadership(rd.term, start))
