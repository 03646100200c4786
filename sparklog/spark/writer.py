"""Spark produce: one Spark job (or one streaming micro-batch) = one atomic produce.

The steps, as functions shared by the batch writer (this module) and the streaming writer
(:mod:`sparklog.spark.stream_writer`). PySpark runs each in a separate Python worker, none
of them the user's process:

* :func:`plan_produce` (planning, driver side): takes the write lease of *every* partition
  of the topic (input arrives arbitrarily partitioned), commits epoch markers where it took
  over a stale lease, and seeds each lease's offset counter with the partition's log end.
  The resulting :class:`ProducePlan` is pickled into every task;
* :func:`write_task_segments` (each task, on executors): normalises its rows, groups them
  by partition, reserves an offset range per (task, partition) by compare-and-set on the
  lease counter (a retried task gets the same range back), writes sized segments;
* :func:`commit_produce` (driver side): checks the segments tile the reserved ranges with
  no gap, commits them in ONE Delta commit fenced by the lease epochs (plus any app
  transactions, e.g. a streaming query's batch id), releases the leases;
* :func:`abort_produce`: deletes the written segments and releases the leases.

Invariant: the offsets of one produce are contiguous per partition and become visible in
one Delta commit, or not at all.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

if TYPE_CHECKING:
    from sparklog.coordination.lease import LeaseGrant
    from sparklog.coordination.session import ZkSession

from sparklog.errors import ConfigError, SchemaMismatchError, SparklogError
from sparklog.spark.options import cluster_config_from_options

__all__ = [
    "SparklogBatchWriter",
    "SegmentsWritten",
    "ProducePlan",
    "check_target",
    "plan_produce",
    "write_task_segments",
    "commit_produce",
    "abort_produce",
    "release_leases",
    "task_id",
    "JOB_ID_OPTION",
    "job_ranges",
]

JOB_ID_OPTION = "sparklog.job.id"
_ALLOWED_TYPES = {
    "value": ("binary", "string"),
    "key": ("binary", "string", "void"),
    "partition": ("int", "bigint", "smallint", "tinyint"),
    "timestamp": ("timestamp", "timestamp_ntz"),
    "topic": ("string",),
    "headers": ("array<struct<key:string,value:binary>>",),
}


@dataclass
class SegmentsWritten(WriterCommitMessage):
    task: int
    segments: list[dict[str, int | str]] = field(default_factory=list)


def check_input_schema(schema: StructType, topic: str) -> None:
    """Fail before any task runs when the DataFrame can't be a produce request."""
    names = [f.name for f in schema.fields]
    if "value" not in names:
        raise SchemaMismatchError(f"Cannot write to topic {topic}: required column 'value' is missing (columns: {names})")
    for f in schema.fields:
        allowed = _ALLOWED_TYPES.get(f.name)
        if allowed is None:
            raise SchemaMismatchError(
                f"Cannot write to topic {topic}: unsupported column {f.name!r}; allowed: value (required), "
                "key, partition, headers, timestamp, topic"
            )
        type_name = f.dataType.simpleString().replace(" ", "")
        if type_name not in allowed:
            raise SchemaMismatchError(
                f"Cannot write to topic {topic}: column {f.name!r} has type {type_name}, expected {' or '.join(allowed)}"
            )


@dataclass(frozen=True)
class ProducePlan:
    """One planned produce (a batch job or a streaming micro-batch): the leases it holds and
    what its tasks need to write segments. Picklable: Spark ships it to the tasks."""

    topic: str
    owner: str
    zk_connect: str
    table_log_dir: str
    lease_ms: int
    num_partitions: int
    max_message_bytes: int
    log_append_time: bool
    compression: str
    segment_bytes: int
    grants: tuple["LeaseGrant", ...]
    start_offsets: dict[int, int]

    @property
    def table_root(self) -> str:
        return os.path.join(self.table_log_dir, "topics", self.topic)

    @property
    def epochs(self) -> dict[int, int]:
        return {g.partition: g.epoch for g in self.grants}


def check_target(options: Mapping[str, str], schema: StructType, overwrite: bool, append_hint: str) -> str:
    """The validated target topic of a write; fails before anything is touched."""
    from sparklog.topic import validate_topic_name

    if overwrite:
        raise ConfigError(f"Topics are append-only: use {append_hint} to write to sparklog")
    topic = options.get("topic")
    if not topic:
        raise ConfigError("Option 'topic' is required to write to sparklog")
    topic = validate_topic_name(topic)
    check_input_schema(schema, topic)
    return topic


def plan_produce(options: Mapping[str, str], topic: str, owner: str, adopt: bool = False) -> ProducePlan:
    """Take the write lease of *every* partition of ``topic`` for ``owner`` (input arrives
    arbitrarily partitioned), commit epoch markers where a stale lease was taken over, and
    seed each lease's offset counter with the partition's log end. ``adopt``: ``owner`` is a
    stable id, and leases a crashed earlier run of it left behind are taken over at once."""
    from sparklog.cluster import Cluster
    from sparklog.coordination.lease import WriterLease
    from sparklog.coordination.session import resolve_connect
    from sparklog.log.segment import parquet_compression

    config = cluster_config_from_options(options)
    cluster = Cluster(config)
    grants: list[LeaseGrant] = []
    try:
        configs = cluster.topic_config(topic)
        leaders = cluster.replicas.leader_tables(topic)
        if len(leaders) > 1:
            raise SparklogError(
                f"Spark produce to {topic}: its partitions are led by {len(leaders)} different brokers, and a Spark "
                "job commits to one leader table (job-atomic); produce with the light producer, or move leadership "
                "to one broker (`sparklog reassign`)"
            )
        table = leaders[0][0]
        start_offsets: dict[int, int] = {}
        try:
            for partition in range(len(cluster.partitions_of(topic))):
                lease = WriterLease(cluster.zk, topic, partition, owner, config.spark_writer_lease_ms)
                grant = lease.acquire(
                    config.spark_writer_lease_ms, table.fence_epoch(table.snapshot(), partition), adopt=adopt
                )
                grants.append(grant)
                if grant.takeover:
                    table.commit_epoch_marker(partition, grant.epoch)
                # Only now, under the lease (and after any marker), is the log end stable.
                start = table.log_end(table.snapshot(), partition)
                lease.acquire(config.spark_writer_lease_ms, grant.epoch, next_offset=start)
                start_offsets[partition] = start
        except BaseException:
            _release(cluster.zk, topic, owner, grants)
            raise
        return ProducePlan(
            topic=topic,
            owner=owner,
            zk_connect=resolve_connect(config),
            table_log_dir=os.path.dirname(os.path.dirname(table.root)),
            lease_ms=config.spark_writer_lease_ms,
            num_partitions=len(start_offsets),
            max_message_bytes=int(configs["max.message.bytes"]),
            log_append_time=configs["message.timestamp.type"] == "LogAppendTime",
            compression=parquet_compression(str(configs["compression.type"])),
            segment_bytes=int(configs["segment.bytes"]),
            grants=tuple(grants),
            start_offsets=start_offsets,
        )
    finally:
        cluster.close()


def write_task_segments(plan: ProducePlan, iterator: Iterator[object], task: int) -> list[dict[str, int | str]]:
    """A task's part of a produce: normalise its rows, group them by partition, reserve an
    offset range per (task, partition) on the lease counter (a retried task gets the same
    range back), write sized segments; returns them (``SegmentFile.to_dict``)."""
    import pyarrow as pa

    from sparklog.batches import normalise_input
    from sparklog.coordination.lease import reserve_offsets
    from sparklog.coordination.session import ZkSession
    from sparklog.log.append import with_append_time
    from sparklog.log.segment import split_for_size, write_segment

    per_partition: dict[int, list[pa.Table]] = {}
    cursor = task  # where this task's keyless rows start, so tasks don't all favour partition 0
    for batch in iterator:
        table, partitions = normalise_input(batch, plan.num_partitions, plan.topic, plan.max_message_bytes)  # type: ignore[arg-type]
        if partitions is None:
            cursor = _spread_slices(table, plan.num_partitions, cursor, per_partition)
            continue
        for p in set(partitions.tolist()):
            per_partition.setdefault(int(p), []).append(table.filter(pa.array(partitions == p)))
    segments: list[dict[str, int | str]] = []
    if not per_partition:
        return segments
    grants = {g.partition: g for g in plan.grants}
    with ZkSession(plan.zk_connect) as zk:
        for partition, pieces in sorted(per_partition.items()):
            records = pa.concat_tables(pieces)
            if plan.log_append_time:
                records = with_append_time(records, int(time.time() * 1000))
            base = reserve_offsets(zk, grants[partition], str(task), records.num_rows, plan.lease_ms)
            for piece in split_for_size(records, plan.segment_bytes):
                segments.append(write_segment(plan.table_root, partition, base, piece, plan.compression).to_dict())
                base += piece.num_rows
    return segments


def commit_produce(
    plan: ProducePlan,
    messages: "list[SegmentsWritten | None]",
    metadata: dict[str, str],
    app_transactions: Mapping[str, int] | None = None,
) -> dict[int, tuple[int, int]] | None:
    """Commit every task's segments in ONE Delta commit fenced by the lease epochs, then
    release the leases. ``None``: ``app_transactions`` showed the produce was committed
    before; its segments were deleted instead (see ``commit_reserved``)."""
    from sparklog.log.append import commit_reserved
    from sparklog.log.segment import SegmentFile, discard_segments
    from sparklog.log.table import TopicTable

    segments = [SegmentFile.from_dict(s) for m in messages if m is not None for s in m.segments]
    table = TopicTable(plan.table_log_dir, plan.topic)
    ranges = commit_reserved(
        table, plan.epochs, plan.start_offsets, segments, custom_metadata=metadata, app_transactions=app_transactions
    )
    if ranges is None:
        discard_segments(table.root, segments)
    release_leases(plan)
    return ranges


def abort_produce(plan: ProducePlan, messages: "list[SegmentsWritten | None]") -> None:
    """Delete the segments tasks wrote and release the leases."""
    from sparklog.log.segment import SegmentFile, discard_segments

    discard_segments(plan.table_root, [SegmentFile.from_dict(s) for m in messages if m is not None for s in m.segments])
    release_leases(plan)


def release_leases(plan: ProducePlan) -> None:
    from sparklog.coordination.session import ZkSession

    with ZkSession(plan.zk_connect) as zk:
        _release(zk, plan.topic, plan.owner, plan.grants)


def _release(zk: "ZkSession", topic: str, owner: str, grants: "Iterable[LeaseGrant]") -> None:
    from sparklog.coordination.lease import WriterLease

    for grant in grants:
        lease = WriterLease(zk, topic, grant.partition, owner, 0)
        lease.grant = grant
        lease.release(drop_reservations=True)


class SparklogBatchWriter(DataSourceArrowWriter):
    """``df.write.format("sparklog")``: planning takes the leases, tasks write, commit once."""

    def __init__(self, options: Mapping[str, str], schema: StructType, overwrite: bool) -> None:
        topic = check_target(options, schema, overwrite, "mode('append') (or the default)")
        self.plan = plan_produce(options, topic, f"spark-{options.get(JOB_ID_OPTION) or uuid.uuid4().hex}")

    def write(self, iterator: Iterator[object]) -> "SegmentsWritten":  # type: ignore[override]
        task = task_id()
        return SegmentsWritten(task=task, segments=write_task_segments(self.plan, iterator, task))

    def commit(self, messages: "list[SegmentsWritten | None]") -> None:  # type: ignore[override]
        commit_produce(self.plan, messages, {"sparklog.job": self.plan.owner, "sparklog.operation": "SPARK PRODUCE"})

    def abort(self, messages: "list[SegmentsWritten | None]") -> None:  # type: ignore[override]
        abort_produce(self.plan, messages)


def task_id() -> int:
    """The Spark partition id of the running task (0 outside Spark)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    return context.partitionId() if context else 0


def _spread_slices(table: object, num_partitions: int, cursor: int, out: dict[int, list[object]]) -> int:
    """Keyless rows: cut the batch into ``num_partitions`` contiguous, zero-copy slices of
    equal size (±1) for successive partitions; returns the next cursor. The partitions that
    get the extra row rotate, so counts stay even across batches."""
    rows = table.num_rows  # type: ignore[attr-defined]
    size, extra = divmod(rows, num_partitions)
    start = 0
    for k in range(num_partitions):
        length = size + (1 if k < extra else 0)
        if length:
            out.setdefault((cursor + k) % num_partitions, []).append(table.slice(start, length))  # type: ignore[attr-defined]
        start += length
    return (cursor + extra) % num_partitions


def job_ranges(history: list[dict[str, object]], owner: str) -> dict[int, tuple[int, int]] | None:
    """Find a job's committed ranges in Delta history (commitInfo carries the job id)."""
    for entry in history:
        if entry.get("sparklog.job") == owner:
            return {int(p): (int(a), int(b)) for p, (a, b) in json.loads(str(entry.get("sparklog.ranges", "{}"))).items()}
    return None
