"""Pure maintenance planners: retention, DeleteRecords, compaction, optimize and vacuum.

Kafka's log-cleaning rules adapted to whole-file segments (DESIGN §9). Nothing here does
I/O or imports Delta, Spark or ZooKeeper: the planners take segments duck-typed as
:class:`SegmentLike` (``FileEntry`` and ``SegmentFile`` both fit) and return what to do;
the callers in ``log/`` commit it. :func:`compact_records` is the one record-level function
(pyarrow, vectorised).

Invariants the planners keep (DESIGN §5):

* **1 Offsets** — nothing renumbers a record. Retention and DeleteRecords remove whole
  files only; compaction drops records but keeps the offsets of the survivors (gaps are
  allowed only there); optimize merges consecutive files in offset order.
* **8 Retention** — only what the policy names is removed, always a *prefix* of the
  partition in offset order (oldest first, stopping at the first segment no rule
  removes), and the log-start offset only moves forward (``new_log_start >= log_start``).
  A file that straddles the new log-start stays; readers hide the records below it.
* Compaction never touches the active head (the newest segment) nor any segment newer
  than ``min.compaction.lag.ms``; vacuum never proposes a live file.

Segments of other partitions than the one planned are ignored; overlapping offset ranges
inside one partition are a broken table and raise ``ValueError``. Segments whose timestamp
stats are missing (``None``) are never old enough: not time-retained, not cleanable.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import pyarrow as pa
import pyarrow.compute as pc

from sparklog.errors import DeleteRecordsOffsetError, PolicyError
from sparklog.model.schema import CONTROL_TIMESTAMP_TYPE

__all__ = [
    "CompactionPlan",
    "DeleteRecordsOffsetError",
    "RetentionPlan",
    "SegmentLike",
    "compact_records",
    "compaction_plan",
    "delete_records_plan",
    "optimize_plan",
    "retention_plan",
    "vacuum_candidates",
]

REASON_TIME = "retention.ms"
REASON_SIZE = "retention.bytes"
REASON_DELETE_RECORDS = "delete-records"


class SegmentLike(Protocol):
    """A data file of one partition with its Delta stats (``FileEntry`` has exactly these)."""

    @property
    def path(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def base_offset(self) -> int: ...
    @property
    def last_offset(self) -> int: ...
    @property
    def num_records(self) -> int: ...
    @property
    def size_bytes(self) -> int: ...
    @property
    def min_timestamp_us(self) -> int | None: ...
    @property
    def max_timestamp_us(self) -> int | None: ...


@dataclass(frozen=True)
class RetentionPlan:
    """Whole files to remove from one partition (a prefix) and its new log-start offset."""

    partition: int
    removed: tuple[SegmentLike, ...]
    new_log_start: int
    reason: dict[str, str] = field(default_factory=dict)  # path -> retention.ms | retention.bytes | delete-records


@dataclass(frozen=True)
class CompactionPlan:
    """The cleanable prefix of a partition to rewrite with :func:`compact_records`."""

    partition: int
    rewrite: tuple[SegmentLike, ...]
    first_uncleanable_offset: int
    dirty_ratio: float


# -- helpers ------------------------------------------------------------------------------
def _partition_segments(segments: Sequence[SegmentLike], partition: int) -> list[SegmentLike]:
    """The segments of ``partition`` in offset order; overlapping offset ranges raise."""
    mine = sorted((s for s in segments if s.partition == partition), key=lambda s: (s.base_offset, s.last_offset))
    for prev, nxt in itertools.pairwise(mine):
        if nxt.base_offset <= prev.last_offset:
            raise PolicyError(
                f"Partition {partition}: segments {prev.path} (offsets {prev.base_offset}..{prev.last_offset}) and "
                f"{nxt.path} (offsets {nxt.base_offset}..{nxt.last_offset}) overlap; the table is inconsistent"
            )
    return mine


def _check_bounds(partition: int, log_start: int, log_end: int) -> None:
    if not 0 <= log_start <= log_end:
        raise PolicyError(f"Partition {partition}: log start {log_start} must be within 0..log end {log_end}")


def _older_than(timestamp_us: int | None, now_ms: int, age_ms: int) -> bool:
    """True when ``timestamp_us`` is strictly before ``now_ms - age_ms`` (unknown: never)."""
    return timestamp_us is not None and timestamp_us < (now_ms - age_ms) * 1000


def _plan(
    partition: int,
    removed: list[SegmentLike],
    kept: list[SegmentLike],
    log_start: int,
    log_end: int,
    reason: dict[str, str],
) -> RetentionPlan:
    if not removed:
        return RetentionPlan(partition, (), log_start, {})
    first_kept = kept[0].base_offset if kept else log_end
    return RetentionPlan(partition, tuple(removed), max(log_start, first_kept), reason)


# -- retention (cleanup.policy=delete) ----------------------------------------------------
def retention_plan(
    segments: Sequence[SegmentLike],
    *,
    partition: int,
    log_start: int,
    log_end: int,
    now_ms: int,
    retention_ms: int,
    retention_bytes: int,
) -> RetentionPlan:
    """Kafka's delete policy on one partition: remove the oldest segments that are breached.

    Walking oldest first, a segment is removed when

    * it lies entirely below ``log_start`` (already hidden; reason ``delete-records``), or
    * its newest record is older than ``now - retention.ms`` (``max_timestamp < now -
      retention.ms``, strict, as Kafka's ``now - largestTimestamp > retention.ms``), or
    * the bytes left after removing it are still at least ``retention.bytes``: exactly
      Kafka's ``diff = size - retention.bytes; delete while diff - segment.size >= 0``,
      i.e. ``remaining - segment.size >= retention.bytes`` (so at least
      ``retention.bytes`` are kept, and a removal landing exactly on it happens).

    The walk stops at the first segment no rule removes, so only a prefix goes. Unlike
    Kafka's active segment, the newest file is already committed and may go too; then the
    new log start is ``log_end``. A negative ``retention.ms``/``retention.bytes`` (-1)
    disables that rule. Nothing removed: ``new_log_start == log_start``.
    """
    _check_bounds(partition, log_start, log_end)
    ordered = _partition_segments(segments, partition)
    remaining = sum(s.size_bytes for s in ordered)
    removed: list[SegmentLike] = []
    reason: dict[str, str] = {}
    for seg in ordered:
        if seg.last_offset < log_start:
            why = REASON_DELETE_RECORDS
        elif retention_ms >= 0 and _older_than(seg.max_timestamp_us, now_ms, retention_ms):
            why = REASON_TIME
        elif retention_bytes >= 0 and remaining - seg.size_bytes >= retention_bytes:
            why = REASON_SIZE
        else:
            break
        removed.append(seg)
        reason[seg.path] = why
        remaining -= seg.size_bytes
    return _plan(partition, removed, ordered[len(removed) :], log_start, log_end, reason)


def delete_records_plan(
    segments: Sequence[SegmentLike], *, partition: int, log_start: int, log_end: int, before_offset: int
) -> RetentionPlan:
    """Kafka's DeleteRecords: hide every record below ``before_offset``.

    ``before_offset`` below the current log start is a no-op (Kafka keeps the low
    watermark); beyond ``log_end`` (or negative: translate Kafka's -1 = high watermark to
    ``log_end`` before calling) raises :class:`DeleteRecordsOffsetError` (a ``ValueError``).
    Files whose last offset is below ``before_offset`` are removed; a file straddling it
    stays and readers filter it by the new log start ``max(log_start, before_offset)``.
    """
    _check_bounds(partition, log_start, log_end)
    if before_offset < 0 or before_offset > log_end:
        raise DeleteRecordsOffsetError(
            f"Partition {partition}: cannot delete records before offset {before_offset}; the valid range is "
            f"{log_start}..{log_end} (log start..log end)"
        )
    if before_offset < log_start:
        return RetentionPlan(partition, (), log_start, {})
    ordered = _partition_segments(segments, partition)
    removed = [s for s in ordered if s.last_offset < before_offset]
    reason = {s.path: REASON_DELETE_RECORDS for s in removed}
    return RetentionPlan(partition, tuple(removed), max(log_start, before_offset), reason)


# -- compaction (cleanup.policy=compact) --------------------------------------------------
def _cleanable_prefix(ordered: list[SegmentLike], now_ms: int, min_compaction_lag_ms: int) -> int:
    """How many leading segments are cleanable: stop at the head or a too-recent segment."""
    horizon_us = (now_ms - min_compaction_lag_ms) * 1000
    for index, seg in enumerate(ordered[:-1]):
        if seg.max_timestamp_us is None or seg.max_timestamp_us > horizon_us:
            return index
    return max(0, len(ordered) - 1)


def _dirty_bytes(seg: SegmentLike, cleaned_up_to: int) -> float:
    """Bytes of ``seg`` at or after ``cleaned_up_to``, pro rata by offset span when straddling."""
    if seg.base_offset >= cleaned_up_to:
        return float(seg.size_bytes)
    if seg.last_offset < cleaned_up_to:
        return 0.0
    span = seg.last_offset - seg.base_offset + 1
    return seg.size_bytes * (seg.last_offset - cleaned_up_to + 1) / span


def compaction_plan(
    segments: Sequence[SegmentLike],
    *,
    partition: int,
    log_end: int,
    now_ms: int,
    min_compaction_lag_ms: int,
    min_cleanable_dirty_ratio: float,
    cleaned_up_to: int,
) -> CompactionPlan | None:
    """Kafka's cleaner choice for one partition, or ``None`` when it should not run.

    The cleanable range runs from the oldest segment up to, not including, the first
    segment that is the newest one (the active head, never rewritten) or whose newest
    record is within ``min.compaction.lag.ms`` (``max_timestamp > now - lag``, as Kafka).
    Its ``first_uncleanable_offset`` is that segment's base offset. Records at or after
    ``cleaned_up_to`` (the previous run's ``first_uncleanable_offset``) are dirty;
    ``dirty_ratio = dirty bytes / cleanable bytes`` (a straddling segment counts pro rata
    by offset span). ``None`` when nothing is cleanable, nothing is dirty, or the ratio is
    below ``min.cleanable.dirty.ratio``.
    """
    ordered = _partition_segments(segments, partition)
    count = _cleanable_prefix(ordered, now_ms, min_compaction_lag_ms)
    cleanable = ordered[:count]
    total = sum(s.size_bytes for s in cleanable)
    if not cleanable or total <= 0:
        return None
    dirty = sum(_dirty_bytes(s, cleaned_up_to) for s in cleanable)
    ratio = dirty / total
    if dirty <= 0 or ratio < min_cleanable_dirty_ratio:
        return None
    first_uncleanable = ordered[count].base_offset if count < len(ordered) else log_end
    return CompactionPlan(partition, tuple(cleanable), first_uncleanable, ratio)


def _check_offsets(offsets: pa.ChunkedArray, first_uncleanable_offset: int) -> None:
    if len(offsets) == 0:
        return
    if pc.max(offsets).as_py() >= first_uncleanable_offset:
        raise PolicyError(
            f"compact_records got offset {pc.max(offsets).as_py()} at or after the first uncleanable "
            f"offset {first_uncleanable_offset}; pass only records of the cleanable segments"
        )
    flat = offsets.combine_chunks()
    if len(flat) > 1 and pc.any(pc.less_equal(flat[1:], flat[:-1])).as_py():
        raise PolicyError("compact_records needs records in strictly increasing offset order")


def compact_records(
    records: pa.Table, *, now_ms: int, delete_retention_ms: int, first_uncleanable_offset: int
) -> pa.Table:
    """Keep the newest record of every key; offsets and order unchanged (vectorised).

    ``records`` (FILE_SCHEMA layout, with ``offset``) are the whole cleanable range in
    offset order. For each non-null key only the highest offset survives. A tombstone
    (null value) that is the newest of its key survives while its timestamp is at or after
    ``now - delete.retention.ms``, then it goes too (Kafka keeps it for that long so slow
    consumers see the delete; here the record's timestamp dates it). Records without a
    key are kept as they are: Kafka rejects them on compacted topics, sparklog accepts them
    and never merges them. Transaction marker rows (``timestampType``
    ``CONTROL_TIMESTAMP_TYPE``) are kept and never compete with data keys (their key is
    Kafka's control key, which a data record may happen to carry too). Raises ``ValueError``
    for offsets out of order or at/after ``first_uncleanable_offset``.
    """
    offsets = records.column("offset")
    _check_offsets(offsets, first_uncleanable_offset)
    if records.num_rows == 0:
        return records
    control = pc.equal(records.column("timestampType"), CONTROL_TIMESTAMP_TYPE)
    keys = pc.if_else(control, pa.scalar(None, records.schema.field("key").type), records.column("key"))
    keyed = pa.table({"key": keys, "offset": offsets}).filter(pc.is_valid(keys))
    newest = keyed.group_by("key").aggregate([("offset", "max")]).column("offset_max").combine_chunks()
    is_newest = pc.is_in(offsets, value_set=newest)
    horizon_us = (now_ms - delete_retention_ms) * 1000
    expired = pc.and_(
        pc.is_null(records.column("value")),
        pc.less(records.column("timestamp").cast(pa.int64()), pa.scalar(horizon_us, pa.int64())),
    )
    keep_keyed = pc.and_(is_newest, pc.invert(expired))
    keep = pc.or_(pc.is_null(keys), pc.fill_null(keep_keyed, False))
    return records.filter(keep)


# -- optimize ------------------------------------------------------------------------------
def optimize_plan(
    segments: Sequence[SegmentLike], *, partition: int, segment_bytes: int, min_files: int = 2
) -> list[tuple[SegmentLike, ...]]:
    """Groups of small consecutive segments to merge into one file each, oldest first.

    A segment is small when ``size < segment.bytes / 2``. Greedy from the oldest: a group
    grows with the next segment while the combined size stays ``<= segment.bytes``; a
    large segment ends it. Only groups of at least ``min_files`` are returned. Segments
    next to each other in offset order count as contiguous even across offset gaps, which
    compaction leaves: merging keeps every record's offset, so the gap stays harmless. The
    newest segment may be merged too (it is committed like any other).
    """
    if segment_bytes <= 0 or min_files < 2:
        raise PolicyError(f"optimize needs segment_bytes > 0 and min_files >= 2, got {segment_bytes} and {min_files}")
    groups: list[tuple[SegmentLike, ...]] = []
    current: list[SegmentLike] = []
    size = 0
    for seg in _partition_segments(segments, partition):
        small = seg.size_bytes * 2 < segment_bytes
        if current and (not small or size + seg.size_bytes > segment_bytes):
            if len(current) >= min_files:
                groups.append(tuple(current))
            current, size = [], 0
        if small:
            current.append(seg)
            size += seg.size_bytes
    if len(current) >= min_files:
        groups.append(tuple(current))
    return groups


# -- vacuum --------------------------------------------------------------------------------
def _hidden(path: str) -> bool:
    """Delta's rule: ``_delta_log``, ``_``/``.``-prefixed names are never data files."""
    return any(part.startswith(("_", ".")) for part in path.replace("\\", "/").split("/") if part)


def vacuum_candidates(
    removed: Sequence[tuple[str, int]],
    on_disk: Mapping[str, int],
    live_paths: set[str],
    *,
    now_ms: int,
    file_delete_delay_ms: int,
) -> list[str]:
    """Data files VACUUM may delete now, sorted (all paths relative to the table root).

    ``removed`` holds ``(path, removal time ms)`` of the Delta log's remove actions,
    ``on_disk`` maps each data file found to its mtime in ms. A file on disk that is not
    live is deletable once it was removed more than ``file.delete.delay.ms`` ago (readers
    of older snapshots had that long to finish), or, when no remove action names it (an
    orphan of a writer killed before its commit), once its mtime is older than that
    delay — so the delay must exceed the longest write-to-commit time. Live paths, and
    ``_``/``.``-prefixed names such as ``_delta_log``, are never candidates.
    """
    removed_at: dict[str, int] = {}
    for path, when in removed:
        removed_at[path] = max(when, removed_at.get(path, when))
    candidates = []
    for path, mtime_ms in on_disk.items():
        if path in live_paths or _hidden(path):
            continue
        since = removed_at.get(path, mtime_ms)
        if now_ms - since > file_delete_delay_ms:
            candidates.append(path)
    return sorted(candidates)
