"""ElectLeaders (Kafka's api 43): the preferred replica made leader of each partition named,
answered by the partition's leader here.

In Kafka the controller elects leaders and answers ElectLeaders. Here each partition's Raft group
elects its own, so the request goes to the partition's leader (the client sends it there), which
hands leadership to the preferred replica, the first of the partition's replicas, as the
automatic rebalance of `replicas.housekeeping` does, and answers once the transfer is done:

* the preferred replica leads already: ELECTION_NOT_NEEDED (84);
* it is not in sync (it cannot take over without losing records): PREFERRED_LEADER_NOT_AVAILABLE
  (80);
* another node leads: NOT_LEADER_OR_FOLLOWER (6); none does (an election under way):
  LEADER_NOT_AVAILABLE (5); the client asks again with fresh metadata.

Kafka's unclean election makes a replica outside the in-sync set leader when none in it lives,
losing what only the others held. Raft cannot: a leader is a replica a majority voted for. An
unclean election is answered as Kafka answers it where the outcome is the same (a partition that
has a leader: ELECTION_NOT_NEEDED) and otherwise with ELIGIBLE_LEADERS_NOT_AVAILABLE (83): the
partition needs a majority of its replicas back.
"""

from __future__ import annotations

import asyncio
import time

import grpc

from tidelog import errors
from tidelog.acl import Operation
from tidelog.node.api.authorization import Authorization
from tidelog.node.api.rules import each_once, error_answer
from tidelog.node.cluster.controller_driver import ControllerDriver
from tidelog.node.cluster.routing import Routing
from tidelog.node.config import NodeConfig
from tidelog.node.replicas.replica_set import ReplicaSet
from tidelog.replication import NotLeaderError
from tidelog.types import TopicPartition
from tidelog.v1 import tidelog_pb2 as pb

#: Kafka's ElectionType.
PREFERRED, UNCLEAN = 0, 1
#: What an unset timeout_ms means (Kafka's admin default for ElectLeaders).
_DEFAULT_TIMEOUT_MS = 30_000
#: How often a transfer under way is looked at.
_POLL_S = 0.05


class ElectionApi:
    def __init__(
        self,
        config: NodeConfig,
        controller: ControllerDriver,
        replicas: ReplicaSet,
        routing: Routing,
        authorization: Authorization,
    ) -> None:
        self.config = config
        self.controller = controller
        self.replicas = replicas
        self.routing = routing
        self.authorization = authorization

    async def elect_leaders(
        self, request: pb.ElectLeadersRequest, context: grpc.aio.ServicerContext
    ) -> pb.ElectLeadersResponse:
        """Each partition's election, side by side; ALTER on the cluster, else
        CLUSTER_AUTHORIZATION_FAILED for the whole request."""
        refused = self.authorization.caller_cluster_refused(context, Operation.ALTER)
        if refused is not None:
            return error_answer(pb.ElectLeadersResponse, refused)
        if request.election_type not in (PREFERRED, UNCLEAN):
            return error_answer(pb.ElectLeadersResponse, errors.InvalidRequestError(
                f"election type {request.election_type}: 0 is preferred, 1 unclean"))
        deadline = time.monotonic() + (request.timeout_ms or _DEFAULT_TIMEOUT_MS) / 1000
        named, twice = each_once(
            (TopicPartition(t.topic, p), None) for t in request.topic_partitions
            for p in t.partitions)
        outcomes = await asyncio.gather(*(
            self._elect(tp, request.election_type, tp in twice, deadline) for tp in named))
        response = pb.ElectLeadersResponse()
        by_topic: dict[str, pb.ElectLeadersTopicResult] = {}
        for tp, outcome in zip(named, outcomes, strict=True):
            entry = by_topic.get(tp.topic)
            if entry is None:
                entry = by_topic[tp.topic] = response.replica_election_results.add(
                    topic=tp.topic)
            result = entry.partition_result.add(partition_id=tp.partition)
            if outcome is not None:
                result.error_code = outcome.code
                result.error_message = str(outcome)
        return response

    async def _elect(
        self, tp: TopicPartition, election_type: int, twice: bool, deadline: float
    ) -> errors.TidelogError | None:
        """One partition's election: None once its preferred replica leads, else the error."""
        if twice:
            return errors.InvalidRequestError(f"{tp} appears more than once")
        topic = self.controller.image.topics.get(tp.topic)
        if topic is None or not 0 <= tp.partition < topic.partition_count:
            return errors.UnknownTopicOrPartitionError(f"{tp} does not exist")
        leader, _ = self.routing.leader_of(tp)
        if election_type == UNCLEAN:
            if leader >= 0:
                return errors.ElectionNotNeededError(f"{tp} has a leader, node {leader}")
            return errors.EligibleLeadersNotAvailableError(
                f"{tp} has no leader: Raft elects one only when a majority of its replicas "
                "are back, and never one outside them (no unclean election)")
        replica = self.replicas.partitions.get(tp)
        if replica is None or not replica.is_leader:
            if leader < 0:
                return errors.LeaderNotAvailableError(f"{tp} has no leader now")
            return errors.NotLeaderOrFollowerError(f"node {leader} leads {tp}, not this one")
        preferred = replica.replicas[0]
        if preferred == self.config.node_id:
            return errors.ElectionNotNeededError(f"the preferred replica {preferred} leads {tp}")
        while time.monotonic() < deadline:
            if self.routing.leader_of(tp)[0] == preferred:
                return None
            if replica.is_leader and replica.core.transferring_to is None:
                # Not started yet, or given up after an election timeout: (again) if the
                # preferred replica holds what it must.
                in_sync = replica.in_sync_replicas(self.config.replica_lag_max_ms)
                if preferred not in in_sync:
                    return errors.PreferredLeaderNotAvailableError(
                        f"{tp}: the preferred replica {preferred} is not in sync (in sync: "
                        f"{', '.join(map(str, in_sync))})")
                try:
                    replica.core.transfer_leadership(preferred)
                except (NotLeaderError, ValueError) as exc:
                    return errors.NotLeaderOrFollowerError(f"{tp}: {exc}")
                self.replicas.changed(replica)
            await asyncio.sleep(_POLL_S)
        return errors.RequestTimedOutError(
            f"{tp}: the preferred replica {preferred} did not take over in time")
