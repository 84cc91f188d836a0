from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class SaslAuthenticateRequest(_message.Message):
    __slots__ = ("mechanism", "auth_bytes", "exchange")
    MECHANISM_FIELD_NUMBER: _ClassVar[int]
    AUTH_BYTES_FIELD_NUMBER: _ClassVar[int]
    EXCHANGE_FIELD_NUMBER: _ClassVar[int]
    mechanism: str
    auth_bytes: bytes
    exchange: str
    def __init__(self, mechanism: _Optional[str] = ..., auth_bytes: _Optional[bytes] = ..., exchange: _Optional[str] = ...) -> None: ...

class SaslAuthenticateResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "auth_bytes", "exchange", "session", "session_lifetime_ms")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    AUTH_BYTES_FIELD_NUMBER: _ClassVar[int]
    EXCHANGE_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    SESSION_LIFETIME_MS_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    auth_bytes: bytes
    exchange: str
    session: str
    session_lifetime_ms: int
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., auth_bytes: _Optional[bytes] = ..., exchange: _Optional[str] = ..., session: _Optional[str] = ..., session_lifetime_ms: _Optional[int] = ...) -> None: ...
