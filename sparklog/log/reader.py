"""Reading a topic table: offset ranges and timestamp lookups over committed snapshots.

Readers only ever see committed Delta versions, and every range is clamped by the caller
to ``[log-start, high watermark)`` (``[log-start, last stable offset)`` for read_committed),
so no reader sees uncommitted or unreplicated records (invariant 5). Transactions' control
rows are never returned as data, and read_committed reads drop aborted runs
(:mod:`sparklog.log.txn_log`). Files are chosen by their offset/timestamp stats before any is opened.
Safe in any process: the Spark source calls :func:`read_segment_range` on executors.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable

from sparklog.errors import StorageError
from sparklog.log.plans import SegmentLike
from sparklog.log.table import FileEntry, TopicTable, start_app_id
from sparklog.log.txn_log import aborted_ranges, visible
from sparklog.model.schema import FILE_SCHEMA, read_schema

__all__ = [
    "empty_read_table",
    "files_for_ranges",
    "offset_for_timestamp",
    "read_files",
    "read_ranges",
    "read_segment_range",
]


def files_for_ranges(table: TopicTable, dt: DeltaTable, ranges: Mapping[int, tuple[int, int]]) -> list[FileEntry]:
    """Live files overlapping ``partition -> [start, end)``; stats-pruned, offset order."""
    selected = []
    for entry in table.files(dt, set(ranges)):
        start, end = ranges[entry.partition]
        if entry.last_offset >= start and entry.base_offset < end:
            selected.append(entry)
    return selected


def empty_read_table(include_headers: bool) -> pa.Table:
    return read_schema(include_headers).empty_table()


def read_segment_range(
    path: str,
    partition: int,
    topic: str,
    start: int,
    end: int,
    include_headers: bool,
    aborted: Sequence[tuple[int, int]] = (),
    keep_control: bool = False,
) -> pa.Table:
    """Rows of one segment file with ``start <= offset < end``, in the read schema, without
    control rows (unless ``keep_control``) and without the records of the ``aborted`` runs."""
    columns = [f.name for f in FILE_SCHEMA if include_headers or keep_control or f.name != "headers"]
    try:
        # schema=: files rewritten by delta-rs (DeleteRecords) store binary_view/string_view.
        data = pq.read_table(
            path, columns=columns, schema=FILE_SCHEMA, filters=[("offset", ">=", start), ("offset", "<", end)]
        )
    except (OSError, pa.ArrowInvalid) as exc:
        raise StorageError(
            f"Cannot read segment {path} of topic {topic} partition {partition} (offsets {start}..{end - 1}): {exc}. "
            "If the file was removed by retention, restart the read from the current log-start offset."
        ) from exc
    data = visible(data, {partition: aborted}, keep_control)
    n = data.num_rows
    arrays = {
        "key": data.column("key"),
        "value": data.column("value"),
        "topic": pa.repeat(pa.scalar(topic, pa.string()), n),
        "partition": pa.repeat(pa.scalar(partition, pa.int32()), n),
        "offset": data.column("offset"),
        "timestamp": data.column("timestamp"),
        "timestampType": data.column("timestampType"),
    }
    headers = include_headers or keep_control
    if headers:
        arrays["headers"] = data.column("headers").cast(read_schema(True).field("headers").type)
    return pa.Table.from_pydict(arrays, schema=read_schema(headers))


def read_ranges(
    table: TopicTable,
    dt: DeltaTable,
    ranges: Mapping[int, tuple[int, int]],
    include_headers: bool = True,
    *,
    read_committed: bool = False,
    keep_control: bool = False,
) -> pa.Table:
    """All records in ``partition -> [start, end)`` as one table ordered by partition, offset.

    Never returns records below a partition's explicit log-start (DeleteRecords, retention),
    even when a live file straddles it: the range is clamped first. Control rows are left
    out unless ``keep_control`` (Fetch encodes them as control batches; they carry headers
    then); ``read_committed`` also leaves out aborted records (the caller clamps the range to
    the last stable offset)."""
    ranges = {p: (max(lo, table.app_version(dt, start_app_id(p)) or 0), hi) for p, (lo, hi) in ranges.items()}
    ranges = {p: r for p, r in ranges.items() if r[0] < r[1]}
    aborted = {p: aborted_ranges(dt, p) if read_committed else [] for p in ranges}
    pieces = [
        read_segment_range(
            table.full_path(e.path),
            e.partition,
            table.topic,
            *ranges[e.partition],
            include_headers,
            aborted[e.partition],
            keep_control,
        )
        for e in files_for_ranges(table, dt, ranges)
    ]
    if not pieces:
        return empty_read_table(include_headers or keep_control)
    return pa.concat_tables(pieces)


def read_files(table: TopicTable, entries: Sequence[SegmentLike]) -> pa.Table:
    """Whole files in the file layout (with ``offset``, without ``partition``), in order."""
    pieces = [pq.read_table(table.full_path(e.path), schema=FILE_SCHEMA) for e in entries]
    return pa.concat_tables(pieces) if pieces else FILE_SCHEMA.empty_table()


def offset_for_timestamp(table: TopicTable, dt: DeltaTable, partition: int, timestamp_ms: int) -> int | None:
    """The earliest offset at or above log-start whose timestamp is >= ``timestamp_ms``, or None
    if there is none (Kafka's ListOffsets never answers below log-start: a file straddling it
    still holds the removed records)."""
    target_us = timestamp_ms * 1000
    log_start = table.log_start(dt, partition)
    best: int | None = None
    for entry in table.files(dt, {partition}):
        if entry.max_timestamp_us is not None and entry.max_timestamp_us < target_us:
            continue
        if best is not None and entry.base_offset >= best:
            break  # files are in offset order; nothing later can be earlier
        data = pq.read_table(table.full_path(entry.path), columns=["offset", "timestamp"])
        mask = pc.and_(
            pc.greater_equal(data.column("timestamp").cast(pa.int64()), target_us),
            pc.greater_equal(data.column("offset"), log_start),
        )
        hits = pc.filter(data.column("offset"), mask)
        if len(hits):
            found = pc.min(hits).as_py()
            best = found if best is None else min(best, found)
    return best
