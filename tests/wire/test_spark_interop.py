"""Spark and Kafka clients on one topic led by a real broker agent: what one writes, the other
reads, at the same (partition, offset), with the same keys, values, headers and timestamps."""

from __future__ import annotations

from typing import Any, cast

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaPythonPartition
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import sparklog
from sparklog.spark import produce
from sparklog.testing import BrokerAgents
from tests.wire.conftest import create_led_topic, wait_until

BASE_MS = 1_700_000_000_000
PARTITIONS = 3

# One stored record: key, value, headers as (key, value) pairs or None, timestamp in ms, timestampType.
Stored = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]] | None, int, int]


def confluent_produce(bootstrap: str, topic: str, records: list[dict[str, Any]]) -> list[tuple[int, int]]:
    """Send ``records``; each one's (partition, offset) from its delivery report."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    reports: list[Any] = [None] * len(records)
    for i, record in enumerate(records):

        def delivered(err: KafkaError | None, msg: Any, i: int = i) -> None:
            reports[i] = err if err is not None else (msg.partition(), msg.offset())

        producer.produce(topic, on_delivery=delivered, **record)
        producer.poll(0)
    assert producer.flush(30) == 0, "messages left undelivered"
    failed = [r for r in reports if not isinstance(r, tuple)]
    assert not failed, f"delivery errors: {failed[:5]}"
    return reports


def spark_rows(df: DataFrame) -> dict[tuple[int, int], Stored]:
    """(partition, offset) -> the record, timestamps as epoch ms whatever the session time zone."""
    rows = df.select(
        "partition",
        "offset",
        "key",
        "value",
        "headers",
        F.unix_micros("timestamp").alias("ts_us"),
        "timestampType",
    ).collect()
    found: dict[tuple[int, int], Stored] = {}
    for r in rows:
        headers = None if r["headers"] is None else [(h["key"], _bytes(h["value"])) for h in r["headers"]]
        found[(r["partition"], r["offset"])] = (
            _bytes(r["key"]),
            _bytes(r["value"]),
            headers,
            r["ts_us"] // 1000,
            r["timestampType"],
        )
    assert len(found) == len(rows), "two rows at one (partition, offset)"
    return found


def _bytes(value: Any) -> bytes | None:
    return None if value is None else bytes(value)


def sql_options(options: dict[str, str]) -> str:
    return ", ".join(f"`{k}` '{v}'" for k, v in options.items())


def test_records_produced_by_confluent_kafka_are_read_by_spark_at_their_reported_offsets(
    spark: SparkSession, cluster: sparklog.Cluster, cluster_options: dict[str, str], one_broker: BrokerAgents
) -> None:
    topic = "wire-to-spark"
    create_led_topic(cluster, one_broker, topic, partitions=PARTITIONS)
    records: list[dict[str, Any]] = []
    for i in range(240):
        record: dict[str, Any] = {"value": f"value-{i}".encode(), "timestamp": BASE_MS + 7 * i}
        if i % 5:
            record["key"] = f"key-{i % 11}".encode()
        else:
            record["partition"] = i % PARTITIONS  # keyless: placed explicitly
        if i % 3 == 0:
            record["headers"] = [("n", str(i).encode()), ("empty", None)]
        elif i % 3 == 1:
            record["headers"] = [("bin", bytes([0, 255, i % 256]))]
        records.append(record)
    reports = confluent_produce(one_broker.bootstrap_servers, topic, records)
    expected: dict[tuple[int, int], Stored] = {
        position: (
            record.get("key"),
            record["value"],
            list(record["headers"]) if "headers" in record else None,
            record["timestamp"],
            0,  # CreateTime
        )
        for record, position in zip(records, reports, strict=True)
    }
    assert len(expected) == len(records), "two records reported at one (partition, offset)"

    # the data source, with headers
    df = (
        spark.read.format("sparklog")
        .options(**cluster_options)
        .option("subscribe", topic)
        .option("includeHeaders", "true")
        .load()
    )
    assert spark_rows(df) == expected

    # SQL over the topic: a view of the data source, and the native views register_topics makes
    spark.sql(
        f"CREATE OR REPLACE TEMPORARY VIEW wire_to_spark USING sparklog OPTIONS "
        f"(subscribe '{topic}', includeHeaders 'true', {sql_options(cluster_options)})"
    )
    assert spark_rows(spark.sql("SELECT * FROM wire_to_spark")) == expected
    from sparklog.spark import register_topics

    assert topic in register_topics(spark, native=True, includeHeaders="true", **cluster_options)
    assert spark_rows(spark.sql(f"SELECT * FROM `{topic}`")) == expected
    by_partition = {
        r["partition"]: (r["n"], r["first"], r["last"])
        for r in spark.sql(
            "SELECT partition, count(*) AS n, min(offset) AS first, max(offset) AS last FROM wire_to_spark "
            "GROUP BY partition"
        ).collect()
    }
    for p, (n, first, last) in by_partition.items():
        assert (first, last) == (0, n - 1), f"partition {p}: offsets not contiguous from 0"
    assert sum(n for n, _f, _l in by_partition.values()) == len(records)


def spark_input(spark: SparkSession, prefix: str, n: int) -> DataFrame:
    """``n`` records: keyed (most) and keyless, with headers and CreateTime timestamps."""
    return spark.range(n, numPartitions=3).select(
        F.when(F.col("id") % 4 != 0, F.concat(F.lit("key-"), (F.col("id") % 13).cast("string")))
        .cast("binary")
        .alias("key"),
        F.concat(F.lit(f"{prefix}-"), F.col("id").cast("string")).cast("binary").alias("value"),
        F.timestamp_millis(F.lit(BASE_MS) + F.col("id") * 3).alias("timestamp"),
        F.when(
            F.col("id") % 2 == 0,
            F.array(F.struct(F.lit("id").alias("key"), F.col("id").cast("string").cast("binary").alias("value"))),
        ).alias("headers"),
    )


def confluent_consume_all(bootstrap: str, topic: str, expected: int) -> dict[tuple[int, int], Stored]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "auto.offset.reset": "error",
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    seen: dict[tuple[int, int], Stored] = {}
    try:

        def caught_up() -> bool:
            for msg in consumer.consume(num_messages=1000, timeout=0.2):
                assert msg.error() is None, msg.error()
                partition, offset = msg.partition(), msg.offset()
                assert partition is not None and offset is not None
                # a consumer's headers are a list of (str, bytes | None); the stubs allow a dict too
                headers = cast("list[tuple[str, bytes | None]] | None", msg.headers())
                seen[(partition, offset)] = (
                    msg.key(),
                    msg.value(),
                    None if headers is None else list(headers),
                    msg.timestamp()[1],
                    msg.timestamp()[0] - 1,  # TIMESTAMP_CREATE_TIME is 1, Kafka's timestampType 0
                )
            return len(seen) >= expected

        wait_until(caught_up, f"confluent-kafka consumer: {expected} records of {topic}")
    finally:
        consumer.close()
    return seen


def kafka_python_consume_all(bootstrap: str, topic: str, expected: int) -> dict[tuple[int, int], Stored]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    partitions = [KafkaPythonPartition(topic, p) for p in range(PARTITIONS)]
    consumer.assign(partitions)
    for tp in partitions:
        consumer.seek(tp, 0)
    seen: dict[tuple[int, int], Stored] = {}
    try:

        def caught_up() -> bool:
            for batch in consumer.poll(timeout_ms=200).values():
                for r in batch:
                    seen[(r.partition, r.offset)] = (
                        r.key,
                        r.value,
                        list(r.headers) if r.headers else None,
                        r.timestamp,
                        r.timestamp_type,
                    )
            return len(seen) >= expected

        wait_until(caught_up, f"kafka-python consumer: {expected} records of {topic}")
    finally:
        consumer.close()
    return seen


@pytest.mark.parametrize("writer", ["dataframe_writer", "produce_helper"])
def test_records_produced_by_spark_are_read_by_kafka_consumers_at_the_tables_offsets(
    spark: SparkSession,
    cluster: sparklog.Cluster,
    cluster_options: dict[str, str],
    one_broker: BrokerAgents,
    writer: str,
) -> None:
    topic = "spark-to-wire"
    create_led_topic(cluster, one_broker, topic, partitions=PARTITIONS)
    n = 3_000
    first, second = spark_input(spark, "first", n // 2), spark_input(spark, "second", n - n // 2)
    for df in (first, second):  # two jobs: the second continues from the first's log end
        if writer == "dataframe_writer":
            df.write.format("sparklog").options(**cluster_options).option("topic", topic).mode("append").save()
        else:
            result = produce(df, topic, **cluster_options)
            assert result.records == df.count()

    table = spark_rows(
        spark.read.format("sparklog")
        .options(**cluster_options)
        .option("subscribe", topic)
        .option("includeHeaders", "true")
        .load()
    )
    assert len(table) == n
    for p in range(PARTITIONS):
        offsets = sorted(o for (q, o) in table if q == p)
        assert offsets == list(range(len(offsets))), f"partition {p}: Spark's offsets are not 0..n-1"
    # Spark's input, as Spark stored it (key, value, headers, timestamp): nothing lost or added
    values = sorted(v for (_k, v, _h, _t, _tt) in table.values() if v is not None)
    assert values == sorted(
        f"{prefix}-{i}".encode() for prefix, m in (("first", n // 2), ("second", n - n // 2)) for i in range(m)
    )

    bootstrap = one_broker.bootstrap_servers
    assert confluent_consume_all(bootstrap, topic, n) == table
    assert kafka_python_consume_all(bootstrap, topic, n) == table
