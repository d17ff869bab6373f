"""The controller's own quorum as its state machine sees it (no cluster): the target of its
reconfiguration (ControllerVotersRecord, strictly decoded), where a decommission moves a voter's
seat, and the committed configurations of its group read from the metadata log's membership
control batches, which every node applies with the records."""

from __future__ import annotations

from typing import Any

import pytest

from tidelog.coordinator.controller import MetadataImage
from tidelog.coordinator.metadata_records import (
    ControllerVotersRecord,
    MetadataRecordError,
    decode_record,
    encode_record,
)
from tidelog.errors import (
    BrokerNotAvailableError,
    InvalidReplicaAssignmentError,
    InvalidRequestError,
)
from tidelog.records import ControlType, RecordInput, build_batch, build_control_batch
from tidelog.replication.membership import Membership, encode_membership


def _image(nodes: int = 4) -> MetadataImage:
    """Nodes 1..`nodes` registered and alive."""
    image = MetadataImage()
    for n in range(1, nodes + 1):
        record = image.plan_register(n, f"{n:032x}", f"127.0.0.1:{9000 + n}",
                                     f"127.0.0.1:{8000 + n}", fenced=False)
        assert record is not None
        image.apply(image.applied_offset + 1, record)
    return image


def _apply(image: MetadataImage, record: Any) -> None:
    image.apply(image.applied_offset + 1, record)


@pytest.mark.parametrize("voters", [(1,), (4, 2, 3), (0, 2**31 - 1)])
def test_controller_voters_records_round_trip(voters: tuple[int, ...]) -> None:
    record = ControllerVotersRecord(voters)
    assert decode_record(encode_record(record)) == record
    assert record.subject == "controller voters"


@pytest.mark.parametrize("damage, message", [
    (lambda b: b[:-1], "does not fit"),
    (lambda b: b[:3], "ends inside a field"),
    (lambda b: b + b"\x00", "left over"),
    (lambda b: b[:2] + b"\x00\x00", "not a non-empty list"),
    (lambda b: b[:-4] + b[-8:-4], "not a non-empty list"),  # a node twice
    (lambda b: b[:-4] + b"\xff\xff\xff\xff", "not a non-empty list"),  # a negative id
    (lambda b: b[:2] + b"\xff\xff" + b[4:], "does not fit"),
])
def test_damaged_controller_voters_records_are_refused_by_name(damage: Any, message: str) -> None:
    with pytest.raises(MetadataRecordError, match=message):
        decode_record(damage(encode_record(ControllerVotersRecord((1, 2, 3)))))


def test_decommissioning_a_voter_moves_its_seat_to_a_live_node_without_one() -> None:
    image = _image(5)
    voters = (1, 2, 3)
    assert image.plan_controller_voters(voters) is None  # nobody leaving
    _apply(image, image.plan_decommission(2, True, [1, 2, 3, 4, 5])[0])
    _apply(image, image.plan_fence(4))
    # Node 4 is down: the seat goes to node 5, in place, so the quorum keeps its size.
    record = image.plan_controller_voters(voters)
    assert record == ControllerVotersRecord((1, 5, 3))
    _apply(image, record)
    assert image.controller_target == (1, 5, 3)
    assert image.plan_controller_voters(voters) is None  # decided once
    assert image.controller_seat_stuck(2, voters) is None
    # A second voter leaving starts from the target under way; with no node left to take its
    # seat, it waits (and says why) until one can.
    _apply(image, image.plan_decommission(1, True, [1, 2, 3, 4, 5])[0])
    assert image.plan_controller_voters(voters) is None
    assert "no live node without a seat" in str(image.controller_seat_stuck(1, voters))
    _apply(image, image.plan_unfence(4))
    assert image.plan_controller_voters(voters) == ControllerVotersRecord((4, 5, 3))


def test_a_decommission_with_nowhere_to_move_the_seat_waits() -> None:
    image = _image(3)
    _apply(image, image.plan_decommission(1, True, [1, 2, 3])[0])
    assert image.plan_controller_voters((1, 2, 3)) is None
    assert image.controller_seat_stuck(1, (1, 2, 3)) is not None
    assert image.controller_seat_stuck(2, (1, 2, 3)) is None  # not being decommissioned


def test_a_target_naming_an_unknown_leaving_or_fenced_node_is_refused_with_kafkas_codes() -> None:
    image = _image(4)
    assert image.check_controller_target([4, 2, 3]) == ControllerVotersRecord((4, 2, 3))
    for bad, message in (([], "non-empty"), ([1, 1, 2], "distinct"), ([1, 2, 9], "unregistered")):
        with pytest.raises(InvalidReplicaAssignmentError, match=message) as refused:
            image.check_controller_target(bad)
        assert refused.value.code == 39
    _apply(image, image.plan_decommission(4, True, [1, 2, 3, 4])[0])
    with pytest.raises(InvalidReplicaAssignmentError, match="decommissioned"):
        image.check_controller_target([4, 2, 3])
    _apply(image, image.plan_fence(3))
    with pytest.raises(BrokerNotAvailableError, match="fenced") as fenced:
        image.check_controller_target([1, 2, 3])
    assert fenced.value.code == 8


def test_a_node_with_a_seat_in_the_target_is_not_unregistered() -> None:
    image = _image(4)
    _apply(image, ControllerVotersRecord((4, 2, 3)))
    _apply(image, image.plan_fence(4))
    with pytest.raises(InvalidRequestError, match="controller's quorum"):
        image.plan_unregister(4, voters=(1, 2, 3))


def test_the_image_follows_the_committed_configurations_of_the_metadata_log() -> None:
    """The membership control batches are KIP-853's VotersRecords: read with the records, by
    voters and by the nodes that pull the log alike; a leader-change marker changes nothing,
    and a replay of an older batch does not take the quorum back."""
    image = MetadataImage()
    assert image.quorum is None  # the bootstrap voters hold

    def membership(offset: int, voters: list[int], learners: list[int]) -> bytes:
        return build_control_batch(ControlType.MEMBERSHIP, base_offset=offset,
                                   value=encode_membership(Membership.of(voters, learners)))

    first = membership(0, [1, 2, 3], [4])
    rest = b"".join([
        build_control_batch(ControlType.LEADER_CHANGE, base_offset=1),
        build_batch([RecordInput(value=encode_record(ControllerVotersRecord((4, 2, 3))))],
                    base_offset=2),
        membership(3, [1, 2, 3, 4], []),
        membership(4, [2, 3, 4], []),
    ])
    image.apply_batches(first)
    assert image.quorum == Membership.of([1, 2, 3], [4])
    image.apply_batches(rest)
    assert image.quorum == Membership.of([2, 3, 4])
    assert image.controller_target == (4, 2, 3) and image.applied_offset == 4
    image.apply_batches(first)  # a replay
    assert image.quorum == Membership.of([2, 3, 4])
    damaged = build_control_batch(ControlType.MEMBERSHIP, base_offset=5, value=b"\x00")
    with pytest.raises(MetadataRecordError, match="configuration"):
        image.apply_batches(damaged)


def test_a_new_voter_that_goes_down_before_its_promotion_is_replaced() -> None:
    image = _image(5)
    _apply(image, image.plan_decommission(1, True, [1, 2, 3, 4, 5])[0])
    _apply(image, image.plan_controller_voters((1, 2, 3)))
    assert image.controller_target == (4, 2, 3)
    _apply(image, image.plan_fence(4))
    assert image.plan_controller_voters((1, 2, 3)) == ControllerVotersRecord((5, 2, 3))
    # Once it votes, a node down is the quorum's to tolerate, not a seat to move.
    assert image.plan_controller_voters((2, 3, 4)) is None
