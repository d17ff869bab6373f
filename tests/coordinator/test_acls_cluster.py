"""ACLs on real node processes (contract §10, kafka-mapping §11): the case of contract §10.3
and its siblings.

Over plaintext every caller is User:ANONYMOUS, so the module's cluster lives twice on one data
dir, with the authorizer on (``authorizer=acl``): first with ANONYMOUS as a super user (the
admin creates topics, commits offsets and writes the ACLs), then restarted without super users
and with ``allow.everyone.if.no.acl.found=false``, where ANONYMOUS may only do what the ACLs
(replayed from the metadata log) grant it:

* DESCRIBE on topic ``a`` (only), WRITE on ``w``, READ on ``r`` and on group ``g``;
* nothing on topic ``b`` or group ``h``, and nothing on the cluster.

Each request names an allowed and a refused resource at once: the allowed one is answered, the
other gets its AUTHORIZATION_FAILED code. Requests are raw stubs, so every answer is seen.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from offsets_helpers import (
    RETRIABLE,
    codes,
    commit_request,
    committed,
    fetch,
    fetched,
    found,
    other_than,
)

from tidelog import Client, errors
from tidelog.acl import (
    CLUSTER_NAME,
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)
from tidelog.certificates import CertificateAuthority
from tidelog.cli import main
from tidelog.testing import LocalCluster, Raw, make_batch, wait_for
from tidelog.transport import Security
from tidelog.types import MAX_TIMESTAMP, TopicPartition
from tidelog.v1 import tidelog_pb2 as pb
from tidelog.v1 import tidelog_pb2_grpc

pytestmark = pytest.mark.timeout(240)

ANONYMOUS = "User:ANONYMOUS"
TOPIC_DENIED = errors.TopicAuthorizationFailedError.code
GROUP_DENIED = errors.GroupAuthorizationFailedError.code
CLUSTER_DENIED = errors.ClusterAuthorizationFailedError.code
TXN_DENIED = errors.TransactionalIdAuthorizationFailedError.code
OPTIONS = {"nodes": 3, "offsets_topic_num_partitions": 3, "authorizer": "acl",
           "allow_everyone_if_no_acl_found": "false"}


def grant(principal: str, operation: Operation, kind: ResourceType, name: str) -> AclBinding:
    return AclBinding(ResourcePattern(kind, name),
                      AccessControlEntry(principal, operation, Permission.ALLOW))


GRANTS = [
    grant(ANONYMOUS, Operation.DESCRIBE, ResourceType.TOPIC, "a"),
    grant(ANONYMOUS, Operation.WRITE, ResourceType.TOPIC, "w"),
    grant(ANONYMOUS, Operation.READ, ResourceType.TOPIC, "r"),
    grant(ANONYMOUS, Operation.READ, ResourceType.GROUP, "g"),
    grant("User:admin", Operation.ALL, ResourceType.TOPIC, "b"),
]


def acls_on(raw: Raw, node: int) -> set[tuple[int, str, int, str, int, int]]:
    answer = raw.stub(node).DescribeAcls(pb.DescribeAclsRequest(), timeout=10)
    assert answer.error_code == 0, answer
    return {(r.resource_type, r.resource_name, r.pattern_type, a.principal, a.operation,
             a.permission_type) for r in answer.resources for a in r.acls}


def applied_everywhere(raw: Raw, count: int) -> None:
    """Every node applied `count` ACLs (the controller's answer comes before the others')."""
    wait_for(lambda: all(len(acls_on(raw, n)) == count for n in raw.cluster.node_ids),
             60, f"{count} ACLs on every node")


@pytest.fixture(scope="module")
def restricted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Raw]:
    data_dir: Path = tmp_path_factory.mktemp("acls")
    with LocalCluster(data_dir=data_dir, super_users=ANONYMOUS, **OPTIONS) as admin, \
            Raw(admin) as raw, Client(admin.bootstrap) as client:
        for topic in ("a", "b", "w", "r"):
            raw.create_topic(topic, 1, 3)
            raw.produce_acknowledged(topic, 0, [[b"one", b"two"]])
        for group in ("g", "h"):
            found(raw, 1, group)
            committed(raw, 1, group, {("r", 0): (1, -1, ""), ("b", 0): (1, -1, "")})
        client.admin.create_acls(GRANTS)
        assert set(client.admin.describe_acls()) == set(GRANTS)
        applied_everywhere(raw, len(GRANTS))
    with LocalCluster(data_dir=data_dir, **OPTIONS) as cluster, Raw(cluster) as raw:
        for topic in ("a", "w", "r"):  # what ANONYMOUS may still describe
            raw.wait_leaders(topic, 1)
        yield raw


def settled_commit(stub: tidelog_pb2_grpc.TidelogStub, request: pb.OffsetCommitRequest
                   ) -> dict[tuple[str, int], int]:
    """The answer of the first commit that no coordinator move interrupted (leadership of the
    offsets partitions settles back on the preferred replicas after the restart)."""

    def answer() -> dict[tuple[str, int], int] | None:
        got = codes(stub.OffsetCommit(request, timeout=30))
        return None if set(got.values()) & RETRIABLE else got

    return wait_for(answer, 60, f"a settled commit of {request.group_id!r}")


def settled(group_code: Callable[[], int]) -> int:
    """The first group-level code that is not a coordinator moving (forwarded requests are
    authorized where they are answered, by the group's coordinator)."""
    return wait_for(lambda: (code,) if (code := group_code()) not in RETRIABLE else None,
                    60, "a group-level answer")[0]  # a tuple: 0 is an answer


def leader(raw: Raw, topic: str) -> int:
    return raw.wait_leaders(topic, 1)[0]


def by_partition(response: object) -> dict[str, object]:
    return {t.name: t.partitions[0] for t in response.topics}  # type: ignore[attr-defined]


def test_list_offsets_answers_the_described_topic_and_refuses_the_other(restricted: Raw) -> None:
    """Contract §10.3: one request for a and b; a is answered, b gets 29."""
    request = pb.ListOffsetsRequest(topics=[
        pb.ListOffsetsTopic(name="a", partitions=[pb.ListOffsetsPartition(timestamp=-1)]),
        pb.ListOffsetsTopic(name="b", partitions=[pb.ListOffsetsPartition(timestamp=-1)]),
    ])
    answers = by_partition(restricted.stub(leader(restricted, "a")).ListOffsets(request,
                                                                                 timeout=10))
    # Two records and the leader-change markers of the elections so far.
    assert answers["a"].error_code == 0 and answers["a"].offset >= 2
    assert answers["b"].error_code == TOPIC_DENIED
    assert (answers["b"].offset, answers["b"].timestamp) == (-1, -1)
    assert "User:ANONYMOUS is not authorized to DESCRIBE topic 'b'" in answers["b"].error_message


def test_produce_writes_the_writable_topic_only(restricted: Raw) -> None:
    """WRITE on w; a (DESCRIBE only) and b (nothing) get 29 in the same request."""
    # The offset of a's newest record (ListOffsets MAX_TIMESTAMP): a written "x" would move it,
    # while the marker a new leader appends (a leader may move during the test) does not count.
    newest_of_a = restricted.list_offset(leader(restricted, "a"), "a", 0, MAX_TIMESTAMP).offset
    request = pb.ProduceRequest(topics=[
        pb.TopicProduceData(name=name, partitions=[
            pb.PartitionProduceData(records=make_batch([b"x"]))
        ]) for name in ("w", "a", "b")
    ])
    answers = by_partition(restricted.stub(leader(restricted, "w")).Produce(request, timeout=20))
    assert answers["w"].error_code == 0 and answers["w"].base_offset >= 2
    assert answers["a"].error_code == answers["b"].error_code == TOPIC_DENIED
    assert answers["a"].base_offset == -1
    assert restricted.list_offset(
        leader(restricted, "a"), "a", 0, MAX_TIMESTAMP).offset == newest_of_a


def test_fetch_reads_the_readable_topic_only(restricted: Raw) -> None:
    request = pb.FetchRequest(topics=[
        pb.FetchTopic(name=name, partitions=[pb.FetchPartition(fetch_offset=0)])
        for name in ("r", "a", "b")
    ])
    answers = by_partition(restricted.stub(leader(restricted, "r")).Fetch(request, timeout=10))
    assert answers["r"].error_code == 0 and answers["r"].records
    for refused in ("a", "b"):
        assert answers[refused].error_code == TOPIC_DENIED
        assert not answers[refused].records and answers[refused].high_watermark == -1


def test_offset_commit_needs_read_on_the_group_and_on_each_topic(restricted: Raw) -> None:
    """Sent to a node that does not coordinate the group too: forwarded, the client's
    principal goes along and the coordinator decides the same."""
    request = commit_request("g", {("r", 0): (2, -1, ""), ("b", 0): (2, -1, "")})
    coordinator = found(restricted, 1, "g").node_id
    for node in (coordinator, other_than(restricted, coordinator)):
        assert settled_commit(restricted.stub(node), request) == {
            ("r", 0): 0, ("b", 0): TOPIC_DENIED}
    denied = commit_request("h", {("r", 0): (2, -1, "")})
    assert settled_commit(restricted.stub(1), denied) == {("r", 0): GROUP_DENIED}


def test_a_denied_group_gets_30_from_find_coordinator_and_offset_fetch(restricted: Raw) -> None:
    answer = restricted.stub(1).FindCoordinator(pb.FindCoordinatorRequest(key="h"), timeout=10)
    assert (answer.error_code, answer.node_id) == (GROUP_DENIED, -1)
    assert settled(lambda: fetch(restricted, 1, "h")[0]) == GROUP_DENIED
    # g: READ implies DESCRIBE; all of its offsets leave b out, b by name is refused.
    assert set(fetched(restricted, 1, "g")) == {("r", 0)}
    values = fetched(restricted, 1, "g", [("r", 0), ("b", 0)])
    assert values[("b", 0)].offset == -1000 - TOPIC_DENIED
    assert values[("r", 0)].offset >= 1


def test_deleting_offsets_or_groups_needs_delete_on_the_group(restricted: Raw) -> None:
    """READ on g allows commits, not deletions: OffsetDelete and DeleteGroups get 30, and the
    offsets stay."""
    stub = restricted.stub(1)
    request = pb.OffsetDeleteRequest(group_id="g", topics=[
        pb.OffsetFetchTopic(name="r", partitions=[0])])
    assert settled(lambda: stub.OffsetDelete(request, timeout=30).error_code) == GROUP_DENIED
    answer = stub.DeleteGroups(pb.DeleteGroupsRequest(group_ids=["g", "h"]), timeout=30)
    assert [(r.group_id, r.error_code) for r in answer.results] == [
        ("g", GROUP_DENIED), ("h", GROUP_DENIED)]
    assert "is not authorized to DELETE group 'g'" in answer.results[0].error_message
    assert set(fetched(restricted, 1, "g")) == {("r", 0)}


def test_list_groups_leaves_out_groups_the_caller_may_not_describe(restricted: Raw) -> None:
    def listed() -> set[str] | None:
        groups: set[str] = set()
        for node in restricted.cluster.node_ids:
            answer = restricted.stub(node).ListGroups(pb.ListGroupsRequest(), timeout=10)
            if answer.error_code:  # a partition still loading after a leadership move
                return None
            groups |= {g.group_id for g in answer.groups}
        return groups if "g" in groups else None  # g may be between coordinators

    assert wait_for(listed, 60, "every node's groups") == {"g"}


def test_metadata_hides_the_topics_the_caller_may_not_describe(restricted: Raw) -> None:
    everything = restricted.stub(2).Metadata(pb.MetadataRequest(), timeout=10)
    assert {t.name for t in everything.topics} == {"a", "w", "r"}
    named = restricted.stub(2).Metadata(pb.MetadataRequest(topics=["b", "a"]), timeout=10)
    assert [(t.name, t.error_code) for t in named.topics] == [("b", TOPIC_DENIED), ("a", 0)]
    assert not named.topics[0].partitions


def test_admin_requests_need_the_cluster(restricted: Raw) -> None:
    stub = restricted.stub(3)
    created = stub.CreateAcls(pb.CreateAclsRequest(creations=[pb.AclCreation(
        resource_type=2, resource_name="b", principal=ANONYMOUS, operation=2, permission_type=3
    )]), timeout=30)
    assert [r.error_code for r in created.results] == [CLUSTER_DENIED]
    assert stub.DescribeAcls(pb.DescribeAclsRequest(), timeout=10).error_code == CLUSTER_DENIED
    deleted = stub.DeleteAcls(pb.DeleteAclsRequest(filters=[pb.AclFilter()]), timeout=30)
    assert [r.error_code for r in deleted.filter_results] == [CLUSTER_DENIED]
    topics = stub.CreateTopics(pb.CreateTopicsRequest(topics=[pb.CreatableTopic(name="new")]),
                               timeout=30)
    assert topics.topics[0].error_code == TOPIC_DENIED
    removed = stub.DeleteTopics(pb.DeleteTopicsRequest(topic_names=["a"]), timeout=30)
    assert removed.topics[0].error_code == TOPIC_DENIED
    producer_id = stub.InitProducerId(pb.InitProducerIdRequest(), timeout=30)
    assert producer_id.error_code == 0  # WRITE on topic w is enough (no IDEMPOTENT_WRITE)


def test_a_transactional_id_needs_write_on_it(restricted: Raw) -> None:
    """ANONYMOUS holds no ACL on any transactional id: InitProducerId and FindCoordinator
    (key type 1) naming one get 53, and a Produce carrying one is refused whole with 53 (the
    topic w it may write too), before anything is written."""
    stub = restricted.stub(1)
    answer = stub.InitProducerId(pb.InitProducerIdRequest(transactional_id="tx"), timeout=30)
    assert (answer.error_code, answer.producer_id, answer.producer_epoch) == (TXN_DENIED, -1, -1)
    coordinator = stub.FindCoordinator(pb.FindCoordinatorRequest(key="tx", key_type=1),
                                       timeout=10)
    assert (coordinator.error_code, coordinator.node_id) == (TXN_DENIED, -1)
    assert "User:ANONYMOUS is not authorized to DESCRIBE transactional id 'tx'" in \
        coordinator.error_message
    writer = leader(restricted, "w")
    end_of_w = restricted.list_offset(writer, "w", 0, -1).offset
    request = pb.ProduceRequest(transactional_id="tx", topics=[pb.TopicProduceData(
        name="w", partitions=[pb.PartitionProduceData(records=make_batch([b"x"]))])])
    assert by_partition(restricted.stub(writer).Produce(request, timeout=20))["w"].error_code \
        == TXN_DENIED
    assert restricted.list_offset(writer, "w", 0, -1).offset == end_of_w


def test_a_client_cannot_claim_another_principal(restricted: Raw) -> None:
    """No request metadata names a principal: what the client listener once took for a
    forwarded request's is ignored (forwarding travels in envelopes between nodes)."""
    forged = (("tidelog-forwarded-by", "1"), ("tidelog-forwarded-principal", "User:admin"))
    request = pb.ListOffsetsRequest(topics=[
        pb.ListOffsetsTopic(name="b", partitions=[pb.ListOffsetsPartition(timestamp=-1)])])
    answer = restricted.stub(1).ListOffsets(request, timeout=10, metadata=forged)
    assert answer.topics[0].partitions[0].error_code == TOPIC_DENIED


def test_the_client_raises_authorization_errors_naming_the_resource(restricted: Raw) -> None:
    with Client(restricted.cluster.bootstrap, request_timeout_ms=20_000) as client:
        assert client.list_offsets({TopicPartition("a", 0): -1})[("a", 0)].offset >= 2
        with pytest.raises(errors.TopicAuthorizationFailedError, match="topic 'a'"):
            client.producer().send("a", b"x").result(timeout=20)
        with pytest.raises(errors.ClusterAuthorizationFailedError, match="ALTER cluster"):
            client.admin.create_acls([GRANTS[0]])
        with pytest.raises(errors.GroupAuthorizationFailedError, match="group 'h'"):
            client.admin.list_consumer_group_offsets("h")
        # b is not in the metadata at all: asked for by name, it is refused (not retried
        # until the deadline as a topic that does not exist yet, RequestTimedOutError).
        with pytest.raises(errors.TopicAuthorizationFailedError, match="topic 'b'"):
            client.list_offsets({TopicPartition("b", 0): -1})
        with pytest.raises(errors.TopicAuthorizationFailedError, match="topic 'b'"):
            client.producer().send("b", b"x").result(timeout=20)
        consumer = client.consumer()
        consumer.assign([TopicPartition("b", 0)])
        consumer.seek(TopicPartition("b", 0), 0)
        with pytest.raises(errors.TopicAuthorizationFailedError, match="topic 'b'"):
            consumer.poll(timeout_ms=15_000)
        consumer.close()
        consumer = client.consumer()
        consumer.assign([TopicPartition("a", 0)])  # described, but not readable
        consumer.seek(TopicPartition("a", 0), 0)
        with pytest.raises(errors.TopicAuthorizationFailedError, match="READ topic 'a'"):
            consumer.poll(timeout_ms=15_000)
        consumer.close()


def test_acl_calls_of_the_client_and_the_cli_round_trip(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The authorizer on with allow.everyone.if.no.acl.found=true: ANONYMOUS manages ACLs
    while the cluster resource has none; a prefixed DENY then closes topics, a deletion opens
    them."""
    with LocalCluster(1, authorizer="acl", allow_everyone_if_no_acl_found="true") as cluster, \
            Raw(cluster) as raw, \
            Client(cluster.bootstrap) as client:
        cli = ("--bootstrap", cluster.bootstrap)
        assert main(["acls", "add", "--allow-principal", "User:alice", "--operation", "read",
                     "--operation", "describe-configs", "--topic", "t", "--group", "g", *cli]) == 0
        assert main(["acls", "list", "--topic", "t", *cli]) == 0
        listed = capsys.readouterr().out
        assert "resourceType=TOPIC, name=t, patternType=LITERAL" in listed
        assert "(principal=User:alice, host=*, operation=DESCRIBE_CONFIGS, " \
            "permissionType=ALLOW)" in listed and "GROUP" not in listed
        assert main(["acls", "remove", "--group", "g", "--allow-principal", "User:alice",
                     "--operation", "read", *cli]) == 0
        assert "removed ALLOW User:alice READ from * on group 'g'" in capsys.readouterr().out
        assert len(client.admin.describe_acls()) == 3
        assert main(["acls", "remove", "--topic", "t", "--group", "g", *cli]) == 0
        assert client.admin.describe_acls() == []
        assert main(["acls", "add", "--deny-principal", "User:mallory", "--topic", "secret.",
                     "--resource-pattern-type", "prefixed", *cli]) == 0
        assert client.admin.describe_acls() == [AclBinding(
            ResourcePattern(ResourceType.TOPIC, "secret.", PatternType.PREFIXED),
            AccessControlEntry("User:mallory", Operation.ALL, Permission.DENY))]
        assert main(["acls", "remove", "--topic", "secret.", "--resource-pattern-type",
                     "prefixed", *cli]) == 0
        assert client.admin.describe_acls() == []
        raw.create_topic("secret.keys", 1, 1)
        deny = AclBinding(ResourcePattern(ResourceType.TOPIC, "secret.", PatternType.PREFIXED),
                          AccessControlEntry("User:*", Operation.ALL, Permission.DENY))
        admin = grant(ANONYMOUS, Operation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME)
        client.admin.create_acls([deny, admin, deny])
        assert client.admin.describe_acls() == [deny, admin]
        match = AclBindingFilter(ResourcePatternFilter(ResourceType.TOPIC, "secret.keys",
                                                       PatternType.MATCH))
        assert client.admin.describe_acls(match) == [deny]
        assert raw.list_offset(1, "secret.keys", 0, -1).error_code == TOPIC_DENIED
        with pytest.raises(errors.InvalidRequestError, match="kafka-cluster"):
            client.admin.create_acls([grant(ANONYMOUS, Operation.ALTER, ResourceType.CLUSTER, "x")])
        # What the wire may carry that no binding is: each creation answered on its own.
        creations = [pb.AclCreation(resource_type=99, resource_name="t", principal=ANONYMOUS,
                                    operation=3, permission_type=3),
                     pb.AclCreation(resource_type=2, resource_name="t", principal=ANONYMOUS,
                                    operation=3, permission_type=0),
                     pb.AclCreation(resource_type=3, resource_name="g", principal=ANONYMOUS,
                                    operation=3, permission_type=3)]  # unset pattern: literal
        answer = raw.stub(1).CreateAcls(pb.CreateAclsRequest(creations=creations), timeout=30)
        assert [r.error_code for r in answer.results] == [42, 42, 0]
        assert "unknown ResourceType code 99" in answer.results[0].error_message
        assert "permission UNKNOWN cannot be stored" in answer.results[1].error_message
        bad_filter = pb.DescribeAclsRequest(filter=pb.AclFilter(operation=77))
        assert raw.stub(1).DescribeAcls(bad_filter, timeout=10).error_code == 42
        assert (grant(ANONYMOUS, Operation.READ, ResourceType.GROUP, "g")
                in client.admin.describe_acls())
        gone = client.admin.delete_acls([AclBindingFilter(
            entry=AccessControlEntryFilter(permission=Permission.DENY))])
        assert gone == [deny]
        assert client.admin.describe_acls() == [
            admin, grant(ANONYMOUS, Operation.READ, ResourceType.GROUP, "g")]
        assert raw.list_offset(1, "secret.keys", 0, -1).error_code == 0


def test_without_an_authorizer_acls_are_kept_but_decide_nothing(tmp_path: Path) -> None:
    """``authorizer=none`` (the default): an ACL stored while the authorizer was on stays in
    the metadata log but refuses nothing, and the ACL APIs answer SECURITY_DISABLED (54), as
    Kafka's do without an authorizer, rather than store ACLs that would silently not apply."""
    deny = AclBinding(ResourcePattern(ResourceType.TOPIC, "t"),
                      AccessControlEntry("User:*", Operation.ALL, Permission.DENY))
    with LocalCluster(1, tmp_path, authorizer="acl", super_users=ANONYMOUS) as cluster, \
            Raw(cluster) as raw, Client(cluster.bootstrap) as client:
        raw.create_topic("t", 1, 1)
        client.admin.create_acls([deny])
    with LocalCluster(1, tmp_path) as cluster, \
            Raw(cluster) as raw, Client(cluster.bootstrap) as client:
        raw.wait_leaders("t", 1)
        assert raw.list_offset(1, "t", 0, -1).error_code == 0
        with pytest.raises(errors.SecurityDisabledError, match="authorizer=none"):
            client.admin.create_acls([deny])
        assert raw.stub(1).DescribeAcls(pb.DescribeAclsRequest(), timeout=10).error_code == 54
        deleted = raw.stub(1).DeleteAcls(
            pb.DeleteAclsRequest(filters=[pb.AclFilter()]), timeout=10)
        assert [r.error_code for r in deleted.filter_results] == [54]


def test_two_principals_over_mutual_tls() -> None:
    """With client certificates the principal is the certificate's subject. The harness's
    client (User:CN=client) is a super user and sets up; alice (User:CN=alice) may READ topic
    a (so DESCRIBE it too) and group g, nothing else. LocalCluster makes the nodes
    (User:CN=node-N) super users, so a request one of them forwards keeps alice's principal:
    were a node's own principal used instead, the commit would be refused whole (30)."""
    alice_acls = [grant("User:CN=alice", Operation.READ, ResourceType.TOPIC, "a"),
                  grant("User:CN=alice", Operation.READ, ResourceType.GROUP, "g")]
    with LocalCluster(tls=True, super_users="User:CN=client", **OPTIONS) as cluster, \
            Raw(cluster) as admin, \
            Client(cluster.bootstrap, **cluster.client_options) as admin_client:
        for topic in ("a", "b"):
            admin.create_topic(topic, 1, 3)
            admin.produce_acknowledged(topic, 0, [[b"one"]])
        coordinator = found(admin, 1, "g").node_id
        admin_client.admin.create_acls(alice_acls)
        applied_everywhere(admin, len(alice_acls))
        files = CertificateAuthority(cluster.tls_dir).issue("alice", "alice")
        alice_options = {"security_protocol": "SSL", "ssl_cafile": str(files.cafile),
                         "ssl_certfile": str(files.certfile), "ssl_keyfile": str(files.keyfile)}
        alice = Security(**alice_options)

        def as_alice(node: int) -> tidelog_pb2_grpc.TidelogStub:
            return tidelog_pb2_grpc.TidelogStub(alice.channel(cluster.address_of(node)))

        lookups = pb.ListOffsetsRequest(topics=[
            pb.ListOffsetsTopic(name=name, partitions=[pb.ListOffsetsPartition(timestamp=-1)])
            for name in ("a", "b")
        ])
        answers = by_partition(as_alice(leader(admin, "a")).ListOffsets(lookups, timeout=10))
        assert answers["a"].error_code == 0 and answers["a"].offset >= 1
        assert answers["b"].error_code == TOPIC_DENIED
        assert "User:CN=alice is not authorized to DESCRIBE topic 'b'" in \
            answers["b"].error_message
        assert admin.list_offset(leader(admin, "b"), "b", 0, -1).error_code == 0

        request = commit_request("g", {("a", 0): (1, -1, ""), ("b", 0): (1, -1, "")})
        for node in (coordinator, other_than(admin, coordinator)):
            assert settled_commit(as_alice(node), request) == {
                ("a", 0): 0, ("b", 0): TOPIC_DENIED}
        assert settled_commit(admin.stub(other_than(admin, coordinator)), request) == {
            ("a", 0): 0, ("b", 0): 0}

        seen = as_alice(2).Metadata(pb.MetadataRequest(), timeout=10)
        assert {t.name for t in seen.topics} == {"a"}
        assert {"a", "b"} <= {t.name for t in admin.stub(2).Metadata(
            pb.MetadataRequest(), timeout=10).topics}

        with Client(cluster.bootstrap, **alice_options) as alice_client:
            with pytest.raises(errors.TopicAuthorizationFailedError, match="topic 'b'"):
                alice_client.list_offsets({TopicPartition("b", 0): -1})
            with pytest.raises(errors.ClusterAuthorizationFailedError,
                               match="User:CN=alice is not authorized to ALTER cluster"):
                alice_client.admin.create_acls(alice_acls)
