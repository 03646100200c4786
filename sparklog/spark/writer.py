"""Spark produce: one Spark job (or one streaming micro-batch) = one produce, atomic per leader table.

The steps, as functions shared by the batch writer (this module), the streaming writer
(:mod:`sparklog.spark.stream_writer`) and ``consume_into`` (:mod:`sparklog.spark.exactly_once`).
PySpark runs each in a separate Python worker, none of them the user's process:

* :func:`plan_produce` (planning, driver side): takes the write lease of *every* partition
  of the topic (input arrives arbitrarily partitioned), records each partition's leader
  table and leader epoch, commits epoch markers (on the leader table) where it took over a
  stale lease, and notes each partition's log end there. The resulting
  :class:`ProducePlan` is pickled into every task;
* :func:`write_task_segments` (each task, on executors): normalises its rows, groups them
  by partition, takes its place after the lower tasks' records
  (:class:`~sparklog.metadata.task_order.TaskOrder`: a retried task gets the same place
  back), writes sized segments under the partition's leader table;
* :func:`commit_produce` (driver side): puts every task's segments in task order (moving
  the files of tasks that could only guess their place), and per leader table checks they
  tile each partition from its log end with no gap and commits them in ONE Delta commit
  fenced by the lease and leader epochs (plus any app transactions, e.g. a streaming
  query's batch id, which go into EVERY leader table's commit), then releases the leases;
* :func:`abort_produce`: deletes the written segments no commit made live, releases the leases.

Invariants: the offsets of one produce are contiguous per partition and follow the
DataFrame's order (task index, then row order: the same input gets the same offsets, a
time-ordered DataFrame gives time-ordered partitions); each leader table's part becomes
visible in one Delta commit, or not at all. A topic whose partitions all have
one leader (every one-broker cluster) therefore gets whole-job atomicity; with several
leader brokers a job makes one commit per leader table (Delta has no transaction across
tables), and a failure between two of them leaves the earlier ones committed. Producers
that pass app transactions (the streaming sink, ``consume_into``) make that recoverable:
each table's commit checks them on its own snapshot, so a replay commits exactly the
tables that are missing (docs/design-notes.md, "Spark writes to multi-leader topics").
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

if TYPE_CHECKING:
    from sparklog.log.segment import SegmentFile
    from sparklog.log.table import TopicTable
    from sparklog.metadata.lease import LeaseGrant
    from sparklog.metadata.session import ZkSession

from sparklog import clock
from sparklog.errors import ConfigError, SchemaMismatchError, SparklogError, StorageError
from sparklog.model.storage_location import StorageSettings
from sparklog.spark.options import cluster_config_from_options

__all__ = [
    "JOB_ID_OPTION",
    "ProducePlan",
    "SegmentsWritten",
    "SparklogBatchWriter",
    "abort_produce",
    "check_target",
    "commit_produce",
    "committed_ranges",
    "job_ranges",
    "plan_produce",
    "release_leases",
    "task_id",
    "write_task_segments",
]

JOB_ID_OPTION = "sparklog.job.id"
# How long a task that knows its counts waits for a lower task that is not running (not yet
# scheduled, or being retried) before it writes at guessed offsets the commit then moves.
UNSTARTED_TASK_WAIT_S = 30.0
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
        raise SchemaMismatchError(
            f"Cannot write to topic {topic}: required column 'value' is missing (columns: {names})"
        )
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
    leaders: dict[int, tuple[str, int]]  # partition -> (its leader's log dir, leader epoch) when planned
    lease_ms: int
    num_partitions: int
    max_message_bytes: int
    log_append_time: bool
    compression: str
    segment_bytes: int
    grants: tuple[LeaseGrant, ...]
    start_offsets: dict[int, int]
    storage: tuple[tuple[str, str], ...] = ()  # the cluster's storage.* settings (StorageSettings.values)

    def table(self, log_dir: str) -> TopicTable:
        """The topic's table on ``log_dir`` (one of :attr:`log_dirs`)."""
        from sparklog.log.table import TopicTable

        return TopicTable(log_dir, self.topic, StorageSettings(self.storage))

    def table_of(self, partition: int) -> TopicTable:
        """Where ``partition``'s segments go: the topic's table on its leader's log dir."""
        return self.table(self.leaders[partition][0])

    @property
    def log_dirs(self) -> list[str]:
        """The leader brokers' log dirs, one per leader table, in a fixed order."""
        return sorted({log_dir for log_dir, _epoch in self.leaders.values()})

    def partitions_led_from(self, log_dir: str) -> list[int]:
        return sorted(p for p, (d, _epoch) in self.leaders.items() if d == log_dir)

    @property
    def epochs(self) -> dict[int, int]:
        return {g.partition: g.epoch for g in self.grants}

    @property
    def leader_epochs(self) -> dict[int, int]:
        return {p: epoch for p, (_d, epoch) in self.leaders.items()}


def check_target(options: Mapping[str, str], schema: StructType, overwrite: bool, append_hint: str) -> str:
    """The validated target topic of a write; fails before anything is touched."""
    from sparklog.model.topic import validate_topic_name

    if overwrite:
        raise ConfigError(
            f"sparklog topics are append-only logs, which a write cannot overwrite: use {append_hint} "
            "(as Spark's Kafka sink does); to empty a topic, use `sparklog delete-records` or delete "
            "and re-create it"
        )
    topic = options.get("topic")
    if not topic:
        raise ConfigError("Option 'topic' is required to write to sparklog")
    topic = validate_topic_name(topic)
    check_input_schema(schema, topic)
    return topic


def plan_produce(options: Mapping[str, str], topic: str, owner: str, adopt: bool = False) -> ProducePlan:
    """Take the write lease of *every* partition of ``topic`` for ``owner`` (input arrives
    arbitrarily partitioned), note each partition's leader table and leader epoch, commit
    epoch markers where a stale lease was taken over, and note each partition's log end
    there. ``adopt``: ``owner`` is a stable id, and leases a crashed
    earlier run of it left behind are taken over at once."""
    from sparklog.log.segment import parquet_compression
    from sparklog.metadata.lease import WriterLease
    from sparklog.metadata.session import resolve_connect
    from sparklog.runtime.replica_manager import ReplicaManager

    config = cluster_config_from_options(options)
    replicas = ReplicaManager.connect(config)
    grants: list[LeaseGrant] = []
    try:
        configs = replicas.topic_config(topic)
        leaders: dict[int, tuple[str, int]] = {}
        start_offsets: dict[int, int] = {}
        try:
            for partition in replicas.partitions_of(topic):
                # One state read gives leader and epoch together (an election in between
                # can't pair one leader's table with another's epoch).
                state = replicas.leader(topic, partition)
                table = replicas.replica_table(topic, state.leader)
                lease = WriterLease(replicas.zk, topic, partition, owner, config.spark_writer_lease_ms)
                grant = lease.acquire(
                    config.spark_writer_lease_ms, table.fence_epoch(table.snapshot(), partition), adopt=adopt
                )
                grants.append(grant)
                if grant.takeover:
                    table.commit_epoch_marker(partition, grant.epoch)
                # Only now, under the lease (and after any marker), is the log end stable.
                start_offsets[partition] = table.log_end(table.snapshot(), partition)
                leaders[partition] = (os.path.dirname(os.path.dirname(table.root)), state.leader_epoch)
        except BaseException:
            _release(replicas.zk, topic, owner, grants)
            raise
        return ProducePlan(
            topic=topic,
            owner=owner,
            zk_connect=resolve_connect(config),
            leaders=leaders,
            lease_ms=config.spark_writer_lease_ms,
            num_partitions=len(start_offsets),
            max_message_bytes=int(configs["max.message.bytes"]),
            log_append_time=configs["message.timestamp.type"] == "LogAppendTime",
            compression=parquet_compression(str(configs["compression.type"]), _producer_codec(options)),
            segment_bytes=int(configs["segment.bytes"]),
            grants=tuple(grants),
            start_offsets=start_offsets,
            storage=config.storage,
        )
    finally:
        replicas.close()


def _producer_codec(options: Mapping[str, str]) -> str:
    """The job's own ``compression.type``, which a topic with ``compression.type=producer``
    keeps: ``kafka.compression.type`` as Spark's Kafka sink takes it, or ``compression.type``;
    ``none`` (uncompressed) by default, as Kafka's producer."""
    from sparklog.config import PRODUCER_CONFIGS

    raw = options.get("kafka.compression.type", options.get("compression.type"))
    return "none" if raw is None else str(PRODUCER_CONFIGS["compression.type"].coerce(str(raw).strip().lower()))


def write_task_segments(
    plan: ProducePlan, iterator: Iterator[object], task: int, unstarted_wait_s: float = UNSTARTED_TASK_WAIT_S
) -> list[dict[str, int | str]]:
    """A task's part of a produce: normalise its rows, group them by partition, take its
    place after the records of every lower task (a retried task gets the same place back;
    ``unstarted_wait_s``: how long a lower task that is not running is waited for, see
    :mod:`sparklog.metadata.task_order`), write sized segments; returns them
    (``SegmentFile.to_dict``)."""
    import pyarrow as pa

    from sparklog.log.append import with_append_time
    from sparklog.log.segment import split_for_size, write_segment
    from sparklog.metadata.session import ZkSession
    from sparklog.metadata.task_order import TaskOrder
    from sparklog.model.batches import normalise_input

    per_partition: dict[int, list[pa.Table]] = {}
    cursor = task  # where this task's keyless rows start, so tasks don't all favour partition 0
    # Running before reading the input: a higher task that is done first waits for this one.
    with ZkSession(plan.zk_connect) as zk, TaskOrder(zk, plan.grants, task, plan.lease_ms) as order:
        for batch in iterator:
            table, partitions = normalise_input(batch, plan.num_partitions, plan.topic, plan.max_message_bytes)
            if partitions is None:
                cursor = _spread_slices(table, plan.num_partitions, cursor, per_partition)
                continue
            for p in set(partitions.tolist()):
                per_partition.setdefault(int(p), []).append(table.filter(pa.array(partitions == p)))
        records = {p: pa.concat_tables(pieces) for p, pieces in per_partition.items()}
        placement = order.place({p: t.num_rows for p, t in records.items()}, plan.start_offsets, unstarted_wait_s)
    segments: list[dict[str, int | str]] = []
    for partition, part in sorted(records.items()):
        if plan.log_append_time:
            part = with_append_time(part, clock.now_ms())
        base = placement.bases[partition]
        for piece in split_for_size(part, plan.segment_bytes):
            segments.append(
                write_segment(plan.table_of(partition).storage, partition, base, piece, plan.compression).to_dict()
            )
            base += piece.num_rows
    return segments


def commit_produce(
    plan: ProducePlan,
    messages: Sequence[SegmentsWritten | None],
    metadata: dict[str, str],
    app_transactions: Mapping[str, int] | None = None,
) -> dict[int, tuple[int, int]] | None:
    """Commit every task's segments, ONE Delta commit per leader table fenced by the lease
    and leader epochs, then release the leases; returns the ranges committed by this call.

    Every partition's records go in task order from the log end at planning: the files of
    a task whose place differs (it went ahead at guessed offsets) are rewritten first.
    Without ``app_transactions`` only tables with segments are committed to. With them,
    every leader table of the plan gets a commit carrying them (empty where no row went):
    the table then remembers the produce, so any replay (even one whose rows land in other
    partitions) is recognised there. A table already holding them is skipped and its
    segments deleted (``commit_reserved`` returned None): a replay after a failure between
    two tables' commits completes the missing tables only. ``None``: every table had them
    (the whole produce was committed before). A failure after some tables committed is
    re-raised with those tables named; ``abort_produce`` keeps their files.
    """
    from sparklog.log.reserved_commit import commit_reserved
    from sparklog.log.segment import discard_segments, shift_segment

    by_dir = _in_task_order(plan, messages)
    epochs, leader_epochs = plan.epochs, plan.leader_epochs
    targets = plan.log_dirs if app_transactions else [d for d in plan.log_dirs if d in by_dir]
    committed: dict[int, tuple[int, int]] = {}
    done: list[str] = []  # tables this call committed to
    skipped = 0  # tables that held the app transactions already
    for log_dir in targets:
        table = plan.table(log_dir)
        partitions = plan.partitions_led_from(log_dir)
        segments: list[SegmentFile] = []
        moved: list[SegmentFile] = []
        try:
            for segment, shift in by_dir.get(log_dir, []):
                if shift:
                    segment = shift_segment(table.storage, segment, shift)
                    moved.append(segment)
                segments.append(segment)
            ranges = commit_reserved(
                table,
                {p: epochs[p] for p in partitions},
                {p: plan.start_offsets[p] for p in partitions},
                segments,
                # How many files the commit had to move: tasks that went ahead of a lower one.
                custom_metadata={**metadata, "sparklog.moved": str(len(moved))} if moved else metadata,
                app_transactions=app_transactions,
                leader_epochs={p: leader_epochs[p] for p in partitions},
            )
        except BaseException as exc:
            _discard_unless_live(table, moved)
            if not done or not isinstance(exc, SparklogError):
                raise
            raise type(exc)(
                f"{exc}. The produce is atomic per leader table: the part for partitions "
                f"{sorted(committed)} (leader tables under {done}) was committed before this failure"
                + ("; replaying it commits only the missing tables" if app_transactions else "")
            ) from exc
        if ranges is None:
            discard_segments(table.storage, segments)
            skipped += 1
        else:
            committed.update(ranges)
            done.append(log_dir)
    release_leases(plan)
    return None if targets and skipped == len(targets) else committed


def abort_produce(plan: ProducePlan, messages: Sequence[SegmentsWritten | None]) -> None:
    """Delete the segments tasks wrote, except those a commit made live (Spark aborts also
    after a commit that failed past its first leader table, or after the commit landed and
    a later step failed: committed files must stay), and release the leases."""

    for log_dir, segments in _segments_by_table(plan, messages).items():
        _discard_unless_live(plan.table(log_dir), segments)
    release_leases(plan)


def _discard_unless_live(table: TopicTable, segments: list[SegmentFile]) -> None:
    from sparklog.log.segment import discard_segments

    if not segments:
        return
    try:
        live = {f.path for f in table.files(table.snapshot(), {s.partition for s in segments})}
    except StorageError:
        return  # cannot tell: keep them (an orphan file is harmless, a lost one is not)
    discard_segments(table.storage, [s for s in segments if s.path not in live])


def _in_task_order(
    plan: ProducePlan, messages: Sequence[SegmentsWritten | None]
) -> dict[str, list[tuple[SegmentFile, int]]]:
    """Per leader table's log dir, every segment with the offset shift that puts it in task
    order: each partition's records by task index, then row order, from its log end at
    planning. The shift is 0 for every task that found its place while running."""
    from sparklog.log.segment import SegmentFile

    next_base = dict(plan.start_offsets)
    placed: dict[str, list[tuple[SegmentFile, int]]] = {}
    for message in sorted((m for m in messages if m is not None), key=lambda m: m.task):
        per_partition: dict[int, list[SegmentFile]] = {}
        for segment in (SegmentFile.from_dict(s) for s in message.segments):
            per_partition.setdefault(segment.partition, []).append(segment)
        for partition, segments in sorted(per_partition.items()):
            segments.sort(key=lambda s: s.base_offset)
            shift = next_base[partition] - segments[0].base_offset
            placed.setdefault(plan.leaders[partition][0], []).extend((s, shift) for s in segments)
            next_base[partition] += sum(s.num_records for s in segments)
    return placed


def _segments_by_table(plan: ProducePlan, messages: Sequence[SegmentsWritten | None]) -> dict[str, list[SegmentFile]]:
    from sparklog.log.segment import SegmentFile

    grouped: dict[str, list[SegmentFile]] = {}
    for segment in (SegmentFile.from_dict(s) for m in messages if m is not None for s in m.segments):
        grouped.setdefault(plan.leaders[segment.partition][0], []).append(segment)
    return grouped


def release_leases(plan: ProducePlan) -> None:
    from sparklog.metadata.session import ZkSession

    with ZkSession(plan.zk_connect) as zk:
        _release(zk, plan.topic, plan.owner, plan.grants)


def _release(zk: ZkSession, topic: str, owner: str, grants: Iterable[LeaseGrant]) -> None:
    from sparklog.metadata.lease import WriterLease

    for grant in grants:
        lease = WriterLease(zk, topic, grant.partition, owner, 0)
        lease.grant = grant
        lease.release(drop_reservations=True)


class SparklogBatchWriter(DataSourceArrowWriter):
    """``df.write.format("sparklog")``: planning takes the leases, tasks write, one commit per
    leader table (no app transactions: a failure between two tables is not replayable, the
    error names what was committed)."""

    def __init__(self, options: Mapping[str, str], schema: StructType, overwrite: bool) -> None:
        topic = check_target(options, schema, overwrite, '.mode("append")')
        self.plan = plan_produce(options, topic, f"spark-{options.get(JOB_ID_OPTION) or uuid.uuid4().hex}")

    def write(self, iterator: Iterator[object]) -> SegmentsWritten:
        task = task_id()
        return SegmentsWritten(task=task, segments=write_task_segments(self.plan, iterator, task))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        commit_produce(
            self.plan,
            segments_written(messages),
            {"sparklog.job": self.plan.owner, "sparklog.operation": "SPARK PRODUCE"},
        )

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        abort_produce(self.plan, segments_written(messages))


def segments_written(messages: Sequence[WriterCommitMessage | None]) -> list[SegmentsWritten | None]:
    """The tasks' reports, each a :class:`SegmentsWritten` (None for a task that failed)."""
    for message in messages:
        if message is not None and not isinstance(message, SegmentsWritten):
            raise StorageError(f"A Spark task reported {type(message).__name__}, not what sparklog's tasks report")
    return [m if isinstance(m, SegmentsWritten) else None for m in messages]


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
            return {
                int(p): (int(a), int(b)) for p, (a, b) in json.loads(str(entry.get("sparklog.ranges", "{}"))).items()
            }
    return None


def committed_ranges(tables: Iterable[TopicTable], owner: str, depth: int = 50) -> dict[int, tuple[int, int]]:
    """A job's committed ranges over the tables it may have committed to (one commit per
    leader table): the union of :func:`job_ranges` of each table's recent history."""
    found: dict[int, tuple[int, int]] = {}
    for table in tables:
        if table.exists():
            found.update(job_ranges(table.snapshot().history(depth), owner) or {})
    return found
