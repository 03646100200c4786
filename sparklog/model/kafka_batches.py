"""Kafka record batches (magic 2) <-> the topic table's Arrow columns (DESIGN §3, §14).

The wire format is computed natively (``_kafka_batches``, a C extension built when sparklog
is installed): no Python runs per record. This module owns the typed surface, the pyarrow
assembly and the errors.

Reading (a broker's Produce path) is two calls, so a broker can check each request when it
arrives and read the records of a whole commit round at once:

* :func:`read_batches` checks every batch of some bytes — magic 2 (older formats:
  :class:`UnsupportedMagicError`), a length that fits, the CRC32C, a known codec, every
  record's lengths and varints inside its record, header keys UTF-8, and from a producer no
  control batch, record count = last offset delta + 1 and offset deltas 0, 1, 2, ...
  (:class:`CorruptBatchError` otherwise) — decompressing each payload once;
* :func:`decode_records` reads the records of any number of checked batches, in one pass,
  into one table (``timestamp`` µs, ``timestampType``, ``key``, ``value``, ``headers``: the
  topic table's columns, :data:`RECORD_SCHEMA`); batch ``i``'s rows follow batch ``i - 1``'s.
  The columns reach pyarrow through Arrow's C data interface, without a copy.

A CreateTime record's timestamp is the batch's first timestamp plus its delta; a
LogAppendTime batch's records all carry the batch's max timestamp, ``timestampType`` 1 (what
every Kafka consumer reads). A record without headers has null ``headers`` (the wire cannot
tell an empty list from none).

Writing (Fetch of data read from segments): :func:`encode_records` turns rows in offset order
into consecutive batches — offset deltas carry compaction gaps, the base offset and partition
leader epoch go in the header, LogAppendTime rows make LogAppendTime batches (cut where the
append time changes, since such a batch has one time), optionally compressed per batch; the
rows are read in place (Arrow's C data interface). :func:`encode_control_batch` writes a
transaction marker's control batch.

Failures of the extension on input it was handed by sparklog itself (rows out of offset
order, a transaction marker without ``control``) are :class:`~sparklog.errors.PolicyError`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import pyarrow as pa

from sparklog.errors import PolicyError, SparklogError
from sparklog.model import _kafka_batches
from sparklog.model.kafka_compression import CompressionError, deflate, inflate
from sparklog.model.schema import FILE_SCHEMA

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
_ENCODED = FILE_SCHEMA
_ENCODED_WITHOUT_HEADERS = pa.schema([f for f in FILE_SCHEMA if f.name != "headers"])
_T = TypeVar("_T")


class CorruptBatchError(SparklogError):
    """A record batch that fails its CRC, length or record checks (Kafka: CORRUPT_MESSAGE)."""


class UnsupportedMagicError(SparklogError):
    """A batch of message format v0/v1 (Kafka: UNSUPPORTED_FOR_MESSAGE_FORMAT)."""


class _TableOverflow(SparklogError):
    """Batches whose records would overflow one table's int32 offsets: read in groups."""


_ERRORS: dict[str, type[SparklogError]] = {
    "magic": UnsupportedMagicError,
    "corrupt": CorruptBatchError,
    "overflow": _TableOverflow,
}


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
    try:
        parts = [_import(_native(_kafka_batches.decode, [b._checked for b in batches], with_offsets), schema)]
    except _TableOverflow:
        parts = [_import(_native(_kafka_batches.decode, group, with_offsets), schema) for group in _groups(batches)]
    return pa.Table.from_batches(parts, schema=schema)


def encode_records(
    records: pa.Table,
    *,
    leader_epoch: int,
    compression: str = "none",
    max_records_per_batch: int = MAX_RECORDS_PER_BATCH,
    max_batch_bytes: int = MAX_BATCH_BYTES,
    control: Callable[[int], bytes] | None = None,
) -> bytes:
    """``records`` (``offset``, ``timestamp``, ``timestampType``, ``key``, ``value``,
    optionally ``headers``; in offset order) as consecutive record batches. A row of
    ``timestampType`` -1 (a transaction marker) becomes ``control(row)``, the control batch
    the caller writes for it."""
    codec = CODECS[compression]
    compress = deflate if codec else None
    out = []
    first_row = 0
    for batch in _encodable(records).to_batches():
        _schema, rows = batch.__arrow_c_array__()
        start = 0
        while start < batch.num_rows:
            data, stop = _native(
                _kafka_batches.encode,
                rows,
                start,
                leader_epoch,
                max_records_per_batch,
                max_batch_bytes,
                codec,
                compress,
            )
            out.append(data)
            if stop < batch.num_rows:
                if control is None:
                    raise PolicyError(f"row {first_row + stop} is a transaction marker: pass control to encode it")
                out.append(control(first_row + stop))
                stop += 1
            start = stop
        first_row += batch.num_rows
    return b"".join(out)


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
        raise _ERRORS.get(kind, PolicyError)(message) from exc


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


def _import(exported: tuple[object, int], schema: pa.Schema) -> pa.RecordBatch:
    """The decoded columns (Arrow's C data interface: a capsule and its array's address) as
    a record batch, without a copy. pyarrow's import from an address with a schema object
    costs ≈ 5 µs; its public capsule protocol ≈ 17 µs, most of it parsing the schema again."""
    capsule, address = exported
    if _IMPORT_FROM_C is not None:
        return _IMPORT_FROM_C(address, schema)
    return pa.record_batch(_ExportedRecords(capsule, schema))


class _ExportedRecords:
    """The public road for :func:`_import`: the capsule protocol."""

    __slots__ = ("_array", "_schema")

    def __init__(self, array: object, schema: pa.Schema) -> None:
        self._array, self._schema = array, schema

    def __arrow_c_array__(self, requested_schema: object = None) -> tuple[object, object]:
        return self._schema.__arrow_c_schema__(), self._array


_IMPORT_FROM_C: Callable[[int, pa.Schema], pa.RecordBatch] | None = getattr(pa.RecordBatch, "_import_from_c", None)


def _encodable(records: pa.Table) -> pa.Table:
    """``records``' encoded columns, as the extension reads them (cast only when they are not)."""
    schema = records.schema
    if schema.equals(_ENCODED) or schema.equals(_ENCODED_WITHOUT_HEADERS):  # the usual case, ≈ 0.1 µs
        return records
    wanted = _ENCODED if "headers" in schema.names else _ENCODED_WITHOUT_HEADERS
    if schema.names != wanted.names:
        records = records.select(wanted.names)
    if records.schema.types != wanted.types:
        records = records.cast(wanted)
    return records
