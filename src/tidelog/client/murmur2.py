"""Kafka's murmur2 partitioner hash, bit for bit, so keys land where Kafka's clients put them.

Kafka: `partition = toPositive(murmur2(keyBytes)) % numPartitions`, toPositive = `& 0x7fffffff`.
"""

from __future__ import annotations

import functools
from typing import Final

__all__ = ["murmur2", "partition_for_key"]

_SEED: Final = 0x9747B28C
_M: Final = 0x5BD1E995
_MASK: Final = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """32-bit murmur2 as Kafka's Utils.murmur2 computes it (returned as a signed int32)."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    whole = length & ~3
    for index in range(0, whole, 4):
        k = int.from_bytes(data[index : index + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail = length & 3
    if tail == 3:
        h ^= data[whole + 2] << 16
    if tail >= 2:
        h ^= data[whole + 1] << 8
    if tail >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


@functools.lru_cache(maxsize=65536)
def partition_for_key(key: bytes, partitions: int) -> int:
    """Kafka's default partition for a keyed record (cached: hot keys repeat)."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions
