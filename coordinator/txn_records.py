"""The records of `__transaction_state`: one transactional id's metadata, Kafka's
TransactionLogKey and TransactionLogValue at version 0 (kafka-mapping §8.3), so that a key
names a transactional id the way Kafka does and the cleaner keeps its newest state::

    key    int16   version        0
           string  transactional  int16 length, then UTF-8

    value  int16   version        0
           int64   producer_id    >= 0
           int16   producer_epoch >= 0
           int32   timeout_ms     > 0 (transaction.timeout.ms)
           int8    state          0 Empty .. 5 CompleteAbort (`TxnState`; Dead is a tombstone
                                  and PrepareEpochFence is never written)
           array   partitions     int32 count, -1 (null) exactly when Empty; per topic: string
                                  topic (int16 length), int32 count, int32 partitions
           int64   last_update_ms
           int64   start_ms       -1 when Empty

A null value is a tombstone. Every integer is big-endian; every byte read back is checked, and a
record that does not decode is a `CoordinatorRecordError`, which the loader logs and skips.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterable
from typing import Final, NamedTuple

from tidelog.coordinator.record_codec import (
    I16,
    I32,
    CoordinatorRecordError,
    check_size,
    encode_string,
    read_string,
    truncated,
    versioned,
)
from tidelog.types import TopicPartition

KEY_VERSION: Final = 0
VALUE_VERSION: Final = 0
#: The highest producer epoch; an epoch at or above `EPOCH_EXHAUSTED` rotates the producer id
#: (32767 stays free so that the coordinator can always fence, kafka-mapping §8.2).
MAX_EPOCH: Final = 0x7FFF
EPOCH_EXHAUSTED: Final = MAX_EPOCH - 1

_HEAD = struct.Struct(">hqhib")  # version, producer id, epoch, timeout, state
_TAIL = struct.Struct(">qq")  # last update, start
_INT32_MAX = 0x7FFF_FFFF


class TxnState(enum.IntEnum):
    """Kafka's TransactionState ids (kafka-mapping §8.2)."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7


#: The states a transition may start from, per target state (Kafka's validPreviousStates).
VALID_PREVIOUS: Final[dict[TxnState, frozenset[TxnState]]] = {
    TxnState.EMPTY: frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT,
                               TxnState.COMPLETE_ABORT}),
    TxnState.ONGOING: frozenset({TxnState.EMPTY, TxnState.ONGOING, TxnState.COMPLETE_COMMIT,
                                 TxnState.COMPLETE_ABORT}),
    TxnState.PREPARE_COMMIT: frozenset({TxnState.ONGOING}),
    TxnState.PREPARE_ABORT: frozenset({TxnState.ONGOING, TxnState.PREPARE_EPOCH_FENCE}),
    TxnState.COMPLETE_COMMIT: frozenset({TxnState.PREPARE_COMMIT}),
    TxnState.COMPLETE_ABORT: frozenset({TxnState.PREPARE_ABORT}),
    TxnState.DEAD: frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT,
                              TxnState.COMPLETE_ABORT}),
    TxnState.PREPARE_EPOCH_FENCE: frozenset({TxnState.ONGOING}),
}
#: The states a record holds.
_WRITTEN = frozenset(TxnState) - {TxnState.DEAD, TxnState.PREPARE_EPOCH_FENCE}


class TxnMetadata(NamedTuple):
    """One transactional id's state, as its newest record says."""

    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    #: The partitions of the transaction (sorted); empty unless Ongoing or Prepare*.
    partitions: tuple[TopicPartition, ...]
    last_update_ms: int
    #: When the transaction began (its first AddPartitions); -1 when none is open.
    start_ms: int


def encode_key(transactional_id: str) -> bytes:
    return I16.pack(KEY_VERSION) + encode_string(transactional_id, "transactional id")


def encode_value(meta: TxnMetadata) -> bytes:
    if meta.state not in _WRITTEN:
        raise CoordinatorRecordError(f"state {meta.state.name} is never written")
    parts: list[bytes] = [
        _HEAD.pack(VALUE_VERSION, meta.producer_id, meta.producer_epoch, meta.timeout_ms,
                   meta.state)
    ]
    if meta.state is TxnState.EMPTY:
        parts.append(I32.pack(-1))
    else:
        by_topic = _by_topic(meta.partitions)
        parts.append(I32.pack(len(by_topic)))
        for topic, indexes in by_topic.items():
            parts.append(encode_string(topic, "topic"))
            parts.append(I32.pack(len(indexes)))
            parts.append(struct.pack(f">{len(indexes)}i", *indexes))
    parts.append(_TAIL.pack(meta.last_update_ms, meta.start_ms))
    return b"".join(parts)


def _by_topic(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(partitions):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return by_topic


def decode_key(data: bytes | memoryview) -> str:
    data = versioned(data, KEY_VERSION, "key")
    transactional_id, pos = read_string(data, I16.size, I16, "key")
    check_size(data, pos, "key")
    if not transactional_id:
        raise CoordinatorRecordError("an empty transactional id")
    return transactional_id


def decode_value(data: bytes | memoryview) -> TxnMetadata:
    """The metadata in `data` (not a tombstone), every field checked."""
    data = versioned(data, VALUE_VERSION, "value")
    if len(data) < _HEAD.size + I32.size:
        raise truncated("value", len(data))
    _, producer_id, epoch, timeout_ms, state_id = _HEAD.unpack_from(data)
    if producer_id < 0:
        raise CoordinatorRecordError(f"negative producer id {producer_id}")
    if epoch < 0:
        raise CoordinatorRecordError(f"negative producer epoch {epoch}")
    if timeout_ms <= 0:
        raise CoordinatorRecordError(f"transaction timeout {timeout_ms} ms (must be > 0)")
    if state_id not in {s.value for s in _WRITTEN}:
        raise CoordinatorRecordError(f"state {state_id} is not one a record holds")
    state = TxnState(state_id)
    pos = _HEAD.size
    (topics,) = I32.unpack_from(data, pos)
    pos += I32.size
    partitions: list[TopicPartition] = []
    if topics == -1:
        if state is not TxnState.EMPTY:
            raise CoordinatorRecordError(f"null partitions in state {state.name}")
    elif topics < 0:
        raise CoordinatorRecordError(f"negative topic count {topics}")
    else:
        if state is TxnState.EMPTY:
            raise CoordinatorRecordError("partitions in state EMPTY (must be null)")
        for _ in range(topics):
            topic, pos = read_string(data, pos, I16, "value")
            if not topic:
                raise CoordinatorRecordError("an empty topic name")
            if pos + I32.size > len(data):
                raise truncated("value", pos)
            (count,) = I32.unpack_from(data, pos)
            pos += I32.size
            if count < 0 or pos + count * I32.size > len(data):
                raise CoordinatorRecordError(f"partition count {count} of {topic!r} lies")
            for index in struct.unpack_from(f">{count}i", data, pos):
                if index < 0:
                    raise CoordinatorRecordError(f"negative partition {index} of {topic!r}")
                partitions.append(TopicPartition(topic, index))
            pos += count * I32.size
    check_size(data, pos + _TAIL.size, "value")
    last_update_ms, start_ms = _TAIL.unpack_from(data, pos)
    unique = tuple(sorted(set(partitions)))
    if len(unique) != len(partitions):
        raise CoordinatorRecordError("a partition named twice")
    if state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT) and unique:
        raise CoordinatorRecordError(f"partitions in state {state.name} (must be empty)")
    if state in (TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
        if not unique:
            raise CoordinatorRecordError(f"no partitions in state {state.name}")
        if start_ms < 0:
            raise CoordinatorRecordError(f"no start time in state {state.name}")
    return TxnMetadata(producer_id, epoch, timeout_ms, state, unique, last_update_ms, start_ms)
