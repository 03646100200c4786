"""The compaction job's Spark side: each partition's rewrite runs as one Spark task.

:class:`SparkCompactionRunner` is a :data:`~sparklog.log.compaction.TaskRunner`: it ships
the planned :class:`~sparklog.log.compaction.CompactionTask` of every partition of a wave
as one element of an RDD with one slice per partition (``parallelize(tasks,
len(tasks)).map(compact_task)``), so partitions are rewritten in parallel on the
executors, and collects the new files' descriptions. Planning and the one Delta commit
per partition stay on the driver (:func:`sparklog.log.compaction.compact_partitions`).

Why an RDD of small task descriptions rather than a DataFrame: a task reads its files
itself with pyarrow (column files straight from storage; no record crosses the JVM), and
``mapInArrow``/``applyInPandas`` need pandas, which sparklog does not depend on. Executors
need the table's storage path mounted (local mode, a shared file system or object store).

Invariant: a failed job commits nothing; files written by its finished tasks stay
unreferenced until VACUUM. A sparklog error raised in a task comes back as that error.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from sparklog.log.compaction import CompactionTask, TaskOutput, compact_task
from sparklog.spark.task_errors import reraise_sparklog_error

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["SparkCompactionRunner"]


class SparkCompactionRunner:
    """Runs compaction rewrites as Spark tasks (one per partition) on ``spark``."""

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark

    @property
    def wave_size(self) -> int:
        """Partitions per Spark job: two waves of tasks per core keep cores busy while
        progress is reported (and plans refreshed) every few partitions."""
        return max(2, 2 * int(self.spark.sparkContext.defaultParallelism))

    def __call__(self, tasks: Sequence[CompactionTask]) -> list[TaskOutput]:
        if not tasks:
            return []
        context = self.spark.sparkContext
        topic = tasks[0].topic
        partitions = ",".join(str(t.partition) for t in tasks)
        context.setJobDescription(f"sparklog compaction of {topic} partitions {partitions}")
        try:
            return context.parallelize(list(tasks), len(tasks)).map(compact_task).collect()
        except Exception as exc:
            reraise_sparklog_error(exc)
            raise
        finally:
            context.setJobDescription(None)  # type: ignore[arg-type]
