"""SCRAM credentials in etcd, written directly: how a new cluster gets its first users before any
service can authenticate anyone (Kafka's `kafka-storage format --add-scram`). Later changes go
through the controllers (AdminClient.alter_user_scram_credentials), which check ACLs."""

from __future__ import annotations

from collections.abc import Mapping

from etcd3aio import Etcd3Client

from tidelog.common.security.authentication.scram import ScramCredential
from tidelog.server_common.etcd.watched_prefix import WatchedPrefix
from tidelog.server_common.metadata import SCRAM_CREDENTIALS_PREFIX, scram_credential_key

__all__ = ["CredentialCache", "seed_users"]


class CredentialCache:
    """Every user's SCRAM credential, followed live from etcd: {user: credential}."""

    def __init__(self, etcd: Etcd3Client) -> None:
        self.credentials: dict[str, ScramCredential] = {}
        # Every user's iteration count, sorted: what a user that does not exist is given one of.
        self.iterations: tuple[int, ...] = ()
        self._watch = WatchedPrefix(etcd, SCRAM_CREDENTIALS_PREFIX, self._replace)

    def _replace(self, contents: dict[bytes, bytes]) -> None:
        prefix = SCRAM_CREDENTIALS_PREFIX.encode()
        self.credentials = {
            key[len(prefix) :].decode(): ScramCredential.from_json(value) for key, value in contents.items()
        }
        self.iterations = tuple(sorted(credential.iterations for credential in self.credentials.values()))

    def get(self, user: str) -> ScramCredential | None:
        return self.credentials.get(user)

    async def start(self) -> None:
        await self._watch.start()

    async def close(self) -> None:
        await self._watch.close()


async def seed_users(etcd: Etcd3Client, users: Mapping[str, str]) -> None:
    """Create (or reset) users with these passwords, straight in etcd (this closes the client)."""
    await etcd.connect()
    try:
        assert etcd.kv is not None
        for user, password in users.items():
            await etcd.kv.put(scram_credential_key(user), ScramCredential.from_password(password).to_json())
    finally:
        await etcd.close()
