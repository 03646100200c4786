"""Topic maintenance entry points: retention (delete policy) and compaction across topics.

Reads each topic's effective configs and applies its ``cleanup.policy`` through the log
layer: ``delete`` → :mod:`sparklog.log.retention` (metadata-only commits), ``compact`` →
:mod:`sparklog.log.compaction` (rewrites run as Spark tasks by
:mod:`sparklog.spark.compaction`, or in this process when no session is given),
``compact,delete`` → retention first, then compaction of what is left. Optimize and
vacuum join here as they land. Callers: :class:`sparklog.cluster.Cluster`,
``jobs/retention.py`` and the CLI.

Invariants: a dry run changes nothing; a topic whose policy lacks ``delete`` is untouched by
delete retention, one whose policy lacks ``compact`` is never compacted. Internal topics
(``__consumer_offsets``) compact themselves on every write, so compaction skips them
unless named explicitly. Spark is imported only when a session is passed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sparklog.log.compaction import CompactionResult, TaskRunner, compact_partitions, run_in_process
from sparklog.log.retention import RetentionResult, apply_delete_policy
from sparklog.topic import is_internal

if TYPE_CHECKING:
    from sparklog.cluster import Cluster

__all__ = ["run_retention", "run_compaction", "run_maintenance", "MaintenanceReport", "RetentionResult", "CompactionResult"]

Progress = Callable[[str], None]


@dataclass(frozen=True)
class MaintenanceReport:
    """What :func:`run_maintenance` did, per partition, in the order it was done."""

    retention: list[RetentionResult] = field(default_factory=list)
    compaction: list[CompactionResult] = field(default_factory=list)


def _now(now_ms: int | None) -> int:
    return int(time.time() * 1000) if now_ms is None else now_ms


def _policies(configs: dict[str, Any]) -> set[str]:
    return set(str(configs["cleanup.policy"]).split(","))


def run_retention(
    cluster: "Cluster", topics: Iterable[str] | None = None, dry_run: bool = False, now_ms: int | None = None
) -> list[RetentionResult]:
    """Apply the delete policy of ``topics`` (default: every topic whose policy has ``delete``)."""
    now = _now(now_ms)
    selected = list(topics) if topics is not None else cluster.list_topics()
    results: list[RetentionResult] = []
    for topic in selected:
        configs = cluster.topic_config(topic)
        if "delete" in _policies(configs):
            results += apply_delete_policy(cluster.table(topic), cluster.partitions_of(topic), configs, now, dry_run)
    return results


def _runner(spark: Any) -> tuple[TaskRunner, int]:
    if spark is None:
        return run_in_process, 1
    from sparklog.spark.compaction import SparkCompactionRunner

    runner = SparkCompactionRunner(spark)
    return runner, runner.wave_size


def _compact_topic(cluster: "Cluster", topic: str, configs: dict[str, Any], runner: tuple[TaskRunner, int],
                   dry_run: bool, now: int, progress: Progress | None) -> list[CompactionResult]:  # fmt: skip
    report = None if progress is None else (lambda r: progress(r.line()))
    run_tasks, wave_size = runner
    return compact_partitions(
        cluster.table(topic), cluster.partitions_of(topic), configs, now, run_tasks,
        dry_run=dry_run, wave_size=wave_size, progress=report,
    )  # fmt: skip


def run_compaction(
    cluster: "Cluster",
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
    selected = list(topics) if topics is not None else [t for t in cluster.list_topics() if not is_internal(t)]
    runner = _runner(spark)
    results: list[CompactionResult] = []
    for topic in selected:
        configs = cluster.topic_config(topic)
        if "compact" in _policies(configs):
            results += _compact_topic(cluster, topic, configs, runner, dry_run, now, progress)
    return results


def run_maintenance(
    cluster: "Cluster",
    spark: Any,
    topics: Iterable[str] | None = None,
    dry_run: bool = False,
    now_ms: int | None = None,
    progress: Progress | None = None,
) -> MaintenanceReport:
    """Per topic, what its ``cleanup.policy`` asks for: ``delete`` → retention, ``compact`` →
    compaction, ``compact,delete`` → retention then compaction. Internal topics are left
    alone unless named. Arguments as :func:`run_compaction`."""
    now = _now(now_ms)
    selected = list(topics) if topics is not None else [t for t in cluster.list_topics() if not is_internal(t)]
    runner = _runner(spark)
    report = MaintenanceReport()
    for topic in selected:
        configs = cluster.topic_config(topic)
        policies = _policies(configs)
        if "delete" in policies:
            done = apply_delete_policy(cluster.table(topic), cluster.partitions_of(topic), configs, now, dry_run)
            report.retention.extend(done)
            for r in done if progress is not None else ():
                progress(_retention_line(r))
        if "compact" in policies:
            report.compaction.extend(_compact_topic(cluster, topic, configs, runner, dry_run, now, progress))
    return report


def _retention_line(r: RetentionResult) -> str:
    verb = "would remove" if r.dry_run else "removed"
    return (
        f"{r.topic}-{r.partition}: retention {verb} {r.removed_files} files, {r.removed_records} records, "
        f"{r.removed_bytes} bytes; log-start {r.old_log_start} -> {r.new_log_start}"
    )
