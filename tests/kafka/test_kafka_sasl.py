"""SASL on the Kafka listener (kafka.security.protocol=SASL_PLAINTEXT), on one 1-node cluster
with the authorizer on: credentials set by ``tidelog configs --entity-type users`` (gRPC) and by
Kafka's AlterUserScramCredentials (confluent-kafka's AdminClient over the Kafka listener);
kafka-python and confluent-kafka authenticating with SCRAM-SHA-256, SCRAM-SHA-512 and PLAIN;
refusals (a wrong password, an unknown user, an unknown mechanism, a request before
authentication, garbage SASL bytes) that leave the node serving; the ACLs of the SASL principal;
and the credentials surviving a restart of the node (the metadata log).

The gRPC client of the tests is ``User:ANONYMOUS`` on a plaintext cluster, made a super user
here so that it can set the first credentials and ACLs; ``User:admin`` is the Kafka clients'
super user."""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import socket
import ssl
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import confluent_kafka
import kafka
import pytest
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kafka.net.sasl.scram import ScramClient
from kafka_clients import CLIENT_TIMEOUT_S
from kafka_wire import closed_within, connect, frame_of, read_answer
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v0.request import SaslHandshakeRequest as SaslHandshakeV0
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

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
from tidelog.cli import main
from tidelog.client import Client
from tidelog.node.config import NodeConfig
from tidelog.node.kafka.api_versions import add_api_versions
from tidelog.node.kafka.listener import KafkaListener
from tidelog.node.kafka.registry import ApiRegistry
from tidelog.node.kafka.sasl import add_sasl
from tidelog.scram import UserScramCredentialUpsertion as TidelogUpsertion
from tidelog.scram import credential_of, salted_password
from tidelog.testing import LocalCluster, wait_for

pytestmark = pytest.mark.timeout(180)

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN")
PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret",
             "carol": "carol-secret"}
SECRET_TOPIC = "sasl-secret"


@pytest.fixture(scope="module")
def cluster_options() -> dict[str, Any]:
    return {
        "nodes": 1, "ready_timeout": 60.0, "authorizer": "acl",
        "super_users": "User:ANONYMOUS;User:admin",
        "kafka_security_protocol": "SASL_PLAINTEXT",
        "sasl_enabled_mechanisms": ",".join(MECHANISMS),
    }


class Ran(NamedTuple):
    returncode: int
    stdout: str
    stderr: str


def _cli(cluster: LocalCluster, *args: str) -> Ran:
    """``tidelog configs --bootstrap-server ... <args>``, run in this process."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["configs", "--bootstrap-server", cluster.bootstrap, *args])
    return Ran(code, out.getvalue(), err.getvalue())


def _confluent(cluster: LocalCluster, user: str, mechanism: str = "SCRAM-SHA-256",
               password: str | None = None) -> dict[str, Any]:
    return {
        "bootstrap.servers": cluster.kafka_bootstrap, "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism, "sasl.username": user,
        "sasl.password": PASSWORDS.get(user, "x") if password is None else password,
        "log_level": 0, "socket.timeout.ms": int(CLIENT_TIMEOUT_S * 1000),
    }


def _kafka_python(cluster: LocalCluster, user: str, mechanism: str = "SCRAM-SHA-256",
                  password: str | None = None) -> dict[str, Any]:
    return {
        "bootstrap_servers": cluster.kafka_bootstrap, "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": mechanism, "sasl_plain_username": user,
        "sasl_plain_password": PASSWORDS.get(user, "x") if password is None else password,
        "request_timeout_ms": int(CLIENT_TIMEOUT_S * 1000),
    }


@pytest.fixture(scope="module")
def users(cluster: LocalCluster) -> Iterator[None]:
    """admin (SCRAM-SHA-512) through Tidelog's admin client; alice (SCRAM-SHA-256, 8192
    iterations) through the CLI, as kafka-configs does it; then, as admin over the Kafka
    listener (AlterUserScramCredentials), alice's SCRAM-SHA-512 and bob's and carol's
    credentials. alice may do everything to the topics and groups named ``sasl-*``; carol
    may read the secret topic; bob nothing."""
    client = Client(cluster.bootstrap)
    try:
        client.admin.alter_user_scram_credentials(
            [TidelogUpsertion("admin", "SCRAM-SHA-512", PASSWORDS["admin"])])
        done = _cli(cluster, "--alter", "--entity-type", "users", "--entity-name", "alice",
                    "--add-config", "SCRAM-SHA-256=[iterations=8192,password=alice-secret]")
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "Completed updating config for user alice."
        admin = AdminClient(_confluent(cluster, "admin", "SCRAM-SHA-512"))
        futures = admin.alter_user_scram_credentials([
            UserScramCredentialUpsertion(
                name, ScramCredentialInfo(mechanism, 4096), PASSWORDS[name].encode())
            for name, mechanism in (("alice", ScramMechanism.SCRAM_SHA_512),
                                    ("bob", ScramMechanism.SCRAM_SHA_256),
                                    ("carol", ScramMechanism.SCRAM_SHA_256))
        ])
        for future in futures.values():
            future.result(timeout=CLIENT_TIMEOUT_S)
        client.admin.create_acls([
            AclBinding(ResourcePattern(kind, "sasl-", PatternType.PREFIXED),
                       AccessControlEntry("User:alice", Operation.ALL, Permission.ALLOW))
            for kind in (ResourceType.TOPIC, ResourceType.GROUP)
        ] + [AclBinding(ResourcePattern(ResourceType.TOPIC, SECRET_TOPIC),
                        AccessControlEntry("User:carol", Operation.READ, Permission.ALLOW))]
          )
        for topic in (SECRET_TOPIC, "sasl-after-restart", *(
                f"sasl-{kind}-{mechanism.lower()}" for kind in ("confluent", "kafka-python")
                for mechanism in MECHANISMS)):
            client.admin.create_topic(topic, 1, 1)
        producer = client.producer()
        try:
            producer.send(SECRET_TOPIC, value=b"classified", partition=0)
            producer.flush(timeout=CLIENT_TIMEOUT_S)
        finally:
            producer.close(timeout=CLIENT_TIMEOUT_S)
        yield
    finally:
        client.close()


def test_describe_shows_mechanisms_and_iterations_never_secrets(
    cluster: LocalCluster, users: None
) -> None:
    admin = AdminClient(_confluent(cluster, "admin", "SCRAM-SHA-512"))
    described = admin.describe_user_scram_credentials(["alice", "bob"])
    got = {name: sorted((i.mechanism, i.iterations)
                        for i in future.result(timeout=CLIENT_TIMEOUT_S).scram_credential_infos)
           for name, future in described.items()}
    assert got == {"alice": [(ScramMechanism.SCRAM_SHA_256, 8192),
                             (ScramMechanism.SCRAM_SHA_512, 4096)],
                   "bob": [(ScramMechanism.SCRAM_SHA_256, 4096)]}
    shown = _cli(cluster, "--describe", "--entity-type", "users", "--entity-name", "alice")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.strip() == ("SCRAM credential configs for user-principal 'alice' are "
                                    "SCRAM-SHA-256=iterations=8192, "
                                    "SCRAM-SHA-512=iterations=4096")
    missing = _cli(cluster, "--describe", "--entity-type", "users", "--entity-name", "nobody")
    assert missing.returncode != 0 and "RESOURCE_NOT_FOUND" in missing.stderr
    few = _cli(cluster, "--alter", "--entity-type", "users", "--entity-name", "dave",
               "--add-config", "SCRAM-SHA-256=[iterations=100,password=p]")
    assert few.returncode != 0 and "Too few iterations" in few.stderr


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_confluent_kafka_authenticates_and_round_trips(
    cluster: LocalCluster, users: None, mechanism: str
) -> None:
    topic = f"sasl-confluent-{mechanism.lower()}"
    producer = confluent_kafka.Producer(_confluent(cluster, "alice", mechanism))
    for i in range(3):
        producer.produce(topic, f"v{i}".encode(), partition=0)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    consumer = confluent_kafka.Consumer({
        **_confluent(cluster, "alice", mechanism), "group.id": f"sasl-{mechanism}",
        "enable.auto.commit": False, "auto.offset.reset": "earliest",
    })
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
        values: list[bytes] = []
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while len(values) < 3 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None:
                assert message.error() is None, message.error()
                values.append(message.value())
        assert values == [b"v0", b"v1", b"v2"]
    finally:
        consumer.close()


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_kafka_python_authenticates_and_round_trips(
    cluster: LocalCluster, users: None, mechanism: str
) -> None:
    topic = f"sasl-kafka-python-{mechanism.lower()}"
    producer = kafka.KafkaProducer(**_kafka_python(cluster, "alice", mechanism))
    try:
        for i in range(3):
            producer.send(topic, f"v{i}".encode(), partition=0).get(timeout=CLIENT_TIMEOUT_S)
    finally:
        producer.close(timeout=CLIENT_TIMEOUT_S)
    consumer = kafka.KafkaConsumer(**_kafka_python(cluster, "alice", mechanism),
                                   auto_offset_reset="earliest", enable_auto_commit=False)
    try:
        consumer.assign([kafka.TopicPartition(topic, 0)])
        values: list[bytes] = []
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while len(values) < 3 and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                values += [r.value for r in records]
        assert values == [b"v0", b"v1", b"v2"]
    finally:
        consumer.close()


def _confluent_refusal(config: dict[str, Any]) -> str:
    """The error confluent-kafka reports for `config`'s connection."""
    errors: list[confluent_kafka.KafkaError] = []
    admin = AdminClient({**config, "error_cb": errors.append})
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    while not errors and time.monotonic() < deadline:
        admin.poll(0.2)
    assert errors, "confluent-kafka reported no error"
    return str(errors[0])


@pytest.mark.parametrize("user, password", [("alice", "wrong"), ("nobody", "x")])
def test_a_wrong_password_or_an_unknown_user_is_refused_clearly(
    cluster: LocalCluster, users: None, user: str, password: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    refusal = _confluent_refusal(_confluent(cluster, user, "SCRAM-SHA-256", password))
    assert "Authentication failed during authentication due to invalid credentials with SASL "\
        "mechanism SCRAM-SHA-256" in refusal
    plain = _confluent_refusal(_confluent(cluster, user, "PLAIN", password))
    assert "SASL authentication error" in plain and "invalid credentials" in plain
    # kafka-python retries its bootstrap until bootstrap_timeout_ms and logs each refusal.
    with caplog.at_level(logging.WARNING, logger="kafka"), \
            pytest.raises(kafka.errors.KafkaError):
        kafka.KafkaProducer(**_kafka_python(cluster, user, "SCRAM-SHA-512", password),
                            bootstrap_timeout_ms=2000)
    assert any("SaslAuthenticationFailedError" in r.getMessage()
               and "invalid credentials with SASL mechanism SCRAM-SHA-512" in r.getMessage()
               for r in caplog.records)
    _served(cluster)


def _served(cluster: LocalCluster) -> None:
    """The node still serves an authenticated client."""
    admin = AdminClient(_confluent(cluster, "admin", "SCRAM-SHA-512"))
    assert SECRET_TOPIC in admin.list_topics(timeout=CLIENT_TIMEOUT_S).topics


def test_before_authentication_only_sasl_and_api_versions_are_answered(
    cluster: LocalCluster, users: None
) -> None:
    address = cluster.kafka_bootstrap.split(",")[0]
    with connect(address) as sock:
        sock.sendall(frame_of(ApiVersionsRequest(client_software_name="t",
                                                 client_software_version="1"), 1))
        _, versions = read_answer(sock, 18, 3)
        served = {entry.api_key for entry in versions.api_keys}
        assert {17, 36, 50, 51} <= served
        sock.sendall(frame_of(MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                              include_topic_authorized_operations=False), 2))
        assert closed_within(sock), "a Metadata request before SASL was answered"
    with connect(address) as sock:
        sock.sendall(frame_of(SaslHandshakeRequest(mechanism="GSSAPI"), 1))
        _, answer = read_answer(sock, 17, 1)
        assert answer.error_code == ErrorCode.unsupported_sasl_mechanism
        assert set(answer.mechanisms) == set(MECHANISMS)
        assert closed_within(sock)
    with connect(address) as sock:
        sock.sendall(frame_of(SaslAuthenticateRequest(auth_bytes=b"n,,n=alice,r=x"), 1))
        _, answer = read_answer(sock, 36, 2)
        assert answer.error_code == ErrorCode.sasl_authentication_failed
        assert closed_within(sock)
    _served(cluster)


@pytest.mark.parametrize("garbage", [b"\xff" * 40, b"n,,n=alice,r=" + b"\x00" * 5000,
                                     b"y,,n=,r=abc", b"\x00\x00"])
def test_garbage_sasl_bytes_close_the_connection_only(
    cluster: LocalCluster, users: None, garbage: bytes
) -> None:
    address = cluster.kafka_bootstrap.split(",")[0]
    with connect(address) as sock:
        sock.sendall(frame_of(SaslHandshakeRequest(mechanism="SCRAM-SHA-256"), 1))
        assert read_answer(sock, 17, 1)[1].error_code == ErrorCode.none
        sock.sendall(frame_of(SaslAuthenticateRequest(auth_bytes=garbage), 2))
        _, answer = read_answer(sock, 36, 2)
        assert answer.error_code == ErrorCode.sasl_authentication_failed
        assert answer.error_message
        assert closed_within(sock)
    with connect(address) as sock:  # SaslHandshake v0: the token comes bare
        sock.sendall(frame_of(SaslHandshakeV0(mechanism="PLAIN"), 1))
        assert read_answer(sock, 17, 0)[1].error_code == ErrorCode.none
        sock.sendall(len(garbage).to_bytes(4, "big") + garbage)
        assert closed_within(sock)
    _served(cluster)


def test_acls_apply_to_the_sasl_principal(cluster: LocalCluster, users: None) -> None:
    def read_as(user: str) -> list[bytes]:
        consumer = kafka.KafkaConsumer(**_kafka_python(cluster, user),
                                       auto_offset_reset="earliest", enable_auto_commit=False)
        try:
            consumer.assign([kafka.TopicPartition(SECRET_TOPIC, 0)])
            values: list[bytes] = []
            deadline = time.monotonic() + CLIENT_TIMEOUT_S
            while not values and time.monotonic() < deadline:
                for records in consumer.poll(timeout_ms=500).values():
                    values += [r.value for r in records]
            return values
        finally:
            consumer.close()

    address = cluster.kafka_bootstrap.split(",")[0]
    with connect(address) as sock:  # bob, by PLAIN on a raw connection, asks for the topic
        sock.sendall(frame_of(SaslHandshakeRequest(mechanism="PLAIN"), 1))
        assert read_answer(sock, 17, 1)[1].error_code == ErrorCode.none
        sock.sendall(frame_of(SaslAuthenticateRequest(auth_bytes=b"\0bob\0bob-secret"), 2))
        assert read_answer(sock, 36, 2)[1].error_code == ErrorCode.none
        sock.sendall(frame_of(MetadataRequest(
            topics=(MetadataRequestTopic(topic_id=uuid.UUID(int=0), name=SECRET_TOPIC),),
            allow_auto_topic_creation=False, include_topic_authorized_operations=False), 3))
        (topic,) = read_answer(sock, 3, 12)[1].topics
        assert topic.error_code == ErrorCode.topic_authorization_failed
    assert read_as("carol") == [b"classified"]


def test_a_sasl_ssl_listener_speaks_tls_and_authenticates_inside_it(tmp_path: Path) -> None:
    """A listener of its own in this process (no cluster): SASL_SSL is TLS with the node's
    certificate, a SCRAM-SHA-512 exchange inside it (kafka-python's SCRAM client), and a
    plaintext client gets nothing."""
    ca = CertificateAuthority(tmp_path)
    node = ca.issue("node", "node-1", node=True)
    salted = salted_password(2, "pw", b"salt", 4096)
    credential = credential_of(2, salted, b"salt", 4096)

    def exchange(port: int) -> tuple[int, int]:
        scram = ScramClient("alice", "pw", "SCRAM-SHA-512")
        context = ssl.create_default_context(cafile=str(ca.cafile))
        with socket.create_connection(("127.0.0.1", port), timeout=CLIENT_TIMEOUT_S) as raw, \
                context.wrap_socket(raw, server_hostname="localhost") as sock:
            sock.sendall(frame_of(SaslHandshakeRequest(mechanism="SCRAM-SHA-512"), 1))
            read_answer(sock, 17, 1)
            sock.sendall(frame_of(SaslAuthenticateRequest(auth_bytes=scram.first_message()), 2))
            scram.process_server_first_message(read_answer(sock, 36, 2)[1].auth_bytes)
            sock.sendall(frame_of(SaslAuthenticateRequest(auth_bytes=scram.final_message()), 3))
            final = read_answer(sock, 36, 2)[1]
            scram.process_server_final_message(final.auth_bytes)  # checks the signature
            sock.sendall(frame_of(SaslAuthenticateRequest(auth_bytes=b"again"), 4))
            again = read_answer(sock, 36, 2)[1]
        return final.error_code, again.error_code

    def plaintext(port: int) -> bool:
        with connect(f"127.0.0.1:{port}") as sock:
            sock.sendall(frame_of(ApiVersionsRequest(client_software_name="t",
                                                     client_software_version="1"), 1))
            return closed_within(sock)

    async def scenario() -> None:
        config = NodeConfig.from_properties({
            "node.id": "1", "listen": "127.0.0.1:1", "data.dir": str(tmp_path),
            "kafka.listen": "127.0.0.1:0", "kafka.security.protocol": "SASL_SSL",
            "ssl.certfile": str(node.certfile), "ssl.keyfile": str(node.keyfile),
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        })
        listener = KafkaListener(config)
        port = await listener.bind()
        registry = ApiRegistry()
        add_api_versions(registry)
        add_sasl(registry)
        await listener.serve(
            registry, lambda user, code: credential if (user, code) == ("alice", 2) else None)
        try:
            assert await asyncio.to_thread(exchange, port) == (
                ErrorCode.none, ErrorCode.illegal_sasl_state)
            assert await asyncio.to_thread(plaintext, port)
        finally:
            await listener.stop()

    asyncio.run(scenario())


def test_credentials_survive_a_restart(cluster: LocalCluster, users: None) -> None:
    """Last, as it restarts the module's node: the credentials come back from the metadata
    log."""
    cluster.restart(1)
    producer = confluent_kafka.Producer(_confluent(cluster, "alice", "SCRAM-SHA-512"))
    producer.produce("sasl-after-restart", b"v", partition=0)
    wait_for(lambda: producer.flush(1) == 0, 60, "the record produced after the restart")
    refusal = _confluent_refusal(_confluent(cluster, "alice", "SCRAM-SHA-256", "wrong"))
    assert "invalid credentials" in refusal
