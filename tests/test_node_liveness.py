"""Node liveness (`ReplicaSet._liveness`): an envelope a heartbeat interval to each peer that
nothing else was sent to since the last interval. Under load the rounds talk to every peer many
times an interval, and an envelope beside them would cost a gRPC message more per peer and
interval (about 0.2 ms of CPU on each side) to say what any envelope says."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tidelog.node.config import NodeConfig
from tidelog.node.replicas import ReplicaSet
from tidelog.node.transport import Outgoing, PeerLink
from tidelog.types import TopicPartition


def test_liveness_envelopes_go_only_to_peers_the_rounds_left_alone(tmp_path: Path) -> None:
    async def scenario() -> None:
        replicas = ReplicaSet(NodeConfig(node_id=1, listen="127.0.0.1:0", data_dir=tmp_path))
        try:
            talked, quiet = (PeerLink(1, peer, "127.0.0.1:1", replicas.dialer) for peer in (2, 3))
            replicas.links = {2: talked, 3: quiet}  # never started: frames stay queued
            queued = lambda: (len(talked._queue), len(quiet._queue))  # noqa: E731
            replicas._liveness()
            assert queued() == (1, 1)  # nothing was sent yet: both hear of this node
            talked.send(Outgoing(1, 2))  # a round's frame
            replicas._liveness()
            assert queued() == (2, 2)  # no envelope beside the round's
            replicas._liveness()
            assert queued() == (3, 3)  # a quiet interval: the envelope again
            # A replica out of service is named to every peer each interval, talked to or not.
            replicas._offline[TopicPartition("t", 0)] = asyncio.get_running_loop().create_future()
            talked.send(Outgoing(1, 2))
            replicas._liveness()
            assert queued() == (5, 4)
            del replicas._offline[TopicPartition("t", 0)]
        finally:
            await replicas.close()

    asyncio.run(scenario())
