"""Consumer groups through the Kafka listener with real clients, each member in its own
process: classic members (kafka-python, aiokafka, librdkafka's classic protocol) hosted in
Tidelog's KIP-848 groups, confluent-kafka with ``group.protocol=consumer``
(ConsumerGroupHeartbeat), and a group mixing a Tidelog-client member with a kafka-python one.
No partition is ever owned by two members, judged from the members' own rebalance callbacks
ordered by the machine's monotonic clock; a killed member's partitions move to the others
within its session timeout, and its successors resume at its commits; the error codes of the
classic APIs and of the KIP-848 ones."""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.consumer.metadata import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
)
from kafka_wire import ask
from kio.schema.consumer_group_describe.v1.request import ConsumerGroupDescribeRequest
from kio.schema.consumer_group_heartbeat.v0.request import (
    ConsumerGroupHeartbeatRequest as ConsumerGroupHeartbeatRequestV0,
)
from kio.schema.consumer_group_heartbeat.v1.request import ConsumerGroupHeartbeatRequest
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest
from kio.schema.heartbeat.v4.request import HeartbeatRequest
from kio.schema.join_group.v9.request import JoinGroupRequest, JoinGroupRequestProtocol
from kio.schema.leave_group.v5.request import LeaveGroupRequest, MemberIdentity
from kio.schema.sync_group.v5.request import SyncGroupRequest
from kio.static.primitive import i32

from tidelog import Client, ConsumerRebalanceListener, TopicPartition
from tidelog.node.kafka.consumer_protocol import (
    BadSubscription,
    assignment_bytes,
    read_subscription,
)
from tidelog.node.kafka.metadata import tidelog_topic_id
from tidelog.testing import LocalCluster, wait_for

pytestmark = pytest.mark.timeout(180)

PARTITIONS = 6
#: How long a group may take to settle or to move a killed member's partitions (its session
#: timeout is 6 s: tests/kafka/group_member.py) on a loaded machine.
SETTLE_S = 40.0
MEMBER_SCRIPT = Path(__file__).with_name("group_member.py")


@pytest.fixture(scope="module")
def cluster_options() -> dict[str, Any]:
    return {
        "nodes": 1,
        "offsets_topic_num_partitions": 2,
        "group_consumer_session_timeout_ms": 6000,
        "group_consumer_heartbeat_interval_ms": 300,
    }


@pytest.fixture(scope="module")
def client(cluster: LocalCluster) -> Iterator[Client]:
    with Client(cluster.bootstrap) as made:
        yield made


def _topic(client: Client, name: str, records_per_partition: int) -> str:
    client.create_topic(name, partitions=PARTITIONS, replication_factor=1)
    wait_for(lambda: all(p.leader >= 0 for p in client.describe_topics([name])[name].partitions),
             SETTLE_S, "the topic's leaders")
    _produce(client, name, records_per_partition)
    return name


def _produce(client: Client, topic: str, per_partition: int) -> None:
    with client.producer() as producer:
        for p in range(PARTITIONS):
            for i in range(per_partition):
                producer.send(topic, value=f"{p}-{i}".encode(), partition=p)
        producer.flush()


class Ownership:
    """Every member's rebalance callbacks and records, stamped with the monotonic clock, and
    who owned what, replayed in time order. Callbacks are deltas: an eager classic member is
    revoked everything and then assigned its whole share; KIP-848 members get increments."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.events: list[tuple[float, str, str, list[int]]] = []

    def add(self, t: float, member: str, kind: str, partitions: list[int]) -> None:
        with self._lock:
            self.events.append((t, member, kind, partitions))

    def replay(self) -> tuple[dict[int, str], list[str]]:
        """(partition -> owner now, every moment a partition had two owners)."""
        with self._lock:
            events = sorted(self.events)
        owners: dict[int, str] = {}
        twice: list[str] = []
        for t, member, kind, partitions in events:
            if kind == "assigned":
                for p in partitions:
                    if owners.get(p, member) != member:
                        twice.append(f"{t:.3f}: {p} to {member} while {owners[p]} owns it")
                    owners[p] = member
            elif kind == "revoked":
                for p in partitions:
                    if owners.get(p) == member:
                        del owners[p]
            elif kind in ("closing", "gone"):  # it reads nothing more / it is dead
                owners = {p: m for p, m in owners.items() if m != member}
        return owners, twice

    def shares(self) -> dict[str, list[int]]:
        owners, _ = self.replay()
        out: dict[str, list[int]] = {}
        for p, member in sorted(owners.items()):
            out.setdefault(member, []).append(p)
        return out

    def consumed(self, member: str | None = None, since: float = 0.0) -> list[tuple[int, int]]:
        """(partition, offset) of every record read (by `member`), after `since`."""
        with self._lock:
            return [(p, o) for t, m, kind, parts in self.events
                    if kind == "records" and t >= since and member in (None, m)
                    for p, o in [(parts[0], off) for off in parts[1:]]]

    def check(self) -> None:
        _, twice = self.replay()
        assert not twice, twice


class MemberProcess:
    """A classic member of a real client in its own process (tests/kafka/group_member.py)."""

    def __init__(self, name: str, kind: str, bootstrap: str, group: str, topic: str,
                 ownership: Ownership, log_dir: Path, instance_id: str | None = None) -> None:
        self.name = name
        self.ownership = ownership
        self.log = log_dir / f"{name}.log"
        with self.log.open("w") as stderr:
            self.process = subprocess.Popen(
                [sys.executable, str(MEMBER_SCRIPT), kind, bootstrap, group, topic,
                 *([instance_id] if instance_id else [])],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True,
            )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            event = json.loads(line)
            kind = event["kind"]
            if kind == "records":
                parts = [event["partition"], *event["offsets"]]
            else:
                parts = event.get("partitions", [])
            self.ownership.add(event["t"], self.name, kind, parts)

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()
        self.ownership.add(time.monotonic(), self.name, "gone", [])

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write("close\n")
        self.process.stdin.flush()
        self.process.wait(timeout=SETTLE_S)
        self._reader.join(timeout=SETTLE_S)
        self.ownership.add(time.monotonic(), self.name, "gone", [])

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def stderr(self) -> str:
        return self.log.read_text()[-3000:]


@pytest.fixture
def members(cluster: LocalCluster, tmp_path: Path) -> Iterator[Any]:
    """Starts member processes; every one still running is killed at the end."""
    started: list[MemberProcess] = []

    def start(name: str, kind: str, group: str, topic: str, ownership: Ownership,
              instance_id: str | None = None) -> MemberProcess:
        member = MemberProcess(name, kind, cluster.kafka_bootstrap, group, topic, ownership,
                               tmp_path, instance_id)
        started.append(member)
        return member

    yield start
    for member in started:
        member.stop()


def _settled(ownership: Ownership, names: set[str], records: int) -> bool:
    """Every partition owned, by `names` exactly, and `records` distinct records read."""
    shares = ownership.shares()
    return set(shares) == names and sum(map(len, shares.values())) == PARTITIONS and \
        len(set(ownership.consumed())) >= records


@pytest.mark.parametrize("kind", ["kafka-python", "confluent-cooperative", "confluent-consumer"])
def test_members_share_partitions_and_a_killed_ones_move_at_its_commits(
    cluster: LocalCluster, client: Client, members: Any, kind: str
) -> None:
    """kafka-python (classic, eager), librdkafka's classic cooperative-sticky, or
    confluent-kafka with group.protocol=consumer (KIP-848)."""
    topic = _topic(client, f"{kind}-kill", 10)
    group = f"{kind}-group"
    ownership = Ownership()
    a, b, c = (members(name, kind, group, topic, ownership) for name in ("a", "b", "c"))
    wait_for(lambda: _settled(ownership, {"a", "b", "c"}, 60) and sorted(
        map(len, ownership.shares().values())) == [2, 2, 2], SETTLE_S,
        lambda: f"three members sharing evenly; {ownership.shares()} {b.stderr()}")
    ownership.check()
    # ConsumerGroupDescribe names the three, classic or not, with their topic ids.
    [described] = ask(cluster.kafka_bootstrap, ConsumerGroupDescribeRequest(
        group_ids=(group,), include_authorized_operations=False)).groups
    assert described.error_code == ErrorCode.none and len(described.members) == 3
    owned = []
    for member in described.members:
        for entry in member.assignment.topic_partitions:
            assert entry.topic_name == topic and tidelog_topic_id(entry.topic_id) > 0
            owned += entry.partitions
    assert sorted(owned) == list(range(PARTITIONS))

    # b dies without leaving: its partitions move to a and c once its session runs out, and
    # they start where b's commits say.
    lost = ownership.shares()["b"]
    wait_for(lambda: all(
        o.offset == 10 for o in client.admin.list_consumer_group_offsets(
            group, [TopicPartition(topic, p) for p in lost]).values()), SETTLE_S,
        "b's commits")
    b.kill()
    killed_at = time.monotonic()
    _produce(client, topic, 5)
    wait_for(lambda: _settled(ownership, {"a", "c"}, 90), SETTLE_S,
             lambda: f"b's partitions moved; {ownership.shares()} {a.stderr()}")
    ownership.check()
    for p in lost:
        first = min(o for q, o in ownership.consumed(since=killed_at) if q == p)
        assert first == 10, (p, first)

    # c leaves: a owns everything.
    c.close()
    wait_for(lambda: ownership.shares() == {"a": list(range(PARTITIONS))}, SETTLE_S,
             lambda: f"a alone; {ownership.shares()}")
    wait_for(lambda: client.admin.list_consumer_group_offsets(group)[
        TopicPartition(topic, 0)].offset == 15, SETTLE_S, "a's commits")
    a.close()
    ownership.check()


def test_aiokafka_and_librdkafka_classic_members_share_partitions(
    cluster: LocalCluster, client: Client, members: Any
) -> None:
    topic = _topic(client, "aio-classic", 4)
    ownership = Ownership()
    a = members("a", "aiokafka", "aio-group", topic, ownership)
    b = members("b", "confluent-classic", "aio-group", topic, ownership)
    wait_for(lambda: _settled(ownership, {"a", "b"}, 24), SETTLE_S,
             lambda: f"two members sharing; {ownership.shares()} {a.stderr()}")
    ownership.check()
    b.close()
    wait_for(lambda: ownership.shares() == {"a": list(range(PARTITIONS))}, SETTLE_S,
             lambda: f"a alone; {ownership.shares()}")
    a.close()
    ownership.check()


def test_a_restarted_static_kafka_python_member_takes_its_partitions_back_at_once(
    cluster: LocalCluster, client: Client, members: Any
) -> None:
    """A static member (group.instance.id) killed and started again replaces its old self at
    once: it gets the same partitions and the other member is never asked to take them."""
    topic = _topic(client, "static", 2)
    ownership = Ownership()
    first = members("a", "kafka-python", "static-group", topic, ownership, "instance-a")
    other = members("b", "kafka-python", "static-group", topic, ownership)
    wait_for(lambda: _settled(ownership, {"a", "b"}, 12) and sorted(
        map(len, ownership.shares().values())) == [3, 3], SETTLE_S,
        lambda: f"two members sharing; {ownership.shares()} {first.stderr()}")
    shares = ownership.shares()
    first.kill()
    killed_at = time.monotonic()
    again = members("a2", "kafka-python", "static-group", topic, ownership, "instance-a")
    wait_for(lambda: ownership.shares().get("a2") == shares["a"], SETTLE_S,
             lambda: f"the restarted member's partitions; {ownership.shares()} {again.stderr()}")
    assert ownership.shares()["b"] == shares["b"]
    assert not [parts for t, member, kind, parts in ownership.events
                if t > killed_at and member == "b" and set(parts) & set(shares["a"])]
    other.close()
    again.close()
    ownership.check()


def test_a_group_mixes_a_tidelog_member_and_a_kafka_python_member(
    cluster: LocalCluster, client: Client, members: Any
) -> None:
    topic = _topic(client, "mixed", 3)
    ownership = Ownership()

    class Recording(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
            ownership.add(time.monotonic(), "tidelog", "revoked",
                          sorted(tp.partition for tp in revoked))

        def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
            ownership.add(time.monotonic(), "tidelog", "assigned",
                          sorted(tp.partition for tp in assigned))

    consumer = client.consumer(group_id="mixed-group", auto_offset_reset="earliest")
    stop = threading.Event()

    def poll() -> None:
        consumer.subscribe([topic], listener=Recording())
        while not stop.is_set():
            for record in consumer.poll(100) or ():
                ownership.add(time.monotonic(), "tidelog", "records",
                              [record.partition, record.offset])

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    try:
        wait_for(lambda: set(ownership.shares()) == {"tidelog"}, SETTLE_S, "the Tidelog member")
        kp = members("kp", "kafka-python", "mixed-group", topic, ownership)
        wait_for(lambda: _settled(ownership, {"tidelog", "kp"}, 18), SETTLE_S,
                 lambda: f"both sharing; {ownership.shares()} {kp.stderr()}")
        ownership.check()
        described = client.admin.describe_consumer_group("mixed-group")
        assert len(described.members) == 2
        kp.close()
        wait_for(lambda: ownership.shares() == {"tidelog": list(range(PARTITIONS))}, SETTLE_S,
                 lambda: f"the Tidelog member alone; {ownership.shares()}")
    finally:
        stop.set()
        poller.join(timeout=SETTLE_S)
        consumer.close()
    ownership.check()


def _join_request(group: str, subscription: bytes, **changes: Any) -> JoinGroupRequest:
    """A consumer's JoinGroup v9 with one "range" protocol, but for `changes`."""
    fields: dict[str, Any] = {
        "group_id": group, "session_timeout": datetime.timedelta(seconds=10),
        "rebalance_timeout": datetime.timedelta(seconds=10),
        "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
        "protocols": (JoinGroupRequestProtocol(name="range", metadata=bytes(subscription)),),
        "reason": None,
    }
    fields.update(changes)
    return JoinGroupRequest(**fields)


def test_the_classic_and_kip848_apis_on_the_wire(cluster: LocalCluster, client: Client) -> None:
    """Each classic request and its error codes, and ConsumerGroupHeartbeat v0 (the
    coordinator names the member) and v1's regular expressions, with raw frames."""
    address = cluster.kafka_bootstrap
    topic = _topic(client, "wire", 0)
    subscription = ConsumerProtocolSubscription(
        version=1, topics=[topic], user_data=None, owned_partitions=[]).encode(version=1)

    def join(**changes: Any) -> Any:
        return ask(address, _join_request("wire-group", subscription, **changes))

    assert join(protocol_type="connect").error_code == ErrorCode.inconsistent_group_protocol
    assert join(protocols=()).error_code == ErrorCode.inconsistent_group_protocol
    required = join()
    assert required.error_code == ErrorCode.member_id_required and required.member_id
    member = required.member_id
    garbled = (JoinGroupRequestProtocol(name="range", metadata=b"\x00"),)
    assert join(member_id=member, protocols=garbled).error_code == \
        ErrorCode.inconsistent_group_protocol
    # The coordinator (its partition created by FindCoordinator, as a client would ask).
    ask(address, FindCoordinatorRequest(key="wire-group", key_type=0))
    joined = wait_for(lambda: (lambda answer: answer if answer.error_code == ErrorCode.none
                               else None)(join(member_id=member)), SETTLE_S, "the JoinGroup")
    assert (joined.member_id, joined.protocol_name, joined.leader, joined.members) == \
        (member, "range", "", ())
    generation = joined.generation_id
    assert generation > 0

    def sync(generation_id: int, protocol_type: str = "consumer") -> Any:
        return ask(address, SyncGroupRequest(
            group_id="wire-group", generation_id=i32(generation_id), member_id=member,
            group_instance_id=None, protocol_type=protocol_type, protocol_name="range",
            assignments=()))

    synced = sync(generation)
    assert synced.error_code == ErrorCode.none and synced.protocol_name == "range"
    assignment = ConsumerProtocolAssignment.decode(synced.assignment)
    assert [(t, sorted(ps)) for t, ps in assignment.assigned_partitions] == [
        (topic, list(range(PARTITIONS)))]
    assert sync(generation + 1).error_code == ErrorCode.illegal_generation
    assert sync(generation, "connect").error_code == ErrorCode.inconsistent_group_protocol

    def beat(member_id: str, generation_id: int) -> ErrorCode:
        return ask(address, HeartbeatRequest(  # type: ignore[no-any-return]
            group_id="wire-group", generation_id=i32(generation_id), member_id=member_id,
            group_instance_id=None)).error_code

    assert beat(member, generation) == ErrorCode.none
    assert beat(member, generation + 1) == ErrorCode.illegal_generation
    assert beat("nobody", generation) == ErrorCode.unknown_member_id

    # A KIP-848 member joins the same group (v0: the coordinator names it): the classic
    # member is told to join again, and keeps its partitions until it does.
    kip848 = ask(address, ConsumerGroupHeartbeatRequestV0(
        group_id="wire-group", member_id="", member_epoch=i32(0), instance_id=None,
        rack_id=None, rebalance_timeout=datetime.timedelta(seconds=5),
        subscribed_topic_names=(topic,), server_assignor=None, topic_partitions=()))
    assert kip848.error_code == ErrorCode.none and kip848.member_id
    assert kip848.assignment is not None and kip848.assignment.topic_partitions == ()
    assert beat(member, generation) == ErrorCode.rebalance_in_progress

    left = ask(address, LeaveGroupRequest(group_id="wire-group", members=(
        MemberIdentity(member_id="nobody", group_instance_id=None, reason=None),
        MemberIdentity(member_id=member, group_instance_id=None, reason=None))))
    assert left.error_code == ErrorCode.none
    assert [m.error_code for m in left.members] == [
        ErrorCode.unknown_member_id, ErrorCode.none]
    assert beat(member, generation) == ErrorCode.unknown_member_id
    regex = ask(address, ConsumerGroupHeartbeatRequest(
        group_id="wire-group", member_id="m", member_epoch=i32(0), instance_id=None,
        rack_id=None, rebalance_timeout=datetime.timedelta(seconds=5),
        subscribed_topic_names=None, subscribed_topic_regex="t.*", server_assignor=None,
        topic_partitions=None))
    assert regex.error_code == ErrorCode.invalid_request


def test_the_consumer_protocol_structs_match_kafka_pythons() -> None:
    for version in (0, 1, 2, 3):
        fields: dict[str, Any] = {"topics": ["a", "b"], "user_data": None}
        if version >= 1:
            fields["owned_partitions"] = [ConsumerProtocolSubscription.TopicPartition(
                topic="a", partitions=[2, 0], version=version)]
        if version >= 3:
            fields["rack_id"] = "r1"
        data = ConsumerProtocolSubscription(version=version, **fields).encode(version=version)
        got = read_subscription(bytes(data))
        assert got.topics == ("a", "b")
        assert got.owned == ({"a": (0, 2)} if version >= 1 else {})
        assert got.rack_id == ("r1" if version >= 3 else None)
    decoded = ConsumerProtocolAssignment.decode(assignment_bytes({"a": (0, 1), "b": (3,)}))
    assert sorted((t, list(ps)) for t, ps in decoded.assigned_partitions) == [
        ("a", [0, 1]), ("b", [3])]
    for bad in (b"", b"\x00", b"\xff\xff\x00", b"\x00\x01\x00\x00\x00\x05"):
        with pytest.raises(BadSubscription):
            read_subscription(bad)


def test_a_join_sharing_no_protocol_name_with_the_classic_members_is_inconsistent(
    cluster: LocalCluster, client: Client
) -> None:
    """As Kafka checks a classic member joining a consumer group: one of its protocol
    (assignor) names must be one every other classic member supports, else
    INCONSISTENT_GROUP_PROTOCOL and it does not join."""
    address = cluster.kafka_bootstrap
    topic = _topic(client, "names", 0)
    subscription = ConsumerProtocolSubscription(
        version=1, topics=[topic], user_data=None, owned_partitions=[]).encode(version=1)

    def join(member_id: str, *names: str) -> Any:
        protocols = tuple(JoinGroupRequestProtocol(name=name, metadata=bytes(subscription))
                          for name in names)
        return ask(address, _join_request("names-group", subscription, member_id=member_id,
                                          protocols=protocols))

    ask(address, FindCoordinatorRequest(key="names-group", key_type=0))
    first = wait_for(lambda: (lambda answer: answer if answer.error_code == ErrorCode.none
                              else None)(join("m1", "range", "roundrobin")),
                     SETTLE_S, "the first JoinGroup")
    assert first.protocol_name == "range"
    assert join("m2", "sticky").error_code == ErrorCode.inconsistent_group_protocol
    second = join("m2", "cooperative-sticky", "roundrobin")
    assert second.error_code == ErrorCode.none
    assert join("m3", "range").error_code == ErrorCode.inconsistent_group_protocol
    assert join("m1", "range", "roundrobin").error_code == ErrorCode.none  # m1 again
    left = ask(address, LeaveGroupRequest(group_id="names-group", members=tuple(
        MemberIdentity(member_id=m, group_instance_id=None, reason=None)
        for m in ("m1", "m2", "m3"))))
    assert [m.error_code for m in left.members] == [
        ErrorCode.none, ErrorCode.none, ErrorCode.unknown_member_id]
