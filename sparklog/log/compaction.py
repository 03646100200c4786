"""Log compaction of a topic table (``cleanup.policy=compact``, DESIGN §9): the Delta side.

Per partition, in three steps (the Spark job runs step 2 as one task per partition; any
other runner, e.g. :func:`run_in_process`, may run it too):

1. **plan** (driver, :func:`plan_partition`): the pure :func:`~sparklog.log.plans.compaction_plan`
   over the partition's live files at or after log-start, with ``cleaned_up_to`` read from
   the application transaction ``sparklog.cleaned.<p>`` (version = first offset not yet
   cleaned, i.e. the previous run's ``first_uncleanable_offset``; absent = nothing cleaned);
2. **rewrite** (:func:`compact_task`, pure file I/O, safe in a Spark task): read the planned
   files, drop rows below log-start (a straddling file), keep what
   :func:`~sparklog.log.plans.compact_records` keeps, write the survivors with their
   offsets (:func:`~sparklog.log.segment.write_segment` ``offsets=``), cut at ``segment.bytes``;
3. **commit** (driver, :func:`commit_partition`): ONE Delta commit removing the rewritten
   files, adding the new ones and setting ``sparklog.cleaned.<p>``, metadata
   ``sparklog.operation=COMPACTION``.

Invariants:

* Offsets are never renumbered (DESIGN §5.1): survivors keep their offsets, order kept. The
  new files' offset stats tile the rewritten range exactly: the first file's range starts
  where the first rewritten file did (or at log-start), each ends where the next begins;
  when nothing survives, one empty placeholder file holds the range. So log-start (the
  smallest live ``min.offset``) never moves by compaction, as in Kafka, and files keep
  tiling the partition. Stats ``min``/``max`` of ``offset`` are therefore bounds (records
  inside may start later / end earlier); ``numRecords`` is exact.
* The active head and segments newer than ``min.compaction.lag.ms`` are never rewritten
  (the planner); records below log-start are never resurrected (they are dropped first).
* A commit lands only on a snapshot where the plan still holds: every rewritten file is
  live, log-start and ``sparklog.cleaned.<p>`` are unchanged. The check and the commit use
  the same snapshot with ``max_commit_retries=0``, so any commit in between (an append,
  another maintenance job) fails ours and we check again on a fresh snapshot: an append
  costs one more round, never a rewrite; a concurrent rewrite of the same files makes the
  check fail, our new files are deleted and the partition is re-planned (normally:
  nothing left to do). delta-rs's own rebase (``max_commit_retries > 0``) is NOT used:
  measured with deltalake 1.6.6, it does not notice that a winning commit removed the
  same files with ``dataChange=false`` (optimize), and both commits land (duplicates).
* A dry run plans and counts survivors but writes and commits nothing.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from sparklog.errors import StorageError
from sparklog.log.plans import CompactionPlan, compact_records, compaction_plan
from sparklog.log.reader import read_files
from sparklog.log.segment import (
    SegmentFile,
    discard_segments,
    resolve_compression,
    rewrite_compression,
    split_for_size,
    write_placeholder,
    write_segment,
)
from sparklog.log.table import CommitConflict, FileEntry, TopicTable, cleaned_app_id
from sparklog.log.txn_log import aborted_ranges, last_stable_offset, visible
from sparklog.model.storage_location import StorageSettings

__all__ = [
    "OPERATION",
    "CompactionResult",
    "CompactionTask",
    "PartitionPlan",
    "TaskOutput",
    "TaskRunner",
    "cleaned_app_id",
    "commit_partition",
    "compact_partitions",
    "compact_task",
    "plan_partition",
    "run_in_process",
]

OPERATION = "COMPACTION"
MAX_COMMIT_ATTEMPTS = 50  # check + commit rounds lost to concurrent commits (appends)
MAX_PLAN_ROUNDS = 5  # re-plans after losing to another rewrite of the same files


@dataclass(frozen=True)
class CompactionTask:
    """Everything one rewrite needs (picklable: shipped to a Spark task)."""

    log_dir: str
    topic: str
    partition: int
    files: tuple[FileEntry, ...]
    log_start: int
    range_start: int  # offset stats of the output start here ...
    range_end: int  # ... and end here (inclusive)
    first_uncleanable_offset: int
    now_ms: int
    delete_retention_ms: int
    segment_bytes: int
    compression: str
    write: bool = True  # False: count survivors only (dry run)
    aborted: tuple[tuple[int, int], ...] = ()  # aborted transaction runs [start, end) in the range
    # The cluster's storage.* settings (StorageSettings.values): an executor has no
    # variables of the driver's.
    storage: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class TaskOutput:
    """What a rewrite produced; ``missing`` names a planned file that was gone (lost race).
    ``unchanged``: no record to drop, nothing written; the commit only records the progress."""

    partition: int
    segments: tuple[dict[str, Any], ...] = ()
    records_before: int = 0
    records_after: int = 0
    missing: str | None = None
    unchanged: bool = False


@dataclass(frozen=True)
class PartitionPlan:
    """A planned rewrite and the snapshot facts it depends on (re-checked at commit)."""

    task: CompactionTask
    plan: CompactionPlan
    cleaned_version: int | None  # sparklog.cleaned.<p> as planned on


@dataclass(frozen=True)
class CompactionResult:
    """What compaction did (or, dry, would do) to one partition."""

    topic: str
    partition: int
    status: str  # "compacted" (files_rewritten 0: nothing to drop, progress recorded), "skipped" or "dry-run"
    dirty_ratio: float | None = None
    files_rewritten: int = 0
    files_written: int = 0
    records_before: int = 0
    records_after: int = 0
    bytes_before: int = 0
    bytes_after: int | None = None  # None in a dry run that would rewrite (nothing written)
    cleaned_up_to: int | None = None  # the new sparklog.cleaned.<p>
    reason: str = ""
    elapsed_s: float = 0.0

    def line(self) -> str:
        """One progress line, e.g. ``orders-3: compacted 4 files, 1000 -> 120 records, ...``."""
        ratio = "" if self.dirty_ratio is None else f"dirty ratio {self.dirty_ratio:.2f}; "
        if self.status == "skipped":
            return f"{self.topic}-{self.partition}: skipped ({ratio}{self.reason})"
        after = "?" if self.bytes_after is None else str(self.bytes_after)
        verb = "would compact" if self.status == "dry-run" else "compacted"
        return (
            f"{self.topic}-{self.partition}: {verb} {self.files_rewritten} files -> {self.files_written}, "
            f"{self.records_before} -> {self.records_after} records, {self.bytes_before} -> {after} bytes; "
            f"{ratio}cleaned up to offset {self.cleaned_up_to} ({self.elapsed_s:.1f} s)"
        )


TaskRunner = Callable[[Sequence[CompactionTask]], list[TaskOutput]]
"""Runs rewrites (in Spark tasks, in process, ...) and returns their outputs, any order."""


def run_in_process(tasks: Sequence[CompactionTask]) -> list[TaskOutput]:
    """The runner without Spark: rewrites one after the other in this process."""
    return [compact_task(task) for task in tasks]


# -- 1. plan -------------------------------------------------------------------------------
def plan_partition(
    table: TopicTable, partition: int, configs: Mapping[str, Any], now_ms: int, dry_run: bool = False
) -> PartitionPlan | CompactionResult:
    """The rewrite of ``partition`` on the latest snapshot, or why there is none."""
    dt = table.snapshot()
    end = table.log_end(dt, partition)
    start = table.log_starts(dt).get(partition, end)
    # Kafka's cleaner stops at the last stable offset: an open transaction's records (and
    # what follows them) may still be aborted, so they are not compacted yet.
    stable = last_stable_offset(dt, partition, end)
    files = [f for f in table.files(dt, {partition}) if f.last_offset >= start and f.last_offset < stable]
    cleaned = table.app_version(dt, cleaned_app_id(partition))
    ask: dict[str, Any] = dict(
        partition=partition,
        log_end=end,
        now_ms=now_ms,
        cleaned_up_to=cleaned or 0,
        min_compaction_lag_ms=int(configs["min.compaction.lag.ms"]),
    )
    threshold = float(configs["min.cleanable.dirty.ratio"])
    plan = compaction_plan(files, min_cleanable_dirty_ratio=threshold, **ask)
    if plan is None:
        probe = compaction_plan(files, min_cleanable_dirty_ratio=0.0, **ask)
        reason = (
            f"below min.cleanable.dirty.ratio {threshold}"
            if probe is not None
            else "nothing to clean: no records since the last run outside the head and min.compaction.lag.ms"
        )
        return CompactionResult(table.topic, partition, "skipped", probe.dirty_ratio if probe else None, reason=reason)
    rewrite: tuple[FileEntry, ...] = plan.rewrite  # type: ignore[assignment]  # FileEntry in, FileEntry out
    task = CompactionTask(
        log_dir=os.path.dirname(os.path.dirname(table.root)),
        topic=table.topic,
        partition=partition,
        files=rewrite,
        log_start=start,
        range_start=max(rewrite[0].base_offset, start),
        range_end=rewrite[-1].last_offset,
        first_uncleanable_offset=plan.first_uncleanable_offset,
        now_ms=now_ms,
        delete_retention_ms=int(configs["delete.retention.ms"]),
        segment_bytes=int(configs["segment.bytes"]),
        compression=rewrite_compression(str(configs["compression.type"])),
        write=not dry_run,
        storage=table.settings.values,
        aborted=tuple(
            (a, b)
            for a, b in aborted_ranges(dt, partition)
            if b > rewrite[0].base_offset and a <= rewrite[-1].last_offset
        ),
    )
    return PartitionPlan(task, plan, cleaned)


# -- 2. rewrite (any process) --------------------------------------------------------------
def compact_task(task: CompactionTask) -> TaskOutput:
    """Rewrite the planned files of one partition; returns the new (uncommitted) files."""
    table = TopicTable(task.log_dir, task.topic, StorageSettings(task.storage))
    missing = next((f.path for f in task.files if not table.storage.exists(f.path)), None)
    if missing is not None:
        return TaskOutput(task.partition, missing=missing)
    try:
        records = read_files(table, list(task.files))
        if task.write:
            sources = [f.path for f in task.files]
            task = replace(task, compression=resolve_compression(task.compression, table.storage, sources))
    except FileNotFoundError as exc:  # removed (and vacuumed) since planning: the plan is stale
        return TaskOutput(task.partition, missing=str(exc))
    except (OSError, pa.ArrowInvalid) as exc:
        raise StorageError(
            f"Compaction of {task.topic}-{task.partition}: cannot read offsets {task.range_start}..{task.range_end} "
            f"({len(task.files)} files): {exc}. Check the files under {table.root}, then run compaction again."
        ) from exc
    read = records.num_rows
    if min(f.base_offset for f in task.files) < task.log_start:  # a straddling file (the filter copies every column)
        records = records.filter(pc.greater_equal(records.column("offset"), task.log_start))
    if task.aborted:
        # Aborted records go first (Kafka's cleaner too): an aborted value must never be the
        # one a key keeps while an older committed value is dropped.
        records = visible(records, {task.partition: task.aborted}, keep_control=True)
    survivors = compact_records(
        records,
        now_ms=task.now_ms,
        delete_retention_ms=task.delete_retention_ms,
        first_uncleanable_offset=task.first_uncleanable_offset,
    )
    if survivors.num_rows == read:  # nothing to drop: keep the files as they are
        return TaskOutput(task.partition, (), records.num_rows, survivors.num_rows, unchanged=True)
    try:
        segments = _write_tiling(table, task, survivors) if task.write else []
    except OSError as exc:
        raise StorageError(
            f"Compaction of {task.topic}-{task.partition}: cannot write the compacted offsets "
            f"{task.range_start}..{task.range_end} under {table.root}: {exc}. Nothing was committed; "
            "fix the storage problem and run compaction again."
        ) from exc
    return TaskOutput(task.partition, tuple(s.to_dict() for s in segments), records.num_rows, survivors.num_rows)


def _write_tiling(table: TopicTable, task: CompactionTask, survivors: pa.Table) -> list[SegmentFile]:
    """Write ``survivors`` cut at ``segment.bytes``; the files' offset stats tile
    ``[range_start, range_end]`` exactly (an empty placeholder when nothing survives)."""
    if survivors.num_rows == 0:
        return [_write_placeholder(table, task)]
    written: list[SegmentFile] = []
    try:
        for piece in split_for_size(survivors, task.segment_bytes):
            offsets = piece.column("offset").combine_chunks()
            written.append(write_segment(table.storage, task.partition, 0, piece, task.compression, offsets=offsets))
    except BaseException:
        discard_segments(table.storage, written)
        raise
    starts = [task.range_start] + [s.base_offset for s in written[1:]]
    ends = [s.base_offset - 1 for s in written[1:]] + [task.range_end]
    return [replace(s, base_offset=lo, last_offset=hi) for s, lo, hi in zip(written, starts, ends, strict=False)]


def _write_placeholder(table: TopicTable, task: CompactionTask) -> SegmentFile:
    stamps = [t for f in task.files for t in (f.min_timestamp_us, f.max_timestamp_us) if t is not None]
    return write_placeholder(table.storage, task.partition, task.range_start, task.range_end, stamps, task.compression)


# -- 3. commit -----------------------------------------------------------------------------
def _still_valid(table: TopicTable, planned: PartitionPlan) -> tuple[Any, bool]:
    """A fresh snapshot, and whether the plan still holds on it."""
    p = planned.task.partition
    dt = table.snapshot()
    live = {f.path for f in table.files(dt, {p})}
    valid = (
        all(f.path in live for f in planned.task.files)
        and table.log_starts(dt).get(p) == planned.task.log_start
        and table.app_version(dt, cleaned_app_id(p)) == planned.cleaned_version
    )
    return dt, valid


def commit_partition(table: TopicTable, planned: PartitionPlan, output: TaskOutput) -> bool:
    """Commit one rewrite; False (new files deleted) when the plan no longer holds."""
    segments = [SegmentFile.from_dict(d) for d in output.segments]
    p = planned.task.partition
    metadata = {
        "sparklog.operation": OPERATION,
        "sparklog.partition": str(p),
        "sparklog.cleaned": str(planned.plan.first_uncleanable_offset),
    }
    for attempt in range(MAX_COMMIT_ATTEMPTS):
        dt, valid = _still_valid(table, planned)
        if not valid or output.missing is not None:
            break
        try:
            table.commit(
                dt,
                segments,
                {cleaned_app_id(p): planned.plan.first_uncleanable_offset},
                metadata,
                removes=[] if output.unchanged else list(planned.task.files),
                data_change=True,
                max_commit_retries=0,
            )
            return True
        except CommitConflict:
            time.sleep(random.uniform(0, 0.002 * min(attempt + 1, 10)))
    discard_segments(table.storage, segments)
    return False


# -- the driver loop -----------------------------------------------------------------------
def compact_partitions(
    table: TopicTable,
    partitions: Iterable[int],
    configs: Mapping[str, Any],
    now_ms: int,
    run_tasks: TaskRunner = run_in_process,
    *,
    dry_run: bool = False,
    wave_size: int = 8,
    progress: Callable[[CompactionResult], None] | None = None,
) -> list[CompactionResult]:
    """Compact ``partitions`` of ``table``: plan, rewrite (``run_tasks``), commit, per wave of
    ``wave_size`` partitions (each wave is one Spark job: planned just before it runs, so
    plans stay fresh, and ``progress`` hears of each partition as its wave commits)."""
    results: list[CompactionResult] = []
    ordered = sorted(partitions)
    for first in range(0, len(ordered), max(1, wave_size)):
        for result in _compact_wave(
            table, ordered[first : first + max(1, wave_size)], configs, now_ms, run_tasks, dry_run
        ):
            results.append(result)
            if progress is not None:
                progress(result)
    return sorted(results, key=lambda r: r.partition)


def _compact_wave(
    table: TopicTable,
    partitions: list[int],
    configs: Mapping[str, Any],
    now_ms: int,
    run_tasks: TaskRunner,
    dry_run: bool,
) -> Iterable[CompactionResult]:
    pending = partitions
    for _round in range(MAX_PLAN_ROUNDS):
        started = time.monotonic()
        plans: dict[int, PartitionPlan] = {}
        for p in pending:
            planned = plan_partition(table, p, configs, now_ms, dry_run)
            if isinstance(planned, CompactionResult):
                yield planned
            else:
                plans[p] = planned
        outputs = (
            {out.partition: out for out in run_tasks([planned.task for planned in plans.values()])} if plans else {}
        )
        lost = []
        for p, planned in plans.items():
            output = outputs[p]
            if output.missing is None and (dry_run or commit_partition(table, planned, output)):
                yield _result(table.topic, planned, output, dry_run, time.monotonic() - started)
            else:
                lost.append(p)
        if not lost:
            return
        pending = lost
    raise StorageError(
        f"Compaction of {table.topic} partitions {pending} lost {MAX_PLAN_ROUNDS} races against other rewrites "
        "of the same files (another compaction or optimize job?); nothing was changed by this job for them. "
        "Run compaction again when the other job is done."
    )


def _result(
    topic: str, planned: PartitionPlan, output: TaskOutput, dry_run: bool, elapsed_s: float
) -> CompactionResult:
    segments = [SegmentFile.from_dict(d) for d in output.segments]
    size = sum(f.size_bytes for f in planned.task.files)
    if output.unchanged:
        after: int | None = size
    else:
        after = None if dry_run else sum(s.size_bytes for s in segments)
    return CompactionResult(
        topic=topic,
        partition=planned.task.partition,
        status="dry-run" if dry_run else "compacted",
        dirty_ratio=planned.plan.dirty_ratio,
        files_rewritten=0 if output.unchanged else len(planned.task.files),
        files_written=len(segments),
        records_before=output.records_before,
        records_after=output.records_after,
        bytes_before=size,
        bytes_after=after,
        cleaned_up_to=planned.plan.first_uncleanable_offset,
        elapsed_s=elapsed_s,
    )
