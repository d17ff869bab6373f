"""A restarted node reports SERVING only once its metadata is as current as the controller's
committed state (hardening issue): restarted right after a topic was created, with the
controller unreachable, it must still know the topic the moment it serves; and once caught up, it
deletes the replica directories no metadata assigns it (`tidelog.node.replicas.strays`)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from tidelog import wire
from tidelog.replication.term_votes import TERM_VOTES_FILE, TermVotes
from tidelog.testing import LocalCluster, Raw, wait_for

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(3, auto_leader_rebalance_enable=False) as running:
        yield running


@pytest.fixture(scope="module")
def raw(cluster: LocalCluster) -> Iterator[Raw]:
    with Raw(cluster) as client:
        yield client


def test_a_node_restarted_right_after_a_topic_was_created_knows_it_when_serving(
    cluster: LocalCluster, raw: Raw,
) -> None:
    def controller_id() -> int | None:
        answer = raw.stub(1).Metadata(wire.metadata_request(), timeout=5)
        return answer.controller_id if answer.controller_id >= 0 else None

    controller = wait_for(controller_id, what="a controller")
    restarted, witness = [n for n in cluster.node_ids if n != controller]
    answer = raw.create_topic_once("fresh", 1, 3, {})
    assert answer.topics[0].error_code == 0, answer
    # The witness has applied the record: a voter that answers knows it is committed.
    wait_for(lambda: raw.metadata(witness, "fresh").error_code == 0 or None,
             what="the witness to apply the topic")
    cluster.kill(restarted)  # before its next offsets checkpoint saves the new HW
    cluster.pause(controller)  # the leader cannot tell the restarted node the HW
    try:
        cluster.restart(restarted)
        assert raw.metadata(restarted, "fresh").error_code == 0
    finally:
        cluster.resume(controller)


def test_a_restarted_node_deletes_replica_directories_no_metadata_assigns_it(
    cluster: LocalCluster, raw: Raw,
) -> None:
    """A replica directory left behind by a node killed between applying the record that took
    the replica away and deleting its files (planted here as copies of a real replica's, with
    a term in the book and a deletion cut short) is deleted once the restarted node has caught
    up with the controller; the replicas assigned to it are kept and serve."""
    raw.create_topic("kept", 1, 3)
    raw.produce_acknowledged("kept", 0, [[b"a", b"b", b"c"]])
    node = 3
    cluster.kill(node)
    data_dir = cluster.node_dir(node)
    shutil.copytree(data_dir / "kept-0", data_dir / "gone-0")
    shutil.copytree(data_dir / "kept-0", data_dir / "half-0.deleted")
    book = TermVotes(data_dir / TERM_VOTES_FILE)
    book.set("gone-0", (7, 1))
    book.sync()
    cluster.restart(node)
    wait_for(lambda: (not (data_dir / "gone-0").exists()
             and not (data_dir / "half-0.deleted").exists()) or None,
             what="the stray directories to be deleted")
    assert TermVotes(data_dir / TERM_VOTES_FILE).get("gone-0") is None
    assert (data_dir / "kept-0").is_dir()
    wait_for(lambda: cluster.leader_of(("kept", 0)), what="a leader of kept-0")
    assert raw.produce_acknowledged("kept", 0, [[b"d"]])
    for n in cluster.node_ids:
        assert raw.metadata(n, "kept").error_code == 0
