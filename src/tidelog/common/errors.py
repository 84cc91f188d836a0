"""Error codes shared by every Tidelog component.

Codes and names follow Apache Kafka's protocol error codes so that people who know Kafka read them
without a table; docs/errors.md lists them. A component raises a `TidelogError` subclass; the RPC
layer turns `error.code` into a gRPC status plus this code, the REST gateway into its own codes.
"""

from __future__ import annotations

import enum

__all__ = [
    "RETRIABLE_CODES",
    "ClusterAuthorizationFailedError",
    "CorruptRecordError",
    "DuplicateSequenceError",
    "ErrorCode",
    "GroupAuthorizationFailedError",
    "InvalidConfigError",
    "InvalidPartitionsError",
    "InvalidProducerEpochError",
    "InvalidRecordError",
    "InvalidReplicaAssignmentError",
    "InvalidReplicationFactorError",
    "InvalidRequestError",
    "InvalidTopicError",
    "KafkaStorageError",
    "LeaderNotAvailableError",
    "NoReassignmentInProgressError",
    "NotControllerError",
    "NotEnoughReplicasError",
    "NotLeaderOrFollowerError",
    "OffsetOutOfRangeError",
    "OutOfOrderSequenceError",
    "ReassignmentInProgressError",
    "RecordTooLargeError",
    "RemoteError",
    "RequestTimedOutError",
    "SaslAuthenticationFailedError",
    "StaleControllerEpochError",
    "TidelogError",
    "TopicAlreadyExistsError",
    "TopicAuthorizationFailedError",
    "TopicDeletionDisabledError",
    "UnknownTopicOrPartitionError",
    "UnsupportedCompressionTypeError",
    "error_for",
]


class ErrorCode(enum.IntEnum):
    """Kafka's protocol error codes, by the same names and numbers."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10
    STALE_CONTROLLER_EPOCH = 11
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    COORDINATOR_LOAD_IN_PROGRESS = 14
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71
    MEMBER_ID_REQUIRED = 79
    FENCED_INSTANCE_ID = 82
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    INVALID_TIMESTAMP = 32
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    PRODUCER_FENCED = 90
    TRANSACTIONAL_ID_NOT_FOUND = 105
    UNKNOWN_TOPIC_ID = 100
    UNSTABLE_OFFSET_COMMIT = 88
    TOPIC_AUTHORIZATION_FAILED = 29
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    SASL_AUTHENTICATION_FAILED = 58
    THROTTLING_QUOTA_EXCEEDED = 89
    RESOURCE_NOT_FOUND = 91
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    UNKNOWN_PRODUCER_ID = 59
    REASSIGNMENT_IN_PROGRESS = 60
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    NO_REASSIGNMENT_IN_PROGRESS = 85
    INVALID_REPLICA_ASSIGNMENT = 39
    KAFKA_STORAGE_ERROR = 56
    TOPIC_DELETION_DISABLED = 73
    UNSUPPORTED_COMPRESSION_TYPE = 76
    FENCED_LEADER_EPOCH = 74
    STALE_BROKER_EPOCH = 77
    UNKNOWN_LEADER_EPOCH = 75
    INVALID_RECORD = 87
    INVALID_UPDATE_VERSION = 95
    INELIGIBLE_REPLICA = 107


RETRIABLE_CODES = frozenset(
    {
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.NOT_CONTROLLER,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.BROKER_NOT_AVAILABLE,
        ErrorCode.REPLICA_NOT_AVAILABLE,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.CONCURRENT_TRANSACTIONS,
        ErrorCode.UNSTABLE_OFFSET_COMMIT,
    }
)


class TidelogError(Exception):
    """Base of every error Tidelog reports to a caller; `code` says which one."""

    code: ErrorCode = ErrorCode.UNKNOWN_SERVER_ERROR

    @property
    def retriable(self) -> bool:
        """Whether trying again may succeed (derived from the code: one list, RETRIABLE_CODES)."""
        return self.code in RETRIABLE_CODES

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return f"{self.code.name}: {self.message}"


class CorruptRecordError(TidelogError):
    """A batch failed its CRC, or its framing is inconsistent (lengths, counts)."""

    code = ErrorCode.CORRUPT_MESSAGE


class InvalidRecordError(TidelogError):
    """A batch is well framed but breaks a rule: wrong magic, bad offsets, unknown attributes."""

    code = ErrorCode.INVALID_RECORD


class RecordTooLargeError(TidelogError):
    """A batch is larger than `max.message.bytes` (or the segment could ever hold)."""

    code = ErrorCode.MESSAGE_TOO_LARGE


class UnsupportedCompressionTypeError(TidelogError):
    code = ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


class OffsetOutOfRangeError(TidelogError):
    """The offset asked for is below the log start offset or above the log end offset."""

    code = ErrorCode.OFFSET_OUT_OF_RANGE


class InvalidConfigError(TidelogError):
    code = ErrorCode.INVALID_CONFIG


class KafkaStorageError(TidelogError):
    """The storage under a partition failed (I/O error, corrupt data found while serving)."""

    code = ErrorCode.KAFKA_STORAGE_ERROR


class RemoteError(TidelogError):
    """An error carrying any code: for answers relayed from another component."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def error_for(code: ErrorCode | int, message: str) -> TidelogError:
    """The exception for a code received in a response: its own class when there is one."""
    known = _CLASS_BY_CODE.get(ErrorCode(code))
    return known(message) if known is not None else RemoteError(ErrorCode(code), message)


class InvalidTopicError(TidelogError):
    """A topic name breaks the rules."""

    code = ErrorCode.INVALID_TOPIC_EXCEPTION


class TopicAlreadyExistsError(TidelogError):
    """The topic exists."""

    code = ErrorCode.TOPIC_ALREADY_EXISTS


class InvalidPartitionsError(TidelogError):
    """Bad partition count."""

    code = ErrorCode.INVALID_PARTITIONS


class InvalidReplicationFactorError(TidelogError):
    """Bad replication factor."""

    code = ErrorCode.INVALID_REPLICATION_FACTOR


class UnknownTopicOrPartitionError(TidelogError):
    """No such topic or partition."""

    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


class NotLeaderOrFollowerError(TidelogError):
    """This broker does not lead the partition."""

    code = ErrorCode.NOT_LEADER_OR_FOLLOWER


class LeaderNotAvailableError(TidelogError):
    """The partition has no live leader."""

    code = ErrorCode.LEADER_NOT_AVAILABLE


class NotControllerError(TidelogError):
    """This is not the active controller."""

    code = ErrorCode.NOT_CONTROLLER


class StaleControllerEpochError(TidelogError):
    """A request from an older controller."""

    code = ErrorCode.STALE_CONTROLLER_EPOCH


class TopicDeletionDisabledError(TidelogError):
    """delete.topic.enable is false."""

    code = ErrorCode.TOPIC_DELETION_DISABLED


class InvalidRequestError(TidelogError):
    """A malformed or oversized request."""

    code = ErrorCode.INVALID_REQUEST


class NotEnoughReplicasError(TidelogError):
    """Fewer in-sync replicas than min.insync.replicas."""

    code = ErrorCode.NOT_ENOUGH_REPLICAS


class RequestTimedOutError(TidelogError):
    """The request timed out."""

    code = ErrorCode.REQUEST_TIMED_OUT


class OutOfOrderSequenceError(TidelogError):
    """An idempotent producer's batch does not follow the last sequence the broker has."""

    code = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


class DuplicateSequenceError(TidelogError):
    """A batch repeats a sequence already written (answered as success when it is alone)."""

    code = ErrorCode.DUPLICATE_SEQUENCE_NUMBER


class InvalidProducerEpochError(TidelogError):
    """A producer epoch older than the partition has seen: a newer instance fenced this one."""

    code = ErrorCode.INVALID_PRODUCER_EPOCH


class InvalidTxnStateError(TidelogError):
    """The request does not fit the producer's transaction as the broker or coordinator knows it."""

    code = ErrorCode.INVALID_TXN_STATE


class ConcurrentTransactionsError(TidelogError):
    """The producer's previous transaction is still being ended: retry after a short wait."""

    code = ErrorCode.CONCURRENT_TRANSACTIONS


class TransactionCoordinatorFencedError(TidelogError):
    """A transaction marker from a coordinator older than the one whose markers came before."""

    code = ErrorCode.TRANSACTION_COORDINATOR_FENCED


class ProducerFencedError(TidelogError):
    """A newer instance of the transactional producer (same transactional.id) took over, or the
    coordinator aborted this one's transaction: this producer can only be closed."""

    code = ErrorCode.PRODUCER_FENCED


class TransactionalIdAuthorizationFailedError(TidelogError):
    """The caller's principal lacks Write (or Describe) on the transactional.id."""

    code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


class InvalidReplicaAssignmentError(TidelogError):
    """A replica list names unknown or repeated brokers, or has the wrong length."""

    code = ErrorCode.INVALID_REPLICA_ASSIGNMENT


class ReassignmentInProgressError(TidelogError):
    """The partition is being reassigned: the change asked for must wait."""

    code = ErrorCode.REASSIGNMENT_IN_PROGRESS


class NoReassignmentInProgressError(TidelogError):
    """Cancel asked for a partition that is not being reassigned."""

    code = ErrorCode.NO_REASSIGNMENT_IN_PROGRESS


class TopicAuthorizationFailedError(TidelogError):
    """The caller's principal lacks the ACL the operation needs on the topic."""

    code = ErrorCode.TOPIC_AUTHORIZATION_FAILED


class GroupAuthorizationFailedError(TidelogError):
    """The caller's principal lacks the ACL the operation needs on the consumer group."""

    code = ErrorCode.GROUP_AUTHORIZATION_FAILED


class ClusterAuthorizationFailedError(TidelogError):
    """The caller's principal lacks the ACL (or service role) the operation needs on the cluster."""

    code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED


class SaslAuthenticationFailedError(TidelogError):
    """A SCRAM login failed: wrong user name or password (which of the two is not said)."""

    code = ErrorCode.SASL_AUTHENTICATION_FAILED


def _classes_by_code() -> dict[ErrorCode, type[TidelogError]]:
    """This module's error classes by code (subclasses defined elsewhere never shadow them)."""
    return {
        value.code: value
        for value in globals().values()
        if isinstance(value, type)
        and issubclass(value, TidelogError)
        and value.__module__ == __name__
        and value not in (TidelogError, RemoteError)
    }


_CLASS_BY_CODE = _classes_by_code()
