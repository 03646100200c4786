"""Kafka transactions under kill -9 (docs/transactions.md): a transactional producer killed
mid-transaction is aborted by the coordinator after its ``transaction.timeout.ms``, and
read_committed readers then get past it; a consume-transform-produce application
(confluent-kafka consumer in a group + transactional producer +
``send_offsets_to_transaction``) killed -9 five times writes every input record exactly once.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

from confluent_kafka import Producer

import sparklog
from sparklog.metadata.transactions import COMPLETE_ABORT, TransactionStore
from sparklog.testing import BrokerAgents
from tests.fault import txn_workers
from tests.helpers import reaping, spawn_context, wait_until
from tests.wire.conftest import create_led_topic, one_broker  # noqa: F401 - the fixture

PARTITIONS = 3


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
                lambda target=target: len(committed_values(cluster, sink)) >= target,
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
