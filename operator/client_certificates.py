"""Client certificates for `User` resources with `authentication: {type: tls}`, signed by the
clients' CA the chart gives the operator (Strimzi's clients CA). The subject is `CN=<user>`, so the
brokers' `ssl.principal.mapping.rules` (`RULE:^CN=([^,]+).*$/$1/`) make it `User:<user>`."""

from __future__ import annotations

import dataclasses
import datetime
from pathlib import Path
from typing import Final

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["ClientCertificateIssuer", "IssuedCertificate"]

VALIDITY: Final = datetime.timedelta(days=365)
RENEW_BEFORE: Final = datetime.timedelta(days=30)  # Strimzi's default renewal window


@dataclasses.dataclass(frozen=True, slots=True)
class IssuedCertificate:
    certificate: bytes  # PEM
    key: bytes  # PEM (PKCS#8)
    ca: bytes  # PEM: the CA that signed it (clients put it beside their own)


class ClientCertificateIssuer:
    def __init__(self, ca_certificate: bytes, ca_key: bytes) -> None:
        self.ca_pem = ca_certificate
        self.ca = x509.load_pem_x509_certificate(ca_certificate)
        key = serialization.load_pem_private_key(ca_key, password=None)
        self.ca_key = key

    @classmethod
    def from_files(cls, certificate: Path, key: Path) -> ClientCertificateIssuer:
        return cls(certificate.read_bytes(), key.read_bytes())

    def issue(self, user: str, *, now: datetime.datetime | None = None) -> IssuedCertificate:
        now = now or datetime.datetime.now(datetime.UTC)
        key = ec.generate_private_key(ec.SECP256R1())
        certificate = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, user)]))
            .issuer_name(self.ca.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .sign(self.ca_key, hashes.SHA256())  # type: ignore[arg-type]
        )
        return IssuedCertificate(
            certificate.public_bytes(serialization.Encoding.PEM),
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            ),
            self.ca_pem,
        )

    def still_good(self, certificate: bytes, user: str, *, now: datetime.datetime | None = None) -> bool:
        """Issued by this CA for this user, and not within the renewal window of its expiry."""
        now = now or datetime.datetime.now(datetime.UTC)
        try:
            loaded = x509.load_pem_x509_certificate(certificate)
        except ValueError:
            return False
        names = loaded.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
        return (
            loaded.issuer == self.ca.subject
            and bool(names)
            and names[0].value == user
            and loaded.not_valid_after_utc - RENEW_BEFORE > now
        )
