"""HTTP Basic authentication against the cluster's SCRAM-SHA-512 users (REST Proxy's
`authentication.method=BASIC`, with the users Kafka clients log in as).

The password is checked as SCRAM's server would: PBKDF2 with the user's salt and iterations, then
H(HMAC(salted, "Client Key")) against the StoredKey. PBKDF2 takes milliseconds, so a check that
succeeded is remembered (keyed by an HMAC of the password under a per-process secret, and by the
credential it matched: a changed or deleted credential is checked afresh). A user that does not
exist costs the same PBKDF2 as one that does (an iteration count drawn from the real users'), so
timing tells nothing either.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import hmac
import os
from typing import Final

from tidelog.common.security.authentication.scram import salted_password, unknown_user_iterations
from tidelog.server_common.security.authentication.credential_store import CredentialCache

__all__ = ["ScramBasic"]

VERIFIED_MAX: Final = 10_000


class ScramBasic:
    def __init__(self, credentials: CredentialCache) -> None:
        self.credentials = credentials
        self._secret = os.urandom(32)
        self._verified: collections.OrderedDict[tuple[str, bytes], bytes] = collections.OrderedDict()

    async def principal(self, user: str, password: str) -> str | None:
        """`User:<name>` when the password is the user's, else None."""
        credential = self.credentials.get(user)
        key = (user, hmac.new(self._secret, password.encode(), hashlib.sha256).digest())
        if credential is not None and self._verified.get(key) == credential.stored_key:
            return f"User:{user}"
        salt = credential.salt if credential is not None else hmac.new(self._secret, user.encode(), "sha256").digest()
        iterations = (
            credential.iterations
            if credential is not None
            else unknown_user_iterations(self._secret, user, self.credentials.iterations)
        )
        salted = await asyncio.to_thread(salted_password, password, salt, iterations)
        client_key = hmac.new(salted, b"Client Key", hashlib.sha512).digest()
        if credential is None or not hmac.compare_digest(hashlib.sha512(client_key).digest(), credential.stored_key):
            return None
        self._verified[key] = credential.stored_key
        while len(self._verified) > VERIFIED_MAX:
            self._verified.popitem(last=False)
        return f"User:{user}"
