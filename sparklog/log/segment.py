"""Segments: the Parquet files of one partition, with the stats that make them prunable.

A segment holds rows of exactly one partition in offset order, offsets contiguous inside
the file. Its Delta stats carry ``numRecords`` and min/max of ``offset`` and ``timestamp``
so readers skip files outside an offset or time range. Writing a segment is pure file I/O
(pyarrow, through the table's :class:`~sparklog.log.storage.TableStorage`), safe in any
process: Spark tasks call it on executors.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sparklog import clock
from sparklog.errors import ConfigError, PolicyError
from sparklog.log.plans import SegmentLike
from sparklog.log.storage import TableStorage, fsync_path
from sparklog.model.schema import FILE_SCHEMA

__all__ = [
    "KAFKA_BATCHES_KEY",
    "KEEP_CODEC",
    "PRODUCER_KEY",
    "SEQUENCE_KEY",
    "SegmentFile",
    "discard_segments",
    "file_compression",
    "parquet_compression",
    "place_copy",
    "resolve_compression",
    "rewrite_compression",
    "shift_segment",
    "split_for_size",
    "write_placeholder",
    "write_segment",
]

log = logging.getLogger(__name__)

ROW_GROUP_RECORDS = 131_072
# In a segment's Parquet key-value metadata: no record of the file has headers, so a reader
# need not decode the column (a quarter of the decoding of small records).
NO_HEADERS = {b"sparklog.headers": b"none"}
_BUFFERED_WRITE_BYTES = 4 << 20  # segments up to this size are encoded in memory, then written at once
# Parquet key-value metadata of a light producer's segment: who wrote it, which batch.
PRODUCER_KEY = "sparklog.producer"
SEQUENCE_KEY = "sparklog.sequence"
# Kafka producers' batches in a file written by a broker's group commit (JSON list of
# [producer id, epoch, first sequence, last sequence, base offset]): the producer state a new
# leader rebuilds its duplicate answers from (the file travels to followers as it is).
KAFKA_BATCHES_KEY = "sparklog.kafka.batches"
# a hard link is impossible here (another filesystem, not supported, too many links): copy
_LINK_REFUSED = frozenset({errno.EXDEV, errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK})
# compression.type (the topic's, or the producer's) -> pyarrow's Parquet codec
_PARQUET_CODECS = {
    "uncompressed": "none",
    "none": "none",
    "gzip": "gzip",
    "snappy": "snappy",
    "lz4": "lz4",
    "zstd": "zstd",
}
# A rewrite of a compression.type=producer topic keeps the codec of the files it rewrites.
KEEP_CODEC = "producer"


def parquet_compression(topic_codec: str, producer_codec: str = "none") -> str:
    """Parquet codec of newly produced records, chosen as Kafka chooses a batch's: the topic's
    ``compression.type``, or for ``producer`` the producer's (``none`` by default: uncompressed)."""
    codec = producer_codec if topic_codec == "producer" else topic_codec
    parquet = _PARQUET_CODECS.get(codec)
    if parquet is None:
        raise ConfigError(
            f"Invalid compression.type {codec!r}: a topic allows uncompressed, gzip, snappy, lz4, zstd or producer; "
            "a producer none, gzip, snappy, lz4 or zstd"
        )
    return parquet


def rewrite_compression(topic_codec: str) -> str:
    """Codec of the files maintenance rewrites (optimize, compaction): the topic's, or
    :data:`KEEP_CODEC` for ``producer`` (Kafka's cleaner keeps the producer's codec too),
    which :func:`resolve_compression` turns into the rewritten files' own codec."""
    return KEEP_CODEC if topic_codec == "producer" else parquet_compression(topic_codec)


def file_compression(storage: TableStorage, relative: str) -> str:
    """The codec a Parquet file's data was written with, as ``pq.write_table`` names it."""
    metadata = pq.ParquetFile(storage.source(relative)).metadata
    if metadata.num_row_groups == 0 or metadata.num_columns == 0:
        return "none"
    codec = str(metadata.row_group(0).column(0).compression).lower()
    return {"uncompressed": "none", "lz4_raw": "lz4"}.get(codec, codec)


def resolve_compression(compression: str, storage: TableStorage, sources: Sequence[str]) -> str:
    """``compression``, unless it is :data:`KEEP_CODEC`: then the codec of the first of the
    rewritten files (relative paths, in offset order) that holds records."""
    if compression != KEEP_CODEC:
        return compression
    for relative in sources:
        if pq.ParquetFile(storage.source(relative)).metadata.num_rows > 0:
            return file_compression(storage, relative)
    return file_compression(storage, sources[0]) if sources else "none"


@dataclass(frozen=True)
class SegmentFile:
    """A written (not yet committed) segment, as the committer needs it."""

    path: str  # relative to the table root
    partition: int
    base_offset: int
    last_offset: int
    size_bytes: int
    min_timestamp_us: int
    max_timestamp_us: int
    modification_time_ms: int
    record_count: int = -1  # set when offsets have gaps (a compacted segment)

    @property
    def num_records(self) -> int:
        return self.record_count if self.record_count >= 0 else self.last_offset - self.base_offset + 1

    def stats_json(self) -> str:
        return json.dumps(
            {
                "numRecords": self.num_records,
                "minValues": {"offset": self.base_offset, "timestamp": _iso_ms(self.min_timestamp_us, ceil=False)},
                "maxValues": {"offset": self.last_offset, "timestamp": _iso_ms(self.max_timestamp_us, ceil=True)},
                "nullCount": {"offset": 0, "timestamp": 0, "timestampType": 0},
            }
        )

    def to_dict(self) -> dict[str, int | str]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, int | str]) -> SegmentFile:
        return cls(**raw)  # type: ignore[arg-type]


def _iso_ms(micros: int, ceil: bool) -> str:
    # Delta stats keep milliseconds: round outward so pruning never drops a matching file.
    millis = -(-micros // 1000) if ceil else micros // 1000
    moment = datetime.fromtimestamp(millis / 1000.0, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{millis % 1000:03d}Z"


def split_for_size(records: pa.Table, segment_bytes: int) -> Iterator[pa.Table]:
    """Slice ``records`` into pieces of about ``segment_bytes`` each (by in-memory size)."""
    total = records.nbytes
    if total <= segment_bytes or records.num_rows <= 1:
        yield records
        return
    rows_per_piece = max(1, int(records.num_rows * segment_bytes / total))
    for start in range(0, records.num_rows, rows_per_piece):
        yield records.slice(start, rows_per_piece)


def write_segment(
    storage: TableStorage,
    partition: int,
    base_offset: int,
    records: pa.Table,
    compression: str = "snappy",
    fsync: bool = False,
    offsets: pa.Array | None = None,
    metadata: dict[str, str] | None = None,
    stage_roots: Sequence[str] = (),
    hard_links: bool = True,
    suffix: str = ".parquet",
) -> SegmentFile:
    """Write ``records`` (FILE_SCHEMA minus ``offset``) with offsets from ``base_offset``.

    ``records`` carries ``timestamp, timestampType, key, value, headers``; the offset
    column is assigned here so it is contiguous by construction. Only compaction passes
    ``offsets`` (ascending, gaps allowed: the records keep the offsets they had).

    ``stage_roots``: other replicas' table roots that get the same bytes under the same
    relative path (:func:`place_copy`; not fsynced, never committed here): a follower's
    fetch finds the file in place instead of copying it (``acks=all`` latency). A staged
    file whose batch never commits is an orphan for vacuum. ``hard_links``: see
    :func:`place_copy`. Staging needs a table on a local disk. ``suffix`` ends the new
    file's name (a follower's slice of a leader file is told by it).
    """
    n = records.num_rows
    if n == 0:
        raise PolicyError("write_segment needs at least one record")
    if offsets is None:
        offsets = pa.array(np.arange(base_offset, base_offset + n, dtype=np.int64))
    else:
        base_offset = offsets[0].as_py()
    schema = FILE_SCHEMA if not metadata else FILE_SCHEMA.with_metadata(metadata)
    table = pa.Table.from_arrays(
        [offsets if f.name == "offset" else records.column(f.name) for f in FILE_SCHEMA], schema=schema
    )
    relative = f"partition={partition}/{base_offset:020d}-{uuid.uuid4().hex}{suffix}"
    size_bytes = _write_parquet(table, storage, relative, compression, fsync)
    full = storage.local_path(relative)
    if full is not None:
        for root in stage_roots:
            try:
                place_copy(full, os.path.join(root, relative), hard_links)
            except OSError as exc:  # the follower's fetch copies it itself
                log.debug("staging %s in %s failed: %s", relative, root, exc)
    bounds = pc.min_max(table.column("timestamp"))  # timestamp[us] scalars: .value is µs
    return SegmentFile(
        path=relative,
        partition=partition,
        base_offset=base_offset,
        last_offset=offsets[-1].as_py() if n else base_offset,
        size_bytes=size_bytes,
        min_timestamp_us=bounds["min"].value,
        max_timestamp_us=bounds["max"].value,
        modification_time_ms=clock.now_ms(),
        record_count=n,
    )


def _write_parquet(table: pa.Table, storage: TableStorage, relative: str, compression: str, durable: bool) -> int:
    """Write ``table`` as ``relative``; its size in bytes."""
    # No dictionary encoding: payloads rarely repeat, and trying costs more than the write.
    # Row groups of 128k records let a small read skip most of a large segment.
    if table.num_rows and table.column("headers").null_count == table.num_rows:
        table = table.replace_schema_metadata({**(table.schema.metadata or {}), **NO_HEADERS})
    options = {
        "compression": compression,
        "use_dictionary": False,
        "write_statistics": ["offset", "timestamp"],
        "row_group_size": ROW_GROUP_RECORDS,
    }
    path = storage.local_path(relative)
    if path is not None and table.nbytes > _BUFFERED_WRITE_BYTES:
        # A large segment on a disk streams to an open file (not a path: pyarrow resolving a
        # path to a filesystem costs a small segment more than writing it).
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with pa.OSFile(path, "wb") as sink:
            pq.write_table(table, sink, **options)
        if durable:
            fsync_path(path)
            fsync_path(os.path.dirname(path))
        return os.path.getsize(path)
    # Otherwise encoded in memory and written whole: one system call on a disk, one
    # single-part PUT on a store.
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, **options)
    data = sink.getvalue()
    storage.write(relative, data, durable)
    return data.size


def place_copy(source: str, target: str, hard_links: bool = True) -> None:
    """Give ``target`` the bytes of ``source`` (an immutable segment), replacing any file there.

    With ``hard_links`` and both on one filesystem: a hard link, i.e. the same blocks under
    another log dir. Replicas on one filesystem share its disk, so a second physical copy
    protects against nothing more while costing a full write per replica (measured: writing
    the copies was most of the CPU of an RF 3 acks=all produce on one machine); deleting
    either name (vacuum, a dropped replica) leaves the other intact, and segment files are
    never modified in place. Across filesystems (or where links are refused) the bytes are
    copied. Either way the new name appears atomically (temporary name, then rename).
    """
    os.makedirs(os.path.dirname(target), exist_ok=True)
    partial = f"{target}.{uuid.uuid4().hex}.tmp"
    try:
        if hard_links:
            try:
                os.link(source, partial)
            except OSError as exc:
                if exc.errno not in _LINK_REFUSED:
                    raise
                shutil.copyfile(source, partial)
        else:
            shutil.copyfile(source, partial)
        os.replace(partial, target)
    except BaseException:
        if os.path.lexists(partial):
            os.unlink(partial)
        raise


def write_placeholder(
    storage: TableStorage,
    partition: int,
    first_offset: int,
    last_offset: int,
    timestamps_us: list[int],
    compression: str,
) -> SegmentFile:
    """A file with no records that holds ``[first_offset, last_offset]`` in its stats.

    Rewrites (compaction, optimize) keep the files of a partition tiling its offsets even
    when no record of a range survives, so log-start never moves by a rewrite and a
    consumer positioned inside the range just moves on, as in Kafka. ``timestamps_us`` are
    the replaced files' stats, so time retention drops the placeholder when it would have
    dropped them."""
    relative = f"partition={partition}/{first_offset:020d}-{uuid.uuid4().hex}.parquet"
    sink = pa.BufferOutputStream()
    pq.write_table(FILE_SCHEMA.empty_table(), sink, compression=compression)
    data = sink.getvalue()
    storage.write(relative, data, durable=False)
    return SegmentFile(
        path=relative,
        partition=partition,
        base_offset=first_offset,
        last_offset=last_offset,
        size_bytes=data.size,
        min_timestamp_us=min(timestamps_us, default=0),
        max_timestamp_us=max(timestamps_us, default=0),
        modification_time_ms=clock.now_ms(),
        record_count=0,
    )


def shift_segment(storage: TableStorage, segment: SegmentFile, shift: int) -> SegmentFile:
    """An uncommitted ``segment`` with every offset moved by ``shift``: rewritten under a new
    name with the same codec, the old file deleted. The commit of a Spark produce moves the
    files of tasks that wrote at provisional offsets into task order with it."""
    data = pq.read_table(storage.source(segment.path), schema=FILE_SCHEMA)
    codec = file_compression(storage, segment.path)
    offsets = pc.add(data.column("offset"), pa.scalar(shift, pa.int64())).combine_chunks()
    moved = write_segment(storage, segment.partition, 0, data.drop_columns(["offset"]), codec, offsets=offsets)
    storage.delete(segment.path)
    return moved


def discard_segments(storage: TableStorage, segments: Sequence[SegmentLike]) -> None:
    """Delete files written for a commit that did not land (conflict, error, duplicate)."""
    for seg in segments:
        storage.delete(seg.path)


@contextmanager
def discarded_unless_committed(storage: TableStorage, segments: list[SegmentFile]) -> Iterator[None]:
    """Delete what ``segments`` holds (filled inside the block) when the block fails: a commit
    that conflicted or raised took none of them, and nothing else refers to them."""
    try:
        yield
    except BaseException:
        discard_segments(storage, segments)
        raise
