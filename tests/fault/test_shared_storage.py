"""Shared storage (DESIGN §16): two brokers with one ``s3://`` log dir serve one Delta table
per topic. Nothing is copied between them; when the leading broker is killed -9, the other
leads its partitions within the ZooKeeper session timeout plus a second, continuing at the
log end, and every acknowledged record is in the one table exactly once; restarted, the
killed broker is back in the ISR without copying anything."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import obstore
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

import sparklog
from sparklog.log.object_store import open_store
from sparklog.model.storage_location import StorageSettings, parse_location
from sparklog.testing import BrokerAgents
from sparklog.testing.object_stores import MotoS3
from tests.helpers import consumed, wait_until
from tests.wire.conftest import shared_store_brokers

TOPIC = "shared"
PARTITIONS = 2
SESSION_TIMEOUT_MS = 3_000


@pytest.fixture
def shared_brokers(zk_connect: str, sparklog_home: Path, tmp_path: Path, log_store: str) -> Iterator[BrokerAgents]:
    with shared_store_brokers(zk_connect, sparklog_home, tmp_path, log_store, SESSION_TIMEOUT_MS) as agents:
        yield agents


def produce(bootstrap: str, values: list[bytes]) -> dict[bytes, tuple[int, int]]:
    """Send ``values`` (acks=all, idempotent); value -> (partition, offset) acknowledged."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5})
    acked: dict[bytes, tuple[int, int]] = {}

    def report(error: object, message: object) -> None:
        assert error is None, error
        partition, offset, value = consumed(message)  # type: ignore[arg-type]
        acked[value] = (partition, offset)

    for i, value in enumerate(values):
        producer.produce(TOPIC, value=value, partition=i % PARTITIONS, on_delivery=report)
    assert producer.flush(60) == 0
    return acked


def read_all(bootstrap: str, expected: int) -> list[tuple[int, int, bytes]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "check", "enable.auto.commit": False})
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    got: list[tuple[int, int, bytes]] = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < expected and time.monotonic() < deadline:
            for message in consumer.consume(500, 0.5):
                assert message.error() is None, message.error()
                got.append(consumed(message))
    finally:
        consumer.close()
    return sorted(got)


def kill_and_take_over(cluster: sparklog.Cluster, agents: BrokerAgents, victim: int) -> int:
    """Kill -9 ``victim``; the other broker must lead every partition within the session
    timeout plus a second. Returns the other broker's id."""
    survivor = 2 if victim == 1 else 1
    killed_at = time.monotonic()
    agents.kill(victim)
    wait_until(
        lambda: all(p.leader == survivor for p in cluster.describe_topic(TOPIC).partitions),
        f"broker {survivor} leads every partition",
        timeout_s=30,
    )
    moved_s = time.monotonic() - killed_at
    assert moved_s <= SESSION_TIMEOUT_MS / 1000 + 1.0, f"leadership moved after {moved_s:.1f} s"
    print(f"broker {victim} killed: broker {survivor} leads every partition after {moved_s:.2f} s")
    return survivor


def table_objects(moto_s3: MotoS3, log_store: str) -> list[str]:
    store = open_store(parse_location(log_store), StorageSettings.from_config(moto_s3.settings()))
    return sorted(str(meta["path"]) for batch in obstore.list(store) for meta in batch)


@pytest.mark.parametrize("log_store", ["s3"], indirect=True)
def test_leadership_moves_on_shared_storage_without_copies_and_loses_nothing(
    cluster: sparklog.Cluster, shared_brokers: BrokerAgents, log_store: str, moto_s3: MotoS3
) -> None:
    cluster.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=2)
    wait_until(
        lambda: all(sorted(p.isr) == [1, 2] and p.leader in (1, 2) for p in cluster.describe_topic(TOPIC).partitions),
        "both brokers in sync for every partition",
    )
    bootstrap = shared_brokers.bootstrap_servers
    acked = produce(bootstrap, [b"before-%d" % i for i in range(100)])

    # One table for the topic, whoever leads: no per-broker copies anywhere in the bucket.
    objects = table_objects(moto_s3, log_store)
    assert all(path.startswith(f"topics/{TOPIC}/") for path in objects if "/" in path), objects
    assert sum(path.endswith(".parquet") and "/partition=" in path for path in objects) > 0

    leader = cluster.describe_topic(TOPIC).partitions[0].leader
    kill_and_take_over(cluster, shared_brokers, leader)

    acked.update(produce(bootstrap, [b"after-%d" % i for i in range(100)]))
    records = read_all(bootstrap, len(acked))
    assert sorted(value for _p, _o, value in records) == sorted(acked), "every acknowledged record exactly once"
    for partition in range(PARTITIONS):
        offsets = [o for p, o, _v in records if p == partition]
        assert offsets == list(range(len(offsets))), f"partition {partition}: offsets contiguous from 0"
    assert {value: (p, o) for p, o, value in records} == acked, "each record at the offset its ack gave"
    assert not [path for path in table_objects(moto_s3, log_store) if path.startswith("broker-")]

    # The killed broker comes back in sync at once: its replica is the table it left.
    shared_brokers.start(leader)
    wait_until(
        lambda: all(sorted(p.isr) == [1, 2] for p in cluster.describe_topic(TOPIC).partitions),
        f"broker {leader} back in every ISR",
        timeout_s=30,
    )


@pytest.mark.parametrize("log_store", ["s3"], indirect=True)
def test_a_partition_whose_only_replica_died_is_led_by_another_live_broker(
    cluster: sparklog.Cluster, shared_brokers: BrokerAgents
) -> None:
    cluster.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=1)
    wait_until(lambda: all(p.leader in (1, 2) for p in cluster.describe_topic(TOPIC).partitions), "leaders")
    bootstrap = shared_brokers.bootstrap_servers
    acked = produce(bootstrap, [b"before-%d" % i for i in range(40)])
    placed = {p.partition: p.replicas for p in cluster.describe_topic(TOPIC).partitions}
    # Replication factor 1, yet nothing is lost: the store holds the table, so another live
    # broker takes the partition over (its assignment rewritten, no data moved).
    survivor = kill_and_take_over(cluster, shared_brokers, placed[0][0])
    assert all(p.replicas == (survivor,) for p in cluster.describe_topic(TOPIC).partitions)
    acked.update(produce(bootstrap, [b"after-%d" % i for i in range(40)]))
    records = read_all(bootstrap, len(acked))
    assert {value: (p, o) for p, o, value in records} == acked, "every acknowledged record once, where acked"
