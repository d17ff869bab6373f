"""The pieces of metrics and logs that need no cluster: the error-code walk, the endpoint's
port, the settings, and the JSON line format."""

from __future__ import annotations

import json
import logging
import socket
import sys

import pytest

from tidelog.errors import InvalidConfigError
from tidelog.node.config import NodeConfig
from tidelog.node.logs import JsonFormatter
from tidelog.node.metrics import NodeMetrics, _error_walker
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


def test_a_taken_metrics_port_is_a_clear_config_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(InvalidConfigError, match=f"cannot serve metrics on 127.0.0.1:{port}"):
            NodeMetrics().serve("127.0.0.1", port)


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
