"""Every error Tidelog can report, with Kafka's code and Kafka's retry semantics.

One class per Kafka error code, as kafka-python and aiokafka do. Two flags drive the client's
retry policy so that it never matches error names case by case:

* ``retriable``: the same request may succeed if sent again (after a backoff).
* ``invalid_metadata``: the error means the client's picture of the cluster is stale (a leader
  moved, a partition is unknown to the node asked), so metadata must be refreshed before the
  retry. Every ``invalid_metadata`` error is also retriable, as Kafka's
  ``InvalidMetadataException`` extends ``RetriableException``.

The flags follow the Java client's exception hierarchy (kafka-reference §4.3).
"""

from __future__ import annotations

from typing import ClassVar


class TidelogError(Exception):
    """Base of every error raised by Tidelog code."""

    code: ClassVar[int] = -1
    name: ClassVar[str] = "UNKNOWN_SERVER_ERROR"
    retriable: ClassVar[bool] = False
    invalid_metadata: ClassVar[bool] = False
    description: ClassVar[str] = "The server experienced an unexpected error."

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message if message is not None else self.description)

    def __str__(self) -> str:
        return f"[{self.name} ({self.code})] {super().__str__()}"


_BY_CODE: dict[int, type[TidelogError]] = {}


def _define(
    code: int,
    name: str,
    description: str,
    *,
    retriable: bool = False,
    invalid_metadata: bool = False,
) -> type[TidelogError]:
    """Create and register the class for one Kafka error code."""
    class_name = "".join(part.capitalize() for part in name.lower().split("_")) + "Error"
    cls = type(
        class_name,
        (TidelogError,),
        {
            "code": code,
            "name": name,
            "retriable": retriable or invalid_metadata,
            "invalid_metadata": invalid_metadata,
            "description": description,
            "__doc__": description,
            "__module__": __name__,
        },
    )
    _BY_CODE[code] = cls
    return cls


UnknownServerError = _define(-1, "UNKNOWN_SERVER_ERROR", TidelogError.description)
OffsetOutOfRangeError = _define(
    1, "OFFSET_OUT_OF_RANGE", "The requested offset is not within the range the server holds."
)
CorruptMessageError = _define(
    2, "CORRUPT_MESSAGE", "A record batch failed its CRC check or is malformed.", retriable=True
)
UnknownTopicOrPartitionError = _define(
    3, "UNKNOWN_TOPIC_OR_PARTITION", "This server does not host this topic-partition.",
    invalid_metadata=True,
)
InvalidFetchSizeError = _define(4, "INVALID_FETCH_SIZE", "The requested fetch size is invalid.")
LeaderNotAvailableError = _define(
    5, "LEADER_NOT_AVAILABLE", "There is no leader for this topic-partition (election under way).",
    invalid_metadata=True,
)
NotLeaderOrFollowerError = _define(
    6, "NOT_LEADER_OR_FOLLOWER", "This server is not the leader (or a replica) of the partition.",
    invalid_metadata=True,
)
RequestTimedOutError = _define(
    7, "REQUEST_TIMED_OUT", "The request timed out.", retriable=True
)
BrokerNotAvailableError = _define(8, "BROKER_NOT_AVAILABLE", "The node is not available.")
ReplicaNotAvailableError = _define(
    9, "REPLICA_NOT_AVAILABLE", "The replica is not available for the requested partition.",
    invalid_metadata=True,
)
MessageTooLargeError = _define(
    10, "MESSAGE_TOO_LARGE", "The request included a record larger than the server accepts."
)
OffsetMetadataTooLargeError = _define(
    12, "OFFSET_METADATA_TOO_LARGE", "The metadata of the offset commit is too large."
)
NetworkExceptionError = _define(
    13, "NETWORK_EXCEPTION", "The server disconnected before a response was received.",
    invalid_metadata=True,
)
CoordinatorLoadInProgressError = _define(
    14, "COORDINATOR_LOAD_IN_PROGRESS", "The coordinator is loading and cannot serve yet.",
    retriable=True,
)
CoordinatorNotAvailableError = _define(
    15, "COORDINATOR_NOT_AVAILABLE", "The coordinator is not available.", retriable=True
)
NotCoordinatorError = _define(
    16, "NOT_COORDINATOR", "This is not the correct coordinator.", retriable=True
)
InvalidTopicError = _define(
    17, "INVALID_TOPIC_EXCEPTION", "The topic name is invalid or the topic is internal."
)
RecordListTooLargeError = _define(
    18, "RECORD_LIST_TOO_LARGE", "The record batch is larger than the maximum segment size."
)
NotEnoughReplicasError = _define(
    19, "NOT_ENOUGH_REPLICAS", "Fewer in-sync replicas than required.", retriable=True
)
NotEnoughReplicasAfterAppendError = _define(
    20, "NOT_ENOUGH_REPLICAS_AFTER_APPEND", "The write succeeded on fewer replicas than required.",
    retriable=True,
)
InvalidRequiredAcksError = _define(21, "INVALID_REQUIRED_ACKS", "acks must be 0, 1 or all (-1).")
IllegalGenerationError = _define(22, "ILLEGAL_GENERATION", "The generation id is not current.")
InvalidGroupIdError = _define(24, "INVALID_GROUP_ID", "The group id is invalid.")
UnknownMemberIdError = _define(25, "UNKNOWN_MEMBER_ID", "The member id is not in the group.")
RebalanceInProgressError = _define(
    27, "REBALANCE_IN_PROGRESS", "The group is rebalancing."
)
InvalidCommitOffsetSizeError = _define(
    28, "INVALID_COMMIT_OFFSET_SIZE", "The offset commit was rejected because of its size."
)
TopicAuthorizationFailedError = _define(
    29, "TOPIC_AUTHORIZATION_FAILED", "Not authorized to access this topic."
)
GroupAuthorizationFailedError = _define(
    30, "GROUP_AUTHORIZATION_FAILED", "Not authorized to access this group."
)
InvalidTimestampError = _define(
    32, "INVALID_TIMESTAMP", "The timestamp of a record is out of the acceptable range."
)
UnsupportedVersionError = _define(
    35, "UNSUPPORTED_VERSION", "The request or value is not supported by this server."
)
TopicAlreadyExistsError = _define(36, "TOPIC_ALREADY_EXISTS", "The topic already exists.")
InvalidPartitionsError = _define(37, "INVALID_PARTITIONS", "The number of partitions is invalid.")
InvalidReplicationFactorError = _define(
    38, "INVALID_REPLICATION_FACTOR", "The replication factor is invalid."
)
InvalidReplicaAssignmentError = _define(
    39, "INVALID_REPLICA_ASSIGNMENT", "The replica assignment is invalid."
)
InvalidConfigError = _define(40, "INVALID_CONFIG", "The configuration is invalid.")
NotControllerError = _define(
    41, "NOT_CONTROLLER", "This node is not the metadata leader (controller).", retriable=True
)
InvalidRequestError = _define(
    42, "INVALID_REQUEST", "The request is malformed or violates the protocol."
)
UnsupportedForMessageFormatError = _define(
    43, "UNSUPPORTED_FOR_MESSAGE_FORMAT", "The message format does not support this request."
)
OutOfOrderSequenceNumberError = _define(
    45, "OUT_OF_ORDER_SEQUENCE_NUMBER", "The broker received an out of order sequence number."
)
DuplicateSequenceNumberError = _define(
    46, "DUPLICATE_SEQUENCE_NUMBER", "The broker received a duplicate sequence number."
)
InvalidProducerEpochError = _define(
    47, "INVALID_PRODUCER_EPOCH", "The producer's epoch is older than the current one."
)
InvalidTxnStateError = _define(
    48, "INVALID_TXN_STATE", "The producer attempted an operation in an invalid state."
)
InvalidProducerIdMappingError = _define(
    49, "INVALID_PRODUCER_ID_MAPPING", "The producer id does not match the transactional id."
)
InvalidTransactionTimeoutError = _define(
    50, "INVALID_TRANSACTION_TIMEOUT", "The transaction timeout is out of range."
)
ConcurrentTransactionsError = _define(
    51, "CONCURRENT_TRANSACTIONS", "The previous transaction is still completing.", retriable=True
)
KafkaStorageError = _define(
    56, "KAFKA_STORAGE_ERROR", "Disk error when accessing the replica's log.",
    invalid_metadata=True,
)
UnknownProducerIdError = _define(
    59, "UNKNOWN_PRODUCER_ID", "The broker has no state for this producer id."
)
GroupIdNotFoundError = _define(69, "GROUP_ID_NOT_FOUND", "The group id does not exist.")
FencedLeaderEpochError = _define(
    74, "FENCED_LEADER_EPOCH", "The request's leader epoch is older than the replica's.",
    invalid_metadata=True,
)
UnknownLeaderEpochError = _define(
    75, "UNKNOWN_LEADER_EPOCH", "The request's leader epoch is newer than the replica's.",
    retriable=True,
)
OffsetNotAvailableError = _define(
    78, "OFFSET_NOT_AVAILABLE", "The new leader's high watermark has not caught up yet.",
    retriable=True,
)
FencedInstanceIdError = _define(82, "FENCED_INSTANCE_ID", "The static member was fenced.")
UnstableOffsetCommitError = _define(
    88, "UNSTABLE_OFFSET_COMMIT", "There are unstable offsets that need to be cleared.",
    retriable=True,
)
ProducerFencedError = _define(
    90, "PRODUCER_FENCED", "A newer producer with the same transactional id exists."
)


def for_code(code: int) -> type[TidelogError]:
    """The error class for a Kafka error code; unknown codes map to UNKNOWN_SERVER_ERROR."""
    return _BY_CODE.get(code, UnknownServerError)


def all_errors() -> list[type[TidelogError]]:
    """Every registered error class, ordered by code."""
    return [_BY_CODE[code] for code in sorted(_BY_CODE)]


class NodeUnavailableError(TidelogError):
    """A transport failure (refused, unavailable, deadline): retriable, and the node is suspect."""

    code = -1
    name = "CONNECTION_ERROR"
    retriable = True
    invalid_metadata = True
    description = "The node could not be reached."


class ConfigurationError(TidelogError, ValueError):
    """A client-side misuse (bad argument); never retried."""

    code = -1
    name = "CONFIGURATION_ERROR"
    description = "Invalid argument."
