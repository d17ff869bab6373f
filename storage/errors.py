"""Failures inside the storage engine that have no Kafka error code of their own.

Kafka raises these as internal exceptions (``UnexpectedAppendOffsetException``,
``OffsetsOutOfOrderException``, ``CorruptIndexException``); on the wire they become
UNKNOWN_SERVER_ERROR, so they keep code -1 and only a distinct name for logs.
"""

from __future__ import annotations

from tidelog.errors import TidelogError


class UnexpectedAppendOffsetError(TidelogError):
    """A follower append starts below the log end offset: the caller must truncate first."""

    name = "UNEXPECTED_APPEND_OFFSET"
    description = "The appended batches start below the log end offset."


class OffsetsOutOfOrderError(TidelogError):
    """The batches of one append do not have strictly increasing offsets."""

    name = "OFFSETS_OUT_OF_ORDER"
    description = "The appended batches are not in increasing offset order."


class CorruptIndexError(TidelogError):
    """An index file on disk fails its sanity check; the segment's indexes must be rebuilt."""

    name = "CORRUPT_INDEX"
    description = "An index file is corrupt."
