"""The records of `__consumer_offsets`: protobuf keys and values (proto/tidelog/v1/coordinator.proto).

Keys are serialized deterministically so compaction sees one key per (group, topic, partition)
and one per group; a null value (tombstone) deletes. The fence record — a tombstone for the group
"" — is what a new owner writes first with its new producer epoch (docs/coordinator.md).
"""

from __future__ import annotations

from tidelog.v1 import coordinator_pb2

__all__ = ["FENCE_KEY", "decode_key", "group_key", "offset_key"]


def _serialize(key: coordinator_pb2.OffsetsRecordKey) -> bytes:
    data: bytes = key.SerializeToString(deterministic=True)
    return data


def offset_key(group_id: str, topic: str, partition: int) -> bytes:
    return _serialize(
        coordinator_pb2.OffsetsRecordKey(
            offset=coordinator_pb2.OffsetKey(group_id=group_id, topic=topic, partition=partition)
        )
    )


def group_key(group_id: str) -> bytes:
    return _serialize(coordinator_pb2.OffsetsRecordKey(group=coordinator_pb2.GroupKey(group_id=group_id)))


FENCE_KEY = group_key("")


def decode_key(data: bytes) -> coordinator_pb2.OffsetsRecordKey:
    key = coordinator_pb2.OffsetsRecordKey()
    key.ParseFromString(data)
    return key
