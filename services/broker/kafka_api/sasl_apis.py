"""SaslHandshake and SaslAuthenticate on the Kafka listener: a connection's login
(listener_security.ConnectionLogin), in Kafka's framing (KIP-152)."""

from __future__ import annotations

from typing import Any, Final

from tidelog.broker.kafka_api.api_table import ApiKey
from tidelog.broker.kafka_api.listener_security import MECHANISMS, LoginError
from tidelog.broker.kafka_api.request_context import KafkaRequestContext
from tidelog.broker.request_metrics import REQUESTS
from tidelog.common.errors import ErrorCode

__all__ = ["HANDLED", "SaslApis"]

Message = dict[str, Any]


class SaslApis:
    async def sasl_handshake(self, request: Message, version: int, context: KafkaRequestContext) -> Message:
        assert context.login is not None
        code = context.login.handshake(request["Mechanism"])
        REQUESTS.labels("SaslHandshake", code.name).inc()
        return {"ErrorCode": int(code), "Mechanisms": list(MECHANISMS)}

    async def sasl_authenticate(self, request: Message, version: int, context: KafkaRequestContext) -> Message:
        assert context.login is not None
        try:
            answer = await context.login.authenticate(request["AuthBytes"])
        except LoginError as error:
            REQUESTS.labels("SaslAuthenticate", error.code.name).inc()
            return {"ErrorCode": int(error.code), "ErrorMessage": str(error), "AuthBytes": b"", "SessionLifetimeMs": 0}
        REQUESTS.labels("SaslAuthenticate", "NONE").inc()
        # SessionLifetimeMs 0: no re-authentication asked for (KIP-368); the login holds while the
        # user's credential is the one it used (ConnectionLogin.authenticated).
        return {"ErrorCode": int(ErrorCode.NONE), "ErrorMessage": None, "AuthBytes": answer, "SessionLifetimeMs": 0}


HANDLED: Final = {ApiKey.SASL_HANDSHAKE: "sasl_handshake", ApiKey.SASL_AUTHENTICATE: "sasl_authenticate"}
