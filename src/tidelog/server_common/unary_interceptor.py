"""The one way our server interceptors wrap a method: a subclass says how to wrap one unary
handler (`wrap`) and which methods it leaves alone (`SKIPPED`); the wrapped handler is made once
per method and reused, so a call pays one dictionary lookup for it."""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Callable
from typing import ClassVar

import grpc

__all__ = ["UnaryInterceptor"]


class UnaryInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]  # (untyped base)
    SKIPPED: ClassVar[frozenset[str]] = frozenset()

    def __init__(self) -> None:
        self._wrapped: dict[str, grpc.RpcMethodHandler] = {}

    @abc.abstractmethod
    def wrap(self, handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
        """The handler to serve `method` with instead of `handler` (its unary behaviour wrapped)."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        if handler is None or handler.unary_unary is None or details.method in self.SKIPPED:
            return handler
        wrapped = self._wrapped.get(details.method)
        if wrapped is None:
            wrapped = self._wrapped[details.method] = self.wrap(handler, details.method)
        return wrapped
