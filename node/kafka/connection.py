"""One Kafka connection: frames in, answers out, in request order.

Each frame is an ``int32`` size and that many bytes. The size is checked before the frame is
read (over the served APIs' largest request, the connection is closed), and the frame's bytes
are reserved in the listener's budget (`limits.InFlight`, Kafka's queued.max.request.bytes:
the reading waits while the connection or the node holds too much) until it is answered.
Requests are read ahead, each into a task of its own, at most `MAX_PENDING` at once per
connection, and handled in the order they came, as Kafka promises ("on a single TCP
connection, requests will be processed in the order they are sent"): each is handled once the
one before it is answered, so it sees what the requests before it did (an OffsetFetch the
offsets an OffsetCommit before it committed, a ListOffsets the records a Produce before it
wrote). Produce requests in a row are the exception that keeps a producer's pipeline full:
the next one goes on once this one's batches are in the log, not once they are committed
(`InOrder`). The answers are written in the order the requests came, as Kafka clients
require (they match answers to requests by order as much as by correlation id). A request
that expects no answer (Produce with acks=0) gets none.

A connection with no request in flight that received nothing for connections.max.idle.ms is
closed, as Kafka closes it: a client that connects and stalls, or stops sending in the middle
of a frame (a size prefix and never the whole body), holds no connection and no budget longer.
The clock counts bytes as they arrive (`ReceiveClock`), so a frame still coming is not idle.

Anything a client sends that the node cannot answer closes that connection and only that
one: a frame that does not parse, an API or version the node does not serve (except an
unknown ApiVersions version, which ApiVersions itself answers), a handler that fails. The
node logs it (rate-limited, node/edge/malformed.py) and serves on.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from tidelog.node.edge.limits import InFlight
from tidelog.node.edge.malformed import note_malformed
from tidelog.node.kafka.call import KafkaCall, KafkaCallAborted
from tidelog.node.kafka.codec import (
    API_VERSIONS_KEY,
    MalformedFrame,
    encode_response,
    peek_api,
    read_body,
    read_header,
    request_type,
)
from tidelog.node.kafka.produce import PRODUCE_KEY
from tidelog.node.kafka.registry import ApiRegistry
from tidelog.node.kafka.sasl import (
    FAILED_AUTHENTICATION_DELAY_S,
    SASL_AUTHENTICATE_KEY,
    SASL_HANDSHAKE_KEY,
    SaslFailed,
    SaslSession,
)

log = logging.getLogger("tidelog.node")

#: Requests one connection may have in the node at once (read and not yet answered); the
#: reading waits beyond it. Kafka clients keep at most a handful in flight (5 by default).
MAX_PENDING = 64
#: Bytes of a frame's size prefix.
_SIZE_BYTES = 4


class ReceiveClock(asyncio.StreamReaderProtocol):
    """asyncio's stream protocol, noting when the connection last received bytes: the idle
    limit counts from there, so a frame whose bytes stop coming midway is idle as a silent
    connection is, and one whose bytes still come is not."""

    def __init__(
        self, reader: asyncio.StreamReader,
        connected: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
    ) -> None:
        super().__init__(reader, connected)
        self._now = asyncio.get_running_loop().time
        #: The event loop's time of the last bytes received (of the connection's start first).
        self.received_at = self._now()

    def data_received(self, data: bytes) -> None:
        self.received_at = self._now()
        super().data_received(data)


class InOrder:
    """One request's place in its connection's order: when it may be handled (`turn`), and
    what the request after it waits for. Kafka's broker reads a connection's next request only
    once it has answered the last. Here the next request waits for this one's answer too,
    unless both are Produce requests: then it waits only until this one's batches are in the
    log (`appended`, called by Produce before it waits for them to commit, or when it is
    answered). Appended in the order they came, a producer's pipelined batches keep their
    sequence order on every partition; a transaction's first batch on a partition, which
    waits for its coordinator's verification before it is appended, is not overtaken by the
    batches sent after it."""

    def __init__(self, produce: bool, before: InOrder | None) -> None:
        loop = asyncio.get_running_loop()
        self.produce = produce
        self._answered: asyncio.Future[None] = loop.create_future()
        self._appended: asyncio.Future[None] = loop.create_future()
        self._after: asyncio.Future[None] | None = None
        if before is not None:
            self._after = before._appended if produce and before.produce else before._answered

    async def turn(self) -> None:
        """Returns once this request may be handled."""
        after, self._after = self._after, None  # nothing before it is kept longer
        if after is not None and not after.done():
            await asyncio.wait([after])  # a cancelled wait leaves the future as it is

    def appended(self) -> None:
        """The request's batches are in the log (or refused): a Produce after it may go."""
        if not self._appended.done():
            self._appended.set_result(None)

    def answered(self, _: object = None) -> None:
        """The request is answered (or failed, or was cancelled): whatever follows may go. A
        done callback of the request's task, so it is called however the task ends."""
        self.appended()
        if not self._answered.done():
            self._answered.set_result(None)


class Connection:
    """Serves one accepted connection until the client closes it, a frame closes it, it stays
    idle for `idle_limit_ms` (-1: no limit), or the listener stops."""

    def __init__(
        self, registry: ApiRegistry, budget: InFlight, principal: str,
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, clock: ReceiveClock,
        idle_limit_ms: int, sasl: SaslSession | None = None,
    ) -> None:
        self._registry = registry
        #: The connection's SASL session on a SASL listener: until it is authenticated, the
        #: requests are answered one at a time, and only those of `_BEFORE_AUTHENTICATION`.
        self._sasl = sasl
        #: The request whose answer ends the connection once written (a refused SASL
        #: handshake or authentication).
        self._last: asyncio.Task[bytes | None] | None = None
        self._budget = budget
        self.principal = principal
        self._reader = reader
        self._writer = writer
        self._clock = clock
        self._idle_limit_ms = idle_limit_ms
        #: The event loop's time the last answer was written (of the connection's start first).
        self._answered_at = clock.received_at
        address = writer.get_extra_info("peername") or ("?", 0)
        host, port = address[0], address[1]
        self.peer = f"ipv6:[{host}]:{port}" if ":" in str(host) else f"ipv4:{host}:{port}"
        #: The answers to write, in request order: each a task giving the frame (or None).
        self._answers: deque[asyncio.Task[bytes | None]] = deque()
        self._answer_ready = asyncio.Event()
        self._slots = asyncio.Semaphore(MAX_PENDING)
        #: The place of the last request read (the next one is handled after it).
        self._latest: InOrder | None = None

    async def serve(self) -> None:
        """Reads requests until the client stops sending or a frame closes the connection,
        writes the answers to what was read (a client that half-closes after its last request
        still gets them), then closes. Cancelled (the listener stops), it closes at once."""
        writing = asyncio.create_task(self._write_answers())
        watching = (asyncio.create_task(self._close_when_idle(self._idle_limit_ms / 1000))
                    if self._idle_limit_ms > 0 else None)
        try:
            try:
                await self._read_requests()
            except (ConnectionError, asyncio.IncompleteReadError):
                pass  # the client went away, or sends nothing more
            except MalformedFrame as exc:
                note_malformed("the Kafka listener", self.peer, exc)
            self._answers.append(_DONE)
            self._answer_ready.set()
            with contextlib.suppress(Exception):
                await writing
        finally:
            writing.cancel()
            if watching is not None:
                watching.cancel()
            for task in self._answers:
                if task is not _DONE:
                    task.cancel()
            self._writer.close()

    async def _read_requests(self) -> None:
        reader = self._reader
        limit = self._registry.max_frame_bytes
        while True:
            prefix = await reader.readexactly(_SIZE_BYTES)
            size = int.from_bytes(prefix, "big", signed=True)
            if not 0 < size <= limit:
                raise MalformedFrame(f"a frame of {size} bytes (the limit is {limit})")
            await self._slots.acquire()
            try:
                await self._budget.acquire(self.peer, size)
            except BaseException:
                self._slots.release()
                raise
            try:
                frame = await reader.readexactly(size)
            except BaseException:
                self._release(size)
                raise
            sasl = self._sasl
            authenticating = sasl is not None and not sasl.authenticated
            raw_token = sasl is not None and authenticating and sasl.raw_tokens
            order = self._latest = InOrder(not raw_token and _is_produce(frame), self._latest)
            task = asyncio.create_task(
                self._raw_token(sasl, frame) if sasl is not None and raw_token
                else self._answer(frame, order)
            )
            task.add_done_callback(order.answered)
            task.add_done_callback(functools.partial(self._release, size))
            self._answers.append(task)
            self._answer_ready.set()
            if authenticating:  # what may come next depends on this answer, as in Kafka
                await asyncio.wait([task])

    def _release(self, size: int, _: object = None) -> None:
        """Gives a request's budget and slot back once its answer is ready (written or not:
        what answers hold waiting for the writer is bounded by `MAX_PENDING`)."""
        self._slots.release()
        self._budget.release(self.peer, size)

    async def _answer(self, frame: bytes, order: InOrder) -> bytes | None:
        """The answer frame to `frame` (None: no answer), once the requests before it let it
        be handled; raises MalformedFrame to close the connection."""
        await order.turn()
        api_key, version = peek_api(frame)
        sasl = self._sasl
        if sasl is not None and not sasl.authenticated and api_key not in _BEFORE_AUTHENTICATION:
            raise MalformedFrame(
                f"ILLEGAL_SASL_STATE: Kafka API {api_key} before SASL authentication completed"
            )
        api = self._registry.get(api_key)
        if api is None:
            raise MalformedFrame(f"Kafka API {api_key} is not served here")
        if len(frame) > api.max_request_bytes:
            raise MalformedFrame(
                f"a Kafka API {api_key} request of {len(frame)} bytes is over the "
                f"{api.max_request_bytes} bytes it takes"
            )
        if not api.serves(version):
            if api_key != API_VERSIONS_KEY:
                raise MalformedFrame(f"Kafka API {api_key} v{version} is not served here")
            header = read_header(frame, None)
            body: Any = None  # an unknown version's body is not read (Kafka's rule)
        else:
            body_type = request_type(api_key, version)
            header = read_header(frame, body_type)
            body = read_body(frame, header, body_type)
        call = KafkaCall(self.principal if sasl is None else sasl.principal, self.peer,
                         api_key, version, header.client_id, sasl=sasl,
                         on_appended=order.appended)
        try:
            response = await api.handler(body, call)
        except KafkaCallAborted as exc:
            raise MalformedFrame(f"Kafka API {api_key} v{version} refused: {exc}") from None
        if sasl is not None and sasl.failed:
            self._last = asyncio.current_task()
        return None if response is None else encode_response(header.correlation_id, response)

    async def _raw_token(self, sasl: SaslSession, token: bytes) -> bytes:
        """The answer to a SASL token after a SaslHandshake v0: the tokens travel as bare
        size-prefixed frames, without Kafka headers; a refused one closes the connection."""
        try:
            answer = await sasl.step(token)
        except SaslFailed as exc:
            raise MalformedFrame(f"SASL authentication failed: {exc}") from None
        return len(answer).to_bytes(_SIZE_BYTES, "big") + answer

    async def _write_answers(self) -> None:
        writer = self._writer
        while True:
            while not self._answers:
                self._answer_ready.clear()
                await self._answer_ready.wait()
            task = self._answers[0]
            if task is _DONE:
                return
            try:
                frame = await task
            except MalformedFrame as exc:
                self._fail(exc)
                return
            except Exception:
                log.exception("Kafka request from %s failed; closing its connection", self.peer)
                self._fail(None)
                return
            if frame is not None:
                writer.write(frame)
                await writer.drain()
            self._answers.popleft()
            self._answered_at = asyncio.get_running_loop().time()
            if task is self._last:  # the refusal is written: the connection closes, a little
                await asyncio.sleep(FAILED_AUTHENTICATION_DELAY_S)  # later (see there)
                self._reader.feed_eof()
                return

    async def _close_when_idle(self, limit_s: float) -> None:
        """Closes the connection once it has had no request in flight (read and not yet
        answered) and received nothing for `limit_s`: the clock starts again at the last
        bytes received or the last answer written, whichever is later."""
        now = asyncio.get_running_loop().time
        while True:
            if self._answers:
                wait = limit_s  # in flight: not idle; its answer restarts the clock
            else:
                wait = max(self._clock.received_at, self._answered_at) + limit_s - now()
                if wait <= 0:
                    log.debug("closing the Kafka connection of %s: idle for %.0f ms",
                              self.peer, limit_s * 1000)
                    self._fail(None)
                    return
            await asyncio.sleep(wait)

    def _fail(self, exc: MalformedFrame | None) -> None:
        """Closes the connection now: later requests get no answer (the client sees the close
        and fails them, as with Kafka)."""
        if exc is not None:
            note_malformed("the Kafka listener", self.peer, exc)
        self._reader.feed_eof()
        self._writer.transport.abort()


def _is_produce(frame: bytes) -> bool:
    """Whether `frame` is a Produce request (False for one too short to say: its handling
    refuses it)."""
    try:
        api_key, _ = peek_api(frame)
    except MalformedFrame:
        return False
    return api_key == PRODUCE_KEY


#: What a SASL listener answers before the connection is authenticated.
_BEFORE_AUTHENTICATION = frozenset({API_VERSIONS_KEY, SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY})
#: Marks the end of the answers: the reading ended.
_DONE: Any = object()

