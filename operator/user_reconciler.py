"""Bringing one `User` resource (Strimzi's KafkaUser, for Tidelog) in line with the cluster.

- `spec.authentication.type: scram-sha-512`: a Secret named after the user holds a generated
  password (`password`, and `sasl.jaas.config`-free client properties); the credential is set in
  the cluster whenever the Secret's password and the cluster's do not agree (a new Secret, or one
  the user changed).
- `spec.authentication.type: tls`: a Secret holds `user.crt`, `user.key` and `ca.crt`, signed by
  the clients CA and renewed within 30 days of expiry.
- `spec.authorization.acls`: the ACLs of `User:<name>` become exactly these (missing ones added,
  others removed), in Strimzi's format.
- `spec.quotas`: the user's quotas (producerByteRate, consumerByteRate, requestPercentage) become
  exactly these.

Deleting the resource removes the ACLs, the quotas and the SCRAM credential (the Secret goes with
its owner). Like the other reconcilers it returns an `Outcome`; Secrets go through `SecretStore`.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import secrets
from collections.abc import Mapping
from typing import Any, Final, Protocol

from tidelog.client import AclBinding, AclFilter, AdminClient
from tidelog.common.errors import TidelogError
from tidelog.common.security.quotas.quota import QuotaEntity
from tidelog.operator.client_certificates import ClientCertificateIssuer
from tidelog.operator.topic_reconciler import Outcome

__all__ = ["SecretStore", "UserReconciler", "UserSpec"]

RETRY_UNREACHABLE_S: Final = 5.0
# The chart's service certificates are CN=tidelog-<component> (User:tidelog-broker, ...): a User of
# such a name would get a client certificate with a service's identity.
RESERVED_PREFIX: Final = "tidelog-"
PASSWORD_BYTES: Final = 24
QUOTA_FIELDS: Final = {
    "producerByteRate": "producer_byte_rate",
    "consumerByteRate": "consumer_byte_rate",
    "requestPercentage": "request_percentage",
}
PATTERN_TYPES: Final = {"literal": "Literal", "prefix": "Prefixed"}


class SecretStore(Protocol):
    async def get(self, namespace: str, name: str) -> dict[str, bytes] | None: ...

    async def put(self, namespace: str, name: str, data: Mapping[str, bytes], owner: Mapping[str, Any]) -> None: ...


@dataclasses.dataclass(frozen=True, slots=True)
class UserSpec:
    name: str
    authentication: str | None  # "tls", "scram-sha-512", or None (ACLs and quotas only)
    acls: tuple[AclBinding, ...]
    quotas: Mapping[str, float]

    @property
    def principal(self) -> str:
        return f"User:{self.name}"

    @classmethod
    def from_resource(cls, name: str, spec: Mapping[str, Any]) -> UserSpec:
        acls = []
        for rule in (spec.get("authorization") or {}).get("acls") or ():
            resource = rule["resource"]
            kind = str(resource["type"]).capitalize()
            for operation in rule.get("operations") or [rule.get("operation")]:
                acls.append(
                    AclBinding.of(
                        principal=f"User:{name}",
                        host=rule.get("host", "*"),
                        operation=str(operation),
                        permission=str(rule.get("type", "allow")),
                        resource_type=kind,
                        resource_name="kafka-cluster" if kind == "Cluster" else str(resource["name"]),
                        pattern_type=PATTERN_TYPES[str(resource.get("patternType", "literal"))],
                    )
                )
        quotas = {QUOTA_FIELDS[key]: float(value) for key, value in (spec.get("quotas") or {}).items()}
        authentication = (spec.get("authentication") or {}).get("type")
        return cls(name, authentication, tuple(dict.fromkeys(acls)), quotas)


class UserReconciler:
    def __init__(self, admin: AdminClient, secrets_store: SecretStore, issuer: ClientCertificateIssuer | None) -> None:
        self.admin = admin
        self.secrets = secrets_store
        self.issuer = issuer

    async def reconcile(self, spec: UserSpec, *, namespace: str, owner: Mapping[str, Any]) -> Outcome:
        if spec.name.startswith(RESERVED_PREFIX):
            message = f"user names starting with {RESERVED_PREFIX!r} are the services' own identities"
            return Outcome(False, "InvalidSpec", message, events=[("Warning", "InvalidSpec", message)])
        events: list[tuple[str, str, str]] = []
        try:
            secret = await self._credentials(spec, namespace, owner, events)
            await self._acls(spec, events)
            await self._quotas(spec)
        except TidelogError as error:
            return Outcome(
                False,
                "ClusterUnavailable" if error.retriable else "Refused",
                error.message,
                retry_after_s=RETRY_UNREACHABLE_S,
            )
        except ConnectionError as error:
            return Outcome(False, "ClusterUnavailable", str(error), retry_after_s=RETRY_UNREACHABLE_S)
        except ValueError as error:  # a spec the CRD's schema let through but the cluster cannot take
            return Outcome(False, "InvalidSpec", str(error), events=[("Warning", "InvalidSpec", str(error))])
        status = {"username": spec.name, "principal": spec.principal}
        if secret:
            status["secret"] = secret
        return Outcome(True, "Reconciled", f"user {spec.name} is in place", status=status, events=events)

    async def _credentials(
        self, spec: UserSpec, namespace: str, owner: Mapping[str, Any], events: list[tuple[str, str, str]]
    ) -> str:
        if spec.authentication is None:
            return ""
        existing = await self.secrets.get(namespace, spec.name) or {}
        if spec.authentication == "tls":
            if self.issuer is None:
                raise ValueError("authentication tls needs the clients CA (the chart's operator.clientsCa)")
            if not self.issuer.still_good(existing.get("user.crt", b""), spec.name):
                issued = self.issuer.issue(spec.name)
                await self.secrets.put(
                    namespace,
                    spec.name,
                    {"user.crt": issued.certificate, "user.key": issued.key, "ca.crt": issued.ca},
                    owner,
                )
                events.append(("Normal", "CertificateIssued", f"client certificate CN={spec.name} issued"))
            return spec.name
        password = existing.get("password")
        if not password:
            password = base64.urlsafe_b64encode(secrets.token_bytes(PASSWORD_BYTES)).rstrip(b"=")
            events.append(("Normal", "PasswordGenerated", f"password of {spec.name} generated"))
        # `applied` says which password the cluster was given: an edited Secret changes the password.
        applied = existing.get("applied") == _fingerprint(password)
        if not applied or spec.name not in await self.admin.describe_user_scram_credentials([spec.name]):
            await self._set_password(spec.name, password.decode())
            await self.secrets.put(
                namespace, spec.name, {"password": password, "applied": _fingerprint(password)}, owner
            )
        return spec.name

    async def _set_password(self, user: str, password: str) -> None:
        result = (await self.admin.alter_user_scram_credentials({user: password}))[user]
        if result is not None:
            raise result

    async def _acls(self, spec: UserSpec, events: list[tuple[str, str, str]]) -> None:
        existing = set(await self.admin.describe_acls(AclFilter(principal=spec.principal)))
        wanted = set(spec.acls)
        if wanted - existing:
            await self.admin.create_acls(sorted(wanted - existing, key=str))
        extra = existing - wanted
        if extra:
            await self.admin.delete_acls([_exactly(binding) for binding in extra])
        if wanted != existing:
            events.append(("Normal", "AclsUpdated", f"{len(wanted - existing)} ACLs added, {len(extra)} removed"))

    async def _quotas(self, spec: UserSpec) -> None:
        entity = QuotaEntity(user=spec.name)
        existing = (await self.admin.describe_client_quotas()).get(entity, {})
        removed = [name for name in existing if name not in spec.quotas]
        if dict(existing) != dict(spec.quotas):
            await self.admin.alter_client_quotas(entity, spec.quotas, removed)

    async def delete(self, spec: UserSpec) -> Outcome:
        try:
            await self.admin.delete_acls([AclFilter(principal=spec.principal)])
            entity = QuotaEntity(user=spec.name)
            existing = (await self.admin.describe_client_quotas()).get(entity, {})
            if existing:
                await self.admin.alter_client_quotas(entity, remove=list(existing))
            if spec.authentication == "scram-sha-512" and spec.name in await self.admin.describe_user_scram_credentials(
                [spec.name]
            ):
                await self.admin.alter_user_scram_credentials(deletions=[spec.name])
        except (TidelogError, ConnectionError) as error:
            return Outcome(False, "ClusterUnavailable", str(error), retry_after_s=RETRY_UNREACHABLE_S)
        return Outcome(True, "Deleted", f"user {spec.name}: ACLs, quotas and credential removed")


def _fingerprint(password: bytes) -> bytes:
    """Which password the cluster was given (the Secret may be edited to change it)."""
    return hashlib.sha256(password).hexdigest()[:16].encode()


def _exactly(binding: AclBinding) -> AclFilter:
    return AclFilter(
        principal=binding.principal,
        host=binding.host,
        operation=binding.operation,
        permission=binding.permission,
        resource_type=binding.resource_type,
        resource_name=binding.resource_name,
        pattern_type=binding.pattern_type,
    )
