"""Whether a call may do what it asks: the caller (principal and address), the service roles, and
the ACL authorizer fed by etcd — one object per service process.

Roles are the services' own identities (`controller.principals`, `broker.principals`, ...). They
are not super users: a broker identity may fetch as a follower but not create a topic, a client may
create topics (with the ACL) but never fetch as a follower — Kafka gives both to whoever holds
ClusterAction, which cannot tell a broker from a controller.

A gateway names the REST caller it serves, and a broker the Kafka client whose group or admin
request it forwards from its Kafka listener (principal propagation): ACLs are then checked for that
principal, but roles only ever for the identity that authenticated, and a propagated principal that
names a service identity is refused everything, as is a super user named by a gateway. So the
gateway's identity can act for REST users, never as a broker, controller or coordinator, nor as a
super user; a broker's may act for a super user who logged in on its Kafka listener (KIP-590's
trust in a broker's Envelope), never as a service.

With `authorizer.class.name` empty everything is allowed and nothing is read from etcd.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
from typing import Any, Final

from etcd3aio import Etcd3Client

from tidelog.common.security.authentication.principal import ANONYMOUS, Principal
from tidelog.common.security.authorization.acl import Authorizer, Operation, ResourceType
from tidelog.common.settings import SecuritySettings
from tidelog.server_common.etcd.watched_prefix import WatchedPrefix
from tidelog.server_common.metadata import ACLS_PREFIX, CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from tidelog.server_common.security.authentication.interceptor import current_principal
from tidelog.server_common.security.authorization.acl_store import bindings_of

__all__ = ["AccessControl", "Caller", "Role", "host_of"]

log = logging.getLogger(__name__)

# Metadata a gateway sends with the calls it makes for a REST caller (principal propagation).
ON_BEHALF_OF_PRINCIPAL: Final = "tidelog-on-behalf-of"
ON_BEHALF_OF_HOST: Final = "tidelog-on-behalf-of-host"


class Role(enum.Enum):
    CONTROLLER = "controller.principals"
    BROKER = "broker.principals"
    COORDINATOR = "coordinator.principals"
    GATEWAY = "gateway.principals"


@dataclasses.dataclass(frozen=True, slots=True)
class Caller:
    """Who a call is for (`principal`, whose ACLs apply) and who made it (`authenticated`: the
    identity that logged in; a gateway's, when it propagates a REST caller)."""

    principal: Principal
    host: str
    authenticated: Principal | None = None  # None: the principal itself

    @property
    def propagated(self) -> bool:
        return self.authenticated is not None

    @property
    def identity(self) -> Principal:
        """The identity that authenticated: the only one roles are checked for."""
        return self.principal if self.authenticated is None else self.authenticated

    def __str__(self) -> str:
        via = f" (via {self.authenticated})" if self.authenticated is not None else ""
        return f"{self.principal} from {self.host}{via}"


_NOBODY: Final = Caller(ANONYMOUS, "*")


def host_of(peer: str) -> str:
    """The address in gRPC's peer string: `ipv4:10.0.0.1:5555` → 10.0.0.1, `ipv6:[::1]:5555` → ::1."""
    kind, _, rest = peer.partition(":")
    if kind == "ipv6":
        return rest.rsplit(":", 1)[0].strip("[]")
    if kind == "ipv4":
        return rest.rsplit(":", 1)[0]
    return rest or peer


class AccessControl:
    def __init__(self, security: SecuritySettings, etcd: Etcd3Client | None = None) -> None:
        self.enabled = security.authorizer_class_name == "AclAuthorizer"
        self.super_users = SecuritySettings.principals(security.super_users)
        self.authorizer = Authorizer(
            super_users=self.super_users, allow_if_no_acl=security.allow_everyone_if_no_acl_found
        )
        self.roles = {
            role: SecuritySettings.principals(getattr(security, role.value.replace(".", "_"))) for role in Role
        }
        # Identities never taken from propagation: service roles and super users.
        self.service_identities = frozenset().union(*self.roles.values())
        self._watch: WatchedPrefix | None = None
        if self.enabled:
            assert etcd is not None, "the ACL authorizer reads its bindings from etcd"
            self._watch = WatchedPrefix(
                etcd, ACLS_PREFIX, lambda contents: self.authorizer.replace(bindings_of(contents))
            )

    async def start(self) -> None:
        if self._watch is not None:
            await self._watch.start()

    async def close(self) -> None:
        if self._watch is not None:
            await self._watch.close()

    def caller(self, context: Any) -> Caller:
        """Who makes the call being served (a gateway's calls: the REST caller it names)."""
        if not self.enabled:
            return _NOBODY
        principal = current_principal.get()
        host = host_of(context.peer())
        # A gateway names the REST caller it serves; a broker, the Kafka client whose group or admin
        # request it forwards (its Kafka listener, as Kafka's Envelope, KIP-590). Neither may name a
        # service identity, and a gateway no super user either (_refused).
        if str(principal) in self.roles[Role.GATEWAY] or str(principal) in self.roles[Role.BROKER]:
            metadata = dict(context.invocation_metadata() or ())
            on_behalf = metadata.get(ON_BEHALF_OF_PRINCIPAL)
            if on_behalf:
                named = Caller(Principal.parse(on_behalf), metadata.get(ON_BEHALF_OF_HOST) or host, principal)
                if self._refused(named):
                    log.warning("refused: %s names a service identity or super user", named)
                return named
        return Caller(principal, host)

    def _refused(self, caller: Caller) -> bool:
        """A propagated principal refused everything: a service identity, or a super user named by
        a gateway. A broker may name a super user who logged in on its Kafka listener: Kafka's
        controller trusts a broker's Envelope for any principal (KIP-590), and an admin's requests
        through Kafka's tools would otherwise be refused."""
        if not caller.propagated:
            return False
        name = str(caller.principal)
        if name in self.service_identities:
            return True
        return name in self.super_users and str(caller.authenticated) not in self.roles[Role.BROKER]

    def has_role(self, caller: Caller, role: Role) -> bool:
        if not self.enabled:
            return True
        if caller.propagated:
            return False  # a role is never exercised for someone else
        name = str(caller.identity)
        return name in self.roles[role] or name in self.super_users

    def allowed(self, caller: Caller, operation: Operation, resource_type: ResourceType, name: str) -> bool:
        if not self.enabled:
            return True
        if self._refused(caller):
            return False
        if self._coordinator_may(caller, operation, resource_type, name):
            return True
        if self._controller_may(caller, operation, resource_type):
            return True
        return self.authorizer.authorize(caller.principal, caller.host, operation, resource_type, name)

    def allowed_on_some(self, caller: Caller, operation: Operation, resource_type: ResourceType) -> bool:
        """Allowed `operation` on at least one resource of the type (KIP-679: Write on any topic
        allows an idempotent producer's id)."""
        if not self.enabled:
            return True
        if self._refused(caller):
            return False
        return self.authorizer.authorize_any(caller.principal, caller.host, operation, resource_type)

    def _controller_may(self, caller: Caller, operation: Operation, resource_type: ResourceType) -> bool:
        """What the active controller's kafka_exporter view reads (controller/exporter_view.py):
        describing topics (their offsets), groups (their offsets and members) and the cluster
        (listing groups) — kafka_exporter's own rights."""
        if caller.propagated or str(caller.principal) not in self.roles[Role.CONTROLLER]:
            return False
        return operation is Operation.DESCRIBE and resource_type in (
            ResourceType.TOPIC,
            ResourceType.GROUP,
            ResourceType.CLUSTER,
        )

    def _coordinator_may(self, caller: Caller, operation: Operation, resource_type: ResourceType, name: str) -> bool:
        """What the coordinators need: their own topics, and describing every topic (lag)."""
        if caller.propagated or str(caller.principal) not in self.roles[Role.COORDINATOR]:
            return False
        if resource_type is ResourceType.TOPIC and name in (CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC):
            return operation in (Operation.READ, Operation.WRITE, Operation.DESCRIBE, Operation.CREATE)
        if resource_type is ResourceType.CLUSTER and operation is Operation.IDEMPOTENT_WRITE:
            return True  # producer ids for transactional producers (a broker's InitProducerId)
        return operation is Operation.DESCRIBE and resource_type in (ResourceType.TOPIC, ResourceType.CLUSTER)
