"""A certificate authority and the certificates it signs (ECDSA P-256, SHA-256), as PEM.

Made by the chart's certificates hook (`tidelog-cluster-certificates`) and by
`tidelog dev up --secure`; one place so both issue the same kind of certificate: server and
client authentication both allowed, as every Tidelog process is both.
"""

from __future__ import annotations

import dataclasses
import datetime
import ipaddress
from collections.abc import Sequence
from typing import Final

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["CA_VALIDITY", "VALIDITY", "Pem", "issue", "new_ca"]

CA_VALIDITY: Final = datetime.timedelta(days=3650)
VALIDITY: Final = datetime.timedelta(days=365)
CLOCK_SKEW: Final = datetime.timedelta(minutes=5)  # valid from a little before now: peers' clocks differ


@dataclasses.dataclass(frozen=True)
class Pem:
    certificate: bytes
    key: bytes


def _pem(certificate: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> Pem:
    return Pem(
        certificate.public_bytes(serialization.Encoding.PEM),
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
    )


def new_ca(name: str, now: datetime.datetime) -> Pem:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(now + CA_VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True
        )  # digital signature, certificate and CRL signing
        .sign(key, hashes.SHA256())
    )
    return _pem(certificate, key)


def issue(
    ca: Pem,
    common_name: str,
    dns_names: Sequence[str],
    now: datetime.datetime,
    *,
    ip_addresses: Sequence[str] = (),
) -> Pem:
    """A certificate CN=common_name for these names and addresses, signed by `ca`."""
    ca_certificate = x509.load_pem_x509_certificate(ca.certificate)
    ca_key = serialization.load_pem_private_key(ca.key, password=None)
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = [x509.DNSName(name) for name in dns_names]
    names += [x509.IPAddress(ipaddress.ip_address(address)) for address in ip_addresses]
    certificate = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca_certificate.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
        )
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
    )
    return _pem(certificate, key)
