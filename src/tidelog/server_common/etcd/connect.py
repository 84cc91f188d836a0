"""The one way a process opens its etcd client: the endpoints, and TLS with a client certificate
when `etcd.ssl.*` are set (every service, the local cluster's own checks, the seeding of users).
etcd holds the ACLs and SCRAM credentials, so where the cluster is secured etcd is too: its
`--client-cert-auth` refuses a client without a certificate from the cluster's CA."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from etcd3aio import Etcd3Client

from tidelog.common.settings import SecuritySettings

__all__ = ["etcd_client"]


def _read(location: str) -> bytes | None:
    return Path(location).read_bytes() if location else None


def etcd_client(endpoints: str | Sequence[str], security: SecuritySettings | None = None) -> Etcd3Client:
    """An etcd client of `endpoints` ("host:port,..."), over TLS as `security`'s etcd.ssl.* say."""
    listed = endpoints.split(",") if isinstance(endpoints, str) else list(endpoints)
    if security is None or not security.etcd_ssl_ca_location:
        assert security is None or not security.etcd_ssl_certificate_location, "a client certificate needs the CA"
        return Etcd3Client(listed)
    return Etcd3Client(
        listed,
        ca_cert=_read(security.etcd_ssl_ca_location),
        cert_chain=_read(security.etcd_ssl_certificate_location),
        cert_key=_read(security.etcd_ssl_key_location),
    )
