from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RaftEnvelope(_message.Message):
    __slots__ = ("src", "dst", "messages", "heartbeats", "leaders", "offline", "ticks")
    SRC_FIELD_NUMBER: _ClassVar[int]
    DST_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    HEARTBEATS_FIELD_NUMBER: _ClassVar[int]
    LEADERS_FIELD_NUMBER: _ClassVar[int]
    OFFLINE_FIELD_NUMBER: _ClassVar[int]
    TICKS_FIELD_NUMBER: _ClassVar[int]
    src: int
    dst: int
    messages: _containers.RepeatedCompositeFieldContainer[PartitionMessage]
    heartbeats: _containers.RepeatedCompositeFieldContainer[PartitionHeartbeat]
    leaders: _containers.RepeatedCompositeFieldContainer[LeaderAnnouncement]
    offline: _containers.RepeatedCompositeFieldContainer[GroupId]
    ticks: int
    def __init__(self, src: _Optional[int] = ..., dst: _Optional[int] = ..., messages: _Optional[_Iterable[_Union[PartitionMessage, _Mapping]]] = ..., heartbeats: _Optional[_Iterable[_Union[PartitionHeartbeat, _Mapping]]] = ..., leaders: _Optional[_Iterable[_Union[LeaderAnnouncement, _Mapping]]] = ..., offline: _Optional[_Iterable[_Union[GroupId, _Mapping]]] = ..., ticks: _Optional[int] = ...) -> None: ...

class GroupId(_message.Message):
    __slots__ = ("topic", "partition")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ...) -> None: ...

class PartitionMessage(_message.Message):
    __slots__ = ("group", "term", "pre_vote_request", "pre_vote_response", "vote_request", "vote_response", "append_request", "append_response", "timeout_now")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    PRE_VOTE_REQUEST_FIELD_NUMBER: _ClassVar[int]
    PRE_VOTE_RESPONSE_FIELD_NUMBER: _ClassVar[int]
    VOTE_REQUEST_FIELD_NUMBER: _ClassVar[int]
    VOTE_RESPONSE_FIELD_NUMBER: _ClassVar[int]
    APPEND_REQUEST_FIELD_NUMBER: _ClassVar[int]
    APPEND_RESPONSE_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_NOW_FIELD_NUMBER: _ClassVar[int]
    group: GroupId
    term: int
    pre_vote_request: VoteRequest
    pre_vote_response: VoteResponse
    vote_request: VoteRequest
    vote_response: VoteResponse
    append_request: AppendRequest
    append_response: AppendResponse
    timeout_now: TimeoutNow
    def __init__(self, group: _Optional[_Union[GroupId, _Mapping]] = ..., term: _Optional[int] = ..., pre_vote_request: _Optional[_Union[VoteRequest, _Mapping]] = ..., pre_vote_response: _Optional[_Union[VoteResponse, _Mapping]] = ..., vote_request: _Optional[_Union[VoteRequest, _Mapping]] = ..., vote_response: _Optional[_Union[VoteResponse, _Mapping]] = ..., append_request: _Optional[_Union[AppendRequest, _Mapping]] = ..., append_response: _Optional[_Union[AppendResponse, _Mapping]] = ..., timeout_now: _Optional[_Union[TimeoutNow, _Mapping]] = ...) -> None: ...

class VoteRequest(_message.Message):
    __slots__ = ("log_end_offset", "last_epoch", "transfer")
    LOG_END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAST_EPOCH_FIELD_NUMBER: _ClassVar[int]
    TRANSFER_FIELD_NUMBER: _ClassVar[int]
    log_end_offset: int
    last_epoch: int
    transfer: bool
    def __init__(self, log_end_offset: _Optional[int] = ..., last_epoch: _Optional[int] = ..., transfer: _Optional[bool] = ...) -> None: ...

class VoteResponse(_message.Message):
    __slots__ = ("granted",)
    GRANTED_FIELD_NUMBER: _ClassVar[int]
    granted: bool
    def __init__(self, granted: _Optional[bool] = ...) -> None: ...

class Entry(_message.Message):
    __slots__ = ("base_offset", "last_offset", "epoch", "size")
    BASE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAST_OFFSET_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    base_offset: int
    last_offset: int
    epoch: int
    size: int
    def __init__(self, base_offset: _Optional[int] = ..., last_offset: _Optional[int] = ..., epoch: _Optional[int] = ..., size: _Optional[int] = ...) -> None: ...

class AppendRequest(_message.Message):
    __slots__ = ("prev_offset", "prev_epoch", "entries", "leader_hw", "conf_state")
    PREV_OFFSET_FIELD_NUMBER: _ClassVar[int]
    PREV_EPOCH_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    LEADER_HW_FIELD_NUMBER: _ClassVar[int]
    CONF_STATE_FIELD_NUMBER: _ClassVar[int]
    prev_offset: int
    prev_epoch: int
    entries: _containers.RepeatedCompositeFieldContainer[Entry]
    leader_hw: int
    conf_state: ConfState
    def __init__(self, prev_offset: _Optional[int] = ..., prev_epoch: _Optional[int] = ..., entries: _Optional[_Iterable[_Union[Entry, _Mapping]]] = ..., leader_hw: _Optional[int] = ..., conf_state: _Optional[_Union[ConfState, _Mapping]] = ...) -> None: ...

class ConfState(_message.Message):
    __slots__ = ("offset", "voters", "learners")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    VOTERS_FIELD_NUMBER: _ClassVar[int]
    LEARNERS_FIELD_NUMBER: _ClassVar[int]
    offset: int
    voters: _containers.RepeatedScalarFieldContainer[int]
    learners: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, offset: _Optional[int] = ..., voters: _Optional[_Iterable[int]] = ..., learners: _Optional[_Iterable[int]] = ...) -> None: ...

class AppendResponse(_message.Message):
    __slots__ = ("success", "match_end", "rejected_prev", "hint_offset", "hint_epoch", "lost")
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    MATCH_END_FIELD_NUMBER: _ClassVar[int]
    REJECTED_PREV_FIELD_NUMBER: _ClassVar[int]
    HINT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    HINT_EPOCH_FIELD_NUMBER: _ClassVar[int]
    LOST_FIELD_NUMBER: _ClassVar[int]
    success: bool
    match_end: int
    rejected_prev: int
    hint_offset: int
    hint_epoch: int
    lost: bool
    def __init__(self, success: _Optional[bool] = ..., match_end: _Optional[int] = ..., rejected_prev: _Optional[int] = ..., hint_offset: _Optional[int] = ..., hint_epoch: _Optional[int] = ..., lost: _Optional[bool] = ...) -> None: ...

class TimeoutNow(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PartitionHeartbeat(_message.Message):
    __slots__ = ("group", "term", "response", "leader_hw", "read_ctx", "quiesce", "resigned")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    LEADER_HW_FIELD_NUMBER: _ClassVar[int]
    READ_CTX_FIELD_NUMBER: _ClassVar[int]
    QUIESCE_FIELD_NUMBER: _ClassVar[int]
    RESIGNED_FIELD_NUMBER: _ClassVar[int]
    group: GroupId
    term: int
    response: bool
    leader_hw: int
    read_ctx: int
    quiesce: bool
    resigned: bool
    def __init__(self, group: _Optional[_Union[GroupId, _Mapping]] = ..., term: _Optional[int] = ..., response: _Optional[bool] = ..., leader_hw: _Optional[int] = ..., read_ctx: _Optional[int] = ..., quiesce: _Optional[bool] = ..., resigned: _Optional[bool] = ...) -> None: ...

class LeaderAnnouncement(_message.Message):
    __slots__ = ("group", "epoch", "isr", "log_start_offset")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    ISR_FIELD_NUMBER: _ClassVar[int]
    LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    group: GroupId
    epoch: int
    isr: _containers.RepeatedScalarFieldContainer[int]
    log_start_offset: int
    def __init__(self, group: _Optional[_Union[GroupId, _Mapping]] = ..., epoch: _Optional[int] = ..., isr: _Optional[_Iterable[int]] = ..., log_start_offset: _Optional[int] = ...) -> None: ...

class StreamSummary(_message.Message):
    __slots__ = ("envelopes",)
    ENVELOPES_FIELD_NUMBER: _ClassVar[int]
    envelopes: int
    def __init__(self, envelopes: _Optional[int] = ...) -> None: ...

class FetchMetadataRequest(_message.Message):
    __slots__ = ("from_offset", "node_id")
    FROM_OFFSET_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    from_offset: int
    node_id: int
    def __init__(self, from_offset: _Optional[int] = ..., node_id: _Optional[int] = ...) -> None: ...

class FetchMetadataResponse(_message.Message):
    __slots__ = ("error_code", "records", "high_watermark", "log_start_offset")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    records: bytes
    high_watermark: int
    log_start_offset: int
    def __init__(self, error_code: _Optional[int] = ..., records: _Optional[bytes] = ..., high_watermark: _Optional[int] = ..., log_start_offset: _Optional[int] = ...) -> None: ...

class WriteTxnMarkersRequest(_message.Message):
    __slots__ = ("markers",)
    MARKERS_FIELD_NUMBER: _ClassVar[int]
    markers: _containers.RepeatedCompositeFieldContainer[WritableTxnMarker]
    def __init__(self, markers: _Optional[_Iterable[_Union[WritableTxnMarker, _Mapping]]] = ...) -> None: ...

class WritableTxnMarker(_message.Message):
    __slots__ = ("producer_id", "producer_epoch", "transaction_result", "topics", "coordinator_epoch")
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_RESULT_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_EPOCH_FIELD_NUMBER: _ClassVar[int]
    producer_id: int
    producer_epoch: int
    transaction_result: bool
    topics: _containers.RepeatedCompositeFieldContainer[WritableTxnMarkerTopic]
    coordinator_epoch: int
    def __init__(self, producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., transaction_result: _Optional[bool] = ..., topics: _Optional[_Iterable[_Union[WritableTxnMarkerTopic, _Mapping]]] = ..., coordinator_epoch: _Optional[int] = ...) -> None: ...

class WritableTxnMarkerTopic(_message.Message):
    __slots__ = ("name", "partition_indexes")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARTITION_INDEXES_FIELD_NUMBER: _ClassVar[int]
    name: str
    partition_indexes: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, name: _Optional[str] = ..., partition_indexes: _Optional[_Iterable[int]] = ...) -> None: ...

class WriteTxnMarkersResponse(_message.Message):
    __slots__ = ("markers",)
    MARKERS_FIELD_NUMBER: _ClassVar[int]
    markers: _containers.RepeatedCompositeFieldContainer[WritableTxnMarkerResult]
    def __init__(self, markers: _Optional[_Iterable[_Union[WritableTxnMarkerResult, _Mapping]]] = ...) -> None: ...

class WritableTxnMarkerResult(_message.Message):
    __slots__ = ("producer_id", "topics")
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    producer_id: int
    topics: _containers.RepeatedCompositeFieldContainer[WritableTxnMarkerTopicResult]
    def __init__(self, producer_id: _Optional[int] = ..., topics: _Optional[_Iterable[_Union[WritableTxnMarkerTopicResult, _Mapping]]] = ...) -> None: ...

class WritableTxnMarkerTopicResult(_message.Message):
    __slots__ = ("name", "partitions")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    name: str
    partitions: _containers.RepeatedCompositeFieldContainer[WritableTxnMarkerPartitionResult]
    def __init__(self, name: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[WritableTxnMarkerPartitionResult, _Mapping]]] = ...) -> None: ...

class WritableTxnMarkerPartitionResult(_message.Message):
    __slots__ = ("partition_index", "error_code")
    PARTITION_INDEX_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    partition_index: int
    error_code: int
    def __init__(self, partition_index: _Optional[int] = ..., error_code: _Optional[int] = ...) -> None: ...

class VerifyTxnPartitionsRequest(_message.Message):
    __slots__ = ("transactional_id", "producer_id", "producer_epoch", "partitions")
    TRANSACTIONAL_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    transactional_id: str
    producer_id: int
    producer_epoch: int
    partitions: _containers.RepeatedCompositeFieldContainer[GroupId]
    def __init__(self, transactional_id: _Optional[str] = ..., producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., partitions: _Optional[_Iterable[_Union[GroupId, _Mapping]]] = ...) -> None: ...

class VerifyTxnPartitionsResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "verified")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    VERIFIED_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    verified: _containers.RepeatedCompositeFieldContainer[GroupId]
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., verified: _Optional[_Iterable[_Union[GroupId, _Mapping]]] = ...) -> None: ...

class ReassignmentDoneRequest(_message.Message):
    __slots__ = ("node_id", "topic", "topic_id", "partition", "voters")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    VOTERS_FIELD_NUMBER: _ClassVar[int]
    node_id: int
    topic: str
    topic_id: int
    partition: int
    voters: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, node_id: _Optional[int] = ..., topic: _Optional[str] = ..., topic_id: _Optional[int] = ..., partition: _Optional[int] = ..., voters: _Optional[_Iterable[int]] = ...) -> None: ...

class ReassignmentDoneResponse(_message.Message):
    __slots__ = ("error_code", "error_message")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ...) -> None: ...

class RegisterNodeRequest(_message.Message):
    __slots__ = ("node_id", "incarnation", "internal_address", "client_address", "fenced", "forwarded", "kafka_address")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    INTERNAL_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    FENCED_FIELD_NUMBER: _ClassVar[int]
    FORWARDED_FIELD_NUMBER: _ClassVar[int]
    KAFKA_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    node_id: int
    incarnation: str
    internal_address: str
    client_address: str
    fenced: bool
    forwarded: bool
    kafka_address: str
    def __init__(self, node_id: _Optional[int] = ..., incarnation: _Optional[str] = ..., internal_address: _Optional[str] = ..., client_address: _Optional[str] = ..., fenced: _Optional[bool] = ..., forwarded: _Optional[bool] = ..., kafka_address: _Optional[str] = ...) -> None: ...

class NodeEntry(_message.Message):
    __slots__ = ("node_id", "internal_address", "client_address", "fenced")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    INTERNAL_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    FENCED_FIELD_NUMBER: _ClassVar[int]
    node_id: int
    internal_address: str
    client_address: str
    fenced: bool
    def __init__(self, node_id: _Optional[int] = ..., internal_address: _Optional[str] = ..., client_address: _Optional[str] = ..., fenced: _Optional[bool] = ...) -> None: ...

class RegisterNodeResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "node_id", "epoch", "controller_voters", "nodes")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_VOTERS_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    node_id: int
    epoch: int
    controller_voters: _containers.RepeatedScalarFieldContainer[int]
    nodes: _containers.RepeatedCompositeFieldContainer[NodeEntry]
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., node_id: _Optional[int] = ..., epoch: _Optional[int] = ..., controller_voters: _Optional[_Iterable[int]] = ..., nodes: _Optional[_Iterable[_Union[NodeEntry, _Mapping]]] = ...) -> None: ...

class NodeHeartbeatRequest(_message.Message):
    __slots__ = ("node_id", "epoch", "want_fence", "forwarded")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    WANT_FENCE_FIELD_NUMBER: _ClassVar[int]
    FORWARDED_FIELD_NUMBER: _ClassVar[int]
    node_id: int
    epoch: int
    want_fence: bool
    forwarded: bool
    def __init__(self, node_id: _Optional[int] = ..., epoch: _Optional[int] = ..., want_fence: _Optional[bool] = ..., forwarded: _Optional[bool] = ...) -> None: ...

class NodeHeartbeatResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "fenced", "metadata_high_watermark")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    FENCED_FIELD_NUMBER: _ClassVar[int]
    METADATA_HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    fenced: bool
    metadata_high_watermark: int
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., fenced: _Optional[bool] = ..., metadata_high_watermark: _Optional[int] = ...) -> None: ...

class ForwardRequest(_message.Message):
    __slots__ = ("method", "request", "principal", "node_id")
    METHOD_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    method: str
    request: bytes
    principal: str
    node_id: int
    def __init__(self, method: _Optional[str] = ..., request: _Optional[bytes] = ..., principal: _Optional[str] = ..., node_id: _Optional[int] = ...) -> None: ...

class ForwardResponse(_message.Message):
    __slots__ = ("response",)
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    response: bytes
    def __init__(self, response: _Optional[bytes] = ...) -> None: ...
