"""The partition log storage engine: segments, sparse indexes, recovery, retention, compaction.

A library with no networking; the broker hosts one `PartitionLog` per partition replica.
"""

from tidelog.broker.storage.log_cleaner import LogCleaner, compact
from tidelog.broker.storage.log_config import LogConfig
from tidelog.broker.storage.log_validator import AppendInfo
from tidelog.broker.storage.partition_log import PartitionLog

__all__ = ["AppendInfo", "LogCleaner", "LogConfig", "PartitionLog", "compact"]
