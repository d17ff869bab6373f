"""Building kio entities across versions: each version of a message is its own class with the
fields that version has, so an adapter gives every field it knows and `build` keeps those the
version has (a field a version lacks is not sent, as Kafka's own serializers do)."""

from __future__ import annotations

import dataclasses
import sys
from typing import Any


def build(entity: type[Any], **values: Any) -> Any:
    """`entity` with the `values` it has fields for; its defaults for the others."""
    names = {f.name for f in dataclasses.fields(entity)}
    return entity(**{name: value for name, value in values.items() if name in names})


def entity_of(like: type[Any], name: str) -> type[Any]:
    """The entity `name` (a nested one: ``MetadataResponseTopic``...) of the same version as
    `like`: kio defines a version's nested entities in the module of its request or response."""
    entity: type[Any] = getattr(sys.modules[like.__module__], name)
    return entity
