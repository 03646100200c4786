"""Topic tables read by Delta Lake's own Spark connector (delta-spark, its jars installed by
``make venv``): ``format("delta")``, ``DESCRIBE HISTORY``, time travel and the Delta streaming
source see what sparklog's readers see (DESIGN §12, delta-spark)."""

from __future__ import annotations

from pathlib import Path

import pytest
from chispa import assert_df_equality
from pyspark.sql import DataFrame, SparkSession

import sparklog
from sparklog.spark.session import DELTA_SESSION_CONF, delta_jars_installed
from tests.helpers import run_available_now

TOPIC = "orders"
COLUMNS = ["partition", "offset", "timestamp", "timestampType", "key", "value"]


def produce(cluster: sparklog.Cluster, first: int, count: int, partitions: int = 3) -> None:
    with cluster.producer() as producer:
        for i in range(first, first + count):
            producer.send(TOPIC, f"order-{i}", key=f"k{i}", partition=i % partitions)


def as_sparklog_reads(spark: SparkSession, cluster_options: dict[str, str]) -> DataFrame:
    return spark.read.format("sparklog").options(**cluster_options).option("subscribe", TOPIC).load().select(COLUMNS)


def same(actual: DataFrame, wanted: DataFrame) -> None:
    assert_df_equality(actual, wanted, ignore_row_order=True, ignore_nullable=True)


@pytest.fixture
def topic_root(cluster: sparklog.Cluster) -> str:
    cluster.create_topic(TOPIC, partitions=3)
    return cluster.topic_location(TOPIC)


def test_the_session_has_deltas_extension_and_catalog(spark: SparkSession) -> None:
    assert delta_jars_installed(), "make venv links delta-spark's jars into PySpark's jars directory"
    for key, value in DELTA_SESSION_CONF.items():
        assert spark.conf.get(key) == value


def test_format_delta_reads_a_topic_as_sparklog_does(
    spark: SparkSession, cluster: sparklog.Cluster, cluster_options: dict[str, str], topic_root: str
) -> None:
    produce(cluster, 0, 30)
    delta = spark.read.format("delta").load(topic_root)
    assert delta.count() == 30
    same(delta.select(COLUMNS), as_sparklog_reads(spark, cluster_options))


def test_history_and_time_travel(spark: SparkSession, cluster: sparklog.Cluster, topic_root: str) -> None:
    produce(cluster, 0, 9)
    first = spark.sql(f"DESCRIBE HISTORY delta.`{topic_root}`").agg({"version": "max"}).first()
    assert first is not None
    version = int(first[0])
    produce(cluster, 9, 6)
    history = spark.sql(f"DESCRIBE HISTORY delta.`{topic_root}`").collect()
    assert max(int(r["version"]) for r in history) > version, "the later produce is a later version"
    assert spark.read.format("delta").option("versionAsOf", version).load(topic_root).count() == 9
    assert spark.sql(f"SELECT * FROM delta.`{topic_root}` VERSION AS OF {version}").count() == 9
    assert spark.read.format("delta").load(topic_root).count() == 15


def test_the_delta_streaming_source_reads_a_topic(
    spark: SparkSession, cluster: sparklog.Cluster, cluster_options: dict[str, str], topic_root: str, tmp_path: Path
) -> None:
    produce(cluster, 0, 12)
    records = spark.readStream.format("delta").load(topic_root)
    run_available_now(records.writeStream.format("parquet").option("path", str(tmp_path / "out")), tmp_path / "cp")
    same(spark.read.parquet(str(tmp_path / "out")).select(COLUMNS), as_sparklog_reads(spark, cluster_options))
