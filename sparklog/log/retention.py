"""The delete policy applied to a topic table (DESIGN §9, invariant 8).

Every partition is planned with the pure :func:`sparklog.log.plans.retention_plan` (time,
size) on one snapshot; the planned whole files are removed and each ``sparklog.start.<p>``
raised in ONE metadata-only Delta commit for the topic
(:meth:`TopicTable.advance_log_starts`). Nothing is rewritten and no data file is deleted here: VACUUM deletes files after ``file.delete.delay.ms``, so
readers holding an older snapshot finish.

Invariants: only what the policy names is removed, always a prefix of the partition, and
log-start only moves forward; a commit that races another maintenance job or a producer
is re-planned on a fresh snapshot (the loser re-plans or finds nothing left to do).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sparklog.log.plans import RetentionPlan, retention_plan
from sparklog.log.table import TopicTable
from sparklog.retries import MAINTENANCE_PLAN

__all__ = ["RetentionResult", "apply_delete_policy"]


@dataclass(frozen=True)
class RetentionResult:
    """What retention did (or, in a dry run, would do) to one partition."""

    topic: str
    partition: int
    removed_files: int
    removed_records: int
    removed_bytes: int
    old_log_start: int
    new_log_start: int
    dry_run: bool = False


def apply_delete_policy(
    table: TopicTable,
    partitions: Iterable[int],
    configs: Mapping[str, Any],
    now_ms: int,
    dry_run: bool = False,
) -> list[RetentionResult]:
    """Apply ``retention.ms`` / ``retention.bytes`` of ``configs`` to ``partitions``, planned
    on one snapshot and committed in one metadata-only commit."""
    for _attempt in MAINTENANCE_PLAN:
        dt = table.snapshot()
        starts = table.log_starts(dt)
        files = table.files(dt, set(partitions))
        plans: list[tuple[RetentionPlan, int]] = []
        for partition in sorted(partitions):
            end = table.log_end(dt, partition)
            start = starts.get(partition, end)
            plan = retention_plan(
                [f for f in files if f.partition == partition],
                partition=partition,
                log_start=start,
                log_end=end,
                now_ms=now_ms,
                retention_ms=int(configs["retention.ms"]),
                retention_bytes=int(configs["retention.bytes"]),
            )
            plans.append((plan, start))
        changes = {
            plan.partition: plan.new_log_start for plan, start in plans if plan.removed or plan.new_log_start > start
        }
        removed = [f for plan, _start in plans for f in plan.removed]
        if dry_run or not changes or table.advance_log_starts(changes, removed, "RETENTION"):
            return [_result(table.topic, plan, start, dry_run) for plan, start in plans]
    raise MAINTENANCE_PLAN.exhausted(f"Retention of {table.topic}", "nothing was removed; run it again")


def _result(topic: str, plan: RetentionPlan, old_log_start: int, dry_run: bool) -> RetentionResult:
    return RetentionResult(
        topic=topic,
        partition=plan.partition,
        removed_files=len(plan.removed),
        removed_records=sum(s.num_records for s in plan.removed),
        removed_bytes=sum(s.size_bytes for s in plan.removed),
        old_log_start=old_log_start,
        new_log_start=max(old_log_start, plan.new_log_start),
        dry_run=dry_run,
    )
