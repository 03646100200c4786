"""Records as producers see them, and Kafka's default partitioner.

The partitioner is a pure policy: ``toPositive(murmur2(key)) % num_partitions`` with
Kafka's murmur2 (seed 0x9747b28c), so a keyed record lands on the partition Kafka would
choose. Keyless records are spread evenly by the caller (round-robin).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "Header",
    "RecordMetadata",
    "murmur2",
    "partition_for_key",
    "partitions_for_keys",
    "records_to_arrow",
    "to_bytes",
    "to_positive",
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


def partitions_for_keys(keys: Sequence[bytes] | Any, num_partitions: int) -> Any:
    """Vectorised ``partition_for_key`` over many non-null keys (numpy int32 array).

    ``keys`` is a sequence of bytes or a pyarrow binary array (no Python objects are
    made then). Same arithmetic as :func:`murmur2`, done per 4-byte block across all keys.
    """
    import numpy as np
    import pyarrow as pa

    array = keys if isinstance(keys, pa.Array) else pa.array(list(keys), type=pa.binary())
    array = array.cast(pa.binary())
    chunk = 65_536  # bounds the padded key matrix's memory for long keys
    parts = [_partitions_of_chunk(array.slice(i, chunk), num_partitions) for i in range(0, len(array), chunk)]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)


def _partitions_of_chunk(array: Any, num_partitions: int) -> Any:
    import numpy as np

    n = len(array)
    _validity, offsets_buf, data_buf = array.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=np.int32, count=n + 1, offset=array.offset * 4).astype(np.int64)
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None and data_buf.size else np.zeros(1, np.uint8)
    starts, lengths = offsets[:-1], offsets[1:] - offsets[:-1]
    padded_width = max(4, (int(lengths.max()) + 3) // 4 * 4)
    cols = np.arange(padded_width)
    inside = cols[None, :] < lengths[:, None]
    index = np.minimum(starts[:, None] + cols[None, :], len(data) - 1)
    buf = np.ascontiguousarray(np.where(inside, data[index], 0).astype(np.uint8))

    m = np.uint64(_M)
    mask = np.uint64(_MASK)
    h = (np.uint64(_SEED) ^ lengths.astype(np.uint64)) & mask
    blocks = lengths // 4
    words = buf.view("<u4").astype(np.uint64)
    for j in range(words.shape[1]):
        active = blocks > j
        if not active.any():
            break
        k = (words[:, j] * m) & mask
        k ^= k >> np.uint64(24)
        k = (k * m) & mask
        h = np.where(active, ((h * m) & mask) ^ k, h)
    tail = lengths & 3
    base = blocks * 4
    rows = np.arange(n)

    def byte_at(offset: int) -> Any:
        return buf[rows, np.minimum(base + offset, padded_width - 1)].astype(np.uint64)

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


def records_to_arrow(
    keys: Sequence[bytes | None],
    values: Sequence[bytes | None],
    timestamps_ms: Sequence[int],
    headers: Sequence[Sequence[tuple[str, bytes | None]] | None] | None = None,
) -> pa.Table:
    """Records (CreateTime) as the Arrow layout segments are written from (no offsets)."""
    import pyarrow as pa

    from sparklog.model.schema import FILE_SCHEMA

    n = len(values)
    return pa.Table.from_pydict(
        {
            "timestamp": pa.array([t * 1000 for t in timestamps_ms], type=FILE_SCHEMA.field("timestamp").type),
            "timestampType": pa.array([0] * n, type=pa.int32()),
            "key": pa.array(list(keys), type=pa.binary()),
            "value": pa.array(list(values), type=pa.binary()),
            "headers": pa.array(
                [None if h is None else [{"key": k, "value": v} for k, v in h] for h in (headers or [None] * n)],
                type=FILE_SCHEMA.field("headers").type,
            ),
        }
    )
