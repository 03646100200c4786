"""Exactly-once processing of a consumer group's records into a topic or a Delta table.

:func:`consume_into` transforms the group's next records (as :func:`sparklog.spark.group_batch`
reads them) and writes the output AND the input end offsets in ONE Delta commit of the
output (a plain Delta table, or each leader table of a sparklog topic), as application
transactions ``sparklog.input/<group>/<topic>/<partition>`` = next offset, and
``sparklog.inputtopic/<group>/<topic>`` = the input topic's incarnation (offsets stored for a
topic since deleted are ignored: a re-created topic is read from its start, DESIGN §8). A run
starts from max(those, ``__consumer_offsets``) and afterwards mirrors its end offsets to
``__consumer_offsets``. An output topic led by several brokers gets one commit per leader
table, each carrying the input offsets; "those" is then the lowest value over the leader
tables (a table without one counts lowest), which never skips input. When a table is ahead
of that start (a run stopped between two tables' commits), the run instead replays exactly
the interrupted range: the tables ahead skip it, the others get their part.

Invariants (argued in ``docs/design-notes.md``, "Spark group consumption and exactly-once"):
a topic output's write leases are taken BEFORE the stored input offsets are read (under the
group's stable lease owner, so a rerun after a crash adopts the dead run's leases at once
and fences it); the output commit lands only on a snapshot whose stored input offsets are
still those the run started from (checked per leader table); files of a commit that does
not land are deleted.

Where code runs: the driver plans and verifies; Spark tasks write segments or Parquet files
through a private Python data source (Arrow batches, no pandas) whose ``commit``/``abort``
run in a Python worker on the driver host.
"""

from __future__ import annotations

import base64
import json
import logging
import pickle
import uuid
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, DataSourceWriter
from pyspark.sql.types import StructType

from sparklog.errors import ConfigError, GroupError, StorageError, TopicNotFoundError
from sparklog.log.delta_sink import (
    DataFile,
    DeltaSink,
    check_input_offsets,
    input_app_id,
    input_topic_app_id,
    is_input_offset_app_id,
    write_task_files,
)
from sparklog.spark.group_batch import (
    Ranges,
    TopicPartition,
    advances,
    commit_advances,
    connect_group,
    input_partitions,
    read_ranges_df,
    require_inactive_group,
    resolve_ranges,
)
from sparklog.spark.task_errors import reraise_sparklog_error
from sparklog.spark.writer import (
    ProducePlan,
    SegmentsWritten,
    abort_produce,
    check_target,
    commit_produce,
    committed_ranges,
    plan_produce,
    release_leases,
    task_id,
    write_task_segments,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from sparklog.group.coordinator import GroupCoordinator
    from sparklog.runtime.replica_manager import ReplicaManager

__all__ = ["ConsumeIntoResult", "append_once", "consume_into", "new_incarnations", "of_current_topics"]

log = logging.getLogger("sparklog.spark")


# -- consume_into: the output side, shipped into the Spark job -----------------------------
@dataclass(frozen=True)
class _Output(DataSourceArrowWriter):
    """One run's output, and the Spark writer for it (pickled into a data source option)."""

    run_id: str
    plan: ProducePlan | None = None  # output topic: the write leases held
    delta_root: str = ""  # or the output Delta table
    delta_schema: bytes = b""  # ... and the Arrow schema of its data files
    transactions: dict[str, int] = field(default_factory=dict)  # input app id -> end offset
    # input app id -> stored at start: in the Delta table, or in every leader table of a topic
    # output that has no entry of its own in expected_tables (leader log dir -> its values).
    expected: dict[str, int | None] = field(default_factory=dict)
    expected_tables: dict[str, dict[str, int | None]] = field(default_factory=dict)
    metadata: dict[str, str] = field(default_factory=dict)

    def stored(self, app_ids: Iterable[str]) -> dict[str, dict[str, int | None]]:
        """The stored version of each app id, per output table: the Delta table's root, or
        each leader table of the output topic by its log dir (the plan's leaders)."""
        ids = list(app_ids)
        if self.plan is None:
            return {self.delta_root: DeltaSink(self.delta_root).app_versions(ids)}
        found: dict[str, dict[str, int | None]] = {}
        for log_dir in self.plan.log_dirs:
            table = self.plan.table(log_dir)
            dt = table.snapshot()
            found[log_dir] = {app_id: table.app_version(dt, app_id) for app_id in ids}
        return found

    def landed(self) -> bool:
        """Did this run's commit land in every output table (its input offsets reached the ends)?
        Only the offsets say so: a table that already held them (a partial run completed) is
        skipped by the commit and keeps no incarnation, which then counts as current."""
        offsets = {a: v for a, v in self.transactions.items() if is_input_offset_app_id(a)}
        return all(
            all(values[a] is not None and values[a] >= v for a, v in offsets.items())  # type: ignore[operator]
            for values in self.stored(offsets).values()
        )

    def write(self, batches: Iterator[Any]) -> SegmentsWritten:
        task = task_id()
        if self.plan is not None:
            return SegmentsWritten(task, write_task_segments(self.plan, batches, task))
        files = write_task_files(self.delta_root, self.file_schema(), batches, f"{self.run_id}-{task}")
        return SegmentsWritten(task, [f.to_dict() for f in files])

    def commit(self, messages: list[SegmentsWritten | None]) -> None:  # type: ignore[override]
        if self.plan is None:
            files = [DataFile.from_dict(d) for m in messages if m is not None for d in m.segments]
            DeltaSink(self.delta_root).commit(
                files, self.file_schema(), self.transactions, self.expected, self.metadata
            )
            return
        ids = set(self.expected).union(*self.expected_tables.values())
        for log_dir, values in self.stored(ids).items():
            expected = self.expected_tables.get(log_dir, self.expected)
            check_input_offsets(f"topic {self.plan.topic} (leader table under {log_dir})", values, expected)
        # Tables already holding the input ends (a partial commit being completed) are
        # skipped by commit_produce; None means every table had them.
        if commit_produce(self.plan, messages, self.metadata, self.transactions) is None:
            raise StorageError(
                f"Topic {self.plan.topic} already holds the input offsets of run {self.run_id}; nothing committed"
            )

    def abort(self, messages: list[SegmentsWritten | None]) -> None:  # type: ignore[override]
        # Spark aborts also when commit() failed AFTER a Delta commit landed (e.g. while
        # releasing the leases, or at a second leader table): both discards keep live files.
        if self.plan is None:
            DeltaSink(self.delta_root).discard(
                (DataFile.from_dict(d) for m in messages if m is not None for d in m.segments), prefix=self.run_id
            )
        else:
            abort_produce(self.plan, messages)

    def file_schema(self) -> pa.Schema:
        return pa.ipc.read_schema(pa.py_buffer(self.delta_schema))


class _ConsumeIntoSource(DataSource):
    """Internal write-only data source: Spark hands each task its Arrow batches (no pandas)."""

    @classmethod
    def name(cls) -> str:
        return "sparklog_consume_into"

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return pickle.loads(base64.b64decode(self.options["output"]))  # an _Output


_REGISTERED: weakref.WeakSet[SparkSession] = weakref.WeakSet()  # sessions that know the data source


def _run_job(spark: SparkSession, df: DataFrame, output: _Output) -> None:
    """Run the write; a failure is re-raised as the sparklog error behind it when there is one."""
    if spark not in _REGISTERED:
        spark.dataSource.register(_ConsumeIntoSource)
        _REGISTERED.add(spark)
    encoded = base64.b64encode(pickle.dumps(output)).decode("ascii")
    try:
        df.write.format(_ConsumeIntoSource.name()).option("output", encoded).mode("append").save()
    except Exception as exc:
        if output.landed():
            log.warning("run %s: the Spark job reported an error after its commit landed: %s", output.run_id, exc)
            if output.plan is not None:
                release_leases(output.plan)
            return
        reraise_sparklog_error(exc)
        raise
    if not output.landed():
        raise StorageError(
            f"Run {output.run_id}: the Spark job finished but its commit is not in the output; nothing committed"
        )


# -- consume_into: the driver --------------------------------------------------------------
@dataclass(frozen=True)
class ConsumeIntoResult:
    """What one :func:`consume_into` run did."""

    group_id: str
    input_ranges: Ranges  # (topic, partition) -> [start, end) consumed
    output_ranges: dict[int, tuple[int, int]]  # output topic: partition -> [start, end) written
    delta_version: int | None  # output Delta table: the version committed
    mirrored: bool  # end offsets also committed to __consumer_offsets

    @property
    def records(self) -> int:
        """Input records consumed (0: nothing was committed)."""
        return sum(end - start for start, end in self.input_ranges.values())


def consume_into(
    spark: SparkSession,
    group_id: str,
    topics: str | Iterable[str],
    transform: Callable[[DataFrame], DataFrame] | None = None,
    *,
    output_topic: str | None = None,
    output_path: str | None = None,
    **options: Any,
) -> ConsumeIntoResult:
    """Exactly-once: ``transform(df)`` of the group's next records of ``topics``, written to
    ``output_topic`` (Kafka sink columns) or the Delta table at ``output_path`` (any columns;
    created if missing) in ONE Delta commit with the input end offsets. Call it again (e.g.
    on a schedule) to continue; after any crash, just run it again.

    ``transform`` defaults to the records as they are (for a topic: ``key``, ``value`` and,
    with ``includeHeaders``, ``headers``); it must be deterministic (a retried Spark task must
    produce the same rows) and may be called more than once (first on an empty frame, to
    validate the output schema before anything changes). Options are :func:`consume`'s.
    """
    if (output_topic is None) == (output_path is None):
        raise ConfigError("consume_into needs exactly one of output_topic= or output_path=")
    opts, settings, groups = connect_group(spark, options)
    with groups.replicas:
        partitions = input_partitions(groups, group_id, topics)
        require_inactive_group(groups, group_id)
        transform = transform or _default_transform(output_topic is not None, settings.include_headers)
        probe = _apply(
            transform, read_ranges_df(spark, groups, {}, settings)
        ).schema  # validate before changing anything
        run_id = f"consume-{group_id}-{uuid.uuid4().hex[:12]}"
        output = _open_output(groups.replicas, opts, group_id, run_id, partitions, probe, output_topic, output_path)
        try:
            ids = {tp: input_app_id(group_id, *tp) for tp in partitions}
            incarnations = groups.replicas.topic_incarnations({t for t, _p in partitions})
            topic_ids = {t: input_topic_app_id(group_id, t) for t in incarnations}
            stored = output.stored([*ids.values(), *topic_ids.values()])
            current = of_current_topics(stored, ids, topic_ids, incarnations)
            lowest, highest = _stored_bounds(current, ids)
            ranges = resolve_ranges(groups, group_id, partitions, settings, lowest)
            completing = _completing_ranges(ranges, lowest, highest, current, ids)
            if completing is not None:
                log.warning(
                    "group %s: completing an earlier run that committed to only some leader tables of %s: %s",
                    group_id,
                    output_topic,
                    completing,
                )
                ranges = completing
                ends = {tp: end for tp, (start, end) in ranges.items() if end > start}
            else:
                ends = advances(ranges, lowest)
            if not any(end > start for start, end in ranges.values()):
                if output.plan is not None:
                    release_leases(output.plan)
                return ConsumeIntoResult(group_id, ranges, {}, None, _mirror(groups, group_id, ranges))
            df = _apply(transform, read_ranges_df(spark, groups, ranges, settings))
            output = replace(
                output,
                delta_schema=_file_schema(output, df.schema),
                transactions={
                    **{ids[tp]: end for tp, end in ends.items()},
                    **new_incarnations(stored, topic_ids, incarnations, ids, ends),
                },
                expected=stored[output.delta_root] if output.plan is None else {},
                expected_tables={} if output.plan is None else stored,
                metadata={
                    "sparklog.job": run_id,
                    "sparklog.operation": "CONSUME INTO",
                    "sparklog.group": group_id,
                    "sparklog.input": json.dumps({f"{t}-{p}": list(r) for (t, p), r in sorted(ranges.items())}),
                },
            )
            _run_job(spark, df, output)
        except BaseException:
            if output.plan is not None:
                release_leases(output.plan)  # no-op when the job released them already
            raise
        written, version = _outcome(output)
        return ConsumeIntoResult(group_id, ranges, written, version, _mirror(groups, group_id, ranges))


def append_once(
    spark: SparkSession,
    df: DataFrame,
    root: str,
    transactions: Mapping[str, int],
    expected: Mapping[str, int | None],
    metadata: Mapping[str, str],
) -> None:
    """Append ``df`` to the Delta table at ``root`` (created if missing) with ``transactions``
    in one Delta commit, only on a snapshot whose versions of ``expected``'s app ids equal it
    (:class:`~sparklog.errors.FencedError` otherwise); ``metadata["sparklog.job"]`` names the run."""
    output = _Output(metadata["sparklog.job"], delta_root=DeltaSink(root).root)
    output = replace(
        output,
        delta_schema=_file_schema(output, df.schema),
        transactions=dict(transactions),
        expected=dict(expected),
        metadata=dict(metadata),
    )
    _run_job(spark, df, output)


def _stored_bounds(
    stored: Mapping[str, Mapping[str, int | None]], ids: Mapping[TopicPartition, str]
) -> tuple[dict[TopicPartition, int | None], dict[TopicPartition, int | None]]:
    """Per input partition, the lowest and the highest next offset the output tables store.
    The lowest is None when some table stores none: the output may lack the output of
    anything below the others' values there, so a run must not start above it (the group's
    committed offset then decides, as for a new output)."""
    lowest: dict[TopicPartition, int | None] = {}
    highest: dict[TopicPartition, int | None] = {}
    for tp, app_id in ids.items():
        values = [table[app_id] for table in stored.values()]
        known = [v for v in values if v is not None]
        lowest[tp] = min(known) if known and len(known) == len(values) else None
        highest[tp] = max(known) if known else None
    return lowest, highest


def of_current_topics(
    stored: Mapping[str, Mapping[str, int | None]],
    ids: Mapping[TopicPartition, str],
    topic_ids: Mapping[str, str],
    incarnations: Mapping[str, int],
) -> dict[str, dict[str, int | None]]:
    """``stored`` without the input offsets a table holds of an earlier topic of the same name
    (its stored incarnation is not the topic's now): they position nothing in the new topic.
    Offsets stored without an incarnation (outputs written before it was kept) count as current."""
    current: dict[str, dict[str, int | None]] = {}
    for where, values in stored.items():
        stale = {t for t, app_id in topic_ids.items() if values.get(app_id) not in (None, incarnations[t])}
        current[where] = {app_id: None if tp[0] in stale else values[app_id] for tp, app_id in ids.items()}
    return current


def new_incarnations(
    stored: Mapping[str, Mapping[str, int | None]],
    topic_ids: Mapping[str, str],
    incarnations: Mapping[str, int],
    ids: Mapping[TopicPartition, str],
    ends: Mapping[TopicPartition, int],
) -> dict[str, int]:
    """The incarnations of the input topics whose every partition's offset this commit writes
    (so no offset of an earlier topic of the name is made current) that some output table does
    not hold yet (a topic output's commit is skipped where it finds one of its app ids already).
    A run writes every partition whose stored offset was of a deleted topic: it counts as
    unrecorded."""
    return {
        topic_ids[t]: i
        for t, i in incarnations.items()
        if all(tp in ends for tp in ids if tp[0] == t) and any(v.get(topic_ids[t]) != i for v in stored.values())
    }


def _completing_ranges(
    ranges: Ranges,
    lowest: Mapping[TopicPartition, int | None],
    highest: Mapping[TopicPartition, int | None],
    stored: Mapping[str, Mapping[str, int | None]],
    ids: Mapping[TopicPartition, str],
) -> Ranges | None:
    """After a run whose commit stopped between two leader tables of the output topic, the
    run that completes it: exactly the interrupted run's ranges (from where this run starts
    to the ends the tables ahead hold, no caps), other partitions not moving, so the tables
    ahead recognise it and skip, and the tables behind get their part. None: no table is
    ahead of where this run starts (the usual case; always for a Delta output)."""
    ends = {
        tp: hi
        for tp, hi in highest.items()
        if hi is not None and ranges[tp][0] < hi and (lowest[tp] is None or lowest[tp] < hi)  # type: ignore[operator]
    }
    if not ends:
        return None
    for log_dir, values in stored.items():
        ahead = [tp for tp in ends if (v := values[ids[tp]]) is not None and v >= ends[tp]]
        if ahead and len(ahead) < len(ends):
            # The commits of one run carry all its input offsets: no interrupted run leaves a
            # table ahead on some partitions and behind on others. Completing would skip or
            # duplicate output in that table, so refuse.
            raise StorageError(
                f"The leader table under {log_dir} holds input offsets ahead of the other leader tables for "
                f"{sorted(ahead)} but not for {sorted(set(ends) - set(ahead))}: no interrupted run explains this "
                "(did leadership of the output move while __consumer_offsets lagged?). Nothing committed; check "
                "the output and reset the group's offsets, or consume into a new output."
            )
    return {tp: (start, ends.get(tp, start)) for tp, (start, _end) in ranges.items()}


def _default_transform(to_topic: bool, include_headers: bool) -> Callable[[DataFrame], DataFrame]:
    if not to_topic:
        return lambda df: df
    columns = ["key", "value", *(["headers"] if include_headers else [])]
    return lambda df: df.select(*columns)


def _apply(transform: Callable[[DataFrame], DataFrame], df: DataFrame) -> DataFrame:
    out = transform(df)
    if not hasattr(out, "schema") or not hasattr(out, "write"):
        raise ConfigError(f"consume_into: transform must return a DataFrame, got {type(out).__name__}")
    return out


def _open_output(
    replicas: ReplicaManager,
    opts: Mapping[str, str],
    group_id: str,
    run_id: str,
    partitions: list[TopicPartition],
    probe: StructType,
    output_topic: str | None,
    output_path: str | None,
) -> _Output:
    """Validate the output against the transform's schema; a topic's write leases are taken
    last (BEFORE the caller reads the stored input offsets)."""
    if output_topic is None:
        sink = DeltaSink(str(output_path))
        sink.check_target()
        output = _Output(run_id, delta_root=sink.root)
        return replace(output, delta_schema=_file_schema(output, probe))
    topic = check_target({"topic": output_topic}, probe, False, "consume_into")
    if topic not in replicas.list_topics():
        raise TopicNotFoundError(f"Output topic {topic} does not exist; create it first")
    if topic in {t for t, _p in partitions}:
        raise ConfigError(f"consume_into: the output topic {topic} is also an input topic; choose another output")
    # One stable lease owner per group: a rerun after a crash adopts the dead run's leases.
    return _Output(run_id, plan=plan_produce(opts, topic, f"consume-into-{group_id}", adopt=True))


def _file_schema(output: _Output, schema: StructType) -> bytes:
    """The Arrow schema data files of a Delta output get (checked against the table's)."""
    if output.plan is not None:
        return b""
    from pyspark.sql.pandas.types import to_arrow_schema

    return DeltaSink(output.delta_root).file_schema(to_arrow_schema(schema, timezone="UTC")).serialize().to_pybytes()


def _outcome(output: _Output) -> tuple[dict[int, tuple[int, int]], int | None]:
    """What this run committed: a topic output's ranges (over its leader tables; when
    completing an interrupted run, only the tables behind), or the Delta table's version."""
    if output.plan is not None:
        tables = [output.plan.table(log_dir) for log_dir in output.plan.log_dirs]
        return committed_ranges(tables, output.run_id), None
    return {}, DeltaSink(output.delta_root).commit_version("sparklog.job", output.run_id)


def _mirror(groups: GroupCoordinator, group_id: str, ranges: Ranges) -> bool:
    """Copy the end offsets to ``__consumer_offsets`` (lag, describe). A failure here is
    harmless: the output holds the truth and the next run starts from the max of both."""
    try:
        commit_advances(groups, group_id, ranges)
        return True
    except GroupError as exc:
        log.warning("group %s: output committed, but mirroring to __consumer_offsets failed: %s", group_id, exc)
        return False
