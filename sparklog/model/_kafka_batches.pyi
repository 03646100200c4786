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
# (buffer, array offset) of int64/int32 values; (validity or None, offsets, data, array offset)
_Fixed: TypeAlias = tuple[Any, int]
_Binary: TypeAlias = tuple[Any, Any, Any, int]
# (validity or None, list offsets, array offset, header keys, header values)
_Headers: TypeAlias = tuple[Any, Any, int, _Binary, _Binary]

def check(data: _Bytes, inflate: Callable[[int, bytes, int], Any], client: bool, /) -> list[CheckedBatch]: ...
def decode(batches: Sequence[CheckedBatch], client: bool, /) -> tuple[Any, ...]: ...
def encode(
    rows: int,
    offset: _Fixed,
    timestamp: _Fixed,
    timestamp_type: _Fixed,
    key: _Binary,
    value: _Binary,
    headers: _Headers | None,
    leader_epoch: int,
    max_records: int,
    max_bytes: int,
    codec: int,
    compress: Callable[[int, bytes], Any] | None,
    /,
) -> bytes: ...
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
