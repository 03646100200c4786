"""Spark consumption by consumer group, and exactly-once processing into a topic or a Delta table.

* :func:`consume`: the group's next records of ``topics`` (committed offset, or the reset
  policy, up to the high watermark; capped by ``maxOffsetsPerTrigger`` /
  ``maxRecordsPerPartition``) as a DataFrame with the Kafka source's columns (native read
  path); :meth:`GroupBatch.commit` then records the end offsets (standalone commit to
  ``__consumer_offsets``): at-least-once, like a Kafka consumer committing after processing.
* :func:`consume_into`: ``transform`` the group's next records and write the output AND the
  input end offsets in ONE Delta commit of the output (a sparklog topic or a plain Delta
  table), as application transactions ``sparklog.input/<group>/<topic>/<partition>`` = next
  offset. A run starts from max(those, ``__consumer_offsets``) and afterwards mirrors its
  end offsets to ``__consumer_offsets`` (lag, ``groups --describe``).

Invariants (argued in ``docs/design-notes.md``, "Spark group consumption and exactly-once"):
a topic output's write leases are taken BEFORE the stored input offsets are read; the output
commit lands only on a snapshot whose stored input offsets are still those the run started
from (epoch fences / ``max_commit_retries=0`` make that check and the commit one step);
files of a commit that does not land are deleted. Both functions refuse a group with live
light-consumer members (they commit as standalone clients, generation -1).

Where code runs: the driver plans and verifies; Spark tasks write segments or Parquet files
through a private Python data source (Arrow batches, no pandas) whose ``commit``/``abort``
run in a Python worker on the driver host. Callers: users via :mod:`sparklog.spark`.
"""

from __future__ import annotations

import base64
import json
import logging
import pickle
import re
import uuid
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, DataSourceWriter
from pyspark.sql.types import StructType

from sparklog import errors
from sparklog.config import CLUSTER_KEYS
from sparklog.errors import ConfigError, GroupError, GroupNotEmptyError, OffsetOutOfRangeError, StorageError, TopicNotFoundError
from sparklog.log.delta_sink import DataFile, DeltaSink, check_input_offsets, input_app_id, write_task_files
from sparklog.log.table import TopicTable
from sparklog.offsets import EARLIEST, LATEST, parse_offsets_json
from sparklog.spark.options import cluster_config_from_options, option_flag
from sparklog.spark.writer import ProducePlan, SegmentsWritten, abort_produce, check_target, commit_produce, plan_produce
from sparklog.spark.writer import job_ranges, release_leases, task_id, write_task_segments

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from sparklog.cluster import Cluster

__all__ = ["consume", "consume_into", "GroupBatch", "ConsumeIntoResult"]

log = logging.getLogger("sparklog.spark")

TopicPartition = tuple[str, int]
Ranges = dict[TopicPartition, tuple[int, int]]
_OPTIONS = {
    "startingoffsets": "startingOffsets", "auto.offset.reset": "auto.offset.reset", "failondataloss": "failOnDataLoss",
    "maxoffsetspertrigger": "maxOffsetsPerTrigger", "maxrecordsperpartition": "maxRecordsPerPartition",
    "includeheaders": "includeHeaders",
}  # fmt: skip


# -- options and offset ranges -------------------------------------------------------------
@dataclass(frozen=True)
class _Settings:
    reset: str  # earliest | latest | none: where a partition without a committed offset starts
    explicit: dict[str, dict[int, int]]  # startingOffsets JSON (-2 earliest, -1 latest)
    fail_on_data_loss: bool
    max_total: int | None
    max_per_partition: int | None
    include_headers: bool


def _settings(options: Mapping[str, str]) -> _Settings:
    lowered = {k.lower(): str(v) for k, v in options.items()}
    for key in lowered:
        if key not in _OPTIONS and key not in CLUSTER_KEYS and key.removeprefix("sparklog.") not in CLUSTER_KEYS:
            raise ConfigError(
                f"Unknown option {key!r} for consume/consume_into; allowed: {', '.join(_OPTIONS.values())} "
                f"and the cluster settings ({', '.join(sorted(CLUSTER_KEYS))})"
            )
    reset = lowered.get("auto.offset.reset", "earliest").strip().lower()
    if reset not in ("earliest", "latest", "none"):
        raise ConfigError(f"auto.offset.reset must be earliest, latest or none, got {reset!r}")
    starting = lowered.get("startingoffsets", "").strip()
    explicit: dict[str, dict[int, int]] = {}
    if starting.lower() in ("earliest", "latest"):
        reset = starting.lower()
    elif starting:
        explicit = parse_offsets_json(starting, "startingOffsets")
    return _Settings(reset, explicit, option_flag(lowered, "failondataloss", True), _positive(lowered, "maxoffsetspertrigger"),
                     _positive(lowered, "maxrecordsperpartition"), option_flag(lowered, "includeheaders", False))  # fmt: skip


def _positive(options: Mapping[str, str], key: str) -> int | None:
    raw = options.get(key)
    if raw is None:
        return None
    if not raw.strip().isdigit() or int(raw) < 1:
        raise ConfigError(f"Option {_OPTIONS[key]} must be a positive integer, got {raw!r}")
    return int(raw)


def _input_partitions(cluster: "Cluster", group_id: str, topics: str | Iterable[str]) -> list[TopicPartition]:
    from sparklog.group.ids import validate_group_id
    from sparklog.topic import validate_topic_name

    validate_group_id(group_id)
    names = list(dict.fromkeys(t.strip() for t in (topics.split(",") if isinstance(topics, str) else topics) if t.strip()))
    if not names:
        raise ConfigError(f"Consuming with group {group_id}: no topics given")
    existing = set(cluster.list_topics())
    for topic in names:
        if validate_topic_name(topic) not in existing:
            raise TopicNotFoundError(f"Topic {topic} does not exist (consuming with group {group_id}); create it or fix the name")
    return [(t, p) for t in names for p in cluster.partitions_of(t)]


def _require_inactive(cluster: "Cluster", group_id: str) -> None:
    snapshot = cluster.groups.registry.snapshot(group_id)
    if snapshot.active:
        raise GroupNotEmptyError(
            f"Group {group_id} has live members (state {snapshot.state}): Spark group consumption commits as a "
            "standalone client (generation -1), which only an inactive group allows. Stop the group's consumers "
            "or use another group id."
        )


def _resolve(cluster: "Cluster", group_id: str, partitions: list[TopicPartition], settings: _Settings,
             floor: Mapping[TopicPartition, int | None]) -> Ranges:  # fmt: skip
    """Per partition ``[start, end)``: start = max(committed, ``floor``) or the reset policy,
    checked against log-start (``failOnDataLoss``); end = high watermark, then the caps."""
    from sparklog.spark.stream_reader import rate_limit

    committed = cluster.groups.committed(group_id, partitions)
    ranges: Ranges = {}
    for topic in dict.fromkeys(t for t, _ in partitions):
        for p, (log_start, hw) in sorted(cluster.partition_offsets(topic).items()):
            known = [v for v in (committed.get((topic, p)), floor.get((topic, p))) if v is not None]
            start = max(known) if known else _initial(group_id, topic, p, settings, log_start, hw)
            if start < log_start or start > hw:
                where = (f"offsets {start}..{log_start - 1} of {topic}-{p} are no longer available (log-start {log_start})"
                         if start < log_start else f"offset {start} of {topic}-{p} is beyond the high watermark {hw} "
                         "(was the topic re-created?)")  # fmt: skip
                if settings.fail_on_data_loss:
                    raise OffsetOutOfRangeError(
                        f"Group {group_id}: {where}. Set failOnDataLoss=false to continue from "
                        f"{'log-start' if start < log_start else 'the high watermark'}, or reset the group's offsets."
                    )
                log.warning("group %s: %s; continuing from %d", group_id, where, min(max(start, log_start), hw))
                start = min(max(start, log_start), hw)
            ranges[(topic, p)] = (start, hw)
    if settings.max_per_partition is not None:
        ranges = {tp: (s, min(e, s + settings.max_per_partition)) for tp, (s, e) in ranges.items()}
    if settings.max_total is not None:
        starts: dict[str, dict[int, int]] = {}
        ends: dict[str, dict[int, int]] = {}
        for (t, p), (s, e) in ranges.items():
            starts.setdefault(t, {})[p], ends.setdefault(t, {})[p] = s, e
        limited = rate_limit(starts, ends, settings.max_total)
        ranges = {(t, p): (s, limited[t][p]) for (t, p), (s, _e) in ranges.items()}
    return ranges


def _initial(group_id: str, topic: str, p: int, settings: _Settings, log_start: int, hw: int) -> int:
    explicit = settings.explicit.get(topic, {}).get(p)
    if explicit is not None and explicit >= 0:
        return explicit
    policy = {EARLIEST: "earliest", LATEST: "latest"}.get(explicit, settings.reset)  # type: ignore[arg-type]
    if policy == "none":
        raise OffsetOutOfRangeError(
            f"Group {group_id} has no committed offset for {topic}-{p} and auto.offset.reset=none; commit or reset "
            "the group's offsets first, or set startingOffsets / auto.offset.reset to earliest or latest"
        )
    return log_start if policy == "earliest" else hw


def _advances(ranges: Ranges, before: Mapping[TopicPartition, int | None]) -> dict[TopicPartition, int]:
    """End offsets worth recording: where nothing was recorded yet or the end is further."""
    return {tp: end for tp, (_s, end) in ranges.items() if before.get(tp) is None or end > before[tp]}  # type: ignore[operator]


def _read(spark: "SparkSession", cluster: "Cluster", ranges: Ranges, settings: _Settings) -> "DataFrame":
    from sparklog.schema import SPARK_READ_DDL, SPARK_READ_DDL_WITH_HEADERS
    from sparklog.spark.native import read_topics

    live = {tp: r for tp, r in ranges.items() if r[1] > r[0]}
    if not live:
        return spark.createDataFrame([], SPARK_READ_DDL_WITH_HEADERS if settings.include_headers else SPARK_READ_DDL)
    assign: dict[str, list[int]] = {}
    bounds: tuple[dict[str, dict[str, int]], dict[str, dict[str, int]]] = ({}, {})
    for (t, p), (start, end) in sorted(live.items()):
        assign.setdefault(t, []).append(p)
        bounds[0].setdefault(t, {})[str(p)], bounds[1].setdefault(t, {})[str(p)] = start, end
    options = {"assign": json.dumps(assign), "startingOffsets": json.dumps(bounds[0]), "endingOffsets": json.dumps(bounds[1]),
               "failOnDataLoss": str(settings.fail_on_data_loss).lower(), "includeHeaders": str(settings.include_headers).lower()}  # fmt: skip
    return read_topics(spark, options, cluster)


def _connect(spark: "SparkSession", options: Mapping[str, Any]) -> tuple[dict[str, str], _Settings, "Cluster"]:
    from sparklog.cluster import Cluster
    from sparklog.spark import session_options

    opts = session_options(spark, **options)
    settings = _settings(opts)
    return opts, settings, Cluster(cluster_config_from_options(opts))


# -- consume -------------------------------------------------------------------------------
@dataclass
class GroupBatch:
    """One group read: ``df`` (Kafka source columns) holds ``ranges`` = {(topic, p): [start, end)}."""

    group_id: str
    df: "DataFrame"
    ranges: Ranges
    _options: dict[str, str] = field(repr=False)
    committed: bool = False

    @property
    def records(self) -> int:
        return sum(end - start for start, end in self.ranges.values())

    def commit(self) -> dict[TopicPartition, int]:
        """Record the end offsets under the group (standalone commit to ``__consumer_offsets``);
        returns what was committed. Fails if the group got live members meanwhile."""
        from sparklog.cluster import Cluster

        with Cluster(cluster_config_from_options(self._options)) as cluster:
            _require_inactive(cluster, self.group_id)
            offsets = _advances(self.ranges, cluster.groups.committed(self.group_id, list(self.ranges)))
            if offsets:
                cluster.commit_offsets(self.group_id, offsets)
        self.committed = True
        return offsets


def consume(spark: "SparkSession", group_id: str, topics: str | Iterable[str], **options: Any) -> GroupBatch:
    """The group's next records of ``topics`` (a name, comma-separated names or a list).

    Options: ``startingOffsets`` (``earliest``/``latest``/JSON, for partitions the group has
    no offset for; default earliest), ``auto.offset.reset`` (earliest/latest/none, same role),
    ``failOnDataLoss`` (default true), ``maxOffsetsPerTrigger`` (total cap, split across
    partitions by backlog), ``maxRecordsPerPartition``, ``includeHeaders``, cluster settings.
    """
    opts, settings, cluster = _connect(spark, options)
    with cluster:
        partitions = _input_partitions(cluster, group_id, topics)
        _require_inactive(cluster, group_id)
        ranges = _resolve(cluster, group_id, partitions, settings, {})
        df = _read(spark, cluster, ranges, settings)
    return GroupBatch(group_id, df, ranges, opts)


# -- consume_into: the output side, shipped into the Spark job -----------------------------
@dataclass(frozen=True)
class _Output(DataSourceArrowWriter):
    """One run's output, and the Spark writer for it (pickled into a data source option)."""

    run_id: str
    plan: ProducePlan | None = None  # output topic: the write leases held
    delta_root: str = ""  # or the output Delta table
    delta_schema: bytes = b""  # ... and the Arrow schema of its data files
    transactions: dict[str, int] = field(default_factory=dict)  # input app id -> end offset
    expected: dict[str, int | None] = field(default_factory=dict)  # input app id -> stored at start
    metadata: dict[str, str] = field(default_factory=dict)

    def stored(self, app_ids: Iterable[str]) -> dict[str, int | None]:
        if self.plan is None:
            return DeltaSink(self.delta_root).app_versions(app_ids)
        table = TopicTable(self.plan.table_log_dir, self.plan.topic)
        dt = table.snapshot()
        return {app_id: table.app_version(dt, app_id) for app_id in app_ids}

    def landed(self, paths: Iterable[str] = ()) -> bool:
        """Did this run's commit land? By its files when known, else by the input offsets."""
        if wanted := set(paths):
            if self.plan is None:
                return bool(wanted & DeltaSink(self.delta_root).live_paths())
            table = TopicTable(self.plan.table_log_dir, self.plan.topic)
            return any(f.path in wanted for f in table.files(table.snapshot()))
        stored = self.stored(self.transactions)
        return all(stored[a] is not None and stored[a] >= v for a, v in self.transactions.items())  # type: ignore[operator]

    def write(self, batches: Iterator[Any]) -> SegmentsWritten:  # type: ignore[override]
        task = task_id()
        if self.plan is not None:
            return SegmentsWritten(task, write_task_segments(self.plan, batches, task))
        files = write_task_files(self.delta_root, self.file_schema(), batches, f"{self.run_id}-{task}")
        return SegmentsWritten(task, [f.to_dict() for f in files])

    def commit(self, messages: list[SegmentsWritten | None]) -> None:  # type: ignore[override]
        if self.plan is None:
            files = [DataFile.from_dict(d) for m in messages if m is not None for d in m.segments]
            DeltaSink(self.delta_root).commit(files, self.file_schema(), self.transactions, self.expected, self.metadata)
            return
        check_input_offsets(f"topic {self.plan.topic}", self.stored(self.expected), self.expected)
        if commit_produce(self.plan, messages, self.metadata, self.transactions) is None:
            raise StorageError(f"Topic {self.plan.topic} already holds the input offsets of run {self.run_id}; nothing committed")

    def abort(self, messages: list[SegmentsWritten | None]) -> None:  # type: ignore[override]
        # Spark aborts also when commit() failed AFTER the Delta commit landed (e.g. while
        # releasing the leases): committed files must stay.
        written = [d for m in messages if m is not None for d in m.segments]
        if self.plan is None:
            DeltaSink(self.delta_root).discard(DataFile.from_dict(d) for d in written)
        elif written and self.landed(str(d["path"]) for d in written):
            release_leases(self.plan)
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


_REGISTERED: "weakref.WeakSet[SparkSession]" = weakref.WeakSet()  # sessions that know the data source


def _run_job(spark: "SparkSession", df: "DataFrame", output: _Output) -> None:
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
        found = re.findall(r"sparklog\.errors\.(\w+): (.+)", str(exc))
        kind = getattr(errors, found[-1][0], None) if found else None
        if isinstance(kind, type) and issubclass(kind, errors.SparklogError):
            raise kind(found[-1][1].strip()) from exc
        raise
    if not output.landed():
        raise StorageError(f"Run {output.run_id}: the Spark job finished but its commit is not in the output; nothing committed")


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
    spark: "SparkSession",
    group_id: str,
    topics: str | Iterable[str],
    transform: "Callable[[DataFrame], DataFrame] | None" = None,
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
    opts, settings, cluster = _connect(spark, options)
    with cluster:
        partitions = _input_partitions(cluster, group_id, topics)
        _require_inactive(cluster, group_id)
        transform = transform or _default_transform(output_topic is not None, settings.include_headers)
        probe = _apply(transform, _read(spark, cluster, {}, settings)).schema  # validate before changing anything
        run_id = f"consume-{group_id}-{uuid.uuid4().hex[:12]}"
        output = _open_output(cluster, opts, run_id, partitions, probe, output_topic, output_path)
        try:
            ids = {tp: input_app_id(group_id, *tp) for tp in partitions}
            stored = output.stored(ids.values())
            before = {tp: stored[ids[tp]] for tp in partitions}
            ranges = _resolve(cluster, group_id, partitions, settings, before)
            if not any(end > start for start, end in ranges.values()):
                if output.plan is not None:
                    release_leases(output.plan)
                return ConsumeIntoResult(group_id, ranges, {}, None, _mirror(cluster, group_id, ranges))
            df = _apply(transform, _read(spark, cluster, ranges, settings))
            output = replace(
                output,
                delta_schema=_file_schema(output, df.schema),
                transactions={ids[tp]: end for tp, end in _advances(ranges, before).items()},
                expected=stored,
                metadata={"sparklog.job": run_id, "sparklog.operation": "CONSUME INTO", "sparklog.group": group_id,
                          "sparklog.input": json.dumps({f"{t}-{p}": list(r) for (t, p), r in sorted(ranges.items())})},
            )  # fmt: skip
            _run_job(spark, df, output)
        except BaseException:
            if output.plan is not None:
                release_leases(output.plan)  # no-op when the job released them already
            raise
        written, version = _outcome(cluster, output)
        return ConsumeIntoResult(group_id, ranges, written, version, _mirror(cluster, group_id, ranges))


def _default_transform(to_topic: bool, include_headers: bool) -> "Callable[[DataFrame], DataFrame]":
    if not to_topic:
        return lambda df: df
    columns = ["key", "value", *(["headers"] if include_headers else [])]
    return lambda df: df.select(*columns)


def _apply(transform: "Callable[[DataFrame], DataFrame]", df: "DataFrame") -> "DataFrame":
    out = transform(df)
    if not hasattr(out, "schema") or not hasattr(out, "write"):
        raise ConfigError(f"consume_into: transform must return a DataFrame, got {type(out).__name__}")
    return out


def _open_output(cluster: "Cluster", opts: Mapping[str, str], run_id: str, partitions: list[TopicPartition],
                 probe: StructType, output_topic: str | None, output_path: str | None) -> _Output:  # fmt: skip
    """Validate the output against the transform's schema; a topic's write leases are taken
    last (BEFORE the caller reads the stored input offsets)."""
    if output_topic is None:
        sink = DeltaSink(str(output_path))
        sink.check_target()
        output = _Output(run_id, delta_root=sink.root)
        return replace(output, delta_schema=_file_schema(output, probe))
    topic = check_target({"topic": output_topic}, probe, False, "consume_into")
    if topic not in cluster.list_topics():
        raise TopicNotFoundError(f"Output topic {topic} does not exist; create it first")
    if topic in {t for t, _p in partitions}:
        raise ConfigError(f"consume_into: the output topic {topic} is also an input topic; choose another output")
    return _Output(run_id, plan=plan_produce(opts, topic, run_id))


def _file_schema(output: _Output, schema: StructType) -> bytes:
    """The Arrow schema data files of a Delta output get (checked against the table's)."""
    if output.plan is not None:
        return b""
    from pyspark.sql.pandas.types import to_arrow_schema

    return DeltaSink(output.delta_root).file_schema(to_arrow_schema(schema, timezone="UTC")).serialize().to_pybytes()


def _outcome(cluster: "Cluster", output: _Output) -> tuple[dict[int, tuple[int, int]], int | None]:
    if output.plan is not None:
        history = cluster.table(output.plan.topic).snapshot().history(50)
        return job_ranges(history, output.run_id) or {}, None
    return {}, DeltaSink(output.delta_root).commit_version("sparklog.job", output.run_id)


def _mirror(cluster: "Cluster", group_id: str, ranges: Ranges) -> bool:
    """Copy the end offsets to ``__consumer_offsets`` (lag, describe). A failure here is
    harmless: the output holds the truth and the next run starts from the max of both."""
    try:
        offsets = _advances(ranges, cluster.groups.committed(group_id, list(ranges)))
        if offsets:
            cluster.commit_offsets(group_id, offsets)
        return True
    except GroupError as exc:
        log.warning("group %s: output committed, but mirroring to __consumer_offsets failed: %s", group_id, exc)
        return False
