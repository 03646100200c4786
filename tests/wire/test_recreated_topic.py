"""A topic deleted and created again while a broker runs (by another process: the broker
learns of it through ZooKeeper only): the broker serves the new topic's records, never the
earlier topic's files, even when the new table reaches the same commit versions (a version
probe alone cannot tell the two tables apart, and the broker's request handlers are
long-lived threads with snapshots cached)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

import sparklog
from sparklog.testing.brokers import BrokerAgents
from tests.helpers import BOTH_STORES, wait_until
from tests.wire.conftest import create_led_topic, started_brokers

TOPIC = "reborn"
RECORDS = 20


def produce(cluster: sparklog.Cluster, prefix: str) -> None:
    """One commit per record, by the light producer: both incarnations reach the same commit
    versions, and the broker reads them from the table (its tail holds only its own appends)."""
    producer = cluster.producer()
    try:
        for i in range(RECORDS):
            producer.send(TOPIC, f"{prefix}-{i}".encode(), partition=0).result(30)
    finally:
        producer.close()


def produce_through(agents: BrokerAgents, prefix: str) -> list[int]:
    """One record at a time through the broker (it leads: its rounds commit on what it
    recorded of the table, without reading it); the offsets acknowledged."""
    producer = Producer({"bootstrap.servers": agents.bootstrap_servers, "acks": "all", "linger.ms": 0})
    offsets: list[int] = []

    def acked(err: object, message: object) -> None:
        assert err is None, f"not acknowledged: {err}"
        offsets.append(message.offset())  # type: ignore[attr-defined]

    for i in range(RECORDS):
        producer.produce(TOPIC, f"{prefix}-{i}".encode(), partition=0, on_delivery=acked)
        assert producer.flush(30) == 0
    return offsets


def read_all(agents: BrokerAgents) -> list[str]:
    consumer = Consumer(
        {"bootstrap.servers": agents.bootstrap_servers, "group.id": "unused", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    got: list[str] = []
    try:

        def everything() -> bool:
            for message in consumer.consume(100, 0.5):
                assert message.error() is None, f"fetch failed: {message.error()}"
                got.append(bytes(message.value() or b"").decode())
            return len(got) >= RECORDS

        wait_until(everything, f"{RECORDS} records of {TOPIC}-0")
    finally:
        consumer.close()
    return got


@pytest.fixture
def single_handler_broker(zk_connect: str, sparklog_home: Path, tmp_path: Path) -> Iterator[BrokerAgents]:
    """One broker with one request handler thread: every fetch runs on the thread that
    cached the earlier topic's snapshot."""
    with started_brokers(zk_connect, sparklog_home, tmp_path, (1,), properties={"num.io.threads": "1"}) as agents:
        yield agents


def test_a_recreated_topic_is_served_from_its_own_table(
    single_handler_broker: BrokerAgents, cluster: sparklog.Cluster
) -> None:
    broker = single_handler_broker
    create_led_topic(cluster, broker, TOPIC, 1)
    produce(cluster, "first")
    assert read_all(broker) == [f"first-{i}" for i in range(RECORDS)]
    cluster.delete_topic(TOPIC)
    create_led_topic(cluster, broker, TOPIC, 1)
    produce(cluster, "second")
    assert read_all(broker) == [f"second-{i}" for i in range(RECORDS)]


@BOTH_STORES
def test_a_leader_producing_across_a_delete_and_recreate_starts_the_new_table_afresh(
    one_broker: BrokerAgents, cluster: sparklog.Cluster
) -> None:
    """The leader's record of the deleted table (its version, log ends) must never be
    committed on: the delete takes the write lease from it, so its next round reads the new
    table, whose commits and offsets start again (DESIGN §16)."""
    create_led_topic(cluster, one_broker, TOPIC, 1)
    assert produce_through(one_broker, "first") == list(range(RECORDS))
    cluster.delete_topic(TOPIC)
    create_led_topic(cluster, one_broker, TOPIC, 1)
    assert produce_through(one_broker, "second") == list(range(RECORDS)), "offsets of the new topic start at 0"
    assert read_all(one_broker) == [f"second-{i}" for i in range(RECORDS)]
    versions = [entry["version"] for entry in cluster.replicas.replica_table(TOPIC, 1).snapshot().history()]
    assert sorted(versions) == list(range(max(versions) + 1)), f"commit versions with a gap: {sorted(versions)}"
