"""From option bounds to offset ranges, as Spark's Kafka source plans them, over any
``OffsetLookup`` (the cluster in production, a dict in the unit tests).

* Resolving a bound (KafkaOffsetReaderAdmin): -2/-1 and timestamps go through ListOffsets at the
  query's isolation level, so under read_committed "latest" is the last stable offset; an
  unmatched starting timestamp fails or starts at latest (the strategy option), an unmatched
  ending timestamp ends at latest.
* Splitting (KafkaOffsetRangeCalculator): with minPartitions above the number of non-empty
  ranges, ranges are cut in proportion to their size.
* Rate limiting (KafkaMicroBatchStream.rateLimit): maxOffsetsPerTrigger is shared across
  partitions by backlog, rounding down but never starving a partition below one offset.
* Streaming ranges (getOffsetRangesFromResolvedOffsets): new partitions start at earliest, and
  deleted partitions or offsets going backwards are data loss, failing the query or warning.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from tidelog.errors import ConfigurationError, TidelogError
from tidelog.spark.options import (
    EarliestBound,
    GlobalTimestamp,
    LatestBound,
    OffsetBound,
    SpecificOffsets,
    SpecificTimestamps,
)
from tidelog.types import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, TopicPartition

log = logging.getLogger(__name__)

_LOST_FAIL = (
    "Some data may have been lost because they are not available in Tidelog any more; either "
    "the data was aged out by retention or the topic may have been deleted before all the data "
    "in the topic was processed. If you don't want your query to fail on such cases, set the "
    "source option 'failOnDataLoss' to 'false'."
)
_LOST_WARN = (
    "Some data may have been lost because they are not available in Tidelog any more; either "
    "the data was aged out by retention or the topic may have been deleted before all the data "
    "in the topic was processed. If you want your query to fail on such cases, set the source "
    "option 'failOnDataLoss' to 'true'."
)


class DataLossError(TidelogError):
    """Offsets a query needed are gone (retention, a deleted or re-created topic)."""

    name = "DATA_LOSS"
    description = "Data the query needed is no longer available."


def report_data_loss(message: str, fail_on_data_loss: bool) -> None:
    """Spark's reportDataLoss: raise, or log a warning and go on."""
    if fail_on_data_loss:
        raise DataLossError(f"{message}. {_LOST_FAIL}")
    log.warning("%s. %s", message, _LOST_WARN)


class OffsetLookup(Protocol):
    def partitions(self) -> list[TopicPartition]:
        """The partitions the subscription covers right now."""
        ...

    def offsets(self, specs: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """ListOffsets: spec -2 earliest, -1 latest (the isolation level's bound), or a
        timestamp; -1 where a timestamp matched nothing."""
        ...


@dataclass(frozen=True)
class OffsetRange:
    """Offsets [start, end) of one partition; end is exclusive, like a consumer position."""

    tp: TopicPartition
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


def resolve_bound(
    bound: OffsetBound,
    lookup: OffsetLookup,
    partitions: list[TopicPartition],
    *,
    starting: bool,
    timestamp_latest: bool = False,
) -> dict[TopicPartition, int]:
    """Concrete offsets for `partitions` (JSON bounds must name exactly them, as in Spark)."""
    specs: dict[TopicPartition, int]
    if isinstance(bound, EarliestBound):
        specs = dict.fromkeys(partitions, EARLIEST_TIMESTAMP)
    elif isinstance(bound, LatestBound):
        specs = dict.fromkeys(partitions, LATEST_TIMESTAMP)
    elif isinstance(bound, SpecificOffsets):
        _check_covers(bound.offsets, partitions, "startingOffsets" if starting else "endingOffsets")
        fixed = {tp: off for tp, off in bound.offsets.items() if off >= 0}
        special = {tp: off for tp, off in bound.offsets.items() if off < 0}
        return {**fixed, **(lookup.offsets(special) if special else {})}
    elif isinstance(bound, SpecificTimestamps):
        name = "startingOffsetsByTimestamp" if starting else "endingOffsetsByTimestamp"
        _check_covers(bound.timestamps, partitions, name)
        return _by_timestamp(bound.timestamps, lookup, starting, timestamp_latest)
    else:
        assert isinstance(bound, GlobalTimestamp)
        return _by_timestamp(
            dict.fromkeys(partitions, bound.timestamp), lookup, starting, timestamp_latest
        )
    return lookup.offsets(specs) if specs else {}


def _check_covers(
    given: Mapping[TopicPartition, int], partitions: list[TopicPartition], option: str
) -> None:
    if set(given) != set(partitions):
        raise ConfigurationError(
            f"If {option} contains specific offsets, you must specify all TopicPartitions. "
            "Use -1 for latest, -2 for earliest. "
            f"Specified: {_names(given)} Assigned: {_names(partitions)}"
        )


def _names(tps: Iterable[TopicPartition]) -> str:
    return "[" + ", ".join(str(tp) for tp in sorted(tps)) + "]"


def _by_timestamp(
    timestamps: Mapping[TopicPartition, int],
    lookup: OffsetLookup,
    starting: bool,
    timestamp_latest: bool,
) -> dict[TopicPartition, int]:
    found = lookup.offsets(timestamps) if timestamps else {}
    unmatched = [tp for tp, offset in found.items() if offset < 0]
    if unmatched and starting and not timestamp_latest:
        tp = min(unmatched)
        raise ConfigurationError(
            f"No offset matched from request of topic-partition {tp} and timestamp "
            f"{timestamps[tp]}. (startingOffsetsByTimestampStrategy 'latest' starts such "
            "partitions at latest instead)"
        )
    if unmatched:
        found.update(lookup.offsets(dict.fromkeys(unmatched, LATEST_TIMESTAMP)))
    return found


def batch_ranges(
    start: Mapping[TopicPartition, int],
    end: Mapping[TopicPartition, int],
    min_partitions: int | None,
) -> list[OffsetRange]:
    """The ranges of a batch query; an end before its start is a user error."""
    if set(start) != set(end):
        raise TidelogError(
            f"different topic partitions for starting offsets {_names(start)} and ending "
            f"offsets {_names(end)}"
        )
    ranges = []
    for tp in sorted(start):
        if end[tp] < start[tp]:
            raise ConfigurationError(
                f"Beginning offset {start[tp]} is after the ending offset {end[tp]} for topic "
                f"{tp.topic} partition {tp.partition}. You either provided an invalid "
                "starting offset, or the topic has been damaged"
            )
        ranges.append(OffsetRange(tp, start[tp], end[tp]))
    return split_ranges(ranges, min_partitions)


def split_ranges(ranges: list[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    """KafkaOffsetRangeCalculator.getRanges: drop empty ranges; when fewer remain than
    minPartitions, cut each into round(size / ideal) pieces (at least one), the last piece of a
    range taking the rounding remainder."""
    to_read = [r for r in ranges if r.size > 0]
    if min_partitions is None or len(to_read) >= min_partitions:
        return to_read
    ideal = sum(r.size for r in to_read) / min_partitions
    out: list[OffsetRange] = []
    for r in to_read:
        parts = max(math.floor(r.size / ideal + 0.5), 1)  # Scala's Math.round: half up
        remaining, begin = r.size, r.start
        for part in range(parts):
            this = remaining // (parts - part)
            remaining -= this
            stop = min(begin + this, r.end)
            if stop > begin:
                out.append(OffsetRange(r.tp, begin, stop))
            begin = stop
    return out


def rate_limit(
    limit: int,
    start: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
    earliest_of: Callable[[list[TopicPartition]], Mapping[TopicPartition, int]],
) -> dict[TopicPartition, int]:
    """At most about `limit` offsets past `start`, shared by backlog: floor(limit * size /
    total) per partition, or ceil when that is below one so that no partition starves; never
    past latest. Partitions new since `start` count from their earliest offset."""
    new = [tp for tp in latest if tp not in start]
    begins = {**(earliest_of(new) if new else {}), **start}
    sizes = {
        tp: end - begins[tp] for tp, end in latest.items() if tp in begins and end > begins[tp]
    }
    total = sum(sizes.values())
    if total < 1:
        return dict(latest)
    out = {}
    for tp, end in latest.items():
        if tp not in sizes:
            out[tp] = end
            continue
        share = limit * (sizes[tp] / total)
        step = math.ceil(share) if share < 1 else math.floor(share)
        out[tp] = min(end, begins[tp] + step)
    return out


def stream_ranges(
    start: Mapping[TopicPartition, int],
    end: Mapping[TopicPartition, int],
    earliest_of: Callable[[list[TopicPartition]], Mapping[TopicPartition, int]],
    *,
    fail_on_data_loss: bool,
    min_partitions: int | None,
) -> list[OffsetRange]:
    """The ranges of one micro-batch between two offsets Spark has logged."""
    new = sorted(set(end) - set(start))
    new_starts = dict(earliest_of(new)) if new else {}
    missing = [tp for tp in new if tp not in new_starts]
    if missing:
        report_data_loss(
            f"Cannot find earliest offsets of {_names(missing)}. Some data may have been missed",
            fail_on_data_loss,
        )
    for tp, offset in sorted(new_starts.items()):
        if offset != 0:
            report_data_loss(
                f"Added partition {tp} starts from {offset} instead of 0. Some data may have "
                "been missed",
                fail_on_data_loss,
            )
    gone = sorted(set(start) - set(end))
    if gone:
        report_data_loss(
            f"{_names(gone)} are gone. Some data may have been missed", fail_on_data_loss
        )
    begins = {**start, **new_starts}
    ranges = []
    for tp in sorted(tp for tp in end if tp in begins):
        if end[tp] < begins[tp]:
            report_data_loss(
                f"Partition {tp}'s offset was changed from {begins[tp]} to {end[tp]}. This could "
                "be either 1) a user error that the start offset is set beyond available offset "
                "when starting query, or 2) the topic-partition is deleted and re-created",
                fail_on_data_loss,
            )
        ranges.append(OffsetRange(tp, begins[tp], end[tp]))
    return split_ranges(ranges, min_partitions)
