"""The client-facing gRPC service (tidelog.v1.Tidelog) of a node: it only dispatches.

Each RPC goes to the API family that answers it, as Kafka's `KafkaApis` hands each request to
its manager: the data plane (`data_plane`: Produce, Fetch, ListOffsets), topics, partitions and
configs, ACLs, reassignments and decommissioning (answered on the controller: `topics`,
`admin`, `acls`, `reassignment`, `decommission`), the coordinators' requests (`find_coordinator`,
`groups`, `consumer_groups`, `transactions`) and the transactions' admin (`txn_admin`). The rules
every request is held to are in `rules`; who may do what in `authorization`; a request another
node answers goes there through `forwarding`. Per-partition problems are Kafka error codes
inside the response; a gRPC status is only for a request that is malformed as a whole
(INVALID_ARGUMENT).
"""

from __future__ import annotations

from collections.abc import Callable

import grpc

from tidelog.node.api.acls import AclApi
from tidelog.node.api.admin import AdminApi
from tidelog.node.api.authorization import Authorization
from tidelog.node.api.consumer_groups import ConsumerGroupApi
from tidelog.node.api.controller_api import ControllerForward
from tidelog.node.api.data_plane import DataPlaneApi
from tidelog.node.api.decommission import DecommissionApi
from tidelog.node.api.elections import ElectionApi
from tidelog.node.api.find_coordinator import FindCoordinatorApi
from tidelog.node.api.forwarding import Forwarder
from tidelog.node.api.groups import GroupApi
from tidelog.node.api.quorum import QuorumApi
from tidelog.node.api.reassignment import ReassignmentApi
from tidelog.node.api.records import RecordsApi
from tidelog.node.api.scram_credentials import ScramCredentialsApi
from tidelog.node.api.topics import TopicsApi
from tidelog.node.api.transactions import TxnApi
from tidelog.node.api.txn_admin import TxnAdminApi
from tidelog.node.cluster.controller_driver import ControllerDriver
from tidelog.node.cluster.routing import Routing
from tidelog.node.config import NodeConfig
from tidelog.node.coordinators.consumer_group_driver import ConsumerGroupDriver
from tidelog.node.coordinators.group_driver import GroupCoordinatorDriver
from tidelog.node.coordinators.topic import CoordinatorTopic
from tidelog.node.coordinators.txn_driver import TxnCoordinatorDriver
from tidelog.node.coordinators.txn_verification import TxnVerification
from tidelog.node.replicas.replica_set import ReplicaSet
from tidelog.v1 import tidelog_pb2 as pb
from tidelog.v1 import tidelog_pb2_grpc


class TidelogServicer(tidelog_pb2_grpc.TidelogServicer):
    def __init__(
        self,
        config: NodeConfig,
        replicas: ReplicaSet,
        routing: Routing,
        controller: ControllerDriver,
        offsets_topic: CoordinatorTopic,
        groups: GroupCoordinatorDriver,
        txn_topic: CoordinatorTopic,
        txns: TxnCoordinatorDriver,
        partition_error: Callable[[str, int], None],
        consumer_groups: ConsumerGroupDriver | None = None,
        txn_verification: TxnVerification | None = None,
    ) -> None:
        """`partition_error(rpc, code)` counts each per-partition error of the answers whose
        handlers count them (Produce, Fetch, ListOffsets, the offset commits: the node's
        metrics); `txn_verification` asks transaction coordinators about the transactional
        batches Produce appends (KIP-890 part 1)."""
        forwarder = Forwarder(config, routing)
        authorization = Authorization(config, controller.image.acls)
        forward = ControllerForward(config, routing, forwarder, authorization)
        self.data_plane = DataPlaneApi(
            config, replicas, routing, controller, authorization, partition_error,
            txn_verification,
        )
        self.topics = TopicsApi(config, controller, replicas, routing, authorization, forward)
        self.admin = AdminApi(config, controller, replicas, authorization, forward)
        self.acls = AclApi(config, controller, authorization, forward)
        self.scram_credentials = ScramCredentialsApi(config, controller, authorization, forward)
        self.reassignment = ReassignmentApi(config, controller, authorization, forward)
        self.decommission = DecommissionApi(config, controller, authorization, forward)
        self.find_coordinator = FindCoordinatorApi(
            config, routing, offsets_topic, txn_topic, authorization, forward
        )
        self.groups = GroupApi(
            config, controller, offsets_topic, groups, forwarder, authorization,
            partition_error, consumer_groups,
        )
        self.consumer_groups = (
            ConsumerGroupApi(self.groups, consumer_groups) if consumer_groups else None
        )
        self.transactions = TxnApi(
            config, routing, controller, txn_topic, txns, forwarder, authorization, forward
        )
        self.txn_admin = TxnAdminApi(txns, authorization, self.data_plane.resolve_leader)
        self.records = RecordsApi(
            config, replicas, authorization, self.data_plane.resolve_leader)
        self.elections = ElectionApi(config, controller, replicas, routing, authorization)
        self.quorum = QuorumApi(config, controller, authorization, forward)
        #: Kafka's ElectLeaders goes to any node, which sends each partition's election to its
        #: leader with it (node/kafka/cluster_admin.py).
        self.forwarder = forwarder

    async def Metadata(
        self, request: pb.MetadataRequest, context: grpc.aio.ServicerContext
    ) -> pb.MetadataResponse:
        return await self.topics.metadata(request, context)

    async def CreateTopics(
        self, request: pb.CreateTopicsRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreateTopicsResponse:
        return await self.topics.create_topics(request, context)

    async def DeleteTopics(
        self, request: pb.DeleteTopicsRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteTopicsResponse:
        return await self.topics.delete_topics(request, context)

    async def Produce(
        self, request: pb.ProduceRequest, context: grpc.aio.ServicerContext
    ) -> pb.ProduceResponse:
        return await self.data_plane.produce(request, context)

    async def Fetch(
        self, request: pb.FetchRequest, context: grpc.aio.ServicerContext
    ) -> pb.FetchResponse:
        return await self.data_plane.fetch(request, context)

    async def ListOffsets(
        self, request: pb.ListOffsetsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListOffsetsResponse:
        return await self.data_plane.list_offsets(request, context)

    async def FindCoordinator(
        self, request: pb.FindCoordinatorRequest, context: grpc.aio.ServicerContext
    ) -> pb.FindCoordinatorResponse:
        return await self.find_coordinator.find_coordinator(request, context)

    async def OffsetCommit(
        self, request: pb.OffsetCommitRequest, context: grpc.aio.ServicerContext
    ) -> pb.OffsetCommitResponse:
        return await self.groups.offset_commit(request, context)

    async def TxnOffsetCommit(
        self, request: pb.TxnOffsetCommitRequest, context: grpc.aio.ServicerContext
    ) -> pb.TxnOffsetCommitResponse:
        return await self.groups.txn_offset_commit(request, context)

    async def OffsetFetch(
        self, request: pb.OffsetFetchRequest, context: grpc.aio.ServicerContext
    ) -> pb.OffsetFetchResponse:
        return await self.groups.offset_fetch(request, context)

    async def OffsetDelete(
        self, request: pb.OffsetDeleteRequest, context: grpc.aio.ServicerContext
    ) -> pb.OffsetDeleteResponse:
        return await self.groups.offset_delete(request, context)

    async def ListGroups(
        self, request: pb.ListGroupsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListGroupsResponse:
        return self.groups.list_groups(request, context)

    async def DeleteGroups(
        self, request: pb.DeleteGroupsRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteGroupsResponse:
        return await self.groups.delete_groups(request, context)

    async def ConsumerGroupHeartbeat(
        self, request: pb.ConsumerGroupHeartbeatRequest, context: grpc.aio.ServicerContext
    ) -> pb.ConsumerGroupHeartbeatResponse:
        assert self.consumer_groups is not None
        return await self.consumer_groups.heartbeat(request, context)

    async def ConsumerGroupDescribe(
        self, request: pb.ConsumerGroupDescribeRequest, context: grpc.aio.ServicerContext
    ) -> pb.ConsumerGroupDescribeResponse:
        assert self.consumer_groups is not None
        return await self.consumer_groups.describe(request, context)

    async def InitProducerId(
        self, request: pb.InitProducerIdRequest, context: grpc.aio.ServicerContext
    ) -> pb.InitProducerIdResponse:
        return await self.transactions.init_producer_id(request, context)

    async def AddPartitionsToTxn(
        self, request: pb.AddPartitionsToTxnRequest, context: grpc.aio.ServicerContext
    ) -> pb.AddPartitionsToTxnResponse:
        return await self.transactions.add_partitions_to_txn(request, context)

    async def AddOffsetsToTxn(
        self, request: pb.AddOffsetsToTxnRequest, context: grpc.aio.ServicerContext
    ) -> pb.AddOffsetsToTxnResponse:
        """The group's offsets partition joins the transaction. A producer may name a group
        nobody has looked up yet (Kafka asks no FindCoordinator of the group first), so the
        offsets topic is made here if it is not there, as FindCoordinator makes it: without
        it the answer would be COORDINATOR_NOT_AVAILABLE for ever."""
        if not self.find_coordinator.offsets_topic.exists:
            await self.find_coordinator.find_coordinator(
                pb.FindCoordinatorRequest(key=request.group_id, key_type=0), context
            )
        return await self.transactions.add_offsets_to_txn(request, context)

    async def EndTxn(
        self, request: pb.EndTxnRequest, context: grpc.aio.ServicerContext
    ) -> pb.EndTxnResponse:
        return await self.transactions.end_txn(request, context)

    async def ListTransactions(
        self, request: pb.ListTransactionsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListTransactionsResponse:
        return self.txn_admin.list_transactions(request, context)

    async def DescribeTransactions(
        self, request: pb.DescribeTransactionsRequest, context: grpc.aio.ServicerContext
    ) -> pb.DescribeTransactionsResponse:
        return self.txn_admin.describe_transactions(request, context)

    async def DescribeProducers(
        self, request: pb.DescribeProducersRequest, context: grpc.aio.ServicerContext
    ) -> pb.DescribeProducersResponse:
        return self.txn_admin.describe_producers(request, context)

    async def AbortTransaction(
        self, request: pb.AbortTransactionRequest, context: grpc.aio.ServicerContext
    ) -> pb.AbortTransactionResponse:
        return await self.txn_admin.abort_transaction(request, context)

    async def CreateAcls(
        self, request: pb.CreateAclsRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreateAclsResponse:
        return await self.acls.create_acls(request, context)

    async def DescribeAcls(
        self, request: pb.DescribeAclsRequest, context: grpc.aio.ServicerContext
    ) -> pb.DescribeAclsResponse:
        return self.acls.describe_acls(request, context)

    async def DeleteAcls(
        self, request: pb.DeleteAclsRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteAclsResponse:
        return await self.acls.delete_acls(request, context)

    async def AlterUserScramCredentials(
        self, request: pb.AlterUserScramCredentialsRequest, context: grpc.aio.ServicerContext
    ) -> pb.AlterUserScramCredentialsResponse:
        return await self.scram_credentials.alter(request, context)

    async def DescribeUserScramCredentials(
        self, request: pb.DescribeUserScramCredentialsRequest,
        context: grpc.aio.ServicerContext,
    ) -> pb.DescribeUserScramCredentialsResponse:
        return self.scram_credentials.describe(request, context)

    async def CreatePartitions(
        self, request: pb.CreatePartitionsRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreatePartitionsResponse:
        return await self.admin.create_partitions(request, context)

    async def DescribeConfigs(
        self, request: pb.DescribeConfigsRequest, context: grpc.aio.ServicerContext
    ) -> pb.DescribeConfigsResponse:
        return self.admin.describe_configs(request, context)

    async def IncrementalAlterConfigs(
        self, request: pb.IncrementalAlterConfigsRequest, context: grpc.aio.ServicerContext
    ) -> pb.IncrementalAlterConfigsResponse:
        return await self.admin.incremental_alter_configs(request, context)

    async def AlterPartitionReassignments(
        self, request: pb.AlterPartitionReassignmentsRequest, context: grpc.aio.ServicerContext
    ) -> pb.AlterPartitionReassignmentsResponse:
        return await self.reassignment.alter(request, context)

    async def ListPartitionReassignments(
        self, request: pb.ListPartitionReassignmentsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListPartitionReassignmentsResponse:
        return await self.reassignment.list(request, context)

    async def DecommissionNode(
        self, request: pb.DecommissionNodeRequest, context: grpc.aio.ServicerContext
    ) -> pb.DecommissionNodeResponse:
        return await self.decommission.decommission_node(request, context)

    async def DeleteRecords(
        self, request: pb.DeleteRecordsRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteRecordsResponse:
        return await self.records.delete_records(request, context)

    async def DescribeLogDirs(
        self, request: pb.DescribeLogDirsRequest, context: grpc.aio.ServicerContext
    ) -> pb.DescribeLogDirsResponse:
        return await self.records.describe_log_dirs(request, context)

    async def ElectLeaders(
        self, request: pb.ElectLeadersRequest, context: grpc.aio.ServicerContext
    ) -> pb.ElectLeadersResponse:
        return await self.elections.elect_leaders(request, context)

    async def AlterReplicaLogDirs(
        self, request: pb.AlterReplicaLogDirsRequest, context: grpc.aio.ServicerContext
    ) -> pb.AlterReplicaLogDirsResponse:
        return await self.records.alter_replica_log_dirs(request, context)

    async def DescribeQuorum(
        self, request: pb.DescribeQuorumRequest, context: grpc.aio.ServicerContext
    ) -> pb.DescribeQuorumResponse:
        return await self.quorum.describe_quorum(request, context)
