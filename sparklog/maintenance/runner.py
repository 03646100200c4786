"""Topic maintenance entry points: retention, compaction, optimize, log checkpoints, vacuum.

Reads each topic's effective configs and applies its ``cleanup.policy`` through the log
layer: ``delete`` → :mod:`sparklog.log.retention` (metadata-only commits), ``compact`` →
:mod:`sparklog.log.compaction` (rewrites run as Spark tasks by
:mod:`sparklog.spark.compaction`, or in this process when no session is given),
``compact,delete`` → retention first, then compaction of what is left. Every topic then gets
:func:`run_optimize` (small files merged, the table's log properties synced with
``history.retention.ms``, a checkpoint, expired log files deleted) and :func:`run_vacuum`
(files removed longer than ``file.delete.delay.ms`` ago deleted).

Invariants: a dry run changes nothing; a topic whose policy lacks ``delete`` is untouched by
delete retention, one whose policy lacks ``compact`` is never compacted. Internal topics
(``__consumer_offsets``) compact themselves on every write: their policy step runs only when
they are named, optimize and vacuum always (compaction on write leaves removed files). Spark is imported only when a session is passed. Each step commits per
partition (or per topic), so a run killed mid-way leaves every table consistent and a rerun
completes it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sparklog import clock
from sparklog.config import cleanup_policies
from sparklog.log.compaction import CompactionResult, TaskRunner, compact_partitions, run_in_process
from sparklog.log.optimize import LogCheckpoint, OptimizeResult, log_step, optimize_topic
from sparklog.log.retention import RetentionResult, apply_delete_policy
from sparklog.log.segment import rewrite_compression
from sparklog.log.vacuum import VacuumResult, vacuum_topic
from sparklog.model.topic import is_internal
from sparklog.runtime.replica_manager import ReplicaManager

if TYPE_CHECKING:
    from sparklog.log.table import TopicTable

__all__ = [
    "CompactionResult",
    "LogCheckpoint",
    "MaintenanceReport",
    "OptimizeResult",
    "RetentionResult",
    "VacuumResult",
    "leader_tables",
    "run_compaction",
    "run_maintenance",
    "run_optimize",
    "run_retention",
    "run_vacuum",
]

Progress = Callable[[str], None]


@dataclass(frozen=True)
class MaintenanceReport:
    """What :func:`run_maintenance` did, per partition, in the order it was done."""

    retention: list[RetentionResult] = field(default_factory=list)
    compaction: list[CompactionResult] = field(default_factory=list)
    optimize: list[OptimizeResult] = field(default_factory=list)
    checkpoints: list[LogCheckpoint] = field(default_factory=list)
    vacuum: list[VacuumResult] = field(default_factory=list)

    def summary(self) -> str:
        """One line for the end of a run."""
        compacted = sum(1 for r in self.compaction if r.status != "skipped")
        return (
            f"retention: {sum(r.removed_files for r in self.retention)} files removed in {len(self.retention)} "
            f"partitions; compaction: {compacted} of {len(self.compaction)} partitions; optimize: "
            f"{sum(r.files_merged for r in self.optimize)} files merged into {sum(r.files_written for r in self.optimize)}; "
            f"{len(self.checkpoints)} checkpoints; vacuum: {sum(len(v.candidates) for v in self.vacuum)} files "
            f"({sum(v.candidate_bytes for v in self.vacuum)} bytes) past the grace period"
        )


def _now(now_ms: int | None) -> int:
    return clock.now_ms() if now_ms is None else now_ms


def leader_tables(replicas: ReplicaManager, topic: str) -> list[tuple[TopicTable, list[int]]]:
    """The topic's tables (one per leader replica) with the partitions each one leads."""
    return replicas.leader_tables(topic)


def run_retention(
    replicas: ReplicaManager, topics: Iterable[str] | None = None, dry_run: bool = False, now_ms: int | None = None
) -> list[RetentionResult]:
    """Apply the delete policy of ``topics`` (default: every topic whose policy has ``delete``)."""
    now = _now(now_ms)
    selected = list(topics) if topics is not None else replicas.list_topics()
    results: list[RetentionResult] = []
    for topic in selected:
        configs = replicas.topic_config(topic)
        if "delete" in cleanup_policies(configs):
            results += _retain_topic(replicas, topic, configs, now, dry_run)
    return results


def _runner(spark: Any) -> tuple[TaskRunner, int]:
    if spark is None:
        return run_in_process, 1
    from sparklog.spark.compaction import SparkCompactionRunner

    runner = SparkCompactionRunner(spark)
    return runner, runner.wave_size


def _compact_topic(
    replicas: ReplicaManager,
    topic: str,
    configs: dict[str, Any],
    runner: tuple[TaskRunner, int],
    dry_run: bool,
    now: int,
    progress: Progress | None,
) -> list[CompactionResult]:
    report = None if progress is None else (lambda r: progress(r.line()))
    run_tasks, wave_size = runner
    return [
        result
        for table, partitions in leader_tables(replicas, topic)
        for result in compact_partitions(
            table, partitions, configs, now, run_tasks, dry_run=dry_run, wave_size=wave_size, progress=report
        )
    ]


def _retain_topic(
    replicas: ReplicaManager, topic: str, configs: dict[str, Any], now: int, dry_run: bool
) -> list[RetentionResult]:
    return [
        result
        for table, partitions in leader_tables(replicas, topic)
        for result in apply_delete_policy(table, partitions, configs, now, dry_run)
    ]


def run_compaction(
    replicas: ReplicaManager,
    spark: Any,
    topics: Iterable[str] | None = None,
    dry_run: bool = False,
    now_ms: int | None = None,
    progress: Progress | None = None,
) -> list[CompactionResult]:
    """Compact ``topics`` (default: every non-internal topic whose policy has ``compact``).

    ``spark``: a SparkSession (each partition's rewrite is a Spark task) or None (rewrites
    run in this process, one after the other: for small topics and tools without Spark).
    ``progress`` gets one line per partition as it is done. ``now_ms`` is the time
    ``min.compaction.lag.ms`` and ``delete.retention.ms`` are measured from.
    """
    now = _now(now_ms)
    selected = list(topics) if topics is not None else [t for t in replicas.list_topics() if not is_internal(t)]
    runner = _runner(spark)
    results: list[CompactionResult] = []
    for topic in selected:
        configs = replicas.topic_config(topic)
        if "compact" in cleanup_policies(configs):
            results += _compact_topic(replicas, topic, configs, runner, dry_run, now, progress)
    return results


def run_optimize(
    replicas: ReplicaManager,
    topics: Iterable[str] | None = None,
    dry_run: bool = False,
    progress: Progress | None = None,
) -> tuple[list[OptimizeResult], list[LogCheckpoint]]:
    """Merge small files of ``topics`` (default: every topic), then per table
    sync its log properties with ``history.retention.ms``, checkpoint and clean the log."""
    results: list[OptimizeResult] = []
    checkpoints: list[LogCheckpoint] = []
    for topic in list(topics) if topics is not None else replicas.list_topics():
        done, logs = _optimize_topic(replicas, topic, replicas.topic_config(topic), dry_run, progress)
        results += done
        checkpoints += logs
    return results, checkpoints


def _optimize_topic(
    replicas: ReplicaManager, topic: str, configs: dict[str, Any], dry_run: bool, progress: Progress | None
) -> tuple[list[OptimizeResult], list[LogCheckpoint]]:
    report = None if progress is None else (lambda r: progress(_optimize_line(r)))
    results: list[OptimizeResult] = []
    checkpoints: list[LogCheckpoint] = []
    # Every replica, followers too: their fetches add small files and log entries as well.
    for table, partitions in replicas.replica_tables(topic):
        results += optimize_topic(
            table,
            partitions,
            int(configs["segment.bytes"]),
            dry_run=dry_run,
            compression=rewrite_compression(str(configs["compression.type"])),
            checkpoint=False,
            progress=report,
        )
        if dry_run:
            continue
        checkpoints.append(log_step(table, int(configs["history.retention.ms"])))
        if progress is not None:
            progress(_checkpoint_line(checkpoints[-1]))
    return results, checkpoints


def run_vacuum(
    replicas: ReplicaManager,
    topics: Iterable[str] | None = None,
    dry_run: bool = False,
    now_ms: int | None = None,
    progress: Progress | None = None,
) -> list[VacuumResult]:
    """Delete the files of ``topics`` (default: every topic) removed (or
    orphaned) more than the topic's ``file.delete.delay.ms`` ago; one result per table."""
    results: list[VacuumResult] = []
    for topic in list(topics) if topics is not None else replicas.list_topics():
        results += _vacuum_topic(replicas, topic, replicas.topic_config(topic), dry_run, _now(now_ms), progress)
    return results


def _vacuum_topic(
    replicas: ReplicaManager, topic: str, configs: dict[str, Any], dry_run: bool, now: int, progress: Progress | None
) -> list[VacuumResult]:
    verb = "would delete" if dry_run else "deleted"

    def report(directory: str, files: int, size: int) -> None:
        if progress is not None:
            progress(f"{topic}: {directory or '.'}: vacuum {verb} {files} files ({size} bytes)")

    delay_ms = int(configs["file.delete.delay.ms"])
    return [
        vacuum_topic(table, delay_ms, now_ms=now, dry_run=dry_run, progress=report)
        for table, _partitions in replicas.replica_tables(topic)
    ]


def run_maintenance(
    replicas: ReplicaManager,
    spark: Any,
    topics: Iterable[str] | None = None,
    dry_run: bool = False,
    now_ms: int | None = None,
    progress: Progress | None = None,
) -> MaintenanceReport:
    """Per topic, in this order: what its ``cleanup.policy`` asks for (``delete`` →
    retention, ``compact`` → compaction, both → retention then compaction), then optimize
    with a log checkpoint, then vacuum. Default: every topic, but the policy step skips
    internal topics unless named. Arguments as :func:`run_compaction`."""
    now = _now(now_ms)
    runner = _runner(spark)
    report = MaintenanceReport()
    for topic in list(topics) if topics is not None else replicas.list_topics():
        configs = replicas.topic_config(topic)
        # Internal topics compact themselves on write; they still need optimize and vacuum.
        policies = cleanup_policies(configs) if topics is not None or not is_internal(topic) else set()
        if "delete" in policies:
            done = _retain_topic(replicas, topic, configs, now, dry_run)
            report.retention.extend(done)
            if progress is not None:
                for r in done:
                    progress(_retention_line(r))
        if "compact" in policies:
            report.compaction.extend(_compact_topic(replicas, topic, configs, runner, dry_run, now, progress))
        optimized, checkpoints = _optimize_topic(replicas, topic, configs, dry_run, progress)
        report.optimize.extend(optimized)
        report.checkpoints.extend(checkpoints)
        report.vacuum.extend(_vacuum_topic(replicas, topic, configs, dry_run, now, progress))
    return report


def _retention_line(r: RetentionResult) -> str:
    verb = "would remove" if r.dry_run else "removed"
    return (
        f"{r.topic}-{r.partition}: retention {verb} {r.removed_files} files, {r.removed_records} records, "
        f"{r.removed_bytes} bytes; log-start {r.old_log_start} -> {r.new_log_start}"
    )


def _optimize_line(r: OptimizeResult) -> str:
    if r.files_merged == 0:
        return f"{r.topic}-{r.partition}: optimize found nothing to merge ({r.live_files_before} live files)"
    verb = "would merge" if r.dry_run else "merged"
    return (
        f"{r.topic}-{r.partition}: optimize {verb} {r.files_merged} files ({r.bytes_merged} bytes) into "
        f"{r.files_written}; live files {r.live_files_before} -> {r.live_files_after}"
    )


def _checkpoint_line(c: LogCheckpoint) -> str:
    return f"{c.topic}: checkpoint at version {c.version}; {c.log_files_removed} expired log files removed"
