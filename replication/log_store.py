"""A replica's durable state on a `storage.Log`, as the node and the simulator both keep it.

`StorageReplicaLog` is the storage log seen through the core's `ReplicaLog` protocol. The core
reasons in entries (one record batch each, with offsets and an epoch); storage keeps the same
batches as bytes in segments. The adapter only splits read bytes at batch boundaries (views,
not copies) and joins appended entries back into bytes, so a batch is never decoded or
re-encoded on its way from the leader's disk to a follower's.

Appends take one of two storage entry points. Entries of the epoch this replica leads were
validated and stamped here (only the leader of an epoch creates entries of that epoch), so they
go to `Log.append_stamped`; everything else came from another node and goes to
`Log.append_as_follower`, which checks each batch's CRC before writing it.

`LogStore` is the driver's `ReplicaStore` over it: the Ready's log writes, and the term and vote
in the node's book of them (`tidelog.replication.term_votes`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from tidelog.errors import CorruptMessageError
from tidelog.records import (
    ControlType,
    build_control_batch,
    iter_batches,
)
from tidelog.replication.driver import TermVote
from tidelog.replication.membership import (
    ConfState,
    Membership,
    encode_membership,
    membership_of,
)
from tidelog.replication.raft import HardState, Ready, Role
from tidelog.replication.replica_log import Entry
from tidelog.replication.term_votes import TermVotes
from tidelog.storage import CheckpointFile, Log

_logger = logging.getLogger(__name__)

#: Where a log directory kept its own term and vote before the node's book held them.
RAFT_STATE_FILE = "raft-state"
#: The committed configuration (`Ready.conf_state`), beside the term and vote.
RAFT_CONF_FILE = "raft-config"

class LogCodec:
    """How the core stamps a proposed batch: as the partition's log stamps a leader's batch
    (`Log.stamp`: offsets, epoch, and the broker time under LogAppendTime); and its marker, a
    leader-change control batch."""

    def __init__(self, log: Log) -> None:
        self._log = log

    def stamp(self, data: bytes, base_offset: int, epoch: int) -> bytes:
        return self._log.stamp(data, base_offset, epoch)

    def marker(self, base_offset: int, epoch: int) -> bytes:
        return build_control_batch(
            ControlType.LEADER_CHANGE, base_offset=base_offset, partition_leader_epoch=epoch
        )

    def membership(self, base_offset: int, epoch: int, membership: Membership) -> bytes:
        return build_control_batch(ControlType.MEMBERSHIP, base_offset=base_offset,
                                   partition_leader_epoch=epoch,
                                   value=encode_membership(membership))

    def membership_of(self, data: bytes | memoryview) -> Membership | None:
        """A configuration batch that does not decode reached this log through a CRC check,
        so only a bug writes one: it is reported, not taken for a configuration."""
        try:
            return membership_of(data)
        except CorruptMessageError as exc:
            _logger.error("%s: %s", self._log.directory, exc)
            return None


class StorageReplicaLog:
    """A `replication.ReplicaLog` over a `storage.Log`."""

    def __init__(self, log: Log) -> None:
        self.log = log
        #: The epoch this replica leads in the Ready being written (set by the writer before
        #: it applies the Ready), or None when it does not lead.
        self.leading_epoch: int | None = None

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    def epoch_at(self, offset: int) -> int | None:
        if not self.log.log_start_offset <= offset < self.log.log_end_offset:
            return None
        epoch = self.log.leader_epoch_cache.epoch_for_offset(offset)
        return None if epoch < 0 else epoch

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        log = self.log
        return log.leader_epoch_cache.end_offset_for(epoch, log.log_start_offset,
                                                     log.log_end_offset)

    def read(self, from_offset: int, max_bytes: int) -> list[Entry]:
        if not self.log.log_start_offset <= from_offset < self.log.log_end_offset:
            return []
        data = memoryview(self.log.read(from_offset, max_bytes))
        return [
            Entry(
                header.base_offset,
                header.last_offset,
                header.partition_leader_epoch,
                data[pos : pos + header.size],
            )
            for pos, header in iter_batches(data)
        ]

    def append(self, entries: Sequence[Entry]) -> None:
        # Epochs never decrease along a log: entries received while following come first.
        own = len(entries)
        while own > 0 and entries[own - 1].epoch == self.leading_epoch:
            own -= 1
        if own > 0:
            self.log.append_as_follower(_joined(entries[:own]))
        if own < len(entries):
            self.log.append_stamped(_joined(entries[own:]))

    def truncate_to(self, offset: int) -> None:
        self.log.truncate_to(offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self.log.truncate_fully_and_start_at(offset)


def _joined(entries: Sequence[Entry]) -> bytes | memoryview:
    # One entry (the usual append) is written straight from the message or the stamped batch.
    return entries[0].data if len(entries) == 1 else b"".join(e.data for e in entries)


class LogStore:
    """The `ReplicaStore` of a replica on a storage log, its term and vote in `term_votes` by
    its directory's name. ``sync_writes`` False leaves the log's durability to the page cache
    and replication (Kafka's default flush policy; the term and vote are always synced);
    ``closed`` drops the writes of a replica being removed."""

    def __init__(self, log: Log, term_votes: TermVotes, sync_writes: bool = True) -> None:
        self.log = log
        self.replica_log = StorageReplicaLog(log)
        self.closed = False
        self.term_votes = term_votes
        self.name = log.directory.name
        self._sync_writes = sync_writes
        self._unsynced = False
        self._conf_file = CheckpointFile(
            log.directory / RAFT_CONF_FILE, version=0, width=2, named=True
        )

    def hard_state(self) -> HardState:
        stored = self.term_votes.get(self.name)
        term, vote = stored if stored is not None else self._own_file_state()
        return HardState(term, vote, self.log.high_watermark)

    def _own_file_state(self) -> tuple[int, int | None]:
        """The term and vote in the directory's own file (written before the book existed)."""
        path = self.log.directory / RAFT_STATE_FILE
        rows = CheckpointFile(path, version=0, width=2, named=True).read() or []
        state = dict((key, int(value)) for key, value in rows)
        term, vote = state.get("term", 0), state.get("vote", -1)
        if term < 0 or vote < -1 or not state.keys() <= {"term", "vote"}:
            _logger.warning("%s: ignoring invalid %s %s", self.log.directory, RAFT_STATE_FILE,
                            state)
            term, vote = 0, -1
        return term, None if vote < 0 else vote

    def conf_state(self) -> ConfState | None:
        """The committed configuration stored (None when none was: the replica keeps the one
        it was created with)."""
        rows = self._conf_file.read()
        if rows is None:
            return None
        offsets = [int(v) for k, v in rows if k == "offset"]
        voters = [int(v) for k, v in rows if k == "voter"]
        learners = [int(v) for k, v in rows if k == "learner"]
        try:
            if len(offsets) != 1 or offsets[0] < -1 or not voters or \
                    len(offsets) + len(voters) + len(learners) != len(rows):
                raise ValueError("one offset and at least one voter expected")
            return ConfState(offsets[0], Membership.of(voters, learners))
        except ValueError as exc:
            # Only outside damage writes this: the log's configuration entries above the
            # HW are still read, and the operator is told.
            _logger.error("%s: ignoring invalid %s %s: %s", self.log.directory, RAFT_CONF_FILE,
                          rows, exc)
            return None

    def apply(self, rd: Ready, term_vote: TermVote | None) -> None:
        if self.closed:
            return
        if rd.conf_state is not None:
            # Before the log writes: a committed configuration is true whatever the log keeps,
            # while a log that kept this Ready's entries (a torn write keeps a prefix) and lost
            # this file would hold two configurations above the one stored. Durable before
            # this Ready's HW, which covers its entry, is published.
            conf = rd.conf_state
            self._conf_file.write([("offset", conf.offset),
                                   *(("voter", v) for v in conf.membership.voters),
                                   *(("learner", v) for v in conf.membership.learners)])
        self.replica_log.leading_epoch = rd.term if rd.role is Role.LEADER else None
        rd.apply_log_writes(self.replica_log)
        if rd.entries or rd.truncate_to is not None or rd.reset_to is not None:
            self._unsynced = True
        if term_vote is not None:
            self.term_votes.set(self.name, term_vote)

    def sync(self) -> None:
        if self.needs_sync:
            self.log.sync_data()
        self._unsynced = False
        self.term_votes.sync()

    @property
    def needs_sync(self) -> bool:
        """Whether `sync` would fsync the log (writes applied since the last, and synced)."""
        return self._unsynced and self._sync_writes and not self.closed

    def synced_by_filesystem(self) -> None:
        """`sync`, when the log's filesystem was synced (``syncfs``) after this store's writes
        were applied: the log's own fsyncs are left out (`Log.mark_synced`); the term and
        vote book is synced as by `sync`."""
        if self.needs_sync:
            self.log.mark_synced()
        self._unsynced = False
        self.term_votes.sync()
