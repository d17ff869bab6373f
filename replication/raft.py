"""One partition's Raft group member, as a deterministic state machine (etcd raft's shape).

The core does no I/O, keeps no clock and draws randomness only from the ``random.Random`` it is
given, so the simulator runs it unchanged. Inputs: ``step(message)``, ``tick()``,
``propose(data, record_count)``, ``transfer_leadership(target)``, ``read_index(ctx)``,
``propose_conf_change(change)`` (and its forms ``add_learner``, ``promote``, ``remove``).
Output: a ``Ready``.

Membership (voters, learners, one change at a time as log entries, in effect on append, and
why not joint consensus) is argued in `tidelog.replication.membership`.

Raft mapped onto Kafka: the Raft index is the offset, the term is the leader epoch stamped on
every batch, the commit index is the high watermark (HW).

Driver contract, per ``Ready`` (at most one is in flight: ``has_ready()`` is false until the
previous one is advanced; ``step``/``tick``/``propose`` may be called meanwhile). The one
driver, `tidelog.replication.driver`, honours it for the node, the simulator and the tests:

1. ``ready.apply_log_writes(log)``: reset, then truncate, then append, in that order.
2. Persist ``ready.hard_state`` if it is not ``None`` (term, vote, HW), and
   ``ready.conf_state`` (the committed membership) if it is not ``None``.
3. Make both durable (fsync). Many partitions' Readies may share one fsync (group commit).
4. Only now send ``ready.messages``: a vote, an append acknowledgement or a message stamped
   with a new term is a promise that must survive a crash. Persist before send. (A leader's
   appends may leave earlier: it counts itself only up to its durable prefix; and
   ``take_prompt_messages()`` hands out, at any time, the messages that promise nothing.)
5. Publish ``ready.high_watermark`` (complete acks=all waiters, serve reads), record
   ``role``/``leader_id``/``term`` for routing, and answer ``ready.read_states`` and
   ``ready.failed_reads`` (they promise nothing, so they need not wait for the disk, but
   nothing is lost by answering them here).
6. ``core.advance(ready)``.

A crash anywhere before step 3 completes loses the whole Ready and nothing was promised.

Carrying the HW. etcd's leader broadcasts an append on every commit, an empty one to each
follower it has nothing new for, and each is answered: under a steady stream of proposals those
were more than half of a leader's appends and answers (bench/README, issue 18), each a message
to build, send, parse and answer on both sides. Here a commit sends only what waits to go
anyway, which carries the new HW; a follower otherwise learns it from its next append or its
next heartbeat, at most ``heartbeat_ticks`` later (a heartbeat carries the HW up to the
follower's ``match``). Nothing needs it sooner:

* Raft's safety does not rest on a follower's commit index: commitment is counted on the
  leader from the followers' ``match``; a follower's HW only keeps it from truncating below it.
  The leader's reads, read lease, ISR, acks=all and a move's catch-up (`mover`) use the
  leader's HW and the followers' ``match`` alone.
* A group never goes quiet with a follower behind its final HW: a leader quiesces only when
  every ``match`` and its HW are its log end, and the ``quiesce`` heartbeat carries that HW.
* A follower elected with a stale HW writes a marker and serves reads once it commits (contract §7,
  `read_index`), as after any leader crash. The target of a transfer is sent every new HW at
  once, so a planned handover costs no marker when the log was committed.
* A group whose followers act on what commits as it commits sets ``RaftConfig.eager_hw``: the
  metadata log, which every voter applies (and non-voters pull from any voter).

Quiescence (``RaftConfig.quiesce``; CockroachDB quiesces idle ranges the same way). A node
hosts thousands of groups, most of them idle, and a group that ticks and heartbeats costs CPU
and network whether or not anything changes. So an idle group goes quiet, and node-level
liveness stands in for its heartbeats:

* When: at a heartbeat tick, a leader with nothing left to do (every follower's ``match`` is
  the log end, the HW is the log end, no read pending or queued, no transfer under way) sends
  its followers a heartbeat marked ``quiesce`` instead of an ordinary one and stops ticking. A
  follower receiving it stops ticking as well once it has applied the HW it carries (its log
  holds the leader's up to there: the leader capped the HW at its ``match``), and answers
  nothing. A quiesced core ignores ``tick()``: a driver need not even call it.
* What wakes a quiesced replica: a proposal, a read, a transfer, and any message that reaches
  it except a ``quiesce`` heartbeat (an append, an ordinary heartbeat or its answer, a vote or
  pre-vote request, a message of another term). A follower that missed the ``quiesce``
  heartbeat, or restarted, times out on its own clock and asks for a pre-vote, which wakes the
  leader (and the other followers), who rejects it (its lease holds) and heartbeats again; a
  damaged follower (which may not campaign) that knows no leader sends its peers an unasked
  heartbeat answer instead. A woken leader starts a fresh check-quorum window.
* Liveness: `peer_down(node)` tells a core that the node-level liveness of the driver has
  heard nothing at all from ``node`` for an election timeout (the node hears every envelope a
  peer sends, and each node sends its peers one small envelope a heartbeat interval whatever
  its groups do: one heartbeat per node pair, not per partition). A follower whose leader that
  is wakes and counts its election timer as run out: it campaigns after the random part of its
  timeout, as if the leader's heartbeats had stopped.
* Leases stay sound. A quiesced follower's timer stands still, so it refuses votes
  (`_in_lease`) for as long as it stays quiesced; that is what node liveness proves: its
  leader's node was heard from less than an election timeout ago. Every message from the
  leader, the leader's confirmed read rounds included, is also heard by the liveness, so a
  follower stops refusing no earlier after a confirmed round than an awake follower would
  (an election timeout after it last heard from the leader), and a leader's read lease, built
  only on confirmed rounds (never extended by a quiesced group), never outlives the refusals.

Fortification (``RaftConfig.fortify``; CockroachDB's leader fortification on store liveness).
Quiescence spares idle groups; a group that takes writes was still awake, heartbeating each
interval, from its first write until after its last, and every heartbeat round cost each awake
group CPU on three nodes. Kafka has no per-partition heartbeat at all: a broker's session with
the controller stands for all its partitions. Fortified, node liveness holds leadership for
awake groups too:

* A follower that heard its leader in this term supports it: its election timer stands still
  and it refuses votes for as long as the leader is a voter of the configuration in effect and
  its node is heard. Unheard for ``stall_timeouts`` election timeouts, it sends its leader an
  answer to no heartbeat (a poke) instead of campaigning, which makes an awake leader resend
  what was lost and wakes a quiet one, which quiets the group again. Support ends (`_lapse`:
  the timer counts as run out) when liveness reports the leader's node silent for an election
  timeout (`peer_down`; a restarted node, or a replica out of service there, is reported the
  same way), or when the leader itself asks for a vote in a newer term (it stepped down, or
  restarted). A supporting follower that is quiet refuses a vote and stays quiet. One that is
  awake is `steady`, as is an awake leader: their ticks only count between two heartbeat
  intervals (a follower's, until its stall question), so a driver may give them several at
  once (`tick`'s ``ticks``; the node gives a leader an interval's, a follower an election
  timeout's), which only runs their timers slower.
* A leader's check-quorum counts the voters whose nodes are heard (``tick(down=...)``), as
  well as those that answered: answers are only asked for when something waits on them.
* Heartbeats go on demand: to every follower while a read waits for its quorum round
  (``read_index``), to a follower that acknowledged nothing for ``stall_timeouts`` election
  timeouts while an append waits on it (and again each time that lasts: a follower whose
  answers flow, however late, is not asked), and, as the quiesce heartbeat, with the final
  HW. A group quiesces in the step that learns its last write is held everywhere, not at a
  later tick.
* Leases stay sound (the argument in full: docs/architecture/replication.md, "Reads and the
  lease"): support only makes a follower refuse votes for longer. Its timer is reset when it
  hears the leader and otherwise only stands still or is reset again, so once support ends it
  still refuses until an election timeout after it last heard the leader, as an awake follower
  would; a lapse that ends the refusal at once comes either after an election timeout of the
  leader's node's silence (after the last round it confirmed) or from the leader itself having
  stopped leading the term, when no lease of that term is served any more.
"""

from __future__ import annotations

import enum
import random
from collections import deque
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from tidelog.replication.membership import (
    ConfChange,
    ConfChangeError,
    ConfChangeType,
    ConfState,
    Membership,
)
from tidelog.replication.messages import (
    AppendRequest,
    AppendResponse,
    Heartbeat,
    HeartbeatResponse,
    Message,
    PreVoteRequest,
    PreVoteResponse,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
)
from tidelog.replication.replica_log import NO_EPOCH, Entry, ReplicaLog
from tidelog.replication.unstable_log import RaftLog


class Role(enum.Enum):
    FOLLOWER = "follower"
    PRE_CANDIDATE = "pre-candidate"
    CANDIDATE = "candidate"
    LEADER = "leader"


class NotLeaderError(Exception):
    """A proposal reached a replica that cannot take it; ``leader_id`` is the best guess."""

    def __init__(self, leader_id: int | None, reason: str = "not the leader") -> None:
        super().__init__(reason)
        self.leader_id = leader_id


class SafetyViolation(AssertionError):
    """The core was asked to do something Raft proves impossible (e.g. overwrite a committed
    entry). Continuing would corrupt data, so it raises, as etcd panics."""


@dataclass(frozen=True, slots=True)
class HardState:
    """What must be durable before any message that depends on it is sent."""

    term: int
    vote: int | None
    high_watermark: int


@dataclass(frozen=True, slots=True)
class ReadState:
    """A read confirmed by a quorum (`RaftCore.read_index`): every entry committed before the
    read with context ``ctx`` was registered lies below ``index`` (a high watermark)."""

    ctx: int
    index: int


@dataclass(frozen=True, slots=True)
class Ready:
    hard_state: HardState | None
    reset_to: int | None
    truncate_to: int | None
    entries: tuple[Entry, ...]
    messages: tuple[Message, ...]
    high_watermark: int
    role: Role
    leader_id: int | None
    term: int
    #: Reads confirmed since the last Ready.
    read_states: tuple[ReadState, ...] = ()
    #: Contexts of reads dropped because this replica stopped leading: answer NOT_LEADER.
    failed_reads: tuple[int, ...] = ()
    #: The committed membership, when it changed: to persist with the hard state.
    conf_state: ConfState | None = None

    @property
    def needs_sync(self) -> bool:
        return (
            self.hard_state is not None
            or self.conf_state is not None
            or self.reset_to is not None
            or self.truncate_to is not None
            or bool(self.entries)
        )

    def apply_log_writes(self, log: ReplicaLog) -> None:
        if self.reset_to is not None:
            log.truncate_fully_and_start_at(self.reset_to)
        if self.truncate_to is not None:
            log.truncate_to(self.truncate_to)
        if self.entries:
            log.append(self.entries)


@dataclass(frozen=True, slots=True)
class RaftConfig:
    """Timeouts are in ticks. Flow control bounds what one follower can have in flight, so a
    slow replica costs the leader bounded memory and one lost message costs one retransmit."""

    election_ticks: int = 10
    heartbeat_ticks: int = 1
    max_append_bytes: int = 1 << 20
    max_inflight_appends: int = 64
    max_inflight_bytes: int = 8 << 20
    pre_vote: bool = True
    check_quorum: bool = True
    #: Idle groups stop ticking and heartbeating (see "Quiescence" above); the driver must then
    #: run node liveness and report dead peers (`RaftCore.peer_down`).
    quiesce: bool = False
    #: Leadership held by node liveness (see "Fortification" above; needs ``quiesce``'s node
    #: liveness): a follower's election timer stands still while its leader's node is heard,
    #: check-quorum counts the voters whose nodes are heard, and a leader heartbeats a
    #: follower only when something waits on it.
    fortify: bool = False
    #: Send every follower each new HW at once, by an empty append when no entries go to carry
    #: it, rather than with the next append or heartbeat (see "Carrying the HW" above): for a
    #: group whose followers act on what commits as it commits (the metadata log, which every
    #: voter applies).
    eager_hw: bool = False
    #: Election timeouts a `fortify` group lets pass without word before it asks whether
    #: something was lost: a follower heard from for that long pokes its leader, and a
    #: leader heartbeats a follower that acknowledged nothing for that long while an append
    #: waits on it. Over a transport that loses messages only when a link breaks, a wait
    #: that long is load (fsyncs and loops queued behind thousands of groups), and each
    #: question then only adds to it: a node sets several (see "Fortification" above).
    stall_timeouts: int = 1


class BatchCodec(Protocol):
    """The record-batch codec, injected so the core never decodes or re-encodes a batch:
    ``stamp`` patches offset and epoch into a proposed batch, ``marker`` builds the control
    batch a new leader appends to commit the entries of earlier epochs, ``membership`` the
    batch holding a configuration, which ``membership_of`` recognises (None for any other
    batch: it is asked of every batch appended, so it must answer others cheaply)."""

    def stamp(self, data: bytes, base_offset: int, epoch: int) -> bytes: ...

    def marker(self, base_offset: int, epoch: int) -> bytes: ...

    def membership(self, base_offset: int, epoch: int, membership: Membership) -> bytes: ...

    def membership_of(self, data: bytes | memoryview) -> Membership | None: ...


_OPAQUE_MEMBERSHIP = b"\x00membership "


class OpaqueCodec:
    """Leaves batches as they are; markers are empty; a configuration is a tagged text line.
    For tests."""

    def stamp(self, data: bytes, base_offset: int, epoch: int) -> bytes:
        return data

    def marker(self, base_offset: int, epoch: int) -> bytes:
        return b""

    def membership(self, base_offset: int, epoch: int, membership: Membership) -> bytes:
        voters = ",".join(map(str, membership.voters))
        learners = ",".join(map(str, membership.learners))
        return _OPAQUE_MEMBERSHIP + f"{voters};{learners}".encode()

    def membership_of(self, data: bytes | memoryview) -> Membership | None:
        if bytes(data[: len(_OPAQUE_MEMBERSHIP)]) != _OPAQUE_MEMBERSHIP:
            return None
        voters, _, learners = bytes(data[len(_OPAQUE_MEMBERSHIP):]).decode().partition(";")
        return Membership.of((int(v) for v in voters.split(",") if v),
                             (int(v) for v in learners.split(",") if v))


class MajorityConfig:
    """The voter set's quorum arithmetic, kept behind two questions (what end offset does a
    quorum hold, did an election win)."""

    def __init__(self, voters: Iterable[int]) -> None:
        self.voters = tuple(sorted(set(voters)))
        self.quorum = len(self.voters) // 2 + 1

    def committed_end(self, match_of: Callable[[int], int]) -> int:
        """The largest value a quorum has reached: the end offset a quorum holds, or the newest
        read context a quorum has acknowledged."""
        matches = sorted((match_of(v) for v in self.voters), reverse=True)
        return matches[self.quorum - 1]

    def vote_result(self, votes: dict[int, bool]) -> bool | None:
        """True when won, False when lost, None while undecided."""
        granted = sum(1 for v in self.voters if votes.get(v) is True)
        if granted >= self.quorum:
            return True
        rejected = sum(1 for v in self.voters if votes.get(v) is False)
        if rejected > len(self.voters) - self.quorum:
            return False
        return None


class _Progress:
    """The leader's view of one follower. Probing: one append at a time until the logs are
    found to match. Replicating: appends are pipelined within the flow-control window, whose
    ``inflight`` holds (end offset, bytes) of every append sent and not yet acknowledged.

    No loss can keep the window shut: an acknowledgement frees what it covers, a rejection
    returns to probing (which empties the window), and a follower that answers a heartbeat
    while the window is full is asked, with an empty append at ``next``, to do one of the two
    (see `RaftCore._handle_heartbeat_response`)."""

    __slots__ = ("beat_end", "due", "inflight", "inflight_bytes", "match", "next", "paused",
                 "recent_active", "replicating", "stall_beat", "stalled_at")

    def __init__(self, next_offset: int) -> None:
        #: How much of the leader's log the follower is known to hold; 0 when unknown.
        self.match = 0
        self.next = next_offset
        self.replicating = False
        self.paused = False
        self.recent_active = False
        self.inflight: deque[tuple[int, int]] = deque()
        self.inflight_bytes = 0
        #: ``next`` at the last heartbeat tick, and at the one before: what was sent a whole
        #: heartbeat interval ago is ``due``, acknowledged by now unless it was lost.
        self.beat_end = next_offset
        self.due = next_offset
        #: On-demand heartbeats (`RaftConfig.fortify`): ``match`` at the last heartbeat tick,
        #: and the heartbeat tick since which it stood still with an append waiting on it (or
        #: at which it was last asked about that).
        self.stalled_at = -1
        self.stall_beat = 0

    def become_probe(self) -> None:
        self.replicating = False
        self.paused = False
        self.next = self.match
        self.inflight.clear()
        self.inflight_bytes = 0

    def window_full(self, config: RaftConfig) -> bool:
        """Both limits close the window alike: whichever is reached first."""
        return (len(self.inflight) >= config.max_inflight_appends
                or self.inflight_bytes >= config.max_inflight_bytes)

    def sent(self, end: int, size: int) -> None:
        self.next = end
        self.inflight.append((end, size))
        self.inflight_bytes += size

    def free_to(self, end: int) -> None:
        while self.inflight and self.inflight[0][0] <= end:
            self.inflight_bytes -= self.inflight.popleft()[1]


class RaftCore:
    """A replica of one partition (membership: `tidelog.replication.membership`)."""

    def __init__(
        self,
        node_id: int,
        voters: Sequence[int],
        log: ReplicaLog,
        rng: random.Random,
        config: RaftConfig | None = None,
        hard_state: HardState | None = None,
        codec: BatchCodec | None = None,
        repair_floor: tuple[int, int] | None = None,
        learners: Sequence[int] = (),
        conf_state: ConfState | None = None,
    ) -> None:
        """``repair_floor`` is (last epoch, log end offset) of a log this replica is known to
        have held when storage lost part of it since (found at startup). Until its log is
        back there, it is damaged (see `damaged`).

        ``voters`` and ``learners`` are the bootstrap configuration: what the replica was
        created with (a new partition's replicas are all voters; a replica added later is
        created as a learner). ``conf_state`` is the committed configuration its store holds,
        when any was stored; it replaces the bootstrap one. Configuration entries in the log
        above the HW are read back here (see "Persistence" in the membership module)."""
        self.id = node_id
        self._config = config or RaftConfig()
        self._conf = conf_state or ConfState(-1, Membership.of(voters, learners))
        #: Configuration entries in the log after the committed one, oldest first.
        self._pending_confs: list[ConfState] = []
        self._last_conf = self._conf
        self._voters = MajorityConfig(())
        self._peers: tuple[int, ...] = ()
        self._rng = rng
        self._codec = codec or OpaqueCodec()
        self._log = RaftLog(log)
        hs = hard_state or HardState(0, None, 0)
        self._term = hs.term
        self._vote = hs.vote
        self._hw = max(hs.high_watermark, log.log_start_offset)
        self._role = Role.FOLLOWER
        self._leader: int | None = None
        self._msgs: list[Message] = []
        self._votes: dict[int, bool] = {}
        self._progress: dict[int, _Progress] = {}
        self._transferee: int | None = None
        #: The last term in which this replica began a leadership transfer.
        self._transfer_term = -1
        self._election_elapsed = 0
        self._heartbeat_elapsed = 0
        self._randomized_timeout = 0
        self._reset_randomized_timeout()
        self._last_hard_state = hs
        #: The term of the last hard state known durable (the one loaded, or one advanced).
        self._durable_term = hs.term
        self._last_soft: tuple[Role, int | None] = (self._role, self._leader)
        self._in_flight: Ready | None = None
        self._floor = repair_floor
        # ReadIndex (see `read_index`). Registered reads wait for a quorum's acknowledgement;
        # queued ones for the HW to reach the read floor.
        self._reads: deque[ReadState] = deque()
        self._queued_reads: list[int] = []
        self._read_acks: dict[int, int] = {}
        self._read_floor = 0
        self._last_read_ctx = 0
        self._read_states: list[ReadState] = []
        self._failed_reads: list[int] = []
        self._quiesced = False
        #: A follower's support of its leader (`fortify`): it heard the leader in this term,
        #: and has not learnt since that the leader's node lapsed or that the leader left.
        self._support = False
        #: Election timeouts a supporting follower has gone without hearing its leader
        #: (`RaftConfig.stall_timeouts`).
        self._unheard = 0
        #: The term this replica last led (0: none): stepped down within it, it tells a
        #: follower still supporting it so (`_handle_word_of_no_leader`).
        self._led_term = 0
        #: A former leader that is no voter (`fortify`): the voter it asks to stand.
        self._heir: int | None = None
        #: A leader's heartbeat ticks (on-demand heartbeats count a stall's in them).
        self._beats = 0
        at = max(self._hw, self._conf.offset + 1, self._log.log_start)
        while entries := self._log.read(at, self._config.max_append_bytes):
            self._scan_confs(entries)
            at = entries[-1].end_offset
        self._conf_changed()
        self._check_repaired()

    # ---- read-only state -------------------------------------------------------------------

    @property
    def term(self) -> int:
        return self._term

    @property
    def role(self) -> Role:
        return self._role

    @property
    def leader_id(self) -> int | None:
        return self._leader

    @property
    def high_watermark(self) -> int:
        return self._hw

    @property
    def log_start_offset(self) -> int:
        return self._log.log_start

    @property
    def log_end_offset(self) -> int:
        return self._log.end

    @property
    def last_epoch(self) -> int:
        return self._log.last_epoch

    @property
    def damaged(self) -> bool:
        """This replica's storage lost entries it held (Protocol-Aware Recovery, FAST'18). It
        follows and accepts appends, which repair it, but never campaigns, and it votes as if
        its log still ended where it did: a vote by its shorter log could elect a leader that
        lacks committed entries only the lost part held."""
        return self._floor is not None

    @property
    def transferring_to(self) -> int | None:
        return self._transferee

    @property
    def transferred_this_term(self) -> bool:
        """Whether this leader began a leadership transfer in its term (even one it has given
        up): its TimeoutNow may still reach the target, whose forced election ignores the
        followers' leases, so a read lease built on those must not be trusted for the rest of
        the term."""
        return self._transfer_term == self._term

    @property
    def quiesced(self) -> bool:
        """Idle and quiet: ticks do nothing (see "Quiescence" in the module docstring)."""
        return self._quiesced

    @property
    def steady(self) -> bool:
        """Whether this core's ticks, between two heartbeat intervals, do nothing but count
        (see "Fortification"): an awake voter following a leader it supports (its timer only
        counts toward the stall question, and it refuses votes while it supports anyway), or
        an awake leader of a fortified group (it heartbeats at most once an interval, and its
        check-quorum counts the nodes heard). A driver may give a steady core several ticks
        at once (`tick`'s ``ticks``; the node gives a leader a heartbeat interval's, a
        follower an election timeout's): its timers can only run slower so, never faster.
        Anything that may make it unsteady (a message, `peer_down`, a proposal) reaches the
        core through the driver, which then ticks it one tick at a time again."""
        if self._quiesced:
            return False
        if self._role is Role.LEADER:
            return self._config.fortify
        return (self._role is Role.FOLLOWER and self._supports()
                and self.id in self._voters.voters)

    @property
    def membership(self) -> Membership:
        """The configuration in effect: the newest in the log, committed or not."""
        return self.latest_conf.membership

    @property
    def conf_state(self) -> ConfState:
        """The newest committed configuration."""
        return self._conf

    @property
    def latest_conf(self) -> ConfState:
        """The configuration in effect with the offset of its entry (`membership`)."""
        return self._pending_confs[-1] if self._pending_confs else self._conf

    @property
    def conf_change_pending(self) -> bool:
        return bool(self._pending_confs)

    def epoch_at(self, offset: int) -> int | None:
        return self._log.epoch_at(offset)

    def match_of(self, peer: int) -> int:
        """How much of this leader's log `peer` is known to hold (its matched end offset); the
        driver reports in-sync replicas from it. 0 when unknown or when not the leader."""
        progress = self._progress.get(peer) if self._role is Role.LEADER else None
        return 0 if progress is None else progress.match

    # ---- inputs ----------------------------------------------------------------------------

    def tick(self, quorum_paced: bool = True, down: Collection[int] = (), ticks: int = 1) -> bool:
        """One tick of the clock (``ticks`` at once, only while the core is `steady`). False
        when it did nothing a driver must look at (a timer running, a leader's heartbeat tick
        that sent nothing), so a driver need not look at this core for it: thousands of awake
        groups (a new topic being elected) cost a driver one pass per tick over them, not
        three.

        ``quorum_paced`` False: the driver's node liveness says the nodes of this leader's
        followers ticked less than this node did lately (slow, not dead). A leader's
        check-quorum window then stands still for this tick (its heartbeats still go), so a
        leader whose followers' answers come late because their nodes are busy is not
        deposed by its own clock. Leases lose nothing: they rest on confirmed rounds and on
        the followers' refusals, not on this window.

        ``down``: the nodes the driver's node liveness has found silent for an election
        timeout (`peer_down`): a `fortify` leader's check-quorum counts the other voters (see
        "Fortification")."""
        if ticks != 1 and not (ticks > 1 and self.steady):
            raise ValueError(f"{ticks} ticks at once: only a steady core takes more than one")
        if self._quiesced:
            return False
        if self._role is Role.LEADER:
            return self._tick_leader(quorum_paced, down, ticks)
        self._election_elapsed += ticks
        if self.id not in self._voters.voters:
            if self._heir is None or self._election_elapsed < self._config.election_ticks:
                return False
            self._election_elapsed = 0
            self._send(TimeoutNow(self._term, self.id, self._heir))
            return True
        if self._election_elapsed < self._randomized_timeout:
            return False
        if self._supports():
            # Its leader's node is heard and it leads on: nothing to stand against. Unheard
            # for `stall_timeouts` election timeouts, it asks (an answer to no heartbeat)
            # whether something was lost, which also wakes a quiet leader to quiet the group
            # again.
            self._election_elapsed = 0
            self._unheard += 1
            if self._unheard < self._config.stall_timeouts:
                return False
            self._unheard = 0
            assert self._leader is not None
            self._send(HeartbeatResponse(self._term, self.id, self._leader))
            return True
        if self._floor is None:
            self._election_elapsed = 0
            self._campaign(pre_vote=self._config.pre_vote, transfer=False)
        elif self._leader is None and self._config.quiesce:
            # Damaged: it may not campaign, which is what would wake a quiet leader. An answer
            # to no heartbeat wakes it as well (and confirms no read), and the leader's next
            # heartbeat finds out what this replica lost.
            self._election_elapsed = 0
            for peer in self._peers:
                self._send(HeartbeatResponse(self._term, self.id, peer))
        return True

    def propose(self, data: bytes, record_count: int) -> Entry:
        """Append one batch of ``record_count`` records; returns the entry with its offsets and
        epoch. It is committed once a published HW passes ``last_offset`` while the log still
        holds this epoch there; if leadership is lost first it may be truncated."""
        if self._role is not Role.LEADER:
            raise NotLeaderError(self._leader)
        if self._transferee is not None:
            raise NotLeaderError(self._transferee, "leadership is being transferred")
        if record_count < 1:
            raise ValueError("a batch holds at least one record")
        if self._codec.membership_of(data) is not None:
            # Followers would take it for a configuration, and this leader would not.
            raise ValueError("a configuration is proposed by propose_conf_change")
        self._wake()
        base = self._log.end
        entry = Entry(base, base + record_count - 1, self._term,
                      self._codec.stamp(data, base, self._term))
        self._log.append((entry,))
        for peer, pr in self._progress.items():
            self._send_append(peer, pr, allow_empty=False)
        return entry

    def transfer_leadership(self, target: int) -> None:
        """Hand leadership to ``target`` once it holds the whole log (graceful shutdown,
        balancing). Proposals are refused meanwhile; it gives up after an election timeout."""
        if self._role is not Role.LEADER:
            raise NotLeaderError(self._leader)
        if target not in self._peers:
            raise ValueError(f"{target} is not another voter of this partition")
        self._wake()
        self._transferee = target
        self._transfer_term = self._term
        self._election_elapsed = 0
        pr = self._progress[target]
        # What the target lacks, or the HW alone: it may not have heard the newest yet.
        self._send_append(target, pr, allow_empty=True)
        if pr.match == self._log.end:
            self._send(TimeoutNow(self._term, self.id, target))

    def read_index(self, ctx: int) -> None:
        """Ask for a linearizable read (Raft thesis §6.4, etcd's ReadOnlySafe): a later Ready
        carries ``ReadState(ctx, index)`` once a quorum has confirmed that this replica still
        led its term after the read was registered, so no other leader can have committed
        anything before then, and ``index``, the HW at registration, covers every entry
        committed before it. If this replica stops leading first, ``ctx`` comes back in a
        Ready's ``failed_reads``. ``ctx`` names the read: it must exceed every context given
        to this core before (an acknowledgement of a context then confirms every older read).

        Registration waits until the HW has reached the log end offset this replica held when
        it was elected (the read floor). Leader completeness puts every entry committed by an
        earlier leader below that end, but a new leader's HW may lag it: the HW it loaded or
        learned from heartbeats says nothing about what the old leader committed last. Only
        once its HW passes the floor does it cover every earlier commitment, which happens at
        election when its HW already equals its LEO (it writes no marker, contract §7), and
        otherwise when its marker, the entry of its own term at the floor, commits (its HW can
        only move by committing an entry of its term, and that moves it past the marker):
        etcd's "committed an entry of the current term" rule, in Tidelog's terms."""
        if self._role is not Role.LEADER:
            raise NotLeaderError(self._leader)
        if ctx <= self._last_read_ctx:
            raise ValueError(f"read context {ctx} does not exceed {self._last_read_ctx}")
        self._wake()
        self._last_read_ctx = ctx
        if self._hw < self._read_floor:
            self._queued_reads.append(ctx)
        else:
            self._register_reads((ctx,))

    def campaign(self) -> None:
        """Stand for election now rather than after an election timeout: a new partition's
        preferred replica does, so the topic is led at once, and by the replica meant to lead
        it (not by whichever timer ran out first, to be moved later)."""
        if (self._role is Role.LEADER or self.id not in self._voters.voters
                or self._floor is not None):
            return
        self._campaign(pre_vote=self._config.pre_vote, transfer=False)

    def defer_election(self, timeouts: int = 1) -> None:
        """Wait ``timeouts`` extra election timeouts before standing: a new partition's other
        replicas do, so that their timers do not beat the preferred replica's campaign
        (`campaign`) when its node creates the partition late or its first vote requests were
        lost (its peers had not created the partition yet)."""
        if self._role is Role.FOLLOWER and self._leader is None:
            self._election_elapsed = -timeouts * self._config.election_ticks

    def peer_down(self, node: int) -> None:
        """Node liveness: nothing at all has come from ``node`` for an election timeout (see
        "Quiescence"). A follower of a leader on that node then counts its election timer as
        run out, and a quiesced one wakes: it campaigns after the random part of its timeout.
        Sound for leases: the refusal it ends has lasted an election timeout since the leader's
        last message, as an awake follower's would."""
        if self._role is not Role.FOLLOWER or self._leader != node:
            return
        self._wake()
        self._lapse()

    def _lapse(self) -> None:
        """This follower no longer supports its leader: its election timer counts as run out
        (it grants votes, and campaigns after the random part of its timeout)."""
        self._support = False
        self._election_elapsed = max(self._election_elapsed, self._config.election_ticks)

    def _supports(self) -> bool:
        """Whether this follower holds its leader's leadership for it (`fortify`): its timer
        stands still and it refuses votes, for as long as the leader's node is heard and the
        leader is a voter of the configuration in effect here."""
        return (self._support and self._config.fortify and self._leader is not None
                and self._leader in self._voters.voters)

    def _stale_answer(self, m: Message) -> bool:
        """Whether `m` is an answer of this term that tells a quiet leader nothing: a follower
        acknowledging what it was already known to hold, in a state that answer would not
        change (the answer to an append sent twice, or overtaken by a later one's; the same
        test `_handle_append_response` makes). A quiet leader's followers hold its whole log,
        and waking for it would only quiet the group again, with a quiesce heartbeat to each
        follower: at 1,000 partitions under load, one proposal in four paid for that. Its
        sender alone is sent one (it is awake: the append it answered woke it)."""
        if not (isinstance(m, AppendResponse) and self._role is Role.LEADER
                and m.term == self._term and m.success and not m.lost):
            return False
        pr = self._progress.get(m.src)
        return pr is not None and (m.match_end < pr.match
                                   or (m.match_end == pr.match and pr.replicating))

    def _wake(self) -> None:
        if not self._quiesced:
            return
        self._quiesced = False
        if self._role is Role.LEADER:
            # A fresh check-quorum window: what the followers did before the quiet says nothing
            # about now.
            self._election_elapsed = 0
            self._heartbeat_elapsed = 0
            for pr in self._progress.values():
                pr.recent_active = False

    def step(self, m: Message) -> None:
        # Any sender is heard: the term rules decide, and a replica may not know yet the
        # configuration that made the sender a member (a new learner, a reset follower).
        if m.dst != self.id or m.src == self.id:
            return
        vote = isinstance(m, PreVoteRequest | VoteRequest) and m.term > self._term
        if vote and m.src == self._leader and self._support and self._config.fortify:
            # Our leader stands for a newer term: it no longer leads ours (a leader never
            # campaigns; it stepped down, or its node restarted), and no lease of it remains.
            self._lapse()
        lease_refusal = (vote and self._in_lease()
                         and not (isinstance(m, VoteRequest) and m.transfer))
        if self._quiesced and self._stale_answer(m):
            # Its sender is awake (the append woke it): quiet it alone.
            self._send(Heartbeat(self._term, self.id, m.src, self._hw, quiesce=True))
            return
        if (self._quiesced and not (isinstance(m, Heartbeat) and m.quiesce)
                and not (lease_refusal and self._supports())):
            # A supporting follower refuses the vote and stays quiet: its timer would stand
            # still awake as well (see "Fortification").
            self._wake()
        if m.term > self._term:
            if lease_refusal and isinstance(m, PreVoteRequest | VoteRequest):
                # We heard from a live leader within an election timeout: the sender is the one
                # cut off, and letting it raise our term would depose a healthy leader.
                self._reject_vote(m)
                return
            if not (isinstance(m, PreVoteRequest)
                    or (isinstance(m, PreVoteResponse) and m.granted)):
                leader = m.src if isinstance(m, AppendRequest | Heartbeat | TimeoutNow) else None
                self._become_follower(m.term, leader)
        elif m.term < self._term:
            if isinstance(m, AppendRequest | Heartbeat | HeartbeatResponse):
                # A deposed leader that missed the election, or a follower asking a leader
                # that stepped down since: our term tells it (and ends its support).
                self._send(HeartbeatResponse(self._term, self.id, m.src))
            elif isinstance(m, PreVoteRequest):
                self._reject_vote(m)
            return

        if isinstance(m, PreVoteRequest | VoteRequest):
            self._handle_vote_request(m)
        elif self._role is Role.LEADER:
            if isinstance(m, AppendResponse):
                self._handle_append_response(m)
            elif isinstance(m, HeartbeatResponse):
                self._handle_heartbeat_response(m)
        elif isinstance(m, AppendRequest | Heartbeat):
            if self._role is not Role.FOLLOWER:
                self._become_follower(m.term, m.src)
            self._election_elapsed = 0
            self._unheard = 0
            self._leader = m.src
            self._support = True
            if isinstance(m, AppendRequest):
                self._handle_append(m)
            else:
                self._handle_heartbeat(m)
        elif isinstance(m, HeartbeatResponse):
            self._handle_word_of_no_leader(m)
        elif isinstance(m, TimeoutNow):
            if (self._role is Role.FOLLOWER and self._floor is None
                    and self.id in self._voters.voters):
                self._campaign(pre_vote=False, transfer=True)
        elif isinstance(m, PreVoteResponse):
            if self._role is Role.PRE_CANDIDATE and (not m.granted or m.term == self._term + 1):
                self._poll(m.src, m.granted)
        elif isinstance(m, VoteResponse) and self._role is Role.CANDIDATE:
            self._poll(m.src, m.granted)

    # ---- output ----------------------------------------------------------------------------

    def has_ready(self) -> bool:
        if self._in_flight is not None:
            return False
        # Asked of every replica a round looks at, most of them without one: the hard state
        # is compared field by field rather than built to be compared.
        last = self._last_hard_state
        return (
            bool(self._msgs)
            or self._log.has_writes()
            or self._hw != last.high_watermark
            or self._term != last.term
            or self._vote != last.vote
            or (self._role, self._leader) != self._last_soft
            or bool(self._read_states)
            or bool(self._failed_reads)
            or self._conf is not self._last_conf
        )

    def ready(self) -> Ready:
        if self._in_flight is not None:
            raise RuntimeError("the previous Ready has not been advanced")
        hs = self._hard_state()
        reset_to, truncate_to, entries = self._log.take_writes()
        rd = Ready(
            hard_state=None if hs == self._last_hard_state else hs,
            reset_to=reset_to,
            truncate_to=truncate_to,
            entries=entries,
            messages=tuple(self._msgs),
            high_watermark=self._hw,
            role=self._role,
            leader_id=self._leader,
            term=self._term,
            read_states=tuple(self._read_states),
            failed_reads=tuple(self._failed_reads),
            conf_state=None if self._conf is self._last_conf else self._conf,
        )
        self._last_conf = self._conf
        self._msgs = []
        if self._read_states:
            self._read_states.clear()
        if self._failed_reads:
            self._failed_reads.clear()
        self._last_hard_state = hs
        self._last_soft = (self._role, self._leader)
        self._in_flight = rd
        return rd

    def take_prompt_messages(self) -> list[Message]:
        """The heartbeats and heartbeat answers waiting to go, when their term is durable:
        they promise nothing a crash could take back (a heartbeat's HW is never persisted
        before it is sent either), so a driver may send them at once rather than behind the
        disk writes of the Ready in flight, as etcd's asynchronous storage writes do. Held
        back, a slow fsync looks like a dead leader to its followers (an election) or like
        dead followers to their leader (check-quorum steps it down). What a driver leaves
        here goes with the next Ready."""
        if not self._msgs:
            return []
        prompt: list[Message] = []
        rest: list[Message] = []
        durable = self._durable_term
        for m in self._msgs:
            is_prompt = isinstance(m, Heartbeat | HeartbeatResponse) and m.term == durable
            (prompt if is_prompt else rest).append(m)
        if prompt:
            self._msgs = rest
        return prompt

    def advance(self, rd: Ready) -> None:
        """``rd`` is durable and its messages are on their way."""
        if rd is not self._in_flight:
            raise RuntimeError("advance() of a Ready that is not the one in flight")
        self._in_flight = None
        if rd.hard_state is not None:
            self._durable_term = rd.hard_state.term
        self._log.stable_to_handed()
        if self._role is Role.LEADER and self._maybe_commit() and not self._quiesce_if_idle():
            self._send_commit()

    # ---- membership ------------------------------------------------------------------------

    def add_learner(self, node: int) -> Entry:
        return self.propose_conf_change(ConfChange(ConfChangeType.ADD_LEARNER, node))

    def promote(self, node: int) -> Entry:
        """Make learner ``node`` a voter. Promote a learner once it has caught up
        (`match_of`): until it has, it counts in the commit quorum without holding the log."""
        return self.propose_conf_change(ConfChange(ConfChangeType.PROMOTE, node))

    def remove(self, node: int) -> Entry:
        return self.propose_conf_change(ConfChange(ConfChangeType.REMOVE, node))

    def propose_conf_change(self, change: ConfChange) -> Entry:
        """Append the configuration ``change`` makes of the current one; it is in effect at
        once (on append) and committed like any entry. `NotLeaderError` off the leader;
        `ConfChangeError` when the change is illegal or must wait (see the membership
        module's rules)."""
        if self._role is not Role.LEADER:
            raise NotLeaderError(self._leader)
        if self._transferee is not None:
            raise NotLeaderError(self._transferee, "leadership is being transferred")
        if self.conf_change_pending:
            raise ConfChangeError(
                f"the change at offset {self.latest_conf.offset} is not committed yet",
                retriable=True)
        membership = self.membership.apply(change)
        self._wake()
        if self._hw <= self._log.log_start or self._log.epoch_at(self._hw - 1) != self._term:
            if self._log.last_epoch != self._term:
                # Elected with HW == LEO, so no marker was written: write it now, and the
                # change can go once it commits.
                end = self._log.end
                marker = self._codec.marker(end, self._term)
                self._log.append((Entry(end, end, self._term, marker),))
                self._bcast_append()
            raise ConfChangeError(f"the leader has not committed an entry of term {self._term} "
                                  "yet", retriable=True)
        base = self._log.end
        entry = Entry(base, base, self._term, self._codec.membership(base, self._term, membership))
        self._log.append((entry,))
        self._scan_confs((entry,))
        self._conf_changed()
        self._bcast_append()
        return entry

    def _scan_confs(self, entries: Iterable[Entry]) -> None:
        """Note the configuration entries among ``entries``, just added to the log (the caller
        applies them: `_conf_changed`)."""
        membership_of = self._codec.membership_of
        newest = self._pending_confs[-1].offset if self._pending_confs else self._conf.offset
        for e in entries:
            if e.base_offset > newest and (m := membership_of(e.data)) is not None:
                self._pending_confs.append(ConfState(e.base_offset, m))
                newest = e.base_offset

    def _truncate_confs(self, at: int) -> None:
        """The log lost everything from ``at`` on: so did the configuration."""
        pending = self._pending_confs
        if pending and pending[-1].offset >= at:
            while pending and pending[-1].offset >= at:
                pending.pop()
            self._conf_changed()

    def _commit_confs(self) -> None:
        """The HW moved: configurations below it are committed."""
        pending = self._pending_confs
        while pending and pending[0].offset < self._hw:
            self._conf = pending.pop(0)

    def _adopt_conf(self, conf: ConfState | None) -> None:
        """The log was reset to the leader's log start, which lies above everything it held:
        take the leader's committed configuration (or keep ours, if newer)."""
        self._pending_confs.clear()
        if conf is not None and conf.offset >= self._conf.offset:
            self._conf = conf
        self._conf_changed()

    def _conf_changed(self) -> None:
        """Put the configuration in effect to work: quorums, peers, and a leader's progress
        (new members are probed from the log end; removed ones forgotten)."""
        membership = self.membership
        self._voters = MajorityConfig(membership.voters)
        self._peers = tuple(v for v in membership.voters if v != self.id)
        if self._role is Role.LEADER:
            members = set(membership.members)
            members.discard(self.id)
            for gone in [p for p in self._progress if p not in members]:
                del self._progress[gone]
                if self._transferee == gone:
                    self._transferee = None
            end = self._log.end
            for p in members:
                if p not in self._progress:
                    self._progress[p] = _Progress(end)
            if self._reads:
                self._release_confirmed_reads()

    def _step_down_if_removed(self) -> bool:
        """After its removal committed, a leader hands over to a voter that holds its whole
        log (if any does) and steps down. True when it did."""
        if self.id in self._conf.membership.voters:
            return False
        end = self._log.end
        heir = max(self._peers, key=lambda p: self._progress[p].match, default=None)
        if heir is not None and (self._config.fortify or self._progress[heir].match == end):
            self._send(TimeoutNow(self._term, self.id, heir))
        self._become_follower(self._term, None)
        return True

    # ---- elections -------------------------------------------------------------------------

    def _hard_state(self) -> HardState:
        return HardState(self._term, self._vote, self._hw)

    def _reset_randomized_timeout(self) -> None:
        et = self._config.election_ticks
        self._randomized_timeout = et + self._rng.randrange(et)

    def _reset(self) -> None:
        self._election_elapsed = 0
        self._unheard = 0
        self._heartbeat_elapsed = 0
        self._reset_randomized_timeout()
        self._votes = {}
        self._progress = {}
        self._transferee = None
        self._quiesced = False
        self._support = False
        self._heir = None
        if self._reads or self._queued_reads:
            # Whoever leads next may commit what these reads must see: they can no longer be
            # confirmed here.
            self._failed_reads.extend(r.ctx for r in self._reads)
            self._failed_reads.extend(self._queued_reads)
            self._reads.clear()
            self._queued_reads.clear()
        if self._read_acks:
            self._read_acks.clear()

    def _in_lease(self) -> bool:
        return (
            self._config.check_quorum
            and self._leader is not None
            and (self._election_elapsed < self._config.election_ticks or self._supports())
        )

    def _become_follower(self, term: int, leader: int | None) -> None:
        heir = None
        if (self._role is Role.LEADER and self._config.fortify
                and self.id not in self._voters.voters):
            # A leader that stops leading and may not campaign (its own removal is in effect):
            # followers that have not learnt the removal support this node for as long as it
            # is heard, and nothing it does would tell them. The voter holding most of its log
            # is asked to stand (a forced election, which moves them to a newer term even if
            # it loses), again each election timeout until a newer term is heard of (`tick`).
            heir = max(self._peers, key=lambda p: self._progress[p].match, default=None)
        if term != self._term:
            self._term = term
            self._vote = None
        self._role = Role.FOLLOWER
        self._leader = leader
        self._reset()
        self._heir = heir

    def _campaign(self, pre_vote: bool, transfer: bool) -> None:
        if pre_vote:
            self._role = Role.PRE_CANDIDATE
            term = self._term + 1
        else:
            self._term += 1
            self._vote = self.id
            self._role = Role.CANDIDATE
            term = self._term
        self._leader = None
        self._reset()
        self._votes = {self.id: True}
        if self._voters.vote_result(self._votes):
            self._election_won()
            return
        last_epoch, end = self._log.last_epoch, self._log.end
        for peer in self._peers:
            if self._role is Role.PRE_CANDIDATE:
                self._send(PreVoteRequest(term, self.id, peer, end, last_epoch))
            else:
                self._send(VoteRequest(term, self.id, peer, end, last_epoch, transfer))

    def _poll(self, src: int, granted: bool) -> None:
        self._votes.setdefault(src, granted)
        result = self._voters.vote_result(self._votes)
        if result:
            self._election_won()
        elif result is False:
            self._become_follower(self._term, None)

    def _election_won(self) -> None:
        if self._role is Role.PRE_CANDIDATE:
            self._campaign(pre_vote=False, transfer=False)
        else:
            self._become_leader()

    def _reject_vote(self, m: PreVoteRequest | VoteRequest) -> None:
        if isinstance(m, PreVoteRequest):
            self._send(PreVoteResponse(self._term, self.id, m.src, False))
        else:
            self._send(VoteResponse(self._term, self.id, m.src, False))

    def _handle_vote_request(self, m: PreVoteRequest | VoteRequest) -> None:
        pre = isinstance(m, PreVoteRequest)
        can_vote = (
            self._vote == m.src
            or (self._vote is None and self._leader is None)
            or (pre and m.term > self._term)
        )
        ours = (self._log.last_epoch, self._log.end)
        if self._floor is not None:
            ours = max(ours, self._floor)
        up_to_date = (m.last_epoch, m.log_end_offset) >= ours
        if not (can_vote and up_to_date):
            self._reject_vote(m)
        elif pre:
            self._send(PreVoteResponse(m.term, self.id, m.src, True))
        else:
            self._election_elapsed = 0
            self._vote = m.src
            self._send(VoteResponse(self._term, self.id, m.src, True))

    # ---- leader ----------------------------------------------------------------------------

    def _handle_word_of_no_leader(self, m: HeartbeatResponse) -> None:
        """An answer to no heartbeat, of this term, reaching a replica that does not lead it:
        asked by a follower that supports it (a poke) while this replica led the term and
        stepped down since (its removal, or check-quorum), it answers ``resigned``; from the
        replica it follows, such an answer ends its support (`_lapse`). Otherwise a follower
        that never learnt of the step-down would support a leader that no longer leads for
        as long as its node is heard, refusing the votes of the voters left: seed 8661 of
        `tidelog sim --swarm` stalled so, a removed leader's heir a term ahead of it (its
        TimeoutNow stale there) and the only other voter, far behind, supporting it. Sound
        for leases: the lapse comes from the leader itself having stopped leading the term,
        when no lease of it is served any more."""
        if m.resigned:
            if m.src == self._leader and self._support and self._config.fortify:
                self._lapse()
        elif self._led_term == self._term:
            self._send(HeartbeatResponse(self._term, self.id, m.src, resigned=True))

    def _become_leader(self) -> None:
        self._role = Role.LEADER
        self._led_term = self._term
        self._leader = self.id
        self._reset()
        end = self._log.end
        self._conf_changed()  # progress for every member, probing from the log end
        self._read_floor = end
        if self._hw < end:
            # Entries of earlier epochs commit only by committing one of ours after them.
            self._log.append((Entry(end, end, self._term, self._codec.marker(end, self._term)),))
        self._bcast_append()

    def _tick_leader(self, quorum_paced: bool, down: Collection[int], ticks: int) -> bool:
        """True only when the tick did what a driver must look at: it stepped down, gave up a
        transfer, went quiet or sent a heartbeat. A fortified leader's heartbeat tick mostly
        sends nothing (its heartbeats go on demand), and the 100-350 awake leaders of a node
        under a produce over 1,000 partitions were each looked at again every interval."""
        self._election_elapsed += ticks * quorum_paced
        self._heartbeat_elapsed += ticks
        acted = False
        if self._election_elapsed >= self._config.election_ticks:
            acted = self._transferee is not None
            self._election_elapsed = 0
            if self._config.check_quorum:
                active = {self.id}
                # Fortified, a follower whose node is heard counts: its answers are only asked
                # for when something waits on them.
                heard = self._config.fortify
                for peer, pr in self._progress.items():
                    if pr.recent_active or (heard and peer not in down):
                        active.add(peer)
                    pr.recent_active = False
                if not self._voters.vote_result({v: True for v in active}):
                    self._become_follower(self._term, None)
                    return True
            self._transferee = None
        if self._heartbeat_elapsed >= self._config.heartbeat_ticks:
            self._heartbeat_elapsed = 0
            if self._quiesce_if_idle():
                return True
            self._beats += 1
            for pr in self._progress.values():
                pr.due, pr.beat_end = pr.beat_end, pr.next
            sent = len(self._msgs)
            self._bcast_heartbeat(on_demand=self._config.fortify and not self._reads)
            acted |= len(self._msgs) > sent
        return acted

    def _quiesce_if_idle(self) -> bool:
        """Go quiet if idle (`_idle`), with a last heartbeat marked ``quiesce`` to every
        follower, carrying the final HW: at a heartbeat tick, and as soon as the last write
        commits (in the step or advance that commits it), so a group that took one write
        does not stay awake, heartbeating, for the ticks until the next heartbeat tick."""
        if self._role is not Role.LEADER or not self._idle():
            return False
        self._quiesced = True
        hw = self._hw
        for peer in self._progress:
            self._send(Heartbeat(self._term, self.id, peer, hw, quiesce=True))
        return True

    def _idle(self) -> bool:
        """Whether this leader may quiesce: nothing to replicate, commit, read or transfer."""
        end = self._log.end
        return (
            self._config.quiesce
            and self._hw == end
            and self._transferee is None
            and not self._reads
            and not self._queued_reads
            and all(pr.match == end for pr in self._progress.values())
        )

    def _bcast_heartbeat(self, on_demand: bool = False) -> None:
        """Every heartbeat carries the newest pending read context, so a round whose answers
        were lost is retried by the next one. ``on_demand``: only to the followers an append
        waits on that acknowledged nothing for ``stall_timeouts`` election timeouts (a stall:
        what was sent may have been lost; the node of a follower is heard, or check-quorum
        would act), and again each time the stall lasts as long; the answer makes the leader
        resend what was lost (`_handle_heartbeat_response`). A follower whose answers flow,
        however late (a loaded node's fsyncs), is not asked: under load, asking whenever
        something was a
        heartbeat interval old cost dozens of heartbeat items a write."""
        ctx = self._reads[-1].ctx if self._reads else 0
        hw = self._hw
        beats = self._beats
        again = max(1, self._config.election_ticks // self._config.heartbeat_ticks) \
            * self._config.stall_timeouts
        for peer, pr in self._progress.items():
            if on_demand:
                if pr.match != pr.stalled_at or not (pr.paused or pr.next > pr.match):
                    pr.stalled_at, pr.stall_beat = pr.match, beats  # it moves, or none waits
                    continue
                if beats - pr.stall_beat < again:
                    continue
                pr.stall_beat = beats
            self._send(Heartbeat(self._term, self.id, peer, min(hw, pr.match), ctx))

    # ---- reads -----------------------------------------------------------------------------

    def _register_reads(self, ctxs: Sequence[int]) -> None:
        """Note the HW for each read, then ask the followers to confirm this leadership (a
        leader alone in its group confirms it itself)."""
        hw = self._hw
        if self._voters.voters == (self.id,):
            self._read_states.extend(ReadState(ctx, hw) for ctx in ctxs)
            return
        self._reads.extend(ReadState(ctx, hw) for ctx in ctxs)
        self._bcast_heartbeat()

    def _ack_read(self, peer: int, ctx: int) -> None:
        """``peer`` answered a heartbeat of this term that carried ``ctx``: it still followed
        us after every read up to ``ctx`` was registered. Release the reads a quorum (this
        replica included) has confirmed so."""
        acks = self._read_acks
        if ctx <= acks.get(peer, 0):
            return
        acks[peer] = ctx
        self._release_confirmed_reads()

    def _release_confirmed_reads(self) -> None:
        """Release the reads a quorum of the voters in effect has confirmed: after an
        acknowledgement, and after a configuration change (a leader left the only voter
        confirms its pending reads itself, which no answer would ever do)."""
        acks = self._read_acks
        newest = self._reads[-1].ctx
        me = self.id
        confirmed = self._voters.committed_end(lambda v: newest if v == me else acks.get(v, 0))
        reads = self._reads
        while reads and reads[0].ctx <= confirmed:
            self._read_states.append(reads.popleft())

    def _send(self, m: Message) -> None:
        self._msgs.append(m)

    def _send_append(self, peer: int, pr: _Progress, allow_empty: bool) -> bool:
        if pr.replicating:
            if pr.window_full(self._config):
                return False
        elif pr.paused:
            return False
        log = self._log
        nxt = max(pr.next, log.log_start)
        entries = log.read(nxt, self._config.max_append_bytes) if nxt < log.end else []
        if entries:
            nxt = entries[0].base_offset
        elif not allow_empty:
            return False
        self._send_entries(peer, nxt, entries)
        if not pr.replicating:
            pr.next = nxt
            pr.paused = True
        elif entries:
            pr.sent(entries[-1].end_offset, sum(e.size for e in entries))
        return True

    def _send_entries(self, peer: int, nxt: int, entries: Sequence[Entry]) -> None:
        prev_epoch = self._log.epoch_at(nxt - 1)
        # From the log start on, a follower may be reset here: it then needs the committed
        # configuration, whose entry may be gone.
        conf = self._conf if prev_epoch is None and nxt > 0 else None
        self._send(AppendRequest(
            self._term, self.id, peer, nxt - 1, NO_EPOCH if prev_epoch is None else prev_epoch,
            tuple(entries), self._hw, conf,
        ))

    def _bcast_append(self) -> None:
        for peer, pr in self._progress.items():
            self._send_append(peer, pr, allow_empty=True)

    def _send_commit(self) -> None:
        """The HW moved: send what waits to go, which carries it (see "Carrying the HW"). Only
        an `eager_hw` group's followers, and the target of a transfer (elected with the HW at
        its log end, it writes no marker), get an empty append when nothing else goes."""
        eager = self._config.eager_hw
        transferee = self._transferee
        for peer, pr in self._progress.items():
            self._send_append(peer, pr, allow_empty=eager or peer == transferee)

    def _maybe_commit(self) -> bool:
        own = self._log.offset
        progress = self._progress
        end = self._voters.committed_end(lambda v: own if v == self.id else progress[v].match)
        # Counting replicas proves commitment only for entries of our own epoch (Raft §5.4.2).
        if end > self._hw and self._log.epoch_at(end - 1) == self._term:
            self._hw = end
            if self._pending_confs:
                self._commit_confs()
                if self._step_down_if_removed():
                    return False
            if self._queued_reads and end >= self._read_floor:
                queued, self._queued_reads = self._queued_reads, []
                self._register_reads(queued)
            return True
        return False

    def _handle_append_response(self, m: AppendResponse) -> None:
        pr = self._progress.get(m.src)
        if pr is None:
            return  # no longer a member
        pr.recent_active = True
        if m.lost:
            if m.match_end < pr.match:
                # Its log is a prefix of what it acknowledged: probe from where it ends.
                pr.match = m.match_end
                pr.become_probe()
                self._send_append(m.src, pr, allow_empty=True)
            return
        if not m.success:
            if self._maybe_decrease(pr, m):
                self._send_append(m.src, pr, allow_empty=True)
            return
        if m.match_end < pr.match or (m.match_end == pr.match and pr.replicating):
            return
        pr.match = m.match_end
        pr.paused = False
        if pr.replicating:
            pr.next = max(pr.next, pr.match)
            pr.free_to(pr.match)
        else:
            pr.replicating = True
            pr.next = pr.match
        committed = self._maybe_commit()
        if self._role is not Role.LEADER:
            return  # removed, and stepped down
        if pr.match == self._log.end and self._quiesce_if_idle():
            return  # the last answer of the last write: quiet now
        if committed:
            self._send_commit()
        while self._send_append(m.src, pr, allow_empty=False):
            pass
        if self._transferee == m.src and pr.match == self._log.end:
            self._send(TimeoutNow(self._term, self.id, m.src))

    def _maybe_decrease(self, pr: _Progress, m: AppendResponse) -> bool:
        """Move ``next`` back after a rejection; False when the rejection is stale."""
        if pr.replicating:
            # Appends sent since the follower acknowledged ``match`` all start at or after it;
            # a rejection of an earlier one is stale.
            if m.rejected_prev < pr.match - 1:
                return False
            pr.become_probe()
        elif m.rejected_prev != pr.next - 1:
            return False
        if m.rejected_prev < pr.match:
            # The follower lacks what it acknowledged (storage damage, as a ``lost`` answer
            # to a heartbeat says). Probing from the old ``match`` would be rejected at once,
            # again and again until the next heartbeat; forget it, the hint says where to go.
            pr.match = 0
        if m.hint_epoch == NO_EPOCH:
            # The follower has nothing after its committed prefix that we could match.
            x = m.hint_offset
        else:
            x, _ = self._log.find_conflict_by_epoch(m.hint_offset, m.hint_epoch)
        pr.next = max(min(x + 1, m.rejected_prev), pr.match)
        pr.paused = False
        return True

    def _handle_heartbeat_response(self, m: HeartbeatResponse) -> None:
        pr = self._progress.get(m.src)
        if pr is None:
            return  # no longer a member
        if m.read_ctx and self._reads:
            self._ack_read(m.src, m.read_ctx)
        pr.recent_active = True
        pr.paused = False
        if pr.match >= self._log.end:
            return
        if pr.replicating and pr.window_full(self._config):
            # The follower is alive, and nothing it acknowledged has freed the window: the
            # appends filling it are late, or lost (a transport drops what it cannot deliver).
            # An empty append at ``next`` takes no slot and forces the answer: the follower
            # acknowledges it, freeing the window, if it holds everything sent, and rejects
            # it, sending us back to probing from ``match``, if an append went missing.
            self._send_entries(m.src, max(pr.next, self._log.log_start), ())
        else:
            # An append that was lost leaves the follower silent, and only an append it cannot
            # match makes it say where it really is: send one even with nothing new, when
            # probing, or when what is due (sent a heartbeat interval ago) is unanswered.
            # Appends sent since are still on their way (a heartbeat's answer, sent at once,
            # overtakes the answers of appends, which wait for the follower's fsync): under
            # load an empty append for every heartbeat answer doubled the heartbeat traffic.
            lost = not pr.replicating or pr.match < pr.due
            self._send_append(m.src, pr, allow_empty=lost)

    # ---- follower --------------------------------------------------------------------------

    def _handle_append(self, m: AppendRequest) -> None:
        log = self._log
        if m.prev_offset < self._hw - 1:
            # Everything up to our HW is committed, so it equals the leader's log already.
            self._send(AppendResponse(self._term, self.id, m.src, True, match_end=self._hw))
            return
        if m.prev_offset >= self._hw:
            if m.prev_epoch == NO_EPOCH:
                first = m.entries[0] if m.entries else None
                if first is None or log.epoch_at(first.base_offset) != first.epoch:
                    # The leader's log starts after our HW and we do not hold its first batch:
                    # what it deleted was committed, our copy of it is not needed, and what we
                    # hold after it diverges. Start where the leader's log does (as Kafka).
                    log.reset(m.prev_offset + 1)
                    self._hw = m.prev_offset + 1
                    self._adopt_conf(m.conf_state)
                # Else we hold the leader's first batch, so by log matching all before it.
            elif log.epoch_at(m.prev_offset) != m.prev_epoch:
                if m.prev_offset >= log.end:
                    hint_offset, hint_epoch = log.end - 1, log.last_epoch
                else:
                    hint_offset, hint_epoch = log.find_conflict_by_epoch(m.prev_offset,
                                                                         m.prev_epoch)
                self._send(AppendResponse(
                    self._term, self.id, m.src, False, rejected_prev=m.prev_offset,
                    hint_offset=hint_offset, hint_epoch=hint_epoch,
                ))
                return
        entries = m.entries
        end = log.end
        i = 0
        while i < len(entries) and entries[i].base_offset < end:
            e = entries[i]
            if log.epoch_at(e.base_offset) != e.epoch:
                if e.base_offset < self._hw:
                    raise SafetyViolation(f"node {self.id}: entry at {e.base_offset} conflicts "
                                          f"below the high watermark {self._hw}")
                break
            i += 1
        if i < len(entries):
            log.truncate_and_append(entries[i:])
            self._truncate_confs(entries[i].base_offset)
            newest = self._pending_confs[-1] if self._pending_confs else None
            self._scan_confs(entries[i:])
            if self._pending_confs and self._pending_confs[-1] is not newest:
                self._conf_changed()
        last_new = entries[-1].end_offset if entries else m.prev_offset + 1
        hw = min(m.leader_hw, last_new)
        if hw > self._hw:
            self._hw = hw
            self._commit_confs()
        self._send(AppendResponse(self._term, self.id, m.src, True, match_end=last_new))
        self._check_repaired()

    def _handle_heartbeat(self, m: Heartbeat) -> None:
        log = self._log
        if m.leader_hw > log.end:
            # The HW is capped at what we acknowledged, and a log only loses acknowledged
            # entries to storage damage: tell the leader, whose match for us is now wrong.
            self._send(AppendResponse(self._term, self.id, m.src, False, match_end=log.end,
                                      lost=True))
            return
        if m.leader_hw > self._hw:
            self._hw = m.leader_hw
            self._commit_confs()
        self._check_repaired()
        if m.quiesce:
            # Our log holds the leader's up to its HW, which was its log end: quiet until
            # something changes. An answer would wake the leader.
            self._quiesced = True
            return
        self._send(HeartbeatResponse(self._term, self.id, m.src, m.read_ctx))

    def _check_repaired(self) -> None:
        if self._floor is not None and (self._log.last_epoch, self._log.end) >= self._floor:
            self._floor = None
