"""Spark produce: one job = one atomic Delta commit with contiguous offsets per partition."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pyspark.sql import functions as F

import sparklog
from sparklog.errors import FencedError, SparklogError
from sparklog.model.records import partition_for_key
from sparklog.spark import produce
from sparklog.spark.writer import SegmentsWritten, commit_produce, plan_produce, write_task_segments
from tests.helpers import BOTH_STORES
from tests.integration.test_streaming import assert_leases_released

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def assert_offsets_contiguous(table: pa.Table, expected_counts: dict[int, int]) -> None:
    """Per partition: offsets are exactly 0..n-1 (unique, no gap), n as expected."""
    for partition, count in expected_counts.items():
        offsets = table.filter(pc.equal(table.column("partition"), partition)).column("offset")
        got = sorted(offsets.to_pylist())
        assert got == list(range(count)), (
            f"partition {partition}: expected offsets 0..{count - 1}, got {len(got)} offsets, "
            f"first mismatch at index {next((i for i, o in enumerate(got) if o != i), len(got))}"
        )


def delta_commits(cluster: sparklog.Cluster, topic: str) -> int:
    return cluster.replicas.leader_table(topic).snapshot().version()


def test_spark_produce_million_records_is_one_commit(
    spark: SparkSession, cluster: sparklog.Cluster, cluster_options: dict[str, str]
) -> None:
    cluster.create_topic("million", partitions=4)
    before = delta_commits(cluster, "million")
    n = 1_000_000
    df = spark.range(n, numPartitions=4).select(F.concat(F.lit("v"), F.col("id").cast("string")).alias("value"))
    result = produce(df, "million", **cluster_options)
    assert delta_commits(cluster, "million") == before + 1, "the whole job must be exactly one Delta commit"
    offsets = cluster.partition_offsets("million")
    counts = {p: hw for p, (_start, hw) in offsets.items()}
    assert sum(counts.values()) == n
    assert result.records == n and result.ranges == {p: (0, c) for p, c in counts.items() if c}
    # keyless rows spread evenly (round-robin per task)
    assert max(counts.values()) - min(counts.values()) <= 4, counts
    table = cluster.read("million", include_headers=False)
    assert table.num_rows == n
    assert_offsets_contiguous(table, counts)
    values = table.column("value")
    assert pc.count_distinct(values).as_py() == n, "every input row stored exactly once"


def test_spark_produce_appends_after_light_producer(
    spark: SparkSession, cluster: sparklog.Cluster, cluster_options: dict[str, str]
) -> None:
    cluster.create_topic("mixed", partitions=2)
    with cluster.producer() as producer:
        for i in range(5):
            producer.send("mixed", f"light-{i}", partition=i % 2).result()
    produce(spark.range(10).select(F.col("id").cast("string").alias("value")), "mixed", **cluster_options)
    with cluster.producer() as producer:
        producer.send("mixed", "after", partition=0).result()
    offsets = cluster.partition_offsets("mixed")
    total = sum(hw for _s, hw in offsets.values())
    assert total == 16
    assert_offsets_contiguous(cluster.read("mixed"), {p: hw for p, (_s, hw) in offsets.items()})


@BOTH_STORES
def test_keys_partition_like_kafka_and_explicit_partition_wins(
    spark: SparkSession, cluster: sparklog.Cluster, cluster_options: dict[str, str]
) -> None:
    cluster.create_topic("keyed", partitions=5)
    rows = [(f"key-{i}", f"value-{i}", 3 if i % 7 == 0 else None) for i in range(500)]
    df = spark.createDataFrame(rows, "key string, value string, partition int")
    produce(df, "keyed", **cluster_options)
    table = cluster.read("keyed")
    by_value = {
        v.decode(): (k.decode(), p)
        for k, v, p in zip(
            table.column("key").to_pylist(),
            table.column("value").to_pylist(),
            table.column("partition").to_pylist(),
            strict=False,
        )
    }
    for key, value, explicit in rows:
        expected = explicit if explicit is not None else partition_for_key(key.encode(), 5)
        assert by_value[value] == (key, expected), f"{value}: expected partition {expected}, got {by_value[value][1]}"


def test_binary_columns_headers_and_timestamps_round_trip(
    spark: SparkSession, cluster: sparklog.Cluster, cluster_options: dict[str, str]
) -> None:
    cluster.create_topic("typed", partitions=1)
    df = spark.sql(
        "SELECT CAST('k' AS BINARY) AS key, CAST('v' AS BINARY) AS value, "
        "TIMESTAMP '2024-01-02 03:04:05.678' AS timestamp, "
        "array(named_struct('key', 'h1', 'value', CAST('x' AS BINARY))) AS headers"
    )
    produce(df, "typed", **cluster_options)
    row = cluster.read("typed").to_pylist()[0]
    assert (row["key"], row["value"], row["timestampType"]) == (b"k", b"v", 0)
    assert row["timestamp"].isoformat() == "2024-01-02T03:04:05.678000+00:00"
    assert row["headers"] == [{"key": "h1", "value": b"x"}]


def test_dataframe_writer_api_and_mode_overwrite_rejected(
    spark: SparkSession, cluster: sparklog.Cluster, cluster_options: dict[str, str]
) -> None:
    cluster.create_topic("plain", partitions=2)
    df = spark.range(100).select(F.col("id").cast("string").alias("value"))
    df.write.format("sparklog").options(**cluster_options).option("topic", "plain").mode("append").save()
    assert sum(hw for _s, hw in cluster.partition_offsets("plain").values()) == 100
    with pytest.raises(Exception, match="append-only") as rejected:
        df.write.format("sparklog").options(**cluster_options).option("topic", "plain").mode("overwrite").save()
    # The way out is named, and it is one that works in every script (not "the default", which
    # appends only where sparklog.spark was imported: issue 17).
    assert 'use .mode("append")' in str(rejected.value) and "default" not in str(rejected.value)
    assert sum(hw for _s, hw in cluster.partition_offsets("plain").values()) == 100


@BOTH_STORES
def test_dataframe_writer_save_without_mode_appends_like_kafka(
    spark: SparkSession, cluster: sparklog.Cluster, cluster_options: dict[str, str], tmp_path: Path
) -> None:
    # The README's `df.write.format("sparklog").option("topic", t).save()`: no mode means
    # ErrorIfExists, which Spark's Kafka sink treats as append.
    cluster.create_topic("no-mode", partitions=2)
    df = spark.range(50).select(F.col("id").cast("string").alias("value"))

    def total() -> int:
        return sum(hw for _s, hw in cluster.partition_offsets("no-mode").values())

    df.write.format("sparklog").options(**cluster_options).option("topic", "no-mode").save()
    assert total() == 50
    df.write.format("sparklog").options(**cluster_options).option("topic", "no-mode").mode("error").save()
    df.write.save(format="sparklog", topic="no-mode", **cluster_options)
    assert total() == 150
    with pytest.raises(Exception, match="Ignore"):
        df.write.format("sparklog").options(**cluster_options).option("topic", "no-mode").mode("ignore").save()
    assert total() == 150
    # Other formats keep Spark's default: a second plain save to the same path still fails.
    df.write.format("parquet").save(str(tmp_path / "plain"))
    with pytest.raises(Exception, match="already exists"):
        df.write.format("parquet").save(str(tmp_path / "plain"))


def skewed_time_ordered(spark: SparkSession, rows_per_slice: int = 100_000) -> DataFrame:
    """Four Spark partitions in event-time order whose first holds nearly all the rows, so its
    task finishes last; keyed over the topic's partitions."""
    ids = spark.range(0, 4 * rows_per_slice, numPartitions=4).where(
        (F.col("id") < rows_per_slice) | (F.col("id") % 1000 == 0)
    )
    return ids.select(
        F.concat(F.lit("k"), (F.col("id") % 7).cast("string")).alias("key"),
        F.col("id").cast("string").alias("value"),
        F.timestamp_seconds(F.lit(1_700_000_000) + F.col("id")).alias("timestamp"),
    )


def placements(cluster: sparklog.Cluster, topic: str) -> dict[bytes, tuple[int, int]]:
    table = cluster.read(topic, include_headers=False)
    return {
        v: (p, o)
        for v, p, o in zip(
            table.column("value").to_pylist(),
            table.column("partition").to_pylist(),
            table.column("offset").to_pylist(),
            strict=False,
        )
    }


@pytest.mark.parametrize("api", ["produce", "format"])
def test_offsets_follow_the_dataframe_order_not_task_completion(
    spark: SparkSession, cluster: sparklog.Cluster, cluster_options: dict[str, str], api: str
) -> None:
    # Replaying from a timestamp must not start at records from later: a time-ordered
    # DataFrame gives time-ordered partitions however long each task takes.
    cluster.create_topic("timed", partitions=3)
    df = skewed_time_ordered(spark)
    if api == "produce":
        produce(df, "timed", **cluster_options)
    else:
        df.write.format("sparklog").options(**cluster_options).option("topic", "timed").save()
    table = cluster.read("timed", include_headers=False)
    counts = {p: hw for p, (_s, hw) in cluster.partition_offsets("timed").items()}
    assert sum(counts.values()) == 100_000 + 300 == table.num_rows
    assert_offsets_contiguous(table, counts)
    for partition in counts:
        rows = table.filter(pc.equal(table.column("partition"), partition)).sort_by("offset")
        ids = [int(v) for v in rows.column("value").to_pylist()]
        inversion = next((i for i in range(1, len(ids)) if ids[i] < ids[i - 1]), None)
        assert inversion is None, (
            f"partition {partition}: offset {rows.column('offset')[inversion]} holds id {ids[inversion]}, "
            f"written after id {ids[inversion - 1]}: offsets follow task completion, not the DataFrame"
        )


def test_same_input_gives_the_same_offsets(
    spark: SparkSession, cluster: sparklog.Cluster, cluster_options: dict[str, str]
) -> None:
    df = skewed_time_ordered(spark, rows_per_slice=50_000)
    # The same rows in the same order, produced again, and once as a single Spark partition.
    for topic, frame in (("again-1", df), ("again-2", df), ("again-3", df.coalesce(1))):
        cluster.create_topic(topic, partitions=3)
        produce(frame, topic, **cluster_options)
    first, second, single = (placements(cluster, t) for t in ("again-1", "again-2", "again-3"))
    assert len(first) == 50_000 + 150
    moved = [v for v in first if first[v] != single[v]]
    assert not moved, (
        f"{len(moved)} records got other offsets than in one task, e.g. {moved[0]!r}: {first[moved[0]]} vs {single[moved[0]]}"
    )
    assert first == second


def test_a_task_that_went_ahead_is_moved_into_task_order_by_the_commit(
    cluster: sparklog.Cluster, cluster_options: dict[str, str]
) -> None:
    # Task 1 is ready while task 0 is neither recorded nor running (not scheduled yet, or
    # being retried): it must not wait for ever (it may hold the slot task 0 needs), so it
    # writes at guessed offsets, and the commit moves its files into place.
    cluster.create_topic("ahead", partitions=2)
    with cluster.producer() as producer:
        producer.send("ahead", "before", partition=1).result()
    plan = plan_produce(cluster_options, "ahead", "spark-ahead")

    def rows(task: int, n: int) -> pa.RecordBatch:
        return pa.record_batch(
            {"value": [f"t{task}-{i}" for i in range(n)], "partition": pa.array([i % 2 for i in range(n)], pa.int32())}
        )

    ahead = write_task_segments(plan, iter([rows(1, 5)]), 1, unstarted_wait_s=0.0)
    assert {(s["partition"], s["base_offset"]) for s in ahead} == {(0, 0), (1, 1)}, "guessed: the log ends"
    retried = write_task_segments(plan, iter([rows(1, 5)]), 1, unstarted_wait_s=0.0)
    assert [(s["partition"], s["base_offset"]) for s in retried] == [(s["partition"], s["base_offset"]) for s in ahead]
    with pytest.raises(FencedError, match="not deterministic"):
        write_task_segments(plan, iter([rows(1, 4)]), 1, unstarted_wait_s=0.0)
    first = write_task_segments(plan, iter([rows(0, 3)]), 0)
    # Task 2 finds task 1's counts and task 0's place: it knows its own.
    placed = write_task_segments(plan, iter([rows(2, 4)]), 2, unstarted_wait_s=0.0)
    assert {(s["partition"], s["base_offset"]) for s in placed} == {(0, 2 + 3), (1, 1 + 1 + 2)}
    messages = [SegmentsWritten(1, retried), SegmentsWritten(2, placed), SegmentsWritten(0, first)]
    ranges = commit_produce(plan, messages, {"sparklog.job": plan.owner})
    assert ranges == {0: (0, 7), 1: (1, 6)}
    table = cluster.read("ahead", include_headers=False).sort_by([("partition", "ascending"), ("offset", "ascending")])
    got = [
        (p, o, v.decode())
        for p, o, v in zip(*(table.column(c).to_pylist() for c in ("partition", "offset", "value")), strict=False)
    ]
    expected = [(0, o, v) for o, v in enumerate(["t0-0", "t0-2", "t1-0", "t1-2", "t1-4", "t2-0", "t2-2"])]
    expected += [(1, 1 + o, v) for o, v in enumerate(["t0-1", "t1-1", "t1-3", "t2-1", "t2-3"])]
    assert got[:7] == expected[:7] and got[8:] == expected[7:] and got[7][2] == "before"
    live = {
        f.path for f in cluster.replicas.leader_table("ahead").files(cluster.replicas.leader_table("ahead").snapshot())
    }
    assert {s["path"] for s in placed + first} <= live, "tasks that knew their place are committed as written"
    assert not {s["path"] for s in retried} & live, "the guessed files were rewritten at their place"
    assert_leases_released(cluster, "ahead")


@pytest.mark.parametrize(
    "select, message",
    [
        ("CAST(id AS STRING) AS key", "required column 'value'"),
        ("CAST(id AS STRING) AS value, 1 AS vaule", "unsupported column 'vaule'"),
        ("id AS value", "column 'value' has type bigint"),
        ("CAST(id AS STRING) AS value, 'x' AS partition", "column 'partition' has type string"),
    ],
)
def test_wrong_schema_fails_before_writing(
    spark: SparkSession, cluster: sparklog.Cluster, cluster_options: dict[str, str], select: str, message: str
) -> None:
    cluster.create_topic("strict", partitions=1)
    with pytest.raises(Exception, match=message):
        produce(spark.range(10).selectExpr(*[s.strip() for s in select.split(", ")]), "strict", **cluster_options)
    assert cluster.partition_offsets("strict") == {0: (0, 0)}
    # leases were never taken or were released: a correct job goes through at once
    produce(spark.range(3).selectExpr("CAST(id AS STRING) AS value"), "strict", **cluster_options)
    assert cluster.partition_offsets("strict") == {0: (0, 3)}


def test_failed_job_commits_nothing_and_releases_leases(
    spark: SparkSession, cluster: sparklog.Cluster, cluster_options: dict[str, str], tmp_path: Path
) -> None:
    cluster.create_topic("atomic", partitions=3, config={"max.message.bytes": "1000"})
    big = spark.range(2000, numPartitions=4).select(
        F.when(F.col("id") == 1999, F.repeat(F.lit("x"), 5000)).otherwise(F.col("id").cast("string")).alias("value")
    )
    with pytest.raises(Exception, match=r"max.message.bytes"):
        produce(big, "atomic", **cluster_options)
    assert all(hw == 0 for _s, hw in cluster.partition_offsets("atomic").values()), "nothing may be committed"
    produce(spark.range(30).selectExpr("CAST(id AS STRING) AS value"), "atomic", **cluster_options)
    assert sum(hw for _s, hw in cluster.partition_offsets("atomic").values()) == 30


def test_unknown_topic_is_a_clear_error(spark: SparkSession, cluster_options: dict[str, str]) -> None:
    with pytest.raises(Exception, match="does not exist"):
        produce(spark.range(1).selectExpr("CAST(id AS STRING) AS value"), "no-such-topic", **cluster_options)


def test_session_conf_reaches_produce(
    spark: SparkSession, cluster: sparklog.Cluster, cluster_options: dict[str, str]
) -> None:
    cluster.create_topic("conf-topic", partitions=1)
    for key, value in cluster_options.items():
        spark.conf.set(f"spark.sparklog.{key}", value)
    try:
        result = produce(spark.range(7).selectExpr("CAST(id AS STRING) AS value"), "conf-topic")
    finally:
        for key in cluster_options:
            spark.conf.unset(f"spark.sparklog.{key}")
    assert result.records == 7
    assert cluster.partition_offsets("conf-topic") == {0: (0, 7)}


def test_errors_are_sparklog_errors_on_the_driver(cluster: sparklog.Cluster) -> None:
    with pytest.raises(SparklogError):
        cluster.describe_topic("absent")
