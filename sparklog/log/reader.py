"""Reading a topic table: offset ranges and timestamp lookups over committed snapshots.

Readers only ever see committed Delta versions, and every range is clamped by the caller
to ``[log-start, high watermark)`` (``[log-start, last stable offset)`` for read_committed),
so no reader sees uncommitted or unreplicated records (invariant 5). Transactions' control
rows are never returned as data, and read_committed reads drop aborted runs
(:mod:`sparklog.log.txn_log`). Files are chosen by their offset/timestamp stats before any is opened.
Safe in any process: the Spark source calls :func:`read_segment_range` on executors.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable

from sparklog.errors import StorageError
from sparklog.log.plans import SegmentLike
from sparklog.log.segment import NO_HEADERS
from sparklog.log.storage import TableStorage
from sparklog.log.table import FileEntry, TopicTable, start_app_id
from sparklog.log.txn_log import aborted_ranges, visible
from sparklog.model.schema import FILE_SCHEMA, read_schema
from sparklog.model.sizes import RECORD_OVERHEAD_BYTES

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


_WHOLE_FILE_BYTES = 8 << 20
_NO_HEADERS_KEY = next(iter(NO_HEADERS))
_HEADERS_TYPE = FILE_SCHEMA.field("headers").type


def read_segment_range(
    storage: TableStorage,
    relative: str,
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
        data = _read_offsets(storage, relative, columns, start, end)
    except (OSError, pa.ArrowInvalid) as exc:
        raise StorageError(
            f"Cannot read segment {storage.root}/{relative} of topic {topic} partition {partition} (offsets {start}..{end - 1}): {exc}. "
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


def _read_offsets(storage: TableStorage, relative: str, columns: list[str], start: int, end: int) -> pa.Table:
    """The rows of one file with ``start <= offset < end``: only the row groups whose offset
    stats overlap the range are decoded (a compacted file holds many), then the rows are
    filtered; columns come back in :data:`FILE_SCHEMA`'s types (files rewritten by delta-rs,
    DeleteRecords, store binary_view/string_view)."""
    # A small file is read with one system call and parsed from memory, on this thread:
    # opening it by path (a filesystem resolved, a read per column chunk, a thread pool)
    # costs a 1,000-record segment about a third more. A store's object comes whole.
    path = storage.local_path(relative)
    source: pa.NativeFile
    if path is None:
        small, source = True, pa.BufferReader(storage.read(relative))
    else:
        with open(path, "rb", buffering=0) as raw:
            small = os.fstat(raw.fileno()).st_size <= _WHOLE_FILE_BYTES
            source = pa.BufferReader(raw.read()) if small else pa.OSFile(path)
    with pq.ParquetFile(source) as file:
        metadata = file.metadata
        groups = []
        index = metadata.schema.names.index("offset")  # files delta-rs rewrote may order columns otherwise
        for i in range(metadata.num_row_groups):
            stats = metadata.row_group(i).column(index).statistics
            if stats is None or not stats.has_min_max or (stats.max >= start and stats.min < end):
                groups.append(i)
        no_headers = "headers" in columns and _NO_HEADERS_KEY in (metadata.metadata or {})
        wanted = [c for c in columns if c != "headers"] if no_headers else columns
        data = file.read_row_groups(groups, columns=wanted, use_threads=not small) if groups else None
    schema = pa.schema([FILE_SCHEMA.field(name) for name in columns])
    if data is None:
        return schema.empty_table()
    if no_headers:
        data = data.append_column(FILE_SCHEMA.field("headers"), pa.nulls(data.num_rows, _HEADERS_TYPE))
    if data.schema != schema:
        data = data.cast(schema)
    offsets = data.column("offset")
    bounds = pc.min_max(offsets)
    if data.num_rows == 0 or (bounds["min"].as_py() >= start and bounds["max"].as_py() < end):
        return data
    return data.filter(pc.and_(pc.greater_equal(offsets, start), pc.less(offsets, end)))


def _payload_bytes(rows: pa.Table) -> int:
    """At most the bytes :func:`~sparklog.model.sizes.record_sizes` counts for ``rows``
    (headers left out), so a budget met by it is met by the records."""
    total = RECORD_OVERHEAD_BYTES * rows.num_rows
    for name in ("key", "value"):
        total += pc.sum(pc.binary_length(rows.column(name))).as_py() or 0
    return total


def read_ranges(
    table: TopicTable,
    dt: DeltaTable,
    ranges: Mapping[int, tuple[int, int]],
    include_headers: bool = True,
    *,
    read_committed: bool = False,
    keep_control: bool = False,
    max_bytes: int | None = None,
) -> pa.Table:
    """All records in ``partition -> [start, end)`` as one table ordered by partition, offset;
    with ``max_bytes``, a partition's files are read in offset order only until the records
    read reach that many bytes (as :func:`~sparklog.model.sizes.record_sizes` counts them):
    a Fetch for 1 MB then decodes about 1 MB, not the whole window.

    Never returns records below a partition's explicit log-start (DeleteRecords, retention),
    even when a live file straddles it: the range is clamped first. Control rows are left
    out unless ``keep_control`` (Fetch encodes them as control batches; they carry headers
    then); ``read_committed`` also leaves out aborted records (the caller clamps the range to
    the last stable offset)."""
    ranges = {p: (max(lo, table.app_version(dt, start_app_id(p)) or 0), hi) for p, (lo, hi) in ranges.items()}
    ranges = {p: r for p, r in ranges.items() if r[0] < r[1]}
    aborted = {p: aborted_ranges(dt, p) if read_committed else [] for p in ranges}
    pieces = []
    read_bytes: dict[int, int] = {}
    for e in files_for_ranges(table, dt, ranges):
        if max_bytes is not None and read_bytes.get(e.partition, 0) >= max_bytes:
            continue
        piece = read_segment_range(
            table.storage,
            e.path,
            e.partition,
            table.topic,
            *ranges[e.partition],
            include_headers,
            aborted[e.partition],
            keep_control,
        )
        if max_bytes is not None:
            read_bytes[e.partition] = read_bytes.get(e.partition, 0) + _payload_bytes(piece)
        pieces.append(piece)
    if not pieces:
        return empty_read_table(include_headers or keep_control)
    return pa.concat_tables(pieces)


def read_files(table: TopicTable, entries: Sequence[SegmentLike]) -> pa.Table:
    """Whole files in the file layout (with ``offset``, without ``partition``), in order."""
    pieces = [pq.read_table(table.storage.source(e.path), schema=FILE_SCHEMA) for e in entries]
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
        data = pq.read_table(table.storage.source(entry.path), columns=["offset", "timestamp"])
        mask = pc.and_(
            pc.greater_equal(data.column("timestamp").cast(pa.int64()), target_us),
            pc.greater_equal(data.column("offset"), log_start),
        )
        hits = pc.filter(data.column("offset"), mask)
        if len(hits):
            found = pc.min(hits).as_py()
            best = found if best is None else min(best, found)
    return best
