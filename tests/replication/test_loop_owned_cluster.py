"""Topics of thousands of partitions created and deleted while every node's checkpoint,
retention and scrub passes run back to back: the nodes live through it.

The checkpoint pass used to walk the replica registry on the disk thread while the event loop
added the replicas of a new topic to it; a CreateTopics of 10,000 partitions crashed the node
("dictionary changed size during iteration"). The passes now get a snapshot taken on the loop
(`tidelog.node.replicas.loop_owned`), and the test suite runs every node with the debug check on
(tests/conftest.py), so a helper thread that reads the registry itself fails the node here
whether or not the race happens to strike."""

from __future__ import annotations

from functools import partial

import pytest

from tidelog import wire
from tidelog.testing import LocalCluster, Raw, wait_for

pytestmark = pytest.mark.timeout(420)

_TOPICS = 2
#: Two thousand partitions in all: the debug check fails a node on the first registry read off
#: the loop, so more partitions would widen the race's window but not what the test can see.
_PARTITIONS = 1000
#: What a node's log holds when a thread broke: the race itself, the debug check, any crash.
_SIGNS_OF_TROUBLE = ("changed size during iteration", "touched off the event loop", "Traceback")


def test_nodes_survive_topics_of_thousands_of_partitions_created_and_deleted_under_chores(
) -> None:
    with LocalCluster(
        nodes=3,
        # Each pass as often as the housekeeping loop turns (every 0.2 s), the scrubber
        # re-reading every log all the time.
        replica_high_watermark_checkpoint_interval_ms=1,
        log_retention_check_interval_ms=1,
        log_scrub_interval_ms=1,
    ) as cluster, Raw(cluster) as raw:
        names = [f"wide-{i}" for i in range(_TOPICS)]
        for name in names:
            _create(raw, name)
        for name in names:
            wait_for(partial(_hosted_everywhere, raw, cluster, name), 180,
                     f"every partition of {name} led")
        answer = raw.stub(1).DeleteTopics(wire.delete_topics_request(names, 60_000), timeout=90)
        assert [t.error_code for t in answer.topics] == [0] * _TOPICS, answer
        for node in cluster.node_ids:
            wait_for(partial(_gone, raw, node, names), 60, f"node {node} to forget the topics")
        for node in cluster.node_ids:
            assert cluster.is_running(node), f"node {node} died:\n{cluster.logs(node)[-4000:]}"
            logs = cluster.logs(node)
            for sign in _SIGNS_OF_TROUBLE:
                assert sign not in logs, f"node {node} logged {sign!r}:\n{logs[-4000:]}"


def _create(raw: Raw, name: str) -> None:
    """One CreateTopics (replication factor 1: each node opens a third of the partitions),
    retried while the controller is settling."""

    def created() -> bool:
        answer = raw.create_topic_once(name, _PARTITIONS, 1, {})
        return answer.topics[0].error_code == 0

    wait_for(created, 60, f"the controller to create {name}")


def _hosted_everywhere(raw: Raw, cluster: LocalCluster, name: str) -> bool:
    for node in cluster.node_ids:
        assert cluster.is_running(node), f"node {node} died:\n{cluster.logs(node)[-4000:]}"
        md = raw.metadata(node, name)
        if md.error_code or len(md.partitions) != _PARTITIONS:
            return False
        if any(p.leader_id < 0 for p in md.partitions):
            return False
    return True


def _gone(raw: Raw, node: int, names: list[str]) -> bool:
    answer = raw.stub(node).Metadata(wire.metadata_request(names), timeout=10)
    return all(t.error_code != 0 for t in answer.topics)
