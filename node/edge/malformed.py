"""Input that does not parse: refused with INVALID_ARGUMENT (a Kafka frame: its connection
closed), and logged at most once per MALFORMED_LOG_INTERVAL_S for the whole node, whatever the
method (client API, reflection, health, node-to-node streams, Kafka frames). A client or a
scanner sending garbage must not fill the log, nor spend the node's time writing a line (or a
traceback) per request.
"""

from __future__ import annotations

import logging
import time
from typing import NoReturn

import grpc

MALFORMED_LOG_INTERVAL_S = 60.0

log = logging.getLogger("tidelog.node")


class _Reports:
    """When the next line may be written, and how many refusals went unlogged since the last."""

    next_at = 0.0
    unlogged = 0


def note_malformed(what: str, peer: str, exc: BaseException) -> None:
    """Logs malformed input to `what` from `peer`, unless a line was written recently (then
    counts it for the next line). Shared by the gRPC listeners and the Kafka listener."""
    now = time.monotonic()
    if now >= _Reports.next_at:
        _Reports.next_at = now + MALFORMED_LOG_INTERVAL_S
        earlier, _Reports.unlogged = _Reports.unlogged, 0
        log.warning(
            "malformed request to %s from %s: %s (%d more since the last such line; at most "
            "one line every %g s)",
            what, peer, exc, earlier, MALFORMED_LOG_INTERVAL_S,
        )
    else:
        _Reports.unlogged += 1


async def reject_malformed(
    context: grpc.aio.ServicerContext, method: str, exc: BaseException
) -> NoReturn:
    """Aborts the call with INVALID_ARGUMENT; logs it unless a line was written recently."""
    note_malformed(method, context.peer(), exc)
    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"malformed request body: {exc}")
    raise AssertionError("unreachable")
