"""`security.protocol`'s values, as Kafka names them: what a listener serves and a channel speaks
(one listener per process here; docs/security.md)."""

from __future__ import annotations

import enum

__all__ = ["SecurityProtocol"]


class SecurityProtocol(enum.StrEnum):
    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"  # TLS; with ssl.client.auth=required the certificate is the identity
    SASL_SSL = "SASL_SSL"  # TLS, the identity from a SCRAM-SHA-512 login
