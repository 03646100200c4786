"""Input batches in the shape of Spark's Kafka sink, turned into the shape of segments.

Accepted columns: ``value`` (required), ``key``, ``partition``, ``headers``, ``timestamp``
(optional), ``topic`` (ignored when it equals the target topic). ``key``/``value`` may be
string or binary. Anything else is a :class:`~sparklog.errors.SchemaMismatchError`
before a byte is written. Partition choice, per row: an explicit ``partition`` wins,
else Kafka's murmur2 of the key, else round-robin. Pure Arrow/numpy: runs in Spark tasks.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparklog import clock
from sparklog.errors import SchemaMismatchError, UnknownPartitionError
from sparklog.model.records import partitions_for_keys
from sparklog.model.schema import FILE_SCHEMA, HEADERS_TYPE
from sparklog.model.sizes import check_record_sizes, record_sizes

__all__ = ["SINK_COLUMNS", "normalise_input", "spread"]

SINK_COLUMNS = ("key", "value", "partition", "headers", "timestamp", "topic")
_TIMESTAMP = FILE_SCHEMA.field("timestamp").type


def _as_binary(column: Any, name: str) -> pa.ChunkedArray:
    array = column if isinstance(column, pa.ChunkedArray) else pa.chunked_array([column])
    if pa.types.is_binary(array.type):
        return array
    if pa.types.is_string(array.type) or pa.types.is_large_string(array.type) or pa.types.is_large_binary(array.type):
        return array.cast(pa.binary())
    if pa.types.is_null(array.type):
        return pa.chunked_array([pa.nulls(len(array), pa.binary())])
    raise SchemaMismatchError(f"Column {name!r} must be string or binary, got {array.type}")


def spread(num_rows: int, num_partitions: int, start: int) -> np.ndarray:
    """Round-robin partitions for keyless rows, starting at ``start`` (evens out counts)."""
    return ((np.arange(num_rows, dtype=np.int64) + start) % num_partitions).astype(np.int32)


def normalise_input(
    records: pa.Table | pa.RecordBatch,
    num_partitions: int,
    topic: str,
    max_record_bytes: int,
    round_robin_start: int | None = None,
) -> tuple[pa.Table, np.ndarray | None]:
    """Validate ``records``; return (segment-shaped table, per-row partitions or None).

    ``None`` partitions means no row has a key or explicit partition and no
    ``round_robin_start`` was given: the caller places the whole batch.
    """
    table = pa.Table.from_batches([records]) if isinstance(records, pa.RecordBatch) else records
    names = table.column_names
    unknown = [n for n in names if n not in SINK_COLUMNS]
    if unknown:
        raise SchemaMismatchError(
            f"Cannot produce to {topic}: unsupported column(s) {unknown}; "
            f"allowed: value (required), key, partition, headers, timestamp, topic"
        )
    if "value" not in names:
        raise SchemaMismatchError(f"Cannot produce to {topic}: required column 'value' is missing (columns: {names})")
    if "topic" in names:
        topics = set(pc.unique(table.column("topic").cast(pa.string())).to_pylist()) - {None, topic}
        if topics:
            raise SchemaMismatchError(
                f"Rows name topic(s) {sorted(topics)} but the target topic is {topic}; per-row topics are not supported"
            )
    n = table.num_rows
    value = _as_binary(table.column("value"), "value")
    key = _as_binary(table.column("key"), "key") if "key" in names else pa.chunked_array([pa.nulls(n, pa.binary())])
    if "headers" in names:
        try:
            headers = table.column("headers").combine_chunks().cast(HEADERS_TYPE)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise SchemaMismatchError(
                f"Column 'headers' must be array<struct<key: string, value: binary>>, got {table.column('headers').type}"
            ) from exc
    else:
        headers = pa.nulls(n, HEADERS_TYPE)
    now_us = clock.now_us()
    if "timestamp" in names:
        column = table.column("timestamp")
        if not pa.types.is_timestamp(column.type):
            raise SchemaMismatchError(f"Column 'timestamp' must be a timestamp, got {column.type}")
        timestamp = pc.fill_null(column.combine_chunks().cast(_TIMESTAMP), pa.scalar(now_us, _TIMESTAMP))
    else:
        timestamp = pa.array(np.full(n, now_us, dtype=np.int64), type=pa.int64()).cast(_TIMESTAMP)
    check_record_sizes(record_sizes(key, value, headers), topic, max_record_bytes)

    partitions: np.ndarray | None = None
    has_keys = key.null_count < n
    explicit = table.column("partition") if "partition" in names else None
    if explicit is not None and not pa.types.is_integer(explicit.type):
        raise SchemaMismatchError(f"Column 'partition' must be an integer, got {explicit.type}")
    if has_keys or explicit is not None or round_robin_start is not None:
        partitions = spread(n, num_partitions, round_robin_start or 0)
        if has_keys:
            keyed = np.asarray(key.is_valid())
            partitions[keyed] = partitions_for_keys(key.filter(pa.array(keyed)).combine_chunks(), num_partitions)
        if explicit is not None:
            given = explicit.combine_chunks()
            mask = np.asarray(given.is_valid())
            values = np.asarray(given.fill_null(0).cast(pa.int64()))
            bad = mask & ((values < 0) | (values >= num_partitions))
            if bad.any():
                raise UnknownPartitionError(
                    f"Row {int(np.argmax(bad))} names partition {int(values[bad][0])} of {topic}, "
                    f"which has partitions 0..{num_partitions - 1}"
                )
            partitions[mask] = values[mask].astype(np.int32)
    segment = pa.Table.from_arrays(
        [timestamp, pa.array(np.zeros(n, dtype=np.int32)), key, value, headers],
        schema=pa.schema([f for f in FILE_SCHEMA if f.name != "offset"]),
    )
    return segment, partitions
