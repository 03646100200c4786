"""The record-size rule: what ``max.message.bytes`` and ``max.request.size`` count.

One rule for every produce path (light producer ``send`` and ``send_arrow``, Spark produce,
streaming sinks), as Kafka counts a record of the v2 format: a fixed overhead plus the
bytes of the key, the value, and every header's key (UTF-8) and value. Null key, value or
header value count 0. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparklog.errors import RecordTooLargeError

__all__ = ["RECORD_OVERHEAD_BYTES", "check_record_sizes", "record_size", "record_sizes"]

RECORD_OVERHEAD_BYTES = 21  # approx. what a record costs beyond its key/value/headers (Kafka v2)


def record_size(key: bytes | None, value: bytes | None, headers: Sequence[tuple[str, bytes | None]] | None) -> int:
    """The size of one record under the rule."""
    size = RECORD_OVERHEAD_BYTES + len(key or b"") + len(value or b"")
    for header_key, header_value in headers or ():
        size += len(header_key.encode("utf-8")) + len(header_value or b"")
    return size


def _lengths(array: pa.Array) -> np.ndarray:
    return np.asarray(pc.fill_null(pc.binary_length(array), 0), dtype=np.int64)


def record_sizes(key: pa.Array, value: pa.Array, headers: pa.Array) -> np.ndarray:
    """The size of every record of a batch (``headers``: list<struct<key: string, value: binary>>)."""
    sizes = RECORD_OVERHEAD_BYTES + _lengths(key) + _lengths(value)
    if len(headers) and headers.null_count < len(headers):
        flat = pc.list_flatten(headers)
        if len(flat):
            per_header = _lengths(flat.field("key")) + _lengths(flat.field("value"))
            parents = np.asarray(pc.list_parent_indices(headers), dtype=np.int64)
            sizes = sizes + np.bincount(parents, weights=per_header, minlength=len(sizes)).astype(np.int64)
    return sizes


def check_record_sizes(sizes: np.ndarray, topic: str, limit: int, limit_name: str = "max.message.bytes") -> None:
    """``RecordTooLargeError`` naming the first record above ``limit`` (nothing is written)."""
    if len(sizes) == 0:
        return
    row = int(np.argmax(sizes))
    if sizes[row] > limit:
        raise RecordTooLargeError(
            f"Record {row} of the batch to {topic} is {int(sizes[row])} bytes (key, value and headers), larger than "
            f"{limit_name}={limit}; nothing was written. Raise the limit or split the record."
        )
