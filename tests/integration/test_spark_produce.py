"""Spark produce: one job = one atomic Delta commit with contiguous offsets per partition."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pyspark.sql import functions as F

import sparklog
from sparklog.errors import SparklogError
from sparklog.model.records import partition_for_key
from sparklog.spark import produce


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


def test_spark_produce_million_records_is_one_commit(spark, cluster, cluster_options):
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


def test_spark_produce_appends_after_light_producer(spark, cluster, cluster_options):
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


def test_keys_partition_like_kafka_and_explicit_partition_wins(spark, cluster, cluster_options):
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


def test_binary_columns_headers_and_timestamps_round_trip(spark, cluster, cluster_options):
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


def test_dataframe_writer_api_and_mode_overwrite_rejected(spark, cluster, cluster_options):
    cluster.create_topic("plain", partitions=2)
    df = spark.range(100).select(F.col("id").cast("string").alias("value"))
    df.write.format("sparklog").options(**cluster_options).option("topic", "plain").mode("append").save()
    assert sum(hw for _s, hw in cluster.partition_offsets("plain").values()) == 100
    with pytest.raises(Exception, match="append-only"):
        df.write.format("sparklog").options(**cluster_options).option("topic", "plain").mode("overwrite").save()
    assert sum(hw for _s, hw in cluster.partition_offsets("plain").values()) == 100


@pytest.mark.parametrize(
    "select, message",
    [
        ("CAST(id AS STRING) AS key", "required column 'value'"),
        ("CAST(id AS STRING) AS value, 1 AS vaule", "unsupported column 'vaule'"),
        ("id AS value", "column 'value' has type bigint"),
        ("CAST(id AS STRING) AS value, 'x' AS partition", "column 'partition' has type string"),
    ],
)
def test_wrong_schema_fails_before_writing(spark, cluster, cluster_options, select, message):
    cluster.create_topic("strict", partitions=1)
    with pytest.raises(Exception, match=message):
        produce(spark.range(10).selectExpr(*[s.strip() for s in select.split(", ")]), "strict", **cluster_options)
    assert cluster.partition_offsets("strict") == {0: (0, 0)}
    # leases were never taken or were released: a correct job goes through at once
    produce(spark.range(3).selectExpr("CAST(id AS STRING) AS value"), "strict", **cluster_options)
    assert cluster.partition_offsets("strict") == {0: (0, 3)}


def test_failed_job_commits_nothing_and_releases_leases(spark, cluster, cluster_options, tmp_path):
    cluster.create_topic("atomic", partitions=3, config={"max.message.bytes": "1000"})
    big = spark.range(2000, numPartitions=4).select(
        F.when(F.col("id") == 1999, F.repeat(F.lit("x"), 5000)).otherwise(F.col("id").cast("string")).alias("value")
    )
    with pytest.raises(Exception, match=r"max.message.bytes"):
        produce(big, "atomic", **cluster_options)
    assert all(hw == 0 for _s, hw in cluster.partition_offsets("atomic").values()), "nothing may be committed"
    produce(spark.range(30).selectExpr("CAST(id AS STRING) AS value"), "atomic", **cluster_options)
    assert sum(hw for _s, hw in cluster.partition_offsets("atomic").values()) == 30


def test_unknown_topic_is_a_clear_error(spark, cluster_options):
    with pytest.raises(Exception, match="does not exist"):
        produce(spark.range(1).selectExpr("CAST(id AS STRING) AS value"), "no-such-topic", **cluster_options)


def test_session_conf_reaches_produce(spark, cluster, cluster_options):
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


def test_errors_are_sparklog_errors_on_the_driver(cluster):
    with pytest.raises(SparklogError):
        cluster.describe_topic("absent")
