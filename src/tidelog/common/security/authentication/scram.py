"""SCRAM-SHA-512 (RFC 5802, RFC 7677's SHA-512 variant as Kafka uses it): credentials as stored,
and the two sides of the exchange.

What is stored per user is Kafka's: the salt, the iteration count, StoredKey = H(HMAC(SaltedPassword,
"Client Key")) and ServerKey = HMAC(SaltedPassword, "Server Key"). Neither the password nor the
salted password is kept, so the store alone lets nobody log in. The client proves it knows the
password with a proof that cannot be replayed (it covers both nonces); the server proves it holds
the credential with its signature.

A login for a user that does not exist runs the same exchange with a salt derived from the name
and a per-process secret, and fails at the same step with the same words as a wrong password.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import json
import os
import secrets
from collections.abc import Callable, Sequence
from typing import Final

__all__ = [
    "ITERATIONS_DEFAULT",
    "MECHANISM",
    "ScramClient",
    "ScramCredential",
    "ScramError",
    "ScramServer",
    "salted_password",
    "unknown_user_iterations",
]

MECHANISM: Final = "SCRAM-SHA-512"
ITERATIONS_DEFAULT: Final = 4096  # Kafka's default (and minimum) for SCRAM-SHA-512
ITERATIONS_MIN: Final = 4096
ITERATIONS_MAX: Final = 16384  # Kafka's maximum
NONCE_BYTES: Final = 24
MESSAGE_BYTES_MAX: Final = 4096  # no SCRAM message is near this: anything longer is refused unread
FAILED: Final = "authentication failed: wrong user name or password"


class ScramError(Exception):
    """The exchange failed; the message is safe to show the client."""


def _h(data: bytes) -> bytes:
    return hashlib.sha512(data).digest()


def _hmac(key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, hashlib.sha512).digest()


def salted_password(password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(Normalize(password), salt, i) — PBKDF2 with HMAC-SHA-512 (SASLprep is not applied: Kafka's
    Java client does not apply it either)."""
    return hashlib.pbkdf2_hmac("sha512", password.encode(), salt, iterations)


@dataclasses.dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int
    mechanism: str = MECHANISM

    @classmethod
    def from_salted_password(cls, salted: bytes, salt: bytes, iterations: int) -> ScramCredential:
        if not ITERATIONS_MIN <= iterations <= ITERATIONS_MAX:
            raise ValueError(f"iterations must be within {ITERATIONS_MIN}..{ITERATIONS_MAX}, not {iterations}")
        if len(salt) < 16:
            raise ValueError("the salt must be at least 16 bytes")
        return cls(salt, _h(_hmac(salted, b"Client Key")), _hmac(salted, b"Server Key"), iterations)

    @classmethod
    def from_password(cls, password: str, *, iterations: int = ITERATIONS_DEFAULT) -> ScramCredential:
        salt = os.urandom(32)
        return cls.from_salted_password(salted_password(password, salt, iterations), salt, iterations)

    def to_json(self) -> bytes:
        encode = base64.b64encode
        return json.dumps(
            {
                "mechanism": self.mechanism,
                "salt": encode(self.salt).decode(),
                "stored_key": encode(self.stored_key).decode(),
                "server_key": encode(self.server_key).decode(),
                "iterations": self.iterations,
            }
        ).encode()

    @classmethod
    def from_json(cls, data: bytes) -> ScramCredential:
        fields = json.loads(data)
        decode = base64.b64decode
        return cls(
            decode(fields["salt"]),
            decode(fields["stored_key"]),
            decode(fields["server_key"]),
            int(fields["iterations"]),
            fields.get("mechanism", MECHANISM),
        )


def _text(message: bytes) -> str:
    if len(message) > MESSAGE_BYTES_MAX:
        raise ScramError("SCRAM message too long")
    try:
        return message.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ScramError("a SCRAM message must be UTF-8") from error


def _attributes(message: str) -> dict[str, str]:
    attributes = {}
    for part in message.split(","):
        name, separator, value = part.partition("=")
        if not separator or len(name) != 1:
            raise ScramError(f"malformed SCRAM message part {part[:40]!r}")
        attributes[name] = value
    return attributes


def _unescape_name(name: str) -> str:
    if "=" in name.replace("=2C", "").replace("=3D", ""):
        raise ScramError("malformed user name (only =2C and =3D may follow '=')")
    return name.replace("=2C", ",").replace("=3D", "=")


def _escape_name(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def unknown_user_iterations(secret: bytes, user: str, iterations: Sequence[int]) -> int:
    """The iteration count a user that does not exist is given: one of the real users' counts
    (`iterations`, one per user), the same for the same name wherever asked."""
    choices = iterations or (ITERATIONS_DEFAULT,)
    pick = int.from_bytes(_hmac(secret, b"iterations:" + user.encode())[:8], "big")
    return choices[pick % len(choices)]


class ScramServer:
    """One exchange on the server's side: `first()` then `final()`; each at most once."""

    def __init__(
        self,
        credentials: Callable[[str], ScramCredential | None],
        secret: bytes,
        iterations: Sequence[int] = (),
    ) -> None:
        self._credentials = credentials
        # The cluster's secret and its users' iteration counts: a user that does not exist gets a
        # salt and an iteration count every process answers alike, drawn as real users' are.
        self._secret = secret
        self._iterations = iterations
        self.user = ""
        self._credential: ScramCredential | None = None
        self._exists = False
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""

    def first(self, message: bytes) -> bytes:
        text = _text(message)
        if not text.startswith("n,"):
            raise ScramError("channel binding is not supported: the client-first-message must start with 'n,'")
        _, _, bare = text.partition(",")  # skip the gs2 flag
        authzid, _, bare = bare.partition(",")
        if authzid:
            raise ScramError("an authorization id (a=) is not supported")
        attributes = _attributes(bare)
        if "m" in attributes or "n" not in attributes or "r" not in attributes or not attributes["r"]:
            raise ScramError("the client-first-message needs n= and r=")
        self.user = _unescape_name(attributes["n"])
        credential = self._credentials(self.user)
        self._exists = credential is not None
        if credential is None:  # the same steps, a salt that exists for nobody
            fake_salt = _hmac(self._secret, self.user.encode())[:32]
            iterations = unknown_user_iterations(self._secret, self.user, self._iterations)
            credential = ScramCredential(fake_salt, b"", b"", iterations)
        self._credential = credential
        self._nonce = attributes["r"] + base64.b64encode(secrets.token_bytes(NONCE_BYTES)).decode()
        self._client_first_bare = bare
        self._server_first = f"r={self._nonce},s={base64.b64encode(credential.salt).decode()},i={credential.iterations}"
        return self._server_first.encode()

    @property
    def salt(self) -> bytes:
        """The salt of the credential the exchange checks (which one a session logged in with)."""
        assert self._credential is not None, "first() comes first"
        return self._credential.salt

    def final(self, message: bytes) -> tuple[bytes, str]:
        """(server-final-message, the user) when the proof holds; ScramError otherwise."""
        assert self._credential is not None, "first() comes first"
        text = _text(message)
        without_proof, separator, proof_part = text.rpartition(",p=")
        if not separator:
            raise ScramError("the client-final-message needs p=")
        attributes = _attributes(without_proof)
        if attributes.get("c") != "biws":  # base64("n,,")
            raise ScramError("channel binding data must be 'biws' (no channel binding)")
        if attributes.get("r") != self._nonce:
            raise ScramError("the nonce does not match this exchange")
        try:
            proof = base64.b64decode(proof_part, validate=True)
        except ValueError as error:
            raise ScramError("the proof is not base64") from error
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        credential = self._credential
        signature = _hmac(credential.stored_key, auth_message)
        if not self._exists or len(proof) != len(signature):
            raise ScramError(FAILED)
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(_h(client_key), credential.stored_key):
            raise ScramError(FAILED)
        verifier = base64.b64encode(_hmac(credential.server_key, auth_message)).decode()
        return f"v={verifier}".encode(), self.user


class ScramClient:
    """One exchange on the client's side: `first()`, `final(server_first)`, `verify(server_final)`."""

    def __init__(self, user: str, password: str) -> None:
        self.user = user
        self.password = password
        self._nonce = base64.b64encode(secrets.token_bytes(NONCE_BYTES)).decode()
        self._client_first_bare = f"n={_escape_name(user)},r={self._nonce}"
        self._auth_message = b""
        self._salted = b""

    def first(self) -> bytes:
        return f"n,,{self._client_first_bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        text = server_first.decode()
        attributes = _attributes(text)
        nonce, salt, iterations = attributes.get("r", ""), attributes.get("s", ""), attributes.get("i", "")
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce):
            raise ScramError("the server's nonce does not extend ours")
        if not iterations.isdigit() or not ITERATIONS_MIN <= int(iterations) <= ITERATIONS_MAX:
            raise ScramError(f"the server asks for {iterations!r} iterations")
        self._salted = salted_password(self.password, base64.b64decode(salt), int(iterations))
        without_proof = f"c=biws,r={nonce}"
        self._auth_message = f"{self._client_first_bare},{text},{without_proof}".encode()
        client_key = _hmac(self._salted, b"Client Key")
        signature = _hmac(_h(client_key), self._auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        """The server showed it holds this user's credential (not just anyone answering)."""
        expected = base64.b64encode(_hmac(_hmac(self._salted, b"Server Key"), self._auth_message)).decode()
        if not hmac.compare_digest(server_final.decode(), f"v={expected}"):
            raise ScramError("the server's signature is wrong: it does not hold this user's credential")
