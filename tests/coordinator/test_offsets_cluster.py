"""Consumer offsets on real node processes (contract §8, kafka-mapping §7): the internal topic
and where groups live in it (FindCoordinator), commits and fetches on the coordinator and
forwarded from other nodes, the errors of bad input, deleting and listing groups. Requests are
built here with the raw stubs, so every field is what the test says."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.protobuf.message import Message
from offsets_helpers import (
    NOT_COORDINATOR,
    OFFSETS,
    RETRIABLE,
    Committed,
    codes,
    commit,
    commit_request,
    committed,
    coordinator_of,
    fetched,
    find,
    forwarded,
    found,
    offsets_keys,
    other_than,
)

from tidelog import Client, errors
from tidelog.hashing import group_partition
from tidelog.testing import LocalCluster, Raw, wait_for
from tidelog.v1 import tidelog_pb2 as pb

pytestmark = pytest.mark.timeout(180)

PARTITIONS = 5
TOPIC = "events"
TOPIC_PARTITIONS = 4


@pytest.fixture(scope="module")
def cluster_options() -> dict[str, Any]:
    # A small max.message.bytes, so that a commit of metadata at the limit on each of four
    # partitions is too large (4 x 12 KiB), and one of the longest group id (32 KiB) is not.
    return {"nodes": 3, "offsets_topic_num_partitions": PARTITIONS, "max.message.bytes": 40_000,
            "transaction_state_log_num_partitions": 1}


@pytest.fixture(scope="module")
def coordinators(raw: Raw) -> Iterator[Raw]:
    """The module's cluster once its offsets topic exists and every partition has a leader."""
    found(raw, 1, "warm-up")
    raw.wait_leaders(OFFSETS, PARTITIONS)
    raw.create_topic(TOPIC, TOPIC_PARTITIONS, 3)
    yield raw


# ---- the topic and FindCoordinator ----------------------------------------------------------


def test_the_first_find_coordinator_creates_the_topic_and_answers_not_available_meanwhile(
    fresh_cluster: LocalCluster, fresh_raw: Raw
) -> None:
    """Asked of a node that is not the controller, before the topic exists: 15 with a reason,
    and the topic comes, compacted, with the configured partitions and replication factor."""
    controller = wait_for(
        lambda: fresh_raw.stub(1).Metadata(pb.MetadataRequest(), timeout=5).controller_id + 1,
        what="a controller",
    ) - 1
    asked = next(n for n in fresh_cluster.node_ids if n != controller)
    first = find(fresh_raw, asked, "g")
    assert first.error_code == errors.CoordinatorNotAvailableError.code, first
    assert first.error_message and first.node_id == -1 and not first.address
    answer = found(fresh_raw, asked, "g")
    # The answer may come forwarded from the controller while the asked node has yet to apply
    # the topic's record; its own Metadata shows the topic once it has.
    def shown() -> pb.TopicMetadata | None:
        md = fresh_raw.metadata(asked, OFFSETS)
        return md if md.partitions else None

    md = wait_for(shown, what="the asked node's metadata to show the offsets topic")
    assert len(md.partitions) == PARTITIONS
    assert all(len(p.replicas) == 3 for p in md.partitions)
    assert md.configs["cleanup.policy"] == "compact"
    assert int(md.configs["segment.bytes"]) == 1024 * 1024  # replays stay short
    leader = fresh_raw.wait_leaders(OFFSETS, PARTITIONS)[group_partition("g", PARTITIONS)]
    assert answer.node_id == leader
    assert answer.address == fresh_cluster.address_of(leader)


@pytest.mark.parametrize(
    ("group", "hash_code"),
    [("", 0), ("grp", 102629), ("foo", 101574), ("my-group", -1906497762),
     ("test-group", 627841412), ("polygenelubricants", -2147483648)],
)
def test_every_node_names_the_leader_of_the_groups_partition(
    coordinators: Raw, group: str, hash_code: int
) -> None:
    """kafka-mapping §7.3's vectors: abs (MIN_VALUE -> 0) of Java's hashCode, modulo the
    topic's partitions."""
    partition = (0 if hash_code == -2**31 else abs(hash_code)) % PARTITIONS
    assert group_partition(group, PARTITIONS) == partition

    def agreed() -> int | None:
        leader = coordinators.wait_leaders(OFFSETS, PARTITIONS)[partition]
        answers = [find(coordinators, n, group) for n in coordinators.cluster.node_ids]
        return leader if all(a.error_code == 0 and a.node_id == leader for a in answers) else None

    wait_for(agreed, 30, f"every node to name the coordinator of {group!r}")


def test_the_offsets_topic_is_internal_in_metadata_and_not_listed(coordinators: Raw) -> None:
    """As Kafka's: Metadata flags it internal, and a user listing topics does not see it."""
    assert coordinators.metadata(1, OFFSETS).is_internal
    assert not coordinators.metadata(1, TOPIC).is_internal
    client = Client(coordinators.cluster.bootstrap)
    try:
        listed = client.admin.list_topics()
    finally:
        client.close()
    assert TOPIC in listed and OFFSETS not in listed


def test_users_cannot_create_or_delete_the_offsets_topic(coordinators: Raw) -> None:
    created = coordinators.create_topic_once(OFFSETS, 1, 1, {})
    assert created.topics[0].error_code == errors.InvalidTopicError.code, created
    deleted = coordinators.stub(2).DeleteTopics(
        pb.DeleteTopicsRequest(topic_names=[OFFSETS], timeout_ms=10_000), timeout=20
    )
    assert deleted.topics[0].error_code == errors.InvalidTopicError.code, deleted
    assert len(coordinators.metadata(1, OFFSETS).partitions) == PARTITIONS


def test_find_coordinator_refuses_unknown_key_types(coordinators: Raw) -> None:
    """Key type 1 looks for a transactional id's coordinator (__transaction_state, created on
    first use: 15 meanwhile); any other key type is malformed."""
    answer = find(coordinators, 1, "txn", key_type=1)
    assert answer.error_code in (0, errors.CoordinatorNotAvailableError.code), answer
    for key_type in (-1, 2, 2**31 - 1):
        with pytest.raises(grpc.RpcError) as info:
            find(coordinators, 2, "g", key_type=key_type)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert find(coordinators, 3, "still-answers").error_code == 0


# ---- commit and fetch ----------------------------------------------------------------------


def test_commit_then_fetch_on_the_coordinator_and_through_another_node(coordinators: Raw) -> None:
    raw = coordinators
    group = "readers"
    coordinator = coordinator_of(raw, group)
    other = other_than(raw, coordinator)
    first = {(TOPIC, 0): Committed(42, 3, "meta"), (TOPIC, 1): Committed(7)}
    committed(raw, coordinator, group, first)
    for node in (coordinator, other):
        values = fetched(raw, node, group, [(TOPIC, 0), (TOPIC, 1), (TOPIC, 2), ("nope", 0)])
        assert values == {
            (TOPIC, 0): Committed(42, 3, "meta"), (TOPIC, 1): Committed(7),
            (TOPIC, 2): Committed(-1), ("nope", 0): Committed(-1),
        }
    # Committed through a node that is not the coordinator: forwarded, and read back at once.
    committed(raw, other, group, {(TOPIC, 1): Committed(8, 4, "")})
    assert fetched(raw, coordinator, group) == {
        (TOPIC, 0): Committed(42, 3, "meta"), (TOPIC, 1): Committed(8, 4, ""),
    }
    assert fetched(raw, other, "nobody-commits-here") == {}


def test_a_fetch_after_an_acknowledged_commit_sees_it_from_every_node(coordinators: Raw) -> None:
    raw = coordinators
    nodes = raw.cluster.node_ids
    for number in range(15):
        committed(raw, nodes[number % len(nodes)], "linear", {(TOPIC, 2): Committed(number)})
        for node in nodes:
            assert fetched(raw, node, "linear") == {(TOPIC, 2): Committed(number)}, node


def test_unset_fields_mean_kafkas_defaults(coordinators: Raw) -> None:
    """No leader epoch is -1, no metadata is "" (Kafka stores a null metadata as "")."""
    raw = coordinators
    node = coordinator_of(raw, "defaults")
    committed_raw = commit_request("defaults", {(TOPIC, 0): (5, None, None)})
    wait_for(lambda: commit(raw, node, committed_raw) == {(TOPIC, 0): 0}, 60, "the commit")
    assert fetched(raw, node, "defaults") == {(TOPIC, 0): Committed(5, -1, "")}


def test_metadata_too_large_beside_a_good_partition(coordinators: Raw) -> None:
    """Over offset.metadata.max.bytes Java characters (UTF-16 units): 12 for that partition,
    the others commit; exactly the limit is fine."""
    raw = coordinators
    group = "chatty"
    node = coordinator_of(raw, group)
    fetched(raw, node, group)  # loaded
    request = commit_request(group, {
        (TOPIC, 0): Committed(1, -1, "x" * 4096),
        (TOPIC, 1): Committed(2, -1, "x" * 4097),
        (TOPIC, 2): Committed(3, -1, "é" * 4096),
        (TOPIC, 3): Committed(4, -1, "\U0001f600" * 2049),  # 4098 UTF-16 units
    })
    answer = commit(raw, node, request)
    too_large = errors.OffsetMetadataTooLargeError.code
    assert answer == {(TOPIC, 0): 0, (TOPIC, 1): too_large, (TOPIC, 2): 0, (TOPIC, 3): too_large}
    assert fetched(raw, node, group) == {
        (TOPIC, 0): Committed(1, -1, "x" * 4096), (TOPIC, 2): Committed(3, -1, "é" * 4096),
    }


def test_unknown_topics_and_partitions_and_duplicates_are_refused_alone(
    coordinators: Raw,
) -> None:
    raw = coordinators
    group = "careless"
    node = coordinator_of(raw, group)
    fetched(raw, node, group)
    request = commit_request(group, {
        ("nope", 0): Committed(1), (TOPIC, TOPIC_PARTITIONS): Committed(1),
        (TOPIC, -1): Committed(1), (TOPIC, 1): Committed(11),
    })
    request.topics.add(name=TOPIC).partitions.add(partition=2, committed_offset=5)
    request.topics.add(name=TOPIC).partitions.add(partition=2, committed_offset=6)
    request.topics.add(name=TOPIC).partitions.add(partition=-1, committed_offset=7)
    response = raw.stub(node).OffsetCommit(request, timeout=30)
    unknown = errors.UnknownTopicOrPartitionError.code
    assert codes(response) == {
        ("nope", 0): unknown, (TOPIC, TOPIC_PARTITIONS): unknown,
        (TOPIC, -1): errors.InvalidRequestError.code,  # named twice, unknown or not
        (TOPIC, 1): 0, (TOPIC, 2): errors.InvalidRequestError.code,
    }
    # One answer per partition, in the order first named, one entry per topic.
    assert [(t.name, [p.partition for p in t.partitions]) for t in response.topics] == [
        ("nope", [0]), (TOPIC, [TOPIC_PARTITIONS, -1, 1, 2]),
    ]
    assert all(p.error_message for t in response.topics for p in t.partitions if p.error_code)
    assert fetched(raw, node, group) == {(TOPIC, 1): Committed(11)}


def test_group_ids_of_any_shape_commit_or_get_kafka_codes(coordinators: Raw) -> None:
    """The empty group id is a group (kafka-mapping §7.5); one whose key cannot be encoded
    (over 32767 bytes of UTF-8) is INVALID_GROUP_ID; a generation for a group that has none is
    ILLEGAL_GENERATION, and for a group that exists (with no members) UNKNOWN_MEMBER_ID."""
    raw = coordinators
    for group in ("", "grüße 🙂", "a" * 32767):
        committed(raw, 2, group, {(TOPIC, 0): Committed(9)})
        assert fetched(raw, 3, group) == {(TOPIC, 0): Committed(9)}
    huge = "b" * 32768
    answer = wait_for(
        lambda: (a := commit(raw, 1, commit_request(huge, {(TOPIC, 0): Committed(1)})))
        and set(a.values()) - RETRIABLE and a, 60, "an answer for the huge group id",
    )
    assert answer == {(TOPIC, 0): errors.InvalidGroupIdError.code}
    generation = commit(raw, 1, commit_request("never-seen", {(TOPIC, 0): Committed(1)}, 3))
    assert generation == {(TOPIC, 0): errors.IllegalGenerationError.code}
    member = commit(raw, 1, commit_request("", {(TOPIC, 0): Committed(1)}, 0))
    assert member == {(TOPIC, 0): errors.UnknownMemberIdError.code}
    assert fetched(raw, 1, "") == {(TOPIC, 0): Committed(9)}


def test_huge_metadata_and_many_partitions_never_take_a_node_down(coordinators: Raw) -> None:
    raw = coordinators
    group = "greedy"
    node = coordinator_of(raw, group)
    fetched(raw, node, group)
    huge = commit(raw, node, commit_request(group, {(TOPIC, 0): Committed(1, -1, "m" * 4_000_000)}))
    assert huge == {(TOPIC, 0): errors.OffsetMetadataTooLargeError.code}
    # Every partition at the limit: a set larger than max.message.bytes cannot be appended
    # (the new coordinator's mapping of the "too large" errors, kafka-mapping §7.5).
    big = {(TOPIC, p): Committed(p, -1, "\u0800" * 4096) for p in range(TOPIC_PARTITIONS)}
    request = commit_request(group, big)
    for extra in range(200):
        request.topics.add(name="nope").partitions.add(partition=extra)
    answer = commit(raw, node, request)
    assert {answer[tp] for tp in big} == {errors.UnknownServerError.code}
    assert answer[("nope", 0)] == errors.UnknownTopicOrPartitionError.code
    assert fetched(raw, node, group) == {}
    for n in raw.cluster.node_ids:
        assert raw.cluster.is_running(n)


def test_a_forwarded_request_is_never_forwarded_again(coordinators: Raw) -> None:
    """A node that is not the coordinator answers a request another node forwarded to it
    with NOT_COORDINATOR, for each request kind, instead of passing it on."""
    raw = coordinators
    group = "looped"
    coordinator = coordinator_of(raw, group)
    committed(raw, coordinator, group, {(TOPIC, 0): Committed(3)})
    other = other_than(raw, coordinator)
    with grpc.insecure_channel(raw.cluster.internal_address_of(other)) as channel:

        def ask(method: str, request: Message) -> Any:
            return forwarded(channel, method, request, 30).result()

        answer = ask("OffsetCommit", commit_request(group, {(TOPIC, 0): Committed(4)}))
        assert codes(answer) == {(TOPIC, 0): NOT_COORDINATOR}
        assert ask("OffsetFetch", pb.OffsetFetchRequest(group_id=group)).error_code == \
            NOT_COORDINATOR
        deleted = ask("OffsetDelete", pb.OffsetDeleteRequest(group_id=group))
        assert deleted.error_code == NOT_COORDINATOR
        groups = ask("DeleteGroups", pb.DeleteGroupsRequest(group_ids=[group]))
        assert [r.error_code for r in groups.results] == [NOT_COORDINATOR]
    assert fetched(raw, other, group) == {(TOPIC, 0): Committed(3)}


def test_concurrent_commits_share_appends(coordinators: Raw) -> None:
    """Group commit: commits that arrive together go to the log in fewer batches than there
    are commits, each commit's records inside one batch."""
    raw = coordinators
    groups = [f"many-{i}" for i in range(200)]
    partition = group_partition(groups[0], PARTITIONS)
    groups = [g for g in groups if group_partition(g, PARTITIONS) == partition][:16]
    node = coordinator_of(raw, groups[0])
    fetched(raw, node, groups[0])
    before = len(offsets_keys(raw, partition))
    failures: list[BaseException] = []

    def committer(group: str) -> None:
        try:
            for round_ in range(5):
                offsets = {(TOPIC, p): Committed(round_ * 10 + p) for p in range(TOPIC_PARTITIONS)}
                assert set(commit(raw, node, commit_request(group, offsets)).values()) == {0}
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=committer, args=(g,)) for g in groups]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not failures, failures
    for group in groups:
        assert fetched(raw, node, group) == {
            (TOPIC, p): Committed(40 + p) for p in range(TOPIC_PARTITIONS)
        }
    written = offsets_keys(raw, partition)[before:]
    commits = len(groups) * 5
    assert len(written) == commits * TOPIC_PARTITIONS
    for i in range(0, len(written), TOPIC_PARTITIONS):  # a commit's set never spans batches
        one = written[i:i + TOPIC_PARTITIONS]
        assert len({(base, group) for base, _, group, _, _ in one}) == 1, one
    assert len({base for base, *_ in written}) < commits


def test_groups_live_in_the_partition_their_hash_names(coordinators: Raw) -> None:
    """The §7.3 vectors, in the log: each group's records are in partition
    abs(hashCode) % partitions."""
    raw = coordinators
    vectors = ["", "grp", "foo", "my-group", "test-group", "polygenelubricants"]
    for group in vectors:
        committed(raw, 1, group, {(TOPIC, 3): Committed(77)})
    for group in vectors:
        holders = {p for p in range(PARTITIONS)
                   if any(g == group and t == TOPIC for _, _, g, t, _ in offsets_keys(raw, p))}
        assert holders == {group_partition(group, PARTITIONS)}, group


# ---- delete and list -----------------------------------------------------------------------


def test_offset_delete_removes_partitions_and_refuses_unknown_groups(coordinators: Raw) -> None:
    raw = coordinators
    group = "pruned"
    node = coordinator_of(raw, group)
    committed(raw, node, group, {(TOPIC, 0): Committed(1), (TOPIC, 1): Committed(2)})
    request = pb.OffsetDeleteRequest(group_id=group)
    request.topics.add(name=TOPIC, partitions=[0, 3])
    request.topics.add(name="nope", partitions=[0])
    answer = raw.stub(other_than(raw, node)).OffsetDelete(request, timeout=30)
    assert answer.error_code == 0, answer
    assert {(t.name, p.partition): p.error_code for t in answer.topics for p in t.partitions} == {
        (TOPIC, 0): 0, (TOPIC, 3): 0, ("nope", 0): errors.UnknownTopicOrPartitionError.code,
    }
    assert fetched(raw, node, group) == {(TOPIC, 1): Committed(2)}
    unknown = raw.stub(node).OffsetDelete(pb.OffsetDeleteRequest(group_id="ghost"), timeout=30)
    assert unknown.error_code == errors.GroupIdNotFoundError.code


def test_list_groups_and_delete_groups(coordinators: Raw) -> None:
    raw = coordinators
    names = ["listed-a", "listed-b", "listed-c"]
    for name in names:
        committed(raw, 1, name, {(TOPIC, 0): Committed(1)})

    def listed() -> dict[str, pb.ListedGroup]:
        out: dict[str, pb.ListedGroup] = {}
        for node in raw.cluster.node_ids:
            answer = raw.stub(node).ListGroups(pb.ListGroupsRequest(), timeout=10)
            assert answer.error_code == 0
            for group in answer.groups:
                assert group.group_id not in out  # each group has one coordinator
                out[group.group_id] = group
        return out

    groups = listed()
    for name in names:
        assert groups[name].group_state == "Empty" and groups[name].protocol_type == ""
        assert groups[name].coordinator_id == coordinator_of(raw, name)
    only_stable = raw.stub(1).ListGroups(pb.ListGroupsRequest(states_filter=["Stable"]),
                                         timeout=10)
    assert not only_stable.groups
    answer = raw.stub(2).DeleteGroups(
        pb.DeleteGroupsRequest(group_ids=["listed-a", "listed-b", "ghost", "listed-c",
                                          "listed-c"]), timeout=30,
    )
    assert [(r.group_id, r.error_code) for r in answer.results] == [
        ("listed-a", 0), ("listed-b", 0), ("ghost", errors.GroupIdNotFoundError.code),
        ("listed-c", errors.InvalidRequestError.code),
    ]
    assert fetched(raw, 3, "listed-a") == {} and fetched(raw, 3, "listed-b") == {}
    assert fetched(raw, 3, "listed-c") == {(TOPIC, 0): Committed(1)}
    assert not {"listed-a", "listed-b"} & set(listed())
