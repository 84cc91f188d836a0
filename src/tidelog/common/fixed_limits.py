"""Limits built into the code rather than offered as settings: bounds on sizes, counts and tables.

Each stays a constant in the module that enforces it (where a reader of that code looks for it);
this list names them so that docs/configuration.md documents them beside the settings, in one
place. A test imports every constant named here and fails when its value differs, so the list
cannot drift from the code. Strings, not imports: the common package depends on nothing of ours.
"""

from __future__ import annotations

import dataclasses
from typing import Final

__all__ = ["FIXED_LIMITS", "FixedLimit"]


@dataclasses.dataclass(frozen=True, slots=True)
class FixedLimit:
    module: str
    attribute: str  # a module's constant, or a class's (Class.NAME)
    value: int | float
    doc: str


FIXED_LIMITS: Final[tuple[FixedLimit, ...]] = (
    # ---- every service -------------------------------------------------------------------------
    FixedLimit(
        "tidelog.common.grpc_options",
        "GRPC_MESSAGE_BYTES_MAX",
        100 * 1024 * 1024,
        "Largest gRPC message sent or received, either way (fetch.max.bytes and max.request.size stay below it).",
    ),
    FixedLimit(
        "tidelog.server_common.security.authentication.interceptor",
        "PRE_AUTHENTICATION_BYTES_MAX",
        64 * 1024 * 1024,
        "What unauthenticated calls' bodies may make a service hold: a call is refused before its body is "
        "read, which waits in HTTP/2 flow control (grpc.http2.lookahead_bytes per stream; 16.5 MiB measured "
        "for three concurrent 80 MiB calls, 623 MiB before).",
    ),
    FixedLimit("tidelog.server_common.metadata", "TOPIC_NAME_LENGTH_MAX", 249, "Longest topic name (Kafka's)."),
    FixedLimit(
        "tidelog.common.record.batch_layout",
        "RECORDS_PER_BATCH_MAX",
        1 << 22,
        "Records one batch may hold; a batch declaring more is corrupt.",
    ),
    FixedLimit(
        "tidelog.common.record.batch_layout",
        "UNCOMPRESSED_BYTES_MAX",
        1 << 28,
        "Bytes a compressed batch may inflate to; more is refused before decompressing.",
    ),
    FixedLimit(
        "tidelog.server_common.security.authentication.sasl_server",
        "EXCHANGES_MAX",
        10_000,
        "SCRAM logins half done at once on a listener; the oldest are dropped beyond.",
    ),
    FixedLimit(
        "tidelog.server_common.security.authentication.sasl_server",
        "SESSIONS_MAX",
        100_000,
        "SCRAM sessions a listener holds; the oldest are dropped beyond (their clients log in again).",
    ),
    FixedLimit(
        "tidelog.server_common.security.authentication.interceptor",
        "SUBJECTS_CACHED_MAX",
        10_000,
        "Certificate subjects whose principal is remembered; the cache is emptied when full.",
    ),
    FixedLimit(
        "tidelog.common.security.authorization.acl",
        "Authorizer.CACHE_MAX",
        100_000,
        "Authorization decisions remembered between ACL changes; the cache is emptied when full.",
    ),
    FixedLimit(
        "tidelog.common.security.authentication.scram",
        "ITERATIONS_MAX",
        16384,
        "Most SCRAM iterations a credential may ask for.",
    ),
    FixedLimit(
        "tidelog.common.security.authentication.scram",
        "MESSAGE_BYTES_MAX",
        4096,
        "Longest SCRAM message; longer is refused unread.",
    ),
    # ---- broker --------------------------------------------------------------------------------
    FixedLimit(
        "tidelog.broker.broker_service",
        "PRODUCE_TIMEOUT_MS_MAX",
        300_000,
        "Longest acks=all wait a produce request may ask for; a longer timeout is cut to it.",
    ),
    FixedLimit(
        "tidelog.broker.quota_manager",
        "SENSORS_MAX",
        100_000,
        "Quota sensors (one per principal and client id) a broker keeps; the idlest go beyond.",
    ),
    FixedLimit(
        "tidelog.broker.isr_manager",
        "ISR_CHANGES_PER_REQUEST",
        1000,
        "ISR changes one AlterPartition request carries; an ISR check with more sends several.",
    ),
    FixedLimit(
        "tidelog.broker.storage_io",
        "LOGS_PER_TASK",
        64,
        "Partition logs one I/O task creates (a LeaderAndIsr bringing many), truncates (a follower back "
        "from a restart) or closes (at stop) in a row.",
    ),
    FixedLimit(
        "tidelog.broker.storage_io",
        "INLINE_BYTES_MAX",
        64 * 1024,
        "Bytes of appends in one request (a produce's, a fetched answer's) the event loop writes itself when "
        "they only touch the page cache, the log's lock free; larger ones go to the I/O threads (ADR 0036).",
    ),
    FixedLimit(
        "tidelog.broker.storage_io",
        "INLINE_PARTITIONS_MAX",
        64,
        "Partitions of one request the event loop appends or reads itself (small appends, reads at or above "
        "the high watermark); more go to the I/O threads (ADR 0036).",
    ),
    FixedLimit(
        "tidelog.broker.epoch_waits",
        "EPOCH_QUERY_WAIT_MAX_S",
        0.5,
        "A follower's epoch query naming only leader epochs this broker has yet to hear of waits this long at "
        "most for the LeaderAndIsr that brings one, then is refused (the follower asks again).",
    ),
    FixedLimit(
        "tidelog.broker.follower_truncation",
        "EPOCH_QUERY_RETRY_FIRST_S",
        0.005,
        "A refused epoch query is asked again this soon, then twice as late each time up to replica.fetch.backoff.ms.",
    ),
    FixedLimit(
        "tidelog.broker.partition_states",
        "WRITTEN_LATELY_S",
        2.0,
        "A LeaderAndIsr applies the partitions written to (records, a moved high watermark) this recently "
        "first, the others after: the partitions producers wait on take their new state first.",
    ),
    FixedLimit(
        "tidelog.broker.replica_fetcher",
        "SESSION_ADDS_MAX",
        1000,
        "Partitions one follower fetch adds to its session (a new session's full fetch lists as many); the rest "
        "go in the next fetches, which do not long-poll meanwhile. Keeps the partitions already fetched, whose "
        "acks=all produces wait on this follower, from waiting behind an answer over thousands.",
    ),
    FixedLimit(
        "tidelog.broker.replica_fetcher",
        "INTERRUPT_AFTER_S",
        0.05,
        "A follower cuts its fetch in flight short to list a partition newly ready only once it has waited this "
        "long at the leader (a long poll over idle partitions); the leader takes the cancelled fetch back "
        "(ADR 0038).",
    ),
    FixedLimit(
        "tidelog.broker.producer_id_manager",
        "CLAIM_ATTEMPTS_MAX",
        20,
        "Compare-and-swap tries to claim a block of producer ids in etcd before InitProducerId fails.",
    ),
    FixedLimit(
        "tidelog.broker.storage.producer_state",
        "PRODUCER_BATCHES_RETAINED",
        5,
        "Batches remembered per producer for duplicate detection (Kafka's); also the client's in-flight bound.",
    ),
    # ---- controller ----------------------------------------------------------------------------
    FixedLimit(
        "tidelog.controller.controller", "TOPICS_PER_REQUEST_MAX", 1000, "Topics one CreateTopics request names."
    ),
    FixedLimit(
        "tidelog.controller.controller",
        "ISR_CHANGES_PER_REQUEST_MAX",
        10_000,
        "ISR changes one AlterPartition request may carry; more is INVALID_REQUEST.",
    ),
    FixedLimit("tidelog.controller.topic_admin", "PARTITIONS_PER_TOPIC_MAX", 10_000, "Partitions one topic may have."),
    FixedLimit(
        "tidelog.controller.metadata_store",
        "STATES_PER_TXN",
        100,
        "Partition states written per etcd transaction (etcd's --max-txn-ops defaults to 128).",
    ),
    FixedLimit(
        "tidelog.controller.metadata_store",
        "TXNS_IN_FLIGHT",
        32,
        "Transactions of one partition-state write sent to etcd at once (etcd commits concurrent ones in one "
        "raft entry; 8 took 0.25-0.4 s per 1,000 ISR changes of a restart at 10,000 partitions, 32 took 0.1-0.3 s).",
    ),
    FixedLimit(
        "tidelog.controller.scrape_pace",
        "SCRAPES_REMEMBERED",
        4,
        "Gaps between scrapes of the kafka_exporter view that pace its refreshes (the shortest of them: two "
        "Prometheus replicas at an offset alternate short and long gaps).",
    ),
    FixedLimit(
        "tidelog.controller.scrape_pace",
        "STOPPED_AFTER_GAPS",
        2,
        "Scrape gaps with no scrape after which the kafka_exporter view stops refreshing (the scraper went away).",
    ),
    FixedLimit(
        "tidelog.controller.process_watch",
        "CONFIRMATIONS",
        3,
        "Refused connections to a process's port that prove it dead: the active controller's to a standby, "
        "a broker's to the active controller (ADR 0016).",
    ),
    FixedLimit(
        "tidelog.controller.process_watch",
        "CONFIRM_S",
        0.15,
        "Seconds those refused connections are spread over.",
    ),
    # ---- coordinator and gateway ---------------------------------------------------------------
    FixedLimit(
        "tidelog.coordinator.group_coordinator",
        "GROUP_ID_BYTES_MAX",
        1024,
        "Longest group id; longer is INVALID_GROUP_ID.",
    ),
    FixedLimit(
        "tidelog.gateway.v3_routes",
        "IN_FLIGHT_MAX",
        1000,
        "Records of one v3 produce stream sent and not yet reported: a fast writer waits beyond.",
    ),
    FixedLimit(
        "tidelog.gateway.scram_basic",
        "VERIFIED_MAX",
        10_000,
        "HTTP Basic credentials whose SCRAM check a gateway remembers; the oldest are forgotten beyond.",
    ),
)
