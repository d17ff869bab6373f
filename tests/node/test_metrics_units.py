"""The pieces of metrics and logs that need no cluster: the error-code walk, the endpoint's
port, the settings, the JSON line format, and what counts as a partition led."""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import socket
import sys
from pathlib import Path

import pytest
from waiting_helpers import async_wait_for

from tidelog.errors import InvalidConfigError
from tidelog.node.cluster.routing import Routing
from tidelog.node.config import NodeConfig
from tidelog.node.logs import JsonFormatter
from tidelog.node.metrics import NodeMetrics, _error_walker, has_leader
from tidelog.node.replicas.replica_set import ReplicaSet
from tidelog.types import TopicPartition
from tidelog.v1 import raft_pb2 as rpb
from tidelog.v1 import tidelog_pb2 as pb

BASE = {"node.id": "1", "listen": "127.0.0.1:0", "data.dir": "/tmp/unused"}


def test_the_walk_finds_every_nonzero_code_at_every_level() -> None:
    response = pb.CreateTopicsResponse()
    response.topics.add(name="a", error_code=17)
    response.topics.add(name="b")
    found: list[int] = []
    walk = _error_walker(pb.CreateTopicsResponse)
    assert walk is not None
    walk(response, found)
    assert found == [17]
    fetch = pb.OffsetFetchResponse(error_code=16)
    fetch.topics.add(name="t").partitions.add(partition=0, error_code=3)
    found = []
    walker = _error_walker(pb.OffsetFetchResponse)
    assert walker is not None
    walker(fetch, found)
    assert sorted(found) == [3, 16]


@pytest.mark.cluster  # its replica set dials peers over gRPC
def test_a_partition_is_led_only_by_a_live_peer_or_a_leading_replica_here(
    tmp_path: Path,
) -> None:
    """Node 1 hosts "here-0" alone; node 2 (configured, never started) announced "there-0"
    before it went silent; nobody named a leader of "nobody-0"."""
    here, there, nobody = (TopicPartition(t, 0) for t in ("here", "there", "nobody"))

    async def scenario() -> None:
        config = NodeConfig(node_id=1, listen="127.0.0.1:0", data_dir=tmp_path,
                            peers={1: "127.0.0.1:1", 2: "127.0.0.1:2"},
                            client_addresses={1: "127.0.0.1:3", 2: "127.0.0.1:4"})
        replicas = ReplicaSet(config)
        routing = Routing(config, replicas.partitions, TopicPartition("__meta", 0))
        ticking = asyncio.create_task(replicas.tick_loop())
        try:
            replicas.start_links()
            replicas.open_replica(here, (1,), {})
            routing.learn(2, [rpb.LeaderAnnouncement(
                group=rpb.GroupId(topic="there", partition=0), epoch=1, isr=[2])])
            assert has_leader(here, routing, replicas)
            assert has_leader(there, routing, replicas)  # not silent for long yet
            assert not has_leader(nobody, routing, replicas)

            await async_wait_for(lambda: not replicas.peer_live(2), 10,
                                 "node 2 silent for an election timeout")
            assert routing.leader_of(there)[0] == 2  # still named, but its node is dead
            assert not has_leader(there, routing, replicas)

            # Its core still names this node, but a replica whose disk refused a write leads
            # nothing.
            replicas.storage_failed(replicas.partitions[here],
                                    OSError(errno.ENOSPC, "No space left on device"))
            assert routing.leader_of(here)[0] == 1
            assert not has_leader(here, routing, replicas)
        finally:
            ticking.cancel()
            await replicas.close()

    asyncio.run(scenario())


def test_a_taken_metrics_port_is_a_clear_config_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(InvalidConfigError, match=f"cannot serve metrics on 127.0.0.1:{port}"):
            NodeMetrics().serve("127.0.0.1", port)


@pytest.mark.cluster  # binds the HTTP endpoint
def test_the_endpoint_serves_and_stops() -> None:
    import urllib.request

    address, stop = NodeMetrics().serve("127.0.0.1", 0)
    try:
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as answer:
            assert b"tidelog_requests" in answer.read()
    finally:
        stop()


@pytest.mark.parametrize(("key", "value", "message"), [
    ("metrics.port", "-2", "metrics.port must be a port"),
    ("metrics.port", "65536", "metrics.port must be a port"),
    ("log.format", "xml", "log.format must be 'text' or 'json'"),
])
def test_bad_settings_are_refused(key: str, value: str, message: str) -> None:
    with pytest.raises(InvalidConfigError, match=message):
        NodeConfig.from_properties({**BASE, key: value})


def test_settings_default_to_no_metrics_and_text_logs() -> None:
    config = NodeConfig.from_properties(BASE)
    assert (config.metrics_port, config.log_format) == (-1, "text")
    tuned = NodeConfig.from_properties({**BASE, "metrics.port": "0", "log.format": "json"})
    assert (tuned.metrics_port, tuned.log_format) == (0, "json")


def test_a_json_line_holds_the_fields_the_extras_and_the_traceback() -> None:
    formatter = JsonFormatter(7)
    record = logging.LogRecord("tidelog.node", logging.INFO, __file__, 1, "%s: elected in %d",
                               ("t-0", 3), None)
    record.__dict__.update({"event": "election_won", "term": 3})
    entry = json.loads(formatter.format(record))
    assert entry["message"] == "t-0: elected in 3"
    assert (entry["level"], entry["logger"], entry["node"]) == ("INFO", "tidelog.node", 7)
    assert (entry["event"], entry["term"]) == ("election_won", 3)
    assert entry["time"].endswith("+00:00")
    try:
        raise ValueError("boom")
    except ValueError:
        failed = logging.LogRecord("tidelog.node", logging.ERROR, __file__, 1, "failed", (),
                                   sys.exc_info())
    line = formatter.format(failed)
    assert "\n" not in line
    assert "ValueError: boom" in json.loads(line)["exception"]
