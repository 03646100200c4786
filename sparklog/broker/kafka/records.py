"""Kafka record batches (magic 2) on the wire <-> the topic table's Arrow rows, for the brokers.

The codec is sparklog's own, native (:mod:`sparklog.model.kafka_batches`, DESIGN §14): no
Python runs per record. This module keeps the brokers' names for it and adds what needs the
log's transaction rows:

* :func:`check_batches` checks a Produce request's batches for one partition (magic 2, CRC,
  lengths, codec, records; :class:`CorruptBatchError` → CORRUPT_MESSAGE, older magics
  :class:`UnsupportedMagicError` → UNSUPPORTED_FOR_MESSAGE_FORMAT, control batches from a
  client refused); the leader's appender reads the records of a whole round at once
  (:func:`~sparklog.model.kafka_batches.decode_records`). :func:`decode_batches` does both
  for one request;
* Fetch responses are built by :func:`encode_batches`: whole batches, each holding a run of
  records (offset deltas carry compaction gaps), the base offset and partition leader epoch
  written into the header, the LogAppendTime attribute set where the table says so. A
  transaction's control row (:mod:`sparklog.log.txn_log`) becomes a control batch of its own
  (:func:`control_batch`), as Kafka's log holds it.
"""

from __future__ import annotations

import pyarrow as pa

from sparklog.errors import InvalidTxnStateError
from sparklog.log.txn_log import ControlRecord, control_records
from sparklog.model.kafka_batches import (
    BATCH_OVERHEAD_BYTES,
    CODECS,
    MAX_RECORDS_PER_BATCH,
    CorruptBatchError,
    RecordBatch,
    UnsupportedMagicError,
    decode_records,
    encode_control_batch,
    encode_records,
    read_batches,
)

__all__ = [
    "BATCH_OVERHEAD_BYTES",
    "CODECS",
    "CorruptBatchError",
    "RecordBatch",
    "TransactionalBatchError",
    "UnsupportedMagicError",
    "WireBatch",
    "check_batches",
    "control_batch",
    "decode_batches",
    "encode_batches",
]


class TransactionalBatchError(InvalidTxnStateError):
    """A transactional batch its producer may not write here: the partition is not in an
    ongoing transaction of that producer id and epoch (Kafka: INVALID_TXN_STATE)."""


class WireBatch(RecordBatch):
    """A producer's batch with its records (``timestamp, timestampType, key, value, headers``)."""

    __slots__ = ("records",)

    def __init__(self, batch: RecordBatch, records: pa.Table) -> None:
        super().__init__(batch._checked)
        self.records = records


def check_batches(data: bytes) -> list[RecordBatch]:
    """Every batch of a produce request's ``records`` for one partition, checked."""
    return read_batches(data, from_producer=True)


def decode_batches(data: bytes) -> list[WireBatch]:
    """Every batch of a produce request's ``records`` for one partition, checked and read
    (each batch's records a slice of one table)."""
    batches = check_batches(data)
    records = decode_records(batches)
    decoded, row = [], 0
    for batch in batches:
        decoded.append(WireBatch(batch, records.slice(row, batch.count)))
        row += batch.count
    return decoded


def encode_batches(
    records: pa.Table,
    *,
    leader_epoch: int,
    compression: str = "none",
    max_records_per_batch: int = MAX_RECORDS_PER_BATCH,
) -> bytes:
    """``records`` (``offset``, ``timestamp``, ``timestampType``, ``key``, ``value``,
    ``headers``; offset order) as consecutive record batches, control rows as control batches."""
    markers: dict[int, ControlRecord] = {}

    def control(row: int) -> bytes:
        if not markers:
            markers.update(control_records(records))
        offset = records.column("offset")[row].as_py()
        timestamp_us = records.column("timestamp").cast(pa.int64())[row].as_py()
        return control_batch(markers[offset], offset, timestamp_us // 1000, leader_epoch)

    return encode_records(
        records,
        leader_epoch=leader_epoch,
        compression=compression,
        max_records_per_batch=max_records_per_batch,
        control=control,
    )


def control_batch(marker: ControlRecord, offset: int, timestamp_ms: int, leader_epoch: int) -> bytes:
    """The control batch of one commit/abort marker at ``offset`` (Kafka's
    EndTransactionMarker: transactional and control attributes, the producer's id and
    epoch, one record whose key is the control type and value the coordinator epoch)."""
    return encode_control_batch(
        offset, timestamp_ms, leader_epoch, marker.producer_id, marker.producer_epoch, marker.key, marker.value
    )
