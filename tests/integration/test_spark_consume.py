"""Spark group consumption (``consume`` + ``GroupBatch.commit``) and exactly-once processing
(``consume_into`` a topic or a Delta table), against real Spark, ZooKeeper and Delta tables."""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F

import sparklog
from sparklog.errors import (
    ConfigError,
    FencedError,
    GroupNotEmptyError,
    InvalidGroupIdError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    SchemaMismatchError,
    StorageError,
    TopicNotFoundError,
)
from sparklog.log.delta_sink import DataFile, DeltaSink, input_app_id, write_task_files
from sparklog.spark import consume, consume_into
from tests.helpers import BOTH_STORES, assert_log_consistent, assert_unchanged, stored_records

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def produce_values(cluster: sparklog.Cluster, topic: str, values: list[str]) -> None:
    with cluster.producer() as producer:
        for i, value in enumerate(values):
            producer.send(topic, value.encode(), key=f"k{i}".encode())
        producer.flush()


def delta_rows(path: str) -> pa.Table:
    """The live rows of a Delta table, read through its log (never files of failed runs)."""
    sink = DeltaSink(path)
    paths = sorted(sink.live_paths())
    if not paths:
        return pa.table({})
    return pa.concat_tables([pq.read_table(str(Path(sink.root) / p)) for p in paths])


def upper(df: DataFrame) -> DataFrame:  # a transform: the value upper-cased, keyed like the input
    return df.select("key", F.upper(F.col("value").cast("string")).alias("value"))


def lineage(df: DataFrame) -> DataFrame:  # a transform for a Delta output: where each row came from
    return df.select(F.col("value").cast("string").alias("value"), "topic", "partition", "offset", F.lit(1).alias("n"))


def run_until_empty(
    spark: SparkSession, cluster_options: dict[str, str], **kwargs: Any
) -> list[sparklog.spark.ConsumeIntoResult]:
    results = []
    while True:
        result = consume_into(spark, **kwargs, **cluster_options)
        results.append(result)
        if result.records == 0:
            return results
        assert len(results) < 50, "consume_into never caught up"


# -- consume + commit ----------------------------------------------------------------------
@BOTH_STORES
def test_consume_commit_cycles_see_every_record_once(
    spark: SparkSession, cluster: sparklog.Cluster, cluster_options: dict[str, str]
) -> None:
    cluster.create_topic("events", partitions=3)
    produce_values(cluster, "events", [f"a{i}" for i in range(30)])
    seen: list[str] = []
    batch = consume(spark, "readers", "events", **cluster_options)
    assert batch.records == 30 and batch.df.count() == 30
    assert set(batch.df.columns) >= {"key", "value", "topic", "partition", "offset", "timestamp", "timestampType"}
    seen += [(r.value or b"").decode() for r in batch.df.collect()]
    batch.commit()
    assert cluster.committed_offsets("readers", ["events"]) == {
        ("events", p): hw for p, hw in cluster.high_watermarks("events").items()
    }
    again = consume(spark, "readers", "events", **cluster_options)
    assert again.records == 0 and again.df.count() == 0, "after a commit the group has nothing left"

    produce_values(cluster, "events", [f"b{i}" for i in range(20)])
    runs = 0
    while True:
        batch = consume(spark, "readers", ["events"], maxOffsetsPerTrigger=7, **cluster_options)
        if batch.records == 0:
            break
        assert batch.records <= 7
        rows = batch.df.collect()
        assert len(rows) == batch.records
        for row in rows:  # every row lies in the batch's ranges
            start, end = batch.ranges[("events", row.partition)]
            assert start <= row.offset < end
        seen += [(r.value or b"").decode() for r in rows]
        batch.commit()
        runs += 1
    assert runs == 3
    assert Counter(seen) == Counter([f"a{i}" for i in range(30)] + [f"b{i}" for i in range(20)])


def test_uncommitted_batch_is_read_again_and_per_partition_cap(
    spark: SparkSession, cluster: sparklog.Cluster, cluster_options: dict[str, str]
) -> None:
    cluster.create_topic("again", partitions=2)
    produce_values(cluster, "again", [f"v{i}" for i in range(10)])
    first = consume(spark, "g1", "again", maxRecordsPerPartition=2, **cluster_options)
    assert first.records == 4 and all(end - start == 2 for start, end in first.ranges.values())
    second = consume(spark, "g1", "again", maxRecordsPerPartition=2, **cluster_options)
    assert second.ranges == first.ranges, "without a commit the same records come again (at-least-once)"


def test_batch_commit_stores_its_ends_below_a_newer_commit_like_kafka(
    spark: SparkSession, cluster: sparklog.Cluster, cluster_options: dict[str, str]
) -> None:
    cluster.create_topic("rewind", partitions=1)
    produce_values(cluster, "rewind", [f"r{i}" for i in range(10)])
    batch = consume(spark, "rewinders", "rewind", maxOffsetsPerTrigger=4, **cluster_options)
    assert batch.ranges == {("rewind", 0): (0, 4)}
    cluster.commit_offsets("rewinders", {("rewind", 0): 8})  # committed further meanwhile
    assert batch.commit() == {("rewind", 0): 4}, "the batch's commit stores its end: the last commit wins"
    assert cluster.committed_offsets("rewinders", ["rewind"]) == {("rewind", 0): 4}
    assert consume(spark, "rewinders", "rewind", **cluster_options).ranges == {("rewind", 0): (4, 10)}


def test_starting_offsets_for_partitions_without_a_committed_offset(
    spark: SparkSession, cluster: sparklog.Cluster, cluster_options: dict[str, str]
) -> None:
    cluster.create_topic("start", partitions=2)
    produce_values(cluster, "start", [f"old{i}" for i in range(6)])
    latest = consume(spark, "late", "start", startingOffsets="latest", **cluster_options)
    assert latest.records == 0
    latest.commit()  # pins the position at the end
    produce_values(cluster, "start", ["new0", "new1"])
    assert sorted(r.value or b"" for r in consume(spark, "late", "start", **cluster_options).df.collect()) == [
        b"new0",
        b"new1",
    ]
    with pytest.raises(OffsetOutOfRangeError, match=r"auto.offset.reset=none"):
        consume(spark, "fresh", "start", auto_offset_reset="none", **cluster_options)
    explicit = consume(spark, "fresh", "start", startingOffsets='{"start": {"0": 1, "1": -1}}', **cluster_options)
    hw = cluster.high_watermarks("start")
    assert explicit.ranges == {("start", 0): (1, hw[0]), ("start", 1): (hw[1], hw[1])}


def test_fail_on_data_loss_both_ways(
    spark: SparkSession, cluster: sparklog.Cluster, cluster_options: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    cluster.create_topic("trimmed", partitions=1)
    produce_values(cluster, "trimmed", [f"t{i}" for i in range(20)])
    cluster.commit_offsets("lossy", {("trimmed", 0): 5})
    cluster.delete_records("trimmed", {0: 12})
    with pytest.raises(
        OffsetOutOfRangeError, match=r"offsets 5\.\.11 of trimmed-0 are no longer available \(log-start 12\)"
    ):
        consume(spark, "lossy", "trimmed", **cluster_options)
    with pytest.raises(OffsetOutOfRangeError, match="failOnDataLoss=false"):
        consume_into(spark, "lossy", "trimmed", output_path=str(cluster.config.log_dir) + "/never", **cluster_options)
    with caplog.at_level(logging.WARNING, logger="sparklog"):
        batch = consume(spark, "lossy", "trimmed", failOnDataLoss=False, **cluster_options)
    assert (
        "group lossy: offsets 5..11 of trimmed-0 are no longer available (log-start 12); continuing from 12"
        in caplog.text
    )
    assert batch.ranges == {("trimmed", 0): (12, 20)}
    assert [r.value for r in batch.df.orderBy("offset").collect()] == [f"t{i}".encode() for i in range(12, 20)]


def test_group_with_live_members_is_refused(
    spark: SparkSession, cluster: sparklog.Cluster, cluster_options: dict[str, str]
) -> None:
    cluster.create_topic("busy", partitions=1)
    produce_values(cluster, "busy", ["x"])
    batch = consume(spark, "shared", "busy", **cluster_options)
    with cluster.consumer("shared") as member:
        member.subscribe(["busy"])
        member.poll(2000)
        with pytest.raises(GroupNotEmptyError, match=r"group shared|Group shared"):
            consume(spark, "shared", "busy", **cluster_options)
        with pytest.raises(GroupNotEmptyError):
            batch.commit()
        with pytest.raises(GroupNotEmptyError):
            consume_into(spark, "shared", "busy", output_path=str(cluster.config.log_dir) + "/x", **cluster_options)


# -- consume_into: exactly once ------------------------------------------------------------
def test_consume_into_topic_exactly_once_over_many_runs(
    spark: SparkSession, cluster: sparklog.Cluster, cluster_options: dict[str, str]
) -> None:
    cluster.create_topic("in", partitions=3)
    cluster.create_topic("out", partitions=2)
    expected: list[str] = []
    for wave in range(2):  # records arrive between runs
        values = [f"w{wave}-{i}" for i in range(40)]
        produce_values(cluster, "in", values)
        expected += [v.upper() for v in values]
        results = run_until_empty(
            spark,
            cluster_options,
            group_id="pipe",
            topics="in",
            transform=upper,
            output_topic="out",
            maxOffsetsPerTrigger=25,
        )
        assert len(results) >= 3 and all(r.mirrored for r in results)
        assert all(r.records <= 25 for r in results)
        assert all(sum(e - s for s, e in r.output_ranges.values()) == r.records for r in results)
    records = assert_log_consistent(cluster, "out")  # output offsets contiguous from 0
    assert Counter((r.value or b"").decode() for r in records) == Counter(expected), "each input record exactly once"
    hw = cluster.high_watermarks("in")
    assert cluster.committed_offsets("pipe", ["in"]) == {("in", p): o for p, o in hw.items()}
    table = cluster.replicas.leader_table("out")
    dt = table.snapshot()
    assert {p: table.app_version(dt, input_app_id("pipe", "in", p)) for p in hw} == hw


@BOTH_STORES
def test_consume_into_delta_exactly_once_and_created_from_the_schema(
    spark: SparkSession, cluster: sparklog.Cluster, cluster_options: dict[str, str], tmp_path: Path
) -> None:
    cluster.create_topic("clicks", partitions=2)
    path = str(tmp_path / "lake" / "clicks_out")
    expected: list[str] = []
    versions = []
    for wave in range(2):
        values = [f"c{wave}-{i}" for i in range(30)]
        produce_values(cluster, "clicks", values)
        expected += values
        for result in run_until_empty(
            spark,
            cluster_options,
            group_id="etl",
            topics="clicks",
            transform=lineage,
            output_path=path,
            maxRecordsPerPartition=10,
        ):
            if result.records:
                versions.append(result.delta_version)
    assert versions == list(range(len(versions))), "one Delta commit per non-empty run, the first creates the table"
    rows = delta_rows(path)
    assert rows.schema.names == ["value", "topic", "partition", "offset", "n"]
    assert Counter(rows.column("value").to_pylist()) == Counter(expected)
    pairs = Counter(zip(rows.column("partition").to_pylist(), rows.column("offset").to_pylist(), strict=False))
    assert all(n == 1 for n in pairs.values()) and len(pairs) == len(expected)
    # Spark reads the live files natively too.
    live = [str(Path(path) / p) for p in DeltaSink(path).live_paths()]
    assert spark.read.parquet(*live).count() == len(expected)
    hw = cluster.high_watermarks("clicks")
    assert DeltaSink(path).app_versions([input_app_id("etl", "clicks", p) for p in hw]) == {
        input_app_id("etl", "clicks", p): o for p, o in hw.items()
    }


@pytest.mark.parametrize("to_topic", [True, False], ids=["topic", "delta"])
def test_replayed_run_after_lost_mirror_does_not_duplicate(
    spark: SparkSession, cluster: sparklog.Cluster, cluster_options: dict[str, str], tmp_path: Path, to_topic: bool
) -> None:
    cluster.create_topic("src", partitions=2)
    if to_topic:
        cluster.create_topic("dst", partitions=1)
    target = {"output_topic": "dst"} if to_topic else {"output_path": str(tmp_path / "dst")}
    transform = upper if to_topic else lineage
    produce_values(cluster, "src", [f"r{i}" for i in range(12)])
    first = consume_into(spark, "replay", "src", transform, **target, **cluster_options)
    assert first.records == 12
    # A crash between the output commit and the __consumer_offsets mirror: the group's
    # offsets lag behind the output (here: reset all the way back).
    cluster.groups.reset("replay", {("src", 0): 0, ("src", 1): 0})
    second = consume_into(spark, "replay", "src", transform, **target, **cluster_options)
    assert second.records == 0, f"the output's stored input offsets win: {second.input_ranges}"
    output_values = (
        [r.value for r in stored_records(cluster, "dst")]
        if to_topic
        else delta_rows(target["output_path"]).column("value").to_pylist()
    )
    assert len(output_values) == 12 and len(set(output_values)) == 12
    hw = cluster.high_watermarks("src")
    assert cluster.committed_offsets("replay", ["src"]) == {("src", p): o for p, o in hw.items()}, (
        "the mirror is repaired"
    )


def test_empty_input_commits_nothing(
    spark: SparkSession, cluster: sparklog.Cluster, cluster_options: dict[str, str], tmp_path: Path
) -> None:
    cluster.create_topic("quiet", partitions=2)
    cluster.create_topic("quiet_out", partitions=1)
    before = cluster.replicas.leader_table("quiet_out").snapshot().version()
    result = consume_into(spark, "idle", "quiet", output_topic="quiet_out", **cluster_options)
    assert result.records == 0 and result.output_ranges == {}
    assert cluster.replicas.leader_table("quiet_out").snapshot().version() == before
    path = tmp_path / "none"
    assert consume_into(spark, "idle2", "quiet", output_path=str(path), **cluster_options).records == 0
    assert not DeltaSink(str(path)).exists()
    # The empty run released the output's leases: a light producer gets through at once.
    with cluster.producer(max_block_ms=2000) as producer:
        producer.send("quiet_out", b"after").result()


def test_transform_dropping_everything_still_commits_the_input_offsets(
    spark: SparkSession, cluster: sparklog.Cluster, cluster_options: dict[str, str]
) -> None:
    cluster.create_topic("noisy", partitions=1)
    cluster.create_topic("kept", partitions=1)
    produce_values(cluster, "noisy", [f"n{i}" for i in range(5)])
    result = consume_into(
        spark, "filter", "noisy", lambda df: upper(df).where("value = 'NONE'"), output_topic="kept", **cluster_options
    )
    assert result.records == 5 and result.output_ranges == {}
    assert cluster.high_watermarks("kept") == {0: 0}
    assert consume_into(spark, "filter", "noisy", upper, output_topic="kept", **cluster_options).records == 0


def test_stale_delta_commit_is_fenced_and_its_files_deleted(cluster: sparklog.Cluster, tmp_path: Path) -> None:
    """The commit-time re-check: a run that started from older stored offsets (a zombie, or a
    concurrent run of the same group) commits nothing and leaves no file behind."""
    sink = DeltaSink(str(tmp_path / "t"))
    schema = pa.schema([("v", pa.string())])
    app = input_app_id("g", "t", 0)

    def files(values: list[str]) -> list[DataFile]:
        return write_task_files(sink.root, schema, iter(pa.table({"v": values}, schema=schema).to_batches()), "test")

    sink.commit(files(["a", "b"]), schema, {app: 2}, {app: None}, {})
    stale = files(["b"])
    with pytest.raises(FencedError, match="changed while this run was processing"):
        sink.commit(stale, schema, {app: 2}, {app: None}, {})
    assert not (Path(sink.root) / stale[0].path).exists()
    assert sink.app_versions([app]) == {app: 2} and delta_rows(sink.root).num_rows == 2


def test_files_of_a_failed_task_are_discarded_by_their_runs_prefix(tmp_path: Path) -> None:
    """A task that fails after writing a file never reports it to the driver: the abort finds it
    by the run's name prefix and deletes it, leaving other runs' files and live files alone."""
    sink = DeltaSink(str(tmp_path / "t"))
    schema = pa.schema([("v", pa.string())])

    def files(values: list[str], prefix: str) -> list[DataFile]:
        return write_task_files(sink.root, schema, iter(pa.table({"v": values}, schema=schema).to_batches()), prefix)

    sink.commit(files(["a"], "run-1-0"), schema, {}, {}, {})
    [failed] = files(["b"], "run-2-1")
    [other] = files(["c"], "run-20-0")
    sink.discard([], prefix="run-2")
    assert not (Path(sink.root) / failed.path).exists()
    assert (Path(sink.root) / other.path).exists(), "another run's file is not this run's"
    sink.discard([], prefix="run-1")
    assert len(sink.live_paths()) == 1 and all((Path(sink.root) / p).exists() for p in sink.live_paths())


def test_stale_topic_commit_is_fenced_under_the_leases(
    spark: SparkSession, cluster: sparklog.Cluster, cluster_options: dict[str, str]
) -> None:
    """The same re-check for a topic output, made in the job's commit under the leases."""
    from sparklog.spark.exactly_once import _Output
    from sparklog.spark.writer import plan_produce

    cluster.create_topic("src1", partitions=1)
    cluster.create_topic("dst1", partitions=1)
    produce_values(cluster, "src1", ["a", "b"])
    assert consume_into(spark, "g", "src1", output_topic="dst1", **cluster_options).records == 2
    app = input_app_id("g", "src1", 0)
    stale = _Output(
        "stale-run",
        plan=plan_produce(cluster_options, "dst1", "stale-run"),
        transactions={app: 2},
        expected={app: None},
    )
    version = cluster.replicas.leader_table("dst1").snapshot().version()
    with pytest.raises(FencedError, match="was None, is now 2"):
        stale.commit([])
    stale.abort([])  # what Spark does after a failed commit: releases the leases
    assert cluster.replicas.leader_table("dst1").snapshot().version() == version, "nothing committed"
    with cluster.producer(max_block_ms=2000) as producer:
        producer.send("dst1", b"next").result()


def test_failing_job_commits_nothing_and_reports_the_sparklog_error(
    spark: SparkSession, cluster: sparklog.Cluster, cluster_options: dict[str, str]
) -> None:
    cluster.create_topic("wide", partitions=2)
    cluster.create_topic("narrow", partitions=1, config={"max.message.bytes": 200})
    produce_values(cluster, "wide", [f"w{i}" for i in range(6)])
    too_big = lambda df: df.select("key", F.expr("repeat('x', 1000)").alias("value"))  # noqa: E731
    with pytest.raises(RecordTooLargeError, match=r"max.message.bytes"):  # raised in a task, re-raised as itself
        consume_into(spark, "big", "wide", too_big, output_topic="narrow", **cluster_options)
    assert cluster.high_watermarks("narrow") == {0: 0} and cluster.committed_offsets("big", ["wide"]) == {}
    with cluster.producer(max_block_ms=2000) as producer:  # the failed run released the leases
        producer.send("narrow", b"ok").result()
    assert consume_into(spark, "big", "wide", output_topic="narrow", **cluster_options).records == 6


# -- bad input changes nothing -------------------------------------------------------------
def test_bad_input_fails_clearly_and_changes_nothing(
    spark: SparkSession, cluster: sparklog.Cluster, cluster_options: dict[str, str], sparklog_home: Path
) -> None:
    cluster.create_topic("raw", partitions=2)
    cluster.create_topic("sink", partitions=1)
    produce_values(cluster, "raw", [f"x{i}" for i in range(8)])
    path = str(sparklog_home / "lake" / "out")
    consume_into(spark, "ok", "raw", lineage, output_path=path, maxOffsetsPerTrigger=4, **cluster_options)
    (sparklog_home / "not_delta").mkdir()
    (sparklog_home / "not_delta" / "file.txt").write_text("hello")
    cases: list[tuple[type[Exception], str, dict[str, Any]]] = [
        (TopicNotFoundError, "Topic nope does not exist", dict(group_id="ok", topics="nope", output_path=path)),
        (InvalidGroupIdError, "bad group!", dict(group_id="bad group!", topics="raw", output_path=path)),
        (TopicNotFoundError, "Output topic missing", dict(group_id="ok", topics="raw", output_topic="missing")),
        (ConfigError, "exactly one", dict(group_id="ok", topics="raw")),
        (ConfigError, "also an input", dict(group_id="ok", topics="raw", output_topic="raw")),
        (
            ConfigError,
            "Unknown option 'subscribe'",
            dict(group_id="ok", topics="raw", output_path=path, subscribe="raw"),
        ),
        (
            SchemaMismatchError,
            "column 'value'",
            dict(
                group_id="ok",
                topics="raw",
                output_path=path,
                transform=lambda df: df.select(F.col("offset").alias("value")),
            ),
        ),
        (
            SchemaMismatchError,
            "new column 'extra'",
            dict(
                group_id="ok",
                topics="raw",
                output_path=path,
                transform=lambda df: lineage(df).withColumn("extra", F.lit(1)),
            ),
        ),
        (
            SchemaMismatchError,
            "unsupported column 'offset'",
            dict(group_id="ok", topics="raw", output_topic="sink", transform=lambda df: df.select("value", "offset")),
        ),
        (
            StorageError,
            "not a Delta table",
            dict(group_id="ok", topics="raw", output_path=str(sparklog_home / "not_delta")),
        ),
    ]
    for error, message, kwargs in cases:
        with assert_unchanged(cluster, sparklog_home):
            with pytest.raises(error, match=message):
                consume_into(spark, **kwargs, **cluster_options)
    with assert_unchanged(cluster, sparklog_home):
        with pytest.raises(TopicNotFoundError):
            consume(spark, "ok", "raw,nope", **cluster_options)
        with pytest.raises(ConfigError, match="maxOffsetsPerTrigger"):
            consume(spark, "ok", "raw", maxOffsetsPerTrigger=0, **cluster_options)
