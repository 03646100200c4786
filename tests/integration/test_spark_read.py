"""Spark reads: Kafka-source schema and options, compared with chispa against known records."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import pytest
from chispa import assert_df_equality
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

import sparklog
from tests.helpers import BOTH_STORES

KAFKA_SOURCE_SCHEMA = StructType(
    [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
)
HEADERS_FIELD = StructField(
    "headers", ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))
)
BASE_MS = 1_700_000_000_000  # every record i of partition p has timestamp BASE_MS + 1000 * i


@pytest.fixture
def topics(cluster: sparklog.Cluster) -> dict[str, int]:
    """Two topics, 3 and 1 partitions, 10 records per partition with known timestamps/headers."""
    layout = {"clicks": 3, "clicks-eu": 1}
    with cluster.producer(linger_ms=50) as producer:
        for topic, partitions in layout.items():
            cluster.create_topic(topic, partitions=partitions)
            for p in range(partitions):
                for i in range(10):
                    producer.send(
                        topic,
                        f"{topic}/{p}/{i}",
                        key=f"k{i}",
                        partition=p,
                        headers=[("n", str(i).encode())] if i % 2 else None,
                        timestamp_ms=BASE_MS + 1000 * i,
                    )
    return layout


def expected(spark: SparkSession, rows: list[tuple[str, int, int]], headers: bool = False) -> DataFrame:
    """The records (topic, partition, offset) as the Kafka source would return them."""
    data = []
    for topic, p, i in rows:
        row = [
            f"k{i}".encode(),
            f"{topic}/{p}/{i}".encode(),
            topic,
            p,
            i,
            datetime.fromtimestamp((BASE_MS + 1000 * i) / 1000, tz=UTC).replace(tzinfo=None),
            0,
        ]
        if headers:
            row.append([{"key": "n", "value": str(i).encode()}] if i % 2 else None)
        data.append(tuple(row))
    schema = KAFKA_SOURCE_SCHEMA
    if headers:
        schema = StructType([*list(schema.fields), HEADERS_FIELD])
    return spark.createDataFrame(data, schema)


def load(spark: SparkSession, options: dict[str, str], **extra: str) -> DataFrame:
    return spark.read.format("sparklog").options(**options).options(**extra).load()


def rows_of(topic: str, partitions: Sequence[int], offsets: Sequence[int]) -> list[tuple[str, int, int]]:
    return [(topic, p, i) for p in partitions for i in offsets]


def same(actual: DataFrame, wanted: DataFrame) -> None:
    assert_df_equality(actual, wanted, ignore_row_order=True, ignore_nullable=True)


def test_schema_is_the_kafka_source_schema(
    spark: SparkSession, cluster_options: dict[str, str], topics: dict[str, int]
) -> None:
    df = load(spark, cluster_options, subscribe="clicks")
    assert [(f.name, f.dataType) for f in df.schema] == [(f.name, f.dataType) for f in KAFKA_SOURCE_SCHEMA]
    with_headers = load(spark, cluster_options, subscribe="clicks", includeHeaders="true")
    assert with_headers.schema.fieldNames()[-1] == "headers"
    assert with_headers.schema["headers"].dataType.simpleString() == "array<struct<key:string,value:binary>>"


def test_subscribe_pattern_and_assign(
    spark: SparkSession, cluster_options: dict[str, str], topics: dict[str, int]
) -> None:
    same(load(spark, cluster_options, subscribe="clicks"), expected(spark, rows_of("clicks", range(3), range(10))))
    both = rows_of("clicks", range(3), range(10)) + rows_of("clicks-eu", [0], range(10))
    same(load(spark, cluster_options, subscribe="clicks,clicks-eu"), expected(spark, both))
    same(load(spark, cluster_options, subscribePattern="clicks.*"), expected(spark, both))
    same(
        load(spark, cluster_options, subscribePattern="clicks-e."),
        expected(spark, rows_of("clicks-eu", [0], range(10))),
    )
    same(
        load(spark, cluster_options, assign=json.dumps({"clicks": [0, 2]})),
        expected(spark, rows_of("clicks", [0, 2], range(10))),
    )


@BOTH_STORES
def test_offsets_earliest_latest_and_json(
    spark: SparkSession, cluster_options: dict[str, str], topics: dict[str, int]
) -> None:
    same(
        load(spark, cluster_options, subscribe="clicks", startingOffsets="earliest", endingOffsets="latest"),
        expected(spark, rows_of("clicks", range(3), range(10))),
    )
    starting = json.dumps({"clicks": {"0": 3, "1": -2, "2": 9}})
    ending = json.dumps({"clicks": {"0": 5, "1": 2, "2": -1}})
    wanted = (
        rows_of("clicks", [0], range(3, 5)) + rows_of("clicks", [1], range(0, 2)) + rows_of("clicks", [2], range(9, 10))
    )
    same(
        load(spark, cluster_options, subscribe="clicks", startingOffsets=starting, endingOffsets=ending),
        expected(spark, wanted),
    )


def test_timestamps(spark: SparkSession, cluster_options: dict[str, str], topics: dict[str, int]) -> None:
    same(
        load(spark, cluster_options, subscribe="clicks", startingTimestamp=str(BASE_MS + 7000)),
        expected(spark, rows_of("clicks", range(3), range(7, 10))),
    )
    same(
        load(
            spark,
            cluster_options,
            subscribe="clicks",
            startingTimestamp=str(BASE_MS + 2500),
            endingTimestamp=str(BASE_MS + 5000),
        ),
        expected(spark, rows_of("clicks", range(3), range(3, 5))),
    )
    by_partition = json.dumps({"clicks": {"0": BASE_MS + 8000, "1": BASE_MS, "2": BASE_MS + 9000}})
    wanted = rows_of("clicks", [0], range(8, 10)) + rows_of("clicks", [1], range(10)) + rows_of("clicks", [2], [9])
    same(
        load(spark, cluster_options, subscribe="clicks", startingOffsetsByTimestamp=by_partition),
        expected(spark, wanted),
    )
    with pytest.raises(Exception, match="startingOffsetsByTimestampStrategy"):
        load(spark, cluster_options, subscribe="clicks", startingTimestamp=str(BASE_MS + 60_000)).collect()
    assert (
        load(
            spark,
            cluster_options,
            subscribe="clicks",
            startingTimestamp=str(BASE_MS + 60_000),
            startingOffsetsByTimestampStrategy="latest",
        ).count()
        == 0
    )


@BOTH_STORES
def test_include_headers(spark: SparkSession, cluster_options: dict[str, str], topics: dict[str, int]) -> None:
    same(
        load(spark, cluster_options, subscribe="clicks-eu", includeHeaders="true"),
        expected(spark, rows_of("clicks-eu", [0], range(10)), headers=True),
    )


def test_min_partitions_splits_work_without_changing_results(
    spark: SparkSession, cluster_options: dict[str, str], topics: dict[str, int]
) -> None:
    df = load(spark, cluster_options, subscribe="clicks", minPartitions="12")
    assert df.rdd.getNumPartitions() >= 12
    same(df, expected(spark, rows_of("clicks", range(3), range(10))))


@BOTH_STORES
def test_sql_view(spark: SparkSession, cluster_options: dict[str, str], topics: dict[str, int]) -> None:
    opts = ", ".join(f"`{k}` '{v}'" for k, v in cluster_options.items())
    spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW clicks_view USING sparklog OPTIONS (subscribe 'clicks', {opts})")
    counts = {
        r["partition"]: r["n"]
        for r in spark.sql("SELECT partition, count(*) AS n FROM clicks_view GROUP BY partition").collect()
    }
    assert counts == {0: 10, 1: 10, 2: 10}
    spark.sql(
        f"CREATE OR REPLACE TEMPORARY VIEW clicks_tail USING sparklog OPTIONS "
        f'(subscribe \'clicks\', startingOffsets \'{{"clicks":{{"0":8,"1":8,"2":8}}}}\', {opts})'
    )
    assert spark.sql("SELECT count(*) AS n FROM clicks_tail").collect()[0]["n"] == 6


def test_sql_view_is_planned_at_creation_and_refreshed_by_recreating(
    spark: SparkSession, cluster: sparklog.Cluster, cluster_options: dict[str, str], topics: dict[str, int]
) -> None:
    opts = ", ".join(f"`{k}` '{v}'" for k, v in cluster_options.items())
    create = f"CREATE OR REPLACE TEMPORARY VIEW eu_view USING sparklog OPTIONS (subscribe 'clicks-eu', {opts})"
    spark.sql(create)
    assert spark.sql("SELECT count(*) AS n FROM eu_view").collect()[0]["n"] == 10
    with cluster.producer() as producer:
        producer.send("clicks-eu", "late", partition=0).result()
    assert spark.sql("SELECT count(*) AS n FROM eu_view").collect()[0]["n"] == 10, "a view keeps its planned offsets"
    spark.sql(create)
    assert spark.sql("SELECT count(*) AS n FROM eu_view").collect()[0]["n"] == 11


@pytest.mark.parametrize("native", [True, False])
@BOTH_STORES
def test_register_topics_helper(
    spark: SparkSession, cluster_options: dict[str, str], topics: dict[str, int], native: bool
) -> None:
    from sparklog.spark import register_topics

    assert register_topics(spark, native=native, **cluster_options) == ["clicks", "clicks-eu"]
    assert spark.sql("SELECT count(*) AS n FROM `clicks-eu`").collect()[0]["n"] == 10
    same(spark.table("clicks"), expected(spark, rows_of("clicks", range(3), range(10))))


def native_and_source(spark: SparkSession, options: dict[str, str], **extra: str) -> tuple[DataFrame, DataFrame]:
    from sparklog.spark.native import read_topics

    return read_topics(spark, {**options, **extra}), load(spark, options, **extra)


@pytest.mark.parametrize(
    "extra",
    [
        {"subscribe": "clicks"},
        {"subscribePattern": "clicks.*", "includeHeaders": "true"},
        {"assign": '{"clicks":[1]}', "startingOffsets": '{"clicks":{"1":4}}', "endingOffsets": '{"clicks":{"1":6}}'},
        {"subscribe": "clicks", "startingTimestamp": str(BASE_MS + 7000)},
    ],
)
@BOTH_STORES
def test_native_read_equals_the_data_source(
    spark: SparkSession, cluster_options: dict[str, str], topics: dict[str, int], extra: dict[str, str]
) -> None:
    native, source = native_and_source(spark, cluster_options, **extra)
    assert native.schema.fieldNames() == source.schema.fieldNames()
    same(native, source)


def test_reads_are_pinned_to_the_offsets_resolved_at_planning(
    spark: SparkSession, cluster: sparklog.Cluster, cluster_options: dict[str, str], topics: dict[str, int]
) -> None:
    df = load(spark, cluster_options, subscribe="clicks-eu")
    assert df.count() == 10
    with cluster.producer() as producer:
        producer.send("clicks-eu", "late", partition=0).result()
    assert load(spark, cluster_options, subscribe="clicks-eu").count() == 11, "a new read sees the new high watermark"
    assert df.count() == 10, "a DataFrame keeps the offsets it was planned with (repeatable reads)"


@pytest.mark.parametrize(
    "options, message",
    [
        ({}, "Exactly one of the options"),
        ({"subscribe": "clicks", "assign": '{"clicks":[0]}'}, "Exactly one of the options"),
        ({"subscribe": "nope"}, "do not exist"),
        ({"assign": "{"}, "malformed JSON"),
        ({"subscribe": "clicks", "startingOffsets": '{"clicks":{"0":1}}'}, "must name every partition"),
        ({"subscribe": "clicks", "startingOffsets": "latest"}, "not allowed for batch"),
        ({"subscribe": "clicks", "endingOffsets": "earliest"}, "not allowed for batch"),
        ({"subscribe": "clicks", "startingTimestamp": "yesterday"}, "milliseconds"),
        ({"subscribe": "clicks", "failOnDataLoss": "maybe"}, "true or false"),
        ({"subscribe": "clicks", "minPartitions": "abc"}, "Option minPartitions must be a positive integer, got 'abc'"),
        ({"subscribe": "clicks", "minPartitions": "0"}, "Option minPartitions must be a positive integer"),
        (
            {"subscribe": "clicks", "startingOffsets": "earlist"},
            r"Option startingOffsets: 'earlist' is not allowed; use earliest, latest, or a JSON object",
        ),
        ({"subscribe": "clicks", "endingOffsets": "lastest"}, r"Option endingOffsets: 'lastest' is not allowed"),
        # Spark's Kafka source fails when a range starts after its end; an empty answer hid the mistake.
        (
            {"subscribe": "clicks-eu", "startingOffsets": '{"clicks-eu":{"0":25}}'},
            r"clicks-eu-0: the starting offset 25 is after the ending offset 10",
        ),
        (
            {
                "subscribe": "clicks-eu",
                "startingOffsets": '{"clicks-eu":{"0":6}}',
                "endingOffsets": '{"clicks-eu":{"0":4}}',
            },
            r"clicks-eu-0: the starting offset 6 is after the ending offset 4",
        ),
    ],
)
def test_bad_options_are_clear_errors(
    spark: SparkSession, cluster_options: dict[str, str], topics: dict[str, int], options: dict[str, str], message: str
) -> None:
    with pytest.raises(Exception, match=message):
        load(spark, cluster_options, **options).collect()


def test_a_range_may_start_at_its_end(
    spark: SparkSession, cluster_options: dict[str, str], topics: dict[str, int]
) -> None:
    at_end = {"subscribe": "clicks-eu", "startingOffsets": '{"clicks-eu":{"0":10}}'}
    assert load(spark, cluster_options, **at_end).count() == 0


def test_ignored_options_are_named_once_in_one_warning(
    spark: SparkSession, cluster_options: dict[str, str], topics: dict[str, int]
) -> None:
    from sparklog.spark.option_names import IgnoredOptionWarning

    ignored = {
        "startingOffset": "earliest",
        "endOffsets": "latest",
        "kafka.bootstrap.servers": "broker:9092",
        "kafka.group.id": "reports",
        "maxOffsetsPerTrigger": "100",
    }
    with pytest.warns(IgnoredOptionWarning) as warned:
        df = load(spark, cluster_options, subscribe="clicks", **ignored)
    assert df.count() == 30, "the read itself goes on"
    assert len(warned) == 1, [str(w.message) for w in warned]
    text = str(warned[0].message)
    assert warned[0].filename == __file__, "the warning points at the user's line"
    assert "startingOffset: unknown option (did you mean startingOffsets?)" in text, text
    assert "endOffsets: unknown option (did you mean endingOffsets?)" in text, text
    assert (
        "kafka.bootstrap.servers: sparklog does not connect to Kafka brokers here; it uses the sparklog "
        f"cluster at ZooKeeper {cluster_options['zookeeper.connect']}" in text
    ), text
    assert "kafka.group.id: a batch read belongs to no consumer group" in text, text
    assert "maxOffsetsPerTrigger: it limits streaming micro-batches only" in text, text


def test_used_options_draw_no_warning(
    spark: SparkSession, cluster_options: dict[str, str], topics: dict[str, int]
) -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        used = {
            "startingOffsets": "earliest",
            "endingOffsets": "latest",
            "includeHeaders": "true",
            "minPartitions": "4",
        }
        assert load(spark, cluster_options, subscribe="clicks", **used).count() == 30


def test_any_session_finds_the_source_without_registration(
    cluster_options: dict[str, str], topics: dict[str, int], tmp_path: Path
) -> None:
    """Spark's data-source lookup finds pyspark_sparklog: a plain SparkSession just works."""
    script = textwrap.dedent(
        f"""
        from pyspark.sql import SparkSession
        spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
        df = spark.read.format("sparklog").option("subscribe", "clicks-eu").options(**{cluster_options!r}).load()
        print("COUNT", df.count())
        spark.stop()
        """
    )
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=240, env=env, cwd=tmp_path
    )
    assert "COUNT 10" in done.stdout, done.stderr[-3000:]
