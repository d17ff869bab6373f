"""The transaction requests of a transactional producer (AddPartitionsToTxn, AddOffsetsToTxn,
EndTxn, TxnOffsetCommit) adapted onto the Tidelog handlers of the same names
(node/api/transactions.py, node/api/groups.py): they keep authorization, validation, the
forwarding to the transaction or group coordinator and the error codes; InitProducerId, the
first request of such a producer, is served with Produce (node/kafka/produce.py).

Only the versions before transactions v2 are served (AddPartitionsToTxn v4+ is a broker's
verification request; EndTxn v5 carries the bumped epoch of transactions v2), so clients keep
to the original protocol, which Tidelog's coordinator implements, the partition leaders
verifying each transactional Produce with it. Older clients get PRODUCER_FENCED as
INVALID_PRODUCER_EPOCH, as Kafka rewrites it for them (`older_fenced`).
"""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from tidelog.node.edge.limits import CLIENT_LIMITS
from tidelog.node.kafka.call import KafkaCall
from tidelog.node.kafka.codec import response_type
from tidelog.node.kafka.fields import build, entity_of, error_code
from tidelog.node.kafka.groups import commit_answer, commit_topics
from tidelog.node.kafka.registry import ApiRegistry
from tidelog.v1 import tidelog_pb2 as pb

ADD_PARTITIONS_TO_TXN_KEY = 24
ADD_OFFSETS_TO_TXN_KEY = 25
END_TXN_KEY = 26
TXN_OFFSET_COMMIT_KEY = 28
#: The first version of each API whose clients know PRODUCER_FENCED (KIP-588); below it,
#: Kafka answers INVALID_PRODUCER_EPOCH instead.
FENCED_SINCE = {22: 4, ADD_PARTITIONS_TO_TXN_KEY: 2, ADD_OFFSETS_TO_TXN_KEY: 2, END_TXN_KEY: 2}
_NO_THROTTLE = datetime.timedelta(0)


def older_fenced(code: int, call: KafkaCall) -> ErrorCode:
    """The Kafka error of `code` for the API and version `call` names: PRODUCER_FENCED is
    INVALID_PRODUCER_EPOCH for a version that predates it."""
    error = error_code(code)
    if error is ErrorCode.producer_fenced and call.api_version < FENCED_SINCE.get(
        call.api_key, 0
    ):
        return ErrorCode.invalid_producer_epoch
    return error


def add_transactions(registry: ApiRegistry, servicer: Any) -> None:
    """AddPartitionsToTxn 0-3, AddOffsetsToTxn 0-3, EndTxn 0-4, TxnOffsetCommit 0-3."""
    adapter = TxnAdapter(servicer)
    registry.add(ADD_PARTITIONS_TO_TXN_KEY, 0, 3, adapter.add_partitions_to_txn)
    registry.add(ADD_OFFSETS_TO_TXN_KEY, 0, 3, adapter.add_offsets_to_txn)
    registry.add(END_TXN_KEY, 0, 4, adapter.end_txn)
    registry.add(TXN_OFFSET_COMMIT_KEY, 0, 3, adapter.txn_offset_commit,
                 max_request_bytes=CLIENT_LIMITS["TxnOffsetCommit"])


class TxnAdapter:
    def __init__(self, servicer: Any) -> None:
        self._servicer = servicer

    async def add_partitions_to_txn(self, request: Any, call: KafkaCall) -> Any:
        answer: pb.AddPartitionsToTxnResponse = await self._servicer.AddPartitionsToTxn(
            pb.AddPartitionsToTxnRequest(
                transactional_id=request.v3_and_below_transactional_id,
                producer_id=request.v3_and_below_producer_id,
                producer_epoch=request.v3_and_below_producer_epoch,
                topics=[pb.AddPartitionsToTxnTopic(name=t.name, partitions=t.partitions)
                        for t in request.v3_and_below_topics],
            ),
            call,
        )
        response = response_type(ADD_PARTITIONS_TO_TXN_KEY, call.api_version)
        topic_type = entity_of(response, "AddPartitionsToTxnTopicResult")
        partition_type = entity_of(response, "AddPartitionsToTxnPartitionResult")
        return build(response, throttle_time=_NO_THROTTLE, results_by_topic_v3_and_below=tuple(
            build(topic_type, name=t.name, results_by_partition=tuple(
                build(partition_type, partition_index=p.partition,
                      partition_error_code=older_fenced(p.error_code, call))
                for p in t.partitions
            ))
            for t in answer.results
        ))

    async def add_offsets_to_txn(self, request: Any, call: KafkaCall) -> Any:
        answer: pb.AddOffsetsToTxnResponse = await self._servicer.AddOffsetsToTxn(
            pb.AddOffsetsToTxnRequest(
                transactional_id=request.transactional_id, producer_id=request.producer_id,
                producer_epoch=request.producer_epoch, group_id=request.group_id,
            ),
            call,
        )
        return build(response_type(ADD_OFFSETS_TO_TXN_KEY, call.api_version),
                     throttle_time=_NO_THROTTLE,
                     error_code=older_fenced(answer.error_code, call))

    async def end_txn(self, request: Any, call: KafkaCall) -> Any:
        answer: pb.EndTxnResponse = await self._servicer.EndTxn(
            pb.EndTxnRequest(
                transactional_id=request.transactional_id, producer_id=request.producer_id,
                producer_epoch=request.producer_epoch, committed=request.committed,
            ),
            call,
        )
        return build(response_type(END_TXN_KEY, call.api_version), throttle_time=_NO_THROTTLE,
                     error_code=older_fenced(answer.error_code, call))

    async def txn_offset_commit(self, request: Any, call: KafkaCall) -> Any:
        """The offsets of a transaction, at the group's coordinator; v3's member and
        generation are checked as an OffsetCommit's (a simple consumer's -1 and "" are not)."""
        asked = pb.TxnOffsetCommitRequest(
            transactional_id=request.transactional_id, group_id=request.group_id,
            producer_id=request.producer_id, producer_epoch=request.producer_epoch,
            generation_id=getattr(request, "generation_id", -1),
            member_id=getattr(request, "member_id", ""),
            topics=commit_topics(request.topics),
        )
        instance_id = getattr(request, "group_instance_id", None)
        if instance_id is not None:
            asked.group_instance_id = instance_id
        answer: pb.TxnOffsetCommitResponse = await self._servicer.TxnOffsetCommit(asked, call)
        return commit_answer(response_type(TXN_OFFSET_COMMIT_KEY, call.api_version),
                             answer.topics)
