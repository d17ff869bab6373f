"""The admin client as a kafka-python user calls it (issue 29): create_topics([NewTopic]),
delete_topics, topics(), partitions_for_topic, metrics(); and every argument of the admin entry
points checked where it is passed, a wrong one a ConfigurationError before anything is sent.
Against one real node."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tidelog import AdminClient, ConfigurationError, NewTopic, OffsetSpec, TopicPartition, errors
from tidelog.configs import ConfigResource, ConfigResourceType
from tidelog.testing import LocalCluster

pytestmark = pytest.mark.timeout(180)

EXISTING = "admin-names"


@pytest.fixture(scope="module")
def admin() -> Iterator[AdminClient]:
    with (LocalCluster(1) as cluster,
          AdminClient(bootstrap_servers=cluster.bootstrap.split(","),
                      client_id="admin-names") as client):
        client.create_topic(EXISTING)
        yield client


def test_create_topics_delete_topics_and_the_lookups(admin: AdminClient) -> None:
    admin.create_topics([
        NewTopic("kn-a", 2, 1),
        NewTopic("kn-b", 1, 1, topic_configs={"retention.ms": "3600000"}),
    ])
    assert {"kn-a", "kn-b"} <= admin.topics() and isinstance(admin.topics(), set)
    assert admin.partitions_for_topic("kn-a") == {0, 1}
    assert admin.partitions_for_topic("kn-none") is None
    b = ConfigResource(ConfigResourceType.TOPIC, "kn-b")
    assert admin.describe_configs([b])[b]["retention.ms"].value == "3600000"
    # One that exists does not keep the next from being created; its error comes after.
    with pytest.raises(errors.TopicAlreadyExistsError, match="kn-a"):
        admin.create_topics([NewTopic("kn-a", 2, 1), NewTopic("kn-c", -1, -1)])
    assert admin.partitions_for_topic("kn-c") is not None
    admin.delete_topics(["kn-a", "kn-b", "kn-c"])
    assert not {"kn-a", "kn-b", "kn-c"} & admin.topics()
    with pytest.raises(errors.UnknownTopicOrPartitionError):
        admin.delete_topics(["kn-a"])
    metrics = admin.metrics()["client-metrics"]
    assert metrics["client-id"] == "admin-names" and metrics["metadata-refresh-total"] > 0


TP = TopicPartition(EXISTING, 0)
BAD_CALLS: list[tuple[str, Callable[[AdminClient], Any], str]] = [
    ("topic not a str", lambda a: a.create_topic(5), "topic name"),
    ("empty topic", lambda a: a.create_topic(""), "topic name"),
    ("str partitions", lambda a: a.create_topic("x", partitions="3"), "partitions"),
    ("no partitions", lambda a: a.create_topic("x", partitions=0), "partitions"),
    ("bool partitions", lambda a: a.create_topic("x", partitions=True), "partitions"),
    ("str replicas", lambda a: a.create_topic("x", replication_factor="1"), "replication"),
    ("no replicas", lambda a: a.create_topic("x", replication_factor=0), "replication"),
    ("configs a str", lambda a: a.create_topic("x", config="retention.ms=1"), "mapping"),
    ("a config's value", lambda a: a.create_topic("x", config={"retention.ms": [1]}),
     "retention.ms"),
    ("str timeout", lambda a: a.create_topic("x", timeout_ms="5s"), "timeout_ms"),
    ("negative timeout", lambda a: a.list_topics(timeout_ms=-1), "timeout_ms"),
    ("one NewTopic", lambda a: a.create_topics(NewTopic("x", 1, 1)), "list of NewTopic"),
    ("a tuple topic", lambda a: a.create_topics([("x", 1, 1)]), "NewTopic"),
    ("assignments", lambda a: a.create_topics([NewTopic("x", 1, 1, {0: [1]})]),
     "replica_assignments"),
    ("delete a str", lambda a: a.delete_topics(EXISTING), "list of topic names"),
    ("delete a number", lambda a: a.delete_topic(3), "topic name"),
    ("describe a str", lambda a: a.describe_topics(EXISTING), "list of topic names"),
    ("partitions_for_topic", lambda a: a.partitions_for_topic(None), "topic name"),
    ("offsets of a list", lambda a: a.list_offsets([TP]), "mapping"),
    ("str partition", lambda a: a.list_offsets({(EXISTING, "0"): OffsetSpec.latest()}),
     "TopicPartition"),
    ("negative partition", lambda a: a.list_offsets({(EXISTING, -1): OffsetSpec.latest()}),
     "partitions are numbered from 0"),
    ("str spec", lambda a: a.list_offsets({TP: "now"}), "OffsetSpec"),
]


@pytest.mark.parametrize(("call", "named"), [(c, n) for _, c, n in BAD_CALLS],
                         ids=[i for i, _, _ in BAD_CALLS])
def test_bad_arguments_are_refused_naming_them(
    admin: AdminClient, call: Callable[[AdminClient], Any], named: str
) -> None:
    with pytest.raises(ConfigurationError, match=named):
        call(admin)
    assert "x" not in admin.topics()
