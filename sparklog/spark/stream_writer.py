"""Structured Streaming writes to a topic: ``df.writeStream.format("sparklog")``, exactly once.

Each micro-batch is one produce, made of the batch writer's steps
(:mod:`sparklog.spark.writer`: leases of every partition, per-task offset reservations, one
Delta commit per leader table), and every one of those commits also carries the
application transaction ``sparklog.stream.<query id>`` = batch id. Spark replays a
micro-batch after a failure (same batch id, same input offsets); each leader table's commit
of the replay checks the transaction on that table: a table holding it at that batch id or
above gets nothing (the replay's files for it are deleted), a table without it (the job
stopped between two tables' commits) gets its part now. So every micro-batch lands in the
topic exactly once, whichever process dies when, provided a replay puts each row in the
same partition as the first run (keys, an explicit ``partition`` column, or keyless rows in
the same order: docs/design-notes.md, "Spark writes to multi-leader topics").

The query id is Spark's own ``StreamingQuery.id``: it is persisted in the checkpoint's
``metadata`` file (stable across restarts, new for a new checkpoint, so a fresh checkpoint
that restarts batch ids at 0 is never mistaken for a replay); Delta's own streaming sink
keys its transactions the same way. It reaches only the tasks (the local properties
``sql.streaming.queryId`` and ``streaming.sql.batchId`` of the micro-batch's job); tasks
pass it to the commit in their commit messages.

Where each step runs (all measured with PySpark 4.3, each a separate Python worker):

* ``streamWriter()`` is called on the driver side once per micro-batch to plan it, and
  again, on a *fresh* instance, for the batch's ``commit``/``abort``. ``__init__`` therefore
  only validates: the planned instance takes the batch's leases when Spark pickles it to
  ship it to the batch's tasks (:meth:`SparklogStreamWriter.__getstate__`), which the
  commit-side instance never is;
* ``write`` (tasks) writes segments with the shared task step and returns them with the
  plan (leases, start offsets) and the query and batch ids;
* ``commit(messages, batchId)`` commits with the query's transaction (or recognises a
  replay, table by table) and releases the leases; ``abort`` deletes the segments no
  commit made live and releases them.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from pyspark.sql.datasource import DataSourceStreamArrowWriter
from pyspark.sql.types import StructType

from sparklog.errors import ConfigError, StorageError
from sparklog.spark.writer import (
    ProducePlan,
    SegmentsWritten,
    abort_produce,
    check_target,
    commit_produce,
    plan_produce,
    task_id,
    write_task_segments,
)

__all__ = ["SparklogStreamWriter", "StreamSegmentsWritten", "stream_app_id", "write_stream_task"]

QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"


def stream_app_id(query_id: str) -> str:
    """The Delta application transaction whose version is the query's last committed batch."""
    return f"sparklog.stream.{query_id}"


@dataclass
class StreamSegmentsWritten(SegmentsWritten):
    """A task's segments plus what the commit-side writer cannot know by itself."""

    plan: ProducePlan | None = None
    query_id: str = ""
    batch_id: int = -1


def write_stream_task(
    plan: ProducePlan, iterator: Iterator[object], task: int, query_id: str, batch_id: int
) -> StreamSegmentsWritten:
    """The task step of a micro-batch (the batch writer's, plus the ids for the commit)."""
    segments = write_task_segments(plan, iterator, task)
    return StreamSegmentsWritten(task=task, segments=segments, plan=plan, query_id=query_id, batch_id=batch_id)


def _micro_batch_ids(topic: str) -> tuple[str, int]:
    """Query id and batch id of the micro-batch the running task belongs to."""
    from pyspark import TaskContext

    context = TaskContext.get()
    query_id = context.getLocalProperty(QUERY_ID_PROPERTY) if context else None
    batch_id = context.getLocalProperty(BATCH_ID_PROPERTY) if context else None
    if not query_id or batch_id is None:
        raise ConfigError(
            f"Streaming write to topic {topic}: this task carries no streaming query id / batch id "
            f"(Spark local properties {QUERY_ID_PROPERTY}, {BATCH_ID_PROPERTY}); the sparklog stream "
            "writer runs only inside micro-batch queries (continuous processing is not supported)"
        )
    return query_id, int(batch_id)


class SparklogStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: Mapping[str, str], schema: StructType, overwrite: bool) -> None:
        self.options = dict(options)
        self.topic = check_target(options, schema, overwrite, '.outputMode("append")')
        self.plan: ProducePlan | None = None

    def __getstate__(self) -> dict[str, object]:
        # Spark pickles the writer it planned for a micro-batch to ship it to the batch's
        # tasks: that is when the batch's leases are taken (once; the planning worker may
        # pickle the same instance more than once). The commit-side instance is never pickled.
        if self.plan is None:
            self.plan = plan_produce(self.options, self.topic, f"stream-{uuid.uuid4().hex}")
        return dict(self.__dict__)

    # -- tasks ---------------------------------------------------------------------------
    def write(self, iterator: Iterator[object]) -> StreamSegmentsWritten:
        if self.plan is None:
            raise StorageError(
                f"Streaming write to topic {self.topic}: the task got a writer without a produce plan "
                "(leases); this PySpark version ships writers to tasks differently than sparklog expects"
            )
        query_id, batch_id = _micro_batch_ids(self.topic)
        return write_stream_task(self.plan, iterator, task_id(), query_id, batch_id)

    # -- driver side ---------------------------------------------------------------------
    def commit(self, messages: list[StreamSegmentsWritten | None], batchId: int) -> None:  # type: ignore[override]
        plan, query_id = self._plan_of(messages, batchId)
        if plan is None:
            return  # no task reported: nothing was written, no lease is known to release
        if not any(m is not None and m.segments for m in messages):
            abort_produce(plan, messages)  # an empty micro-batch: nothing to commit
            return
        metadata = {
            "sparklog.job": plan.owner,
            "sparklog.operation": "STREAMING PRODUCE",
            "sparklog.stream.query": query_id,
            "sparklog.stream.batch": str(batchId),
        }
        commit_produce(plan, messages, metadata, {stream_app_id(query_id): batchId})

    def abort(self, messages: list[StreamSegmentsWritten | None], batchId: int) -> None:  # type: ignore[override]
        plan, _query_id = self._plan_of(messages, batchId)
        if plan is not None:
            abort_produce(plan, messages)

    def _plan_of(self, messages: list[StreamSegmentsWritten | None], batch_id: int) -> tuple[ProducePlan | None, str]:
        reported = [m for m in messages if isinstance(m, StreamSegmentsWritten) and m.plan is not None]
        if not reported:
            return None, ""
        plan, query_id = reported[0].plan, reported[0].query_id
        for m in reported:
            if m.plan != plan or m.query_id != query_id or m.batch_id != batch_id:
                raise StorageError(
                    f"Streaming write to topic {self.topic}, batch {batch_id}: tasks report different plans or ids "
                    f"(owner {m.plan.owner if m.plan else None} vs {plan.owner if plan else None}, query {m.query_id} "
                    f"vs {query_id}, batch {m.batch_id}); nothing committed. Restart the query from its checkpoint."
                )
        return plan, query_id
