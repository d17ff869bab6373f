"""The Kafka APIs a node serves, by api key, with the versions of each: the only source of the
ApiVersions table, so that the node never advertises an API or a version it has no handler
for (clients infer a broker's features, and which versions to send, from that table).

A version range is checked when it is added: its floor must be Kafka 4's (the lowest version
kio, generated from Kafka 4's schemas, knows) and its ceiling a version kio knows; see the
package docstring (node/kafka/__init__.py) for how to add an API.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

from kio.schema.index import api_key_map, schema_name_map
from kio.static.constants import EntityType

from tidelog.node.edge.limits import DEFAULT_REQUEST_LIMIT
from tidelog.node.kafka.call import KafkaCall

#: A handler: the decoded request (kio's entity of the version the client sent) and the call
#: -> kio's response entity of the same version, or None when the request expects no answer
#: (Produce with acks=0).
KafkaHandler = Callable[[Any, KafkaCall], Awaitable[Any | None]]


@dataclass(frozen=True, slots=True)
class KafkaApi:
    """One served API."""

    api_key: int
    min_version: int
    max_version: int
    handler: KafkaHandler
    #: The largest frame of this API the node takes (the gRPC client listener's limit for
    #: the same method: node/edge/limits.py); a larger one closes the connection.
    max_request_bytes: int = DEFAULT_REQUEST_LIMIT

    def serves(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version


class ApiRegistry:
    """api key -> `KafkaApi`. Built once per node before its listener starts; read-only
    afterwards."""

    def __init__(self) -> None:
        self._apis: dict[int, KafkaApi] = {}

    def add(
        self, api_key: int, min_version: int, max_version: int, handler: KafkaHandler,
        *, max_request_bytes: int = DEFAULT_REQUEST_LIMIT,
    ) -> None:
        """Serves `api_key` at versions `min_version`..`max_version` with `handler`.

        Raises ValueError (a programming error, found at node start and by the tests) when
        the key is served already, the floor is not Kafka 4's, or kio lacks a version of the
        range (which also keeps the ceiling within what Kafka 4 defines)."""
        if api_key in self._apis:
            raise ValueError(f"Kafka API {api_key} is served twice")
        floor = kafka_floor(api_key)
        if min_version != floor or max_version < min_version:
            raise ValueError(
                f"Kafka API {api_key}: versions {min_version}-{max_version} do not start at "
                f"Kafka 4's floor {floor}"
            )
        unknown = set(range(min_version, max_version + 1)) - set(codec_versions(api_key))
        if unknown:
            raise ValueError(
                f"Kafka API {api_key} v{min(unknown)}: the codec does not know this version"
            )
        self._apis[api_key] = KafkaApi(
            api_key, min_version, max_version, handler, max_request_bytes
        )

    def get(self, api_key: int) -> KafkaApi | None:
        return self._apis.get(api_key)

    def __iter__(self) -> Iterator[KafkaApi]:
        """The served APIs by key."""
        return iter(sorted(self._apis.values(), key=lambda api: api.api_key))

    def versions(self) -> list[tuple[int, int, int]]:
        """(api key, min version, max version) of every served API, by key: ApiVersions'
        table."""
        return [(api.api_key, api.min_version, api.max_version) for api in self]

    @property
    def max_frame_bytes(self) -> int:
        """The largest frame any served API takes: a size prefix above it closes the
        connection before a byte of the frame is read."""
        return max((api.max_request_bytes for api in self._apis.values()),
                   default=DEFAULT_REQUEST_LIMIT)


def codec_versions(api_key: int) -> list[int]:
    """The versions of `api_key` kio has both a request and a response schema for, read from
    its index: importing every version's module would cost a node's start seconds (they are
    imported when a client first sends that version)."""
    name = api_key_map.get(api_key)
    versions = schema_name_map.get(name, {}) if name is not None else {}
    return sorted(
        version for version, entities in versions.items()
        if EntityType.request in entities and EntityType.response in entities
    )


def kafka_floor(api_key: int) -> int:
    """The lowest version of `api_key` Kafka 4 accepts: the lowest kio knows (kio carries
    only the versions Kafka 4 still accepts)."""
    versions = codec_versions(api_key)
    if not versions:
        raise ValueError(f"the codec knows no version of Kafka API {api_key}")
    return versions[0]
