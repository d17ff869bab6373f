"""Tidelog's storage engine: a partition log of segments on local disk (Kafka's log layer).

No network, no asyncio, no replication: the node drives it (appends, flushes, HW updates) and
the replication layer reads it. It imports only the pure record-batch codec from ``tidelog``.
"""

from tidelog.storage.checkpoint import CheckpointFile
from tidelog.storage.config import LogConfig
from tidelog.storage.epoch import EpochEntry, LeaderEpochFileCache
from tidelog.storage.errors import (
    CorruptIndexError,
    OffsetsOutOfOrderError,
    UnexpectedAppendOffsetError,
)
from tidelog.storage.index import (
    AbortedTxn,
    OffsetIndex,
    OffsetPosition,
    TimeIndex,
    TimestampOffset,
    TransactionIndex,
    base_offset_from_path,
)
from tidelog.storage.log import Clock, Log, LogAppendInfo, SegmentPosition
from tidelog.storage.segment import CLEANED_SUFFIX, LogSegment, TimestampAndOffset

__all__ = [
    "CLEANED_SUFFIX",
    "AbortedTxn",
    "CheckpointFile",
    "Clock",
    "CorruptIndexError",
    "EpochEntry",
    "LeaderEpochFileCache",
    "Log",
    "LogAppendInfo",
    "LogConfig",
    "LogSegment",
    "OffsetIndex",
    "OffsetPosition",
    "OffsetsOutOfOrderError",
    "SegmentPosition",
    "TimeIndex",
    "TimestampAndOffset",
    "TimestampOffset",
    "TransactionIndex",
    "UnexpectedAppendOffsetError",
    "base_offset_from_path",
]
