"""A failover leaves no "Future exception was never retrieved" in any node's log.

Before: every failover logged it with NotLeaderOrFollowerError, once per write the old leader
still waited for when it lost its leadership but whose Produce call had stopped waiting (the
client gave up or went away, so gRPC cancelled the call), which drowned the log lines that
matter.
"""

from __future__ import annotations

import grpc
import pytest

from tidelog import wire
from tidelog.testing import LocalCluster, Raw, make_batch, wait_for
from tidelog.types import TopicPartition
from tidelog.v1 import tidelog_pb2 as pb

pytestmark = pytest.mark.timeout(240)

TOPIC = "failover"


def test_a_leader_that_loses_a_write_it_waited_for_logs_no_unretrieved_future() -> None:
    # A long election timeout: the leader cut off from its followers keeps leading (and
    # waiting for the write) well after the client's call has given up.
    with LocalCluster(3, auto_leader_rebalance_enable=False, election_timeout_ms=3000) as cluster, \
            Raw(cluster) as raw:
        raw.create_topic(TOPIC, 1, 3)
        old = raw.wait_leaders(TOPIC, 1)[0]
        followers = [n for n in cluster.node_ids if n != old]
        for node in followers:  # the write cannot commit: the leader waits for it
            cluster.pause(node)
        try:
            request = pb.ProduceRequest.FromString(wire.serialized_produce_request(
                {TopicPartition(TOPIC, 0): [make_batch([b"lost"])]}, -1, 60_000
            ))
            with pytest.raises(grpc.RpcError) as gave_up:
                raw.stub(old).Produce(request, timeout=0.5)
            assert gave_up.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
            # Without a quorum the leader steps down, failing the write it still waited for.
            wait_for(lambda: raw.metadata(old, TOPIC).partitions[0].leader_id != old, 60,
                     "the cut-off leader to step down")
        finally:
            for node in followers:
                cluster.resume(node)
        wait_for(lambda: cluster.leader_of((TOPIC, 0)) is not None, 60, "a leader again")
        for node in cluster.node_ids:
            assert "Future exception was never retrieved" not in cluster.logs(node), node
