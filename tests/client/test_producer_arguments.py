"""The producer checks every argument of send() where it is passed, and a batch that fails
fails only its own records (issue 27): a record the sender could not encode used to fail its
batch in the background, stop the sender (every later send on the producer then timed out)
and make close() raise TypeError.

Against one real node: send() driven with arbitrary argument types and values refuses the bad
ones at once with ConfigurationError (a ValueError) and never lets one into a batch; after
each, a good record is still delivered, and close() is clean at the end. A batch broken after
send() (fault injected into its encoded records) fails its own future only.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from fuzz_helpers import fuzz_settings
from hypothesis import given
from hypothesis import strategies as st

from tidelog import Client, ConfigurationError, TidelogError
from tidelog.producer import Producer
from tidelog.testing import LocalCluster

pytestmark = pytest.mark.timeout(180)

TOPIC = "args"
PARTITIONS = 2
#: What a send() to a topic or partition that does not exist may block for.
MAX_BLOCK_MS = 300
RESULT_S = 30.0


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(1) as c:
        with Client(c.bootstrap) as client:
            client.create_topic(TOPIC, partitions=PARTITIONS)
        yield c


@pytest.fixture
def client(cluster: LocalCluster) -> Iterator[Client]:
    with Client(cluster.bootstrap) as c:
        yield c


def assert_delivers(producer: Producer, value: bytes) -> None:
    metadata = producer.send(TOPIC, value).result(RESULT_S)
    assert metadata.offset >= 0


anything = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=4),
    st.binary(max_size=4), st.builds(bytearray, st.binary(max_size=4)),
    st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=2), st.integers(),
                                                         max_size=2),
    st.just(object()),
)
header_st = st.one_of(
    st.tuples(st.text(max_size=4), st.one_of(st.none(), st.binary(max_size=4))),
    st.tuples(anything, anything), st.lists(anything, max_size=3), anything,
)


def test_the_issue_cases_are_refused_and_the_producer_goes_on(client: Client) -> None:
    producer = client.producer(max_block_ms=MAX_BLOCK_MS)
    refused: list[dict[str, Any]] = [
        {"headers": [("h", "x")]},  # a str header value
        {"timestamp_ms": "now"},
        {"timestamp_ms": -5},
        {"timestamp_ms": 2**63},
        {"headers": [("\ud800", b"x")]},  # a header key UTF-8 cannot encode
        {"headers": {"h": b"x"}},
        {"partition": -1},
        {"partition": "0"},
        {"partition": True},
        {"key": "k"},
    ]
    for kwargs in refused:
        with pytest.raises(ConfigurationError):
            producer.send(TOPIC, b"v", **kwargs)
    for topic in (b"args", None, ""):
        with pytest.raises(ConfigurationError, match="topic"):
            producer.send(topic, b"v")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="value"):
        producer.send(TOPIC, "v")  # type: ignore[arg-type]
    assert_delivers(producer, b"good")
    producer.close(10_000)


def test_arbitrary_send_arguments_never_poison_the_producer(client: Client) -> None:
    producer = client.producer(max_block_ms=MAX_BLOCK_MS, delivery_timeout_ms=20_000)
    now = int(time.time() * 1000)
    counts = {"refused": 0, "delivered": 0, "failed": 0}

    @fuzz_settings(60)
    @given(
        topic=st.one_of(st.just(TOPIC), st.just(TOPIC), st.just("absent"), anything),
        value=st.one_of(st.binary(max_size=16), anything),
        key=st.one_of(st.none(), st.binary(max_size=8), anything),
        partition=st.one_of(st.none(), st.integers(-2, PARTITIONS), anything),
        timestamp_ms=st.one_of(st.none(), st.just(now), st.integers(-2, 2**64), anything),
        headers=st.one_of(st.none(), st.lists(header_st, max_size=3), anything),
    )
    def one(topic: Any, value: Any, key: Any, partition: Any, timestamp_ms: Any,
            headers: Any) -> None:
        try:
            future = producer.send(topic, value, key=key, partition=partition,
                                   timestamp_ms=timestamp_ms, headers=headers)
        except TidelogError:
            # ConfigurationError for a bad argument; a good one naming a topic or partition
            # that does not exist waits max_block_ms for it and says so.
            counts["refused"] += 1
        else:
            error = future.exception(RESULT_S)  # completes, one way or the other
            assert error is None or isinstance(error, TidelogError), repr(error)
            counts["delivered" if error is None else "failed"] += 1
        assert_delivers(producer, b"good")

    one()
    assert counts["refused"] and counts["delivered"], counts
    producer.close(10_000)  # clean: raises nothing


def test_a_batch_that_cannot_be_sent_fails_only_its_own_records(client: Client) -> None:
    # Long linger: the batches wait in the accumulator until flush(), so the fault can be
    # injected into one of them before it leaves.
    producer = client.producer(linger_ms=60_000)
    broken = producer.send(TOPIC, b"broken", partition=0)
    sound = producer.send(TOPIC, b"sound", partition=1)
    with producer._lock:
        broken._batch.parts.append("not bytes")  # type: ignore[arg-type]  # the fault
    producer.flush(int(RESULT_S * 1000))
    error = broken.exception(0)
    assert isinstance(error, TidelogError) and "could not send" in str(error), repr(error)
    assert sound.result(0).offset >= 0
    after = producer.send(TOPIC, b"after", partition=0)
    producer.flush(int(RESULT_S * 1000))
    assert after.result(0).offset >= 0
    producer.close(10_000)
