"""The jobs' logic in the test's Spark session (what the spark-submit tests do not each run):
CSV values landed in Parquet files with their malformed values dead-lettered and the group's
offsets committed (at least once: files, then offsets), and a Delta table (one the consume
side wrote) produced back into a topic by the produce job's source reading."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import sparklog
from sparklog.errors import ConfigError
from sparklog.spark import produce
from sparklog.spark.job_sources import check_source, read_source, to_records
from sparklog.spark.landing import land, sink_location
from sparklog.spark.value_formats import ValueFormat, parse_schema
from tests.helpers import stored_records
from tests.integration.test_spark_consume import produce_values

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def test_csv_values_land_in_parquet_and_a_delta_table_produces_back(
    spark: SparkSession, cluster: sparklog.Cluster, cluster_options: dict[str, str], tmp_path: Path
) -> None:
    cluster.create_topic("rows", partitions=2)
    produce_values(cluster, "rows", ["1,one", "2,two", "x,bad", "3,three"])
    values = ValueFormat("csv", parse_schema(spark, "n INT, word STRING"))
    sink, dead = str(tmp_path / "sink"), str(tmp_path / "dead")
    first = land(spark, "g", ["rows"], sink, "parquet", values, dead, **cluster_options)
    assert (first.records, first.dead_letters) == (4, 1)
    landed = spark.read.parquet(sink)
    assert landed.columns == ["key", "n", "word", "topic", "partition", "offset", "timestamp"]
    assert sorted((r.n, r.word) for r in landed.collect()) == [(1, "one"), (2, "two"), (3, "three")]
    assert [bytes(r.value) for r in spark.read.parquet(dead).collect()] == [b"x,bad"]
    hw = cluster.high_watermarks("rows")
    assert cluster.committed_offsets("g") == {("rows", p): end for p, end in hw.items()}
    assert land(spark, "g", ["rows"], sink, "parquet", values, dead, **cluster_options).records == 0

    lake = str(tmp_path / "lake")
    land(spark, "g2", ["rows"], lake, "delta", values, str(tmp_path / "lake-dead"), **cluster_options)
    check_source(lake, "delta")
    cluster.create_topic("again", partitions=1)
    records = to_records(read_source(spark, lake, "delta"), key_expr="key", value_expr="word")
    result = produce(records, "again", **cluster_options)
    assert result.records == 3
    assert sorted(r.value or b"" for r in stored_records(cluster, "again")) == [b"one", b"three", b"two"]


def test_a_table_name_sink_lands_in_the_warehouse_and_is_registered(
    spark: SparkSession, cluster: sparklog.Cluster, cluster_options: dict[str, str], tmp_path: Path
) -> None:
    cluster.create_topic("named", partitions=1)
    produce_values(cluster, "named", ["1,one", "2,two"])
    values = ValueFormat("csv", parse_schema(spark, "n INT, word STRING"))
    spark.sql(f"CREATE DATABASE landing_db LOCATION '{tmp_path / 'landing_db'}'")
    try:
        path, table = sink_location(spark, "landing_db.named_rows")
        assert table == "landing_db.named_rows" and path == str(tmp_path / "landing_db" / "named_rows"), path
        assert land(spark, "g", ["named"], "landing_db.named_rows", "delta", values, **cluster_options).records == 2
        assert sorted(r.word for r in spark.table("landing_db.named_rows").collect()) == ["one", "two"]
        # A registered table is found again by name: the next round lands in its location.
        produce_values(cluster, "named", ["3,three"])
        assert land(spark, "g", ["named"], "landing_db.named_rows", "delta", values, **cluster_options).records == 1
        assert spark.table("landing_db.named_rows").count() == 3
        assert sink_location(spark, "landing_db.named_rows") == (path, "landing_db.named_rows")
        assert sink_location(spark, str(tmp_path / "plain")) == (str(tmp_path / "plain"), None)
        # A table name is a source too, when the session's catalog has it.
        check_source("landing_db.named_rows", "delta")
        assert read_source(spark, "landing_db.named_rows", "delta").count() == 3
        with pytest.raises(ConfigError, match=r"Source table landing_db.missing is not in the session's catalog"):
            read_source(spark, "landing_db.missing", "delta")
    finally:
        spark.sql("DROP DATABASE landing_db CASCADE")


def test_dead_letters_follow_a_topic_deleted_and_created_again(
    spark: SparkSession, cluster: sparklog.Cluster, cluster_options: dict[str, str], tmp_path: Path
) -> None:
    """The sink and the dead-letter table keep the input offsets of the topic they read; a
    topic of the same name created again is another topic: its malformed values are
    dead-lettered from its first offset, not from where the old topic's ended."""
    values = ValueFormat("csv", parse_schema(spark, "n INT, word STRING"))
    sink, dead = str(tmp_path / "lake"), str(tmp_path / "lake-dead")
    cluster.create_topic("reborn", partitions=1)
    produce_values(cluster, "reborn", ["1,one", "x,bad", "2,two", "y,bad", "3,three"])
    first = land(spark, "g", ["reborn"], sink, "delta", values, dead, **cluster_options)
    assert (first.records, first.dead_letters) == (5, 2)
    cluster.delete_topic("reborn")
    cluster.create_topic("reborn", partitions=1)
    produce_values(cluster, "reborn", ["z,worse", "4,four"])
    again = land(spark, "g", ["reborn"], sink, "delta", values, dead, **cluster_options)
    assert (again.records, again.dead_letters) == (2, 1)
    assert sorted(r.value for r in spark.read.format("delta").load(dead).collect()) == [b"x,bad", b"y,bad", b"z,worse"]
    assert sorted(r.word for r in spark.read.format("delta").load(sink).collect()) == ["four", "one", "three", "two"]
