"""A node's log as JSON lines (log.format=json): every line is one JSON object, and the events
an operator looks for are there with their fields."""

from __future__ import annotations

import json
from functools import partial
from typing import Any

import pytest

from tidelog.testing import LocalCluster, Raw, wait_for
from tidelog.v1 import tidelog_pb2 as pb

pytestmark = pytest.mark.timeout(120)


def entries(cluster: LocalCluster, node: int) -> list[dict[str, Any]]:
    """Every line of the node's log, parsed: a line that is not JSON fails the test."""
    parsed = []
    for number, line in enumerate(cluster.logs(node).splitlines(), start=1):
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            pytest.fail(f"line {number} of node {node}'s log is not JSON: {line!r}")
        assert isinstance(entry, dict), line
        assert {"time", "level", "logger", "node", "message"} <= entry.keys(), line
        parsed.append(entry)
    return parsed


def test_json_lines_hold_the_start_election_leadership_and_topic_events() -> None:
    with LocalCluster(3, log_format="json") as cluster, Raw(cluster) as raw:
        raw.create_topic("logged", 1, 3)
        leader = raw.wait_leaders("logged")[0]

        def events(node: int, name: str) -> list[dict[str, Any]]:
            return [e for e in entries(cluster, node) if e.get("event") == name]

        for node in cluster.node_ids:
            started = events(node, "node_started")
            assert len(started) == 1, started
            assert started[0]["node"] == node
            assert started[0]["listen"] == cluster.address_of(node)
            assert started[0]["metrics"] == cluster.metrics_address(node)
            assert set(started[0]["peers"]) == {str(n) for n in cluster.node_ids}
            created = wait_for(partial(events, node, "topic_created"), 10,
                               f"node {node} to log the topic's creation")
            assert created[0]["topic"] == "logged"
        won = [e for e in events(leader, "election_won") if e["topic"] == "logged"]
        assert won and won[-1]["partition"] == 0 and won[-1]["term"] >= 1, won

        # A kill: a survivor wins the next term, and the third logs the new leader.
        cluster.kill(leader)
        survivors = [n for n in cluster.node_ids if n != leader]
        new = wait_for(lambda: next((n for n in survivors if any(
            e["topic"] == "logged" and e["term"] > won[-1]["term"]
            for e in events(n, "election_won"))), None), 30, "a logged election")
        other = next(n for n in survivors if n != new)
        wait_for(lambda: any(e["topic"] == "logged" and e["leader"] == new
                             for e in events(other, "leader_changed")),
                 30, "the new leader logged by the other survivor")
        # The preferred replica back: it takes its leadership back, and `new` logs the loss
        # with the term that ended it.
        cluster.restart(leader)
        lost = wait_for(lambda: [e for e in events(new, "leadership_lost")
                                 if e["topic"] == "logged"], 60, "the leadership loss logged")
        assert lost[-1]["term"] > won[-1]["term"] and lost[-1]["level"] == "INFO"
        deleted = raw.stub(other).DeleteTopics(
            pb.DeleteTopicsRequest(topic_names=["logged"], timeout_ms=15_000), timeout=30)
        assert deleted.topics[0].error_code == 0, deleted
        for node in cluster.node_ids:
            wait_for(lambda node=node: [e for e in events(node, "topic_deleted")
                                        if e["topic"] == "logged"],
                     30, f"node {node} to log the topic's deletion")
        cluster.stop(new)
        stopping = events(new, "node_stopping")
        assert stopping and stopping[-1]["graceful"] is True
        assert events(new, "node_stopped")
        for node in cluster.node_ids:
            entries(cluster, node)  # still all JSON, shutdown included
