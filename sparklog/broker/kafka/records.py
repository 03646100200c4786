"""Kafka record batches (magic 2) on the wire <-> the topic table's Arrow rows.

The codec is kafka-python's (``kafka.record``: CRC32C, gzip/snappy/lz4/zstd), a well-kept
implementation of Kafka's own format; this module only converts between its records and
sparklog's column layout (DESIGN §3) and checks what a broker must check before appending:

* every batch is magic 2 with a matching CRC and a consistent length
  (:class:`CorruptBatchError` → CORRUPT_MESSAGE otherwise; older magics →
  UNSUPPORTED_FOR_MESSAGE_FORMAT), records are not control records from a client;
* offsets, timestamps and headers come out as the table stores them: timestamps in µs
  (CreateTime from the batch, ms precision), header keys as UTF-8 strings.

Fetch responses are built by :func:`encode_batches`: whole batches, each holding a run of
records (offset deltas carry compaction gaps), the base offset and partition leader epoch
written into the header, and the LogAppendTime attribute set where the table says so.
A transaction's control row (:mod:`sparklog.log.txn_log`) becomes a control batch of its
own (:func:`control_batch`), as Kafka's log holds it.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import crc32c
import pyarrow as pa
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from sparklog.errors import InvalidTxnStateError, SparklogError
from sparklog.log.txn_log import CONTROL_TIMESTAMP_TYPE, ControlRecord, control_records
from sparklog.model.schema import FILE_SCHEMA

__all__ = [
    "BATCH_OVERHEAD_BYTES",
    "CODECS",
    "CorruptBatchError",
    "TransactionalBatchError",
    "UnsupportedMagicError",
    "WireBatch",
    "control_batch",
    "decode_batches",
    "encode_batches",
]

# Kafka's attribute bits (DefaultRecordBatch.java).
CODECS = {"none": 0, "uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
_TIMESTAMP_TYPE_BIT = 0x08
_CONTROL_BIT = 0x20
BATCH_OVERHEAD_BYTES = 61  # a v2 batch header
_CODEC_NAMES = {code: name for name, code in CODECS.items() if name != "uncompressed"}
_LENGTH_OFFSET = 8  # baseOffset int64, then batchLength int32
_MAGIC_OFFSET = 16
_CRC_OFFSET = 17
_ATTRIBUTES_OFFSET = 21
_HEAD = struct.Struct(">qiib")
_TIMESTAMP_TYPE = FILE_SCHEMA.field("timestamp").type
_HEADERS_TYPE = FILE_SCHEMA.field("headers").type


class CorruptBatchError(SparklogError):
    """A record batch that fails its CRC or length checks (Kafka: CORRUPT_MESSAGE)."""


class TransactionalBatchError(InvalidTxnStateError):
    """A transactional batch its producer may not write here: the partition is not in an
    ongoing transaction of that producer id and epoch (Kafka: INVALID_TXN_STATE)."""


class UnsupportedMagicError(SparklogError):
    """A batch of message format v0/v1 (Kafka: UNSUPPORTED_FOR_MESSAGE_FORMAT)."""


@dataclass(frozen=True)
class WireBatch:
    """One record batch a producer sent, decoded."""

    raw: bytes  # the batch as sent
    compression: str  # the producer's codec: none, gzip, snappy, lz4, zstd
    producer_id: int
    producer_epoch: int
    base_sequence: int
    transactional: bool
    records: pa.Table  # timestamp, timestampType, key, value, headers (no offsets)

    @property
    def size_bytes(self) -> int:
        return len(self.raw)

    @property
    def count(self) -> int:
        return self.records.num_rows

    @property
    def idempotent(self) -> bool:
        return self.producer_id >= 0


def _split(data: bytes) -> Iterator[memoryview]:
    view = memoryview(data)
    position = 0
    while position < len(view):
        if len(view) - position < _HEAD.size:
            raise CorruptBatchError(f"{len(view) - position} trailing bytes are shorter than a record batch header")
        _base, length, _epoch, magic = _HEAD.unpack_from(view, position)
        if magic != 2:
            raise UnsupportedMagicError(f"record batch of magic {magic}: only magic 2 (Kafka 0.11+) is accepted")
        end = position + _LENGTH_OFFSET + 4 + length
        if length < BATCH_OVERHEAD_BYTES - 12 or end > len(view):
            raise CorruptBatchError(f"record batch length {length} at byte {position} overruns the {len(view)} sent")
        yield view[position:end]
        position = end


def decode_batches(data: bytes) -> list[WireBatch]:
    """Every batch in a produce request's ``records`` for one partition, checked."""
    batches = []
    for raw in _split(data):
        stored_crc = struct.unpack_from(">I", raw, _CRC_OFFSET)[0]
        if crc32c.crc32c(raw[_ATTRIBUTES_OFFSET:]) != stored_crc:
            raise CorruptBatchError("record batch CRC32C does not match its contents")
        copied = bytes(raw)  # one copy, shared by the codec and the fetch tail
        batch = DefaultRecordBatch(copied)
        if batch.is_control_batch:
            raise CorruptBatchError("clients may not send control batches")
        try:
            records = list(batch)
        except Exception as exc:  # the codec raises bare errors on malformed records/compression
            raise CorruptBatchError(f"unreadable records in a batch: {type(exc).__name__}: {exc}") from exc
        if len(records) != batch.last_offset_delta + 1 and records:
            raise CorruptBatchError(
                f"batch says last offset delta {batch.last_offset_delta} but holds {len(records)} records"
            )
        batches.append(
            WireBatch(
                raw=copied,
                compression=_CODEC_NAMES.get(batch.compression_type, "none"),
                producer_id=batch.producer_id,
                producer_epoch=batch.producer_epoch,
                base_sequence=batch.base_sequence,
                transactional=batch.is_transactional,
                records=_records_table(records),
            )
        )
    return batches


def _records_table(records: list[Any]) -> pa.Table:
    try:
        headers = [
            [{"key": k, "value": v} for k, v in r.headers] if r.headers else None  # keys: str
            for r in records
        ]
        return pa.Table.from_pydict(
            {
                "timestamp": pa.array([r.timestamp * 1000 for r in records], type=_TIMESTAMP_TYPE),
                "timestampType": pa.array([0] * len(records), type=pa.int32()),
                "key": pa.array([r.key for r in records], type=pa.binary()),
                "value": pa.array([r.value for r in records], type=pa.binary()),
                "headers": pa.array(headers, type=_HEADERS_TYPE),
            }
        )
    except (UnicodeDecodeError, pa.ArrowException) as exc:
        raise CorruptBatchError(f"records that cannot be stored: {exc}") from exc


def encode_batches(
    records: pa.Table, *, leader_epoch: int, compression: str = "none", max_records_per_batch: int = 4096
) -> bytes:
    """``records`` (``offset``, ``timestamp``, ``timestampType``, ``key``, ``value``,
    ``headers``; offset order) as consecutive record batches."""
    out = bytearray()
    n = records.num_rows
    if n == 0:
        return b""
    offsets = records.column("offset").to_pylist()
    timestamps = records.column("timestamp").cast(pa.int64()).to_pylist()
    kinds = records.column("timestampType").to_pylist()
    keys = records.column("key").to_pylist()
    values = records.column("value").to_pylist()
    headers = records.column("headers").to_pylist() if "headers" in records.column_names else [None] * n
    codec = CODECS[compression]
    markers = control_records(records) if CONTROL_TIMESTAMP_TYPE in kinds else {}
    start = 0
    while start < n:
        if kinds[start] == CONTROL_TIMESTAMP_TYPE:
            out += control_batch(markers[offsets[start]], offsets[start], timestamps[start] // 1000, leader_epoch)
            start += 1
            continue
        end = min(n, start + max_records_per_batch)
        # One batch has one timestamp type: cut where the table's changes (or a control row).
        for i in range(start + 1, end):
            if kinds[i] != kinds[start]:
                end = i
                break
        base = offsets[start]
        builder = DefaultRecordBatchBuilder(
            magic=2,
            compression_type=codec,
            is_transactional=False,
            producer_id=-1,
            producer_epoch=-1,
            base_sequence=-1,
            batch_size=1 << 62,
        )
        for i in range(start, end):
            builder.append(
                offsets[i] - base,
                timestamp=timestamps[i] // 1000,
                key=keys[i],
                value=values[i],
                headers=[(h["key"], h["value"]) for h in headers[i] or ()],
            )
        batch = builder.build()
        struct.pack_into(">q", batch, 0, base)
        struct.pack_into(">i", batch, 12, leader_epoch)
        if kinds[start] == 1:
            attributes = struct.unpack_from(">h", batch, _ATTRIBUTES_OFFSET)[0] | _TIMESTAMP_TYPE_BIT
            struct.pack_into(">h", batch, _ATTRIBUTES_OFFSET, attributes)
            struct.pack_into(">I", batch, _CRC_OFFSET, crc32c.crc32c(bytes(batch[_ATTRIBUTES_OFFSET:])))
        out += batch
        start = end
    return bytes(out)


def control_batch(marker: ControlRecord, offset: int, timestamp_ms: int, leader_epoch: int) -> bytes:
    """The control batch of one commit/abort marker at ``offset`` (Kafka's
    EndTransactionMarker: transactional and control attributes, the producer's id and
    epoch, one record whose key is the control type and value the coordinator epoch)."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=True,
        producer_id=marker.producer_id,
        producer_epoch=marker.producer_epoch,
        base_sequence=-1,
        batch_size=1 << 62,
    )
    builder.append(0, timestamp=timestamp_ms, key=marker.key, value=marker.value, headers=[])
    batch = builder.build()
    attributes = struct.unpack_from(">h", batch, _ATTRIBUTES_OFFSET)[0] | _CONTROL_BIT
    struct.pack_into(">h", batch, _ATTRIBUTES_OFFSET, attributes)
    struct.pack_into(">q", batch, 0, offset)
    struct.pack_into(">i", batch, 12, leader_epoch)
    struct.pack_into(">I", batch, _CRC_OFFSET, crc32c.crc32c(bytes(batch[_ATTRIBUTES_OFFSET:])))
    return bytes(batch)
