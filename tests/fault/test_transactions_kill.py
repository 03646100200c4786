"""Kafka transactions under kill -9 (docs/transactions.md): a transactional producer killed
mid-transaction is aborted by the coordinator after its ``transaction.timeout.ms``, and
read_committed readers then get past it; a consume-transform-produce application
(confluent-kafka consumer in a group + transactional producer +
``send_offsets_to_transaction``) killed -9 five times writes every input record exactly once.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

import sparklog
from sparklog.metadata.transactions import COMPLETE_ABORT, TransactionStore
from sparklog.testing import BrokerAgents
from tests.fault import txn_workers
from tests.helpers import reaping, spawn_context, wait_until
from tests.wire.conftest import create_led_topic, transaction_coordinator, wait_transactions_complete

PARTITIONS = 3


@pytest.fixture
def one_broker(zk_connect: str, sparklog_home: Path, tmp_path: Path) -> Iterator[BrokerAgents]:
    """One real broker agent (id 1) with its Kafka listener."""
    with BrokerAgents(zk_connect, sparklog_home, tmp_path / "brokers") as running:
        running.start(1)
        running.wait_controller()
        yield running


def committed_values(cluster: sparklog.Cluster, topic: str) -> list[bytes]:
    return [v for v in cluster.read(topic).column("value").to_pylist() if v is not None]


def test_killed_transactional_producer_is_aborted_after_its_timeout(
    cluster: sparklog.Cluster, one_broker: BrokerAgents, tmp_path: Path
) -> None:
    topic = "txn-hanging"
    create_led_topic(cluster, one_broker, topic, partitions=PARTITIONS)
    bootstrap = one_broker.bootstrap_servers
    ready = tmp_path / "ready"
    context = spawn_context()
    with reaping([]) as children:
        child = context.Process(
            target=txn_workers.hanging_producer, args=(bootstrap, "txn-hanging", topic, PARTITIONS, str(ready))
        )
        children.append(child)
        child.start()
        wait_until(ready.exists, "the transactional producer's records are stored")
        child.kill()
        child.join(10)
        killed_at = time.monotonic()
    # Committed records behind the open transaction: read_committed readers wait at its first offset.
    plain = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for p in range(PARTITIONS):
        plain.produce(topic, value=f"after-{p}".encode(), partition=p)
    assert plain.flush(30) == 0
    assert cluster.read(topic, isolation_level="read_uncommitted").num_rows == 30 + PARTITIONS
    assert committed_values(cluster, topic) == []
    # The coordinator aborts it once transaction.timeout.ms (3 s) has passed: readers get past it.
    wait_until(lambda: len(committed_values(cluster, topic)) == PARTITIONS, "the hanging transaction aborted")
    assert time.monotonic() - killed_at > 1.0, "aborted before its timeout"
    assert sorted(committed_values(cluster, topic)) == [f"after-{p}".encode() for p in range(PARTITIONS)]
    found = TransactionStore(cluster.replicas.zk).get("txn-hanging")
    assert found is not None and found[0].state == COMPLETE_ABORT
    # Aborted records are still in the log for read_uncommitted readers, as in Kafka.
    assert cluster.read(topic, isolation_level="read_uncommitted").num_rows == 30 + PARTITIONS


def test_consume_transform_produce_killed_five_times_writes_every_record_once(
    cluster: sparklog.Cluster, one_broker: BrokerAgents
) -> None:
    source, sink, records = "eos-in", "eos-out", 3_000
    create_led_topic(cluster, one_broker, source, partitions=PARTITIONS)
    create_led_topic(cluster, one_broker, sink, partitions=PARTITIONS)
    bootstrap = one_broker.bootstrap_servers
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(records):
        producer.produce(source, key=str(i).encode(), value=f"v{i}".encode(), partition=i % PARTITIONS)
    assert producer.flush(30) == 0
    context = spawn_context()
    args = (bootstrap, "eos-group", source, sink, "eos-app", 25)
    with reaping([]) as children:
        for kill in range(1, 6):
            child = context.Process(target=txn_workers.transform_app, args=args)
            children.append(child)
            child.start()
            target = kill * records // 7
            wait_until(
                lambda: len(committed_values(cluster, sink)) >= target,
                f"the application past {target} records (run {kill})",
                timeout_s=120,
            )
            child.kill()
            child.join(10)
        final = context.Process(target=txn_workers.transform_app, args=args)
        children.append(final)
        final.start()
        wait_until(lambda: len(committed_values(cluster, sink)) >= records, "every record transformed", timeout_s=180)
        outputs = Counter(committed_values(cluster, sink))
    duplicates = {v: n for v, n in outputs.items() if n > 1}
    assert not duplicates, f"{len(duplicates)} records written more than once, e.g. {list(duplicates.items())[:5]}"
    assert set(outputs) == {f"out-v{i}".encode() for i in range(records)}
    # The aborted attempts left records a read_uncommitted reader sees, but read_committed never does.
    assert cluster.read(sink, isolation_level="read_uncommitted").num_rows >= records


def test_markers_cross_brokers_and_a_new_coordinator_aborts_what_its_predecessor_left_open(
    cluster: sparklog.Cluster, zk_connect: str, sparklog_home: Path, tmp_path: Path
) -> None:
    topic = "txn-failover"
    with BrokerAgents(zk_connect, sparklog_home, tmp_path / "brokers") as agents:
        agents.start(1, 2, 3)
        agents.wait_controller()
        cluster.create_topic(topic, partitions=PARTITIONS, replication_factor=3)
        wait_until(
            lambda: len({p.leader for p in cluster.describe_topic(topic).partitions} & set(agents.live())) == 3,
            "each partition led by another broker",
            timeout_s=60,
        )
        bootstrap = agents.bootstrap_servers
        producer = Producer(
            {"bootstrap.servers": bootstrap, "transactional.id": "txn-failover", "transaction.timeout.ms": 3_000}
        )
        producer.init_transactions(30)
        # Markers reach leaders on every broker: the coordinator's own partition and two others.
        for outcome in ("committed", "aborted"):
            producer.begin_transaction()
            for p in range(PARTITIONS):
                producer.produce(topic, value=f"{outcome}-{p}".encode(), partition=p)
            assert producer.flush(30) == 0
            if outcome == "committed":
                producer.commit_transaction(30)
            else:
                producer.abort_transaction(30)
        wait_transactions_complete(cluster, "txn-failover")
        expected = sorted(f"committed-{p}".encode() for p in range(PARTITIONS))
        assert sorted(committed_values(cluster, topic)) == expected
        # A transaction open when its coordinator is killed -9: the next coordinator (the new
        # leader of the id's __consumer_offsets partition) aborts it after its timeout.
        producer.begin_transaction()
        for p in range(PARTITIONS):
            producer.produce(topic, value=f"orphan-{p}".encode(), partition=p)
        assert producer.flush(30) == 0
        store = TransactionStore(cluster.replicas.zk)
        coordinator = transaction_coordinator(cluster, "txn-failover")
        agents.kill(coordinator)
        found = wait_until(
            lambda: (f := store.get("txn-failover")) is not None and f[0].state == COMPLETE_ABORT and f,
            "the new coordinator aborting the orphaned transaction",
            timeout_s=90,
        )
        assert found[0].producer_epoch == 1  # bumped by the timeout abort: the producer is fenced
        assert transaction_coordinator(cluster, "txn-failover") != coordinator
        # Every reader gets past it once each partition's leader has its marker.
        wait_until(
            lambda: sorted(committed_values(cluster, topic)) == expected,
            "read_committed readers past the aborted transaction",
            timeout_s=60,
        )
        everything = cluster.read(topic, isolation_level="read_uncommitted").column("value").to_pylist()
        assert sorted(everything) == sorted(
            [f"{w}-{p}".encode() for w in ("committed", "aborted", "orphan") for p in range(PARTITIONS)]
        )
