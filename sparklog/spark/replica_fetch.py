"""The replication job's Spark side: each follower broker's fetch runs as one Spark task.

:func:`run_replica_fetch` ships one small task per broker (``parallelize(brokers,
len(brokers))``); the task opens the cluster from the shipped settings and runs one round of
:class:`sparklog.runtime.replica_fetcher.ReplicaFetcher` for that broker: reconcile after leader changes,
then copy what its replicas lack (each partition one Delta commit on the follower's table,
made by the task: only that broker's fetch writes its follower replicas, so tasks never
contend). Rounds repeat until no task copies anything, or ``max_rounds``.

Executors need every log dir mounted (local mode, a shared file system or object store).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sparklog.spark.task_errors import reraise_sparklog_error

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from sparklog.runtime.replica_manager import ReplicaManager

__all__ = ["ReplicaFetchReport", "ReplicaFetchTask", "replica_fetch_task", "run_replica_fetch"]


@dataclass(frozen=True)
class ReplicaFetchTask:
    options: dict[str, str]  # the cluster settings (ClusterConfig.to_options)
    broker_id: int
    topics: list[str] | None


@dataclass(frozen=True)
class ReplicaFetchReport:
    broker_id: int
    copied: list[tuple[str, int, int, int]]  # (topic, partition, records, new log end)
    truncated: list[tuple[str, int, int]]
    errors: list[tuple[str, int, str]]


def replica_fetch_task(task: ReplicaFetchTask) -> ReplicaFetchReport:
    """One fetch round for one broker (runs in a Spark task)."""
    from sparklog.config import resolve_cluster_config
    from sparklog.runtime.replica_fetcher import ReplicaFetcher
    from sparklog.runtime.replica_manager import ReplicaManager

    replicas = ReplicaManager.connect(resolve_cluster_config(task.options))
    try:
        done = ReplicaFetcher(replicas, task.broker_id, topics=task.topics).run_once()
    finally:
        replicas.close()
    return ReplicaFetchReport(
        task.broker_id,
        [(topic, r.partition, r.records, r.log_end) for topic, r in done.copied],
        done.truncated,
        done.errors,
    )


def run_replica_fetch(
    spark: SparkSession,
    replicas: ReplicaManager,
    brokers: list[int] | None = None,
    topics: list[str] | None = None,
    max_rounds: int = 100,
) -> list[ReplicaFetchReport]:
    """Rounds of follower fetches for ``brokers`` (default: every registered broker) until
    nothing is left to copy; returns every round's reports. Unknown brokers and topics are
    refused first (:func:`sparklog.admin.brokers.require_fetch_selection`)."""
    from sparklog.admin.brokers import require_fetch_selection

    require_fetch_selection(replicas, brokers, topics)
    selected = sorted(replicas.metadata.brokers()) if brokers is None else sorted(set(brokers))
    tasks = [ReplicaFetchTask(replicas.config.to_options(), b, topics) for b in selected]
    context = spark.sparkContext
    reports: list[ReplicaFetchReport] = []
    for _round in range(max_rounds):
        context.setJobDescription(f"sparklog replication to brokers {selected}")
        try:
            done = context.parallelize(tasks, len(tasks)).map(replica_fetch_task).collect()
        except Exception as exc:
            reraise_sparklog_error(exc)
            raise
        finally:
            context.setJobDescription(None)  # type: ignore[arg-type]
        reports += done
        if not any(r.copied or r.truncated for r in done):
            break
    return reports
