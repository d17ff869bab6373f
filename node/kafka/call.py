"""The call context a Kafka request is answered with, so that the node's Tidelog handlers
(node/api/*) serve it as they serve a gRPC call: they ask it who calls (`principal_of_call`,
which reads `principal`), how long they may take (`time_remaining`), who the peer is, and
they may abort it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

from tidelog.node.api.forwarding import FORWARD_TIMEOUT_S, ListenerCall

if TYPE_CHECKING:
    from tidelog.node.kafka.sasl import SaslSession

#: How long a request may take when the Kafka request carries no timeout of its own (Kafka
#: clients' default request.timeout.ms).
DEFAULT_TIMEOUT_S = FORWARD_TIMEOUT_S


class KafkaCallAborted(Exception):
    """A Tidelog handler aborted the call (`context.abort`): the request was one the handler
    refuses outright. The Kafka adapter of an API may turn it into an error code; otherwise
    the connection is closed, as Kafka closes it on a request it cannot answer."""

    def __init__(self, code: Any, details: str) -> None:
        super().__init__(f"{getattr(code, 'name', code)}: {details}")
        self.code = code
        self.details = details


class KafkaCall(ListenerCall):
    """One Kafka request: its connection's principal (the SASL identity on a SASL listener,
    else the TLS client certificate's subject, else ``User:ANONYMOUS``), its peer, its
    header's fields, its deadline, and its connection's SASL session (None without SASL)."""

    def __init__(
        self, principal: str, peer: str, api_key: int, api_version: int,
        client_id: str | None, timeout_s: float = DEFAULT_TIMEOUT_S,
        sasl: SaslSession | None = None, on_appended: Callable[[], None] | None = None,
    ) -> None:
        self.principal = principal
        self.sasl = sasl
        self._on_appended = on_appended
        self._peer = peer
        self.api_key = api_key
        self.api_version = api_version
        self.client_id = client_id
        self.deadline = time.monotonic() + timeout_s

    def set_timeout(self, timeout_s: float) -> None:
        """A request that carries its own timeout (``timeout_ms``) sets the deadline to it."""
        self.deadline = time.monotonic() + timeout_s

    def appended(self) -> None:
        if self._on_appended is not None:
            self._on_appended()

    def time_remaining(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def peer(self) -> str:
        """``ipv4:host:port`` or ``ipv6:[host]:port``, as gRPC names a peer."""
        return self._peer

    def auth_context(self) -> dict[str, list[bytes]]:
        """Nothing: the principal was decided when the connection was accepted."""
        return {}

    def invocation_metadata(self) -> tuple[()]:
        """Nothing: a Kafka request carries no metadata."""
        return ()

    async def abort(self, code: Any, details: str = "") -> NoReturn:
        raise KafkaCallAborted(code, details)
