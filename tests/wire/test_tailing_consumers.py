"""A consumer waiting at the end of a partition is woken by the append that makes data
available, whoever makes it (DESIGN §15): here writers other than the broker — sparklog's
light producer and a Spark produce job — which reach the broker only through the
partition's write lease. The consumer long-polls for far longer than the test allows a
record to take: without the wake-up it would get the record only at its poll's end."""

from __future__ import annotations

import time
from collections.abc import Callable

from confluent_kafka import Consumer, TopicPartition
from pyspark.sql import SparkSession

import sparklog
from sparklog.spark import produce
from sparklog.testing import BrokerAgents
from tests.wire.conftest import create_led_topic

TOPIC = "tailed"
LONG_POLL_MS = 20_000  # the consumer's fetch.wait.max.ms
WOKEN_WITHIN_S = LONG_POLL_MS / 1000 / 2  # far below the poll's end: only a wake-up explains it


def _tailing_consumer(bootstrap: str) -> Consumer:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "tailing",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": LONG_POLL_MS,
            "socket.timeout.ms": LONG_POLL_MS + 30_000,
        }
    )
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    return consumer


def _wait_in_long_poll(consumer: Consumer) -> None:
    """Poll until the consumer has sent its first fetch and is waiting at the end (an empty
    partition: the fetch at offset 0 finds nothing and waits the full long poll)."""
    for _ in range(3):
        message = consumer.poll(0.5)
        assert message is None, f"unexpected record before anything was written: {message}"


def _received_after(consumer: Consumer, write: Callable[[], None]) -> tuple[bytes, float]:
    """Write, then the first record the consumer gets and how long after the write returned."""
    write()
    written = time.monotonic()
    deadline = written + LONG_POLL_MS / 1000 * 2
    while time.monotonic() < deadline:
        message = consumer.poll(0.1)
        if message is None:
            continue
        assert message.error() is None, message.error()
        value = message.value()
        assert value is not None
        return value, time.monotonic() - written
    raise AssertionError(f"no record within {LONG_POLL_MS * 2} ms of the write")


def test_a_light_producers_append_wakes_the_waiting_fetch(cluster: sparklog.Cluster, one_broker: BrokerAgents) -> None:
    create_led_topic(cluster, one_broker, TOPIC, partitions=1)
    consumer = _tailing_consumer(one_broker.bootstrap_servers)
    try:
        _wait_in_long_poll(consumer)

        def write() -> None:
            with cluster.producer() as producer:
                producer.send(TOPIC, b"from-the-light-producer", partition=0).result(60)

        value, waited_s = _received_after(consumer, write)
        assert value == b"from-the-light-producer"
        assert waited_s < WOKEN_WITHIN_S, f"the record reached the consumer {waited_s:.1f} s after it was stored"
    finally:
        consumer.close()


def test_a_spark_jobs_append_wakes_the_waiting_fetch(
    spark: SparkSession, cluster: sparklog.Cluster, cluster_options: dict[str, str], one_broker: BrokerAgents
) -> None:
    create_led_topic(cluster, one_broker, TOPIC, partitions=1)
    consumer = _tailing_consumer(one_broker.bootstrap_servers)
    try:
        _wait_in_long_poll(consumer)
        df = spark.createDataFrame([(b"from-spark",)], "value binary")

        def write() -> None:
            produce(df, TOPIC, **cluster_options)

        value, waited_s = _received_after(consumer, write)
        assert value == b"from-spark"
        assert waited_s < WOKEN_WITHIN_S, f"the record reached the consumer {waited_s:.1f} s after the job committed"
    finally:
        consumer.close()
