"""The Kafka listener of a TLS cluster (LocalCluster(tls=True): client certificates required,
the authorizer on): confluent-kafka connects with the cluster's CA and a client certificate
and lists topics, and a principal sees only the topics its ACLs let it describe, as through
the gRPC listener, and groups and transactional ids likewise; a connection without a
certificate is refused at the handshake; a node's own certificate is only its principal."""

from __future__ import annotations

import socket
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka_clients import tls_config
from kafka_wire import closed_within, frame_of
from kio.schema.api_versions.v0.request import ApiVersionsRequest
from kio.schema.envelope.v0.request import EnvelopeRequest

from tidelog import Client
from tidelog.acl import (
    AccessControlEntry,
    AclBinding,
    Operation,
    Permission,
    ResourcePattern,
    ResourceType,
)
from tidelog.certificates import CertificateAuthority
from tidelog.testing import LocalCluster, wait_for

pytestmark = pytest.mark.timeout(180)

CLIENT_TIMEOUT_S = 20.0
SECRET = "secret"


@pytest.fixture(scope="module")
def cluster_options() -> dict[str, Any]:
    return {"nodes": 1, "tls": True}


@pytest.fixture(scope="module")
def client(cluster: LocalCluster) -> Iterator[Client]:
    with Client(cluster.bootstrap, **cluster.client_options) as admin:
        admin.create_topic(SECRET, partitions=2, replication_factor=1)
        yield admin


def _kafka_admin(cluster: LocalCluster, name: str) -> AdminClient:
    """A confluent-kafka admin client presenting `name`'s certificate of the cluster's CA."""
    return AdminClient(tls_config(cluster, name))


def test_confluent_kafka_lists_topics_over_tls(cluster: LocalCluster, client: Client) -> None:
    listed = _kafka_admin(cluster, "client").list_topics(timeout=CLIENT_TIMEOUT_S)
    assert {n: f"{b.host}:{b.port}" for n, b in listed.brokers.items()} == {
        1: cluster.kafka_address_of(1)}
    assert sorted(listed.topics[SECRET].partitions) == [0, 1]


def test_a_principal_sees_only_what_its_acls_let_it_describe(
    cluster: LocalCluster, client: Client
) -> None:
    reader = _kafka_admin(cluster, "reader")
    assert SECRET not in reader.list_topics(timeout=CLIENT_TIMEOUT_S).topics
    named = reader.list_topics(topic=SECRET, timeout=CLIENT_TIMEOUT_S).topics[SECRET]
    assert named.error is not None
    assert named.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    client.admin.create_acls([AclBinding(
        ResourcePattern(ResourceType.TOPIC, SECRET),
        AccessControlEntry("User:CN=reader", Operation.DESCRIBE, Permission.ALLOW),
    )])
    wait_for(lambda: SECRET in reader.list_topics(timeout=CLIENT_TIMEOUT_S).topics,
             CLIENT_TIMEOUT_S, "the reader's ACL to apply")


def test_a_connection_without_a_client_certificate_is_refused(cluster: LocalCluster) -> None:
    """TLS 1.3 finishes the client's side of the handshake before the server checks the
    client's certificate, so the refusal shows on the first read: an alert or a close."""
    host, _, port = cluster.kafka_address_of(1).rpartition(":")
    context = ssl.create_default_context(cafile=cluster.client_options["ssl_cafile"])
    context.check_hostname = False
    with socket.create_connection((host, int(port)), timeout=CLIENT_TIMEOUT_S) as raw:
        try:
            with context.wrap_socket(raw) as tls:
                tls.sendall(frame_of(ApiVersionsRequest(), 1))
                assert tls.recv(4) == b""
        except (ssl.SSLError, ConnectionResetError, BrokenPipeError):
            pass


def test_a_certificate_of_another_ca_is_refused(cluster: LocalCluster, tmp_path: Path) -> None:
    """A client certificate that another CA signed names a principal the cluster never vouched
    for: the handshake or the first read fails, as for no certificate at all."""
    stranger = CertificateAuthority(tmp_path / "other-ca").issue("stranger", "stranger")
    host, _, port = cluster.kafka_address_of(1).rpartition(":")
    context = ssl.create_default_context(cafile=cluster.client_options["ssl_cafile"])
    context.check_hostname = False
    context.load_cert_chain(stranger.certfile, stranger.keyfile)
    with socket.create_connection((host, int(port)), timeout=CLIENT_TIMEOUT_S) as raw:
        try:
            with context.wrap_socket(raw) as tls:
                tls.sendall(frame_of(ApiVersionsRequest(), 1))
                assert tls.recv(4) == b""
        except (ssl.SSLError, ConnectionResetError, BrokenPipeError):
            pass


def test_a_node_certificate_is_only_its_principal(cluster: LocalCluster, client: Client) -> None:
    """A node's own certificate presented to the Kafka listener names the principal
    ``User:CN=node-1`` and gets what super.users and the ACLs give it, as on the gRPC client
    listener (a Kafka broker's principal is likewise a plain principal on a client listener,
    privileged only by super.users, where the harness puts the nodes): both listeners show it
    the same topics. What only a node may do, speak for another principal, stays on the
    node-to-node listener: the Kafka listener does not serve Envelope (Kafka's request sent on
    behalf of a client's principal) and closes the connection instead."""
    by_kafka = _kafka_admin(cluster, "node-1").list_topics(timeout=CLIENT_TIMEOUT_S).topics
    with Client(cluster.bootstrap, **cluster.client_options_as("node-1")) as as_node:
        by_grpc = as_node.describe_topics()
    assert SECRET in by_grpc
    assert set(by_kafka) == set(by_grpc)
    node = cluster.client_options_as("node-1")
    host, _, port = cluster.kafka_address_of(1).rpartition(":")
    context = ssl.create_default_context(cafile=node["ssl_cafile"])
    context.check_hostname = False
    context.load_cert_chain(node["ssl_certfile"], node["ssl_keyfile"])
    envelope = EnvelopeRequest(request_data=frame_of(ApiVersionsRequest(), 2),
                               request_principal=b"User:CN=client",
                               client_host_address=bytes([127, 0, 0, 1]))
    with socket.create_connection((host, int(port)), timeout=CLIENT_TIMEOUT_S) as raw, \
            context.wrap_socket(raw) as tls:
        tls.sendall(frame_of(envelope, 1))
        assert closed_within(tls, CLIENT_TIMEOUT_S)


def test_groups_and_transactional_ids_need_their_acls(
    cluster: LocalCluster, client: Client
) -> None:
    """A principal with no ACL on a group or a transactional id is refused them through the
    Kafka listener as through the gRPC one: GROUP_AUTHORIZATION_FAILED reading a group's
    offsets, TRANSACTIONAL_ID_AUTHORIZATION_FAILED starting a transactional producer."""
    tls = tls_config(cluster, "stranger")
    # The assigned consumer asks for its committed position: librdkafka retries the refused
    # FindCoordinator and tells the application of the refusal through its poll.
    consumer = Consumer({**tls, "group.id": "secret-group", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(SECRET, 0)])

        def refused() -> int | None:
            message = consumer.poll(0.5)
            error = message.error() if message is not None else None
            return error.code() if error is not None else None

        group_refused = wait_for(refused, CLIENT_TIMEOUT_S, "the group's refusal")
    finally:
        consumer.close()
    assert group_refused == KafkaError.GROUP_AUTHORIZATION_FAILED
    producer = Producer({**tls, "transactional.id": "secret-txn"})
    with pytest.raises(KafkaException) as txn_refused:
        producer.init_transactions(CLIENT_TIMEOUT_S)
    assert txn_refused.value.args[0].code() == (
        KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
