"""confluent-kafka (librdkafka) producers and consumers against a real broker agent."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

import sparklog
from sparklog.model.records import partition_for_key
from sparklog.testing import BrokerAgents
from tests.helpers import BOTH_STORES
from tests.wire.conftest import create_led_topic

TOPIC = "wire-orders"


def produce(bootstrap: str, records: list[dict[str, Any]], **config: Any) -> list[tuple[int, int]]:
    """Send ``records`` and return each one's (partition, offset) from its delivery report."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **config})
    reports: list[Any] = [None] * len(records)

    def delivered(index: int) -> Any:
        def callback(err: KafkaError | None, msg: Any) -> None:
            reports[index] = err if err is not None else (msg.partition(), msg.offset())

        return callback

    for i, record in enumerate(records):
        producer.produce(TOPIC, on_delivery=delivered(i), **record)
        producer.poll(0)
    assert producer.flush(30) == 0, "messages left undelivered"
    errors = [r for r in reports if not isinstance(r, tuple)]
    assert not errors, f"delivery errors: {errors[:5]}"
    return reports


def consume_all(bootstrap: str, partitions: int, expected: int, **config: Any) -> list[Any]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False, **config})
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(partitions)])
    messages = []
    try:
        for _ in range(200):
            for msg in consumer.consume(num_messages=1000, timeout=0.5):
                assert msg.error() is None, msg.error()
                messages.append(msg)
            if len(messages) >= expected:
                break
    finally:
        consumer.close()
    return messages


@pytest.mark.parametrize("compression", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_produce_and_consume_every_codec(cluster: sparklog.Cluster, one_broker: BrokerAgents, compression: str) -> None:
    create_led_topic(cluster, one_broker, TOPIC, partitions=3)
    records: list[dict[str, Any]] = [
        {
            "key": f"key-{i % 7}".encode(),
            "value": f"value-{i}".encode() * (1 + i % 3),
            "headers": [("h", f"{i}".encode()), ("empty", None)],
            "timestamp": 1_700_000_000_000 + i,
        }
        for i in range(300)
    ]
    config = {"compression.type": compression, "partitioner": "murmur2_random"}
    reports = produce(one_broker.bootstrap_servers, records, **config)
    # keys land where Kafka's (Java client's) murmur2 partitioner puts them, as sparklog's own do
    for record, (partition, _offset) in zip(records, reports, strict=True):
        assert partition == partition_for_key(record["key"], 3)
    # per partition, offsets are contiguous from 0 in send order
    for p in range(3):
        offsets = [o for (q, o) in reports if q == p]
        assert offsets == list(range(len(offsets)))

    messages = consume_all(one_broker.bootstrap_servers, 3, len(records))
    assert len(messages) == len(records)
    by_position = {(m.partition(), m.offset()): m for m in messages}
    for record, position in zip(records, reports, strict=True):
        msg = by_position[position]
        assert msg.key() == record["key"]
        assert msg.value() == record["value"]
        assert msg.timestamp() == (1, record["timestamp"])  # CreateTime
        assert msg.headers() == [("h", record["headers"][0][1]), ("empty", None)]

    # the table holds the same records at the same offsets (Spark and SQL read this)
    table = cluster.read(TOPIC)
    stored = {(r["partition"], r["offset"]): r["value"] for r in table.to_pylist()}
    assert stored == {position: rec["value"] for rec, position in zip(records, reports, strict=True)}


@BOTH_STORES
def test_idempotent_producer_retries_store_every_record_once(
    cluster: sparklog.Cluster, one_broker: BrokerAgents
) -> None:
    """The broker hangs (SIGSTOP) while an idempotent producer sends: its requests time out
    and are sent again; once the broker resumes it sees the originals and the retries, and
    stores every record once, at the offsets the delivery reports give."""
    create_led_topic(cluster, one_broker, TOPIC, partitions=2)
    stats: list[dict[str, Any]] = []
    producer = Producer(
        {
            "bootstrap.servers": one_broker.bootstrap_servers,
            "enable.idempotence": True,
            "linger.ms": 2,
            "socket.timeout.ms": 400,  # librdkafka times out its own requests after this
            "statistics.interval.ms": 100,
            "stats_cb": lambda raw: stats.append(json.loads(raw)),
        }
    )
    reports: dict[int, Any] = {}

    def send(i: int) -> None:
        def delivered(err: KafkaError | None, msg: Any, i: int = i) -> None:
            reports[i] = err if err is not None else (msg.partition(), msg.offset())

        producer.produce(TOPIC, key=f"k{i}".encode(), value=f"v{i}".encode(), on_delivery=delivered)
        producer.poll(0)

    sent = 0
    for _ in range(100):
        send(sent)
        sent += 1
    producer.flush(30)
    one_broker.pause(1)
    paused_until = time.monotonic() + 1.5  # the fault: longer than several request timeouts
    while time.monotonic() < paused_until:
        send(sent)
        sent += 1
        producer.poll(0.01)
    one_broker.resume(1)
    for _ in range(100):
        send(sent)
        sent += 1
    assert producer.flush(60) == 0
    timeouts = max(sum(b.get("req_timeouts", 0) for b in s["brokers"].values()) for s in stats)
    assert timeouts > 0, "no request timed out: the fault did not happen"

    failed = {i: r for i, r in reports.items() if not isinstance(r, tuple)}
    assert not failed, f"deliveries failed: {list(failed.items())[:3]}"
    stored = cluster.read(TOPIC).to_pylist()
    values = [r["value"] for r in stored]
    assert len(values) == len(set(values)) == sent, f"{len(values)} stored, {len(set(values))} distinct, {sent} sent"
    at = {(r["partition"], r["offset"]): r["value"] for r in stored}
    for i, position in reports.items():
        assert at[position] == f"v{i}".encode()
