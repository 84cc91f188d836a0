"""A follower's side of its incremental fetch session with one leader (KIP-227, ADR 0014)."""

from __future__ import annotations

import dataclasses

__all__ = ["FollowerSession"]


@dataclasses.dataclass(slots=True)
class FollowerSession:
    """Our side of an incremental fetch session with one leader (KIP-227): what the leader holds
    of ours, so each request lists only what changed since."""

    session_id: int = 0  # 0: none yet, the next fetch is a full one and opens it
    epoch: int = 0
    sent: dict[tuple[str, int], tuple[int, int, int]] = dataclasses.field(default_factory=dict)  # offset, epoch, start
    # Partitions whose position may differ from `sent` (followed, appended to, truncated, dropped):
    # the only ones an incremental request looks at, so an idle round costs nothing per partition.
    changed: set[tuple[str, int]] = dataclasses.field(default_factory=set)
