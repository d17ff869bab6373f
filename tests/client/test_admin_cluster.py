"""CreatePartitions, DescribeConfigs and IncrementalAlterConfigs against real node processes,
all on one module cluster: a topic grows and its new partitions take records (and a
subscribed group gets them), a retention change deletes segments of a running log, every
value's source is described, refusals carry Kafka's codes, ACLs guard the three APIs, and the
`tidelog configs` / `tidelog topic alter` commands (bad input included)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from waiting_helpers import poll_records

from tidelog import Client, OffsetSpec, TopicPartition
from tidelog.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    Operation,
    Permission,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)
from tidelog.cli import main
from tidelog.clock import wall_clock_ms
from tidelog.configs import (
    AlterConfigOp,
    AlterConfigOpType,
    ConfigResource,
    ConfigResourceType,
    ConfigSource,
    NewPartitions,
)
from tidelog.errors import (
    ClusterAuthorizationFailedError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidRequestError,
    NotEnoughReplicasError,
    RequestTimedOutError,
    TopicAuthorizationFailedError,
    UnknownTopicOrPartitionError,
)
from tidelog.testing import LocalCluster, Raw, make_batch, wait_for
from tidelog.v1 import tidelog_pb2 as pb

pytestmark = pytest.mark.timeout(180)

NODE_1 = ConfigResource(ConfigResourceType.BROKER, "1")
EVERY_NODE = ConfigResource(ConfigResourceType.BROKER, "")


@pytest.fixture(scope="module")
def cluster_options() -> dict[str, object]:
    return {
        "log_retention_check_interval_ms": 200,
        "group_consumer_heartbeat_interval_ms": 200,
        "num_partitions": 2,
        # min.insync.replicas: a paused follower leaves the ISR within a second.
        "replica_lag_max_ms": 1000,
        # test_acls_guard_partitions_and_configs: the ACLs it creates decide, and what none
        # mentions stays open to the other tests' anonymous client.
        "authorizer": "acl",
        "allow_everyone_if_no_acl_found": "true",
    }


@pytest.fixture(scope="module")
def client(cluster: LocalCluster) -> Iterator[Client]:
    with Client(cluster.bootstrap) as admin:
        yield admin


def topic(name: str) -> ConfigResource:
    return ConfigResource(ConfigResourceType.TOPIC, name)


def test_added_partitions_take_records_and_reach_a_subscribed_group(client: Client) -> None:
    client.create_topic("grow", partitions=2, replication_factor=3)
    consumer = client.consumer(group_id="growers", auto_offset_reset="earliest")
    consumer.subscribe(["grow"])
    wait_for(lambda: consumer.poll(timeout_ms=100) is not None and len(consumer.assignment())
             == 2, 30, "the group's member to own both partitions")

    client.admin.create_partitions({"grow": 3}, validate_only=True)
    assert len(client.describe_topics(["grow"])["grow"].partitions) == 2
    client.admin.create_partitions({"grow": NewPartitions(4, [[2, 3, 1], [3, 1, 2]])})
    partitions = client.describe_topics(["grow"])["grow"].partitions
    assert [p.replicas for p in partitions[2:]] == [(2, 3, 1), (3, 1, 2)]
    assert all(p.leader >= 0 for p in partitions)
    producer = client.producer()
    sent = [producer.send("grow", f"p{p}".encode(), partition=p).result(timeout=30)
            for p in range(4)]
    producer.close()
    assert [m.offset for m in sent] == [0, 0, 0, 0]
    got = poll_records(consumer, 4, timeout=60)
    assert sorted((r.partition, r.value) for r in got) == [(p, f"p{p}".encode())
                                                           for p in range(4)]
    assert {tp.partition for tp in consumer.assignment()} == {0, 1, 2, 3}
    consumer.close()

    with pytest.raises(InvalidPartitionsError, match="already has 4 partition"):
        client.admin.create_partitions({"grow": 4})
    with pytest.raises(InvalidPartitionsError, match="would not be an increase"):
        client.admin.create_partitions({"grow": 3})
    with pytest.raises(UnknownTopicOrPartitionError):
        client.admin.create_partitions({"nope": 3})
    with pytest.raises(InvalidReplicaAssignmentError, match="unknown node"):
        client.admin.create_partitions({"grow": NewPartitions(5, [[1, 2, 9]])})
    with pytest.raises(InvalidRequestError, match="internal topic"):
        client.admin.create_partitions({"__consumer_offsets": 60})


def produce_old_records(client: Client, name: str, count: int) -> None:
    """Records an hour old, in batches of one, so that small segments close behind them."""
    producer = client.producer(linger_ms=0)
    old = wall_clock_ms() - 3_600_000
    for i in range(count):
        producer.send(name, b"x" * 200, partition=0, timestamp_ms=old + i).result(timeout=30)
    producer.close()


def log_start(client: Client, name: str) -> int:
    tp = TopicPartition(name, 0)
    return client.list_offsets({tp: OffsetSpec.earliest()})[tp].offset


def test_retention_changes_reach_running_logs_and_sources_are_described(
    client: Client,
) -> None:
    client.create_topic("retained", partitions=1, replication_factor=3,
                        config={"segment.bytes": 1024})
    client.create_topic("by-default", partitions=1, replication_factor=3,
                        config={"segment.bytes": 1024})
    produce_old_records(client, "retained", 20)
    produce_old_records(client, "by-default", 20)
    assert log_start(client, "retained") == log_start(client, "by-default") == 0

    # The topic's own config, then every node's default: each deletes the hour-old segments
    # of the running logs, with no restart.
    client.admin.incremental_alter_configs(
        {topic("retained"): [AlterConfigOp("retention.ms", "60000")]})
    wait_for(lambda: log_start(client, "retained") > 0, 30, "retention.ms to delete segments")
    assert log_start(client, "by-default") == 0
    client.admin.incremental_alter_configs({EVERY_NODE: [AlterConfigOp("retention.ms", "600000")]})
    try:
        wait_for(lambda: log_start(client, "by-default") > 0, 30,
                 "the nodes' dynamic retention.ms to delete segments")
        client.admin.incremental_alter_configs({NODE_1: [AlterConfigOp("segment.ms", "3600000")]})
        # Node 1 answers for itself once it has applied the change (the controller at once).
        described = wait_for(lambda: _applied(client, "segment.ms", "3600000"), 10,
                             "node 1 to apply its segment.ms")
    finally:
        client.admin.incremental_alter_configs({
            EVERY_NODE: [AlterConfigOp("retention.ms", None, AlterConfigOpType.DELETE)],
            NODE_1: [AlterConfigOp("segment.ms", None, AlterConfigOpType.DELETE)],
        })
    topic_configs = described[topic("retained")]
    assert topic_configs["retention.ms"][1:3] == ("60000", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    assert topic_configs["segment.bytes"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG
    assert topic_configs["cleanup.policy"].is_default
    assert not topic_configs["cleanup.policy"].is_read_only
    node = described[NODE_1]
    assert node["retention.ms"][1:3] == ("600000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
    assert node["segment.ms"][1:3] == ("3600000", ConfigSource.DYNAMIC_BROKER_CONFIG)
    assert node["log.retention.check.interval.ms"][1:] == (
        "200", ConfigSource.STATIC_BROKER_CONFIG, True, False)
    assert node["node.id"].is_read_only and node["node.id"].value == "1"
    assert node["offsets.retention.minutes"].source == ConfigSource.DEFAULT_CONFIG
    assert node["num.partitions"][1:3] == ("2", ConfigSource.STATIC_BROKER_CONFIG)
    assert described[EVERY_NODE] == {"retention.ms": node["retention.ms"]}
    wait_for(lambda: client.admin.describe_configs([NODE_1])[NODE_1]["retention.ms"].source
             == ConfigSource.DEFAULT_CONFIG, 10, "node 1 to apply the deletion")

    # APPEND to a list config starts from its default; refusals carry Kafka's codes.
    client.admin.incremental_alter_configs({topic("retained"): [
        AlterConfigOp("cleanup.policy", "compact", AlterConfigOpType.APPEND)]})
    policy = client.admin.describe_configs([topic("retained")], keys=["cleanup.policy"])
    assert policy[topic("retained")]["cleanup.policy"].value == "delete,compact"
    for resource, op, error, message in [
        (topic("retained"), AlterConfigOp("retention.ms", "soon"), InvalidConfigError,
         "not an integer"),
        (topic("retained"), AlterConfigOp("retention.mss", "1"), InvalidConfigError,
         "unknown config"),
        (topic("nope"), AlterConfigOp("retention.ms", "1"), UnknownTopicOrPartitionError,
         "does not exist"),
        (NODE_1, AlterConfigOp("num.partitions", "5"), InvalidRequestError,
         "cannot update these configs dynamically: num.partitions"),
        (ConfigResource(ConfigResourceType.BROKER, "7"), AlterConfigOp("retention.ms", "1"),
         InvalidRequestError, "no node '7'"),
    ]:
        with pytest.raises(error, match=message):
            client.admin.incremental_alter_configs({resource: [op]})
    with pytest.raises(UnknownTopicOrPartitionError):
        client.admin.describe_configs([topic("nope")])


def test_any_node_forwards_the_changes_and_answers_a_topics_configs(
    cluster: LocalCluster, client: Client
) -> None:
    """The raw answers, from a node that is not the controller: the changes are forwarded to
    it; a topic's configs are answered from the node's own metadata; a node's own resource
    only by that node."""
    client.create_topic("forwarded", partitions=1, replication_factor=3)
    controller = client.admin.describe_cluster().controller_id
    other = next(n for n in cluster.node_ids if n != controller)
    with Raw(cluster) as raw:
        stub = raw.stub(other)
        grown = stub.CreatePartitions(pb.CreatePartitionsRequest(
            topics=[pb.CreatePartitionsTopic(name="forwarded", count=2)]), timeout=30)
        assert [(r.name, r.error_code) for r in grown.results] == [("forwarded", 0)]
        altered = stub.IncrementalAlterConfigs(pb.IncrementalAlterConfigsRequest(resources=[
            pb.AlterConfigsResource(resource_type=2, resource_name="forwarded", configs=[
                pb.AlterableConfig(name="retention.bytes", value="1000000")]),
            pb.AlterConfigsResource(resource_type=2, resource_name="nope"),
        ]), timeout=30)
        assert [r.error_code for r in altered.responses] == [
            0, UnknownTopicOrPartitionError.code]
        asked = [pb.DescribeConfigsResource(resource_type=2, resource_name="forwarded",
                                            configuration_keys=["retention.bytes"]),
                 pb.DescribeConfigsResource(resource_type=4, resource_name=str(controller)),
                 pb.DescribeConfigsResource(resource_type=8, resource_name="x")]
        answer = wait_for(lambda: _described(stub, asked), 10, "the change applied there")
        entry = answer.results[0].configs[0]
        assert (entry.name, entry.value, entry.config_source) == ("retention.bytes", "1000000", 1)
        assert [r.error_code for r in answer.results[1:]] == [InvalidRequestError.code] * 2


def _described(stub: Any, asked: list[Any]) -> Any:
    answer = stub.DescribeConfigs(pb.DescribeConfigsRequest(resources=asked), timeout=10)
    return answer if answer.results[0].configs[0].value == "1000000" else None


def _applied(client: Client, key: str, value: str) -> Any:
    described = client.admin.describe_configs([topic("retained"), NODE_1, EVERY_NODE])
    return described if described[NODE_1][key].value == value else None


def test_acls_guard_partitions_and_configs(client: Client) -> None:
    client.create_topic("guarded", partitions=1, replication_factor=1)
    denials = [
        AclBinding(ResourcePattern(ResourceType.TOPIC, "guarded"),
                   AccessControlEntry("User:*", operation, Permission.DENY))
        for operation in (Operation.ALTER, Operation.ALTER_CONFIGS, Operation.DESCRIBE_CONFIGS)
    ]
    # With ACLs on the cluster, only what they allow is: ALL, but for the two denied.
    node_denials = [
        AclBinding(ResourcePattern(ResourceType.CLUSTER, "kafka-cluster"),
                   AccessControlEntry("User:*", operation, permission))
        for operation, permission in ((Operation.ALL, Permission.ALLOW),
                                      (Operation.ALTER_CONFIGS, Permission.DENY),
                                      (Operation.DESCRIBE_CONFIGS, Permission.DENY))
    ]
    client.admin.create_acls([*denials, *node_denials])
    try:
        wait_for(lambda: _refused(lambda: client.admin.describe_configs([topic("guarded")])),
                 10, "the controller to apply the ACLs")
        for call in (
            lambda: client.admin.create_partitions({"guarded": 2}),
            lambda: client.admin.incremental_alter_configs(
                {topic("guarded"): [AlterConfigOp("retention.ms", "1000")]}),
        ):
            with pytest.raises(TopicAuthorizationFailedError, match="guarded"):
                call()
        with pytest.raises(ClusterAuthorizationFailedError, match="ALTER_CONFIGS"):
            client.admin.incremental_alter_configs(
                {EVERY_NODE: [AlterConfigOp("retention.ms", "1")]})
        with pytest.raises(ClusterAuthorizationFailedError, match="DESCRIBE_CONFIGS"):
            client.admin.describe_configs([EVERY_NODE])
    finally:
        client.admin.delete_acls([
            AclBindingFilter(ResourcePatternFilter(ResourceType.TOPIC, "guarded")),
            AclBindingFilter(ResourcePatternFilter(ResourceType.CLUSTER)),
        ])


def _refused(call: Callable[[], object]) -> bool:
    try:
        call()
    except TopicAuthorizationFailedError:
        return True
    return False


def test_the_commands_alter_and_describe(
    cluster: LocalCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    at = ("--bootstrap", cluster.bootstrap)
    assert main(["topic", "create", "cli-grow", "--partitions", "1", *at]) == 0
    assert main(["topic", "alter", "cli-grow", "--partitions", "3", *at]) == 0
    assert "now has 3 partition(s)" in capsys.readouterr().out
    assert main(["configs", "--alter", "--entity-type", "topics", "--entity-name", "cli-grow",
                 "--add-config", "retention.ms=90000,cleanup.policy=[delete,compact]", *at]) == 0
    assert main(["configs", "--alter", "--entity-type", "topics", "--entity-name", "cli-grow",
                 "--delete-config", "retention.ms", *at]) == 0
    capsys.readouterr()
    assert main(["configs", "--describe", "--entity-type", "topics", "--entity-name",
                 "cli-grow", *at]) == 0
    out = capsys.readouterr().out
    assert "Dynamic configs for topic cli-grow are:" in out
    assert "cleanup.policy=delete,compact source=DYNAMIC_TOPIC_CONFIG" in out
    assert "retention.ms" not in out
    assert main(["configs", "--describe", "--all", "--entity-type", "nodes",
                 "--entity-name", "2", *at]) == 0
    assert "node.id=2 source=STATIC_BROKER_CONFIG sensitive=false  read-only" in (
        capsys.readouterr().out)
    for args, message in [
        (["topic", "alter", "cli-grow", "--partitions", "2"], "would not be an increase"),
        (["topic", "alter", "cli-grow", "--partitions", "4", "--replica-assignment", "1:x"],
         "--replica-assignment '1:x'"),
        (["configs", "--alter", "--entity-type", "topics", "--entity-name", "cli-grow",
          "--add-config", "retention.ms"], "'retention.ms' is not KEY=VALUE"),
        (["configs", "--alter", "--entity-type", "topics", "--entity-name", "cli-grow"],
         "--alter needs --add-config"),
        (["configs", "--describe", "--entity-type", "nodes", "--entity-name", "one"],
         "needs --entity-name NODE_ID"),
        (["configs", "--alter", "--entity-type", "nodes", "--entity-default",
          "--add-config", "node.id=4"], "cannot update these configs dynamically"),
    ]:
        assert main([*args, *at]) == 2, args
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err
        assert len(err.strip().splitlines()) == 1


def test_min_insync_replicas_is_a_topic_config_that_acks_all_obeys(
    cluster: LocalCluster, client: Client
) -> None:
    """Validated, layered and described as every topic config; acks=all to a partition with
    fewer in-sync replicas than it is refused with NOT_ENOUGH_REPLICAS, acks=1 is not, and
    lowering it lets acks=all through again."""
    with pytest.raises(InvalidConfigError, match=r"min\.insync\.replicas"):
        client.create_topic("bad-isr", replication_factor=3, config={"min.insync.replicas": 0})
    client.create_topic("min-isr", partitions=1, replication_factor=3,
                        config={"min.insync.replicas": 3})
    with pytest.raises(InvalidConfigError, match=r"min\.insync\.replicas"):
        client.admin.incremental_alter_configs({topic("min-isr"): [
            AlterConfigOp("min.insync.replicas", "all", AlterConfigOpType.SET)]})
    described = client.admin.describe_configs([topic("min-isr"), NODE_1],
                                        keys=["min.insync.replicas"])
    assert [(e.value, e.source) for r in described.values() for e in r.values()] == [
        ("3", ConfigSource.DYNAMIC_TOPIC_CONFIG), ("1", ConfigSource.DEFAULT_CONFIG)]
    with Raw(cluster) as raw:
        leader = raw.wait_leaders("min-isr", 1)[0]
        raw.produce_acknowledged("min-isr", 0, [[b"all three in sync"]])
        controller = client.admin.describe_cluster().controller_id
        paused = next(n for n in cluster.node_ids if n not in (leader, controller))
        cluster.pause(paused)
        try:
            def refused() -> int | None:
                answer = raw.produce(leader, "min-isr", 0, make_batch([b"x"]), timeout_ms=500)
                return None if answer.error_code in (7, 20) else answer.error_code

            # Timed out (committed, but not on 3 replicas) until the ISR lost the paused node,
            # or NOT_ENOUGH_REPLICAS_AFTER_APPEND for the write waiting when it did; refused
            # before it is written from then on.
            assert wait_for(refused, 15, "NOT_ENOUGH_REPLICAS") == NotEnoughReplicasError.code
            assert raw.produce(leader, "min-isr", 0, make_batch([b"y"]), acks=1).error_code == 0
            client.admin.incremental_alter_configs({topic("min-isr"): [
                AlterConfigOp("min.insync.replicas", "2", AlterConfigOpType.SET)]})
            assert wait_for(lambda: raw.produce(leader, "min-isr", 0, make_batch([b"z"]))
                            .error_code == 0 or None, 15, "acks=all with two in sync")
        finally:
            cluster.resume(paused)


def test_deleting_a_topic_that_never_existed_fails_and_a_forward_timeout_is_no_refusal(
    cluster: LocalCluster, client: Client
) -> None:
    """UNKNOWN_TOPIC_OR_PARTITION for a topic that never existed (the client reported success:
    it retried the retriable error and took the retry's same answer for a deletion that had
    gone through). A node whose forward to the controller got no answer in time answers
    REQUEST_TIMED_OUT, not NOT_CONTROLLER: the controller may have made the change, so a
    retry's UNKNOWN_TOPIC_OR_PARTITION may mean done (it answered NOT_CONTROLLER, which says
    the change was not made). Last of the module: the controller is paused."""
    with pytest.raises(UnknownTopicOrPartitionError):
        client.admin.delete_topic("never-created")
    client.create_topic("doomed", partitions=1, replication_factor=3)
    controller = client.admin.describe_cluster().controller_id
    other = next(n for n in cluster.node_ids if n != controller)
    with Raw(cluster) as raw:
        stub = raw.stub(other)
        cluster.pause(controller)
        try:
            answer = stub.DeleteTopics(
                pb.DeleteTopicsRequest(topic_names=["doomed"], timeout_ms=1000), timeout=10)
        finally:
            cluster.resume(controller)
    assert [(t.name, t.error_code) for t in answer.topics] == [
        ("doomed", RequestTimedOutError.code)]


def test_retention_defaults_never_trim_the_metadata_log() -> None:
    """The metadata log is the cluster's only copy of its metadata (no snapshots): a node whose
    topic defaults delete everything at once (here retention.ms=1 over 1 KiB segments; with
    the defaults, a week after a segment closes) keeps all of it. Before, the metadata log took
    the defaults like any topic: retention deleted its first segments, and a node restarted
    afterwards (or one that pulls from it) began its image where retention had cut, without
    the topics created first (seen: no topic at all after a restart)."""
    with LocalCluster(1, retention_ms=1, segment_bytes=1024,
                      log_retention_check_interval_ms=100) as cluster, \
            Client(cluster.bootstrap) as admin:
        for i in range(12):
            admin.create_topic(f"kept-{i}", partitions=1, replication_factor=1)
        metadata_dir = cluster.data_dir / "node-1" / "__cluster_metadata-0"
        segments = sorted(p.name for p in metadata_dir.glob("*.log"))
        assert segments[-1] != "00000000000000000000.log", "the metadata log rolled"
        # A retention pass has run over every log once a topic's own segments are deleted.
        produce_old_records(admin, "kept-0", 10)
        wait_for(lambda: log_start(admin, "kept-0") > 0, 30, "a retention pass")
        assert (metadata_dir / "00000000000000000000.log").exists(), "its first segment stays"
