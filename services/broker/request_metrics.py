"""Kafka's RequestMetrics for a broker: requests by type and error, and where their time went, in
milliseconds (`kafka.network:type=RequestMetrics`). Defined here once for the service (requests,
total time) and the replica manager (queue, local and remote time)."""

from __future__ import annotations

from typing import Final

from tidelog.server_common import metrics_catalog

__all__ = ["LOCAL_TIME_MS", "QUEUE_TIME_MS", "REMOTE_TIME_MS", "REQUESTS", "REQUEST_MS_BUCKETS", "TOTAL_TIME_MS"]

# Request times in milliseconds, as Kafka's RequestMetrics count them: a produce with acks=1 in
# well under a millisecond, a long-poll fetch up to fetch.max.wait.ms.
REQUEST_MS_BUCKETS: Final = (0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000)

REQUESTS: Final = metrics_catalog.counter("kafka_network_requestmetrics_requests_total")  # by request type, error
TOTAL_TIME_MS: Final = metrics_catalog.histogram("kafka_network_requestmetrics_totaltimems", buckets=REQUEST_MS_BUCKETS)
QUEUE_TIME_MS: Final = metrics_catalog.histogram(
    "kafka_network_requestmetrics_requestqueuetimems", buckets=REQUEST_MS_BUCKETS
)
LOCAL_TIME_MS: Final = metrics_catalog.histogram("kafka_network_requestmetrics_localtimems", buckets=REQUEST_MS_BUCKETS)
REMOTE_TIME_MS: Final = metrics_catalog.histogram(
    "kafka_network_requestmetrics_remotetimems", buckets=REQUEST_MS_BUCKETS
)
