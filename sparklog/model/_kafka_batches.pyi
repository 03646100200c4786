"""Types of the native record-batch codec (``_kafka_batches.c``); use it through
:mod:`sparklog.model.kafka_batches`."""

from collections.abc import Callable, Sequence
from typing import Any, TypeAlias

_Bytes: TypeAlias = bytes | bytearray | memoryview
# raw, base offset, partition leader epoch, attributes, last offset delta, first timestamp,
# max timestamp, producer id, producer epoch, base sequence, record count, payload, payload
# start, payload length, then the records' key bytes, value bytes, headers, header key
# bytes and header value bytes.
CheckedBatch: TypeAlias = tuple[
    bytes, int, int, int, int, int, int, int, int, int, int, Any, int, int, int, int, int, int, int
]

def check(data: _Bytes, inflate: Callable[[int, bytes, int], Any], client: bool, /) -> list[CheckedBatch]: ...

# A PyCapsule "arrow_array" (Arrow's C data interface: a struct array of the record columns)
# and the address of its ArrowArray.
def decode(batches: Sequence[CheckedBatch], with_offsets: bool, /) -> tuple[object, int]: ...

# ``rows``: the "arrow_array" capsule of an exported record batch (offset, timestamp,
# timestampType, key, value[, headers]); returns the batches and the row it stopped at.
def encode(
    rows: object,
    start: int,
    leader_epoch: int,
    max_records: int,
    max_bytes: int,
    codec: int,
    compress: Callable[[int, bytes], Any] | None,
    /,
) -> tuple[bytes, int]: ...
def encode_control(
    offset: int,
    timestamp_ms: int,
    leader_epoch: int,
    producer_id: int,
    producer_epoch: int,
    key: bytes,
    value: bytes,
    /,
) -> bytes: ...
def crc32c(data: _Bytes, /) -> int: ...
