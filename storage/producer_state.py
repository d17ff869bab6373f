"""What each producer wrote to a partition: idempotence, open transactions, the first unstable
offset, and the snapshot file that saves a scan of the log (Kafka's ProducerStateManager,
kafka-mapping §8.9).

Per producer id it keeps the epoch, the last few batches (first and last sequence, offsets),
the epoch of the transaction coordinator whose marker it saw last, and the first offset of its
open transaction. Every replica's `Log` keeps one, updated as batches are appended (leader or
follower alike), so that:

* an ABORT marker appended anywhere writes its `.txnindex` entry with the transaction's first
  offset, which only the state knows;
* the last stable offset (the first offset of the oldest undecided transaction, or the high
  watermark) is known on every replica, a new leader's at once;
* a leader checks a produced batch (`check`) or a marker (`check_marker`) against a copy of it
  that runs ahead of the disk by the proposals not yet written (`clone`).

A transaction stays unstable after its marker is appended until the high watermark passes the
marker (`UnifiedLogTest.testFirstUnstableOffsetWithTransactionalData`), so decided transactions
are kept, with their marker offset, until then.

The state at a segment's base offset is saved beside it when the log rolls, as
``<base offset>.snapshot`` (`write_snapshot`); opening the log loads the newest snapshot at or
below the log end and scans only the batches after it. Every byte of a snapshot is checked
(`read_snapshot`): a bad one is ignored for an older one or a scan, never trusted.
"""

from __future__ import annotations

import os
import struct
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import crc32c

from tidelog import errors
from tidelog.records import (
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    BatchHeader,
    ControlType,
)
from tidelog.storage.checkpoint import DATA_FILE_MODE, TMP_SUFFIX

#: Kafka keeps the metadata of the last five batches per producer (max.in.flight = 5).
BATCHES_TO_RETAIN = 5
SEQUENCE_WRAP = 1 << 31
SNAPSHOT_SUFFIX = ".snapshot"
NO_TXN = -1

_MAGIC = b"TLPS"
_VERSION = 1
# magic, version, crc32c of everything after it, the snapshot offset, producers, decided txns
_HEAD = struct.Struct(">4shIqii")
_CRC_FROM = 10  # the crc covers the bytes from the snapshot offset on
# pid, epoch, coordinator epoch, open transaction's first offset, batches kept
_PRODUCER = struct.Struct(">qhiqb")
# first sequence, last sequence, base offset, last offset, leader epoch
_BATCH = struct.Struct(">iiqqi")
# first offset, marker offset of a decided transaction not yet below the high watermark
_DECIDED = struct.Struct(">qq")


@dataclass(frozen=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    base_offset: int
    last_offset: int
    leader_epoch: int


@dataclass
class ProducerEntry:
    producer_epoch: int
    coordinator_epoch: int = -1
    #: The first offset of the producer's open transaction on this partition, or NO_TXN.
    txn_first_offset: int = NO_TXN
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=BATCHES_TO_RETAIN))

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1

    def copy(self) -> ProducerEntry:
        return ProducerEntry(
            self.producer_epoch, self.coordinator_epoch, self.txn_first_offset,
            deque(self.batches, maxlen=BATCHES_TO_RETAIN),
        )


@dataclass(frozen=True)
class CompletedTxn:
    """A transaction a marker ended: what the `.txnindex` needs of an aborted one."""

    producer_id: int
    first_offset: int
    marker_offset: int
    aborted: bool


@dataclass(eq=False)
class VerificationGuard:
    """A leader's pending or done verification, with the transaction coordinator, that a
    producer's transactional batches at `producer_epoch` belong to a transaction the
    coordinator knows of on this partition (KIP-890 part 1). Made before the question is sent
    and dropped by the producer's next marker, so an answer that comes back after the
    transaction ended (its marker written meanwhile) verifies nothing: `verified` is set on an
    object no longer in the state."""

    producer_id: int
    producer_epoch: int
    verified: bool = False


def last_seq_of(header: BatchHeader) -> int:
    return (header.base_sequence + header.last_offset_delta) % SEQUENCE_WRAP


class ProducerStateManager:
    """One partition's producer state. A leader calls `check` (or `check_marker`) before it
    proposes a batch and `update` once it has; every replica's log calls `update` as it
    appends."""

    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}
        #: Producer id -> first offset of its open transaction. The log's writer changes it
        #: while the node's loop reads the last stable offset: readers copy it in one step
        #: (atomic under the GIL), so no lock is taken on the read path.
        self._open: dict[int, int] = {}
        #: Transactions ended by a marker the high watermark may not have passed yet:
        #: (first offset, marker offset). Replaced, never changed in place, for the same reason.
        self._decided: tuple[tuple[int, int], ...] = ()
        #: Producer id -> its verification on the leader (`needs_verification`); the
        #: leader's copy only: never cloned, saved or replicated (a new leader verifies again).
        self._guards: dict[int, VerificationGuard] = {}

    def clone(self) -> ProducerStateManager:
        copy = ProducerStateManager()
        copy.producers = {pid: entry.copy() for pid, entry in self.producers.items()}
        copy._open = dict(self._open)
        copy._decided = self._decided
        return copy

    # ---- checks --------------------------------------------------------------------------

    def check(self, header: BatchHeader) -> BatchMetadata | None:
        """The original of a duplicate data batch, None for a new one. Raises
        INVALID_PRODUCER_EPOCH for an epoch older than the producer's, OUT_OF_ORDER_SEQUENCE_NUMBER
        for a gap, and INVALID_TXN_STATE for a non-transactional batch of a producer whose
        transaction is open here (kafka-mapping §8.9)."""
        if header.producer_id == NO_PRODUCER_ID or header.is_control:
            return None
        entry = self.producers.get(header.producer_id)
        if header.base_sequence == NO_SEQUENCE:
            # A node's own batch for the producer (TxnOffsetCommit's records): no sequence to
            # check, only the epoch (clients' batches always carry one: `validate_batch`).
            if entry is not None and header.producer_epoch < entry.producer_epoch:
                raise errors.InvalidProducerEpochError(
                    f"producer {header.producer_id} epoch {header.producer_epoch} is older "
                    f"than {entry.producer_epoch}"
                )
            return None
        if entry is None or header.producer_epoch > entry.producer_epoch:
            if header.base_sequence != 0:
                raise errors.OutOfOrderSequenceNumberError(
                    f"producer {header.producer_id} epoch {header.producer_epoch} must start at "
                    f"sequence 0, got {header.base_sequence}"
                )
            return None
        if header.producer_epoch < entry.producer_epoch:
            raise errors.InvalidProducerEpochError(
                f"producer {header.producer_id} epoch {header.producer_epoch} is older than "
                f"{entry.producer_epoch}"
            )
        last_seq = last_seq_of(header)
        for batch in entry.batches:
            if batch.first_seq == header.base_sequence and batch.last_seq == last_seq:
                return batch
        if entry.txn_first_offset != NO_TXN and not header.is_transactional:
            raise errors.InvalidTxnStateError(
                f"producer {header.producer_id} wrote a non-transactional batch while its "
                f"transaction that starts at offset {entry.txn_first_offset} is open"
            )
        expected = (entry.last_seq + 1) % SEQUENCE_WRAP
        if header.base_sequence != expected:
            raise errors.OutOfOrderSequenceNumberError(
                f"producer {header.producer_id}: expected sequence {expected}, "
                f"got {header.base_sequence}"
            )
        return None

    def needs_verification(self, header: BatchHeader) -> bool:
        """Whether a data batch may open a transaction here that its coordinator has not
        vouched for: a transactional batch of a producer with no transaction open at its
        epoch on this partition (the first batch of a transaction here) and no verification
        done for that epoch since the producer's last marker."""
        if not header.is_transactional or header.is_control or header.producer_id < 0:
            return False
        entry = self.producers.get(header.producer_id)
        if (entry is not None and entry.txn_first_offset != NO_TXN
                and entry.producer_epoch == header.producer_epoch):
            return False
        guard = self._guards.get(header.producer_id)
        return guard is None or not guard.verified or guard.producer_epoch != header.producer_epoch

    def verification_guard(self, producer_id: int, producer_epoch: int) -> VerificationGuard:
        """The guard to set `verified` on once the coordinator vouches for the producer's
        transaction here: the one under way for this epoch, or a new one."""
        guard = self._guards.get(producer_id)
        if guard is None or guard.producer_epoch != producer_epoch:
            guard = self._guards[producer_id] = VerificationGuard(producer_id, producer_epoch)
        return guard

    def check_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> None:
        """Raises INVALID_PRODUCER_EPOCH for a marker older than the producer's epoch and
        TRANSACTION_COORDINATOR_FENCED for one from a coordinator older than the last seen."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return
        if producer_epoch < entry.producer_epoch:
            raise errors.InvalidProducerEpochError(
                f"marker of producer {producer_id} epoch {producer_epoch} is older than "
                f"{entry.producer_epoch}"
            )
        if coordinator_epoch < entry.coordinator_epoch:
            raise errors.TransactionCoordinatorFencedError(
                f"marker of producer {producer_id} from coordinator epoch {coordinator_epoch}; "
                f"this partition saw {entry.coordinator_epoch}"
            )

    # ---- updates -------------------------------------------------------------------------

    def update(self, header: BatchHeader) -> None:
        """Record a data batch written at its (assigned) offsets."""
        if header.producer_id == NO_PRODUCER_ID or header.is_control:
            return
        entry = self.producers.get(header.producer_id)
        if entry is None or header.producer_epoch > entry.producer_epoch:
            open_txn = entry.txn_first_offset if entry is not None else NO_TXN
            entry = self.producers[header.producer_id] = ProducerEntry(
                header.producer_epoch,
                entry.coordinator_epoch if entry is not None else -1,
                open_txn,
            )
        if header.is_transactional and entry.txn_first_offset == NO_TXN:
            entry.txn_first_offset = self._open[header.producer_id] = header.base_offset
        if header.base_sequence == NO_SEQUENCE:
            return  # nothing to deduplicate it against
        entry.batches.append(
            BatchMetadata(
                header.base_sequence, last_seq_of(header), header.base_offset,
                header.last_offset, header.partition_leader_epoch,
            )
        )

    def update_marker(
        self, header: BatchHeader, control_type: int, coordinator_epoch: int,
        high_watermark: int = 0,
    ) -> CompletedTxn | None:
        """Record a COMMIT or ABORT marker written at `header.base_offset`; the transaction
        it ended, if the producer had one open here. Other control batches change nothing.
        Decided transactions whose markers are below `high_watermark` are forgotten."""
        if control_type not in (ControlType.COMMIT, ControlType.ABORT):
            return None
        pid = header.producer_id
        self._guards.pop(pid, None)  # the next transaction here is verified anew
        entry = self.producers.get(pid)
        if entry is None:
            entry = self.producers[pid] = ProducerEntry(header.producer_epoch)
        entry.producer_epoch = max(entry.producer_epoch, header.producer_epoch)
        entry.coordinator_epoch = max(entry.coordinator_epoch, coordinator_epoch)
        first = entry.txn_first_offset
        if first == NO_TXN:
            return None
        entry.txn_first_offset = NO_TXN
        del self._open[pid]
        self._decided = (
            *(d for d in self._decided if d[1] >= high_watermark), (first, header.base_offset)
        )
        return CompletedTxn(pid, first, header.base_offset, control_type == ControlType.ABORT)

    # ---- the last stable offset ----------------------------------------------------------

    def first_unstable_offset(self, high_watermark: int) -> int | None:
        """The first offset of the oldest transaction that is open, or decided by a marker the
        high watermark has not passed; None when there is none."""
        firsts = list(self._open.values())
        firsts.extend(first for first, marker in self._decided if marker >= high_watermark)
        return min(firsts) if firsts else None

    def last_stable_offset(self, high_watermark: int) -> int:
        first = self.first_unstable_offset(high_watermark)
        return high_watermark if first is None or first >= high_watermark else first

    def open_txn_first_offset_besides(self, producer_id: int) -> int | None:
        """The first offset of the oldest open transaction of another producer (the stored LSO
        of an aborted transaction's index entry, kafka-mapping §5.7)."""
        firsts = [first for pid, first in list(self._open.items()) if pid != producer_id]
        return min(firsts) if firsts else None

    def open_transactions(self) -> dict[int, int]:
        """Producer id -> first offset of each open transaction."""
        return dict(self._open)

    def forget_below(self, log_start_offset: int) -> None:
        """Drop producers whose last batch is gone with the segments below the log start (as
        Kafka evicts them); an open transaction keeps its producer."""
        for pid in [pid for pid, e in self.producers.items()
                    if e.txn_first_offset == NO_TXN and e.batches
                    and e.batches[-1].last_offset < log_start_offset]:
            del self.producers[pid]

    # ---- snapshots -----------------------------------------------------------------------

    def encode(self, offset: int) -> bytes:
        """The state as a snapshot at `offset` (the state holds every batch below it)."""
        body = bytearray()
        for pid, entry in sorted(self.producers.items()):
            body += _PRODUCER.pack(pid, entry.producer_epoch, entry.coordinator_epoch,
                                   entry.txn_first_offset, len(entry.batches))
            for b in entry.batches:
                body += _BATCH.pack(b.first_seq, b.last_seq, b.base_offset, b.last_offset,
                                    b.leader_epoch)
        for first, marker in self._decided:
            body += _DECIDED.pack(first, marker)
        tail = struct.pack(">qii", offset, len(self.producers), len(self._decided)) + bytes(body)
        return struct.pack(">4shI", _MAGIC, _VERSION, crc32c.crc32c(tail)) + tail

    @classmethod
    def decode(cls, data: bytes, offset: int) -> ProducerStateManager:
        """A snapshot's state, every field checked; raises ValueError for any bad byte."""
        if len(data) < _HEAD.size:
            raise ValueError(f"{len(data)} bytes, shorter than a snapshot header")
        magic, version, crc, at, producers, decided = _HEAD.unpack_from(data)
        if magic != _MAGIC or version != _VERSION:
            raise ValueError(f"not a version {_VERSION} producer snapshot ({magic!r} v{version})")
        if crc32c.crc32c(data[_CRC_FROM:]) != crc:
            raise ValueError("checksum mismatch")
        if at != offset:
            raise ValueError(f"holds offset {at}, its name says {offset}")
        if not 0 <= producers <= len(data) // _PRODUCER.size or decided < 0:
            raise ValueError(f"impossible counts {producers} producers, {decided} decided")
        state = cls()
        pos = _HEAD.size
        try:
            for _ in range(producers):
                pid, epoch, coord, first, count = _PRODUCER.unpack_from(data, pos)
                pos += _PRODUCER.size
                if pid < 0 or pid in state.producers or epoch < 0 or coord < -1:
                    raise ValueError(f"bad producer {pid} epoch {epoch} coordinator {coord}")
                if first != NO_TXN and not 0 <= first < offset:
                    raise ValueError(f"producer {pid}: transaction at {first}, beyond {offset}")
                if not 0 <= count <= BATCHES_TO_RETAIN:
                    raise ValueError(f"producer {pid}: {count} batches")
                entry = ProducerEntry(epoch, coord, first)
                for _ in range(count):
                    batch = BatchMetadata(*_BATCH.unpack_from(data, pos))
                    pos += _BATCH.size
                    if not (0 <= batch.first_seq < SEQUENCE_WRAP
                            and 0 <= batch.last_seq < SEQUENCE_WRAP
                            and 0 <= batch.base_offset <= batch.last_offset < offset
                            and batch.leader_epoch >= -1):
                        raise ValueError(f"producer {pid}: bad batch {batch}")
                    entry.batches.append(batch)
                state.producers[pid] = entry
                if first != NO_TXN:
                    state._open[pid] = first
            for _ in range(decided):
                first, marker = _DECIDED.unpack_from(data, pos)
                pos += _DECIDED.size
                if not 0 <= first < marker < offset:
                    raise ValueError(f"bad decided transaction {first}..{marker}")
                state._decided = (*state._decided, (first, marker))
        except struct.error as exc:
            raise ValueError(f"truncated: {exc}") from None
        if pos != len(data):
            raise ValueError(f"{len(data) - pos} bytes after the last entry")
        return state


def snapshot_path(directory: Path, offset: int) -> Path:
    return directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"


def snapshot_offsets(directory: Path) -> list[int]:
    """The offsets of the snapshot files in `directory`, ascending."""
    found = []
    for path in directory.glob(f"*{SNAPSHOT_SUFFIX}"):
        stem = path.name[: -len(SNAPSHOT_SUFFIX)]
        if len(stem) == 20 and stem.isdigit():
            found.append(int(stem))
    return sorted(found)


def write_snapshot(directory: Path, state: ProducerStateManager, offset: int) -> None:
    """Write the snapshot at `offset` durably (a temporary file fsynced, then renamed; the
    directory is fsynced with the log's next flush)."""
    path = snapshot_path(directory, offset)
    tmp = path.with_name(path.name + TMP_SUFFIX)
    with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, DATA_FILE_MODE), "wb") as f:
        f.write(state.encode(offset))
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)


def delete_snapshots(directory: Path, offsets: Iterable[int]) -> None:
    for offset in offsets:
        snapshot_path(directory, offset).unlink(missing_ok=True)
