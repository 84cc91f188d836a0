"""REST Proxy's error answers: an HTTP status and a body `{"error_code": int, "message": str}`.

The codes are Confluent REST Proxy's (kafka-rest `Errors.java`), so clients written for it branch
the same way; codes of our own are named in docs/gateway.md.
"""

from __future__ import annotations

from typing import Final

from tidelog.common.errors import ErrorCode, TidelogError

__all__ = ["RestError", "from_tidelog"]

BAD_REQUEST: Final = 400
UNAUTHORIZED: Final = 40101
FORBIDDEN: Final = 40301
TOPIC_NOT_FOUND: Final = 40401
PARTITION_NOT_FOUND: Final = 40402
CONSUMER_INSTANCE_NOT_FOUND: Final = 40403
LEADER_NOT_AVAILABLE: Final = 40404
CLUSTER_NOT_FOUND: Final = 40406
FORMAT_MISMATCH: Final = 40601
CONSUMER_ALREADY_EXISTS: Final = 40902
ILLEGAL_STATE: Final = 40903
REQUEST_TOO_LARGE: Final = 413
UNSUPPORTED_MEDIA_TYPE: Final = 415
UNPROCESSABLE: Final = 422
INVALID_CONSUMER_CONFIG: Final = 42204
INVALID_PAYLOAD: Final = 42206
TOO_MANY_INSTANCES: Final = 42901
KAFKA_ERROR: Final = 50002
KAFKA_RETRIABLE_ERROR: Final = 50003


class RestError(Exception):
    """An answer with REST Proxy's error body; the HTTP status is the code's first three digits."""

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message

    @property
    def status(self) -> int:
        return self.error_code if self.error_code < 1000 else self.error_code // 100

    def body(self) -> dict[str, object]:
        return {"error_code": self.error_code, "message": self.message}


def from_tidelog(error: TidelogError) -> RestError:
    """A platform error as REST Proxy reports it: unknown topic/partition as 404s, the rest 500s."""
    if error.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
        return RestError(TOPIC_NOT_FOUND, error.message)
    if error.code in (ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.NOT_LEADER_OR_FOLLOWER):
        return RestError(LEADER_NOT_AVAILABLE, error.message)
    if error.code in (ErrorCode.INVALID_CONFIG, ErrorCode.INVALID_SESSION_TIMEOUT):
        return RestError(INVALID_CONSUMER_CONFIG, str(error))
    if error.code in (
        ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        ErrorCode.GROUP_AUTHORIZATION_FAILED,
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
    ):
        return RestError(FORBIDDEN, str(error))  # the REST caller's principal lacks the ACL
    return RestError(KAFKA_RETRIABLE_ERROR if error.retriable else KAFKA_ERROR, str(error))
