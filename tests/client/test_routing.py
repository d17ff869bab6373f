"""Metadata never names an older leader epoch than the node knows (hardening issue): the
node's own replica and the leaders' announcements are compared by epoch."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidelog.node.cluster.routing import Routing
from tidelog.node.config import NodeConfig
from tidelog.node.replicas.partition import PartitionReplica
from tidelog.replication import Heartbeat, RaftConfig, VoteRequest
from tidelog.replication.term_votes import TERM_VOTES_FILE, TermVotes
from tidelog.storage import LogConfig
from tidelog.types import TopicPartition
from tidelog.v1 import raft_pb2 as rpb

TP = TopicPartition("events", 0)
CONTROLLER = TopicPartition("__cluster_metadata", 0)


def announcement(epoch: int) -> rpb.LeaderAnnouncement:
    return rpb.LeaderAnnouncement(
        group=rpb.GroupId(topic=TP.topic, partition=TP.partition), epoch=epoch, isr=[1, 2, 3]
    )


@pytest.fixture
def hosted(tmp_path: Path) -> tuple[Routing, PartitionReplica]:
    config = NodeConfig(
        node_id=1, listen="127.0.0.1:0", data_dir=tmp_path,
        peers={1: "127.0.0.1:1", 2: "127.0.0.1:2", 3: "127.0.0.1:3"},
        client_addresses={2: "127.0.0.1:12", 3: "127.0.0.1:13"},
    )
    replica = PartitionReplica(
        TP, 1, (1, 2, 3), tmp_path / "events-0", LogConfig(), RaftConfig(), seed=1,
        term_votes=TermVotes(tmp_path / TERM_VOTES_FILE),
    )
    return Routing(config, {TP: replica}, CONTROLLER), replica


def test_an_announced_newer_epoch_wins_over_the_replicas_own_older_leader(
    hosted: tuple[Routing, PartitionReplica],
) -> None:
    routing, replica = hosted
    replica.core.step(Heartbeat(term=5, src=2, dst=1, leader_hw=0))
    assert routing.leader_of(TP) == (2, 5)
    routing.learn(3, [announcement(7)])
    assert routing.leader_of(TP) == (3, 7)


def test_an_election_under_way_names_no_leader_of_an_older_epoch(
    hosted: tuple[Routing, PartitionReplica],
) -> None:
    routing, replica = hosted
    routing.learn(2, [announcement(5)])
    assert routing.leader_of(TP) == (2, 5)
    # A vote request of term 9 moves the replica to term 9, whose leader is not known yet.
    replica.core.step(VoteRequest(term=9, src=3, dst=1, log_end_offset=0, last_epoch=0))
    assert routing.leader_of(TP) == (-1, 9)
    routing.learn(3, [announcement(9)])
    assert routing.leader_of(TP) == (3, 9)


def test_a_partition_hosted_elsewhere_follows_the_newest_announcement(tmp_path: Path) -> None:
    config = NodeConfig(node_id=1, listen="127.0.0.1:0", data_dir=tmp_path,
                        peers={1: "127.0.0.1:1"})
    routing = Routing(config, {}, CONTROLLER)
    assert routing.leader_of(TP) == (-1, -1)
    routing.learn(2, [announcement(4)])
    routing.learn(3, [announcement(3)])  # older, late
    assert routing.leader_of(TP) == (2, 4)
