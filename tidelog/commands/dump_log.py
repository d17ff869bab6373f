"""``tidelog dump-log``: print a segment file's batches, records or index entries, or a
producer-state ``.snapshot`` (Kafka's kafka-dump-log.sh) and check that a segment's indexes
agree with its ``.log``.

It is the tool for a directory that may be damaged, so it only reads: the segment is viewed
through ``LogSegment`` objects built in memory (never ``LogSegment.open``, which would rebuild
or create index files), and every problem is reported with the file and the position before
exiting 1, instead of stopping at the first one with a traceback. Usage errors exit 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from tidelog.errors import CorruptMessageError, UnsupportedCompressionTypeError

if TYPE_CHECKING:
    from tidelog.records import BatchHeader
    from tidelog.storage import LogSegment, OffsetPosition, TimestampOffset

_PREVIEW_BYTES = 24
_LOG_SUFFIX = ".log"
_INDEX_SUFFIXES = (".index", ".timeindex", ".txnindex")
_SNAPSHOT_SUFFIX = ".snapshot"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", type=Path, metavar="PATH",
                        help="a segment file: .log, .index, .timeindex or .txnindex, or a "
                             "producer-state .snapshot")
    parser.add_argument("--deep", action="store_true",
                        help="for a .log, also print every record of every batch")
    parser.add_argument("--index-sanity-check", action="store_true",
                        help="check the segment's indexes against its .log (implied when "
                             "dumping an index file whose .log is beside it)")


def run(args: argparse.Namespace) -> int:
    path: Path = args.path
    usage_error = _usage_error(path, args.index_sanity_check)
    if usage_error is not None:
        print(f"tidelog dump-log: {usage_error}", file=sys.stderr)
        return 2
    try:
        problems = _dump(path, args.deep, args.index_sanity_check, sys.stdout)
    except BrokenPipeError:
        raise  # the reader (``| head``) has gone: the CLI ends quietly
    except OSError as exc:
        print(f"tidelog dump-log: cannot read {exc.filename or path}: {exc.strerror}",
              file=sys.stderr)
        return 2
    for problem in problems:
        print(f"tidelog dump-log: {problem}", file=sys.stderr)
    if len(problems) > 1:
        print(f"tidelog dump-log: {len(problems)} problems found in {path}", file=sys.stderr)
    return 1 if problems else 0


def _usage_error(path: Path, index_sanity_check: bool) -> str | None:
    if path.suffix not in (_LOG_SUFFIX, *_INDEX_SUFFIXES, _SNAPSHOT_SUFFIX):
        return (f"{path}: unknown suffix {path.suffix!r}; expected .log, .index, .timeindex, "
                f".txnindex or .snapshot")
    if not path.is_file():
        return f"{path}: no such file"
    if not path.stem.isdigit():
        return (f"{path}: not a segment file, which is named by its base offset "
                f"(00000000000000000000{path.suffix})")
    if index_sanity_check and not path.with_suffix(_LOG_SUFFIX).is_file():
        return f"{path}: the index sanity check needs {path.stem}{_LOG_SUFFIX} beside it"
    return None


def _dump(path: Path, deep: bool, index_sanity_check: bool, out: TextIO) -> list[str]:
    """Print the file; return the problems found (each naming file, position or entry)."""
    log_path = path.with_suffix(_LOG_SUFFIX)
    print(f"Dumping {path}", file=out)
    if path.suffix == _SNAPSHOT_SUFFIX:
        return _dump_snapshot(path, out)
    if path.suffix == _LOG_SUFFIX:
        problems = _dump_log(_read_only_segment(log_path), deep, out)
        if index_sanity_check:
            siblings = [p for s in _INDEX_SUFFIXES if (p := path.with_suffix(s)).is_file()]
            for sibling in siblings:
                problems += _whole_entries_problem(sibling)
            problems += _check_indexes(log_path, siblings, report_log_damage=False)
        return problems
    problems = _dump_index(path, out) + _whole_entries_problem(path)
    if log_path.is_file():
        problems += _check_indexes(log_path, [path], report_log_damage=True)
    return problems


def _read_only_segment(log_path: Path) -> LogSegment:
    """A LogSegment over an existing .log whose indexes live only in memory (empty), so that
    scanning it reuses the storage engine's batch reader without touching any file."""
    from tidelog.storage import (
        LogConfig,
        LogSegment,
        OffsetIndex,
        TimeIndex,
        TransactionIndex,
        base_offset_from_path,
    )

    base = base_offset_from_path(log_path)
    config = LogConfig()
    return LogSegment(
        log_path.parent,
        base,
        config,
        size=log_path.stat().st_size,
        offset_index=OffsetIndex(log_path.with_suffix(".index"), base, config.segment_index_bytes),
        time_index=TimeIndex(log_path.with_suffix(".timeindex"), base, config.segment_index_bytes),
        txn_index=TransactionIndex(log_path.with_suffix(".txnindex")),
        created_ms=0,
        last_modified_ms=0,
        temp_suffix="",
    )


# ----------------------------------------------------------------------------------------------
# .log


def _dump_log(segment: LogSegment, deep: bool, out: TextIO) -> list[str]:
    from tidelog.records import crc_matches

    problems: list[str] = []
    path = segment.log_path
    print(f"Log starting offset: {segment.base_offset}", file=out)
    next_offset = segment.base_offset
    try:
        for buf, pos, position, h in segment.batches_from(0):
            valid = crc_matches(buf, pos, h)
            print(_batch_line(h, position, valid), file=out)
            if not valid:
                problems.append(f"{path}: CRC mismatch in batch at position {position}")
            if h.base_offset < next_offset:
                problems.append(
                    f"{path}: batch at position {position} starts at offset {h.base_offset}, "
                    f"below {next_offset} (offsets must increase)"
                )
            next_offset = h.next_offset
            if deep:
                problems += _dump_records(buf, pos, h, position, path, out)
    except CorruptMessageError as exc:
        problems.append(str(exc.args[0]))
    return problems


def _batch_line(h: BatchHeader, position: int, crc_valid: bool) -> str:
    return (
        f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.records_count} "
        f"position: {position} size: {h.size} partitionLeaderEpoch: {h.partition_leader_epoch} "
        f"crc: {h.crc} isValid: {str(crc_valid).lower()} "
        f"timestampType: {_timestamp_type_name(h)} maxTimestamp: {h.max_timestamp} "
        f"producerId: {h.producer_id} producerEpoch: {h.producer_epoch} "
        f"baseSequence: {h.base_sequence} isTransactional: {str(h.is_transactional).lower()} "
        f"isControl: {str(h.is_control).lower()} compresscodec: {_codec_name(h)}"
    )


def _codec_name(h: BatchHeader) -> str:
    from tidelog.compression import codec_name
    from tidelog.records import ATTR_COMPRESSION

    return codec_name(h.attributes & ATTR_COMPRESSION)


def _timestamp_type_name(h: BatchHeader) -> str:
    from tidelog.records import TimestampType

    return "LogAppendTime" if h.timestamp_type is TimestampType.LOG_APPEND_TIME else "CreateTime"


def _dump_records(
    buf: bytes, pos: int, h: BatchHeader, position: int, path: Path, out: TextIO
) -> list[str]:
    """One line per record; a batch whose records do not decode is a problem, not a crash
    (its CRC may already have said so)."""
    from tidelog.records import control_type_of, decode_records

    ts_name = _timestamp_type_name(h)
    try:
        records = decode_records(buf, pos, h)
        # a compacted control batch may have lost its record
        control = control_type_of(buf, pos, h) if h.is_control and records else None
    except (CorruptMessageError, UnsupportedCompressionTypeError) as exc:
        return [f"{path}: records of the batch at position {position} do not decode: {exc}"]
    for r in records:
        if control is not None:
            print(f"| offset: {r.offset} {ts_name}: {r.timestamp} "
                  f"controlType: {_control_name(control)} ({control})", file=out)
            continue
        headers = ", ".join(f"{k}={_preview(v)}" for k, v in r.headers)
        print(f"| offset: {r.offset} {ts_name}: {r.timestamp} "
              f"keySize: {_size(r.key)} valueSize: {_size(r.value)} "
              f"headers: [{headers}] key: {_preview(r.key)} value: {_preview(r.value)}", file=out)
    return []


def _control_name(control: int) -> str:
    from tidelog.records import ControlType

    try:
        return ControlType(control).name
    except ValueError:
        return "UNKNOWN"


def _size(data: bytes | None) -> int:
    return -1 if data is None else len(data)


def _preview(data: bytes | None) -> str:
    """Text as text and anything else as hex, cut short: a line per record must stay a line."""
    if data is None:
        return "null"
    head = data[:_PREVIEW_BYTES]
    more = "..." if len(data) > _PREVIEW_BYTES else ""
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        return "0x" + head.hex() + more
    return (repr(text) if text.isprintable() else "0x" + head.hex()) + more


# ----------------------------------------------------------------------------------------------
# Index files


def _whole_entries_problem(path: Path) -> list[str]:
    from tidelog.storage import OffsetIndex, TimeIndex, TransactionIndex

    entry_size = {
        ".index": OffsetIndex.ENTRY.size,
        ".timeindex": TimeIndex.ENTRY.size,
        ".txnindex": TransactionIndex.ENTRY.size,
    }[path.suffix]
    size = path.stat().st_size
    if size % entry_size:
        return [f"{path}: length {size} is not a multiple of {entry_size}; the last "
                f"{size % entry_size} bytes at position {size - size % entry_size} are ignored"]
    return []


def _dump_index(path: Path, out: TextIO) -> list[str]:
    from tidelog.storage import CorruptIndexError, OffsetIndex, TimeIndex, TransactionIndex

    if path.suffix == ".index":
        for offset, position in OffsetIndex.read_entries(path):
            print(f"offset: {offset} position: {position}", file=out)
        return []
    if path.suffix == ".timeindex":
        for timestamp, offset in TimeIndex.read_entries(path):
            print(f"timestamp: {timestamp} offset: {offset}", file=out)
        return []
    try:
        txns = TransactionIndex.read_entries(path)
    except CorruptIndexError as exc:
        return [f"{path}: {exc.args[0]}"]
    for t in txns:
        print(f"producerId: {t.producer_id} firstOffset: {t.first_offset} "
              f"lastOffset: {t.last_offset} lastStableOffset: {t.last_stable_offset}", file=out)
    return []


def _dump_snapshot(path: Path, out: TextIO) -> list[str]:
    """A producer-state snapshot (`storage.producer_state`), every byte checked as a log's
    open checks it: a bad one is reported, not printed."""
    from tidelog.storage.producer_state import ProducerStateManager

    try:
        state = ProducerStateManager.decode(path.read_bytes(), int(path.stem))
    except ValueError as exc:
        return [f"{path}: not a valid producer snapshot: {exc}"]
    for pid, entry in sorted(state.producers.items()):
        last = entry.batches[-1] if entry.batches else None
        print(f"producerId: {pid} producerEpoch: {entry.producer_epoch} "
              f"coordinatorEpoch: {entry.coordinator_epoch} "
              f"currentTxnFirstOffset: {entry.txn_first_offset} "
              f"lastSequence: {entry.last_seq} "
              f"lastOffset: {last.last_offset if last is not None else -1}", file=out)
    return []


@dataclass
class _LogFacts:
    """What the index checks need from one pass over the .log."""

    #: position -> (base offset, last offset) of the batches starting at wanted positions
    batches_at: dict[int, tuple[int, int]] = field(default_factory=dict)
    #: last offset -> max timestamp of the batches ending at wanted offsets
    max_ts_ending_at: dict[int, int] = field(default_factory=dict)
    next_offset: int = 0
    #: where the readable part of the .log ends, and why (None: at the end of the file)
    readable_until: int = 0
    damage: str | None = None


def _scan(segment: LogSegment, positions: set[int], last_offsets: set[int]) -> _LogFacts:
    from tidelog.storage.segment import batch_max_timestamp

    facts = _LogFacts(next_offset=segment.base_offset)
    try:
        for _, _, position, h in segment.batches_from(0):
            if position in positions:
                facts.batches_at[position] = (h.base_offset, h.last_offset)
            if h.last_offset in last_offsets:
                facts.max_ts_ending_at[h.last_offset] = batch_max_timestamp(h)
            facts.next_offset = h.next_offset
            facts.readable_until = position + h.size
    except CorruptMessageError as exc:
        facts.damage = str(exc.args[0])
    return facts


def _check_indexes(
    log_path: Path, index_paths: Iterable[Path], *, report_log_damage: bool
) -> list[str]:
    """Kafka's ``--index-sanity-check`` and its deep time-index check: an offset index entry
    must name the last offset of the batch starting at its position (kafka-mapping §5.4); a
    time index entry (T, O) must have O end a batch whose max timestamp is T, and entries must
    grow (§5.5). Damage in the .log is reported too unless the .log dump already did."""
    from tidelog.storage import OffsetIndex, TimeIndex

    segment = _read_only_segment(log_path)
    paths = list(index_paths)
    offset_entries = next(
        (OffsetIndex.read_entries(p) for p in paths if p.suffix == ".index"), []
    )
    time_entries = next(
        (TimeIndex.read_entries(p) for p in paths if p.suffix == ".timeindex"), []
    )
    facts = _scan(
        segment, {e.position for e in offset_entries}, {e.offset for e in time_entries}
    )
    problems: list[str] = []
    for path in paths:
        if path.suffix == ".index":
            problems += _check_offset_index(path, offset_entries, facts)
        elif path.suffix == ".timeindex":
            problems += _check_time_index(path, time_entries, segment.base_offset, facts)
        else:
            problems += _check_txn_index(path, segment.base_offset, facts)
    if facts.damage is not None and report_log_damage:
        problems.append(f"{facts.damage} (index entries past it cannot be checked)")
    return problems


def _check_offset_index(
    path: Path, entries: Sequence[OffsetPosition], facts: _LogFacts
) -> list[str]:
    problems: list[str] = []
    for n, (offset, position) in enumerate(entries):
        where = f"{path}: entry {n} (offset {offset}, position {position})"
        previous = entries[n - 1] if n else None
        if previous is not None and (offset <= previous.offset or position <= previous.position):
            problems.append(f"{where}: not above the previous entry "
                            f"(offset {previous.offset}, position {previous.position})")
        batch = facts.batches_at.get(position)
        if batch is None:
            beyond = position >= facts.readable_until
            problems.append(f"{where}: " + ("points beyond the end of the log" if beyond
                                            else "no batch starts at that position"))
        elif not batch[0] <= offset <= batch[1]:
            problems.append(f"{where}: the batch there holds offsets {batch[0]}..{batch[1]}")
    return problems


def _check_time_index(
    path: Path, entries: Sequence[TimestampOffset], base_offset: int, facts: _LogFacts
) -> list[str]:
    problems = []
    for n, (timestamp, offset) in enumerate(entries):
        where = f"{path}: entry {n} (timestamp {timestamp}, offset {offset})"
        previous = entries[n - 1] if n else None
        if previous is not None and (timestamp <= previous.timestamp or offset < previous.offset):
            problems.append(f"{where}: not monotonic after the previous entry "
                            f"(timestamp {previous.timestamp}, offset {previous.offset})")
        if not base_offset <= offset < facts.next_offset:
            problems.append(f"{where}: outside the segment's offsets "
                            f"{base_offset}..{facts.next_offset - 1}")
            continue
        batch_max = facts.max_ts_ending_at.get(offset)
        if batch_max is None:
            problems.append(f"{where}: no batch ends at that offset")
        elif batch_max != timestamp:
            problems.append(f"{where}: the batch ending there has max timestamp {batch_max}")
    return problems


def _check_txn_index(path: Path, base_offset: int, facts: _LogFacts) -> list[str]:
    """An aborted transaction is indexed in the segment holding its ABORT marker, its last
    offset (kafka-mapping §5.7)."""
    from tidelog.storage import CorruptIndexError, TransactionIndex

    try:
        txns = TransactionIndex.read_entries(path)
    except CorruptIndexError as exc:
        return [f"{path}: {exc.args[0]}"]
    problems = []
    previous_last: int | None = None
    for n, t in enumerate(txns):
        where = f"{path}: entry {n} (producer {t.producer_id}, last offset {t.last_offset})"
        if previous_last is not None and t.last_offset <= previous_last:
            problems.append(f"{where}: last offset not above the previous entry's "
                            f"{previous_last}")
        previous_last = t.last_offset
        if not base_offset <= t.last_offset < facts.next_offset:
            problems.append(f"{where}: the marker offset is outside the segment's offsets "
                            f"{base_offset}..{facts.next_offset - 1}")
        if t.first_offset > t.last_offset:
            problems.append(f"{where}: first offset {t.first_offset} is above the last")
    return problems
