"""Every Prometheus metric Tidelog exports, defined once: name, type, labels, help, which process
exports it, and the Kafka name it stands for. `docs/metrics.md` is generated from this table
(`python -m tidelog.server_common.metrics_catalog > docs/metrics.md`; a test keeps it fresh), and each
service builds its instruments and scrape-time families from it, so a name cannot drift between
the code, the docs, the dashboards and the alerts.

Names follow the Kafka ecosystem where Kafka has the figure, so existing dashboards and alerts work:
- cluster, topic, partition and group state with kafka_exporter's names and labels
  (`kafka_topic_partition_current_offset{topic, partition}`, `kafka_consumergroup_lag{...}`),
  all from one target as kafka_exporter serves them: the active controller;
- broker internals with the names the Prometheus JMX exporter gives Kafka's MBeans under
  Strimzi's rules (`kafka.server:type=ReplicaManager,name=UnderReplicatedPartitions` →
  `kafka_server_replicamanager_underreplicatedpartitions`; `...PerSec` meters → `..._total`).
Each figure is exported by one process only, so summing a scrape of every pod never double-counts:
kafka_exporter's family by the active controller only (it asks leaders and coordinators, as
kafka_exporter asks a Kafka cluster), a partition's MBeans by its leader only.
Figures Kafka has no name for keep `tidelog_*` names.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterator
from typing import Final

from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

__all__ = [
    "METRICS",
    "Exporter",
    "Kind",
    "MetricDef",
    "by_name",
    "counter",
    "counter_family",
    "gauge",
    "gauge_family",
    "gauge_value",
    "histogram",
    "render_markdown",
]


class Kind(enum.Enum):
    GAUGE = "gauge"
    COUNTER = "counter"
    HISTOGRAM = "histogram"


class Exporter(enum.Enum):
    """Which process exports a metric (and so which scrape to sum over)."""

    ACTIVE_CONTROLLER = "the active controller (standbys export none)"
    CONTROLLER = "every controller"
    BROKER = "every broker, for what it hosts"
    PARTITION_LEADER = "the broker leading the partition"
    COORDINATOR = "the coordinator owning the group"
    GATEWAY = "every gateway"
    ETCD_CLIENT = "every process holding an etcd lease (brokers, controllers, coordinators, gateways)"
    OPERATOR = "the operator"
    SERVICE = "every service process (brokers, controllers, coordinators, gateways)"


@dataclasses.dataclass(frozen=True, slots=True)
class MetricDef:
    name: str  # as exposed (a counter's with `_total`, a histogram's without `_bucket`)
    kind: Kind
    help: str
    labels: tuple[str, ...]
    exporter: Exporter
    kafka: str = ""  # the Kafka figure it stands for: kafka_exporter's, an MBean's, or "" (ours only)

    def __post_init__(self) -> None:
        assert self.name.endswith("_total") == (self.kind is Kind.COUNTER), f"{self.name}: counters end in _total"
        assert self.name.startswith(("kafka_", "tidelog_")), self.name

    @property
    def base_name(self) -> str:
        """The name prometheus_client wants (it appends `_total` to a counter itself)."""
        return self.name.removesuffix("_total") if self.kind is Kind.COUNTER else self.name


KAFKA_EXPORTER: Final = "kafka_exporter"
TP: Final = ("topic", "partition")


def _m(  # noqa: PLR0917 - one row of the table, in its columns' order
    name: str, kind: Kind, labels: tuple[str, ...], exporter: Exporter, help_text: str, kafka: str = ""
) -> MetricDef:
    return MetricDef(name, kind, help_text, labels, exporter, kafka)


# The table's columns, in words.
GAUGE, COUNTER, HISTOGRAM = Kind.GAUGE, Kind.COUNTER, Kind.HISTOGRAM
ACTIVE_CONTROLLER = Exporter.ACTIVE_CONTROLLER
CONTROLLER = Exporter.CONTROLLER
BROKER = Exporter.BROKER
PARTITION_LEADER = Exporter.PARTITION_LEADER
COORDINATOR = Exporter.COORDINATOR
GATEWAY = Exporter.GATEWAY
OPERATOR = Exporter.OPERATOR
ETCD_CLIENT = Exporter.ETCD_CLIENT
SERVICE = Exporter.SERVICE

METRICS: Final[tuple[MetricDef, ...]] = (
    # ---- cluster and topics: kafka_exporter's names, from the active controller -------------------
    _m("kafka_brokers", GAUGE, (), ACTIVE_CONTROLLER, "Brokers registered (alive) in the cluster", KAFKA_EXPORTER),
    _m(
        "kafka_broker_info",
        GAUGE,
        ("id", "address", "rack"),
        ACTIVE_CONTROLLER,
        "One series per live broker (value 1)",
        KAFKA_EXPORTER,
    ),
    _m("kafka_topic_partitions", GAUGE, ("topic",), ACTIVE_CONTROLLER, "Partitions of the topic", KAFKA_EXPORTER),
    _m(
        "kafka_topic_partition_leader",
        GAUGE,
        TP,
        ACTIVE_CONTROLLER,
        "Broker id leading the partition (-1: offline)",
        KAFKA_EXPORTER,
    ),
    _m(
        "kafka_topic_partition_replicas",
        GAUGE,
        TP,
        ACTIVE_CONTROLLER,
        "Replicas assigned to the partition",
        KAFKA_EXPORTER,
    ),
    _m(
        "kafka_topic_partition_in_sync_replica",
        GAUGE,
        TP,
        ACTIVE_CONTROLLER,
        "Replicas in the partition's ISR",
        KAFKA_EXPORTER,
    ),
    _m(
        "kafka_topic_partition_leader_is_preferred",
        GAUGE,
        TP,
        ACTIVE_CONTROLLER,
        "1 if the partition is led by its preferred (first) replica",
        KAFKA_EXPORTER,
    ),
    _m(
        "kafka_topic_partition_under_replicated_partition",
        GAUGE,
        TP,
        ACTIVE_CONTROLLER,
        "1 if the partition's ISR is smaller than its replica set",
        KAFKA_EXPORTER,
    ),
    # ---- partition offsets and groups: kafka_exporter's names, also from the active controller ----
    # (one target for the whole family, as kafka_exporter: controller/exporter_view.py)
    _m(
        "kafka_topic_partition_current_offset",
        GAUGE,
        TP,
        ACTIVE_CONTROLLER,
        "The partition's log end offset (the next offset to be written)",
        KAFKA_EXPORTER,
    ),
    _m(
        "kafka_topic_partition_oldest_offset",
        GAUGE,
        TP,
        ACTIVE_CONTROLLER,
        "The partition's log start offset",
        KAFKA_EXPORTER,
    ),
    _m(
        "kafka_consumergroup_current_offset",
        GAUGE,
        ("consumergroup", *TP),
        ACTIVE_CONTROLLER,
        "Offset the group committed for the partition; -1 for a partition of a topic the group commits to "
        "that it never committed (every partition of such a topic has a series)",
        KAFKA_EXPORTER,
    ),
    _m(
        "kafka_consumergroup_current_offset_sum",
        GAUGE,
        ("consumergroup", "topic"),
        ACTIVE_CONTROLLER,
        "Sum of the group's committed offsets over the topic's partitions (the -1s left out: kafka_exporter adds them)",
        KAFKA_EXPORTER,
    ),
    _m(
        "kafka_consumergroup_lag",
        GAUGE,
        ("consumergroup", *TP),
        ACTIVE_CONTROLLER,
        "Log end offset minus the group's committed offset, on every partition of a topic the group "
        "commits to (-1: that partition never committed)",
        KAFKA_EXPORTER,
    ),
    _m(
        "kafka_consumergroup_lag_sum",
        GAUGE,
        ("consumergroup", "topic"),
        ACTIVE_CONTROLLER,
        "The group's lag summed over the topic's partitions (partitions without a commit left out)",
        KAFKA_EXPORTER,
    ),
    _m(
        "tidelog_consumergroup_lag_stable",
        GAUGE,
        ("consumergroup", *TP),
        ACTIVE_CONTROLLER,
        "Last stable offset minus the group's committed offset: the lag of a read_committed group, which never "
        "reads past it (kafka_exporter's lag counts open and aborted transactions' records it never reads)",
    ),
    _m(
        "tidelog_consumergroup_lag_stable_sum",
        GAUGE,
        ("consumergroup", "topic"),
        ACTIVE_CONTROLLER,
        "The group's stable lag summed over the topic's partitions (partitions without a commit left out)",
    ),
    _m(
        "kafka_consumergroup_members",
        GAUGE,
        ("consumergroup",),
        ACTIVE_CONTROLLER,
        "Members of the group",
        KAFKA_EXPORTER,
    ),
    # ---- controller MBeans (JMX exporter names) -------------------------------------------------
    _m(
        "kafka_controller_kafkacontroller_activecontrollercount",
        GAUGE,
        (),
        CONTROLLER,
        "1 on the active controller, 0 on the others: the sum over controllers is 1 in a healthy cluster",
        "kafka.controller:type=KafkaController,name=ActiveControllerCount",
    ),
    _m(
        "kafka_controller_kafkacontroller_offlinepartitionscount",
        GAUGE,
        (),
        ACTIVE_CONTROLLER,
        "Partitions without a leader",
        "kafka.controller:type=KafkaController,name=OfflinePartitionsCount",
    ),
    _m(
        "kafka_controller_kafkacontroller_globalpartitioncount",
        GAUGE,
        (),
        ACTIVE_CONTROLLER,
        "Partitions in the cluster",
        "kafka.controller:type=KafkaController,name=GlobalPartitionCount",
    ),
    _m(
        "kafka_controller_kafkacontroller_globaltopiccount",
        GAUGE,
        (),
        ACTIVE_CONTROLLER,
        "Topics in the cluster",
        "kafka.controller:type=KafkaController,name=GlobalTopicCount",
    ),
    _m(
        "kafka_controller_controllerstats_leaderelections_total",
        COUNTER,
        (),
        CONTROLLER,
        "Partition leader elections this controller made (a new leader, any cause)",
        "kafka.controller:type=ControllerStats,name=LeaderElectionRateAndTimeMs (count)",
    ),
    _m(
        "kafka_controller_controllerstats_uncleanleaderelections_total",
        COUNTER,
        (),
        CONTROLLER,
        "Leader elections of a replica outside the ISR (unclean.leader.election.enable)",
        "kafka.controller:type=ControllerStats,name=UncleanLeaderElectionsPerSec",
    ),
    # ---- broker MBeans (JMX exporter names) -----------------------------------------------------
    _m(
        "kafka_server_replicamanager_partitioncount",
        GAUGE,
        (),
        BROKER,
        "Partition replicas this broker hosts",
        "kafka.server:type=ReplicaManager,name=PartitionCount",
    ),
    _m(
        "kafka_server_replicamanager_leadercount",
        GAUGE,
        (),
        BROKER,
        "Partitions this broker leads",
        "kafka.server:type=ReplicaManager,name=LeaderCount",
    ),
    _m(
        "kafka_server_replicamanager_underreplicatedpartitions",
        GAUGE,
        (),
        BROKER,
        "Partitions this broker leads whose ISR is smaller than their replica set",
        "kafka.server:type=ReplicaManager,name=UnderReplicatedPartitions",
    ),
    _m(
        "kafka_server_replicamanager_underminisrpartitioncount",
        GAUGE,
        (),
        BROKER,
        "Partitions this broker leads whose ISR is smaller than min.insync.replicas",
        "kafka.server:type=ReplicaManager,name=UnderMinIsrPartitionCount",
    ),
    _m(
        "kafka_server_replicamanager_isrshrinks_total",
        COUNTER,
        (),
        BROKER,
        "ISR shrinks this broker (as leader) committed",
        "kafka.server:type=ReplicaManager,name=IsrShrinksPerSec",
    ),
    _m(
        "kafka_server_replicamanager_isrexpands_total",
        COUNTER,
        (),
        BROKER,
        "ISR expansions this broker (as leader) committed",
        "kafka.server:type=ReplicaManager,name=IsrExpandsPerSec",
    ),
    _m(
        "kafka_server_brokertopicmetrics_messagesin_total",
        COUNTER,
        ("topic",),
        BROKER,
        "Records appended as leader",
        "kafka.server:type=BrokerTopicMetrics,name=MessagesInPerSec,topic=*",
    ),
    _m(
        "kafka_server_brokertopicmetrics_bytesin_total",
        COUNTER,
        ("topic",),
        BROKER,
        "Record batch bytes appended as leader (from producers)",
        "kafka.server:type=BrokerTopicMetrics,name=BytesInPerSec,topic=*",
    ),
    _m(
        "kafka_server_brokertopicmetrics_bytesout_total",
        COUNTER,
        ("topic",),
        BROKER,
        "Record batch bytes served to consumers and followers",
        "kafka.server:type=BrokerTopicMetrics,name=BytesOutPerSec,topic=*",
    ),
    _m(
        "kafka_server_brokertopicmetrics_failedproducerequests_total",
        COUNTER,
        ("topic",),
        BROKER,
        "Produce requests for the topic answered with an error",
        "kafka.server:type=BrokerTopicMetrics,name=FailedProduceRequestsPerSec,topic=*",
    ),
    _m(
        "kafka_server_brokertopicmetrics_totalproducerequests_total",
        COUNTER,
        ("topic",),
        BROKER,
        "Partition entries of produce requests for the topic (as Kafka: one per partition a request writes)",
        "kafka.server:type=BrokerTopicMetrics,name=TotalProduceRequestsPerSec,topic=*",
    ),
    _m(
        "kafka_server_brokertopicmetrics_totalfetchrequests_total",
        COUNTER,
        ("topic",),
        BROKER,
        "Partition entries of fetch requests for the topic, consumers' and followers'",
        "kafka.server:type=BrokerTopicMetrics,name=TotalFetchRequestsPerSec,topic=*",
    ),
    _m(
        "kafka_server_brokertopicmetrics_failedfetchrequests_total",
        COUNTER,
        ("topic",),
        BROKER,
        "Fetch request partition entries for the topic answered with an error",
        "kafka.server:type=BrokerTopicMetrics,name=FailedFetchRequestsPerSec,topic=*",
    ),
    _m(
        "kafka_cluster_partition_replicascount",
        GAUGE,
        TP,
        PARTITION_LEADER,
        "Replicas assigned to the partition (from its leader; per partition up to metrics.partition.series.max)",
        "kafka.cluster:type=Partition,name=ReplicasCount,topic=*,partition=*",
    ),
    _m(
        "kafka_cluster_partition_atminisr",
        GAUGE,
        TP,
        PARTITION_LEADER,
        "1 if the partition's ISR is exactly min.insync.replicas (one more loss stops acks=all)",
        "kafka.cluster:type=Partition,name=AtMinIsr,topic=*,partition=*",
    ),
    _m(
        "kafka_cluster_partition_underminisr",
        GAUGE,
        TP,
        PARTITION_LEADER,
        "1 if the partition's ISR is smaller than min.insync.replicas (acks=all produce refused)",
        "kafka.cluster:type=Partition,name=UnderMinIsr,topic=*,partition=*",
    ),
    _m(
        "kafka_network_socketserver_networkprocessoravgidle_percent",
        GAUGE,
        (),
        BROKER,
        "Fraction (0 to 1) of the last window the broker's network thread (its asyncio event loop, where "
        "gRPC requests are read and answered) was idle: 1 minus its CPU time over the window",
        "kafka.network:type=SocketServer,name=NetworkProcessorAvgIdlePercent",
    ),
    _m(
        "kafka_server_kafkarequesthandlerpool_requesthandleravgidle_percent",
        GAUGE,
        (),
        BROKER,
        "Fraction (0 to 1) of the last window the I/O pool's threads (num.io.threads: appends, reads, "
        "flushes) were idle, from the time they spent running work",
        "kafka.server:type=KafkaRequestHandlerPool,name=RequestHandlerAvgIdlePercent",
    ),
    _m(
        "kafka_server_kafkaserver_linux_disk_read_bytes",
        GAUGE,
        (),
        BROKER,
        "Bytes this broker process read from storage (/proc/self/io read_bytes), as Kafka's LinuxIoMetricsCollector",
        "kafka.server:type=KafkaServer,name=linux-disk-read-bytes",
    ),
    _m(
        "kafka_server_kafkaserver_linux_disk_write_bytes",
        GAUGE,
        (),
        BROKER,
        "Bytes this broker process wrote to storage (/proc/self/io write_bytes)",
        "kafka.server:type=KafkaServer,name=linux-disk-write-bytes",
    ),
    _m(
        "kafka_server_socket_server_metrics_connection_count",
        GAUGE,
        ("listener",),
        BROKER,
        "Open client connections to the broker, by listener (GRPC: the gRPC port; established TCP "
        "connections to it, from /proc/net/tcp)",
        "kafka.server:type=socket-server-metrics,listener=*,networkProcessor=* connection-count",
    ),
    _m(
        "kafka_log_log_size",
        GAUGE,
        TP,
        BROKER,
        "Bytes of the partition replica's log on this broker (per partition up to "
        'metrics.partition.series.max replicas, then summed per topic with partition="all")',
        "kafka.log:type=Log,name=Size,topic=*,partition=*",
    ),
    _m(
        "kafka_network_requestmetrics_requests_total",
        COUNTER,
        ("request", "error"),
        BROKER,
        "Requests answered, by type (Produce, Fetch, FetchFollower, ...) and error (NONE when none)",
        "kafka.network:type=RequestMetrics,name=RequestsPerSec,request=*,error=*",
    ),
    _m(
        "kafka_network_requestmetrics_totaltimems",
        HISTOGRAM,
        ("request",),
        BROKER,
        "Time from a request's arrival to its answer, in milliseconds, by type (a histogram, where the "
        "JMX exporter gives quantile gauges)",
        "kafka.network:type=RequestMetrics,name=TotalTimeMs,request=*",
    ),
    _m(
        "kafka_network_requestmetrics_requestqueuetimems",
        HISTOGRAM,
        ("request",),
        BROKER,
        "Time a request waited for a free I/O thread before its disk work began, in milliseconds",
        "kafka.network:type=RequestMetrics,name=RequestQueueTimeMs,request=*",
    ),
    _m(
        "kafka_network_requestmetrics_localtimems",
        HISTOGRAM,
        ("request",),
        BROKER,
        "Time the leader spent on a request itself (for Produce: the append to its log), in milliseconds",
        "kafka.network:type=RequestMetrics,name=LocalTimeMs,request=*",
    ),
    _m(
        "kafka_network_requestmetrics_remotetimems",
        HISTOGRAM,
        ("request",),
        BROKER,
        "Time a request waited on other brokers (for Produce with acks=all: the followers' fetches moving "
        "the high watermark past it), in milliseconds",
        "kafka.network:type=RequestMetrics,name=RemoteTimeMs,request=*",
    ),
    # ---- ours, no Kafka equivalent --------------------------------------------------------------
    _m(
        "tidelog_broker_log_dir_free_bytes",
        GAUGE,
        (),
        BROKER,
        "Bytes free for the broker on its log directory's filesystem (statvfs, as df shows)",
    ),
    _m(
        "tidelog_broker_ready",
        GAUGE,
        (),
        BROKER,
        "1 while no partition this broker hosts is under-replicated among registered brokers and the leaderships "
        "it prefers are handed back (its readiness)",
    ),
    _m("tidelog_broker_log_dir_capacity_bytes", GAUGE, (), BROKER, "Size of the broker's log directory's filesystem"),
    _m(
        "tidelog_broker_quota_throttle_ms",
        HISTOGRAM,
        ("quota",),
        BROKER,
        "Throttles asked of clients over their quota (producer_byte_rate, consumer_byte_rate, request_percentage)",
        "kafka.server:type=Produce/Fetch/Request throttle-time",
    ),
    _m(
        "tidelog_replica_fetch_append_ms",
        HISTOGRAM,
        (),
        BROKER,
        "Time a follower took to append what a fetch brought (the follower's share of an acks=all produce's "
        "remote time), in milliseconds",
    ),
    _m("tidelog_controller_admin_requests_total", COUNTER, ("method", "outcome"), CONTROLLER, "Admin requests handled"),
    _m(
        "tidelog_etcd_sessions",
        GAUGE,
        (),
        ETCD_CLIENT,
        "etcd sessions (leases kept alive) this process holds: its registration, election or claims",
    ),
    _m(
        "tidelog_etcd_session_losses_total",
        COUNTER,
        (),
        ETCD_CLIENT,
        "Sessions lost: no keep-alive acknowledged for a whole TTL, or etcd said the lease is gone; what "
        "was held through them (leadership, registration, claims) was given up",
    ),
    _m(
        "tidelog_etcd_keepalive_failures_total",
        COUNTER,
        (),
        ETCD_CLIENT,
        "Lease keep-alives that failed or timed out and were retried (etcd slow or unreachable)",
    ),
    _m(
        "tidelog_python_gc_pause_seconds",
        HISTOGRAM,
        ("generation",),
        SERVICE,
        "Time each garbage collection paused the process, by generation (the JVM panels' GC time stands "
        "for this: docs/monitoring.md)",
        "jvm_gc_collection_seconds (JVM)",
    ),
    _m(
        "tidelog_process_threads",
        GAUGE,
        (),
        SERVICE,
        "OS threads of the process, gRPC's and the I/O pools' included (/proc/self/status)",
        "jvm_threads_current (JVM)",
    ),
    _m(
        "tidelog_event_loop_lag_seconds",
        HISTOGRAM,
        (),
        SERVICE,
        "How late the asyncio event loop woke a timer, sampled every 0.5 s: a blocked loop delays every "
        "request the process serves",
    ),
    _m(
        "kafka_server_socket_server_metrics_successful_authentication_total",
        COUNTER,
        (),
        SERVICE,
        "Connections (TLS certificate) or logins (SCRAM) authenticated",
        "kafka.server:type=socket-server-metrics successful-authentication-total",
    ),
    _m(
        "kafka_server_socket_server_metrics_failed_authentication_total",
        COUNTER,
        (),
        SERVICE,
        "Calls or logins refused as UNAUTHENTICATED (bad password, unknown user, a certificate no "
        "mapping rule accepts, a missing or expired session); TLS handshakes gRPC refuses itself "
        "(wrong CA, no certificate) never reach the service and are not counted",
        "kafka.server:type=socket-server-metrics failed-authentication-total",
    ),
    _m("tidelog_coordinator_requests_total", COUNTER, ("api", "error"), COORDINATOR, "Group requests by API and error"),
    _m(
        "tidelog_coordinator_request_seconds",
        HISTOGRAM,
        ("api",),
        COORDINATOR,
        "Group request latency (JoinGroup and SyncGroup include the rebalance wait)",
    ),
    _m("tidelog_coordinator_groups", GAUGE, ("state",), COORDINATOR, "Groups this instance serves, by state"),
    _m("tidelog_coordinator_members", GAUGE, (), COORDINATOR, "Members of the groups served here"),
    _m(
        "tidelog_coordinator_offsets_partitions",
        GAUGE,
        (),
        COORDINATOR,
        "__consumer_offsets partitions this instance owns and has loaded",
    ),
    _m(
        "tidelog_coordinator_rebalances_total",
        COUNTER,
        (),
        COORDINATOR,
        "Rebalances completed (a new generation) by the groups served here",
    ),
    _m(
        "tidelog_gateway_requests_total",
        COUNTER,
        ("method", "route", "status"),
        GATEWAY,
        "HTTP requests answered, by route template and status",
    ),
    _m(
        "tidelog_gateway_request_seconds",
        HISTOGRAM,
        ("method", "route"),
        GATEWAY,
        "Time to answer an HTTP request (to the start of a streamed answer), by route",
    ),
    _m("tidelog_gateway_records_produced_total", COUNTER, (), GATEWAY, "Records acknowledged to REST producers"),
    _m("tidelog_gateway_records_consumed_total", COUNTER, (), GATEWAY, "Records returned to REST consumers"),
    _m(
        "tidelog_operator_reconciles_total",
        COUNTER,
        ("kind", "reason"),
        OPERATOR,
        "Reconciles by kind and outcome reason",
    ),
    _m("tidelog_operator_reconcile_seconds", HISTOGRAM, ("kind",), OPERATOR, "Reconcile duration by kind"),
    _m("tidelog_operator_errors_total", COUNTER, ("kind",), OPERATOR, "Reconciles that raised, by kind"),
)

_BY_NAME: Final = {metric.name: metric for metric in METRICS}
assert len(_BY_NAME) == len(METRICS), "a metric is defined once"


def by_name(name: str) -> MetricDef:
    return _BY_NAME[name]


def counter(name: str) -> Counter:
    """The registered prometheus_client Counter for a catalogued counter."""
    metric = _BY_NAME[name]
    assert metric.kind is Kind.COUNTER, name
    return Counter(metric.base_name, metric.help, list(metric.labels))


def gauge(name: str) -> Gauge:
    metric = _BY_NAME[name]
    assert metric.kind is Kind.GAUGE, name
    return Gauge(metric.name, metric.help, list(metric.labels))


def histogram(name: str, buckets: tuple[float, ...]) -> Histogram:
    metric = _BY_NAME[name]
    assert metric.kind is Kind.HISTOGRAM, name
    return Histogram(metric.name, metric.help, list(metric.labels), buckets=buckets)


def gauge_family(name: str) -> GaugeMetricFamily:
    """An empty family for a scrape-time collector (add_metric per series)."""
    metric = _BY_NAME[name]
    assert metric.kind is Kind.GAUGE, name
    return GaugeMetricFamily(metric.name, metric.help, labels=list(metric.labels))


def gauge_value(name: str, value: float) -> GaugeMetricFamily:
    """A family of one unlabelled sample, for a scrape-time collector."""
    family = gauge_family(name)
    family.add_metric([], value)
    return family


def counter_family(name: str) -> CounterMetricFamily:
    metric = _BY_NAME[name]
    assert metric.kind is Kind.COUNTER, name
    return CounterMetricFamily(metric.base_name, metric.help, labels=list(metric.labels))


def _rows() -> Iterator[str]:
    for metric in METRICS:
        labels = ", ".join(f"`{label}`" for label in metric.labels) or "—"
        kafka = metric.kafka.replace("|", "\\|") or "—"
        yield (
            f"| `{metric.name}` | {metric.kind.value} | {labels} | {metric.exporter.value} | {kafka} | {metric.help} |"
        )


def render_markdown() -> str:
    lines = [
        "# Metrics",
        "",
        "Generated from `src/tidelog/server_common/metrics_catalog.py` "
        "(`python -m tidelog.server_common.metrics_catalog > docs/metrics.md`); a test keeps it current.",
        "",
        "Names follow kafka_exporter (cluster, topics, groups) and the Prometheus JMX exporter's "
        "names for Kafka's MBeans under Strimzi's rules (broker and controller internals), so Kafka "
        "dashboards and alerts work unchanged. Each figure comes from one process only (the column "
        "*exported by*): summing a scrape of every pod never double-counts. Histograms are exposed "
        "as `_bucket`, `_sum` and `_count` series, without prometheus_client's `_created` series; every "
        "process also exports prometheus_client's `process_*` and `python_*` series. A test scrapes a "
        "loaded cluster with a real Prometheus: every metric here is exported, and nothing else is.",
        "",
        "| metric | type | labels | exported by | Kafka | meaning |",
        "|---|---|---|---|---|---|",
        *_rows(),
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(render_markdown(), end="")
