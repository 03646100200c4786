"""Record batches of real clients through the native codec (DESIGN §14).

librdkafka (confluent-kafka) sends a batch per codec: the broker's tail returns it as sent,
and the native decoder reads it — and the broker stores it — exactly as kafka-python's
decoder reads it. The other way, rows written around the broker (the light producer) are
encoded from the segments and librdkafka reads them back record for record."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

import sparklog
from sparklog.model.kafka_batches import decode_records, read_batches
from sparklog.testing import BrokerAgents
from tests.unit.test_kafka_batches import ours, reference
from tests.wire.conftest import create_led_topic, wait_until
from tests.wire.test_fetch_tail import fetch

TOPIC = "wire-bad"  # the fetch helper's topic
T0 = 1_700_000_000_000

RECORDS: list[dict[str, Any]] = [
    {"key": b"k0", "value": b"compressible " * 40},
    {"key": None, "value": b"null key " * 10, "headers": [("trace", b"abc"), ("none", None)]},
    {"key": b"null value", "value": None},
    {"key": b"", "value": b""},
    {"key": b"large", "value": bytes(range(256)) * 800, "headers": [(f"h{i}-ü", bytes([i]) * i) for i in range(20)]},
]


@pytest.mark.parametrize("compression", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_librdkafka_batches_read_as_kafka_python_reads_them(
    cluster: sparklog.Cluster, one_broker: BrokerAgents, compression: str
) -> None:
    create_led_topic(cluster, one_broker, TOPIC, partitions=1)
    producer = Producer(
        {"bootstrap.servers": one_broker.bootstrap_servers, "compression.type": compression, "linger.ms": 100}
    )
    for i, record in enumerate(RECORDS):
        producer.produce(TOPIC, partition=0, timestamp=T0 + i, **record)
    assert producer.flush(30) == 0

    fetch(one_broker.port(1), 0)  # notes log-start: the next fetch is served from the tail
    _high_watermark, _log_start, data = fetch(one_broker.port(1), 0)  # the producer's bytes
    batches = read_batches(data)
    assert {b.compression for b in batches} == {compression}
    assert sum(b.count for b in batches) == len(RECORDS)
    decoded = ours(decode_records(batches, with_offsets=True))
    assert decoded == reference(data)
    assert [(r["key"], r["value"]) for r in decoded] == [(r["key"], r["value"]) for r in RECORDS]
    stored = cluster.read(TOPIC, include_headers=True).to_pylist()
    assert [(r["offset"], r["key"], r["value"], r["headers"]) for r in stored] == [
        (r["offset"], r["key"], r["value"], r["headers"]) for r in decoded
    ]


def read_more(consumer: Consumer, messages: list[Any]) -> int:
    """Add what one poll of ``consumer`` returns to ``messages``; how many there are now."""
    messages.extend(consumer.consume(100, timeout=0.5))
    return len(messages)


def test_rows_written_around_the_broker_are_encoded_for_librdkafka(
    cluster: sparklog.Cluster, one_broker: BrokerAgents
) -> None:
    create_led_topic(cluster, one_broker, TOPIC, partitions=1)
    with cluster.producer() as producer:
        for i, record in enumerate(RECORDS * 3):
            producer.send(TOPIC, partition=0, timestamp_ms=T0 + i, **record)
        producer.flush()
    expected = RECORDS * 3
    consumer = Consumer({"bootstrap.servers": one_broker.bootstrap_servers, "group.id": "unused"})
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    messages: list[Any] = []
    try:
        wait_until(lambda: read_more(consumer, messages) >= len(expected), "librdkafka reads every record")
    finally:
        consumer.close()
    assert all(m.error() is None for m in messages)
    got = [(m.offset(), m.timestamp(), m.key(), m.value(), m.headers()) for m in messages]
    assert got == [(i, (1, T0 + i), r["key"], r["value"], r.get("headers")) for i, r in enumerate(expected)]


def test_log_append_time_batches_are_encoded_for_librdkafka(
    cluster: sparklog.Cluster, one_broker: BrokerAgents
) -> None:
    create_led_topic(cluster, one_broker, TOPIC, partitions=1, **{"message.timestamp.type": "LogAppendTime"})
    producer = Producer({"bootstrap.servers": one_broker.bootstrap_servers, "linger.ms": 0})
    for round_ in range(3):  # several commits: several append times
        producer.produce(TOPIC, partition=0, value=f"r{round_}".encode(), timestamp=T0)
        assert producer.flush(30) == 0
    stored = cluster.read(TOPIC).to_pylist()
    consumer = Consumer({"bootstrap.servers": one_broker.bootstrap_servers, "group.id": "unused"})
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    messages: list[Any] = []
    try:
        wait_until(lambda: read_more(consumer, messages) >= len(stored), "librdkafka reads every record")
    finally:
        consumer.close()
    log_append_time = 2  # confluent_kafka.TIMESTAMP_LOG_APPEND_TIME
    assert [(m.value(), m.timestamp()) for m in messages] == [
        (r["value"], (log_append_time, int(r["timestamp"].timestamp() * 1000))) for r in stored
    ]
    assert len({r["timestamp"] for r in stored}) == 3, "each commit has its own append time"
