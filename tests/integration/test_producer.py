"""The light producer against real ZooKeeper and Delta: partitioning, ordering, batching."""

from __future__ import annotations

import random
import threading
from concurrent.futures import Future

import pyarrow as pa
import pytest

import sparklog
from sparklog import clock
from sparklog.errors import RecordTooLargeError
from sparklog.model.records import RecordMetadata, partition_for_key
from tests.helpers import (
    BOTH_STORES,
    Ack,
    assert_acks_stored,
    assert_log_consistent,
    assert_values_unique,
    partition_counts,
    values_at,
    wait_for,
)


@pytest.fixture
def topic(cluster: sparklog.Cluster) -> str:
    cluster.create_topic("events", partitions=3)
    return "events"


@BOTH_STORES
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


@BOTH_STORES
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


@BOTH_STORES
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


# -- metadata and topic configs that change under a running producer ------------------------
def test_producer_sees_new_partitions_within_metadata_max_age(cluster: sparklog.Cluster) -> None:
    cluster.create_topic("growing", partitions=2)
    key = next(k for k in (b"key-%d" % i for i in range(100)) if partition_for_key(k, 4) >= 2)
    with cluster.producer(linger_ms=0, metadata_max_age_ms=200) as producer:
        assert producer.send("growing", b"before", key=key).result().partition == partition_for_key(key, 2)
        cluster.create_partitions("growing", 4)
        landed: list[int] = []

        def keyed_record_lands_where_kafka_puts_it_for_4_partitions() -> bool:
            landed.append(producer.send("growing", b"keyed", key=key).result().partition)
            return landed[-1] == partition_for_key(key, 4)

        wait_for(
            keyed_record_lands_where_kafka_puts_it_for_4_partitions, 30, "the producer to refresh the partition count"
        )
        assert set(landed[:-1]) <= {partition_for_key(key, 2)}, "before the refresh: the old count's partition only"
        keyless = [producer.send("growing", b"keyless-%d" % i) for i in range(8)]
        assert sorted(f.result().partition for f in keyless) == [0, 0, 1, 1, 2, 2, 3, 3]
    assert_log_consistent(cluster, "growing")


def test_altered_max_message_bytes_applies_to_the_next_send(cluster: sparklog.Cluster) -> None:
    """Enforced by the produce request with the topic's current config, not the producer's
    copy (its default metadata.max.age.ms of 5 minutes does not expire in this test)."""
    cluster.create_topic("limited", partitions=1, config={"max.message.bytes": 1000})
    with cluster.producer(linger_ms=60_000) as producer:

        def send(value: bytes) -> Future[RecordMetadata]:
            future = producer.send("limited", value)
            producer.flush()
            return future

        assert send(b"x" * 100).result().offset == 0
        cluster.alter_topic_config("limited", set={"max.message.bytes": 300})
        with pytest.raises(RecordTooLargeError, match=r"max\.message\.bytes=300"):
            send(b"x" * 500).result()
        assert cluster.high_watermarks("limited") == {0: 1}, "the oversized record was not stored"
        cluster.alter_topic_config("limited", set={"max.message.bytes": 5000})
        assert send(b"y" * 2000).result().offset == 1, "a raised limit applies at once too"
        # One request holding an oversized record among others: only that record fails (as
        # Kafka splits a batch rejected with MESSAGE_TOO_LARGE and sends the rest again).
        cluster.alter_topic_config("limited", set={"max.message.bytes": 300})
        small, big, after = (producer.send("limited", v) for v in (b"a" * 10, b"b" * 500, b"c" * 10))
        producer.flush()
        assert isinstance(big.exception(), RecordTooLargeError)
        assert (small.result().offset, after.result().offset) == (2, 3)
    assert values_at(assert_log_consistent(cluster, "limited"), 0)[2:] == [b"a" * 10, b"c" * 10]


def test_log_append_time_set_after_producer_start_takes_effect(cluster: sparklog.Cluster) -> None:
    cluster.create_topic("stamped", partitions=1)
    with cluster.producer(linger_ms=0) as producer:
        assert producer.send("stamped", b"create-time", timestamp_ms=1_000).result().timestamp == 1_000
        cluster.alter_topic_config("stamped", set={"message.timestamp.type": "LogAppendTime"})
        before_ms = clock.now_ms()
        meta = producer.send("stamped", b"append-time", timestamp_ms=1_000).result()
        after_ms = clock.now_ms()
    assert before_ms <= meta.timestamp <= after_ms, "RecordMetadata carries the log append time"
    rows = cluster.read("stamped").sort_by("offset").to_pylist()
    assert [(r["value"], r["timestampType"]) for r in rows] == [(b"create-time", 0), (b"append-time", 1)]
    assert int(rows[1]["timestamp"].timestamp() * 1000) == meta.timestamp
