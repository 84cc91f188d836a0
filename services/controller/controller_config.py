"""The controller process's settings (names follow Kafka's broker configs where one exists)."""

from __future__ import annotations

import dataclasses

__all__ = ["ControllerConfig"]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ControllerConfig:
    controller_id: int
    endpoint: str  # host:port of this instance's admin API
    num_partitions: int = 1  # num.partitions: for topics created without a count
    default_replication_factor: int = 1  # default.replication.factor
    delete_topic_enable: bool = True  # delete.topic.enable
    session_ttl_s: int = 6  # controller.session.timeout.ms / 1000: etcd lease TTL
    broker_request_timeout_s: float = 5.0  # controller.socket.timeout.ms / 1000
    auto_leader_rebalance_enable: bool = True  # auto.leader.rebalance.enable
    leader_imbalance_check_interval_s: float = 300.0  # leader.imbalance.check.interval.seconds
    leader_imbalance_per_broker_percentage: int = 10  # leader.imbalance.per.broker.percentage
