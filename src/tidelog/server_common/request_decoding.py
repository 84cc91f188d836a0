"""A request that is not the protobuf message its method takes is answered INVALID_ARGUMENT,
naming the message type — not UNKNOWN with a Python exception, which is what grpc.aio makes of a
request it cannot decode. Installed on every service's server (runtime.grpc_server)."""

from __future__ import annotations

from typing import Any, Final

import grpc
from google.protobuf.message import DecodeError

from tidelog.server_common.unary_interceptor import UnaryInterceptor

__all__ = ["RequestDecoding"]

_UNDECODABLE: Final = object()


class RequestDecoding(UnaryInterceptor):
    def wrap(self, handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
        decode = handler.request_deserializer
        behavior = handler.unary_unary

        def deserialize(raw: bytes) -> Any:
            try:
                return decode(raw)
            except DecodeError:
                return _UNDECODABLE

        async def checked(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            if request is _UNDECODABLE:
                await context.abort(
                    grpc.StatusCode.INVALID_ARGUMENT, f"the request is not a valid message for {method}"
                )
            return await behavior(request, context)

        return grpc.unary_unary_rpc_method_handler(
            checked, request_deserializer=deserialize, response_serializer=handler.response_serializer
        )
