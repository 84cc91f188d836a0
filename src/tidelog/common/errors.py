"""Error codes shared by every Tidelog component.

Codes and names follow Apache Kafka's protocol error codes so that people who know Kafka read them
without a table; docs/errors.md lists them. A component raises a `TidelogError` subclass; the RPC
layer turns `error.code` into a gRPC status plus this code, the REST gateway into its own codes.
"""

from __future__ import annotations

import enum

__all__ = [
    "RETRIABLE_CODES",
    "CorruptRecordError",
    "ErrorCode",
    "InvalidConfigError",
    "InvalidPartitionsError",
    "InvalidRecordError",
    "InvalidReplicationFactorError",
    "InvalidRequestError",
    "InvalidTopicError",
    "KafkaStorageError",
    "LeaderNotAvailableError",
    "NotControllerError",
    "NotEnoughReplicasError",
    "NotLeaderOrFollowerError",
    "OffsetOutOfRangeError",
    "RecordTooLargeError",
    "RemoteError",
    "RequestTimedOutError",
    "StaleControllerEpochError",
    "TidelogError",
    "TopicAlreadyExistsError",
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
    KAFKA_STORAGE_ERROR = 56
    TOPIC_DELETION_DISABLED = 73
    UNSUPPORTED_COMPRESSION_TYPE = 76
    FENCED_LEADER_EPOCH = 74
    STALE_BROKER_EPOCH = 77
    UNKNOWN_LEADER_EPOCH = 75
    INVALID_RECORD = 87
    INVALID_UPDATE_VERSION = 95
    INELIGIBLE_REPLICA = 107


class TidelogError(Exception):
    """Base of every error Tidelog reports to a caller; `code` says which one."""

    code: ErrorCode = ErrorCode.UNKNOWN_SERVER_ERROR
    retriable: bool = False

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
    retriable = True


class RemoteError(TidelogError):
    """An error carrying any code: for answers relayed from another component."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.retriable = code in RETRIABLE_CODES


def error_for(code: ErrorCode | int, message: str) -> TidelogError:
    """The exception for a code received in a response: its own class when there is one."""
    known = _CLASS_BY_CODE.get(ErrorCode(code))
    return known(message) if known is not None else RemoteError(ErrorCode(code), message)


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
        ErrorCode.BROKER_NOT_AVAILABLE,
        ErrorCode.REPLICA_NOT_AVAILABLE,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
    }
)


def _simple(name: str, code: ErrorCode, doc: str) -> type[TidelogError]:
    return type(name, (TidelogError,), {"code": code, "retriable": code in RETRIABLE_CODES, "__doc__": doc})


InvalidTopicError = _simple("InvalidTopicError", ErrorCode.INVALID_TOPIC_EXCEPTION, "A topic name breaks the rules.")
TopicAlreadyExistsError = _simple("TopicAlreadyExistsError", ErrorCode.TOPIC_ALREADY_EXISTS, "The topic exists.")
InvalidPartitionsError = _simple("InvalidPartitionsError", ErrorCode.INVALID_PARTITIONS, "Bad partition count.")
InvalidReplicationFactorError = _simple(
    "InvalidReplicationFactorError", ErrorCode.INVALID_REPLICATION_FACTOR, "Bad replication factor."
)
UnknownTopicOrPartitionError = _simple(
    "UnknownTopicOrPartitionError", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "No such topic or partition."
)
NotLeaderOrFollowerError = _simple(
    "NotLeaderOrFollowerError", ErrorCode.NOT_LEADER_OR_FOLLOWER, "This broker does not lead the partition."
)
LeaderNotAvailableError = _simple(
    "LeaderNotAvailableError", ErrorCode.LEADER_NOT_AVAILABLE, "The partition has no live leader."
)
NotControllerError = _simple("NotControllerError", ErrorCode.NOT_CONTROLLER, "This is not the active controller.")
StaleControllerEpochError = _simple(
    "StaleControllerEpochError", ErrorCode.STALE_CONTROLLER_EPOCH, "A request from an older controller."
)
TopicDeletionDisabledError = _simple(
    "TopicDeletionDisabledError", ErrorCode.TOPIC_DELETION_DISABLED, "delete.topic.enable is false."
)
InvalidRequestError = _simple("InvalidRequestError", ErrorCode.INVALID_REQUEST, "A malformed or oversized request.")
NotEnoughReplicasError = _simple(
    "NotEnoughReplicasError", ErrorCode.NOT_ENOUGH_REPLICAS, "Fewer in-sync replicas than min.insync.replicas."
)
RequestTimedOutError = _simple("RequestTimedOutError", ErrorCode.REQUEST_TIMED_OUT, "The request timed out.")


def _classes_by_code() -> dict[ErrorCode, type[TidelogError]]:
    found: dict[ErrorCode, type[TidelogError]] = {}
    pending = list(TidelogError.__subclasses__())
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if cls is not RemoteError:
            found.setdefault(cls.code, cls)
    return found


_CLASS_BY_CODE = _classes_by_code()
