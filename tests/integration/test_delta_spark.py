"""Topic tables read by Delta Lake's own Spark connector (delta-spark, its jars installed by
``make venv``): ``format("delta")``, ``DESCRIBE HISTORY``, time travel (``VERSION AS OF``,
``TIMESTAMP AS OF``), the Delta streaming source and topics registered as catalog tables see
what sparklog's readers see (DESIGN §1, delta-spark). Tables after every writer and
maintenance, and transactions: tests/wire/test_delta_conformance.py."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from chispa import assert_df_equality
from pyspark.sql import DataFrame, SparkSession

import sparklog
from sparklog.errors import ConfigError
from sparklog.spark import catalog_table_name, committed_view, register_topics
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
def database(spark: SparkSession) -> Iterator[str]:
    """A catalog database of this test's own (the session's catalog lives as long as the run)."""
    name = f"topics_{uuid.uuid4().hex[:12]}"
    try:
        yield name
    finally:
        spark.sql(f"DROP DATABASE IF EXISTS `{name}` CASCADE")


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


def test_timestamp_as_of_reads_the_version_committed_then(
    spark: SparkSession, cluster: sparklog.Cluster, topic_root: str
) -> None:
    def newest_commit_time() -> str:
        # As a string in the session's time zone: Python datetimes would be in the process's.
        history = spark.sql(f"DESCRIBE HISTORY delta.`{topic_root}`")
        [row] = history.selectExpr("CAST(max(timestamp) AS STRING)").collect()
        return str(row[0])

    produce(cluster, 0, 9)
    first = newest_commit_time()
    produce(cluster, 9, 6)
    newest = newest_commit_time()
    assert newest > first, "the later produce commits later"
    for when, count in ((first, 9), (newest, 15)):
        sql = f"SELECT * FROM delta.`{topic_root}` TIMESTAMP AS OF '{when}'"
        assert spark.sql(sql).count() == count, sql
        assert spark.read.format("delta").option("timestampAsOf", when).load(topic_root).count() == count


def test_register_topics_makes_catalog_tables(
    spark: SparkSession, cluster: sparklog.Cluster, cluster_options: dict[str, str], topic_root: str, database: str
) -> None:
    cluster.create_topic("web.click-stream", partitions=2)
    produce(cluster, 0, 12)
    with cluster.producer() as producer:
        for i in range(5):
            producer.send("web.click-stream", f"click-{i}")
    version = cluster.replicas.leader_table(TOPIC).snapshot().version()
    assert sorted(register_topics(spark, native=True, database=database, **cluster_options)) == sorted(
        [TOPIC, "web.click-stream"]
    )
    assert catalog_table_name("web.click-stream") == "web_click_stream"
    tables = {r.tableName for r in spark.sql(f"SHOW TABLES IN {database}").collect() if not r.isTemporary}
    assert tables == {TOPIC, "web_click_stream"}
    same(spark.sql(f"SELECT {', '.join(COLUMNS)} FROM {database}.{TOPIC}"), as_sparklog_reads(spark, cluster_options))
    assert spark.sql(f"SELECT count(*) AS n FROM {database}.web_click_stream").first() == (5,)
    history = spark.sql(f"DESCRIBE HISTORY {database}.{TOPIC}").collect()
    assert max(int(r["version"]) for r in history) == version
    assert cluster.replicas.leader_table(TOPIC).snapshot().version() == version, "registering commits nothing"

    produce(cluster, 12, 3)
    register_topics(spark, native=True, database=database, **cluster_options)  # again: the tables are kept
    assert spark.sql(f"SELECT count(*) AS n FROM {database}.{TOPIC}").first() == (15,), "a table reads the newest"
    spark.sql(f"DROP TABLE {database}.{TOPIC}")
    assert cluster.read(TOPIC).num_rows == 15, "dropping the catalog table leaves the topic"


def test_topics_sharing_a_catalog_name_are_refused_before_any_table(
    spark: SparkSession, cluster: sparklog.Cluster, cluster_options: dict[str, str], database: str
) -> None:
    cluster.create_topic("a.b", partitions=1)
    cluster.create_topic("A-b", partitions=1)
    with pytest.raises(ConfigError, match="Database name 'my-db' is not a Spark catalog name"):
        register_topics(spark, native=True, database="my-db", **cluster_options)
    with pytest.raises(ConfigError, match=r"Topics A-b, a\.b would share a catalog table name"):
        register_topics(spark, native=True, database=database, **cluster_options)
    assert not spark.catalog.databaseExists(database)


def test_committed_view_registers_a_view_pinned_to_its_version(
    spark: SparkSession, cluster: sparklog.Cluster, cluster_options: dict[str, str], topic_root: str
) -> None:
    produce(cluster, 0, 10)
    committed_view(spark, TOPIC, view_name="orders_committed", include_headers=False, **cluster_options)
    produce(cluster, 10, 5)
    view = spark.table("orders_committed")
    assert view.columns == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    assert view.count() == 10, "planned against the version read when it was made"
    same(
        committed_view(spark, TOPIC, include_headers=False, **cluster_options).select(COLUMNS),
        as_sparklog_reads(spark, cluster_options),
    )


@pytest.mark.parametrize("log_store", ["s3"], indirect=True)
def test_tables_on_an_object_store_are_refused_with_what_to_use(
    spark: SparkSession, cluster: sparklog.Cluster, cluster_options: dict[str, str], database: str
) -> None:
    cluster.create_topic(TOPIC, partitions=1)
    with pytest.raises(ConfigError, match=f"Topic {TOPIC}'s table is on an object store .*sparklog.spark.read"):
        committed_view(spark, TOPIC, include_headers=False, **cluster_options)
    with pytest.raises(ConfigError, match="Hadoop's S3 connector"):
        register_topics(spark, native=True, database=database, **cluster_options)
    assert not spark.catalog.databaseExists(database), "refused before anything is created"
