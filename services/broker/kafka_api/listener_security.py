"""Who is on a Kafka-protocol connection: the listener takes the broker's own `security.protocol`,
as its gRPC listener does (docs/security.md), with the same certificate, CA and client-auth rule,
the same principal mapping and the same SCRAM credentials in etcd.

- PLAINTEXT: every connection is `User:ANONYMOUS` (as on Kafka's PLAINTEXT listeners).
- SSL: TLS; with a client certificate, its subject mapped by `ssl.principal.mapping.rules`.
- SASL_SSL: TLS, then Kafka's SaslHandshake (v1) and SaslAuthenticate with SCRAM-SHA-512 or PLAIN
  (checked against the user's SCRAM credential: no password is stored). Until a login succeeds,
  only ApiVersions, SaslHandshake and SaslAuthenticate are served; anything else closes the
  connection, as Kafka's broker does. A connection stays logged in while its user's credential is
  the one it logged in with: deleting the user or changing the password ends it at the next
  request (as the gRPC listener's sessions end).
"""

from __future__ import annotations

import asyncio
import hmac
import ssl
from typing import Final

import structlog
from cryptography import x509

from tidelog.common.errors import ErrorCode, InvalidConfigError
from tidelog.common.security.authentication.principal import ANONYMOUS, Principal, PrincipalMapper
from tidelog.common.security.authentication.scram import ScramCredential, ScramError, ScramServer, salted_password
from tidelog.common.security.protocol import SecurityProtocol
from tidelog.common.security.tls.credentials import pem_files_of
from tidelog.common.settings import SecuritySettings
from tidelog.server_common.security.authentication.sasl_server import SaslSessions

__all__ = ["ConnectionLogin", "server_ssl_context"]

SCRAM: Final = "SCRAM-SHA-512"
PLAIN: Final = "PLAIN"
MECHANISMS: Final = (SCRAM, PLAIN)
log = structlog.get_logger(__name__)
CLIENT_AUTH: Final = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


def server_ssl_context(security: SecuritySettings) -> ssl.SSLContext | None:
    """The listener's TLS context (None for PLAINTEXT): the gRPC listener's files and rule, re-read
    when they change, as the gRPC listener's are (tls/credentials.py). OpenSSL calls the context's
    SNI callback in every handshake, with or without a server name: there a stat of each file
    tells whether they changed, and the handshake goes on with a context of the newest files that
    read well. A rotated Secret applies to the next connection without a restart; a half-written
    one (a key that is not the certificate's) is logged and the last good files serve on."""
    if not security.tls:
        return None
    files = pem_files_of(security)
    files.read()  # (checked: an InvalidConfigError names the setting; and the files' stamp noted)
    listening = _context(security)
    current = [listening]

    def newest(ssl_object: ssl.SSLObject, server_name: str | None, context: ssl.SSLContext) -> None:
        if files.changed():
            try:
                files.read()
                current[0] = _context(security)
                log.info("tls_certificate_reloaded", listener="kafka", certificate=security.ssl_certificate_location)
            except (InvalidConfigError, ssl.SSLError, OSError) as error:
                log.error("tls_reload_failed", listener="kafka", error=str(error))  # the last good one serves
        ssl_object.context = current[0]

    listening.sni_callback = newest
    return listening


def _context(security: SecuritySettings) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(security.ssl_certificate_location, security.ssl_key_location)
    if security.ssl_ca_location:
        context.load_verify_locations(security.ssl_ca_location)
    rule = "none" if security.protocol is SecurityProtocol.SASL_SSL else security.ssl_client_auth
    context.verify_mode = CLIENT_AUTH.get(rule, ssl.CERT_REQUIRED)
    return context


class LoginError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class ConnectionLogin:
    """One connection's identity, and its SASL exchange while it logs in."""

    def __init__(self, security: SecuritySettings, sessions: SaslSessions | None, writer: asyncio.StreamWriter) -> None:
        self.protocol = security.protocol
        self.sessions = sessions
        self.mechanism = ""
        self.scram: ScramServer | None = None
        self.salt = b""  # of the credential the login used: the login holds while it is current
        self.principal: Principal | None = None
        if self.protocol is SecurityProtocol.PLAINTEXT:
            self.principal = ANONYMOUS
        elif self.protocol is SecurityProtocol.SSL:
            self.principal = _certificate_principal(writer, PrincipalMapper(security.ssl_principal_mapping_rules))
            if self.principal is None:
                self.principal = ANONYMOUS  # (no certificate asked for, or none given: ssl.client.auth)

    @property
    def authenticated(self) -> bool:
        if self.principal is None:
            return False
        if self.protocol is SecurityProtocol.SASL_SSL:
            assert self.sessions is not None
            credential = self.sessions.credentials.get(self.principal.name)
            if credential is None or credential.salt != self.salt:  # deleted, re-created, a new password
                self.principal = None
                return False
        return True

    def handshake(self, mechanism: str) -> ErrorCode:
        if self.protocol is not SecurityProtocol.SASL_SSL:
            return ErrorCode.ILLEGAL_SASL_STATE
        if mechanism not in MECHANISMS:
            return ErrorCode.UNSUPPORTED_SASL_MECHANISM
        self.mechanism, self.scram, self.principal = mechanism, None, None
        return ErrorCode.NONE

    async def authenticate(self, auth_bytes: bytes) -> bytes:
        """One SaslAuthenticate step: the bytes to answer; LoginError when the login failed."""
        if not self.mechanism or self.sessions is None:
            raise LoginError(ErrorCode.ILLEGAL_SASL_STATE, "SaslHandshake first")
        if self.mechanism == PLAIN:
            return await self._plain(auth_bytes)
        try:
            if self.scram is None:
                self.scram = self.sessions.scram_server()
                return self.scram.first(auth_bytes)
            final, user = self.scram.final(auth_bytes)
        except ScramError as error:
            self.scram = None
            raise LoginError(ErrorCode.SASL_AUTHENTICATION_FAILED, str(error)) from None
        self.salt, self.principal, self.scram = self.scram.salt, Principal("User", user), None
        return final

    async def _plain(self, auth_bytes: bytes) -> bytes:
        assert self.sessions is not None
        parts = auth_bytes.split(b"\x00")
        if len(parts) != 3:
            raise LoginError(ErrorCode.SASL_AUTHENTICATION_FAILED, "PLAIN: authzid NUL user NUL password")
        authzid, user, password = (part.decode(errors="replace") for part in parts)
        credential = self.sessions.credentials.get(user)
        refused = LoginError(ErrorCode.SASL_AUTHENTICATION_FAILED, "authentication failed: wrong user or password")
        if credential is None or (authzid and authzid != user):
            raise refused
        # PBKDF2 over the stored salt (thousands of rounds): off the event loop.
        salted = await asyncio.to_thread(salted_password, password, credential.salt, credential.iterations)
        offered = ScramCredential.from_salted_password(salted, credential.salt, credential.iterations)
        if not hmac.compare_digest(offered.stored_key, credential.stored_key):
            raise refused
        self.salt, self.principal = credential.salt, Principal("User", user)
        return b""


def _certificate_principal(writer: asyncio.StreamWriter, mapper: PrincipalMapper) -> Principal | None:
    """The client certificate's subject (RFC 4514, as gRPC gives it) through the mapping rules."""
    ssl_object = writer.get_extra_info("ssl_object")
    der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
    if not der:
        return None
    subject = x509.load_der_x509_certificate(der).subject.rfc4514_string()
    return mapper.map(subject)
