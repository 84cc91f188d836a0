"""SCRAM credentials in etcd, written directly: how a new cluster gets its first users before any
service can authenticate anyone (Kafka's `kafka-storage format --add-scram`). Later changes go
through the controllers (AdminClient.alter_user_scram_credentials), which check ACLs."""

from __future__ import annotations

from collections.abc import Mapping

from etcd3aio import Etcd3Client

from tidelog.common.metadata import scram_credential_key
from tidelog.common.security.scram import ScramCredential

__all__ = ["seed_users"]


async def seed_users(etcd_endpoint: str, users: Mapping[str, str]) -> None:
    """Create (or reset) users with these passwords, straight in etcd."""
    etcd = Etcd3Client([etcd_endpoint])
    await etcd.connect()
    try:
        assert etcd.kv is not None
        for user, password in users.items():
            await etcd.kv.put(scram_credential_key(user), ScramCredential.from_password(password).to_json())
    finally:
        await etcd.close()
