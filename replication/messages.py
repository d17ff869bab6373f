"""Messages between the Raft cores of one partition's replicas.

Every message names its partition's group implicitly (the driver routes it) and carries the
sender's term: a receiver first compares terms, which is how stale leaders learn they were
deposed. Offsets follow Kafka: ``*_offset`` is an offset that holds a record, ``*_end`` is
exclusive (a log end offset). Heartbeats are separate from appends so that a driver can coalesce
the heartbeats of all partitions between two nodes into one network message.
"""

from __future__ import annotations

from dataclasses import dataclass

from tidelog.replication.membership import ConfState
from tidelog.replication.replica_log import Entry


@dataclass(frozen=True, slots=True)
class PreVoteRequest:
    """Would you vote for me at ``term``? Sent before a pre-candidate touches its own term, so
    a node rejoining from a partition cannot force a healthy group into a new election."""

    term: int
    src: int
    dst: int
    log_end_offset: int
    last_epoch: int


@dataclass(frozen=True, slots=True)
class PreVoteResponse:
    term: int
    src: int
    dst: int
    granted: bool


@dataclass(frozen=True, slots=True)
class VoteRequest:
    """``transfer`` marks an election ordered by the old leader (TimeoutNow): voters then ignore
    their leader lease, which would otherwise make them refuse."""

    term: int
    src: int
    dst: int
    log_end_offset: int
    last_epoch: int
    transfer: bool = False


@dataclass(frozen=True, slots=True)
class VoteResponse:
    term: int
    src: int
    dst: int
    granted: bool


@dataclass(frozen=True, slots=True)
class AppendRequest:
    """Raft AppendEntries. ``prev_epoch == NO_EPOCH`` with ``prev_offset >= 0`` means the leader
    no longer has the batch before ``prev_offset + 1``, its log start offset: a follower that
    has not committed up to there and lacks the first batch sent restarts its log at
    ``prev_offset + 1`` (Kafka's truncate-fully-and-start-at), and takes ``conf_state``, the
    leader's committed configuration (the entry that held it may be gone with the rest), which
    the leader sends with every append from its log start."""

    term: int
    src: int
    dst: int
    prev_offset: int
    prev_epoch: int
    entries: tuple[Entry, ...]
    leader_hw: int
    conf_state: ConfState | None = None


@dataclass(frozen=True, slots=True)
class AppendResponse:
    """On success ``match_end`` is the end of the follower's log known to equal the leader's.
    On rejection the hint is the follower's last offset whose epoch is <= the rejected
    ``prev_epoch`` (and that epoch): the leader skips a whole epoch per round trip.

    ``lost`` (with ``success`` False) is the answer to a heartbeat whose HW the follower's log
    does not reach: it acknowledged more than it holds now (its storage lost data), so the
    leader's match for it is wrong and ``match_end`` is where its log really ends. A rejection
    cannot say this: a stale one looks the same and is ignored."""

    term: int
    src: int
    dst: int
    success: bool
    match_end: int = 0
    rejected_prev: int = 0
    hint_offset: int = 0
    hint_epoch: int = 0
    lost: bool = False


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """``leader_hw`` is capped at what this follower is known to hold, so a follower never
    learns a HW above entries it has not been shown to match.

    ``read_ctx`` is the newest read context (`RaftCore.read_index`) the leader had registered
    when it sent this heartbeat, 0 for none: the follower echoes it, and its answer proves the
    sender still led this term after every read up to that context was registered.

    ``quiesce``: the leader's last heartbeat before it goes quiet (see `tidelog.replication.raft`,
    "Quiescence"); the follower quiesces too and does not answer."""

    term: int
    src: int
    dst: int
    leader_hw: int
    read_ctx: int = 0
    quiesce: bool = False


@dataclass(frozen=True, slots=True)
class HeartbeatResponse:
    """``read_ctx`` echoes the heartbeat's (0 for none, and from a peer that predates reads).

    ``resigned``: from a replica that led this term and stepped down since, answering a
    follower that still supports it (`RaftCore._handle_word_of_no_leader`)."""

    term: int
    src: int
    dst: int
    read_ctx: int = 0
    resigned: bool = False


@dataclass(frozen=True, slots=True)
class TimeoutNow:
    """From a leader handing over leadership: campaign now, without pre-vote."""

    term: int
    src: int
    dst: int


Message = (
    PreVoteRequest
    | PreVoteResponse
    | VoteRequest
    | VoteResponse
    | AppendRequest
    | AppendResponse
    | Heartbeat
    | HeartbeatResponse
    | TimeoutNow
)
