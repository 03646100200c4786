"""Optimize: merge the small files of each partition, then checkpoint the Delta log (DESIGN §9).

Per partition, :func:`sparklog.log.plans.optimize_plan` names groups of small consecutive
segments; each group is read whole (:func:`sparklog.log.reader.read_files`), concatenated
in offset order and written as ONE new segment that keeps every record's offset
(``write_segment(..., offsets=...)``, so gaps left by compaction stay). All groups of a
partition are swapped in ONE Delta commit: ``remove`` of the merged files + ``add`` of the
new ones, ``dataChange=false``. The commit touches none of the offset-bearing application
transactions (log-end, log-start, fences and producer sequences are unchanged), only its own
``sparklog.rewrite.<p>`` (see below). Afterwards :func:`checkpoint_log` writes a checkpoint
and deletes expired log files, so opening the table and committing stay cheap.

Invariants:

* **No duplicate, no gap, ever** (invariant 1): a reader's snapshot holds either all the
  merged files or the new one, never both nor neither; the merged files stay on disk for
  readers of older snapshots until VACUUM (:mod:`sparklog.log.vacuum`).
* **Concurrent appends do not fail optimize**: appends only add files, so the commit uses
  ``max_commit_retries`` > 0 and delta-rs rebases it over them.
* **Concurrent removal fails it**: just before committing, the merged files are checked to
  be live on a fresh snapshot; a removal that lands after that snapshot fails the commit:

  - a removal with ``dataChange=true`` (retention, DeleteRecords, compaction): delta-rs
    rejects the rebase ("a concurrent transaction deleted data this operation read"),
    measured with deltalake 1.6.6 even with retries allowed;
  - a removal with ``dataChange=false`` (another optimize) is NOT seen by delta-rs's
    conflict checker (measured: both commits land, every merged record twice). So every
    optimize commit of ``p`` touches the application transaction ``sparklog.rewrite.<p>``
    (:func:`rewrite_app_id`), which appends never touch: two optimize commits of one
    partition never both land, appends still rebase freely.

  The loser deletes its new files and re-plans on a fresh snapshot (at most
  :data:`sparklog.retries.MAINTENANCE_PLAN` times). Any other commit that removes files while rebasing
  (``max_commit_retries`` > 0) must touch ``sparklog.rewrite.<p>`` too; commits without
  retries (retention, DeleteRecords) fail on any concurrent commit anyway.
* Files wholly below the partition's log-start are left to retention (which removes them),
  never merged; a dry run writes and commits nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

import pyarrow as pa
from deltalake.exceptions import DeltaError

from sparklog.errors import StorageError
from sparklog.log.checkpoints import checkpoint_interval
from sparklog.log.plans import SegmentLike, optimize_plan
from sparklog.log.reader import read_files
from sparklog.log.segment import SegmentFile, discard_segments, resolve_compression, write_placeholder, write_segment
from sparklog.log.table import CommitConflict, TopicTable, rewrite_app_id, start_app_id
from sparklog.log.table_properties import set_history_retention
from sparklog.log.txn_log import last_stable_offset
from sparklog.retries import MAINTENANCE_PLAN

__all__ = [
    "MAX_COMMIT_RETRIES",
    "OPERATION",
    "LogCheckpoint",
    "OptimizeResult",
    "checkpoint_log",
    "log_step",
    "optimize_partition",
    "optimize_topic",
    "rewrite_app_id",
]

MAX_COMMIT_RETRIES = 10  # rebases over concurrent appends per commit attempt
OPERATION = "OPTIMIZE"  # the commit's sparklog.operation (shown by `sparklog history`)
_HISTORY_LOOKBACK = 200


@dataclass(frozen=True)
class OptimizeResult:
    """What optimize did (or, dry, would do) to one partition."""

    topic: str
    partition: int
    files_merged: int  # small files removed from the log
    files_written: int  # merged files added
    bytes_merged: int
    bytes_written: int  # 0 in a dry run (nothing written)
    records: int  # records moved into the new files
    live_files_before: int
    live_files_after: int
    version: int | None = None  # the commit's Delta version (None: nothing committed)
    attempts: int = 1
    dry_run: bool = False


@dataclass(frozen=True)
class LogCheckpoint:
    """A checkpoint written by :func:`checkpoint_log`, and the log files it let go."""

    topic: str
    version: int
    log_files_before: int
    log_files_after: int

    @property
    def log_files_removed(self) -> int:
        return max(0, self.log_files_before - self.log_files_after)


def optimize_topic(
    table: TopicTable,
    partitions: Iterable[int],
    segment_bytes: int,
    *,
    dry_run: bool = False,
    compression: str = "snappy",
    checkpoint: bool = True,
    progress: Callable[[OptimizeResult], None] | None = None,
) -> list[OptimizeResult]:
    """Merge the small files of ``partitions`` (one Delta commit per partition).

    ``segment_bytes`` is the topic's target file size; ``compression`` the Parquet codec of
    the new files (:data:`~sparklog.log.segment.KEEP_CODEC`: the codec of the files merged).
    ``progress`` is called with each partition's result as it completes.
    Unless ``dry_run`` or ``checkpoint=False``, a log checkpoint follows
    (:func:`checkpoint_log`). Raises :class:`StorageError` when a partition keeps
    conflicting with concurrent maintenance for :data:`~sparklog.retries.MAINTENANCE_PLAN` re-plans.
    """
    results = []
    for partition in sorted(set(partitions)):
        result = optimize_partition(table, partition, segment_bytes, dry_run=dry_run, compression=compression)
        results.append(result)
        if progress is not None:
            progress(result)
    if checkpoint and not dry_run:
        checkpoint_log(table)
    return results


def optimize_partition(
    table: TopicTable, partition: int, segment_bytes: int, *, dry_run: bool = False, compression: str = "snappy"
) -> OptimizeResult:
    """Plan, merge and commit one partition; re-plan after a conflicting concurrent removal."""
    for attempt in (a + 1 for a in MAINTENANCE_PLAN):
        dt = table.snapshot()
        live = table.files(dt, {partition})
        log_start = table.app_version(dt, start_app_id(partition)) or 0
        # Below log-start is retention's; at or after the last stable offset an open
        # transaction's files keep their batch metadata (an abort after a failover reads it).
        stable = last_stable_offset(dt, partition, table.log_end(dt, partition))
        candidates = [f for f in live if log_start <= f.last_offset < stable]
        try:
            groups = optimize_plan(candidates, partition=partition, segment_bytes=segment_bytes)
        except ValueError as exc:  # overlapping files: a broken table, or segment.bytes <= 0
            raise StorageError(f"Cannot optimize {table.topic}-{partition} at {table.root}: {exc}") from exc
        if not groups or dry_run:
            return _result(table, partition, groups, [], len(live), None, attempt, dry_run)
        written: list[SegmentFile] = []
        run_id = uuid.uuid4().hex
        try:
            for group in groups:
                written.append(_merge(table, partition, list(group), compression))
            committed = _commit_swap(table, partition, [e for g in groups for e in g], written, run_id)
        except _Replan:
            committed = False
        except BaseException:
            discard_segments(table.storage, written)
            raise
        if committed:
            version = _committed_version(table, run_id)
            return _result(table, partition, groups, written, len(live), version, attempt, False)
        discard_segments(table.storage, written)
    raise MAINTENANCE_PLAN.exhausted(
        f"Optimize of {table.topic}-{partition}",
        "other maintenance (retention, DeleteRecords, compaction, another optimize) kept removing the files it "
        "merged. Run it again when that maintenance is done; nothing was changed by the failed attempts.",
    )


class _Replan(Exception):
    """A merged file vanished (removed and vacuumed meanwhile): plan again on a fresh snapshot."""


def _merge(table: TopicTable, partition: int, group: Sequence[SegmentLike], compression: str) -> SegmentFile:
    """One new segment holding every record of ``group`` with its own offset, in order."""
    ordered = sorted(group, key=lambda e: e.base_offset)
    try:
        records = read_files(table, ordered)
        compression = resolve_compression(compression, table.storage, [e.path for e in ordered])
    except (OSError, pa.ArrowInvalid) as exc:
        live = {f.path for f in table.files(table.snapshot(), {partition})}
        if any(entry.path not in live for entry in group):
            raise _Replan() from exc
        raise StorageError(
            f"Optimize of {table.topic}-{partition} cannot read live files {[e.path for e in group]} under "
            f"{table.root}: {exc}. The table references data it cannot read; check the storage."
        ) from exc
    first, last = group[0].base_offset, group[-1].last_offset
    try:
        if records.num_rows == 0:  # only compaction placeholders: one placeholder for all
            stamps = [t for e in group for t in (e.min_timestamp_us, e.max_timestamp_us) if t is not None]
            return write_placeholder(table.storage, partition, first, last, stamps, compression)
        merged = write_segment(
            table.storage,
            partition,
            first,
            records.drop_columns(["offset"]),
            compression,
            offsets=records.column("offset").combine_chunks(),
        )
    except OSError as exc:
        raise StorageError(
            f"Optimize of {table.topic}-{partition} cannot write a merged file under {table.root}: {exc}. "
            "Check free space and permissions; nothing was committed."
        ) from exc
    # The group's offset range, not its first and last record: compaction leaves gaps (and
    # empty placeholders) at the edges, and files must keep tiling the partition.
    return replace(merged, base_offset=first, last_offset=last)


def _commit_swap(
    table: TopicTable, partition: int, merged: Sequence[SegmentLike], written: list[SegmentFile], run_id: str
) -> bool:
    """The atomic swap; False when a merged file is no longer live (the caller re-plans)."""
    dt = table.snapshot()
    live = {f.path for f in table.files(dt, {partition})}
    if any(entry.path not in live for entry in merged):
        return False
    metadata = {
        "sparklog.operation": OPERATION,
        "sparklog.optimize": run_id,
        "sparklog.partition": str(partition),
        "sparklog.merged": str(len(merged)),
        "sparklog.written": str(len(written)),
    }
    rewrites = {rewrite_app_id(partition): (table.app_version(dt, rewrite_app_id(partition)) or 0) + 1}
    try:
        table.commit(
            dt, written, rewrites, metadata, removes=merged, data_change=False, max_commit_retries=MAX_COMMIT_RETRIES
        )
    except CommitConflict:
        return False
    return True


def _committed_version(table: TopicTable, run_id: str) -> int | None:
    """The version of the commit tagged ``run_id`` (it is among the newest: a rebase only
    puts it after the concurrent commits of the last moments)."""
    try:
        entries = table.snapshot().history(_HISTORY_LOOKBACK)
    except (DeltaError, OSError):
        return None  # only a report field: the commit landed either way
    for entry in entries:
        if entry.get("sparklog.optimize") == run_id:
            return int(entry["version"])
    return None


def _result(
    table: TopicTable,
    partition: int,
    groups: Sequence[tuple[SegmentLike, ...]],
    written: list[SegmentFile],
    live_before: int,
    version: int | None,
    attempts: int,
    dry_run: bool,
) -> OptimizeResult:
    merged = [entry for group in groups for entry in group]
    return OptimizeResult(
        topic=table.topic,
        partition=partition,
        files_merged=len(merged),
        files_written=len(groups),
        bytes_merged=sum(e.size_bytes for e in merged),
        bytes_written=sum(s.size_bytes for s in written),
        records=sum(e.num_records for e in merged),
        live_files_before=live_before,
        live_files_after=live_before - len(merged) + len(groups),
        version=version,
        attempts=attempts,
        dry_run=dry_run,
    )


# -- the Delta log ---------------------------------------------------------------------------
def _log_file_count(table: TopicTable) -> int:
    try:
        return len(table.storage.listing("_delta_log/"))
    except (OSError, StorageError):
        return 0


def log_step(table: TopicTable, history_retention_ms: int) -> LogCheckpoint:
    """The Delta log step of maintenance (docs/maintenance.md), as the maintenance job and the
    broker agents run it: make the table's ``delta.logRetentionDuration`` the topic's
    ``history.retention.ms`` (one metadata commit, only when it differs), then
    :func:`checkpoint_log`."""
    interval = checkpoint_interval(table.storage)
    set_history_retention(table.snapshot, history_retention_ms, interval, f"topic {table.topic} at {table.root}")
    return checkpoint_log(table)


def checkpoint_log(table: TopicTable) -> LogCheckpoint:
    """Write a checkpoint of the latest version and delete expired log files.

    A checkpoint lets readers and committers load the table from one Parquet file instead of
    replaying every commit; ``cleanup_metadata`` then deletes commit files (and older
    checkpoints) that are older than ``delta.logRetentionDuration`` (the topic's
    ``history.retention.ms``) and covered by a checkpoint. This is the only place sparklog
    deletes log files (see :func:`sparklog.log.table_properties.log_properties`). Time travel (``TopicTable.snapshot(version=...)``) to versions
    whose log files were deleted is no longer possible. Safe concurrently with commits.
    """
    before = _log_file_count(table)
    dt = table.snapshot()
    try:
        dt.create_checkpoint()
        try:
            dt.cleanup_metadata()
        except FileNotFoundError:
            dt.cleanup_metadata()  # a concurrent cleanup deleted some files first: finish the rest
    except (DeltaError, OSError) as exc:
        raise StorageError(
            f"Cannot checkpoint the Delta log of topic {table.topic} at {table.root}/_delta_log: {exc}. "
            "The table is unchanged; check the directory's free space and permissions and run optimize again."
        ) from exc
    return LogCheckpoint(table.topic, dt.version(), before, _log_file_count(table))
