"""A request that is not the protobuf message its method takes is answered INVALID_ARGUMENT,
naming the message type — not UNKNOWN with a Python exception, which is what grpc.aio makes of a
request it cannot decode. Installed on every service's server (runtime.grpc_server)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final

import grpc
from google.protobuf.message import DecodeError

__all__ = ["RequestDecoding"]

_UNDECODABLE: Final = object()


class RequestDecoding(grpc.aio.ServerInterceptor):  # type: ignore[misc]  # (untyped base)
    def __init__(self) -> None:
        self._wrapped: dict[str, grpc.RpcMethodHandler] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        if handler is None or handler.unary_unary is None or handler.request_deserializer is None:
            return handler
        wrapped = self._wrapped.get(details.method)
        if wrapped is None:
            wrapped = self._wrapped[details.method] = self._wrap(handler, details.method)
        return wrapped

    @staticmethod
    def _wrap(handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
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
