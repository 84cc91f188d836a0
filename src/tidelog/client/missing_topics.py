"""Subscribed topics that do not exist (yet). As Kafka's consumer, a member stays subscribed to
them and gets their partitions once they exist: it looks for them every second (Kafka refreshes
metadata for unknown topics with retry.backoff.ms growing to retry.backoff.max.ms, KIP-580) and
asks for a rejoin when one appears, so the group assigns it."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Final

from tidelog.client.client_logging import get_logger
from tidelog.client.cluster_metadata import ClusterMetadata
from tidelog.common.clock import Monotonic
from tidelog.common.errors import TidelogError, UnknownTopicOrPartitionError

__all__ = ["MISSING_TOPIC_RECHECK_S", "MissingTopics"]

log = get_logger(__name__)

MISSING_TOPIC_RECHECK_S: Final = 1.0


class MissingTopics:
    def __init__(self, group_id: str, metadata: ClusterMetadata, clock: Monotonic) -> None:
        self.group_id = group_id
        self.metadata = metadata
        self.clock = clock
        self.topics: set[str] = set()  # subscribed but not in the cluster at the last join
        self._checked = clock()

    async def note(self, subscribed: Sequence[str]) -> None:
        """At a join: which subscribed topics the cluster does not have (said once per change)."""
        missing = set()
        for topic in subscribed:
            try:
                await self.metadata.partitions_of(topic)
            except UnknownTopicOrPartitionError:
                missing.add(topic)
        if missing and missing != self.topics:
            log.warning("subscribed_topics_missing", group=self.group_id, topics=sorted(missing))
        self.topics = missing

    async def appeared(self) -> bool:
        """Whether a missing topic exists now (looked for at most every MISSING_TOPIC_RECHECK_S)."""
        if not self.topics or self.clock() - self._checked < MISSING_TOPIC_RECHECK_S:
            return False
        self._checked = self.clock()
        with contextlib.suppress(TidelogError):
            await self.metadata.refresh(sorted(self.topics))
        return any(topic in self.metadata.partitions for topic in self.topics)
