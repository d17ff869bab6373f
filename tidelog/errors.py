"""Every error Tidelog can report: one class per Kafka error code, in Kafka's categories.

The categories are classes, as in the Java client (kafka-mapping §4.3), so the client decides
what to do with ``isinstance`` and a type checker sees the same hierarchy:

* ``RetriableError``: the same request may succeed if sent again (after a backoff).
* ``InvalidMetadataError`` (a ``RetriableError``, as Kafka's ``InvalidMetadataException``
  extends ``RetriableException``): the client's picture of the cluster is stale (a leader moved,
  a partition is unknown to the node asked), so metadata must be refreshed before the retry.
* ``StaleCoordinatorError`` (a ``RetriableError``): the node asked is not, or no longer, the
  coordinator of the group, so the coordinator must be found again (FindCoordinator) before the
  retry (the Java consumer's ``markCoordinatorUnknown``, kafka-mapping §7.9).
* ``AuthError``: ``AuthorizationError`` (not allowed) and ``AuthenticationError`` (not known);
  never retried.

Everything else is final. ``for_code(code)`` is the one lookup from a wire code to its class;
unknown codes map to UNKNOWN_SERVER_ERROR. The ``retriable`` and ``invalid_metadata`` class
flags are the categories again, for display; behaviour goes by class.
"""

from __future__ import annotations

from typing import Any, ClassVar

#: The most characters an error's message keeps. Messages quote the request's names and values,
#: and a request may bring megabytes of them (a 10 MB topic name): the answer must not echo them.
MAX_MESSAGE_CHARS = 1024


def clip(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """`text`, or when longer than `limit` characters its beginning and end around a marker
    saying how many characters were left out (the end keeps the reason most messages close
    with)."""
    if len(text) <= limit:
        return text
    tail = limit // 4
    head = limit - tail
    return f"{text[:head]}...[{len(text) - head - tail} characters left out]...{text[-tail:]}"


class TidelogError(Exception):
    """The server experienced an unexpected error."""

    code: ClassVar[int] = -1
    name: ClassVar[str] = "UNKNOWN_SERVER_ERROR"
    description: ClassVar[str] = "The server experienced an unexpected error."
    #: True exactly for subclasses of RetriableError (tests check that no class sets it apart).
    retriable: ClassVar[bool] = False
    #: True exactly for subclasses of InvalidMetadataError.
    invalid_metadata: ClassVar[bool] = False

    def __init_subclass__(
        cls, *, code: int | None = None, name: str | None = None, **kwargs: Any
    ) -> None:
        """A subclass given a Kafka `code` and `name` is that code's class; its docstring is
        its description."""
        super().__init_subclass__(**kwargs)
        if code is None:
            return
        if name is None or code in _BY_CODE:
            raise TypeError(f"error code {code} needs a name and must be defined once")
        cls.code, cls.name = code, name
        cls.description = (cls.__doc__ or name).strip()
        _BY_CODE[code] = cls

    def __init__(self, message: str | None = None) -> None:
        """`message` is clipped (:func:`clip`): every answer built from an error is short."""
        super().__init__(clip(message) if message is not None else self.description)

    def __str__(self) -> str:
        return f"[{self.name} ({self.code})] {super().__str__()}"


_BY_CODE: dict[int, type[TidelogError]] = {}


class RetriableError(TidelogError):
    """The request may succeed if sent again."""

    retriable = True


class InvalidMetadataError(RetriableError):
    """The client's metadata is stale: refresh it, then retry."""

    invalid_metadata = True


class StaleCoordinatorError(RetriableError):
    """The coordinator the client used is gone or wrong: find it again, then retry."""


class AuthError(TidelogError):
    """Authentication or authorization failed; never retried."""


class AuthorizationError(AuthError):
    """The principal is not allowed to do this."""


class AuthenticationError(AuthError):
    """The principal could not be authenticated."""


# ---- the Kafka codes (clients/.../common/protocol/Errors.java), with Kafka's categories ------

class UnknownServerError(TidelogError, code=-1, name="UNKNOWN_SERVER_ERROR"):
    """The server experienced an unexpected error."""


class OffsetOutOfRangeError(TidelogError, code=1, name="OFFSET_OUT_OF_RANGE"):
    """The requested offset is not within the range the server holds."""


class CorruptMessageError(RetriableError, code=2, name="CORRUPT_MESSAGE"):
    """A record batch failed its CRC check or is malformed."""


class UnknownTopicOrPartitionError(
    InvalidMetadataError, code=3, name="UNKNOWN_TOPIC_OR_PARTITION"
):
    """This server does not host this topic-partition."""


class InvalidFetchSizeError(TidelogError, code=4, name="INVALID_FETCH_SIZE"):
    """The requested fetch size is invalid."""


class LeaderNotAvailableError(InvalidMetadataError, code=5, name="LEADER_NOT_AVAILABLE"):
    """There is no leader for this topic-partition (election under way)."""


class NotLeaderOrFollowerError(InvalidMetadataError, code=6, name="NOT_LEADER_OR_FOLLOWER"):
    """This server is not the leader (or a replica) of the partition."""


class RequestTimedOutError(RetriableError, code=7, name="REQUEST_TIMED_OUT"):
    """The request timed out."""


class BrokerNotAvailableError(TidelogError, code=8, name="BROKER_NOT_AVAILABLE"):
    """The node is not available."""


class ReplicaNotAvailableError(InvalidMetadataError, code=9, name="REPLICA_NOT_AVAILABLE"):
    """The replica is not available for the requested partition."""


class MessageTooLargeError(TidelogError, code=10, name="MESSAGE_TOO_LARGE"):
    """The request included a record larger than the server accepts."""


class StaleControllerEpochError(TidelogError, code=11, name="STALE_CONTROLLER_EPOCH"):
    """The controller moved to another node."""


class OffsetMetadataTooLargeError(TidelogError, code=12, name="OFFSET_METADATA_TOO_LARGE"):
    """The metadata of the offset commit is too large."""


class NetworkExceptionError(InvalidMetadataError, code=13, name="NETWORK_EXCEPTION"):
    """The server disconnected before a response was received."""


class CoordinatorLoadInProgressError(RetriableError, code=14, name="COORDINATOR_LOAD_IN_PROGRESS"):
    """The coordinator is loading and cannot serve yet."""


class CoordinatorNotAvailableError(
    StaleCoordinatorError, code=15, name="COORDINATOR_NOT_AVAILABLE"
):
    """The coordinator is not available."""


class NotCoordinatorError(StaleCoordinatorError, code=16, name="NOT_COORDINATOR"):
    """This is not the correct coordinator."""


class InvalidTopicError(TidelogError, code=17, name="INVALID_TOPIC_EXCEPTION"):
    """The topic name is invalid or the topic is internal."""


class RecordListTooLargeError(TidelogError, code=18, name="RECORD_LIST_TOO_LARGE"):
    """The record batch is larger than the maximum segment size."""


class NotEnoughReplicasError(RetriableError, code=19, name="NOT_ENOUGH_REPLICAS"):
    """Fewer in-sync replicas than required."""


class NotEnoughReplicasAfterAppendError(
    RetriableError, code=20, name="NOT_ENOUGH_REPLICAS_AFTER_APPEND"
):
    """The write succeeded on fewer replicas than required."""


class InvalidRequiredAcksError(TidelogError, code=21, name="INVALID_REQUIRED_ACKS"):
    """acks must be 0, 1 or all (-1)."""


class IllegalGenerationError(TidelogError, code=22, name="ILLEGAL_GENERATION"):
    """The generation id is not current."""


class InconsistentGroupProtocolError(TidelogError, code=23, name="INCONSISTENT_GROUP_PROTOCOL"):
    """The member's protocol type or protocols do not match the group's."""


class InvalidGroupIdError(TidelogError, code=24, name="INVALID_GROUP_ID"):
    """The group id is invalid."""


class UnknownMemberIdError(TidelogError, code=25, name="UNKNOWN_MEMBER_ID"):
    """The member id is not in the group."""


class InvalidSessionTimeoutError(TidelogError, code=26, name="INVALID_SESSION_TIMEOUT"):
    """The session timeout is out of the allowed range."""


class RebalanceInProgressError(TidelogError, code=27, name="REBALANCE_IN_PROGRESS"):
    """The group is rebalancing."""


class InvalidCommitOffsetSizeError(TidelogError, code=28, name="INVALID_COMMIT_OFFSET_SIZE"):
    """The offset commit was rejected because of its size."""


class TopicAuthorizationFailedError(
    AuthorizationError, code=29, name="TOPIC_AUTHORIZATION_FAILED"
):
    """Not authorized to access this topic."""


class GroupAuthorizationFailedError(
    AuthorizationError, code=30, name="GROUP_AUTHORIZATION_FAILED"
):
    """Not authorized to access this group."""


class ClusterAuthorizationFailedError(
    AuthorizationError, code=31, name="CLUSTER_AUTHORIZATION_FAILED"
):
    """Not authorized to perform this cluster operation."""


class InvalidTimestampError(TidelogError, code=32, name="INVALID_TIMESTAMP"):
    """The timestamp of a record is out of the acceptable range."""


class UnsupportedSaslMechanismError(
    AuthenticationError, code=33, name="UNSUPPORTED_SASL_MECHANISM"
):
    """The server does not support the requested SASL mechanism."""


class IllegalSaslStateError(AuthenticationError, code=34, name="ILLEGAL_SASL_STATE"):
    """The request is not valid in the current SASL state."""


class UnsupportedVersionError(TidelogError, code=35, name="UNSUPPORTED_VERSION"):
    """The request or value is not supported by this server."""


class TopicAlreadyExistsError(TidelogError, code=36, name="TOPIC_ALREADY_EXISTS"):
    """The topic already exists."""


class InvalidPartitionsError(TidelogError, code=37, name="INVALID_PARTITIONS"):
    """The number of partitions is invalid."""


class InvalidReplicationFactorError(TidelogError, code=38, name="INVALID_REPLICATION_FACTOR"):
    """The replication factor is invalid."""


class InvalidReplicaAssignmentError(TidelogError, code=39, name="INVALID_REPLICA_ASSIGNMENT"):
    """The replica assignment is invalid."""


class InvalidConfigError(TidelogError, code=40, name="INVALID_CONFIG"):
    """The configuration is invalid."""


class NotControllerError(RetriableError, code=41, name="NOT_CONTROLLER"):
    """This node is not the metadata leader (controller)."""


class InvalidRequestError(TidelogError, code=42, name="INVALID_REQUEST"):
    """The request is malformed or violates the protocol."""


class UnsupportedForMessageFormatError(
    TidelogError, code=43, name="UNSUPPORTED_FOR_MESSAGE_FORMAT"
):
    """The message format does not support this request."""


class PolicyViolationError(TidelogError, code=44, name="POLICY_VIOLATION"):
    """The request violates a configured policy."""


class OutOfOrderSequenceNumberError(TidelogError, code=45, name="OUT_OF_ORDER_SEQUENCE_NUMBER"):
    """The broker received an out of order sequence number."""


class DuplicateSequenceNumberError(TidelogError, code=46, name="DUPLICATE_SEQUENCE_NUMBER"):
    """The broker received a duplicate sequence number."""


class InvalidProducerEpochError(TidelogError, code=47, name="INVALID_PRODUCER_EPOCH"):
    """The producer's epoch is older than the current one."""


class InvalidTxnStateError(TidelogError, code=48, name="INVALID_TXN_STATE"):
    """The producer attempted an operation in an invalid state."""


class InvalidProducerIdMappingError(TidelogError, code=49, name="INVALID_PRODUCER_ID_MAPPING"):
    """The producer id does not match the transactional id."""


class InvalidTransactionTimeoutError(TidelogError, code=50, name="INVALID_TRANSACTION_TIMEOUT"):
    """The transaction timeout is out of range."""


class ConcurrentTransactionsError(RetriableError, code=51, name="CONCURRENT_TRANSACTIONS"):
    """The previous transaction is still completing."""


class TransactionCoordinatorFencedError(
    TidelogError, code=52, name="TRANSACTION_COORDINATOR_FENCED"
):
    """A newer transaction coordinator exists."""


class TransactionalIdAuthorizationFailedError(
    AuthorizationError, code=53, name="TRANSACTIONAL_ID_AUTHORIZATION_FAILED"
):
    """Not authorized to use this transactional id."""


class SecurityDisabledError(TidelogError, code=54, name="SECURITY_DISABLED"):
    """Security features are disabled."""


class OperationNotAttemptedError(TidelogError, code=55, name="OPERATION_NOT_ATTEMPTED"):
    """The operation was not attempted because another in the batch failed."""


class KafkaStorageError(InvalidMetadataError, code=56, name="KAFKA_STORAGE_ERROR"):
    """Disk error when accessing the replica's log."""


class LogDirNotFoundError(TidelogError, code=57, name="LOG_DIR_NOT_FOUND"):
    """The log directory is not found in the configuration."""


class SaslAuthenticationFailedError(
    AuthenticationError, code=58, name="SASL_AUTHENTICATION_FAILED"
):
    """SASL authentication failed."""


class UnknownProducerIdError(TidelogError, code=59, name="UNKNOWN_PRODUCER_ID"):
    """The broker has no state for this producer id."""


class ReassignmentInProgressError(TidelogError, code=60, name="REASSIGNMENT_IN_PROGRESS"):
    """A partition reassignment is in progress."""


class DelegationTokenAuthDisabledError(
    TidelogError, code=61, name="DELEGATION_TOKEN_AUTH_DISABLED"
):
    """Delegation token authentication is disabled."""


class DelegationTokenNotFoundError(TidelogError, code=62, name="DELEGATION_TOKEN_NOT_FOUND"):
    """The delegation token is not found."""


class DelegationTokenOwnerMismatchError(
    TidelogError, code=63, name="DELEGATION_TOKEN_OWNER_MISMATCH"
):
    """The principal is not the owner of the delegation token."""


class DelegationTokenRequestNotAllowedError(
    TidelogError, code=64, name="DELEGATION_TOKEN_REQUEST_NOT_ALLOWED"
):
    """Delegation token requests are not allowed on this connection."""


class DelegationTokenAuthorizationFailedError(
    AuthorizationError, code=65, name="DELEGATION_TOKEN_AUTHORIZATION_FAILED"
):
    """Not authorized for this delegation token operation."""


class DelegationTokenExpiredError(TidelogError, code=66, name="DELEGATION_TOKEN_EXPIRED"):
    """The delegation token has expired."""


class InvalidPrincipalTypeError(TidelogError, code=67, name="INVALID_PRINCIPAL_TYPE"):
    """The principal type is not supported."""


class NonEmptyGroupError(TidelogError, code=68, name="NON_EMPTY_GROUP"):
    """The group is not empty."""


class GroupIdNotFoundError(TidelogError, code=69, name="GROUP_ID_NOT_FOUND"):
    """The group id does not exist."""


class FetchSessionIdNotFoundError(RetriableError, code=70, name="FETCH_SESSION_ID_NOT_FOUND"):
    """The fetch session id was not found."""


class InvalidFetchSessionEpochError(RetriableError, code=71, name="INVALID_FETCH_SESSION_EPOCH"):
    """The fetch session epoch is invalid."""


class ListenerNotFoundError(InvalidMetadataError, code=72, name="LISTENER_NOT_FOUND"):
    """No endpoint for the listener on the leader."""


class TopicDeletionDisabledError(TidelogError, code=73, name="TOPIC_DELETION_DISABLED"):
    """Topic deletion is disabled."""


class FencedLeaderEpochError(InvalidMetadataError, code=74, name="FENCED_LEADER_EPOCH"):
    """The request's leader epoch is older than the replica's."""


class UnknownLeaderEpochError(RetriableError, code=75, name="UNKNOWN_LEADER_EPOCH"):
    """The request's leader epoch is newer than the replica's."""


class UnsupportedCompressionTypeError(TidelogError, code=76, name="UNSUPPORTED_COMPRESSION_TYPE"):
    """The consumer does not support the compression type of the data."""


class StaleBrokerEpochError(TidelogError, code=77, name="STALE_BROKER_EPOCH"):
    """The broker epoch has changed."""


class OffsetNotAvailableError(RetriableError, code=78, name="OFFSET_NOT_AVAILABLE"):
    """The new leader's high watermark has not caught up yet."""


class MemberIdRequiredError(TidelogError, code=79, name="MEMBER_ID_REQUIRED"):
    """The group member needs a valid member id to join."""


class PreferredLeaderNotAvailableError(
    InvalidMetadataError, code=80, name="PREFERRED_LEADER_NOT_AVAILABLE"
):
    """The preferred leader was not available."""


class GroupMaxSizeReachedError(TidelogError, code=81, name="GROUP_MAX_SIZE_REACHED"):
    """The group has reached its maximum size."""


class FencedInstanceIdError(TidelogError, code=82, name="FENCED_INSTANCE_ID"):
    """The static member was fenced."""


class EligibleLeadersNotAvailableError(
    InvalidMetadataError, code=83, name="ELIGIBLE_LEADERS_NOT_AVAILABLE"
):
    """No eligible leader is available for the election."""


class ElectionNotNeededError(InvalidMetadataError, code=84, name="ELECTION_NOT_NEEDED"):
    """The leader election is not needed."""


class NoReassignmentInProgressError(TidelogError, code=85, name="NO_REASSIGNMENT_IN_PROGRESS"):
    """No partition reassignment is in progress."""


class GroupSubscribedToTopicError(TidelogError, code=86, name="GROUP_SUBSCRIBED_TO_TOPIC"):
    """The group still consumes from the topic."""


class InvalidRecordError(TidelogError, code=87, name="INVALID_RECORD"):
    """A record failed the server's validation."""


class UnstableOffsetCommitError(RetriableError, code=88, name="UNSTABLE_OFFSET_COMMIT"):
    """There are unstable offsets that need to be cleared."""


class ThrottlingQuotaExceededError(RetriableError, code=89, name="THROTTLING_QUOTA_EXCEEDED"):
    """The throttling quota has been exceeded."""


class ProducerFencedError(TidelogError, code=90, name="PRODUCER_FENCED"):
    """A newer producer with the same transactional id exists."""


class ResourceNotFoundError(TidelogError, code=91, name="RESOURCE_NOT_FOUND"):
    """A request illegally referred to a resource that does not exist."""


class DuplicateResourceError(TidelogError, code=92, name="DUPLICATE_RESOURCE"):
    """A request illegally referred to the same resource twice."""


class UnacceptableCredentialError(TidelogError, code=93, name="UNACCEPTABLE_CREDENTIAL"):
    """The requested credential would not meet the criteria for acceptability."""


class InconsistentVoterSetError(TidelogError, code=94, name="INCONSISTENT_VOTER_SET"):
    """The voter is not part of the set of voters."""


class InvalidUpdateVersionError(TidelogError, code=95, name="INVALID_UPDATE_VERSION"):
    """The given update version was invalid."""


class FeatureUpdateFailedError(TidelogError, code=96, name="FEATURE_UPDATE_FAILED"):
    """Updating the finalized features failed."""


class PrincipalDeserializationFailureError(
    TidelogError, code=97, name="PRINCIPAL_DESERIALIZATION_FAILURE"
):
    """The forwarded principal could not be deserialized."""


class SnapshotNotFoundError(TidelogError, code=98, name="SNAPSHOT_NOT_FOUND"):
    """The requested snapshot was not found."""


class PositionOutOfRangeError(TidelogError, code=99, name="POSITION_OUT_OF_RANGE"):
    """The requested position is not within the snapshot."""


class UnknownTopicIdError(InvalidMetadataError, code=100, name="UNKNOWN_TOPIC_ID"):
    """This server does not host this topic id."""


class DuplicateBrokerRegistrationError(
    TidelogError, code=101, name="DUPLICATE_BROKER_REGISTRATION"
):
    """This broker id is already in use."""


class BrokerIdNotRegisteredError(TidelogError, code=102, name="BROKER_ID_NOT_REGISTERED"):
    """The given broker id was not registered."""


class InconsistentTopicIdError(InvalidMetadataError, code=103, name="INCONSISTENT_TOPIC_ID"):
    """The log's topic id does not match the topic id in the request."""


class InconsistentClusterIdError(TidelogError, code=104, name="INCONSISTENT_CLUSTER_ID"):
    """The cluster id in the request does not match the cluster's."""


class TransactionalIdNotFoundError(TidelogError, code=105, name="TRANSACTIONAL_ID_NOT_FOUND"):
    """The transactional id could not be found."""


class FetchSessionTopicIdErrorError(RetriableError, code=106, name="FETCH_SESSION_TOPIC_ID_ERROR"):
    """The fetch session saw a topic id error."""


class IneligibleReplicaError(TidelogError, code=107, name="INELIGIBLE_REPLICA"):
    """The new ISR contains at least one ineligible replica."""


class NewLeaderElectedError(TidelogError, code=108, name="NEW_LEADER_ELECTED"):
    """The AlterPartition request lost to a new leader election."""


class OffsetMovedToTieredStorageError(
    TidelogError, code=109, name="OFFSET_MOVED_TO_TIERED_STORAGE"
):
    """The requested offset has moved to tiered storage."""


class FencedMemberEpochError(TidelogError, code=110, name="FENCED_MEMBER_EPOCH"):
    """The member epoch is fenced by the group coordinator."""


class UnreleasedInstanceIdError(TidelogError, code=111, name="UNRELEASED_INSTANCE_ID"):
    """The instance id is still used by another member."""


class UnsupportedAssignorError(TidelogError, code=112, name="UNSUPPORTED_ASSIGNOR"):
    """The assignor or its version range is not supported."""


class StaleMemberEpochError(TidelogError, code=113, name="STALE_MEMBER_EPOCH"):
    """The member epoch is stale."""


class MismatchedEndpointTypeError(TidelogError, code=114, name="MISMATCHED_ENDPOINT_TYPE"):
    """The request was sent to an endpoint of the wrong type."""


class UnsupportedEndpointTypeError(TidelogError, code=115, name="UNSUPPORTED_ENDPOINT_TYPE"):
    """This endpoint type is not supported yet."""


class UnknownControllerIdError(TidelogError, code=116, name="UNKNOWN_CONTROLLER_ID"):
    """This controller id is not known."""


class UnknownSubscriptionIdError(TidelogError, code=117, name="UNKNOWN_SUBSCRIPTION_ID"):
    """The client sent a push telemetry request with an unknown subscription id."""


class TelemetryTooLargeError(TidelogError, code=118, name="TELEMETRY_TOO_LARGE"):
    """The client sent a push telemetry request larger than the maximum size."""


class InvalidRegistrationError(TidelogError, code=119, name="INVALID_REGISTRATION"):
    """The controller considered the registration invalid."""


class TransactionAbortableError(TidelogError, code=120, name="TRANSACTION_ABORTABLE"):
    """The server hit an error the transaction can recover from by aborting."""


class InvalidRecordStateError(TidelogError, code=121, name="INVALID_RECORD_STATE"):
    """The record state is invalid."""


class ShareSessionNotFoundError(RetriableError, code=122, name="SHARE_SESSION_NOT_FOUND"):
    """The share session was not found."""


class InvalidShareSessionEpochError(RetriableError, code=123, name="INVALID_SHARE_SESSION_EPOCH"):
    """The share session epoch is invalid."""


class FencedStateEpochError(TidelogError, code=124, name="FENCED_STATE_EPOCH"):
    """The share coordinator rejected the request: the state epoch is fenced."""


class InvalidVoterKeyError(TidelogError, code=125, name="INVALID_VOTER_KEY"):
    """The voter key does not match the receiving replica's key."""


class DuplicateVoterError(TidelogError, code=126, name="DUPLICATE_VOTER"):
    """The voter is already part of the set of voters."""


class VoterNotFoundError(TidelogError, code=127, name="VOTER_NOT_FOUND"):
    """The voter is not part of the set of voters."""


class InvalidRegularExpressionError(TidelogError, code=128, name="INVALID_REGULAR_EXPRESSION"):
    """The regular expression is not valid."""


class RebootstrapRequiredError(TidelogError, code=129, name="REBOOTSTRAP_REQUIRED"):
    """The client must repeat the bootstrap process."""


def for_code(code: int) -> type[TidelogError]:
    """The error class for a Kafka error code; unknown codes map to UNKNOWN_SERVER_ERROR."""
    return _BY_CODE.get(code, UnknownServerError)


def all_errors() -> list[type[TidelogError]]:
    """Every Kafka code's class, ordered by code."""
    return [_BY_CODE[code] for code in sorted(_BY_CODE)]


class NodeUnavailableError(InvalidMetadataError):
    """A transport failure (refused, unavailable, deadline): retriable, and the node is suspect."""

    name = "CONNECTION_ERROR"
    description = "The node could not be reached."


class SslAuthenticationError(AuthenticationError):
    """A TLS handshake with a node failed, or a node's listener speaks another protocol than
    the client (Kafka's SslAuthenticationException): a setting to fix, never retried."""

    name = "SSL_AUTHENTICATION_FAILED"
    description = "The TLS handshake with the node failed."


class ConfigurationError(TidelogError, ValueError):
    """A client-side misuse (bad argument); never retried."""

    name = "CONFIGURATION_ERROR"
    description = "Invalid argument."


class CorruptRecordError(TidelogError):
    """A consumer met a batch it cannot decode (a bad CRC, lengths that lie, a format it does
    not read) at `offset` of `topic`-`partition`.

    Kafka's consumer does the same with its CorruptRecordException: the records before the
    bad batch are returned first, then poll() raises and the position stays on the bad batch,
    so nothing is skipped silently. Final rather than retriable (unlike CORRUPT_MESSAGE from a
    produce): fetching the same bytes again cannot help, and only the application can decide
    to seek past them. It carries Kafka's CORRUPT_MESSAGE code without being that code's
    class, which stays the codec's and the leader's error.
    """

    code = CorruptMessageError.code
    name = CorruptMessageError.name
    description = "A fetched record batch is corrupt."

    def __init__(self, topic: str, partition: int, offset: int, reason: str) -> None:
        super().__init__(f"{topic}-{partition} at offset {offset}: {reason}")
        self.topic = topic
        self.partition = partition
        self.offset = offset


class IllegalStateError(ConfigurationError):
    """A client object used in a state that does not allow the call (Kafka's
    IllegalStateException): a consumer polled with nothing assigned or subscribed, any call
    on a closed consumer. A misuse to fix in the application, never retried."""

    name = "ILLEGAL_STATE"
    description = "The client object is not in a state that allows this call."


class IllegalTransactionStateError(ConfigurationError):
    """A transactional producer's method called in a state that does not allow it (Kafka's
    IllegalStateException: send() outside a transaction, commit before begin, ...)."""

    name = "ILLEGAL_TRANSACTION_STATE"
    description = "The transactional producer is not in a state that allows this call."


class TransactionAbortedError(TidelogError):
    """A record of a transaction the application aborted before the record was sent (Kafka's
    TransactionAbortedException): it is not in the log."""

    name = "TRANSACTION_ABORTED"
    description = "The record's transaction was aborted before it was sent."
