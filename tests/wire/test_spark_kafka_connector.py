"""Spark's own Kafka connector (``spark-sql-kafka-0-10`` for the pinned Spark, its jars
installed by ``make venv``) pointed at a sparklog broker: the Structured Streaming + Kafka
integration guide's reads and writes, unchanged but for ``kafka.bootstrap.servers``, give what
``format("sparklog")`` gives on the same topic. Its consumer and producer are Kafka's Java
clients (kafka-clients 3.9)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from chispa import assert_df_equality
from confluent_kafka import Producer
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import sparklog
from sparklog.testing import BrokerAgents
from tests.helpers import run_available_now
from tests.wire.conftest import create_led_topic

TOPIC = "spark-kafka"
COLUMNS = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]


def produce(bootstrap: str, first: int, count: int, partitions: int = 3, topic: str = TOPIC) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(first, first + count):
        producer.produce(topic, value=f"v{i}".encode(), key=f"k{i}".encode(), partition=i % partitions)
    assert producer.flush(30) == 0


def kafka(spark: SparkSession, agents: BrokerAgents, **options: str) -> DataFrame:
    return (
        spark.read.format("kafka").option("kafka.bootstrap.servers", agents.bootstrap_servers).options(**options).load()
    )


def kafka_stream(spark: SparkSession, agents: BrokerAgents, **options: str) -> DataFrame:
    """Spark's Kafka source as a stream of ``TOPIC`` from its earliest offsets."""
    reader = spark.readStream.format("kafka").option("kafka.bootstrap.servers", agents.bootstrap_servers)
    return reader.option("subscribe", TOPIC).option("startingOffsets", "earliest").options(**options).load()


def sparklog_reads(spark: SparkSession, cluster_options: dict[str, str], **options: str) -> DataFrame:
    return spark.read.format("sparklog").options(**cluster_options).options(**options).load()


@pytest.fixture
def broker(cluster: sparklog.Cluster, one_broker: BrokerAgents) -> BrokerAgents:
    """One broker leading ``TOPIC`` (3 partitions)."""
    create_led_topic(cluster, one_broker, TOPIC, partitions=3)
    return one_broker


def same(actual: DataFrame, wanted: DataFrame) -> None:
    assert_df_equality(actual.select(COLUMNS), wanted.select(COLUMNS), ignore_row_order=True, ignore_nullable=True)


def test_batch_read_subscribe_and_offsets(
    spark: SparkSession, cluster_options: dict[str, str], broker: BrokerAgents
) -> None:
    produce(broker.bootstrap_servers, 0, 30)
    same(kafka(spark, broker, subscribe=TOPIC), sparklog_reads(spark, cluster_options, subscribe=TOPIC))
    ranged = {"startingOffsets": json.dumps({TOPIC: {"0": 2, "1": -2, "2": 5}}), "endingOffsets": "latest"}
    same(
        kafka(spark, broker, assign=json.dumps({TOPIC: [0, 1, 2]}), **ranged),
        sparklog_reads(spark, cluster_options, subscribe=TOPIC, **ranged),
    )
    assert kafka(spark, broker, subscribePattern="spark-.*").count() == 30


def test_batch_write_then_read_back(spark: SparkSession, cluster_options: dict[str, str], broker: BrokerAgents) -> None:
    rows = spark.range(20).select(
        F.concat(F.lit("k"), F.col("id").cast("string")).alias("key"),
        F.concat(F.lit("v"), F.col("id").cast("string")).alias("value"),
    )
    rows.write.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap_servers).option("topic", TOPIC).save()
    stored = sparklog_reads(spark, cluster_options, subscribe=TOPIC)
    got = sorted((bytes(r["key"]).decode(), bytes(r["value"]).decode()) for r in stored.collect())
    assert got == sorted((f"k{i}", f"v{i}") for i in range(20))


def test_streaming_read_resumes_from_its_checkpoint(
    spark: SparkSession,
    cluster_options: dict[str, str],
    broker: BrokerAgents,
    tmp_path: Path,
) -> None:

    def run_once() -> None:
        records = kafka_stream(spark, broker)
        run_available_now(records.writeStream.format("parquet").option("path", str(tmp_path / "out")), tmp_path / "cp")

    produce(broker.bootstrap_servers, 0, 12)
    run_once()
    produce(broker.bootstrap_servers, 12, 9)
    run_once()
    landed = spark.read.parquet(str(tmp_path / "out"))
    same(landed, sparklog_reads(spark, cluster_options, subscribe=TOPIC))
    assert landed.count() == 21, "every record exactly once across the restart"


def test_headers_timestamps_and_min_partitions(
    spark: SparkSession, cluster_options: dict[str, str], broker: BrokerAgents
) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "acks": "all"})
    base_ms = 1_700_000_000_000
    for i in range(18):
        headers: list[tuple[str, str | bytes | None]] | None = [("n", str(i).encode())] if i % 2 else None
        producer.produce(
            TOPIC, value=b"v%d" % i, key=b"k%d" % i, partition=i % 3, timestamp=base_ms + 1000 * i, headers=headers
        )
    assert producer.flush(30) == 0
    with_headers = {"subscribe": TOPIC, "includeHeaders": "true"}
    theirs = kafka(spark, broker, **with_headers)
    assert_df_equality(
        theirs.select([*COLUMNS, "headers"]),
        sparklog_reads(spark, cluster_options, **with_headers).select([*COLUMNS, "headers"]),
        ignore_row_order=True,
        ignore_nullable=True,
    )
    from_time = {"subscribe": TOPIC, "startingTimestamp": str(base_ms + 9_000)}
    same(kafka(spark, broker, **from_time), sparklog_reads(spark, cluster_options, **from_time))
    assert kafka(spark, broker, **from_time).count() == 9
    split = kafka(spark, broker, subscribe=TOPIC, minPartitions="6")
    assert split.rdd.getNumPartitions() >= 6 and split.count() == 18


def test_read_committed_hides_aborted_records(
    spark: SparkSession, cluster_options: dict[str, str], broker: BrokerAgents
) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "transactional.id": "spark-kafka-txn"})
    producer.init_transactions(30)
    for outcome, batch in (("commit", range(0, 5)), ("abort", range(5, 8)), ("commit", range(8, 10))):
        producer.begin_transaction()
        for i in batch:
            producer.produce(TOPIC, value=b"v%d" % i, partition=0)
        producer.flush(30)
        producer.commit_transaction(30) if outcome == "commit" else producer.abort_transaction(30)
    committed = {"subscribe": TOPIC, "kafka.isolation.level": "read_committed"}
    values = sorted(bytes(r["value"]) for r in kafka(spark, broker, **committed).collect())
    assert values == sorted(b"v%d" % i for i in (*range(5), 8, 9))
    same(kafka(spark, broker, **committed), sparklog_reads(spark, cluster_options, **committed))
    uncommitted = kafka(spark, broker, subscribe=TOPIC, **{"kafka.isolation.level": "read_uncommitted"})
    assert uncommitted.filter(F.col("value") == F.lit(b"v6")).count() == 1, "read_uncommitted sees the aborted records"


def test_streaming_write_with_a_consumer_group_read_back(
    spark: SparkSession,
    cluster: sparklog.Cluster,
    cluster_options: dict[str, str],
    broker: BrokerAgents,
    tmp_path: Path,
) -> None:
    create_led_topic(cluster, broker, "spark-kafka-out", partitions=2)
    produce(broker.bootstrap_servers, 0, 15)
    upper = kafka_stream(spark, broker, **{"kafka.group.id": "spark-kafka-group"}).select(
        F.col("key"), F.upper(F.col("value").cast("string")).alias("value")
    )
    sink = upper.writeStream.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap_servers)
    run_available_now(sink.option("topic", "spark-kafka-out"), tmp_path / "checkpoint")
    out = sparklog_reads(spark, cluster_options, subscribe="spark-kafka-out").collect()
    assert sorted(bytes(r["value"]).decode() for r in out) == sorted(f"V{i}" for i in range(15))
