"""The authorization matrix: every RPC of every service a node serves, generated from the
services' descriptors, called on each listener (client and node-to-node) by each kind of caller,
and answered as docs/security.md's authorization table says.

The callers: anonymous (TLS, no certificate), a certificate of a foreign CA (named CN=client,
the administrator's name), a principal with no ACL, a principal with exactly the ACLs the
table's row names (for a node-only RPC: ALL on the cluster, which does not make it a node), a
node (its own certificate; the nodes are super users of a `LocalCluster(tls=True)`), and a
super user (the cluster's administrator certificate). Each request is small and harmless: it
names the topic, group and transactional id ``granted`` (ACLs are PREFIXED ``granted``), and
whatever it would destroy does not exist (``granted-absent``) or is only validated.

An answer is classified as allowed, one of the authorization error codes (29/30/31/53) found
in the response, ``omitted`` (a listing that leaves the resource out), the gRPC status
PERMISSION_DENIED or UNIMPLEMENTED, or ``handshake`` (UNAVAILABLE: the TLS handshake failed).
An RPC without a row in the table, or a row without an RPC, fails the test.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.descriptor import MethodDescriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass
from grpc_health.v1 import health_pb2
from grpc_reflection.v1alpha import reflection_pb2
from offsets_helpers import committed, found

from tidelog import Client
from tidelog.acl import (
    CLUSTER_NAME,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
)
from tidelog.certificates import CertificateAuthority
from tidelog.testing import LocalCluster, Raw, make_batch, wait_for
from tidelog.transport import Security
from tidelog.v1 import raft_pb2, tidelog_pb2
from tidelog.v1 import tidelog_pb2 as pb

pytestmark = pytest.mark.timeout(300)

TABLE = Path(__file__).resolve().parents[2] / "docs" / "security.md"
GRANTED = "granted"
ABSENT = "granted-absent"
#: What the TLS handshake's failure looks like to a gRPC client.
HANDSHAKE = "handshake"
ALLOWED = "allowed"
OMITTED = "omitted"
AUTHORIZATION_CODES = frozenset({29, 30, 31, 53})
CALL_TIMEOUT_S = 15.0

CALLERS = ("anonymous", "foreign", "nobody", "exact", "node", "super")
LISTENERS = ("client", "internal")
#: The listener that serves each service; on the other one it answers UNIMPLEMENTED.
HOME = {
    "tidelog.v1.Tidelog": "client",
    "tidelog.v1.RaftTransport": "internal",
    "grpc.health.v1.Health": "client",
    "grpc.reflection.v1alpha.ServerReflection": "client",
    "grpc.reflection.v1.ServerReflection": "client",
}

@dataclass(frozen=True)
class Rpc:
    service: str
    method: MethodDescriptor

    @property
    def path(self) -> str:
        return f"/{self.service}/{self.method.name}"

    @property
    def name(self) -> str:
        return f"{self.service.removeprefix('grpc.')}.{self.method.name}"


def served_rpcs() -> list[Rpc]:
    """Every RPC of every service a node registers: the generated descriptors, and
    reflection v1, which the node serves from v1alpha's descriptor under the new name."""
    services = [
        tidelog_pb2.DESCRIPTOR.services_by_name["Tidelog"],
        *raft_pb2.DESCRIPTOR.services_by_name.values(),
        *health_pb2.DESCRIPTOR.services_by_name.values(),
        *reflection_pb2.DESCRIPTOR.services_by_name.values(),
    ]
    rpcs = [Rpc(s.full_name, m) for s in services for m in s.methods]
    v1alpha = reflection_pb2.DESCRIPTOR.services_by_name["ServerReflection"]
    rpcs += [Rpc("grpc.reflection.v1.ServerReflection", m) for m in v1alpha.methods]
    return rpcs


@dataclass(frozen=True)
class Row:
    service: str
    rpc: str
    #: ("node",), ("open",), ("unserved",), or (operation, resource type) pairs.
    needs: tuple[Any, ...]
    refusals: tuple[str, ...]


def table_rows() -> dict[tuple[str, str], Row]:
    """The rows of docs/security.md's authorization table, by (service, RPC)."""
    lines = TABLE.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if "authorization-table" in line)
    header = [cell.strip() for cell in lines[start + 1].strip("|").split("|")]
    assert header[:4] == ["Service", "RPC", "Needs", "Refused with"], header
    rows: dict[tuple[str, str], Row] = {}
    for line in lines[start + 3:]:
        if not line.startswith("|"):
            break
        service, rpc, needs_text, refused_text = (
            cell.strip() for cell in line.strip().strip("|").split("|")[:4])
        assert (service, rpc) not in rows, f"two rows for {service} {rpc}"
        items = [item.strip() for item in needs_text.split("+")]
        if items in (["node"], ["open"], ["unserved"]):
            needs: tuple[Any, ...] = (items[0],)
        else:
            needs = tuple(
                (Operation[op], ResourceType[kind])
                for op, kind in (re.fullmatch(r"(\w+) (\w+)", i).groups()  # type: ignore[union-attr]
                                 for i in items)
            )
        refusals = tuple(item.strip() for item in refused_text.split("+"))
        assert len(refusals) == len(needs), f"{rpc}: one refusal per needed item"
        rows[service, rpc] = Row(service, rpc, needs, refusals)
    return rows


RPCS = served_rpcs()
ROWS = table_rows()


def expected(rpc: Rpc, listener: str, caller: str) -> str:
    """The answer the table (and the listeners' rules) give this cell."""
    row = ROWS[rpc.service, rpc.method.name]
    if caller in ("anonymous", "foreign"):
        return HANDSHAKE  # client certificates are required, and always between nodes
    if listener != HOME[rpc.service] or row.needs == ("unserved",):
        return "UNIMPLEMENTED"
    if row.needs == ("open",):
        return ALLOWED
    if row.needs == ("node",):
        return ALLOWED if caller == "node" else "PERMISSION_DENIED"
    if caller in ("exact", "node", "super"):  # LocalCluster(tls=True)'s nodes are super users
        return ALLOWED
    return row.refusals[0]


def cells() -> list[Any]:
    return list(_cells())


def _cells() -> Iterator[Any]:
    for rpc in RPCS:
        if (rpc.service, rpc.method.name) not in ROWS:
            continue  # test_every_rpc_has_one_row fails instead
        for listener in LISTENERS:
            for caller in CALLERS:
                yield pytest.param(rpc, listener, caller, id=f"{rpc.name}-{listener}-{caller}")


# ---- the requests ---------------------------------------------------------------------------


def _requests() -> dict[str, Callable[[], Message]]:
    """One small request per RPC that names the ``granted`` resources; what would change
    something names what does not exist or only validates."""
    topic_partition = {"name": GRANTED, "partitions": [0]}
    return {
        "Metadata": lambda: pb.MetadataRequest(topics=[GRANTED]),
        "CreateTopics": lambda: pb.CreateTopicsRequest(
            topics=[pb.CreatableTopic(name="granted-new", num_partitions=1,
                                      replication_factor=1)],
            validate_only=True, timeout_ms=5000),
        "DeleteTopics": lambda: pb.DeleteTopicsRequest(topic_names=[ABSENT], timeout_ms=5000),
        "Produce": lambda: pb.ProduceRequest(acks=1, timeout_ms=5000, topics=[
            pb.TopicProduceData(name=GRANTED, partitions=[pb.PartitionProduceData(
                partition=0, records=make_batch([b"matrix"]))])]),
        "Fetch": lambda: pb.FetchRequest(max_wait_ms=0, max_bytes=1024, topics=[
            pb.FetchTopic(name=GRANTED, partitions=[pb.FetchPartition(
                partition=0, fetch_offset=0, partition_max_bytes=1024)])]),
        "ListOffsets": lambda: pb.ListOffsetsRequest(topics=[pb.ListOffsetsTopic(
            name=GRANTED, partitions=[pb.ListOffsetsPartition(partition=0, timestamp=-1)])]),
        "FindCoordinator": lambda: pb.FindCoordinatorRequest(key=GRANTED, key_type=0),
        "OffsetCommit": lambda: pb.OffsetCommitRequest(group_id=GRANTED, topics=[
            pb.OffsetCommitTopic(name=GRANTED, partitions=[pb.OffsetCommitPartition(
                partition=0, committed_offset=0)])]),
        "OffsetFetch": lambda: pb.OffsetFetchRequest(
            group_id=GRANTED, topics=[pb.OffsetFetchTopic(**topic_partition)]),
        "OffsetDelete": lambda: pb.OffsetDeleteRequest(
            group_id=ABSENT, topics=[pb.OffsetFetchTopic(**topic_partition)]),
        "ListGroups": lambda: pb.ListGroupsRequest(),
        "DeleteGroups": lambda: pb.DeleteGroupsRequest(group_ids=[ABSENT]),
        "ConsumerGroupHeartbeat": lambda: pb.ConsumerGroupHeartbeatRequest(
            group_id=ABSENT, member_id="matrix", member_epoch=-1),
        "ConsumerGroupDescribe": lambda: pb.ConsumerGroupDescribeRequest(group_ids=[GRANTED]),
        "InitProducerId": lambda: pb.InitProducerIdRequest(
            transactional_id=GRANTED, transaction_timeout_ms=60_000),
        "AddPartitionsToTxn": lambda: pb.AddPartitionsToTxnRequest(
            transactional_id=GRANTED, producer_id=0, producer_epoch=0,
            topics=[pb.AddPartitionsToTxnTopic(**topic_partition)]),
        "AddOffsetsToTxn": lambda: pb.AddOffsetsToTxnRequest(
            transactional_id=GRANTED, producer_id=0, producer_epoch=0, group_id=GRANTED),
        "TxnOffsetCommit": lambda: pb.TxnOffsetCommitRequest(
            transactional_id=GRANTED, group_id=GRANTED, producer_id=0, producer_epoch=0,
            topics=[pb.OffsetCommitTopic(name=GRANTED, partitions=[
                pb.OffsetCommitPartition(partition=0, committed_offset=0)])]),
        "EndTxn": lambda: pb.EndTxnRequest(
            transactional_id=GRANTED, producer_id=0, producer_epoch=0, committed=False),
        "CreateAcls": lambda: pb.CreateAclsRequest(creations=[pb.AclCreation(
            resource_type=ResourceType.TOPIC, resource_name="matrix-unrelated",
            resource_pattern_type=PatternType.LITERAL, principal="User:CN=matrix-unrelated",
            host="*", operation=Operation.READ, permission_type=Permission.ALLOW)]),
        "DescribeAcls": lambda: pb.DescribeAclsRequest(),
        "DeleteAcls": lambda: pb.DeleteAclsRequest(filters=[pb.AclFilter(
            resource_type_filter=ResourceType.TOPIC, resource_name_filter=ABSENT,
            pattern_type_filter=PatternType.LITERAL, operation=Operation.ANY,
            permission_type=Permission.ANY)]),
        "AlterUserScramCredentials": lambda: pb.AlterUserScramCredentialsRequest(
            deletions=[pb.ScramCredentialDeletion(name=ABSENT, mechanism=1)]),
        "DescribeUserScramCredentials": lambda: pb.DescribeUserScramCredentialsRequest(
            users=[ABSENT]),
        "CreatePartitions": lambda: pb.CreatePartitionsRequest(
            topics=[pb.CreatePartitionsTopic(name=GRANTED, count=2)], validate_only=True,
            timeout_ms=5000),
        "DescribeConfigs": lambda: pb.DescribeConfigsRequest(resources=[
            pb.DescribeConfigsResource(resource_type=2, resource_name=GRANTED)]),
        "IncrementalAlterConfigs": lambda: pb.IncrementalAlterConfigsRequest(
            resources=[pb.AlterConfigsResource(resource_type=2, resource_name=GRANTED, configs=[
                pb.AlterableConfig(name="retention.ms", config_operation=0, value="3600000")])],
            validate_only=True),
        "AlterPartitionReassignments": lambda: pb.AlterPartitionReassignmentsRequest(
            timeout_ms=5000, topics=[pb.ReassignableTopic(name=ABSENT, partitions=[
                pb.ReassignablePartition(partition_index=0, replicas=[1])])]),
        "ListPartitionReassignments": lambda: pb.ListPartitionReassignmentsRequest(
            timeout_ms=5000),
        "DecommissionNode": lambda: pb.DecommissionNodeRequest(
            node_id=99, action=1, timeout_ms=5000),
        "ListTransactions": lambda: pb.ListTransactionsRequest(),
        "DescribeTransactions": lambda: pb.DescribeTransactionsRequest(
            transactional_ids=[GRANTED]),
        "DescribeProducers": lambda: pb.DescribeProducersRequest(
            topics=[pb.TopicPartitions(topic=GRANTED, partitions=[0])]),
        "AbortTransaction": lambda: pb.AbortTransactionRequest(
            topic=GRANTED, partition=0, producer_id=987_654, producer_epoch=0),
        "DeleteRecords": lambda: pb.DeleteRecordsRequest(topics=[pb.DeleteRecordsTopic(
            name=GRANTED, partitions=[pb.DeleteRecordsPartition(partition=0, offset=0)])]),
        "DescribeLogDirs": lambda: pb.DescribeLogDirsRequest(
            topics=[pb.TopicPartitions(topic=GRANTED)]),
        "ElectLeaders": lambda: pb.ElectLeadersRequest(
            election_type=0, timeout_ms=1000,
            topic_partitions=[pb.TopicPartitions(topic=GRANTED, partitions=[0])]),
        "AlterReplicaLogDirs": lambda: pb.AlterReplicaLogDirsRequest(dirs=[pb.AlterReplicaLogDir(
            path="/elsewhere", topics=[pb.TopicPartitions(topic=GRANTED, partitions=[0])])]),
        "DescribeQuorum": lambda: pb.DescribeQuorumRequest(),
        # The node-to-node service: what each call asks is refused or harmless.
        "RegisterNode": lambda: raft_pb2.RegisterNodeRequest(
            node_id=99, incarnation="not-an-incarnation"),
        "NodeHeartbeat": lambda: raft_pb2.NodeHeartbeatRequest(node_id=99, epoch=0),
        "ServerReflectionInfo": lambda: reflection_pb2.ServerReflectionRequest(
            list_services=""),
        "Check": lambda: health_pb2.HealthCheckRequest(),
        "Watch": lambda: health_pb2.HealthCheckRequest(),
    }


REQUESTS = _requests()


def request_of(rpc: Rpc) -> Message:
    """The RPC's request: its own, else an empty one (the node-to-node calls that need no
    field to be harmless)."""
    build = REQUESTS.get(rpc.method.name)
    return build() if build is not None else GetMessageClass(rpc.method.input_type)()


def call(channel: grpc.Channel, rpc: Rpc) -> Message:
    """One call of `rpc` over `channel`, whatever its kind; of a streamed answer, the first
    message (the stream is then cancelled). A client stream sends nothing."""
    request = request_of(rpc)
    method = rpc.method
    serialize = type(request).SerializeToString
    deserialize = GetMessageClass(method.output_type).FromString
    if method.client_streaming and method.server_streaming:
        answers = channel.stream_stream(rpc.path, serialize, deserialize)(
            iter([request]), timeout=CALL_TIMEOUT_S)
    elif method.client_streaming:
        return channel.stream_unary(rpc.path, serialize, deserialize)(  # type: ignore[no-any-return]
            iter(()), timeout=CALL_TIMEOUT_S)
    elif method.server_streaming:
        answers = channel.unary_stream(rpc.path, serialize, deserialize)(
            request, timeout=CALL_TIMEOUT_S)
    else:
        return channel.unary_unary(rpc.path, serialize, deserialize)(  # type: ignore[no-any-return]
            request, timeout=CALL_TIMEOUT_S)
    try:
        return next(answers)  # type: ignore[no-any-return]
    finally:
        answers.cancel()


def error_codes(message: Message) -> set[int]:
    """Every ``error_code`` anywhere in `message` (map fields included: their values)."""
    codes: set[int] = set()
    for field, value in message.ListFields():
        if field.name == "error_code":
            codes.add(value)
        elif field.message_type is not None:
            if field.message_type.GetOptions().map_entry:
                entry = field.message_type.fields_by_name["value"]
                items = list(value.values()) if entry.message_type is not None else []
            else:
                items = value if field.is_repeated else [value]
            for item in items:
                codes |= error_codes(item)
    return codes


def classify(rpc: Rpc, channel: grpc.Channel) -> str:
    try:
        answer = call(channel, rpc)
    except grpc.RpcError as exc:
        code = exc.code()
        if code == grpc.StatusCode.UNAVAILABLE:
            return HANDSHAKE
        if code in (grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNIMPLEMENTED):
            return str(code.name)
        return ALLOWED  # refused for another reason than who calls (a bad field, a timeout)
    refused = error_codes(answer) & AUTHORIZATION_CODES
    if refused:
        return str(min(refused))
    listed = LISTINGS.get(rpc.method.name)
    if listed is not None and GRANTED not in listed(answer):
        return OMITTED
    return ALLOWED


#: The names a listing answers, for the RPCs that leave out what the caller may not see.
LISTINGS: dict[str, Callable[[Any], set[str]]] = {
    "ListGroups": lambda answer: {g.group_id for g in answer.groups},
    "ListTransactions": lambda answer: {t.transactional_id for t in answer.transactions},
}


# ---- the cluster ----------------------------------------------------------------------------


def exact_principal(rpc: Rpc) -> str:
    return f"exact-{rpc.name.lower().replace('.', '-')}"


def exact_acls(rpc: Rpc) -> list[AclBinding]:
    """What the row says the RPC needs, for its own principal; a node-only RPC's gets ALL on
    the cluster, which does not make it a node."""
    row = ROWS[rpc.service, rpc.method.name]
    principal = f"User:CN={exact_principal(rpc)}"
    if row.needs == ("node",):
        needs: tuple[Any, ...] = ((Operation.ALL, ResourceType.CLUSTER),)
    elif row.needs in (("open",), ("unserved",)):
        return []
    else:
        needs = row.needs
    return [
        AclBinding(
            ResourcePattern(kind, CLUSTER_NAME)
            if kind == ResourceType.CLUSTER
            else ResourcePattern(kind, GRANTED, PatternType.PREFIXED),
            AccessControlEntry(principal, operation, Permission.ALLOW),
        )
        for operation, kind in needs
    ]


@dataclass
class Matrix:
    cluster: LocalCluster
    foreign: dict[str, str]
    channels: dict[tuple[str, str], grpc.Channel]

    def options(self, caller: str, rpc: Rpc) -> dict[str, str]:
        if caller == "anonymous":
            return {"security_protocol": "SSL",
                    "ssl_cafile": self.cluster.client_options["ssl_cafile"]}
        if caller == "foreign":
            return self.foreign
        name = {"nobody": "nobody", "node": "node-1", "super": "client",
                "exact": exact_principal(rpc)}[caller]
        return self.cluster.client_options_as(name)

    def channel(self, caller: str, rpc: Rpc, listener: str) -> grpc.Channel:
        options = self.options(caller, rpc)
        key = (options.get("ssl_certfile", caller), listener)
        if key not in self.channels:
            address = (self.cluster.address_of(1) if listener == "client"
                       else self.cluster.internal_address_of(1))
            self.channels[key] = Security(**options).channel(address)
        return self.channels[key]


@pytest.fixture(scope="module")
def matrix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Matrix]:
    """One node (the controller, every partition's leader and every coordinator, so that each
    request is answered where it is sent), the ``granted`` topic, group (with a committed
    offset) and transactional id's coordinator, and each RPC's exact principal's ACLs."""
    foreign_ca = CertificateAuthority(tmp_path_factory.mktemp("foreign-ca"))
    with LocalCluster(1, tls=True, offsets_topic_num_partitions=1,
                      transaction_state_log_num_partitions=1) as cluster, \
            Raw(cluster) as admin, Client(cluster.bootstrap, **cluster.client_options) as client:
        admin.create_topic(GRANTED, 1, 1)
        admin.produce_acknowledged(GRANTED, 0, [[b"one"]])
        found(admin, 1, GRANTED)
        committed(admin, 1, GRANTED, {(GRANTED, 0): (1, -1, "")})
        wait_for(lambda: admin.stub(1).FindCoordinator(pb.FindCoordinatorRequest(
            key=GRANTED, key_type=1), timeout=10).error_code == 0, 60,
            "a coordinator for the transactional id")
        wait_for(lambda: admin.stub(1).InitProducerId(pb.InitProducerIdRequest(
            transactional_id=GRANTED, transaction_timeout_ms=60_000), timeout=10
        ).error_code == 0, 60, "the transactional id, known to its coordinator")
        bindings = [b for rpc in RPCS if (rpc.service, rpc.method.name) in ROWS
                    for b in exact_acls(rpc)]
        client.admin.create_acls(bindings)
        wait_for(lambda: len(client.admin.describe_acls(AclBindingFilter())) >= len(bindings), 30,
                 "the ACLs applied")
        stranger = foreign_ca.issue("client", "client")
        foreign = {**cluster.client_options, "ssl_certfile": str(stranger.certfile),
                   "ssl_keyfile": str(stranger.keyfile)}
        state = Matrix(cluster, foreign, {})
        try:
            yield state
        finally:
            for channel in state.channels.values():
                channel.close()


# ---- the tests ------------------------------------------------------------------------------


def test_every_rpc_has_one_row_and_every_row_an_rpc() -> None:
    served = {(rpc.service, rpc.method.name) for rpc in RPCS}
    assert not served - set(ROWS), f"RPCs without a row in {TABLE.name}: {served - set(ROWS)}"
    stale = set(ROWS) - served
    assert not stale, f"rows of {TABLE.name} naming no RPC: {stale}"
    assert {rpc.service for rpc in RPCS} <= set(HOME)


@pytest.mark.parametrize(("rpc", "listener", "caller"), cells())
def test_the_answer_is_the_tables(matrix: Matrix, rpc: Rpc, listener: str, caller: str) -> None:
    if listener != HOME[rpc.service]:
        # Served on its own listener first, so that a listener which served another's
        # method once and kept serving it is caught.
        classify(rpc, matrix.channel("node", rpc, HOME[rpc.service]))
    got = classify(rpc, matrix.channel(caller, rpc, listener))
    assert got == expected(rpc, listener, caller), (
        f"{rpc.path} on the {listener} listener as {caller}")
