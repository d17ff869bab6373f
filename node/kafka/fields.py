"""Building kio entities across versions: each version of a message is its own class with the
fields that version has, so an adapter gives every field it knows and `build` keeps those the
version has (a field a version lacks is not sent, as Kafka's own serializers do)."""

from __future__ import annotations

import dataclasses
import datetime
import sys
from typing import Any

from kio.schema.errors import ErrorCode


def build(entity: type[Any], **values: Any) -> Any:
    """`entity` with the `values` it has fields for; its defaults for the others."""
    names = {f.name for f in dataclasses.fields(entity)}
    return entity(**{name: value for name, value in values.items() if name in names})


def entity_of(like: type[Any], name: str) -> type[Any]:
    """The entity `name` (a nested one: ``MetadataResponseTopic``...) of the same version as
    `like`: kio defines a version's nested entities in the module of its request or response."""
    entity: type[Any] = getattr(sys.modules[like.__module__], name)
    return entity


def entity_if(like: type[Any], name: str) -> type[Any] | None:
    """`entity_of`, or None when `like`'s version has no such entity (a field that came in a
    later version: `build` leaves it out anyway)."""
    entity: type[Any] | None = getattr(sys.modules[like.__module__], name, None)
    return entity


def error_code(code: int) -> ErrorCode:
    """kio's ErrorCode of a Kafka error code from a Tidelog answer; UNKNOWN_SERVER_ERROR (-1)
    for a code kio does not know (kio refuses to encode a number it has no member for)."""
    try:
        return ErrorCode(code)
    except ValueError:
        return ErrorCode.unknown_server_error


def millis(delta: datetime.timedelta) -> int:
    """A kio duration (``timeout``, ``max_wait``...) in whole milliseconds, as on the wire."""
    return round(delta.total_seconds() * 1000)


def timestamp(ms: int) -> datetime.datetime | None:
    """A kio nullable time of a Tidelog time in ms: None (written as -1) for -1."""
    if ms < 0:
        return None
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)

