"""Limits a request meets before anything else looks at it: a size per method, and a cap on the
bytes of requests a listener holds at once, per connection and in all (Kafka's
``queued.max.request.bytes``). Both come before authorization, so a client with no right to
anything cannot make a node hold more than the caps, however many large requests it sends.

Why a reservation. gRPC takes a message whole, up to the server's receive limit, before the
handler sees a byte of it; that limit is the server's, not the method's, and it must let one
maximal Produce in (``MAX_MESSAGE_BYTES``). But gRPC reads a message only when the handler asks
for it. So each unary method is served as a client-streaming one, whose handler asks itself: it
first reserves the server's receive limit in the budget (waiting while the budget is full), then
receives the message, keeps only the message's real size reserved until it has answered, and
refuses the message with RESOURCE_EXHAUSTED (gRPC's own answer to an oversized message) when it
exceeds its method's limit. What a listener holds of unary requests, the ones being received
included, is therefore within the caps at every moment. After the message the handler also reads
the end of the stream: gRPC keeps the buffers of a call whose end was never read.

Waiting rather than refusing, as Kafka stops reading from its sockets while its request queue is
full: a client that sends more than the node takes at once is slowed down, not failed, and the
call's own deadline bounds the wait. An answer of RESOURCE_EXHAUSTED would fail requests for a
condition that clears by itself within milliseconds, and every client would need a retry loop.

Streaming requests (the node-to-node Raft stream, reflection) spend most of their life waiting
for their next message; a reservation held while they wait would take a maximal message out of
the budget per stream for good. Their messages are checked against their method's limit and
counted from their arrival until the next one is asked for, without waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, NoReturn

import grpc

from tidelog.node.edge.interceptors import HandlerRewriter
from tidelog.records import MAX_MESSAGE_BYTES

KiB = 1024
MiB = 1024 * KiB

#: The size of a request no client method but those below needs more of. The largest are
#: administrative: an AlterPartitionReassignments (or a CreatePartitions) of one topic with the
#: most partitions a topic may have (10,000), each placed on five nodes, takes ~0.17 MiB
#: (tests/node/test_request_limits.py measures it), so this leaves room for dozens of such topics in
#: one request; gRPC's own default receive limit is 4 MiB.
DEFAULT_REQUEST_LIMIT = 8 * MiB
#: Client methods whose requests may be larger: Produce carries a batch of up to
#: records.MAX_BATCH_BYTES; an offset commit may carry offset.metadata.max.bytes of metadata
#: per partition, for as many partitions as a group consumes (10,000 partitions at the
#: default 4 KiB is 40 MiB), and that setting has no upper bound.
CLIENT_LIMITS = {
    "Produce": MAX_MESSAGE_BYTES,
    "OffsetCommit": MAX_MESSAGE_BYTES,
    "TxnOffsetCommit": MAX_MESSAGE_BYTES,
}
#: Node-to-node methods whose requests may be larger: the Raft stream carries appended batches,
#: and a forwarded request is a client's request (up to a Produce) in an envelope.
INTERNAL_LIMITS = {
    "Stream": MAX_MESSAGE_BYTES,
    "Forward": MAX_MESSAGE_BYTES,
}


def connection_cap(node_cap: int) -> int:
    """What one connection may hold of a listener's `node_cap`: a quarter, so that it takes
    four connections to make the others wait, but never less than one maximal request."""
    return min(node_cap, max(MAX_MESSAGE_BYTES, node_cap // 4))


class InFlight:
    """The bytes of requests a listener holds (being received, or received and not answered
    yet), per connection (gRPC's peer string names one TCP connection) and in all. Event loop
    only."""

    def __init__(self, node_cap: int) -> None:
        self.node_cap = node_cap
        self.connection_cap = connection_cap(node_cap)
        self.total = 0
        self._by_peer: dict[str, int] = {}
        self._waiters: list[asyncio.Future[None]] = []

    def _fits(self, peer: str, size: int) -> bool:
        return (
            self.total + size <= self.node_cap
            and self._by_peer.get(peer, 0) + size <= self.connection_cap
        )

    async def acquire(self, peer: str, size: int) -> None:
        """Counts `size` bytes for `peer` once both caps leave room (waiting until then);
        `release` gives them back. For holders whose bytes outlive a block (the Kafka
        listener's requests, answered by another task); others use `reserve`."""
        while not self._fits(peer, size):
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            finally:
                if not waiter.done():  # cancelled: the caller's deadline passed
                    self._waiters.remove(waiter)
        self.add(peer, size)

    @contextlib.asynccontextmanager
    async def reserve(self, peer: str, size: int) -> AsyncIterator[Reservation]:
        """Holds `size` bytes for `peer` (once both caps leave room) until the block ends."""
        await self.acquire(peer, size)
        reservation = Reservation(self, peer, size)
        try:
            yield reservation
        finally:
            self.release(peer, reservation.size)

    def add(self, peer: str, size: int) -> None:
        """Counts `size` more bytes for `peer`, without waiting (a message already received)."""
        self.total += size
        self._by_peer[peer] = self._by_peer.get(peer, 0) + size

    def release(self, peer: str, size: int) -> None:
        """Gives back `size` of `peer`'s bytes, and lets every waiter look again."""
        if not size:
            return
        self.total -= size
        left = self._by_peer[peer] - size
        if left:
            self._by_peer[peer] = left
        else:
            del self._by_peer[peer]
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)


class Reservation:
    """What a call holds of an :class:`InFlight` budget."""

    __slots__ = ("_budget", "_peer", "size")

    def __init__(self, budget: InFlight, peer: str, size: int) -> None:
        self._budget = budget
        self._peer = peer
        self.size = size

    def shrink_to(self, size: int) -> None:
        """Keeps `size` (at most what is held) and gives the rest back."""
        self._budget.release(self._peer, self.size - size)
        self.size = size


async def refuse_oversized(
    context: grpc.aio.ServicerContext, method: str, size: int, limit: int
) -> NoReturn:
    """Aborts the call with RESOURCE_EXHAUSTED, naming the sizes (never the request's bytes)."""
    await context.abort(
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        f"a {method.rpartition('/')[2]} request of {size} bytes is over the {limit} bytes "
        "this method takes",
    )
    raise AssertionError("unreachable")


async def _refuse_count(context: grpc.aio.ServicerContext) -> NoReturn:
    await context.abort(
        grpc.StatusCode.INVALID_ARGUMENT, "a unary method takes exactly one message"
    )
    raise AssertionError("unreachable")


class RequestLimits(HandlerRewriter):
    """Serves each method within its size limit and the listener's budget (see the module's
    docstring). `limits` maps method names (the last part of "/service/Method") to the most
    bytes their requests may have; other methods take `default_limit`. `receive_limit` is the
    server's grpc.max_receive_message_length. Put it before (outside) RejectMalformedRequests,
    whose handlers take the raw bytes measured here, and after any check of the caller's
    identity, so that only callers past it reserve anything."""

    def __init__(
        self, budget: InFlight, limits: Mapping[str, int],
        default_limit: int = DEFAULT_REQUEST_LIMIT, receive_limit: int = MAX_MESSAGE_BYTES,
    ) -> None:
        super().__init__()
        self._budget = budget
        self._limits = dict(limits)
        self._default = default_limit
        self._receive_limit = receive_limit

    def rewrite(self, method: str, handler: Any) -> Any:
        limit = self._limits.get(method.rpartition("/")[2], self._default)
        parse: Callable[[bytes], Any] = handler.request_deserializer or (lambda raw: raw)
        response = "stream" if handler.response_streaming else "unary"
        kind = f"{'stream' if handler.request_streaming else 'unary'}_{response}"
        behavior = getattr(handler, kind)
        if handler.request_streaming:
            counted = _counted_stream(behavior, self._budget, method, limit, parse)
            return handler._replace(request_deserializer=None, **{kind: counted})
        budget, receive_limit = self._budget, self._receive_limit

        async def receive(
            requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext, held: Reservation
        ) -> Any:
            """The call's one message, and the end of its stream, within `held`."""
            raw = await anext(requests, None)
            if raw is None or await anext(requests, None) is not None:
                await _refuse_count(context)
            size = len(raw)
            held.shrink_to(size)
            if size > limit:
                del raw  # not kept alive by the abort's traceback
                await refuse_oversized(context, method, size, limit)
            return parse(raw)

        wrapped: Callable[..., Any]
        if inspect.isasyncgenfunction(behavior):

            async def wrapped(
                requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext
            ) -> Any:
                async with budget.reserve(context.peer(), receive_limit) as held:
                    request = await receive(requests, context, held)
                    async for response in behavior(request, context):
                        yield response

        else:

            async def wrapped(
                requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext
            ) -> Any:
                async with budget.reserve(context.peer(), receive_limit) as held:
                    return await behavior(await receive(requests, context, held), context)

        return handler._replace(
            request_streaming=True, request_deserializer=None,
            unary_unary=None, unary_stream=None, **{f"stream_{response}": wrapped},
        )


def _counted_stream(
    behavior: Callable[..., Any], budget: InFlight, method: str, limit: int,
    parse: Callable[[bytes], Any],
) -> Callable[..., Any]:
    """`behavior` (a streaming-request one) with each message checked against `limit` and
    counted from its arrival until the handler asks for the next one, or ends."""

    def counted(
        requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext, held: list[int]
    ) -> AsyncIterator[Any]:
        peer = context.peer()

        async def each() -> AsyncIterator[Any]:
            async for raw in requests:
                budget.release(peer, held.pop() if held else 0)
                if len(raw) > limit:
                    size = len(raw)
                    del raw
                    await refuse_oversized(context, method, size, limit)
                budget.add(peer, len(raw))
                held.append(len(raw))
                yield parse(raw)

        return each()

    # The peer is read while the call is live: read in a `finally` after the client cancelled
    # the call, it touched gRPC's freed call and the node died of SIGSEGV.
    def done(peer: str, held: list[int]) -> None:
        if held:
            budget.release(peer, held.pop())

    if inspect.isasyncgenfunction(behavior):

        async def wrapped_stream(
            requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext
        ) -> Any:
            held: list[int] = []
            peer = context.peer()
            try:
                async for response in behavior(counted(requests, context, held), context):
                    yield response
            finally:
                done(peer, held)

        return wrapped_stream

    async def wrapped(requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> Any:
        held: list[int] = []
        peer = context.peer()
        try:
            return await behavior(counted(requests, context, held), context)
        finally:
            done(peer, held)

    return wrapped
