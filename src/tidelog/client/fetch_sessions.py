"""A consumer's side of incremental fetch sessions (KIP-227), one per broker: the session id, the
next epoch, and the fetch offset the broker holds for each partition. A fetch then lists only the
partitions whose offset changed and those to drop, and the broker answers only the partitions with
news — at thousands of partitions a full fetch listed (and the broker read) every one of them each
round. Any doubt about what the broker holds (an error, a cancelled or failed request) starts a
new session with a full list, as Kafka's FetchSessionHandler does.
"""

from __future__ import annotations

import dataclasses

from tidelog.client.cluster_metadata import TopicPartition
from tidelog.common.errors import ErrorCode
from tidelog.v1 import broker_pb2

__all__ = ["SESSION_ERRORS", "ClientFetchSession"]

SESSION_ERRORS = frozenset({ErrorCode.FETCH_SESSION_ID_NOT_FOUND, ErrorCode.INVALID_FETCH_SESSION_EPOCH})


@dataclasses.dataclass(slots=True)
class ClientFetchSession:
    session_id: int = 0  # 0: none yet, the next request opens one
    epoch: int = 0  # the next request's
    held: dict[TopicPartition, int] = dataclasses.field(default_factory=dict)  # fetch offsets the broker holds

    def changes(self, wanted: dict[TopicPartition, int]) -> tuple[list[TopicPartition], list[TopicPartition]]:
        """The partitions to list (new, or at another offset than the broker holds) and to drop."""
        if not self.session_id:
            return list(wanted), []
        listed = [tp for tp, offset in wanted.items() if self.held.get(tp) != offset]
        return listed, [tp for tp in self.held if tp not in wanted]

    def answered(
        self,
        response: broker_pb2.FetchResponse,
        sent: dict[TopicPartition, int],
        forgotten: list[TopicPartition],
    ) -> None:
        """A request's answer came back without an error: the broker holds what it listed."""
        if not response.session_id:  # no room for a session there: every fetch lists everything
            self.reset()
            return
        if response.session_id != self.session_id:  # the session this request opened
            self.session_id, self.epoch, self.held = response.session_id, 1, {}
        else:
            self.epoch += 1
        self.held.update(sent)
        for tp in forgotten:
            self.held.pop(tp, None)
        for result in response.partitions:
            # Listed again next time: one answered with records is held at the offset those were
            # read from (the broker answers a held partition only on news), and one answered with
            # an error is answered again, as a full fetch would be. Whether the consumer moved on
            # or sought back to that very offset, the broker then reads it from there.
            if result.error_code or result.record_batches:
                self.held.pop(TopicPartition(result.topic, result.partition), None)

    def reset(self) -> None:
        self.session_id, self.epoch, self.held = 0, 0, {}
