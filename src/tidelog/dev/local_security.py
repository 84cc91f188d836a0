"""`tidelog dev up --secure`: a local cluster secured as the Helm chart secures one.

Under `<data dir>/secure/`: a CA made once (ECDSA, ten years), a certificate per process (CN = its
name, for 127.0.0.1 and localhost), and a password per SCRAM user (`admin`, the super user, and
one per service, which log in to each other with their own users; and `app`, an application's
user the ACLs give every topic and group, for the REST gateway's HTTP Basic). Every listener speaks SASL_SSL,
etcd takes only clients with a certificate of that CA, the gateway serves HTTPS with HTTP Basic
against the SCRAM users, and the ACL authorizer is on. `<data dir>/client.properties` holds what a
client needs (security.protocol, the CA, admin's login); `tidelog` commands that find the local
cluster use it by themselves, and other clients take it as Kafka's tools take --command-config.
Rerunning reuses every file, so the endpoints, the CA and the passwords stay the same.
"""

from __future__ import annotations

import datetime
import json
import secrets
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from tidelog.common.local_endpoints import CLIENT_PROPERTIES
from tidelog.common.security.authorization.acl import CLUSTER_NAME, AclBinding
from tidelog.common.security.tls.certificates import Pem, issue, new_ca
from tidelog.common.settings import SecuritySettings
from tidelog.dev.etcd_server import EtcdTls

__all__ = ["APP_USER", "SUPER_USER", "LocalSecurity"]

SUPER_USER: Final = "admin"
# An application's user: what ACLs grant it is all it may do, and it may log in through the REST
# gateway, which never acts for a super user or a service identity (docs/security.md).
APP_USER: Final = "app"


class LocalSecurity:
    def __init__(self, data_dir: Path, processes: Sequence[str]) -> None:
        self.data_dir = data_dir.resolve()
        self.folder = self.data_dir / "secure"
        self.processes = list(processes)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.folder.chmod(0o700)  # keys and passwords: this user's only
        now = datetime.datetime.now(datetime.UTC)
        self.ca = self._ca(now)
        for name in [*self.processes, "etcd"]:
            self._certificate(name, now)
        self.passwords = self._passwords()

    # ---- files -----------------------------------------------------------------------------

    @property
    def ca_file(self) -> Path:
        return self.folder / "ca.crt"

    def certificate_file(self, name: str) -> Path:
        return self.folder / f"{name}.crt"

    def key_file(self, name: str) -> Path:
        return self.folder / f"{name}.key"

    def _ca(self, now: datetime.datetime) -> Pem:
        key_file = self.folder / "ca.key"
        if self.ca_file.exists() and key_file.exists():
            return Pem(self.ca_file.read_bytes(), key_file.read_bytes())
        ca = new_ca("tidelog dev CA", now)
        _write_private(key_file, ca.key)
        self.ca_file.write_bytes(ca.certificate)
        for stale in self.folder.glob("*.crt"):  # signed by a CA that is gone
            if stale != self.ca_file:
                stale.unlink()
        return ca

    def _certificate(self, name: str, now: datetime.datetime) -> None:
        if self.certificate_file(name).exists() and self.key_file(name).exists():
            return
        made = issue(self.ca, name, ["localhost"], now, ip_addresses=["127.0.0.1"])
        _write_private(self.key_file(name), made.key)
        self.certificate_file(name).write_bytes(made.certificate)

    def _passwords(self) -> dict[str, str]:
        path = self.folder / "passwords.json"
        held: dict[str, str] = json.loads(path.read_text()) if path.exists() else {}
        for user in [SUPER_USER, APP_USER, *self.processes]:
            held.setdefault(user, secrets.token_urlsafe(18))
        _write_private(path, json.dumps(held, indent=2).encode())
        return held

    # ---- what LocalCluster takes -----------------------------------------------------------

    @property
    def etcd_tls(self) -> EtcdTls:
        return EtcdTls(self.ca_file, self.certificate_file("etcd"), self.key_file("etcd"))

    def _etcd_client(self, name: str) -> dict[str, str]:
        return {
            "etcd.ssl.ca.location": str(self.ca_file),
            "etcd.ssl.certificate.location": str(self.certificate_file(name)),
            "etcd.ssl.key.location": str(self.key_file(name)),
        }

    @property
    def etcd_client_security(self) -> SecuritySettings:
        """How `dev up` itself reads etcd (readiness, seeding users): as the super user's process."""
        return SecuritySettings.from_configs(self._etcd_client(self.processes[0]))

    def _principals(self, role: str) -> str:
        return ";".join(f"User:{name}" for name in self.processes if name.startswith(f"{role}-"))

    def service_settings(self, name: str) -> dict[str, str]:
        settings = {
            "security.protocol": "SASL_SSL",
            "ssl.certificate.location": str(self.certificate_file(name)),
            "ssl.key.location": str(self.key_file(name)),
            "ssl.ca.location": str(self.ca_file),
            "sasl.username": name,
            "sasl.password": self.passwords[name],
            "authorizer.class.name": "AclAuthorizer",
            "super.users": f"User:{SUPER_USER}",
            "controller.principals": self._principals("controller"),
            "broker.principals": self._principals("broker"),
            "coordinator.principals": self._principals("coordinator"),
            "gateway.principals": self._principals("gateway"),
            **self._etcd_client(name),
        }
        if name.startswith("gateway-"):  # HTTPS, HTTP Basic against the SCRAM users
            settings |= {
                "authentication.method": "BASIC",
                "rest.ssl.certificate.location": str(self.certificate_file(name)),
                "rest.ssl.key.location": str(self.key_file(name)),
            }
        return settings

    def client_configs(self, user: str = SUPER_USER) -> dict[str, str]:
        return {
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(self.ca_file),
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": user,
            "sasl.password": self.passwords[user],
        }

    @staticmethod
    def app_acls() -> list[AclBinding]:
        """The application user's grants: every topic and group, and idempotent writes."""
        principal = f"User:{APP_USER}"
        return [
            AclBinding.of(principal=principal, operation="All", resource_type="Topic", resource_name="*"),
            AclBinding.of(principal=principal, operation="All", resource_type="Group", resource_name="*"),
            AclBinding.of(
                principal=principal,
                operation="IdempotentWrite",
                resource_type="Cluster",
                resource_name=CLUSTER_NAME,
            ),
        ]

    @property
    def client_security(self) -> SecuritySettings:
        return SecuritySettings.from_configs(self.client_configs())

    def write_client_properties(self) -> Path:
        """<data dir>/client.properties: the super user's client settings (Kafka's properties format)."""
        path = self.data_dir / CLIENT_PROPERTIES
        lines = [
            "# `tidelog dev up --secure`: admin, the super user, over SASL_SSL (--command-config of Kafka's tools)",
            *(f"{name}={value}" for name, value in self.client_configs().items()),
        ]
        _write_private(path, ("\n".join(lines) + "\n").encode())
        return path


def _write_private(path: Path, data: bytes) -> None:
    temporary = path.with_suffix(path.suffix + ".tmp")
    temporary.touch(mode=0o600)
    temporary.chmod(0o600)
    temporary.write_bytes(data)
    temporary.replace(path)
