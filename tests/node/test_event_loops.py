"""The event loop a node and the client run on (tidelog/event_loops.py): a node serves on
uvloop and on asyncio's own loop as ``event.loop`` says, the client's transport follows
``TIDELOG_EVENT_LOOP``, and a bad choice of either is refused with a message naming it."""

from __future__ import annotations

import asyncio
import re
import sys

import pytest
import uvloop

from tidelog import Client, TopicPartition
from tidelog.errors import ConfigurationError, InvalidConfigError
from tidelog.event_loops import CLIENT_ENV, loop_factory, loop_name
from tidelog.node.config import NodeConfig
from tidelog.testing import LocalCluster, wait_for


@pytest.mark.timeout(90)
@pytest.mark.parametrize("kind", ["asyncio", "uvloop"])
def test_a_node_and_the_client_run_on_each_loop(kind: str,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """One node on ``kind``: it says so when it serves, and a client whose transport runs on
    the same kind of loop produces and reads back a record through it."""
    monkeypatch.setenv(CLIENT_ENV, kind)
    with LocalCluster(1, event_loop=kind) as cluster:
        node = cluster.node_ids[0]
        wait_for(lambda: "serving" in cluster.logs(node), what="the node's serving line")
        assert f"serving on the {kind} event loop" in cluster.logs(node)
        with Client(cluster.bootstrap) as client:
            client.create_topic("loops", partitions=1, replication_factor=1)
            with client.producer(acks="all") as producer:
                producer.send("loops", b"on " + kind.encode()).result(timeout=30)
            assert loop_name(client.connections.transport.loop) == kind
            consumer = client.consumer(auto_offset_reset="earliest")
            consumer.assign([TopicPartition("loops", 0)])
            values: list[bytes | None] = []

            def read() -> bool:
                values.extend(record.value for record in consumer.poll(timeout_ms=500))
                return bool(values)

            wait_for(read, what="the record read back")
            assert values == [b"on " + kind.encode()]


def test_auto_is_uvloop_where_it_is_installed() -> None:
    assert loop_factory("auto") is uvloop.new_event_loop
    assert loop_factory("asyncio") is asyncio.new_event_loop


def test_an_unknown_loop_is_refused_with_the_setting_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(InvalidConfigError, match=re.escape(
            "event.loop must be one of auto, asyncio, uvloop, got 'trio'")):
        NodeConfig.from_properties({"node.id": "1", "listen": "127.0.0.1:0",
                                    "data.dir": "/tmp/unused", "event.loop": "trio"})
    monkeypatch.setenv(CLIENT_ENV, "trio")
    client = Client("127.0.0.1:1")
    try:
        with pytest.raises(ConfigurationError, match=f"{CLIENT_ENV} must be one of"):
            client.admin.list_topics()
    finally:
        client.close()


def test_uvloop_asked_for_but_missing_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Asked for by name, a missing uvloop is an error rather than asyncio in disguise; "auto"
    falls back."""
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import fails
    with pytest.raises(ConfigurationError, match="uvloop is not installed"):
        loop_factory("uvloop")
    assert loop_factory("auto") is asyncio.new_event_loop
