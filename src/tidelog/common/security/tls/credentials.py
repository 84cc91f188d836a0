"""gRPC TLS credentials for a listener and for channels, from `SecuritySettings`.

A listener takes its certificate through gRPC's dynamic credentials: gRPC asks before each new
handshake, and the files are re-read when they changed, so a rotated Secret applies to the next
connection without a restart. Channels are rebuilt by `ChannelPool` the same way.
"""

from __future__ import annotations

import grpc
import structlog

from tidelog.common.errors import InvalidConfigError
from tidelog.common.security.tls.pem_files import PemFiles, PemIdentity
from tidelog.common.settings import SecuritySettings

__all__ = ["channel_credentials", "pem_files_of", "server_credentials"]

log = structlog.get_logger(__name__)


def pem_files_of(security: SecuritySettings) -> PemFiles:
    return PemFiles(security.ssl_certificate_location, security.ssl_key_location, security.ssl_ca_location)


def _server_configuration(identity: PemIdentity) -> grpc.ServerCertificateConfiguration:
    assert identity.private_key is not None and identity.certificate_chain is not None
    return grpc.ssl_server_certificate_configuration(
        [(identity.private_key, identity.certificate_chain)], root_certificates=identity.root_certificates
    )


def server_credentials(security: SecuritySettings) -> grpc.ServerCredentials:
    """A TLS listener's credentials; InvalidConfigError when the settings cannot make one."""
    assert security.tls
    files = pem_files_of(security)
    if not files.has_identity:
        raise InvalidConfigError(
            f"security.protocol={security.security_protocol} needs ssl.certificate.location and ssl.key.location"
        )
    required = security.ssl_client_auth == "required"
    if required and not security.ssl_ca_location:
        raise InvalidConfigError(
            "ssl.client.auth=required needs ssl.ca.location (the CA client certificates come from)"
        )
    initial = _server_configuration(files.read())

    def fetch() -> grpc.ServerCertificateConfiguration | None:
        # Called by gRPC (with the GIL) before each handshake: a stat of each file when unchanged.
        if not files.changed():
            return None
        try:
            configuration = _server_configuration(files.read())
        except InvalidConfigError as error:
            log.error("tls_reload_failed", error=str(error))  # keep serving with the last good one
            return None
        log.info("tls_certificate_reloaded", certificate=security.ssl_certificate_location)
        return configuration

    return grpc.dynamic_ssl_server_credentials(initial, fetch, require_client_authentication=required)


def channel_credentials(files: PemFiles) -> grpc.ChannelCredentials:
    identity = files.read()
    return grpc.ssl_channel_credentials(
        root_certificates=identity.root_certificates,
        private_key=identity.private_key,
        certificate_chain=identity.certificate_chain,
    )
