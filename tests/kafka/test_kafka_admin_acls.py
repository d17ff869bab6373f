"""Kafka's ACL APIs, and the refusals of the admin APIs, over the Kafka listener of a TLS
cluster (LocalCluster(tls=True): the authorizer on, ``User:CN=client`` a super user):
confluent-kafka's AdminClient creates, describes and deletes ACLs, and a principal without
rights gets Kafka's authorization errors from Tidelog's handlers, as over gRPC."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from kafka import errors as kafka_errors
from kafka.admin import (
    ACL,
    ACLFilter,
    ACLPermissionType,
    ResourcePattern,
    ResourcePatternFilter,
)
from kafka.admin import ACLOperation as KpOperation
from kafka.admin import ACLResourcePatternType as KpPatternType
from kafka.admin import ResourceType as KpResourceType
from kafka_clients import kafka_python_admin, tls_config

from tidelog.testing import LocalCluster

pytestmark = pytest.mark.timeout(180)

CLIENT_TIMEOUT_S = 20.0
READER = "User:CN=reader"


@pytest.fixture(scope="module")
def cluster_options() -> dict[str, Any]:
    return {"nodes": 1, "tls": True}


def _admin(cluster: LocalCluster, name: str) -> AdminClient:
    """A confluent-kafka admin client presenting `name`'s certificate of the cluster's CA."""
    return AdminClient(tls_config(cluster, name))


def _error(future: Future[Any]) -> int:
    """The Kafka error code `future` failed with (0: it succeeded)."""
    try:
        future.result(timeout=CLIENT_TIMEOUT_S)
    except KafkaException as exc:
        return int(exc.args[0].code())
    return 0


def _reader_acl(operation: AclOperation, name: str = "kt-secret") -> AclBinding:
    return AclBinding(ResourceType.TOPIC, name, ResourcePatternType.LITERAL, READER, "*",
                      operation, AclPermissionType.ALLOW)


_READERS_ACLS = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, READER, None,
                                 AclOperation.ANY, AclPermissionType.ANY)


def test_acls_are_created_described_and_deleted(cluster: LocalCluster) -> None:
    admin = _admin(cluster, "client")
    prefixed = AclBinding(ResourceType.GROUP, "kt-", ResourcePatternType.PREFIXED, READER, "*",
                          AclOperation.READ, AclPermissionType.ALLOW)
    created = admin.create_acls([_reader_acl(AclOperation.DESCRIBE), prefixed])
    assert [_error(f) for f in created.values()] == [0, 0]
    described = admin.describe_acls(_READERS_ACLS).result(timeout=CLIENT_TIMEOUT_S)
    assert sorted(described, key=str) == sorted(
        [_reader_acl(AclOperation.DESCRIBE), prefixed], key=str)

    [deleted] = admin.delete_acls([AclBindingFilter(
        ResourceType.GROUP, None, ResourcePatternType.ANY, READER, None, AclOperation.ANY,
        AclPermissionType.ANY,
    )]).values()
    assert deleted.result(timeout=CLIENT_TIMEOUT_S) == [prefixed]
    left = admin.describe_acls(_READERS_ACLS).result(timeout=CLIENT_TIMEOUT_S)
    assert left == [_reader_acl(AclOperation.DESCRIBE)]


def test_kafka_python_creates_and_describes_acls(cluster: LocalCluster) -> None:
    """kafka-python's admin too; its describe_acls raises DescribeAcls' top-level error,
    which confluent-kafka's does not surface."""
    writers = ACLFilter("User:CN=writer", None, KpOperation.ANY, ACLPermissionType.ANY,
                        ResourcePatternFilter(KpResourceType.ANY, None, KpPatternType.ANY))
    admin = kafka_python_admin(cluster, "client")
    try:
        pattern = ResourcePattern(KpResourceType.TRANSACTIONAL_ID, "kt-txn",
                                  KpPatternType.LITERAL)
        acl = ACL("User:CN=writer", "*", KpOperation.WRITE, ACLPermissionType.ALLOW, pattern)
        outcome = admin.create_acls([acl])
        assert outcome["succeeded"] == [acl] and outcome["failed"] == []
        found, error = admin.describe_acls(writers)
        assert error is kafka_errors.NoError and found == [acl]
    finally:
        admin.close()
    reader = kafka_python_admin(cluster, "reader")
    try:
        with pytest.raises(kafka_errors.ClusterAuthorizationFailedError):
            reader.describe_acls(writers)
    finally:
        reader.close()


def test_a_principal_without_rights_gets_kafkas_authorization_errors(
    cluster: LocalCluster,
) -> None:
    admin = _admin(cluster, "client")
    [made] = admin.create_topics([NewTopic("kt-secret", 1, 1)]).values()
    assert _error(made) == 0
    reader = _admin(cluster, "reader")
    topic_refused = KafkaError.TOPIC_AUTHORIZATION_FAILED
    cluster_refused = KafkaError.CLUSTER_AUTHORIZATION_FAILED
    [acl] = reader.create_acls([_reader_acl(AclOperation.ALL)]).values()
    assert _error(acl) == cluster_refused
    [delete_acl] = reader.delete_acls([_READERS_ACLS]).values()
    assert _error(delete_acl) == cluster_refused
    [create] = reader.create_topics([NewTopic("kt-mine", 1, 1)]).values()
    assert _error(create) == topic_refused
    [grow] = reader.create_partitions([NewPartitions("kt-secret", 2)]).values()
    assert _error(grow) == topic_refused
    [configs] = reader.describe_configs([ConfigResource("TOPIC", "kt-secret")]).values()
    assert _error(configs) == topic_refused
    [node] = reader.incremental_alter_configs([ConfigResource("BROKER", "1", incremental_configs=[
        ConfigEntry("retention.ms", "1000", incremental_operation=AlterConfigOpType.SET)
    ])]).values()
    assert _error(node) == cluster_refused
    [delete] = reader.delete_topics(["kt-secret"]).values()
    assert _error(delete) == topic_refused
