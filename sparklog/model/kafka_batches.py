"""Kafka record batches (magic 2) <-> the topic table's Arrow columns (DESIGN §3, §14).

The wire format is computed natively (``_kafka_batches``, a C extension built when sparklog
is installed): no Python runs per record. This module owns the typed surface, the pyarrow
assembly and the errors.

Reading (a broker's Produce path) is two calls, so a broker can check each request when it
arrives and read the records of a whole commit round at once:

* :func:`read_batches` checks every batch of some bytes — magic 2 (older formats:
  :class:`UnsupportedMagicError`), a length that fits, the CRC32C, a known codec, no control
  batch from a producer, record count = last offset delta + 1, and every record's lengths
  and varints inside its record, header keys UTF-8, a producer's offset deltas 0, 1, 2, ...
  (:class:`CorruptBatchError` otherwise) — decompressing each payload once;
* :func:`decode_records` reads the records of any number of checked batches, in one pass,
  into one table (``timestamp`` µs, ``timestampType``, ``key``, ``value``, ``headers``: the
  topic table's columns, :data:`RECORD_SCHEMA`); batch ``i``'s rows follow batch ``i - 1``'s.

A CreateTime record's timestamp is the batch's first timestamp plus its delta; a
LogAppendTime batch's records all carry the batch's max timestamp, ``timestampType`` 1 (what
every Kafka consumer reads). A record without headers has null ``headers`` (the wire cannot
tell an empty list from none).

Writing (Fetch of data read from segments): :func:`encode_records` turns rows in offset order
into consecutive batches — offset deltas carry compaction gaps, the base offset and partition
leader epoch go in the header, LogAppendTime rows make LogAppendTime batches (cut where the
append time changes, since such a batch has one time), optionally compressed per batch;
:func:`encode_control_batch` writes a transaction marker's control batch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import pyarrow as pa

from sparklog.errors import SparklogError
from sparklog.model import _kafka_batches
from sparklog.model.kafka_compression import CompressionError, deflate, inflate
from sparklog.model.schema import FILE_SCHEMA, HEADERS_TYPE, TIMESTAMP_TYPE

if TYPE_CHECKING:
    from sparklog.model._kafka_batches import CheckedBatch

__all__ = [
    "BATCH_OVERHEAD_BYTES",
    "CODECS",
    "RECORD_SCHEMA",
    "CorruptBatchError",
    "RecordBatch",
    "UnsupportedMagicError",
    "crc32c",
    "decode_records",
    "encode_control_batch",
    "encode_records",
    "read_batches",
]

# Kafka's attribute bits (DefaultRecordBatch.java).
CODECS = {"none": 0, "uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
CODEC_NAMES = {code: name for name, code in CODECS.items() if name != "uncompressed"}
_TIMESTAMP_TYPE_BIT = 0x08
_TRANSACTIONAL_BIT = 0x10
_CONTROL_BIT = 0x20
BATCH_OVERHEAD_BYTES = 61  # a v2 batch header
MAX_RECORDS_PER_BATCH = 4096
MAX_BATCH_BYTES = 1 << 20  # records of one written batch (a larger single record still gets one)
_INT32_MAX = 2**31 - 1
RECORD_SCHEMA = pa.schema([FILE_SCHEMA.field(c) for c in ("timestamp", "timestampType", "key", "value", "headers")])
_HEADER_FIELDS = list(HEADERS_TYPE.value_type)
_T = TypeVar("_T")


class CorruptBatchError(SparklogError):
    """A record batch that fails its CRC, length or record checks (Kafka: CORRUPT_MESSAGE)."""


class UnsupportedMagicError(SparklogError):
    """A batch of message format v0/v1 (Kafka: UNSUPPORTED_FOR_MESSAGE_FORMAT)."""


class RecordBatch:
    """One checked record batch: its header and where its records are (they are read by
    :func:`decode_records`, with other batches)."""

    __slots__ = ("_checked",)

    def __init__(self, checked: CheckedBatch) -> None:
        self._checked = checked

    @property
    def raw(self) -> bytes:
        """The batch as sent (compressed payload included)."""
        return self._checked[0]

    @property
    def base_offset(self) -> int:
        return self._checked[1]

    @property
    def partition_leader_epoch(self) -> int:
        return self._checked[2]

    @property
    def compression(self) -> str:
        """none, gzip, snappy, lz4 or zstd."""
        return CODEC_NAMES[self._checked[3] & 0x07]

    @property
    def timestamp_type(self) -> int:
        """0 CreateTime, 1 LogAppendTime."""
        return 1 if self._checked[3] & _TIMESTAMP_TYPE_BIT else 0

    @property
    def transactional(self) -> bool:
        return bool(self._checked[3] & _TRANSACTIONAL_BIT)

    @property
    def control(self) -> bool:
        return bool(self._checked[3] & _CONTROL_BIT)

    @property
    def last_offset_delta(self) -> int:
        return self._checked[4]

    @property
    def first_timestamp_ms(self) -> int:
        return self._checked[5]

    @property
    def max_timestamp_ms(self) -> int:
        return self._checked[6]

    @property
    def producer_id(self) -> int:
        return self._checked[7]

    @property
    def producer_epoch(self) -> int:
        return self._checked[8]

    @property
    def base_sequence(self) -> int:
        return self._checked[9]

    @property
    def count(self) -> int:
        return self._checked[10]

    @property
    def size_bytes(self) -> int:
        return len(self._checked[0])

    @property
    def idempotent(self) -> bool:
        return self.producer_id >= 0

    def __repr__(self) -> str:
        return (
            f"RecordBatch(base_offset={self.base_offset}, count={self.count}, compression={self.compression}, "
            f"producer_id={self.producer_id}, size_bytes={self.size_bytes})"
        )


def read_batches(data: bytes | bytearray | memoryview, *, from_producer: bool = True) -> list[RecordBatch]:
    """Every batch of ``data``, checked (see the module doc). ``from_producer``: the
    producer's rules apply (no control batch, offset deltas 0, 1, 2, ...); without it,
    offset deltas only rise (compacted batches of a Fetch response)."""
    return [RecordBatch(c) for c in _native(_kafka_batches.check, data, inflate, from_producer)]


def decode_records(batches: Sequence[RecordBatch], *, with_offsets: bool = False) -> pa.Table:
    """The records of ``batches`` in order, as one table (:data:`RECORD_SCHEMA`; with
    ``offset`` first, the batch's base offset plus the record's delta, when asked)."""
    schema = FILE_SCHEMA if with_offsets else RECORD_SCHEMA
    tables = [_table(_native(_kafka_batches.decode, group, False), with_offsets) for group in _groups(batches)]
    if not tables:
        return schema.empty_table()
    return tables[0] if len(tables) == 1 else pa.concat_tables(tables)


def encode_records(
    records: pa.Table,
    *,
    leader_epoch: int,
    compression: str = "none",
    max_records_per_batch: int = MAX_RECORDS_PER_BATCH,
    max_batch_bytes: int = MAX_BATCH_BYTES,
) -> bytes:
    """``records`` (``offset``, ``timestamp``, ``timestampType`` 0/1, ``key``, ``value``,
    optionally ``headers``; in offset order) as consecutive record batches."""
    n = records.num_rows
    if n == 0:
        return b""
    codec = CODECS[compression]
    headers = (
        _header_column(_chunk(records.column("headers"), HEADERS_TYPE)) if "headers" in records.column_names else None
    )
    return _native(
        _kafka_batches.encode,
        n,
        _fixed_column(_chunk(records.column("offset"), pa.int64())),
        _fixed_column(_chunk(records.column("timestamp"), TIMESTAMP_TYPE)),
        _fixed_column(_chunk(records.column("timestampType"), pa.int32())),
        _binary_column(_chunk(records.column("key"), pa.binary())),
        _binary_column(_chunk(records.column("value"), pa.binary())),
        headers,
        leader_epoch,
        max_records_per_batch,
        max_batch_bytes,
        codec,
        deflate if codec else None,
    )


def encode_control_batch(
    offset: int, timestamp_ms: int, leader_epoch: int, producer_id: int, producer_epoch: int, key: bytes, value: bytes
) -> bytes:
    """The control batch of one transaction marker at ``offset`` (Kafka's EndTransactionMarker:
    transactional and control attributes, one record of the control ``key`` and ``value``)."""
    return _native(
        _kafka_batches.encode_control, offset, timestamp_ms, leader_epoch, producer_id, producer_epoch, key, value
    )


def crc32c(data: bytes | bytearray | memoryview) -> int:
    """Castagnoli CRC of ``data``, as a v2 batch's checksum."""
    return _kafka_batches.crc32c(data)


def _native(function: Callable[..., _T], *args: Any) -> _T:
    """``function(*args)`` of the extension, its failures as sparklog errors."""
    try:
        return function(*args)
    except CompressionError as exc:
        raise CorruptBatchError(str(exc)) from exc
    except ValueError as exc:
        kind, message = exc.args if len(exc.args) == 2 else ("invalid", str(exc))
        if kind == "magic":
            raise UnsupportedMagicError(message) from exc
        if kind == "corrupt":
            raise CorruptBatchError(message) from exc
        raise


def _groups(batches: Sequence[RecordBatch]) -> list[list[CheckedBatch]]:
    """``batches`` cut where a table's int32 offsets would overflow (one group, in practice)."""
    groups: list[list[CheckedBatch]] = []
    sums = [_INT32_MAX + 1] * 6
    for batch in batches:
        checked = batch._checked
        sizes = (checked[10], *checked[14:19])  # records, key, value, header count, header key, header value
        if any(total + size > _INT32_MAX for total, size in zip(sums, sizes, strict=True)):
            groups.append([])
            sums = [0] * 6
        groups[-1].append(checked)
        sums = [total + size for total, size in zip(sums, sizes, strict=True)]
    return groups


def _table(decoded: tuple[Any, ...], with_offsets: bool) -> pa.Table:
    rows, header_rows, key_nulls, value_nulls, headers_nulls, header_value_nulls = decoded[:6]
    (
        timestamp,
        timestamp_type,
        offset,
        key_valid,
        key_offsets,
        key_data,
        value_valid,
        value_offsets,
        value_data,
        headers_valid,
        headers_offsets,
        header_key_offsets,
        header_key_data,
        header_value_valid,
        header_value_offsets,
        header_value_data,
    ) = (pa.py_buffer(b) for b in decoded[6:])
    header_keys = pa.Array.from_buffers(pa.string(), header_rows, [None, header_key_offsets, header_key_data])
    header_values = _binary_array(
        header_rows, header_value_valid, header_value_offsets, header_value_data, header_value_nulls
    )
    pairs = pa.StructArray.from_arrays([header_keys, header_values], fields=_HEADER_FIELDS)
    columns = [
        pa.Array.from_buffers(TIMESTAMP_TYPE, rows, [None, timestamp]),
        pa.Array.from_buffers(pa.int32(), rows, [None, timestamp_type]),
        _binary_array(rows, key_valid, key_offsets, key_data, key_nulls),
        _binary_array(rows, value_valid, value_offsets, value_data, value_nulls),
        pa.Array.from_buffers(
            HEADERS_TYPE,
            rows,
            [headers_valid if headers_nulls else None, headers_offsets],
            null_count=headers_nulls,
            children=[pairs],
        ),
    ]
    if with_offsets:
        return pa.Table.from_arrays(
            [pa.Array.from_buffers(pa.int64(), rows, [None, offset]), *columns], schema=FILE_SCHEMA
        )
    return pa.Table.from_arrays(columns, schema=RECORD_SCHEMA)


def _binary_array(n: int, valid: pa.Buffer, offsets: pa.Buffer, data: pa.Buffer, nulls: int) -> pa.Array:
    return pa.Array.from_buffers(pa.binary(), n, [valid if nulls else None, offsets, data], null_count=nulls)


def _chunk(column: pa.ChunkedArray, type_: pa.DataType) -> pa.Array:
    """``column`` as one array of ``type_`` (no copy when it is one chunk of that type already)."""
    array = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    if array.type == pa.string() and type_ == pa.binary():
        return array  # the same buffers
    return array if array.type == type_ else array.cast(type_)


def _fixed_column(array: pa.Array) -> tuple[pa.Buffer, int]:
    return array.buffers()[1], array.offset


def _binary_column(array: pa.Array) -> tuple[pa.Buffer | None, pa.Buffer, pa.Buffer | None, int]:
    valid, offsets, data = array.buffers()[:3]
    return (valid if array.null_count else None), offsets, data, array.offset


def _header_column(
    array: pa.Array,
) -> tuple[pa.Buffer | None, pa.Buffer, int, tuple[Any, ...], tuple[Any, ...]]:
    pairs = array.values
    return (
        array.buffers()[0] if array.null_count else None,
        array.buffers()[1],
        array.offset,
        _binary_column(pairs.field("key")),
        _binary_column(pairs.field("value")),
    )
