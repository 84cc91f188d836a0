"""Kafka's BrokerTopicMetrics: a broker's per-topic meters, all created together.

Kafka's `BrokerTopicStats.topicStats(topic)` makes every meter of a topic at its first use, so the
JMX exporter shows FailedProduceRequestsPerSec at 0 as soon as the topic is produced to — and a
dashboard plotting failures beside totals has a line from the start instead of "No data". The same
here: `topic_meters(topic)` labels every counter of the topic at once (prometheus_client exports a
labelled child from its creation, at 0).
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Final

from prometheus_client import Counter

from tidelog.server_common import metrics_catalog

__all__ = ["TopicMeters", "topic_meters"]

_MESSAGES_IN: Final = metrics_catalog.counter("kafka_server_brokertopicmetrics_messagesin_total")
_BYTES_IN: Final = metrics_catalog.counter("kafka_server_brokertopicmetrics_bytesin_total")
_BYTES_OUT: Final = metrics_catalog.counter("kafka_server_brokertopicmetrics_bytesout_total")
_TOTAL_PRODUCE: Final = metrics_catalog.counter("kafka_server_brokertopicmetrics_totalproducerequests_total")
_FAILED_PRODUCE: Final = metrics_catalog.counter("kafka_server_brokertopicmetrics_failedproducerequests_total")
_TOTAL_FETCH: Final = metrics_catalog.counter("kafka_server_brokertopicmetrics_totalfetchrequests_total")
_FAILED_FETCH: Final = metrics_catalog.counter("kafka_server_brokertopicmetrics_failedfetchrequests_total")


@dataclasses.dataclass(frozen=True, slots=True)
class TopicMeters:
    messages_in: Counter
    bytes_in: Counter
    bytes_out: Counter
    total_produce: Counter
    failed_produce: Counter
    total_fetch: Counter
    failed_fetch: Counter


_BY_TOPIC: Final[dict[str, TopicMeters]] = {}
_LOCK: Final = threading.Lock()  # fetch reads run on the I/O pool's threads


def topic_meters(topic: str) -> TopicMeters:
    meters = _BY_TOPIC.get(topic)
    if meters is None:
        with _LOCK:
            meters = _BY_TOPIC.get(topic)
            if meters is None:
                meters = _BY_TOPIC[topic] = TopicMeters(
                    *(
                        family.labels(topic)
                        for family in (
                            _MESSAGES_IN,
                            _BYTES_IN,
                            _BYTES_OUT,
                            _TOTAL_PRODUCE,
                            _FAILED_PRODUCE,
                            _TOTAL_FETCH,
                            _FAILED_FETCH,
                        )
                    )
                )
    return meters
