"""What the consumer-offsets cluster tests share: offset requests built with the raw stubs
(every field what the test says) and their answers as plain values."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

import grpc
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass

from tidelog import errors
from tidelog.coordinator.offsets_records import decode_key
from tidelog.records import decode_records, iter_batches
from tidelog.testing import Raw, wait_for
from tidelog.v1 import raft_pb2
from tidelog.v1 import tidelog_pb2 as pb

OFFSETS = "__consumer_offsets"
NOT_COORDINATOR = errors.NotCoordinatorError.code
RETRIABLE = {
    errors.CoordinatorLoadInProgressError.code,
    errors.CoordinatorNotAvailableError.code,
    NOT_COORDINATOR,
}


class ForwardedAnswer:
    """The answer to a request sent as a forwarded one (`forwarded`), as the future of a
    direct call gives it."""

    def __init__(self, call: grpc.Future, method: str) -> None:
        self._call = call
        service = pb.DESCRIPTOR.services_by_name["Tidelog"]
        self._type = GetMessageClass(service.methods_by_name[method].output_type)

    def result(self, timeout: float | None = None) -> Any:
        return self._type.FromString(self._call.result(timeout).response)


def forwarded(
    channel: grpc.Channel, method: str, request: Message, timeout: float
) -> ForwardedAnswer:
    """`request` to Tidelog `method` as another node forwards it: in an envelope (RaftTransport
    Forward) on `channel`, to a node's node-to-node listener (plaintext, where no caller's
    identity is checked), for User:ANONYMOUS. The node answers it itself, as a forwarded
    request is never forwarded again."""
    envelope = raft_pb2.ForwardRequest(
        method=method, request=request.SerializeToString(), principal="User:ANONYMOUS",
        node_id=99,
    )
    call = channel.unary_unary(
        "/tidelog.v1.RaftTransport/Forward",
        request_serializer=raft_pb2.ForwardRequest.SerializeToString,
        response_deserializer=raft_pb2.ForwardResponse.FromString,
    ).future(envelope, timeout=timeout)
    return ForwardedAnswer(call, method)


def find(raw: Raw, node: int, group: str, key_type: int = 0) -> pb.FindCoordinatorResponse:
    answer: pb.FindCoordinatorResponse = raw.stub(node).FindCoordinator(
        pb.FindCoordinatorRequest(key=group, key_type=key_type), timeout=10
    )
    return answer


def found(raw: Raw, node: int, group: str) -> pb.FindCoordinatorResponse:
    """The first answer of `node` that names a coordinator for `group`."""

    def answer() -> pb.FindCoordinatorResponse | None:
        response = find(raw, node, group)
        return response if response.error_code == 0 else None

    return wait_for(answer, 60, f"node {node} to name a coordinator for {group!r}")


class Committed(NamedTuple):
    offset: int
    leader_epoch: int = -1
    metadata: str = ""


Tp = tuple[str, int]


def commit_request(
    group: str, offsets: Mapping[Tp, Committed | tuple[int, int | None, str | None]],
    generation: int | None = None,
) -> pb.OffsetCommitRequest:
    """Partitions in the order given; an epoch or metadata of None is left unset."""
    request = pb.OffsetCommitRequest(group_id=group)
    if generation is not None:
        request.generation_id = generation
    for (topic, partition), (offset, epoch, metadata) in offsets.items():
        entry = request.topics.add(name=topic).partitions.add(
            partition=partition, committed_offset=offset
        )
        if epoch is not None:
            entry.committed_leader_epoch = epoch
        if metadata is not None:
            entry.committed_metadata = metadata
    return request


def codes(response: pb.OffsetCommitResponse) -> dict[Tp, int]:
    return {(t.name, p.partition): p.error_code for t in response.topics for p in t.partitions}


def commit(raw: Raw, node: int, request: pb.OffsetCommitRequest) -> dict[Tp, int]:
    return codes(raw.stub(node).OffsetCommit(request, timeout=30))


def committed(raw: Raw, node: int, group: str, offsets: Mapping[Tp, Committed]) -> None:
    """Commits `offsets` through `node`, again while the coordinator is settling."""

    def done() -> bool:
        answer = commit(raw, node, commit_request(group, offsets))
        assert not set(answer.values()) - RETRIABLE - {0}, answer
        return set(answer.values()) == {0}

    wait_for(done, 60, f"a commit of {group!r} through node {node}")


def fetch(
    raw: Raw, node: int, group: str, tps: Iterable[Tp] | None = None, *,
    require_stable: bool = False,
) -> tuple[int, dict[Tp, Committed]]:
    """The group-level error and, per partition, the committed value (-1 when none; a
    partition error shows as its code in the offset, for the tests that look for it)."""
    request = pb.OffsetFetchRequest(group_id=group, require_stable=require_stable)
    by_topic: dict[str, list[int]] = {}
    for topic, partition in tps or ():
        by_topic.setdefault(topic, []).append(partition)
    for topic, partitions in by_topic.items():
        request.topics.add(name=topic, partitions=partitions)
    answer = raw.stub(node).OffsetFetch(request, timeout=30)
    values = {
        (t.name, p.partition): Committed(p.committed_offset, p.committed_leader_epoch, p.metadata)
        if p.error_code == 0 else Committed(-1000 - p.error_code)
        for t in answer.topics for p in t.partitions
    }
    return answer.error_code, values


def fetched(
    raw: Raw, node: int, group: str, tps: Iterable[Tp] | None = None
) -> dict[Tp, Committed]:
    """The answer of the first fetch that is not a retriable group-level error."""
    wanted = list(tps) if tps is not None else None

    def answer() -> tuple[dict[Tp, Committed]] | None:
        code, values = fetch(raw, node, group, wanted)
        assert code in RETRIABLE | {0}, code
        return (values,) if code == 0 else None  # a tuple: an empty answer is an answer

    return wait_for(answer, 60, f"offsets of {group!r} from node {node}")[0]


def coordinator(raw: Raw, group: str, asking: list[int], but: int | None = None) -> int:
    """The coordinator that every node in `asking` names (once it is not `but`: the others
    name a dead or paused one until they hear of the next)."""

    def agreed() -> int | None:
        answers = [find(raw, node, group) for node in asking]
        named = {a.node_id for a in answers if a.error_code == 0}
        if len(named) != 1 or any(a.error_code for a in answers) or but in named:
            return None
        return named.pop()

    return wait_for(agreed, 60, f"nodes {asking} to agree on the coordinator of {group!r}")


def coordinator_of(raw: Raw, group: str) -> int:
    return found(raw, 1, group).node_id


def other_than(raw: Raw, node: int) -> int:
    return next(n for n in raw.cluster.node_ids if n != node)


def offsets_keys(raw: Raw, partition: int) -> list[tuple[int, int, str, str, int]]:
    """(batch base offset, offset, group, topic, partition) of every record of one offsets
    partition, read from its leader."""
    leader = raw.wait_leaders(OFFSETS)[partition]
    data = raw.fetch_all(leader, OFFSETS, partition)
    keys = []
    for pos, header in iter_batches(data):
        if header.is_control:
            continue
        for record in decode_records(data, pos, header):
            assert record.key is not None
            key = decode_key(record.key)
            keys.append((header.base_offset, record.offset, key.group, key.topic, key.partition))
    return keys
