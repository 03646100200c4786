"""Batch writes to a topic: one Spark job = one atomic produce with contiguous offsets.

Where each step runs (PySpark runs each in a separate Python worker, none of them the
user's process):

* ``SparklogBatchWriter.__init__`` (planning, driver side): validates the topic and the
  input schema, takes the write lease of *every* partition of the topic (input arrives
  arbitrarily partitioned), commits epoch markers where it took over a stale lease, and
  seeds each lease's offset counter with the partition's log end;
* ``write`` (each task, on executors): normalises its rows, groups them by partition,
  reserves an offset range per (task, partition) by compare-and-set on the lease counter
  (a retried task gets the same range back), writes sized segments, returns their list;
* ``commit`` (driver side): checks the segments tile the reserved ranges with no gap,
  commits them in ONE Delta commit fenced by the lease epochs, releases the leases;
* ``abort``: deletes the written segments and releases the leases.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

if TYPE_CHECKING:
    from sparklog.coordination.session import ZkSession

from sparklog.errors import ConfigError, SchemaMismatchError
from sparklog.spark.options import cluster_config_from_options

__all__ = ["SparklogBatchWriter", "SegmentsWritten", "JOB_ID_OPTION", "job_ranges"]

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


class SparklogBatchWriter(DataSourceArrowWriter):
    def __init__(self, options: Mapping[str, str], schema: StructType, overwrite: bool) -> None:
        from sparklog.cluster import Cluster
        from sparklog.coordination.lease import WriterLease
        from sparklog.coordination.session import resolve_connect
        from sparklog.log.segment import parquet_compression
        from sparklog.topic import validate_topic_name

        if overwrite:
            raise ConfigError("Topics are append-only: use mode('append') (or the default) to write to sparklog")
        topic = options.get("topic")
        if not topic:
            raise ConfigError("Option 'topic' is required to write to sparklog")
        self.topic = validate_topic_name(topic)
        check_input_schema(schema, self.topic)
        config = cluster_config_from_options(options)
        self.owner = f"spark-{options.get(JOB_ID_OPTION) or uuid.uuid4().hex}"
        self.lease_ms = config.spark_writer_lease_ms
        cluster = Cluster(config)
        try:
            self.zk_connect = resolve_connect(config)
            configs = cluster.topic_config(self.topic)
            self.num_partitions = len(cluster.partitions_of(self.topic))
            self.max_message_bytes = int(configs["max.message.bytes"])
            self.log_append_time = configs["message.timestamp.type"] == "LogAppendTime"
            self.compression = parquet_compression(str(configs["compression.type"]))
            self.segment_bytes = int(configs["segment.bytes"])
            table = cluster.table(self.topic)
            self.table_log_dir = os.path.dirname(os.path.dirname(table.root))
            self.grants = []
            self.start_offsets: dict[int, int] = {}
            try:
                for partition in range(self.num_partitions):
                    lease = WriterLease(cluster.zk, self.topic, partition, self.owner, config.spark_writer_lease_ms)
                    grant = lease.acquire(config.spark_writer_lease_ms, table.fence_epoch(table.snapshot(), partition))
                    self.grants.append(grant)
                    if grant.takeover:
                        table.commit_epoch_marker(partition, grant.epoch)
                    # Only now, under the lease (and after any marker), is the log end stable.
                    start = table.log_end(table.snapshot(), partition)
                    lease.acquire(config.spark_writer_lease_ms, grant.epoch, next_offset=start)
                    self.start_offsets[partition] = start
            except BaseException:
                self._release_all(cluster.zk)
                raise
        finally:
            cluster.close()

    # -- tasks ---------------------------------------------------------------------------
    def write(self, iterator: Iterator[object]) -> SegmentsWritten:  # type: ignore[override]
        import pyarrow as pa
        from pyspark import TaskContext

        from sparklog.batches import normalise_input
        from sparklog.coordination.lease import reserve_offsets
        from sparklog.coordination.session import ZkSession
        from sparklog.log.append import with_append_time
        from sparklog.log.segment import split_for_size, write_segment
        from sparklog.log.table import TopicTable

        context = TaskContext.get()
        task = context.partitionId() if context else 0
        per_partition: dict[int, list[pa.Table]] = {}
        cursor = task  # where this task's keyless rows start, so tasks don't all favour partition 0
        for batch in iterator:
            table, partitions = normalise_input(batch, self.num_partitions, self.topic, self.max_message_bytes)  # type: ignore[arg-type]
            if partitions is None:
                cursor = _spread_slices(table, self.num_partitions, cursor, per_partition)
                continue
            for p in set(partitions.tolist()):
                per_partition.setdefault(int(p), []).append(table.filter(pa.array(partitions == p)))
        message = SegmentsWritten(task=task)
        if not per_partition:
            return message
        target = TopicTable(self.table_log_dir, self.topic)
        grants = {g.partition: g for g in self.grants}
        with ZkSession(self.zk_connect) as zk:
            for partition, pieces in sorted(per_partition.items()):
                records = pa.concat_tables(pieces)
                if self.log_append_time:
                    records = with_append_time(records, int(time.time() * 1000))
                base = reserve_offsets(zk, grants[partition], str(task), records.num_rows, self.lease_ms)
                for piece in split_for_size(records, self.segment_bytes):
                    seg = write_segment(target.root, partition, base, piece, self.compression)
                    message.segments.append(seg.to_dict())
                    base += piece.num_rows
        return message

    # -- driver side ---------------------------------------------------------------------
    def commit(self, messages: list[SegmentsWritten | None]) -> None:  # type: ignore[override]
        from sparklog.log.append import commit_reserved
        from sparklog.log.segment import SegmentFile
        from sparklog.log.table import TopicTable

        segments = [SegmentFile.from_dict(s) for m in messages if m is not None for s in m.segments]
        table = TopicTable(self.table_log_dir, self.topic)
        commit_reserved(
            table,
            {g.partition: g.epoch for g in self.grants},
            self.start_offsets,
            segments,
            custom_metadata={"sparklog.job": self.owner, "sparklog.operation": "SPARK PRODUCE"},
        )
        self._release_all()

    def abort(self, messages: list[SegmentsWritten | None]) -> None:  # type: ignore[override]
        root = os.path.join(self.table_log_dir, "topics", self.topic)
        for message in messages:
            for seg in message.segments if message is not None else []:
                try:
                    os.remove(os.path.join(root, str(seg["path"])))
                except FileNotFoundError:
                    pass
        self._release_all()

    def _release_all(self, zk: "ZkSession | None" = None) -> None:
        """Release every lease of the job (on ``zk``, else on a session of its own)."""
        from sparklog.coordination.lease import WriterLease
        from sparklog.coordination.session import ZkSession

        session = zk or ZkSession(self.zk_connect).start()
        try:
            for grant in self.grants:
                lease = WriterLease(session, self.topic, grant.partition, self.owner, 0)
                lease.grant = grant
                lease.release(drop_reservations=True)
        finally:
            if zk is None:
                session.close()


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
