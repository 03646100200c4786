"""Kafka transactions in a topic table: control rows, open transactions, aborted runs.

The Delta mapping of docs/transactions.md (DESIGN §3, §14):

* a **control row** is a transaction's commit or abort marker, appended by the partition's
  leader like any record (it takes one offset, so offsets stay contiguous, and followers
  copy it with the files): ``timestampType`` :data:`CONTROL_TIMESTAMP_TYPE` (-1, Kafka's
  NO_TIMESTAMP_TYPE, never a data record's), ``key``/``value`` Kafka's control record key
  (version, type) and value (version, coordinator epoch), the producer id and epoch in two
  headers. Readers never return control rows as data (:func:`visible`); Fetch turns them back
  into control batches;
* an **open transaction** of producer ``pid`` in partition ``p`` is the app transaction
  ``sparklog.txnopen.<p>.<pid>`` = first offset + 1, committed with its first batch and set
  to 0 by its marker's commit; the **last stable offset** is the smallest open first offset,
  else the high watermark (:func:`last_stable_offset`);
* an **aborted run** is ``sparklog.aborted.<p>.<start>`` = end: offsets ``[start, end)`` hold
  only the aborted producer's batches (other producers' batches interleaved in the
  transaction's span split it into several runs), committed with the abort marker.

Every reader reads these from the same snapshot as the records, so what it returns is
consistent with one committed version. Only ``log/`` imports deltalake.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable

from sparklog.log.segment import KAFKA_BATCHES_KEY
from sparklog.log.table import TopicTable
from sparklog.log.transactions import aborted_app_id, open_txn_app_id, transaction_versions
from sparklog.model.schema import CONTROL_TIMESTAMP_TYPE, FILE_SCHEMA

__all__ = [
    "CONTROL_TIMESTAMP_TYPE",
    "ControlRecord",
    "aborted_ranges",
    "control_record_rows",
    "control_records",
    "last_stable_offset",
    "open_transactions",
    "producer_runs",
    "transaction_app_ids",
    "visible",
]

ABORT, COMMIT = 0, 1  # Kafka's ControlRecordType
_PRODUCER_ID_HEADER = "sparklog.control.producer_id"
_PRODUCER_EPOCH_HEADER = "sparklog.control.producer_epoch"
_CONTROL_KEY = struct.Struct(">hh")  # version 0, type
_CONTROL_VALUE = struct.Struct(">hi")  # version 0, coordinator epoch
_RECORD_COLUMNS = ("timestamp", "timestampType", "key", "value", "headers")


class ControlRecord:
    """A commit or abort marker as Fetch encodes it."""

    __slots__ = ("commit", "coordinator_epoch", "producer_epoch", "producer_id")

    def __init__(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int) -> None:
        self.producer_id, self.producer_epoch = producer_id, producer_epoch
        self.commit, self.coordinator_epoch = commit, coordinator_epoch

    @property
    def key(self) -> bytes:
        return _CONTROL_KEY.pack(0, COMMIT if self.commit else ABORT)

    @property
    def value(self) -> bytes:
        return _CONTROL_VALUE.pack(0, self.coordinator_epoch)


def control_record_rows(marker: ControlRecord, timestamp_ms: int) -> pa.Table:
    """The one control row of ``marker`` in the append layout (records without offsets)."""
    schema = pa.schema([FILE_SCHEMA.field(c) for c in _RECORD_COLUMNS])
    headers = [
        {"key": _PRODUCER_ID_HEADER, "value": str(marker.producer_id).encode()},
        {"key": _PRODUCER_EPOCH_HEADER, "value": str(marker.producer_epoch).encode()},
    ]
    return pa.Table.from_pydict(
        {
            "timestamp": [timestamp_ms * 1000],
            "timestampType": [CONTROL_TIMESTAMP_TYPE],
            "key": [marker.key],
            "value": [marker.value],
            "headers": [headers],
        },
        schema=schema,
    )


def control_records(rows: pa.Table) -> dict[int, ControlRecord]:
    """offset -> marker, for the control rows among ``rows`` (which must carry headers)."""
    found: dict[int, ControlRecord] = {}
    if rows.num_rows == 0:
        return found
    mask = pc.equal(rows.column("timestampType"), CONTROL_TIMESTAMP_TYPE)
    if not pc.any(mask).as_py():
        return found
    for row in rows.filter(mask).select(["offset", "key", "value", "headers"]).to_pylist():
        headers = {h["key"]: h["value"] for h in row["headers"] or ()}
        _version, kind = _CONTROL_KEY.unpack(row["key"])
        _version, coordinator_epoch = _CONTROL_VALUE.unpack(row["value"])
        found[int(row["offset"])] = ControlRecord(
            int(headers[_PRODUCER_ID_HEADER]), int(headers[_PRODUCER_EPOCH_HEADER]), kind == COMMIT, coordinator_epoch
        )
    return found


def open_transactions(dt: DeltaTable, partition: int) -> dict[int, int]:
    """producer id -> first offset of its open transaction in ``partition``."""
    prefix = open_txn_app_id(partition, 0).removesuffix("0")
    return {
        int(app_id.removeprefix(prefix)): version - 1
        for app_id, version in transaction_versions(dt, prefix).items()
        if version > 0
    }


def aborted_ranges(dt: DeltaTable, partition: int) -> list[tuple[int, int]]:
    """The aborted runs ``[start, end)`` of ``partition``, in offset order."""
    prefix = aborted_app_id(partition, 0).removesuffix("0")
    return sorted((int(app_id.removeprefix(prefix)), end) for app_id, end in transaction_versions(dt, prefix).items())


def last_stable_offset(dt: DeltaTable, partition: int, high_watermark: int) -> int:
    """The first offset of the oldest open transaction, else the high watermark (never above it)."""
    return min([high_watermark, *open_transactions(dt, partition).values()])


def transaction_app_ids(dt: DeltaTable, partition: int) -> dict[str, int]:
    """Every transaction app id of ``partition`` in ``dt`` (what a follower copies)."""
    found = {}
    for prefix in (open_txn_app_id(partition, 0).removesuffix("0"), aborted_app_id(partition, 0).removesuffix("0")):
        found.update(transaction_versions(dt, prefix))
    return found


def visible(
    rows: pa.Table, aborted: Mapping[int, Sequence[tuple[int, int]]] | None = None, keep_control: bool = False
) -> pa.Table:
    """``rows`` without control rows (unless ``keep_control``) and, when ``aborted``
    (partition -> runs) is given, without the records of those runs (read_committed).
    ``rows`` carry ``offset`` and ``timestampType`` (and ``partition`` when several)."""
    if rows.num_rows == 0:
        return rows
    keep = None
    if not keep_control:
        keep = pc.not_equal(rows.column("timestampType"), CONTROL_TIMESTAMP_TYPE)
    for partition, runs in (aborted or {}).items():
        if not runs:
            continue
        offsets = rows.column("offset")
        inside = None
        for start, end in runs:
            term = pc.and_(pc.greater_equal(offsets, start), pc.less(offsets, end))
            inside = term if inside is None else pc.or_(inside, term)
        assert inside is not None
        if "partition" in rows.column_names:
            inside = pc.and_(inside, pc.equal(rows.column("partition"), partition))
        drop = pc.invert(inside)
        keep = drop if keep is None else pc.and_(keep, drop)
    if keep is None:
        return rows
    if pc.all(keep).as_py():
        return rows
    return rows.filter(keep)


def producer_runs(
    table: TopicTable, dt: DeltaTable, partition: int, producer_id: int, start: int, end: int
) -> list[tuple[int, int]]:
    """The runs ``[first, last + 1)`` of ``producer_id``'s batches in ``[start, end)`` of
    ``partition``, from the segments' :data:`~sparklog.log.segment.KAFKA_BATCHES_KEY`
    metadata (a new leader rebuilding an open transaction it did not see appended)."""
    batches: dict[int, int] = {}
    for entry in table.files(dt, {partition}):
        if entry.last_offset < start or entry.base_offset >= end:
            continue
        metadata = pq.read_metadata(table.storage.source(entry.path)).metadata or {}
        raw = metadata.get(KAFKA_BATCHES_KEY.encode())
        for pid, _epoch, first, last, base in json.loads(raw) if raw else []:
            if int(pid) == producer_id and start <= int(base) < end:
                batches[int(base)] = int(base) + (int(last) - int(first)) % 2**31 + 1
    runs: list[tuple[int, int]] = []
    for base, stop in sorted(batches.items()):
        if runs and runs[-1][1] == base:
            runs[-1] = (runs[-1][0], stop)
        else:
            runs.append((base, stop))
    return runs
