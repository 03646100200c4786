"""The light producer against real ZooKeeper and Delta: partitioning, ordering, batching."""

from __future__ import annotations

import random
import threading

import pyarrow as pa
import pytest

import sparklog
from sparklog.model.records import partition_for_key
from tests.helpers import (
    Ack,
    assert_acks_stored,
    assert_log_consistent,
    assert_values_unique,
    partition_counts,
    values_at,
)


@pytest.fixture
def topic(cluster: sparklog.Cluster) -> str:
    cluster.create_topic("events", partitions=3)
    return "events"


def test_keyed_records_land_where_kafka_puts_them(cluster: sparklog.Cluster, topic: str) -> None:
    rng = random.Random(7)
    keys = [rng.randbytes(rng.randrange(0, 20)) for _ in range(200)] + [b"", b"21", b"foobar"]
    with cluster.producer(linger_ms=20) as producer:
        futures = [producer.send(topic, b"v%d" % i, key=k) for i, k in enumerate(keys)]
        metas = [f.result() for f in futures]
    wrong = [
        (k, m.partition, partition_for_key(k, 3))
        for k, m in zip(keys, metas, strict=False)
        if m.partition != partition_for_key(k, 3)
    ]
    assert not wrong, f"{len(wrong)} keys on the wrong partition, first (key, got, expected) {wrong[0]}"
    records = assert_log_consistent(cluster, topic)
    assert_acks_stored(records, [Ack(m.partition, m.offset, b"v%d" % i) for i, m in enumerate(metas)])


def test_keyless_records_spread_evenly(cluster: sparklog.Cluster, topic: str) -> None:
    with cluster.producer(linger_ms=10) as producer:
        for i in range(300):
            producer.send(topic, b"v%d" % i)
    assert partition_counts(assert_log_consistent(cluster, topic)) == {0: 100, 1: 100, 2: 100}


def test_send_arrow_partitioning(cluster: sparklog.Cluster, topic: str) -> None:
    keys = [b"key-%d" % i for i in range(60)]
    with cluster.producer() as producer:
        keyed = producer.send_arrow(topic, pa.table({"key": keys, "value": [b"k%d" % i for i in range(60)]}))
        explicit = producer.send_arrow(
            topic, pa.table({"value": [b"e0", b"e1"], "partition": pa.array([2, 2], pa.int32()), "key": [b"x", None]})
        )
        keyless = [producer.send_arrow(topic, pa.table({"value": [b"n%d" % i] * 1})) for i in range(6)]
    records = assert_log_consistent(cluster, topic)
    expected_counts: dict[int, int] = {}
    for k in keys:
        expected_counts[partition_for_key(k, 3)] = expected_counts.get(partition_for_key(k, 3), 0) + 1
    assert {p: n for p, (_s, n) in keyed.offsets.items()} == expected_counts
    for i, k in enumerate(keys):
        p = partition_for_key(k, 3)
        assert b"k%d" % i in values_at(records, p), f"key {k!r} not on partition {p}"
    assert explicit.offsets == {2: (explicit.offsets[2][0], 2)}  # an explicit partition wins over the key
    assert sorted(p for m in keyless for p in m.offsets) == [0, 0, 1, 1, 2, 2]  # whole keyless batches round-robin
    assert_values_unique(records)


def test_order_within_partition_is_send_order(cluster: sparklog.Cluster, topic: str) -> None:
    with cluster.producer(linger_ms=2, batch_size=200) as producer:
        for i in range(400):
            producer.send(topic, b"%05d" % i, key=b"same-key")
    records = assert_log_consistent(cluster, topic)
    p = partition_for_key(b"same-key", 3)
    assert values_at(records, p) == [b"%05d" % i for i in range(400)]


def test_threads_share_one_producer(cluster: sparklog.Cluster, topic: str) -> None:
    producer = cluster.producer(linger_ms=1)
    acks: list[Ack] = []
    lock = threading.Lock()

    def run(worker: int) -> None:
        for i in range(100):
            value = b"t%d-%d" % (worker, i)
            future = producer.send(topic, value)
            if i % 10 == 0:  # some sync sends among the async ones
                meta = future.result()
                with lock:
                    acks.append(Ack(meta.partition, meta.offset, value))

    threads = [threading.Thread(target=run, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    producer.close()
    records = assert_log_consistent(cluster, topic)
    assert len(records) == 400
    assert_values_unique(records)
    assert_acks_stored(records, acks)


def test_send_arrow_after_send_keeps_order(cluster: sparklog.Cluster, topic: str) -> None:
    with cluster.producer(linger_ms=5000) as producer:
        producer.send(topic, b"first", partition=1)
        producer.send_arrow(topic, pa.table({"value": [b"second"], "partition": pa.array([1], pa.int32())}))
    assert values_at(assert_log_consistent(cluster, topic), 1) == [b"first", b"second"]


def test_batches_become_few_commits(cluster: sparklog.Cluster, topic: str) -> None:
    with cluster.producer(linger_ms=10_000, batch_size=1 << 30) as producer:
        for i in range(500):
            producer.send(topic, b"v%d" % i)
        producer.flush()
    table = cluster.replicas.leader_table(topic)
    # create + one produce commit (no epoch marker: the lease was free)
    assert table.snapshot().version() == 1
    assert len(table.files(table.snapshot())) == 3


def test_send_requests_respect_max_request_size(cluster: sparklog.Cluster) -> None:
    """Queued records are drained in requests of at most max.request.size (one commit each)."""
    cluster.create_topic("capped", partitions=2)
    before = cluster.replicas.leader_table("capped").snapshot().version()
    value = b"x" * 1000
    with cluster.producer(linger_ms=200, max_request_size=10_000) as producer:
        futures = [producer.send("capped", value, partition=i % 2) for i in range(100)]
        producer.flush()
        offsets = {(f.result().partition, f.result().offset) for f in futures}
    assert offsets == {(p, o) for p in (0, 1) for o in range(50)}, "every record once, offsets contiguous"
    commits = cluster.replicas.leader_table("capped").snapshot().version() - before
    # 100 records of ~1 KiB at <= 10 kB per request: at least 10 requests (commits).
    assert commits >= 10, f"{commits} commits: requests exceeded max.request.size"
