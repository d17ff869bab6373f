"""Who may speak as a node, on real node processes: each listener serves its own services only,
the node-to-node listener answers node principals only, and a principal comes from the
connection (or, for a request forwarded between nodes, from an envelope only a node may send),
never from anything a client writes into its request.

Every method of every service is taken from the generated descriptors, so a new RPC is covered
without a line here.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from offsets_helpers import RETRIABLE, codes, commit_request, found, other_than
from waiting_helpers import poll_records

from tidelog import Client, TopicPartition, errors
from tidelog.acl import (
    AccessControlEntry,
    AclBinding,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
)
from tidelog.certificates import CertificateAuthority
from tidelog.testing import LocalCluster, Raw, wait_for
from tidelog.transport import Security
from tidelog.v1 import raft_pb2, tidelog_pb2, tidelog_pb2_grpc
from tidelog.v1 import tidelog_pb2 as pb

pytestmark = pytest.mark.timeout(240)

_CALL_S = 10.0
TOPIC_DENIED = errors.TopicAuthorizationFailedError.code
CLIENT_SERVICE = tidelog_pb2.DESCRIPTOR.services_by_name["Tidelog"]
NODE_SERVICE = raft_pb2.DESCRIPTOR.services_by_name["RaftTransport"]


def grant(
    principal: str, operation: Operation, kind: ResourceType, name: str,
    pattern: PatternType = PatternType.LITERAL,
) -> AclBinding:
    return AclBinding(ResourcePattern(kind, name, pattern),
                      AccessControlEntry(principal, operation, Permission.ALLOW))


def status_of(channel: grpc.Channel, service: str, method: object) -> grpc.StatusCode:
    """The status of one call of `method` with an empty request (valid protobuf for every
    message), or an empty stream of them."""
    path = f"/{service}/{method.name}"  # type: ignore[attr-defined]
    try:
        if method.client_streaming:  # type: ignore[attr-defined]
            channel.stream_unary(path)(iter(()), timeout=_CALL_S)
        else:
            channel.unary_unary(path)(b"", timeout=_CALL_S)
    except grpc.RpcError as exc:
        return exc.code()  # type: ignore[no-any-return]
    return grpc.StatusCode.OK


def as_user(cluster: LocalCluster, name: str) -> Security:
    """A client of `cluster` with a certificate of its CA for ``CN=name``."""
    files = CertificateAuthority(cluster.tls_dir).issue(name, name)
    return Security("SSL", str(files.cafile), str(files.certfile), str(files.keyfile))


def as_node(cluster: LocalCluster) -> Security:
    """The channels node 1 itself would open (its certificate, a node principal's)."""
    if not cluster.tls:
        return Security()
    return Security("SSL", str(cluster.tls_dir / "ca.pem"),
                    str(cluster.tls_dir / "node-1.pem"), str(cluster.tls_dir / "node-1-key.pem"))


@pytest.fixture(scope="module")
def tls_node() -> Iterator[LocalCluster]:
    """One TLS node where a resource no ACL mentions is open to all (the setting under which
    the header that once named a forwarded request's principal let anyone pass for a node)."""
    with LocalCluster(1, tls=True, allow_everyone_if_no_acl_found="true") as cluster:
        yield cluster


@pytest.mark.parametrize("tls", [False, True], ids=["plaintext", "tls"])
def test_each_listener_serves_its_own_services_only(
    tls: bool, tls_node: LocalCluster
) -> None:
    """Every method of the client service and of the node-to-node service, on both listeners:
    the other listener's answer UNIMPLEMENTED, before and after their own listener served them
    (handlers cached by one server once leaked into the other)."""
    if tls:
        cluster, plaintext = tls_node, None
    else:
        cluster = plaintext = LocalCluster(1)
        plaintext.__enter__()
    try:
        security = as_node(cluster)
        with security.channel(cluster.address_of(1)) as client_port, \
                security.channel(cluster.internal_address_of(1)) as node_port:
            listeners = {CLIENT_SERVICE.full_name: (client_port, node_port),
                         NODE_SERVICE.full_name: (node_port, client_port)}
            for service in (CLIENT_SERVICE, NODE_SERVICE):
                own, other = listeners[service.full_name]
                for method in service.methods:
                    where = f"{service.name}/{method.name}"
                    assert status_of(other, service.full_name, method) is \
                        grpc.StatusCode.UNIMPLEMENTED, f"{where} served on the wrong listener"
                    assert status_of(own, service.full_name, method) is not \
                        grpc.StatusCode.UNIMPLEMENTED, f"{where} not served on its listener"
                    assert status_of(other, service.full_name, method) is \
                        grpc.StatusCode.UNIMPLEMENTED, \
                        f"{where} served on the wrong listener once its own had served it"
    finally:
        if plaintext is not None:
            plaintext.__exit__(None, None, None)


def test_a_client_cannot_claim_a_nodes_principal(tls_node: LocalCluster) -> None:
    """Bob holds no ACL; topic alice-only's ACL names alice. The headers that once carried a
    forwarded request's principal, set by bob to name node 1 (a super user), change nothing:
    bob reads nothing of the topic, and does not even see it."""
    with Raw(tls_node) as admin, \
            Client(tls_node.bootstrap, **tls_node.client_options) as admin_client:
        admin.create_topic("alice-only", 1, 1)
        admin.produce_acknowledged("alice-only", 0, [[b"secret"]])
        admin_client.admin.create_acls([grant("User:CN=alice", Operation.READ, ResourceType.TOPIC,
                                        "alice-only")])
    bob = as_user(tls_node, "bob")
    forged = (("tidelog-forwarded-by", "1"), ("tidelog-forwarded-principal", "User:CN=node-1"))
    request = pb.FetchRequest(max_wait_ms=0, topics=[pb.FetchTopic(
        name="alice-only", partitions=[pb.FetchPartition(fetch_offset=0)])])
    with bob.channel(tls_node.address_of(1)) as channel:
        stub = tidelog_pb2_grpc.TidelogStub(channel)
        wait_for(lambda: stub.Fetch(request, timeout=_CALL_S).topics[0].partitions[0]
                 .error_code == TOPIC_DENIED, 30, "the ACL to apply")
        answer = stub.Fetch(request, timeout=_CALL_S, metadata=forged)
        part = answer.topics[0].partitions[0]
        assert (part.error_code, part.records) == (TOPIC_DENIED, b""), part
        assert "User:CN=bob is not authorized" in part.error_message
        seen = stub.Metadata(pb.MetadataRequest(), timeout=_CALL_S, metadata=forged)
        assert "alice-only" not in {t.name for t in seen.topics}


def test_a_client_certificate_of_the_nodes_ca_is_not_a_node(tls_node: LocalCluster) -> None:
    """Alice's certificate comes from the CA that signed the nodes': the node-to-node listener
    accepts the handshake, and refuses every call (PERMISSION_DENIED naming her), among them
    the metadata pull, a registration, transaction markers, the Raft stream and an envelope
    asserting the administrator's principal. The node's own certificate is answered."""
    alice = as_user(tls_node, "alice")
    envelope = raft_pb2.ForwardRequest(
        method="DeleteTopics", principal="User:CN=client",
        request=pb.DeleteTopicsRequest(topic_names=["alice-only"]).SerializeToString())
    with alice.channel(tls_node.internal_address_of(1)) as channel:
        for method in NODE_SERVICE.methods:
            path = f"/{NODE_SERVICE.full_name}/{method.name}"
            with pytest.raises(grpc.RpcError) as refused:
                if method.client_streaming:
                    channel.stream_unary(path)(iter([b""]), timeout=_CALL_S)
                elif method.name == "Forward":
                    channel.unary_unary(path)(envelope.SerializeToString(), timeout=_CALL_S)
                else:
                    channel.unary_unary(path)(b"", timeout=_CALL_S)
            assert refused.value.code() is grpc.StatusCode.PERMISSION_DENIED, method.name
            assert "User:CN=alice is not a node principal" in refused.value.details()
    pull = raft_pb2.FetchMetadataRequest(from_offset=0, node_id=1)
    with as_node(tls_node).channel(tls_node.internal_address_of(1)) as channel:
        answer = channel.unary_unary(
            f"/{NODE_SERVICE.full_name}/FetchMetadata",
            request_serializer=raft_pb2.FetchMetadataRequest.SerializeToString,
            response_deserializer=raft_pb2.FetchMetadataResponse.FromString,
        )(pull, timeout=_CALL_S)
        assert answer.error_code == 0 and answer.records


def test_forwarded_requests_are_authorized_as_their_client() -> None:
    """Deny by default; alice may create and delete topics named alice-*, read topic alice-a
    and group alice-g. Her CreateTopics and DeleteTopics sent to a node that is not the
    controller, and her OffsetCommit sent to one that does not coordinate the group, are
    answered by the controller and the coordinator as hers: the topic she may not touch and
    the partition she may not read are refused naming her (as the forwarding node, a super
    user, everything would pass)."""
    with LocalCluster(3, tls=True, super_users="User:CN=client", offsets_topic_num_partitions=3,
                      allow_everyone_if_no_acl_found="false") as cluster, \
            Raw(cluster) as admin, \
            Client(cluster.bootstrap, **cluster.client_options) as admin_client:
        for topic in ("alice-a", "other"):
            admin.create_topic(topic, 1, 3)
        admin_client.admin.create_acls([
            grant("User:CN=alice", Operation.CREATE, ResourceType.TOPIC, "alice-",
                  PatternType.PREFIXED),
            grant("User:CN=alice", Operation.DELETE, ResourceType.TOPIC, "alice-",
                  PatternType.PREFIXED),
            grant("User:CN=alice", Operation.READ, ResourceType.TOPIC, "alice-a"),
            grant("User:CN=alice", Operation.READ, ResourceType.GROUP, "alice-g"),
        ])
        alice = as_user(cluster, "alice")

        def controller() -> int | None:
            answer = admin.stub(1).Metadata(pb.MetadataRequest(), timeout=_CALL_S)
            return answer.controller_id if answer.controller_id > 0 else None

        elsewhere = other_than(admin, wait_for(controller, 30, "a controller"))
        with alice.channel(cluster.address_of(elsewhere)) as channel:
            stub = tidelog_pb2_grpc.TidelogStub(channel)

            def created() -> dict[str, int] | None:
                answer = stub.CreateTopics(pb.CreateTopicsRequest(timeout_ms=15_000, topics=[
                    pb.CreatableTopic(name=name, num_partitions=1, replication_factor=3)
                    for name in ("alice-new", "bob-new")]), timeout=30)
                got = {t.name: t.error_code for t in answer.topics}
                return None if errors.NotControllerError.code in got.values() else got

            made = wait_for(created, 60, "alice's CreateTopics answered by a controller")
            assert made == {"alice-new": 0, "bob-new": TOPIC_DENIED}
            admin.wait_leaders("alice-new", 1)
            gone = stub.DeleteTopics(pb.DeleteTopicsRequest(
                topic_names=["alice-new", "other"], timeout_ms=15_000), timeout=30)
            assert {t.name: t.error_code for t in gone.topics} == {
                "alice-new": 0, "other": TOPIC_DENIED}

            coordinator = found(admin, 1, "alice-g").node_id
        with alice.channel(cluster.address_of(other_than(admin, coordinator))) as channel:
            request = commit_request("alice-g", {("alice-a", 0): (0, -1, ""),
                                                 ("other", 0): (0, -1, "")})
            stub = tidelog_pb2_grpc.TidelogStub(channel)

            def settled() -> dict[tuple[str, int], int] | None:
                got = codes(stub.OffsetCommit(request, timeout=30))
                return None if set(got.values()) & RETRIABLE else got

            assert wait_for(settled, 60, "a settled commit") == {
                ("alice-a", 0): 0, ("other", 0): TOPIC_DENIED}


def test_nodes_and_clients_from_different_cas() -> None:
    """Node certificates come from one CA, client certificates from another (``client_ca``):
    each node verifies its peers with the nodes' CA (internal.ssl.cafile) and its clients with
    the clients' (ssl.cafile), and a client trusts the nodes' CA for the servers it dials. The
    cluster forms and serves a client of the clients' CA holding only its ACLs. On the
    node-to-node listener a certificate of the clients' CA is refused at the handshake, even
    one naming a node, and one of the nodes' CA that names no node principal is refused every
    call."""
    with LocalCluster(3, tls=True, client_ca=True) as cluster, \
            Client(cluster.bootstrap, **cluster.client_options) as admin:
        admin.create_topic("split-cas", partitions=1, replication_factor=3)
        admin.admin.create_acls([
            grant("User:CN=alice", operation, ResourceType.TOPIC, "split-cas")
            for operation in (Operation.WRITE, Operation.READ)])
        alice = cluster.client_options_as("alice")
        assert alice["ssl_cafile"] == str(cluster.tls_dir / "ca.pem")
        assert Path(alice["ssl_certfile"]).parent == cluster.tls_dir / "clients"
        tp = TopicPartition("split-cas", 0)
        with Client(cluster.bootstrap, **alice) as client:
            producer = client.producer(linger_ms=0)
            sent = wait_for(lambda: producer.send(tp.topic, b"across CAs", partition=0)
                            .result(timeout=30), 60, "alice's ACL to apply")
            producer.close()
            consumer = client.consumer()
            consumer.assign([tp])
            consumer.seek(tp, sent.offset)
            got = poll_records(consumer, 1, timeout=60)
            consumer.close()
            assert [r.value for r in got] == [b"across CAs"]

        nodes_ca = str(cluster.tls_dir / "ca.pem")
        clients_ca = CertificateAuthority(cluster.tls_dir / "clients")
        strangers = {
            "a client of the clients' CA": clients_ca.issue("alice-internal", "alice"),
            "a node's name from the clients' CA": clients_ca.issue("node-2-forged", "node-2",
                                                                   node=True),
        }
        pull = f"/{NODE_SERVICE.full_name}/FetchMetadata"
        request = raft_pb2.FetchMetadataRequest(from_offset=0, node_id=2).SerializeToString()
        for who, files in strangers.items():
            security = Security("SSL", nodes_ca, str(files.certfile), str(files.keyfile))
            with security.channel(cluster.internal_address_of(1)) as channel, \
                    pytest.raises(grpc.RpcError) as refused:
                channel.unary_unary(pull)(request, timeout=_CALL_S)
            assert refused.value.code() is grpc.StatusCode.UNAVAILABLE, who
        intruder = CertificateAuthority(cluster.tls_dir).issue("intruder", "intruder")
        security = Security("SSL", nodes_ca, str(intruder.certfile), str(intruder.keyfile))
        with security.channel(cluster.internal_address_of(1)) as channel, \
                pytest.raises(grpc.RpcError) as refused:
            channel.unary_unary(pull)(request, timeout=_CALL_S)
        assert refused.value.code() is grpc.StatusCode.PERMISSION_DENIED
        assert "User:CN=intruder is not a node principal" in refused.value.details()
