"""Certificates made with `trustme` for the security tests: one CA for the cluster, a certificate
per process (its name as the subject's CN, 127.0.0.1 as its address), and client certificates on
demand. Files, as the services read them."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import trustme

from tests.cluster.conftest import COORDINATOR_ARGS, running_cluster
from tidelog.common.settings import SecuritySettings
from tidelog.dev.local_cluster import LocalCluster


@dataclasses.dataclass
class Pki:
    folder: Path
    ca: trustme.CA

    @property
    def ca_file(self) -> Path:
        path = self.folder / "ca.pem"
        if not path.exists():
            self.ca.cert_pem.write_to_path(str(path))
        return path

    def issue(self, name: str, *, organization: str = "tidelog", ca: trustme.CA | None = None) -> tuple[Path, Path]:
        """(certificate chain file, key file) of a certificate with subject CN=name,O=organization."""
        issued = (ca or self.ca).issue_cert("127.0.0.1", "localhost", common_name=name, organization_name=organization)
        certificate, key = self.folder / f"{name}.crt", self.folder / f"{name}.key"
        certificate.write_bytes(b"".join(blob.bytes() for blob in issued.cert_chain_pems))
        issued.private_key_pem.write_to_path(str(key))
        return certificate, key

    def mutual(self, name: str, **extra: str) -> dict[str, str]:
        """Security settings of a process or client with its own certificate, mutual TLS."""
        certificate, key = self.issue(name)
        return {
            "security.protocol": "SSL",
            "ssl.certificate.location": str(certificate),
            "ssl.key.location": str(key),
            "ssl.ca.location": str(self.ca_file),
            "ssl.client.auth": "required",
            # CN only: "User:broker-1" rather than the whole subject.
            "ssl.principal.mapping.rules": "RULE:^CN=([^,]+),.*$/$1/,DEFAULT",
            **extra,
        }

    def client(self, name: str, **extra: str) -> SecuritySettings:
        return SecuritySettings.from_configs(self.mutual(name, **extra))


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"), trustme.CA(organization_name="tidelog test CA"))


@pytest.fixture(scope="module")
def tls_cluster(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """Every listener and channel on mutual TLS: 1 controller, 2 brokers, 1 coordinator."""
    with running_cluster(
        tmp_path_factory.mktemp("tls-cluster"),
        brokers=2,
        controllers=1,
        coordinators=1,
        coordinator_args=COORDINATOR_ARGS,
        service_security=pki.mutual,
        client_security=pki.client("admin"),
    ) as local:
        yield local


def authorising(pki: Pki) -> Callable[[str], dict[str, str]]:
    """Each process's settings for a cluster with the ACL authorizer on and its service roles."""

    def settings(name: str) -> dict[str, str]:
        return pki.mutual(
            name,
            **{
                "authorizer.class.name": "AclAuthorizer",
                "super.users": "User:admin",
                "controller.principals": "User:controller-1",
                "broker.principals": "User:broker-1;User:broker-2",
                "coordinator.principals": "User:coordinator-1",
                "gateway.principals": "User:gateway-1",
            },
        )

    return settings


@pytest.fixture(scope="module")
def acl_cluster(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """Mutual TLS and the ACL authorizer: 1 controller, 2 brokers, 1 coordinator; `User:admin` is
    the super user the fixtures and LocalCluster's readiness checks use."""
    with running_cluster(
        tmp_path_factory.mktemp("acl-cluster"),
        brokers=2,
        controllers=1,
        coordinators=1,
        coordinator_args=COORDINATOR_ARGS,
        service_security=authorising(pki),
        client_security=pki.client("admin"),
    ) as local:
        yield local


SERVICE_USERS = ("controller-1", "broker-1", "broker-2", "coordinator-1", "gateway-1", "admin")


def password_of(user: str) -> str:
    return f"{user}-secret-password"


def sasl_settings(pki: Pki) -> Callable[[str], dict[str, str]]:
    """Every listener on SASL_SSL (TLS, SCRAM-SHA-512 logins), with the ACL authorizer: the
    services log in to each other with their own users, seeded into etcd before they start."""

    def settings(name: str) -> dict[str, str]:
        certificate, key = pki.issue(name)
        return {
            "security.protocol": "SASL_SSL",
            "ssl.certificate.location": str(certificate),
            "ssl.key.location": str(key),
            "ssl.ca.location": str(pki.ca_file),
            "sasl.username": name,
            "sasl.password": password_of(name),
            "authorizer.class.name": "AclAuthorizer",
            "super.users": "User:admin",
            "controller.principals": "User:controller-1",
            "broker.principals": "User:broker-1;User:broker-2",
            "coordinator.principals": "User:coordinator-1",
            "gateway.principals": "User:gateway-1",
            **(
                {  # the REST listener: HTTPS, HTTP Basic against the SCRAM users, principals propagated
                    "authentication.method": "BASIC",
                    "rest.ssl.certificate.location": str(certificate),
                    "rest.ssl.key.location": str(key),
                    "rest.ssl.ca.location": str(pki.ca_file),
                }
                if name.startswith("gateway")
                else {}
            ),
        }

    return settings


@pytest.fixture(scope="module")
def sasl_cluster(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """Every listener on SASL_SSL (TLS, SCRAM-SHA-512 logins), with the ACL authorizer."""
    settings = sasl_settings(pki)

    with running_cluster(
        tmp_path_factory.mktemp("sasl-cluster"),
        brokers=2,
        controllers=1,
        coordinators=1,
        gateways=1,
        coordinator_args=COORDINATOR_ARGS,
        service_security=settings,
        client_security=sasl_client(pki, "admin"),
        scram_users={user: password_of(user) for user in SERVICE_USERS},
        metrics=True,
    ) as local:
        yield local


def sasl_client(pki: Pki, user: str, password: str | None = None) -> SecuritySettings:
    return SecuritySettings.from_configs(
        {
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(pki.ca_file),
            "sasl.username": user,
            "sasl.password": password_of(user) if password is None else password,
        }
    )
