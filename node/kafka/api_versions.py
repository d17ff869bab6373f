"""ApiVersions (key 18): the table of the APIs the node serves, built from the registry, so
it can never name an API without a handler.

A version of ApiVersions the node does not serve is answered too, as Kafka answers it: a v0
body with UNSUPPORTED_VERSION (35) and the table, from which the client picks a version both
sides speak and asks again.
"""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from tidelog.node.kafka.call import KafkaCall
from tidelog.node.kafka.codec import API_VERSIONS_KEY, response_type
from tidelog.node.kafka.fields import build, entity_of
from tidelog.node.kafka.registry import ApiRegistry

#: The versions served: Kafka 4's floor to the ceiling of Kafka 4.0.
MIN_VERSION, MAX_VERSION = 0, 4


def add_api_versions(registry: ApiRegistry) -> None:
    async def api_versions(request: Any, call: KafkaCall) -> Any:
        version = call.api_version
        error = ErrorCode.none
        if not MIN_VERSION <= version <= MAX_VERSION:
            version, error = 0, ErrorCode.unsupported_version
        response = response_type(API_VERSIONS_KEY, version)
        entry = entity_of(response, "ApiVersion")
        return build(
            response,
            error_code=error,
            api_keys=tuple(
                build(entry, api_key=key, min_version=low, max_version=high)
                for key, low, high in registry.versions()
            ),
            throttle_time=datetime.timedelta(0),
        )

    registry.add(API_VERSIONS_KEY, MIN_VERSION, MAX_VERSION, api_versions)

