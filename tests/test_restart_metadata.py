"""A restarted node reports SERVING only once its metadata is as current as the controller's
committed state (hardening issue): restarted right after a topic was created, with the
controller unreachable, it must still know the topic the moment it serves."""

from __future__ import annotations

import pytest

from tidelog import wire
from tidelog.testing import LocalCluster, Raw, wait_for

pytestmark = pytest.mark.timeout(180)


def test_a_node_restarted_right_after_a_topic_was_created_knows_it_when_serving() -> None:
    with LocalCluster(3, auto_leader_rebalance_enable=False) as cluster, Raw(cluster) as raw:
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

