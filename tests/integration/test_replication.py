"""Replication inside one process: three brokers' log dirs, the replica fetchers of the three
brokers as threads, the real ZooKeeper partition states. acks=all waits for the ISR, the high
watermark is the ISR's minimum log end, min.insync.replicas refuses before appending.

(Separate broker processes, the controller and failures: tests/fault/test_replication_faults.py.)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import sparklog
from sparklog.errors import NotEnoughReplicasError
from sparklog.log.reader import read_ranges
from sparklog.runtime.replica_fetcher import ReplicaFetcher

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.fixture
def three_brokers(cluster: sparklog.Cluster, tmp_path: Path) -> sparklog.Cluster:
    for broker in (1, 2):
        cluster.replicas.metadata.register_broker(broker, str(tmp_path / f"broker-{broker}"), None)
    return cluster


@pytest.fixture
def fetchers(three_brokers: sparklog.Cluster) -> Iterator[list[ReplicaFetcher]]:
    stop = threading.Event()
    running = [ReplicaFetcher(three_brokers.replicas, b, fsync=False) for b in (0, 1, 2)]
    threads = [threading.Thread(target=f.run, args=(stop,), daemon=True) for f in running]
    for thread in threads:
        thread.start()
    yield running
    stop.set()
    for thread in threads:
        thread.join(10)


def replica_records(cluster: sparklog.Cluster, topic: str, broker: int, partition: int) -> list[tuple[int, bytes]]:
    table = cluster.replicas.replica_table(topic, broker)
    dt = table.snapshot()
    got = read_ranges(table, dt, {partition: (0, table.log_end(dt, partition))})
    return list(zip(got.column("offset").to_pylist(), got.column("value").to_pylist(), strict=False))


def set_isr(cluster: sparklog.Cluster, topic: str, partition: int, isr: list[int]) -> None:
    state, version = cluster.replicas.metadata.partition_state(topic, partition)
    assert cluster.replicas.metadata.set_partition_state(topic, partition, replace(state, isr=isr), version)
    deadline = time.monotonic() + 5
    while cluster.replicas.states(topic, [partition])[partition].isr != isr:  # the watch delivers it
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_acks_all_returns_when_every_isr_replica_has_the_batch(
    three_brokers: sparklog.Cluster, fetchers: list[ReplicaFetcher]
) -> None:
    cluster = three_brokers
    description = cluster.create_topic("r", 2, replication_factor=3, config={"min.insync.replicas": "2"})
    assert all(sorted(p.replicas) == [0, 1, 2] and sorted(p.isr) == [0, 1, 2] for p in description.partitions)
    with cluster.producer(acks="all", linger_ms=0) as producer:
        for i in range(20):
            metadata = producer.send("r", value=b"v%d" % i, partition=i % 2).result(timeout=30)
            # Acknowledged: every in-sync replica already holds it.
            for broker in (0, 1, 2):
                assert (metadata.offset, b"v%d" % i) in replica_records(cluster, "r", broker, i % 2)
    for partition in (0, 1):
        copies = [replica_records(cluster, "r", b, partition) for b in (0, 1, 2)]
        assert copies[0] == copies[1] == copies[2] and len(copies[0]) == 10
    assert cluster.high_watermarks("r") == {0: 10, 1: 10}
    assert cluster.read("r").num_rows == 20


def test_high_watermark_is_the_isr_minimum(three_brokers: sparklog.Cluster) -> None:
    """Without fetchers nothing is copied: acks=1 lands on the leader only, and readers see
    nothing above the ISR's minimum log end until the ISR is just the leader."""
    cluster = three_brokers
    cluster.create_topic("hw", 1, replication_factor=3)
    leader = cluster.replicas.leader("hw", 0).leader
    with cluster.producer(acks="1", linger_ms=0) as producer:
        producer.send("hw", value=b"a").result(timeout=30)
    assert (
        cluster.replicas.replica_table("hw", leader).log_end(cluster.replicas.replica_table("hw", leader).snapshot(), 0)
        == 1
    )
    assert cluster.high_watermarks("hw") == {0: 0} and cluster.read("hw").num_rows == 0
    with cluster.consumer(auto_offset_reset="earliest") as consumer:
        consumer.assign([("hw", 0)])
        assert consumer.poll(200) == [], "a consumer never reads above the high watermark"
    set_isr(cluster, "hw", 0, [leader])
    assert cluster.high_watermarks("hw") == {0: 1} and cluster.read("hw").column("value").to_pylist() == [b"a"]


def test_not_enough_replicas_appends_nothing_and_recovers(
    three_brokers: sparklog.Cluster, fetchers: list[ReplicaFetcher]
) -> None:
    cluster = three_brokers
    cluster.create_topic("min", 1, replication_factor=3, config={"min.insync.replicas": "2"})
    leader = cluster.replicas.leader("min", 0).leader
    set_isr(cluster, "min", 0, [leader])
    table = cluster.replicas.replica_table("min", leader)
    version = table.snapshot().version()
    with cluster.producer(acks="all", linger_ms=0, delivery_timeout_ms=300) as producer:
        with pytest.raises(NotEnoughReplicasError, match=r"min-0 has ISR \[\d\], fewer than min.insync.replicas=2"):
            producer.send("min", value=b"refused").result(timeout=30)
        assert table.snapshot().version() == version, "nothing appended"
        with cluster.producer(acks="1", linger_ms=0) as relaxed:
            relaxed.send("min", value=b"acks=1 is fine").result(timeout=30)
    set_isr(cluster, "min", 0, [0, 1, 2])
    with cluster.producer(acks="all", linger_ms=0) as producer:
        producer.send("min", value=b"back").result(timeout=30)
    assert [v for _o, v in replica_records(cluster, "min", 0, 0)] == [b"acks=1 is fine", b"back"]


def test_replication_job_catches_followers_up(
    three_brokers: sparklog.Cluster,
    spark: SparkSession,
    cluster_options: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from jobs.replica_fetch import main

    cluster = three_brokers
    cluster.create_topic("job", 2, replication_factor=3)
    with cluster.producer(acks="1", linger_ms=0) as producer:
        for i in range(30):
            producer.send("job", value=b"j%d" % i, partition=i % 2).result(timeout=30)
    assert cluster.high_watermarks("job") == {0: 0, 1: 0}, "nothing copied yet"
    monkeypatch.setenv("SPARKLOG_ZOOKEEPER", cluster_options["zookeeper.connect"])
    monkeypatch.setenv("SPARKLOG_HOME", cluster_options["sparklog.home"])
    assert main(["--topic", "job"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "60 records copied to brokers [0, 1, 2]", out
    assert cluster.high_watermarks("job") == {0: 15, 1: 15}
    for partition in (0, 1):
        copies = [replica_records(cluster, "job", b, partition) for b in (0, 1, 2)]
        assert copies[0] == copies[1] == copies[2] and len(copies[0]) == 15
    assert (
        main(["--topic", "job"]) == 0
        and capsys.readouterr().out.splitlines()[-1] == "0 records copied to brokers [0, 1, 2]"
    )
