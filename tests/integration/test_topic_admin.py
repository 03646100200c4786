"""Topic admin, offsets and reads against a real ZooKeeper and real Delta tables."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

import sparklog
from sparklog.errors import OffsetOutOfRangeError, ProducerClosedError, SparklogError
from sparklog.metadata import zkdata
from tests.helpers import BOTH_STORES, assert_log_consistent, stored_records, topic_dirs, values_at, wait_for


def znode_exists(cluster: sparklog.Cluster, path: str) -> bool:
    return cluster.replicas.zk.client.exists(path) is not None


def produce(
    cluster: sparklog.Cluster, topic: str, values: list[bytes], **send_args: object
) -> list[sparklog.RecordMetadata]:
    with cluster.producer() as producer:
        futures = [producer.send(topic, v, **send_args) for v in values]  # type: ignore[arg-type]
        producer.flush()
        return [f.result() for f in futures]


def test_create_list_describe(cluster: sparklog.Cluster, sparklog_home: Path) -> None:
    assert cluster.list_topics() == []
    created = cluster.create_topic("orders", partitions=3, config={"retention.ms": 1000, "cleanup_policy": "compact"})
    cluster.create_topic("__consumer_offsets", partitions=1)
    assert cluster.list_topics() == ["__consumer_offsets", "orders"]
    assert cluster.list_topics(include_internal=False) == ["orders"]
    described = cluster.describe_topic("orders")
    assert described == created
    assert described.partition_count == 3 and described.replication_factor == 1
    assert [p.partition for p in described.partitions] == [0, 1, 2]
    for p in described.partitions:
        assert p.replicas == (0,) and p.leader == 0 and p.isr == (0,) and p.leader_epoch == 0
    assert described.configs == {"cleanup.policy": "compact", "retention.ms": "1000"}
    assert described.topic_id and described.topic_id != cluster.describe_topic("__consumer_offsets").topic_id
    assert topic_dirs(sparklog_home) == ["__consumer_offsets", "orders"]
    assert cluster.replicas.leader_table("orders").topic_id() == described.topic_id
    assert cluster.partition_offsets("orders") == {0: (0, 0), 1: (0, 0), 2: (0, 0)}


def test_alter_and_effective_config(cluster: sparklog.Cluster) -> None:
    cluster.create_topic("t", config={"retention.ms": "5000"})
    effective = cluster.topic_config("t")
    assert effective["retention.ms"] == 5000
    assert effective["max.message.bytes"] == 1_048_588  # default
    assert effective["cleanup.policy"] == "delete"
    new = cluster.alter_topic_config("t", set={"max.message.bytes": 2048, "message_timestamp_type": "LogAppendTime"})
    assert new == {"max.message.bytes": "2048", "message.timestamp.type": "LogAppendTime", "retention.ms": "5000"}
    assert cluster.describe_topic("t").configs == new
    new = cluster.alter_topic_config("t", set={"retention.ms": -1}, delete=["max.message.bytes"])
    assert new == {"message.timestamp.type": "LogAppendTime", "retention.ms": "-1"}
    effective = cluster.topic_config("t")
    assert effective["max.message.bytes"] == 1_048_588 and effective["retention.ms"] == -1
    assert effective["message.timestamp.type"] == "LogAppendTime"
    assert cluster.alter_topic_config("t", delete=["retention_ms", "message.timestamp.type"]) == {}


def test_create_partitions_then_produce_to_new_partition(cluster: sparklog.Cluster) -> None:
    cluster.create_topic("grow", partitions=2)
    producer = cluster.producer()
    producer.send("grow", b"old", partition=1).result()
    described = cluster.create_partitions("grow", 4)
    assert described.partition_count == 4 and [p.partition for p in described.partitions] == [0, 1, 2, 3]
    assert cluster.partitions_of("grow") == [0, 1, 2, 3]
    # The producer cached 2 partitions: naming a new one refreshes its metadata.
    meta = producer.send("grow", b"new", partition=3).result()
    assert (meta.partition, meta.offset) == (3, 0)
    producer.close()
    assert cluster.list_offsets("grow") == {0: 0, 1: 1, 2: 0, 3: 1}
    assert values_at(stored_records(cluster, "grow"), 3) == [b"new"]


@BOTH_STORES
def test_delete_removes_znodes_and_data_and_recreate_is_empty(cluster: sparklog.Cluster, sparklog_home: Path) -> None:
    first = cluster.create_topic("gone", partitions=2)
    produce(cluster, "gone", [b"a", b"b", b"c"])
    assert znode_exists(cluster, zkdata.writer_path("gone", 0))  # the producer took a lease
    cluster.delete_topic("gone")
    assert cluster.list_topics() == []
    assert not znode_exists(cluster, zkdata.topic_path("gone"))
    assert not znode_exists(cluster, zkdata.topic_config_path("gone"))
    assert topic_dirs(sparklog_home) == []
    second = cluster.create_topic("gone", partitions=1)
    assert second.topic_id != first.topic_id and second.partition_count == 1
    assert cluster.read("gone").num_rows == 0
    assert cluster.list_offsets("gone", "earliest") == {0: 0} and cluster.list_offsets("gone") == {0: 0}
    metas = produce(cluster, "gone", [b"fresh"])
    assert [(m.partition, m.offset) for m in metas] == [(0, 0)]
    assert [r.value for r in stored_records(cluster, "gone")] == [b"fresh"]


@BOTH_STORES
def test_list_offsets_earliest_latest_and_by_timestamp(cluster: sparklog.Cluster) -> None:
    cluster.create_topic("ts", partitions=2)
    base = 1_700_000_000_000
    # partition 0: timestamps base, base+10, base+20, base+30; partition 1: base+15 only
    produce(cluster, "ts", [b"p0-%d" % i for i in range(2)], partition=0)  # now-ish timestamps, then explicit ones
    with cluster.producer() as producer:
        for i in range(4):
            producer.send("ts", b"x%d" % i, partition=0, timestamp_ms=base + 10 * i)
        producer.send("ts", b"y", partition=1, timestamp_ms=base + 15)
        producer.send("ts", b"z", partition=0, timestamp_ms=base + 5)  # out of order, offset 6
    assert cluster.list_offsets("ts", "earliest") == {0: 0, 1: 0}
    assert cluster.list_offsets("ts", "latest") == {0: 7, 1: 1}
    assert cluster.list_offsets("ts", -2) == {0: 0, 1: 0} and cluster.list_offsets("ts", -1) == {0: 7, 1: 1}
    # offsets 0,1 carry the wall clock (after base+30), so they match every query up to now
    assert cluster.list_offsets("ts", base + 10) == {0: 0, 1: 0}
    future = int(time.time() * 1000) + 3_600_000
    assert cluster.list_offsets("ts", future) == {0: -1, 1: -1}


def test_list_offsets_by_timestamp_exact_boundaries(cluster: sparklog.Cluster) -> None:
    cluster.create_topic("tb", partitions=1)
    base = 1_600_000_000_000
    with cluster.producer() as producer:
        for i, delta in enumerate([0, 10, 20, 30, 5]):
            producer.send("tb", b"v%d" % i, timestamp_ms=base + delta)
    expectations = {
        base - 1: 0,
        base: 0,
        base + 1: 1,
        base + 6: 1,
        base + 10: 1,
        base + 11: 2,
        base + 30: 3,
        base + 31: -1,
    }
    actual = {t: cluster.list_offsets("tb", t)[0] for t in expectations}
    assert actual == expectations, {t - base: (actual[t], e) for t, e in expectations.items() if actual[t] != e}


@BOTH_STORES
def test_read_ranges_and_out_of_range(cluster: sparklog.Cluster) -> None:
    cluster.create_topic("r", partitions=2)
    produce(cluster, "r", [b"a%d" % i for i in range(10)], partition=0)
    produce(cluster, "r", [b"b%d" % i for i in range(3)], partition=1)
    whole = cluster.read("r")
    assert whole.column_names == [
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
        "headers",
    ]
    assert set(whole.column("topic").to_pylist()) == {"r"}
    assert whole.num_rows == 13
    part = cluster.read("r", partition=0, start_offset=3, end_offset=7)
    assert part.column("offset").to_pylist() == [3, 4, 5, 6]
    assert part.column("value").to_pylist() == [b"a3", b"a4", b"a5", b"a6"]
    assert cluster.read("r", partition=1, start_offset=1).column("value").to_pylist() == [b"b1", b"b2"]
    assert cluster.read("r", partition=0, start_offset=8, end_offset=100).column("offset").to_pylist() == [8, 9]
    assert cluster.read("r", partition=0, start_offset=10).num_rows == 0  # at the high watermark: empty
    assert cluster.read("r", partition=0, start_offset=5, end_offset=2).num_rows == 0
    assert "headers" not in cluster.read("r", include_headers=False).column_names
    for start in (-1, 11):
        with pytest.raises(OffsetOutOfRangeError, match=str(start)):
            cluster.read("r", partition=0, start_offset=start)
    with pytest.raises(OffsetOutOfRangeError):
        cluster.read("r", start_offset=4)  # above partition 1's high watermark 3
    assert_log_consistent(cluster, "r")


def test_log_append_time(cluster: sparklog.Cluster) -> None:
    cluster.create_topic("lat", partitions=1, config={"message.timestamp.type": "LogAppendTime"})
    cluster.create_topic("ct", partitions=1)
    before = int(time.time() * 1000)
    metas = produce(cluster, "lat", [b"a", b"b"], timestamp_ms=1000)
    after = int(time.time() * 1000)
    table = cluster.read("lat")
    stamps = [int(t.timestamp() * 1000) for t in table.column("timestamp").to_pylist()]
    assert table.column("timestampType").to_pylist() == [1, 1]
    assert all(before <= s <= after for s in stamps), (before, stamps, after)
    assert [m.timestamp for m in metas] == stamps  # the producer reports the broker's time
    produce(cluster, "ct", [b"c"], timestamp_ms=1000)
    created = cluster.read("ct")
    assert created.column("timestampType").to_pylist() == [0]
    assert [int(t.timestamp() * 1000) for t in created.column("timestamp").to_pylist()] == [1000]


def test_headers_round_trip(cluster: sparklog.Cluster) -> None:
    cluster.create_topic("h", partitions=1)
    produce(cluster, "h", [b"v1"], headers=[("a", b"1"), ("b", None), ("a", "two")])
    produce(cluster, "h", [b"v2"], headers={"k": b"\x00\xff"})
    produce(cluster, "h", [b"v3"])
    headers = cluster.read("h").column("headers").to_pylist()
    assert headers == [
        [{"key": "a", "value": b"1"}, {"key": "b", "value": None}, {"key": "a", "value": b"two"}],
        [{"key": "k", "value": b"\x00\xff"}],
        None,
    ]


@pytest.mark.parametrize("acks", ["0", "1", "all", "-1", 1, 0])
def test_every_acks_setting_stores_records(cluster: sparklog.Cluster, acks: object) -> None:
    cluster.create_topic("acks", partitions=2)
    producer = cluster.producer(acks=acks, linger_ms=50)
    futures = [producer.send("acks", b"v%d" % i, key=b"k%d" % i) for i in range(20)]
    producer.flush()  # flush waits for the commit even when nobody waits for an ack
    assert len(stored_records(cluster, "acks")) == 20
    metas = [f.result(timeout=0) for f in futures]
    if str(acks) == "0":
        assert {m.offset for m in metas} == {-1}
    else:
        assert sorted((m.partition, m.offset) for m in metas) == sorted(
            (r.partition, r.offset) for r in stored_records(cluster, "acks")
        )
    producer.close()
    assert sorted(r.value or b"" for r in assert_log_consistent(cluster, "acks")) == sorted(
        b"v%d" % i for i in range(20)
    )


def test_send_after_close_raises(cluster: sparklog.Cluster) -> None:
    cluster.create_topic("c", partitions=1)
    producer = cluster.producer(linger_ms=1000)
    future = producer.send("c", b"last")
    producer.close()  # flushes what was queued
    assert future.result(timeout=0).offset == 0
    with pytest.raises(ProducerClosedError):
        producer.send("c", b"late")
    producer.close()  # idempotent
    assert [r.value for r in stored_records(cluster, "c")] == [b"last"]


def test_delete_topic_while_producing(cluster: sparklog.Cluster, cluster_options: dict[str, str]) -> None:
    """Deleting a topic under a busy producer deletes it for good: no failed delete, no ghost
    znodes re-created by the producer's lease, only SparklogErrors for the producer."""
    cluster.create_topic("busy", partitions=3)
    producer = cluster.producer(linger_ms=0)
    stop = threading.Event()
    failures: list[BaseException] = []

    def produce_forever() -> None:
        while not stop.is_set():
            try:
                producer.send("busy", b"x").result()
            except BaseException as exc:
                failures.append(exc)

    thread = threading.Thread(target=produce_forever)
    thread.start()
    try:
        wait_for(lambda: cluster.list_offsets("busy")[0] > 3, 30, "the producer to get going")
        failed_before = len(failures)
        cluster.delete_topic("busy")
        # The producer keeps trying against the deleted topic: each failed send is a chance
        # for its lease to re-create the topic's znodes.
        wait_for(lambda: len(failures) >= failed_before + 3, 30, "three sends failing against the deleted topic")
    finally:
        stop.set()
        thread.join(30)
    assert cluster.list_topics() == []
    assert not znode_exists(cluster, zkdata.topic_path("busy")), "the producer resurrected the topic's znodes"
    assert not znode_exists(cluster, zkdata.topic_config_path("busy"))
    assert failures, "sends to a deleted topic must fail"
    foreign = [f for f in failures if not isinstance(f, SparklogError)]
    assert not foreign, f"{len(foreign)} non-sparklog errors, first {foreign[0]!r}"
    producer.close()
    cluster.create_topic("busy", partitions=1)
    assert cluster.read("busy").num_rows == 0
    assert [m.offset for m in produce(cluster, "busy", [b"again"])] == [0]


@BOTH_STORES
def test_producer_survives_delete_and_recreate(cluster: sparklog.Cluster) -> None:
    """A long-lived producer whose topic is deleted and re-created may fail a send (with a
    SparklogError), then writes to the new topic from offset 0, never on the old snapshot."""
    cluster.create_topic("phoenix", partitions=1)
    producer = cluster.producer()
    for i in range(3):
        producer.send("phoenix", b"old-%d" % i).result()
    cluster.delete_topic("phoenix")
    cluster.create_topic("phoenix", partitions=1)
    delivered: list[int] = []
    for attempt in range(3):
        try:
            delivered.append(producer.send("phoenix", b"new-%d" % attempt).result().offset)
        except SparklogError:
            assert attempt == 0, "only the first send after the re-create may fail"
    producer.close()
    assert delivered == list(range(len(delivered))) and len(delivered) >= 2
    records = assert_log_consistent(cluster, "phoenix")
    assert all(r.value and r.value.startswith(b"new-") for r in records)
    assert len(records) == len(delivered)
