"""kafka-python (a pure-Python Kafka client) against a real broker agent: its producer is
idempotent by default (InitProducerId + sequences), its consumer seeks and looks up offsets
by time; its transactional producer commits a group's offsets with a transaction."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, OffsetAndMetadata, TopicPartition
from kafka.consumer.fetcher import ConsumerRecord

import sparklog
from sparklog.testing import BrokerAgents
from tests.helpers import BOTH_STORES
from tests.wire.conftest import (
    GROUP_PROPERTIES,
    create_led_topic,
    started_brokers,
    transaction_coordinator,
    wait_transactions_complete,
)

TOPIC = "wire-events"
BASE_MS = 1_700_000_000_000
_TIMEOUT_S = 30.0


@pytest.mark.parametrize("compression", [None, "gzip", "snappy", "lz4", "zstd"])
@BOTH_STORES
def test_idempotent_producer_and_consumer_with_seek_and_offsets_for_times(
    cluster: sparklog.Cluster, one_broker: BrokerAgents, compression: str | None
) -> None:
    create_led_topic(cluster, one_broker, TOPIC, partitions=2)
    producer = KafkaProducer(bootstrap_servers=one_broker.bootstrap_servers, compression_type=compression, linger_ms=5)
    futures = [
        producer.send(
            TOPIC,
            key=f"k{i % 5}".encode(),
            value=f"v{i}".encode(),
            headers=[("n", str(i).encode())],
            timestamp_ms=BASE_MS + 10 * i,
        )
        for i in range(200)
    ]
    producer.flush(30)
    metadata = [f.get(timeout=30) for f in futures]
    producer.close()
    for p in (0, 1):
        offsets = [m.offset for m in metadata if m.partition == p]
        assert offsets == list(range(len(offsets)))  # contiguous, in send order

    # the idempotent producer's last sequence is in the table (it survives a failover)
    stored = cluster.read(TOPIC)
    assert stored.num_rows == 200

    consumer = KafkaConsumer(bootstrap_servers=one_broker.bootstrap_servers, enable_auto_commit=False)
    partitions = [TopicPartition(TOPIC, p) for p in (0, 1)]
    consumer.assign(partitions)
    consumer.seek_to_beginning()
    seen = {}
    for _ in range(100):
        for records in consumer.poll(timeout_ms=500).values():
            for r in records:
                seen[(r.partition, r.offset)] = r
        if len(seen) >= 200:
            break
    assert len(seen) == 200
    for i, m in enumerate(metadata):
        r = seen[(m.partition, m.offset)]
        assert (r.key, r.value, r.timestamp, r.headers) == (
            f"k{i % 5}".encode(),
            f"v{i}".encode(),
            BASE_MS + 10 * i,
            [("n", str(i).encode())],
        )

    # offsets for times: the first record at or after the timestamp, per partition
    target = BASE_MS + 10 * 100
    found = consumer.offsets_for_times({tp: target for tp in partitions})
    for tp in partitions:
        expected = min(
            (m.offset for i, m in enumerate(metadata) if m.partition == tp.partition and BASE_MS + 10 * i >= target)
        )
        assert found[tp].offset == expected
    assert consumer.beginning_offsets(partitions) == dict.fromkeys(partitions, 0)
    ends = consumer.end_offsets(partitions)
    assert sum(ends.values()) == 200

    # seek into the middle and read on from there
    tp0 = partitions[0]
    consumer.assign([tp0])
    consumer.seek(tp0, 3)
    batch = consumer.poll(timeout_ms=5000, max_records=1)
    assert [r.offset for r in batch[tp0]] == [3]
    consumer.close()


def test_consume_transform_produce_commits_the_offsets_with_the_transaction(
    cluster: sparklog.Cluster, zk_connect: str, sparklog_home: Path, tmp_path: Path
) -> None:
    """kafka-python's ``send_offsets_to_transaction`` (AddOffsetsToTxn to the transaction
    coordinator, FindCoordinator for the group, TxnOffsetCommit to the group coordinator):
    the group's offsets — with their metadata and committed leader epoch, as Kafka keeps them —
    and the output appear when the transaction commits, never when it aborts. Two brokers: the
    group's and the transaction's coordinators are different brokers."""
    with started_brokers(zk_connect, sparklog_home, tmp_path, (1, 2), properties=GROUP_PROPERTIES) as agents:
        _consume_transform_produce(cluster, agents)


def _consume_transform_produce(cluster: sparklog.Cluster, group_broker: BrokerAgents) -> None:
    create_led_topic(cluster, group_broker, "ctp-in", partitions=2)
    create_led_topic(cluster, group_broker, "ctp-out", partitions=1)
    with cluster.producer() as source:
        for i in range(10):
            source.send("ctp-in", f"v{i}".encode(), partition=i % 2)
        source.flush()
    bootstrap = group_broker.bootstrap_servers
    consumer = KafkaConsumer(
        "ctp-in",
        bootstrap_servers=bootstrap,
        group_id="ctp",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
    )
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id="ctp-txn")
    try:
        records: list[ConsumerRecord] = []
        deadline = time.monotonic() + _TIMEOUT_S
        while len(records) < 10 and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500).values():
                records += batch
        assert len(records) == 10
        positions = {
            TopicPartition("ctp-in", p): OffsetAndMetadata(
                max(r.offset for r in records if r.partition == p) + 1, f"m{p}", 0
            )
            for p in (0, 1)
        }
        producer.init_transactions()
        assert transaction_coordinator(cluster, "ctp-txn") != transaction_coordinator(cluster, "ctp")
        for commit in (False, True):
            producer.begin_transaction()
            # The offsets first: AddOffsetsToTxn starts the transaction.
            within(_TIMEOUT_S, lambda: producer.send_offsets_to_transaction(positions, consumer.group_metadata()))
            for r in records:
                producer.send("ctp-out", r.value.upper(), partition=0)
            if commit:
                producer.commit_transaction()
            else:
                producer.abort_transaction()
                wait_transactions_complete(cluster, "ctp-txn")
                assert cluster.committed_offsets("ctp") == {}
    finally:
        producer.close(timeout=10)
        consumer.close()
    wait_transactions_complete(cluster, "ctp-txn")
    assert cluster.committed_offsets("ctp") == {("ctp-in", 0): 5, ("ctp-in", 1): 5}
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        assert admin.list_group_offsets("ctp") == {"ctp": positions}
    finally:
        admin.close()
    reader = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed", enable_auto_commit=False)
    out = TopicPartition("ctp-out", 0)
    reader.assign([out])
    reader.seek_to_beginning()
    seen: list[bytes] = []
    deadline = time.monotonic() + _TIMEOUT_S
    while len(seen) < 10 and time.monotonic() < deadline:
        seen += [r.value for r in reader.poll(timeout_ms=500).get(out, [])]
    reader.close()
    assert sorted(seen) == sorted(r.value.upper() for r in records)  # the committed copy only


def within(timeout_s: float, call: Callable[[], object]) -> None:
    """Run ``call`` (kafka-python waits on some results without a timeout) and fail if it has
    not returned within ``timeout_s``."""
    failure: list[BaseException] = []

    def run() -> None:
        try:
            call()
        except BaseException as exc:  # re-raised in the caller
            failure.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout_s)
    assert not thread.is_alive(), f"{call} did not return within {timeout_s} s"
    if failure:
        raise failure[0]
