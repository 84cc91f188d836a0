"""The PEM files of one TLS identity, re-read when they change on disk.

Kubernetes rotates a mounted Secret by swapping a symlink, so a change shows as a new inode or
mtime of the path; a stat per check is all it costs.
"""

from __future__ import annotations

import dataclasses
import os
import ssl
from pathlib import Path

from tidelog.common.errors import InvalidConfigError

__all__ = ["PemFiles", "PemIdentity"]


@dataclasses.dataclass(frozen=True, slots=True)
class PemIdentity:
    certificate_chain: bytes | None
    private_key: bytes | None
    root_certificates: bytes | None


class PemFiles:
    def __init__(self, certificate: str, key: str, ca: str) -> None:
        if bool(certificate) != bool(key):
            raise InvalidConfigError("ssl.certificate.location and ssl.key.location must be given together")
        self.paths = {"ssl.certificate.location": certificate, "ssl.key.location": key, "ssl.ca.location": ca}
        self._seen: tuple[tuple[int, int, int], ...] | None = None

    @property
    def has_identity(self) -> bool:
        return bool(self.paths["ssl.certificate.location"])

    def _stamp(self) -> tuple[tuple[int, int, int], ...]:
        stamps = []
        for path in self.paths.values():
            if path:
                info = os.stat(path)
                stamps.append((info.st_ino, info.st_mtime_ns, info.st_size))
        return tuple(stamps)

    def changed(self) -> bool:
        """True when a file differs from the last `read()` (or cannot be read now)."""
        try:
            return self._stamp() != self._seen
        except OSError:
            return True

    def read(self) -> PemIdentity:
        """The files' contents, checked: a certificate and key that do not belong together, or a file
        that is not PEM, is an InvalidConfigError naming the setting (a half-rotated Secret is not
        taken)."""
        stamp = self._stamp()
        contents: dict[str, bytes | None] = {}
        for name, path in self.paths.items():
            if not path:
                contents[name] = None
                continue
            try:
                data = Path(path).read_bytes()
            except OSError as error:
                raise InvalidConfigError(f"{name}: cannot read {path}: {error.strerror}") from error
            if b"-----BEGIN " not in data:
                raise InvalidConfigError(f"{name}: {path} holds no PEM data")
            contents[name] = data
        certificate, key = self.paths["ssl.certificate.location"], self.paths["ssl.key.location"]
        if certificate:
            try:
                ssl.create_default_context().load_cert_chain(certificate, key)
            except ssl.SSLError as error:
                raise InvalidConfigError(
                    f"ssl.certificate.location/ssl.key.location: {certificate} and {key} do not form a "
                    f"certificate and its key ({error.reason})"
                ) from error
        if self.paths["ssl.ca.location"]:
            try:
                ssl.create_default_context(cafile=self.paths["ssl.ca.location"])
            except ssl.SSLError as error:
                raise InvalidConfigError(f"ssl.ca.location: {self.paths['ssl.ca.location']}: {error.reason}") from error
        self._seen = stamp
        return PemIdentity(
            contents["ssl.certificate.location"], contents["ssl.key.location"], contents["ssl.ca.location"]
        )
