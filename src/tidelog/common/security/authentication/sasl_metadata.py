"""The call metadata that names a SCRAM session: the client's interceptor sends it on every call
after its login, the server's authentication reads it. Apart from both so that a client does not
import the server's side (its etcd credential store) to know one header's name."""

from __future__ import annotations

from typing import Final

__all__ = ["SESSION_METADATA"]

SESSION_METADATA: Final = "tidelog-session"
