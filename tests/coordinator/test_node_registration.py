"""Node registration in the controller's state machine alone (no cluster): the node records,
their encoding and strict decoding, `MetadataImage.nodes`, assigned ids, fencing by epoch, and
the refusals with Kafka's codes (DUPLICATE_BROKER_REGISTRATION, BROKER_ID_NOT_REGISTERED,
STALE_BROKER_EPOCH, INVALID_REQUEST); unregistering a drained, stopped node (and what it
refuses) and its registering afresh; then a joining node's settings and the identity its data
dir keeps."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidelog.cli import build_parser
from tidelog.commands.node import node_config
from tidelog.coordinator.controller import MetadataImage, NodeImage
from tidelog.coordinator.metadata_records import (
    FenceNodeRecord,
    MetadataRecord,
    MetadataRecordError,
    RegisterNodeRecord,
    UnfenceNodeRecord,
    UnregisterNodeRecord,
    decode_record,
    encode_record,
)
from tidelog.errors import (
    BrokerIdNotRegisteredError,
    DuplicateBrokerRegistrationError,
    InvalidConfigError,
    InvalidRequestError,
    StaleBrokerEpochError,
)
from tidelog.node.cluster.registration import META_FILE, Identity, load_identity, save_identity
from tidelog.node.config import NodeConfig

OLD = "0123456789abcdef0123456789abcdef"
NEW = "fedcba9876543210fedcba9876543210"

RECORDS: list[MetadataRecord] = [
    RegisterNodeRecord(4, OLD, "127.0.0.1:7500", "127.0.0.1:7501", True),
    RegisterNodeRecord(0, NEW, "[::1]:1", "node-0.example:65535", False),
    RegisterNodeRecord(5, NEW, "127.0.0.1:7500", "127.0.0.1:7501", False, "127.0.0.1:9092"),
    FenceNodeRecord(4, 17),
    UnfenceNodeRecord(4, 17),
    UnregisterNodeRecord(4, 2**40),
]


@pytest.mark.parametrize("record", RECORDS)
def test_node_records_round_trip(record: MetadataRecord) -> None:
    assert decode_record(encode_record(record)) == record


@pytest.mark.parametrize("record", [
    RegisterNodeRecord(-1, OLD, "127.0.0.1:1", "127.0.0.1:2", False),
    RegisterNodeRecord(1, "0" * 32, "127.0.0.1:1", "127.0.0.1:2", False),
    RegisterNodeRecord(1, OLD.upper(), "127.0.0.1:1", "127.0.0.1:2", False),
    RegisterNodeRecord(1, OLD[:-1], "127.0.0.1:1", "127.0.0.1:2", False),
    RegisterNodeRecord(1, OLD, "127.0.0.1", "127.0.0.1:2", False),
    RegisterNodeRecord(1, OLD, "127.0.0.1:1", "0.0.0.0:2", False),
    RegisterNodeRecord(1, OLD, "127.0.0.1:0", "127.0.0.1:2", False),
    RegisterNodeRecord(1, OLD, "127.0.0.1:1", "host :2", False),
    RegisterNodeRecord(1, OLD, "127.0.0.1:1", "127.0.0.1:2", False, "0.0.0.0:9092"),
    RegisterNodeRecord(1, OLD, "127.0.0.1:1", "127.0.0.1:2", False, "127.0.0.1:0"),
    FenceNodeRecord(-1, 3),
    UnfenceNodeRecord(1, -1),
])
def test_bad_node_records_do_not_decode(record: MetadataRecord) -> None:
    with pytest.raises(MetadataRecordError):
        decode_record(encode_record(record))


def test_damaged_node_records_do_not_decode() -> None:
    encoded = encode_record(RECORDS[0])
    with pytest.raises(MetadataRecordError, match="flag 2"):
        decode_record(encoded[:-1] + b"\x02")
    with pytest.raises(MetadataRecordError):
        decode_record(encoded[:-2])
    with pytest.raises(MetadataRecordError, match="left over"):
        decode_record(encode_record(RECORDS[2]) + b"\x00")


def test_a_node_record_carries_the_kafka_address_only_when_set() -> None:
    """A node without a Kafka listener writes the bytes a record had before the field existed,
    so logs written before it still read; a change of Kafka address is a new registration."""
    without = RegisterNodeRecord(4, OLD, "127.0.0.1:7500", "127.0.0.1:7501", True)
    with_kafka = RegisterNodeRecord(4, OLD, "127.0.0.1:7500", "127.0.0.1:7501", True,
                                    "127.0.0.1:9092")
    assert encode_record(with_kafka).startswith(encode_record(without))
    assert len(encode_record(with_kafka)) > len(encode_record(without))
    image = MetadataImage()
    node = _register(image, 0, 1, OLD, "127.0.0.1:9001", "127.0.0.1:8001", fenced=False,
                     kafka_address="127.0.0.1:9092")
    assert node.kafka_address == "127.0.0.1:9092"
    assert image.plan_register(1, OLD, "127.0.0.1:9001", "127.0.0.1:8001", fenced=False,
                               kafka_address="127.0.0.1:9092") is None
    moved = image.plan_register(1, OLD, "127.0.0.1:9001", "127.0.0.1:8001", fenced=False,
                                kafka_address="127.0.0.1:9093")
    assert moved is not None and moved.kafka_address == "127.0.0.1:9093"
    with pytest.raises(InvalidRequestError, match="Kafka address"):
        image.plan_register(1, OLD, "127.0.0.1:9001", "127.0.0.1:8001", fenced=False,
                            kafka_address="0.0.0.0:9092")


def _register(image: MetadataImage, offset: int, *args: object, **kwargs: object) -> NodeImage:
    record = image.plan_register(*args, **kwargs)  # type: ignore[arg-type]
    assert record is not None
    image.apply(offset, record)
    node = image.node(record.node_id)
    assert node is not None
    return node


def test_registration_fencing_and_the_read_api() -> None:
    image = MetadataImage()
    assert image.cluster_id == ""
    one = _register(image, 0, 1, OLD, "127.0.0.1:9001", "127.0.0.1:8001", fenced=False)
    assert one == NodeImage(1, OLD, 0, "127.0.0.1:9001", "127.0.0.1:8001", False)
    # The cluster id is the first registration's incarnation, as Kafka writes a Uuid.
    assert image.cluster_id == "ASNFZ4mrze8BI0VniavN7w"
    two = _register(image, 1, 2, NEW, "127.0.0.1:9002", "127.0.0.1:8002", fenced=True)
    assert two.epoch == 1 and two.fenced
    assert image.live_node_ids() == [1] and image.registered_node_ids() == [1, 2]
    assert image.plan_fence(2) is None and image.plan_unfence(1) is None
    image.apply(2, image.plan_unfence(2))  # type: ignore[arg-type]
    assert image.live_node_ids() == [1, 2]
    image.apply(3, image.plan_fence(1))  # type: ignore[arg-type]
    assert image.live_node_ids() == [2] and image.node(1).fenced  # type: ignore[union-attr]
    # A record meant for an earlier registration misses the current one.
    again = _register(image, 4, 1, OLD, "127.0.0.1:9011", "127.0.0.1:8011", fenced=False)
    image.apply(5, FenceNodeRecord(1, one.epoch))
    assert image.node(1) == again and not again.fenced and again.epoch == 4
    image.apply(6, UnregisterNodeRecord(2, two.epoch))
    assert image.node(2) is None and image.live_node_ids() == [1]
    assert image.cluster_id == "ASNFZ4mrze8BI0VniavN7w"  # whoever registers or leaves
    assert image.node(99) is None


def test_an_unchanged_registration_writes_nothing() -> None:
    image = MetadataImage()
    _register(image, 0, 1, OLD, "127.0.0.1:9001", "127.0.0.1:8001", fenced=False)
    assert image.plan_register(1, OLD, "127.0.0.1:9001", "127.0.0.1:8001", fenced=False) is None
    changed = image.plan_register(1, OLD, "127.0.0.1:9101", "127.0.0.1:8001", fenced=False)
    assert changed is not None and changed.internal_address == "127.0.0.1:9101"


def test_assigned_ids_come_above_every_known_id() -> None:
    image = MetadataImage()
    first = image.plan_register(-1, OLD, "127.0.0.1:9001", "127.0.0.1:8001", fenced=True)
    assert first is not None and first.node_id == 1
    with_peers = image.plan_register(-1, OLD, "127.0.0.1:9001", "127.0.0.1:8001", fenced=True,
                                     reserved_ids=[1, 2, 3])
    assert with_peers is not None and with_peers.node_id == 4
    image.apply(0, image.plan_create("t", 1, 1, {}, [7]))
    placed = image.plan_register(-1, OLD, "127.0.0.1:9001", "127.0.0.1:8001", fenced=True,
                                 reserved_ids=[1, 2, 3])
    assert placed is not None and placed.node_id == 8  # node 7 holds a replica
    image.apply(1, placed)
    # The same incarnation asking again (it lost the answer) gets its id back.
    again = image.plan_register(-1, OLD, "127.0.0.1:9101", "127.0.0.1:8001", fenced=True)
    assert again is not None and again.node_id == 8
    assert image.plan_register(-1, OLD, "127.0.0.1:9001", "127.0.0.1:8001", fenced=True) is None


def test_another_incarnation_is_refused_while_the_old_one_is_alive() -> None:
    image = MetadataImage()
    old = _register(image, 0, 4, OLD, "127.0.0.1:9004", "127.0.0.1:8004", fenced=False)
    with pytest.raises(DuplicateBrokerRegistrationError) as refused:
        image.plan_register(4, NEW, "127.0.0.1:9104", "127.0.0.1:8104", fenced=True)
    assert refused.value.code == 101
    image.apply(1, image.plan_fence(4))  # type: ignore[arg-type]
    wiped = _register(image, 2, 4, NEW, "127.0.0.1:9104", "127.0.0.1:8104", fenced=True)
    assert wiped.incarnation == NEW and wiped.epoch == 2 and old.epoch == 0


@pytest.mark.parametrize(("args", "message"), [
    ((-2, OLD, "127.0.0.1:1", "127.0.0.1:2"), "negative"),
    ((1, "not-an-id", "127.0.0.1:1", "127.0.0.1:2"), "32 hex digits"),
    ((1, "0" * 32, "127.0.0.1:1", "127.0.0.1:2"), "32 hex digits"),
    ((1, OLD, "nowhere", "127.0.0.1:2"), "node-to-node address 'nowhere' is not HOST:PORT"),
    ((1, OLD, "127.0.0.1:1", "127.0.0.1:70000"), "client address"),
    ((1, OLD, "[::]:5", "127.0.0.1:2"), "wildcard"),
    ((1, OLD, "127.0.0.1:0", "127.0.0.1:2"), "port 0"),
    ((1, OLD, "h" * 400 + ":1", "127.0.0.1:2"), "limit"),
    ((2, NEW, "127.0.0.1:9001", "127.0.0.1:2"), "registered by live node 1"),
])
def test_bad_registrations_are_invalid_requests(args: tuple[object, ...], message: str) -> None:
    image = MetadataImage()
    _register(image, 0, 1, OLD, "127.0.0.1:9001", "127.0.0.1:8001", fenced=False)
    with pytest.raises(InvalidRequestError, match=message):
        image.plan_register(*args, fenced=False)  # type: ignore[arg-type]


def test_heartbeats_name_the_current_registration() -> None:
    image = MetadataImage()
    with pytest.raises(BrokerIdNotRegisteredError):
        image.check_heartbeat(1, 0)
    node = _register(image, 5, 1, OLD, "127.0.0.1:9001", "127.0.0.1:8001", fenced=False)
    assert image.check_heartbeat(1, 5) == node
    with pytest.raises(StaleBrokerEpochError) as stale:
        image.check_heartbeat(1, 4)
    assert stale.value.code == 77


def _drained_and_stopped(image: MetadataImage) -> NodeImage:
    """Node 4 of nodes 1-4 (1-3 the controller's voters) and topic "t" on 1-3: node 4 holds
    no replica and is fenced, as after a decommission and a stop."""
    for n, incarnation in ((1, NEW), (4, OLD)):
        _register(image, n, n, incarnation, f"127.0.0.1:900{n}", f"127.0.0.1:800{n}",
                  fenced=False)
    image.apply(5, image.plan_create("t", 2, 3, {}, [1, 2, 3]))
    image.apply(6, image.plan_decommission(4, True, [1, 2, 3, 4])[0])
    image.apply(7, image.plan_fence(4))  # type: ignore[arg-type]
    node = image.node(4)
    assert node is not None and node.fenced
    return node


def test_a_drained_stopped_node_is_unregistered_and_registers_afresh_when_started() -> None:
    image = MetadataImage()
    four = _drained_and_stopped(image)
    record = image.plan_unregister(4, voters=(1, 2, 3))
    assert record == UnregisterNodeRecord(4, four.epoch)
    image.apply(8, record)
    assert image.node(4) is None and image.registered_node_ids() == [1]
    assert 4 not in image.decommissioning and image.unregistered == {4}
    with pytest.raises(BrokerIdNotRegisteredError) as unknown:
        image.plan_unregister(4, voters=(1, 2, 3))
    assert unknown.value.code == 102
    # Its heartbeat is refused, so that it registers again if it still runs.
    with pytest.raises(BrokerIdNotRegisteredError):
        image.check_heartbeat(4, four.epoch)
    # No joining node is given its id meanwhile: its data dir still names it.
    joining = image.plan_register(-1, NEW[::-1], "127.0.0.1:9005", "127.0.0.1:8005",
                                  fenced=True)
    assert joining is not None and joining.node_id == 5
    # Started again, with the id and incarnation its data dir keeps: a node like the others.
    again = _register(image, 9, 4, OLD, "127.0.0.1:9004", "127.0.0.1:8004", fenced=True)
    assert again.epoch == 9 and image.unregistered == set()
    assert 4 not in image.decommissioning
    assert image.plan_decommission(4, True, [1, 2, 3, 4])  # it may be decommissioned again


def test_unregistering_is_refused_while_it_could_lose_something() -> None:
    image = MetadataImage()
    _drained_and_stopped(image)
    with pytest.raises(InvalidRequestError, match="controller's quorum") as voter:
        image.plan_unregister(4, voters=(1, 2, 4))
    assert voter.value.code == 42
    with pytest.raises(InvalidRequestError, match="controller's quorum"):
        image.plan_unregister(1, voters=(1, 2, 3))
    with pytest.raises(BrokerIdNotRegisteredError):
        image.plan_unregister(99, voters=(1, 2, 3))
    image.apply(8, image.plan_unfence(4))  # type: ignore[arg-type]
    with pytest.raises(InvalidRequestError, match="alive"):
        image.plan_unregister(4, voters=(1, 2, 3))
    image.apply(9, image.plan_fence(4))  # type: ignore[arg-type]
    # A replica it holds, or one moving onto or off it, would be lost with it.
    change = image.plan_alter_reassignment("t", 0, [4, 2, 3], [1, 2, 3, 4])
    assert change is not None
    image.apply(10, change)
    with pytest.raises(InvalidRequestError, match="holds 1 partition replica"):
        image.plan_unregister(4, voters=(1, 2, 3))
    cancel = image.plan_alter_reassignment("t", 0, None, [1, 2, 3, 4])
    assert cancel is not None
    image.apply(11, cancel)
    assert 4 in image.topics["t"].assignment[0]  # cancelled: listed until its group lets it go
    with pytest.raises(InvalidRequestError, match="holds 1 partition replica"):
        image.plan_unregister(4, voters=(1, 2, 3))


# ---- the node's settings and its data dir's identity ---------------------------------------


def test_a_joining_node_needs_no_id_and_no_peers(tmp_path: Path) -> None:
    base = {"listen": "127.0.0.1:0", "data.dir": str(tmp_path)}
    joining = NodeConfig.from_properties(
        {**base, "controller.quorum.bootstrap.servers": "127.0.0.1:9001, 127.0.0.1:9002"}
    )
    assert joining.node_id == -1 and joining.join_addresses == ["127.0.0.1:9001",
                                                                 "127.0.0.1:9002"]
    assert "node.id" not in joining.to_properties()
    with pytest.raises(InvalidConfigError, match=r"missing required setting.*node\.id"):
        NodeConfig.from_properties(base)
    with pytest.raises(InvalidConfigError, match="has no peers list"):
        NodeConfig.from_properties({**base, "controller.quorum.bootstrap.servers": "h:1",
                                    "node.id": "4", "peers": "1=h:2",
                                    "client.addresses": "1=h:3"})
    with pytest.raises(InvalidConfigError, match=r"controller\.quorum\.bootstrap\.servers"):
        NodeConfig.from_properties({**base, "controller.quorum.bootstrap.servers": "nowhere"})
    with pytest.raises(InvalidConfigError, match=r"broker\.heartbeat\.interval\.ms"):
        NodeConfig.from_properties({**base, "node.id": "1", "broker.session.timeout.ms": "100",
                                    "broker.heartbeat.interval.ms": "100"})


def test_tidelog_node_join_is_a_node_without_peers_or_id(tmp_path: Path) -> None:
    args = build_parser().parse_args([
        "node", "--join", "127.0.0.1:7423", "--listen", "127.0.0.1:7430",
        "--data-dir", str(tmp_path),
    ])
    config = node_config(args)
    assert (config.join, config.node_id, dict(config.peers)) == ("127.0.0.1:7423", -1, {})


def test_the_data_dir_keeps_its_identity(tmp_path: Path) -> None:
    first = load_identity(tmp_path, -1)
    assert first.node_id == -1 and len(first.incarnation) == 32
    save_identity(tmp_path, Identity(7, first.incarnation))
    assert load_identity(tmp_path, -1) == Identity(7, first.incarnation)
    assert load_identity(tmp_path, 7) == Identity(7, first.incarnation)
    with pytest.raises(InvalidConfigError, match=r"belongs to node 7, not node\.id 8"):
        load_identity(tmp_path, 8)
    other = tmp_path / "other"
    other.mkdir()
    assert load_identity(other, 3).incarnation != first.incarnation  # a new data dir
    (other / META_FILE).write_text("incarnation.id=xyz\nnode.id=3\n")
    with pytest.raises(InvalidConfigError, match="damaged"):
        load_identity(other, 3)
