"""A Kafka listener in this process with handlers of the test's own (no node): a request that
expects no answer (Produce with acks=0) gets none while the requests after it are answered,
a connection's requests are handled in order (Produce requests in a row by their appends),
the bytes of requests read and not answered stay within queued.max.request.bytes (the
listener stops reading until an answer frees room), and connections.max.idle.ms closes a
silent connection or one stalled in the middle of a frame, never a busy one."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

import pytest
from kafka_wire import WIRE_TIMEOUT_S, frame_of
from kio.schema.api_versions.v0.request import ApiVersionsRequest
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v1.request import MetadataRequest
from kio.schema.produce.v3.request import ProduceRequest

from tidelog.node.config import NodeConfig
from tidelog.node.edge.limits import InFlight
from tidelog.node.kafka.api_versions import add_api_versions
from tidelog.node.kafka.call import KafkaCall
from tidelog.node.kafka.codec import decode, encode_request, request_header, response_type
from tidelog.node.kafka.listener import KafkaListener
from tidelog.node.kafka.registry import ApiRegistry

pytestmark = pytest.mark.timeout(60)

#: The listener's budget: two of the test's Metadata frames fit, three do not.
BUDGET = 700


#: A small connections.max.idle.ms for the idle tests.
IDLE_MS = 1500


def _config(**extra: str) -> NodeConfig:
    return NodeConfig.from_properties({
        "node.id": "1", "listen": "127.0.0.1:1", "data.dir": "/tmp/tidelog-unused",
        "kafka.listen": "127.0.0.1:0", **extra,
    })


async def _read_answer(reader: asyncio.StreamReader, api_key: int, version: int) -> Any:
    size = int.from_bytes(await reader.readexactly(4), "big")
    frame = await reader.readexactly(size)
    body_type = response_type(api_key, version)
    header, offset = decode(body_type.__header_schema__, frame)
    return int(header.correlation_id), decode(body_type, frame, offset)[0]


async def _serving(registry: ApiRegistry, **extra: str) -> tuple[KafkaListener, int]:
    listener = KafkaListener(_config(**extra))
    port = await listener.bind()
    await listener.serve(registry)
    return listener, port


def test_a_request_that_expects_no_answer_gets_none() -> None:
    async def produce(request: Any, call: KafkaCall) -> Any:
        if request.acks == 0:
            return None
        return response_type(0, 3)(responses=(), throttle_time=datetime.timedelta(0))

    async def scenario() -> None:
        registry = ApiRegistry()
        add_api_versions(registry)
        registry.add(0, 3, 3, produce)
        listener, port = await _serving(registry)
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            quiet = ProduceRequest(transactional_id=None, acks=0,
                                   timeout=datetime.timedelta(seconds=1), topic_data=())
            acked = ProduceRequest(transactional_id=None, acks=1,
                                   timeout=datetime.timedelta(seconds=1), topic_data=())
            writer.write(frame_of(quiet, 1) + frame_of(ApiVersionsRequest(), 2)
                         + frame_of(quiet, 3) + frame_of(acked, 4))
            assert (await _read_answer(reader, 18, 0))[0] == 2
            assert (await _read_answer(reader, 0, 3))[0] == 4
            writer.close()
        finally:
            await listener.stop()

    asyncio.run(asyncio.wait_for(scenario(), WIRE_TIMEOUT_S))


def test_reading_stops_while_the_unanswered_bytes_fill_the_budget() -> None:
    """The node refuses a queued.max.request.bytes below one maximal Produce, so the test
    gives its listener a small budget of the same kind directly."""
    started: list[int] = []

    async def scenario() -> None:
        go = asyncio.Event()

        async def metadata(request: Any, call: KafkaCall) -> Any:
            started.append(len(started))
            await go.wait()
            return response_type(3, 1)(brokers=(), controller_id=-1, topics=())

        registry = ApiRegistry()
        registry.add(3, 0, 1, metadata)
        listener = KafkaListener(_config())
        listener._budget = budget = InFlight(BUDGET)
        port = await listener.bind()
        await listener.serve(registry)
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            request = MetadataRequest(topics=())
            frames = [encode_request(request_header(request, n, "c" * 280), request)
                      for n in range(3)]
            assert 2 * (len(frames[0]) - 4) <= BUDGET < 3 * (len(frames[0]) - 4)
            writer.write(b"".join(frames))
            while not budget._waiters:  # the reader waits for room
                await asyncio.sleep(0.01)
            # Two read ahead, the first handled (in order: the second waits for its answer).
            assert len(started) == 1 and budget.total <= BUDGET
            go.set()
            for n in range(3):
                assert (await _read_answer(reader, 3, 1))[0] == n
            assert len(started) == 3
            writer.close()
        finally:
            await listener.stop()
        assert budget.total == 0

    asyncio.run(asyncio.wait_for(scenario(), WIRE_TIMEOUT_S))


def test_requests_are_handled_in_order_and_produce_requests_in_a_row_by_their_appends() -> None:
    """Kafka handles a connection's requests one after another. The listener does too, but for
    Produce requests in a row: the next one goes on once the one before has its batches in the
    log (`KafkaCall.appended`), not once it is answered. A first Produce that waits before its
    appends (as a transaction's first batch on a partition waits for the coordinator's
    verification) is not overtaken by the next; a Metadata request after both waits for both
    answers."""
    handled: list[str] = []

    async def scenario() -> None:
        verified, committed = asyncio.Event(), asyncio.Event()
        answer = response_type(0, 3)(responses=(), throttle_time=datetime.timedelta(0))

        async def produce(request: Any, call: KafkaCall) -> Any:
            if request.timeout == datetime.timedelta(seconds=1):  # the first
                handled.append("first produce")
                await verified.wait()
                handled.append("first appended")
                call.appended()
                await committed.wait()
                handled.append("first answered")
            else:
                handled.append("second produce")
                committed.set()  # only if it ran before the first was answered
            return answer

        async def metadata(request: Any, call: KafkaCall) -> Any:
            handled.append("metadata")
            return response_type(3, 1)(brokers=(), controller_id=-1, topics=())

        registry = ApiRegistry()
        registry.add(0, 3, 3, produce)
        registry.add(3, 0, 1, metadata)
        listener, port = await _serving(registry)
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            first, second = (
                ProduceRequest(transactional_id=None, acks=1,
                               timeout=datetime.timedelta(seconds=s), topic_data=())
                for s in (1, 2)
            )
            writer.write(frame_of(first, 1) + frame_of(second, 2)
                         + frame_of(MetadataRequest(topics=()), 3))
            while not handled:
                await asyncio.sleep(0.01)
            verified.set()
            assert [(await _read_answer(reader, key, version))[0]
                    for key, version in ((0, 3), (0, 3), (3, 1))] == [1, 2, 3]
            writer.close()
        finally:
            await listener.stop()

    asyncio.run(asyncio.wait_for(scenario(), WIRE_TIMEOUT_S))
    assert handled == ["first produce", "first appended", "second produce", "first answered",
                       "metadata"]


def test_the_api_versions_table_is_the_registry() -> None:
    async def scenario() -> None:
        registry = ApiRegistry()
        add_api_versions(registry)
        listener, port = await _serving(registry)
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(frame_of(ApiVersionsRequest(), 7))
            correlation_id, answer = await _read_answer(reader, 18, 0)
            assert correlation_id == 7 and answer.error_code == ErrorCode.none
            assert [(k.api_key, k.min_version, k.max_version) for k in answer.api_keys] == [
                (18, 0, 4)]
            writer.close()
        finally:
            await listener.stop()

    asyncio.run(asyncio.wait_for(scenario(), WIRE_TIMEOUT_S))


async def _closed(reader: asyncio.StreamReader) -> bool:
    """Whether the listener closes the connection within the wire timeout (any answers
    before the close are dropped)."""
    try:
        async with asyncio.timeout(WIRE_TIMEOUT_S):
            while await reader.read(65536):
                pass
    except TimeoutError:
        return False
    except ConnectionResetError:
        pass
    return True


def test_an_idle_connection_and_a_stalled_frame_are_closed() -> None:
    """A client that connects and sends nothing, and one that sends a frame's size and part of
    its body and then stalls (a slowloris), are both closed after connections.max.idle.ms."""

    async def scenario() -> None:
        registry = ApiRegistry()
        add_api_versions(registry)
        listener, port = await _serving(registry, **{"connections.max.idle.ms": str(IDLE_MS)})
        try:
            silent_reader, silent = await asyncio.open_connection("127.0.0.1", port)
            stalled_reader, stalled = await asyncio.open_connection("127.0.0.1", port)
            frame = frame_of(ApiVersionsRequest(), 1)
            stalled.write(frame[: len(frame) // 2])  # the size prefix and half the body
            assert await _closed(silent_reader)
            assert await _closed(stalled_reader)
            silent.close()
            stalled.close()
        finally:
            await listener.stop()

    asyncio.run(asyncio.wait_for(scenario(), 3 * WIRE_TIMEOUT_S))


def test_a_connection_that_sends_requests_or_waits_for_an_answer_stays_open() -> None:
    """A connection sending requests more often than the idle limit, and one whose request is
    still being answered, both outlive a silent connection opened after them."""

    async def scenario() -> None:
        answer_slow = asyncio.Event()

        async def metadata(request: Any, call: KafkaCall) -> Any:
            await answer_slow.wait()
            return response_type(3, 1)(brokers=(), controller_id=-1, topics=())

        registry = ApiRegistry()
        add_api_versions(registry)
        registry.add(3, 0, 1, metadata)
        listener, port = await _serving(registry, **{"connections.max.idle.ms": str(IDLE_MS)})
        try:
            busy_reader, busy = await asyncio.open_connection("127.0.0.1", port)
            slow_reader, slow = await asyncio.open_connection("127.0.0.1", port)
            slow.write(frame_of(MetadataRequest(topics=()), 1))
            silent_reader, silent = await asyncio.open_connection("127.0.0.1", port)
            silent_closed = asyncio.create_task(_closed(silent_reader))
            correlation_id = 0
            while not silent_closed.done():  # a request every fifth of the idle limit
                correlation_id += 1
                busy.write(frame_of(ApiVersionsRequest(), correlation_id))
                assert (await _read_answer(busy_reader, 18, 0))[0] == correlation_id
                await asyncio.wait({silent_closed}, timeout=IDLE_MS / 5000)
            assert silent_closed.result()
            busy.write(frame_of(ApiVersionsRequest(), 0))
            assert (await _read_answer(busy_reader, 18, 0))[0] == 0
            answer_slow.set()
            assert (await _read_answer(slow_reader, 3, 1))[0] == 1
            for writer in (busy, slow, silent):
                writer.close()
        finally:
            await listener.stop()

    asyncio.run(asyncio.wait_for(scenario(), 3 * WIRE_TIMEOUT_S))

