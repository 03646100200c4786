"""Child processes of the transaction fault tests (started by ``spawn``, killed with -9).

Both are plain confluent-kafka applications: nothing of sparklog runs in them. They report
progress through files written before the next step (a file survives ``kill -9``)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

TIMEOUT_S = 30


def hanging_producer(bootstrap: str, transactional_id: str, topic: str, partitions: int, ready: str) -> None:
    """Open a transaction, send into every partition, say so, then hang (until killed)."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": transactional_id, "transaction.timeout.ms": 3_000}
    )
    producer.init_transactions(TIMEOUT_S)
    producer.begin_transaction()
    for i in range(30):
        producer.produce(topic, value=f"hanging-{i}".encode(), partition=i % partitions)
    assert producer.flush(TIMEOUT_S) == 0
    Path(ready).write_text("sent")
    while True:
        time.sleep(1)


def transform_app(bootstrap: str, group_id: str, source: str, sink: str, transactional_id: str, batch: int) -> None:
    """Consume-transform-produce exactly once: read ``source`` (read_committed, in group
    ``group_id``), write ``out-<value>`` to ``sink`` and commit the input offsets in the same
    transaction, ``batch`` records at a time, forever."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group_id,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6_000,
            "heartbeat.interval.ms": 500,
        }
    )
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": transactional_id,
            "transaction.timeout.ms": 10_000,
            "linger.ms": 5,
        }
    )
    producer.init_transactions(TIMEOUT_S)
    consumer.subscribe([source])
    while True:
        messages = consumer.consume(batch, 1.0)
        records = [m for m in messages if m.error() is None]
        if not records:
            continue
        producer.begin_transaction()
        for message in records:
            value, partition = message.value(), message.partition()
            assert value is not None and partition is not None, message.error()
            producer.produce(sink, key=message.key(), value=b"out-" + value, partition=partition)
        positions = _positions(records)
        producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), TIMEOUT_S)
        try:
            producer.commit_transaction(TIMEOUT_S)
        except KafkaException as exc:
            error: Any = exc.args[0]
            if error.txn_requires_abort():
                producer.abort_transaction(TIMEOUT_S)
                _rewind(consumer, records)
                continue
            raise


def _positions(records: list[Any]) -> list[TopicPartition]:
    last: dict[tuple[str, int], int] = {}
    for message in records:
        last[(message.topic(), message.partition())] = message.offset() + 1
    return [TopicPartition(t, p, o) for (t, p), o in last.items()]


def _rewind(consumer: Consumer, records: list[Any]) -> None:
    first: dict[tuple[str, int], int] = {}
    for message in records:
        first.setdefault((message.topic(), message.partition()), message.offset())
    for (topic, partition), offset in first.items():
        consumer.seek(TopicPartition(topic, partition, offset))
