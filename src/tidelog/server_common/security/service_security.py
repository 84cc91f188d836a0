"""A service process's security, as one part of the shared start/stop sequence (runtime.run_service):
who is calling (authentication interceptor, SCRAM logins and sessions) and what it may do (access
control). Loaded from etcd before the listener accepts its first call, so a starting service never
answers with an empty ACL set or credential store."""

from __future__ import annotations

import grpc
from etcd3aio import Etcd3Client

from tidelog.common.security.protocol import SecurityProtocol
from tidelog.common.settings import SecuritySettings
from tidelog.server_common.security.authentication.interceptor import AuthenticationInterceptor, needs_interceptor
from tidelog.server_common.security.authentication.sasl_server import AuthenticationService, SaslSessions
from tidelog.server_common.security.authorization.access_control import AccessControl
from tidelog.v1 import security_pb2_grpc

__all__ = ["ServiceSecurity"]


class ServiceSecurity:
    def __init__(self, settings: SecuritySettings, etcd: Etcd3Client) -> None:
        self.settings = settings
        self.etcd = etcd
        self.access = AccessControl(settings, etcd)
        self.sessions = (
            SaslSessions(etcd, lifetime_ms=settings.connections_max_reauth_ms)
            if settings.protocol is SecurityProtocol.SASL_SSL
            else None
        )

    def interceptors(self) -> list[grpc.aio.ServerInterceptor]:
        if not needs_interceptor(self.settings):
            return []
        sessions = self.sessions.principal_of if self.sessions is not None else None
        return [AuthenticationInterceptor(self.settings, sessions)]

    def add_to(self, server: grpc.aio.Server) -> list[str]:
        if self.sessions is None:
            return []
        security_pb2_grpc.add_AuthenticationServicer_to_server(AuthenticationService(self.sessions), server)
        return ["tidelog.v1.Authentication"]

    async def start(self) -> None:
        if self.etcd.kv is None:
            await self.etcd.connect()
        if self.sessions is not None:
            await self.sessions.start()
        await self.access.start()

    async def close(self) -> None:
        if self.sessions is not None:
            await self.sessions.close()
        await self.access.close()
