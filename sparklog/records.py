"""Records as producers see them, and Kafka's default partitioner.

The partitioner is a pure policy: ``toPositive(murmur2(key)) % num_partitions`` with
Kafka's murmur2 (seed 0x9747b28c), so a keyed record lands on the partition Kafka would
choose. Keyless records are spread evenly by the caller (round-robin).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "murmur2",
    "to_positive",
    "partition_for_key",
    "partitions_for_keys",
    "RecordMetadata",
    "Header",
    "to_bytes",
]

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF

Header = tuple[str, bytes | None]


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2``: 32-bit murmur2 returned as a signed int."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    blocks = length // 4
    for i in range(blocks):
        k = int.from_bytes(data[4 * i : 4 * i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = (h * _M) & _MASK
        h ^= k
    tail = length & 3
    base = blocks * 4
    if tail == 3:
        h ^= data[base + 2] << 16
    if tail >= 2:
        h ^= data[base + 1] << 8
    if tail >= 1:
        h ^= data[base]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(value: int) -> int:
    return value & 0x7FFFFFFF


def partition_for_key(key: bytes, num_partitions: int) -> int:
    return to_positive(murmur2(key)) % num_partitions


def partitions_for_keys(keys: Sequence[bytes], num_partitions: int) -> Any:
    """Vectorised ``partition_for_key`` over many keys (numpy), for Spark tasks.

    Same arithmetic as :func:`murmur2`, done per 4-byte block across all keys at once;
    returns a numpy int32 array.
    """
    import numpy as np

    n = len(keys)
    if n == 0:
        return np.zeros(0, dtype=np.int32)
    lengths = np.fromiter((len(k) for k in keys), dtype=np.int64, count=n)
    width = int(lengths.max()) if n else 0
    padded_width = (width + 3) // 4 * 4 or 4
    buf = np.zeros((n, padded_width), dtype=np.uint8)
    for i, key in enumerate(keys):
        if key:
            buf[i, : len(key)] = np.frombuffer(key, dtype=np.uint8)
    m = np.uint64(_M)
    mask = np.uint64(_MASK)
    h = (np.uint64(_SEED) ^ lengths.astype(np.uint64)) & mask
    blocks = lengths // 4
    words = buf.view("<u4").astype(np.uint64)  # (n, padded_width/4)
    for j in range(words.shape[1]):
        active = blocks > j
        if not active.any():
            break
        k = (words[:, j] * m) & mask
        k ^= k >> np.uint64(24)
        k = (k * m) & mask
        hh = ((h * m) & mask) ^ k
        h = np.where(active, hh, h)
    tail = lengths & 3
    base = blocks * 4
    rows = np.arange(n)

    def byte_at(offset: int) -> Any:
        idx = np.minimum(base + offset, padded_width - 1)
        return buf[rows, idx].astype(np.uint64)

    h = np.where(tail == 3, h ^ (byte_at(2) << np.uint64(16)), h)
    h = np.where(tail >= 2, h ^ (byte_at(1) << np.uint64(8)), h)
    h = np.where(tail >= 1, ((h ^ byte_at(0)) * m) & mask, h)
    h ^= h >> np.uint64(13)
    h = (h * m) & mask
    h ^= h >> np.uint64(15)
    return ((h & np.uint64(0x7FFFFFFF)) % np.uint64(num_partitions)).astype(np.int32)


def to_bytes(value: bytes | bytearray | memoryview | str | None, what: str = "value") -> bytes | None:
    """Accept ``str`` (UTF-8 encoded) or bytes-like; ``None`` stays ``None``."""
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    from sparklog.errors import SchemaMismatchError

    raise SchemaMismatchError(f"Record {what} must be bytes or str, got {type(value).__name__}")


@dataclass(frozen=True)
class RecordMetadata:
    """What a completed send returns (Kafka's ``RecordMetadata``); offset -1 with acks=0."""

    topic: str
    partition: int
    offset: int
    timestamp: int  # milliseconds since the epoch
