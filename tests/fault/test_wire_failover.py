"""Failover through the Kafka protocol: a confluent-kafka producer (acks=all, idempotent)
keeps sending while the leader's broker is killed -9 and restarted, five times.

Three real broker agents, replication factor 3, ``min.insync.replicas=2``. The producer
learns each new leader from NOT_LEADER_OR_FOLLOWER / lost connections and Metadata, as
against Kafka. Afterwards every acknowledged record is present exactly once, in send order,
on every replica below the high watermark, at the offset its delivery report gave; the
client's retries stored nothing twice.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer

import sparklog
from sparklog.log.reader import read_ranges
from sparklog.testing import BrokerAgents
from tests.wire.conftest import wait_until

TOPIC = "wire-failover"
PARTITIONS = 2
ROUNDS = 5
_SETTLE_S = 60.0


@pytest.fixture
def agents(zk_connect: str, sparklog_home: Path, tmp_path: Path) -> Iterator[BrokerAgents]:
    with BrokerAgents(zk_connect, sparklog_home, tmp_path / "brokers", replica_lag_time_max_ms=3_000) as running:
        running.start(1, 2, 3)
        running.wait_controller()
        yield running


def full_isr(cluster: sparklog.Cluster, agents: BrokerAgents) -> bool:
    live = set(agents.live())
    return all(p.leader in live and sorted(p.isr) == [1, 2, 3] for p in cluster.describe_topic(TOPIC).partitions)


class SendingProducer:
    """Sends numbered records (value = its number) at a bounded rate from a thread until stopped."""

    def __init__(self, bootstrap: str) -> None:
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "message.timeout.ms": 120_000,
                "partitioner": "murmur2_random",
            }
        )
        self.reports: dict[int, Any] = {}
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            i = self.sent

            def delivered(err: KafkaError | None, msg: Any, i: int = i) -> None:
                self.reports[i] = err if err is not None else (msg.partition(), msg.offset())

            try:
                self.producer.produce(TOPIC, key=f"k{i}".encode(), value=str(i).encode(), on_delivery=delivered)
                self.sent += 1
            except BufferError:
                pass
            self.producer.poll(0.005)  # ~200 records/s at most

    def start(self) -> SendingProducer:
        self._thread.start()
        return self

    def acknowledged(self) -> int:
        return sum(1 for r in list(self.reports.values()) if isinstance(r, tuple))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        assert self.producer.flush(120) == 0, "records left undelivered"


@pytest.mark.slow
def test_leader_killed_five_times_loses_and_duplicates_nothing(cluster: sparklog.Cluster, agents: BrokerAgents) -> None:
    cluster.create_topic(TOPIC, PARTITIONS, replication_factor=3, config={"min.insync.replicas": "2"})
    wait_until(lambda: full_isr(cluster, agents), "leaders and full ISRs", _SETTLE_S)
    producer = SendingProducer(agents.bootstrap_servers).start()
    try:
        for round_ in range(ROUNDS):
            before = producer.acknowledged()
            wait_until(lambda: producer.acknowledged() > before + 20, f"round {round_}: records acknowledged")
            leader = cluster.describe_topic(TOPIC).partitions[0].leader
            agents.kill(leader)
            wait_until(
                lambda: cluster.describe_topic(TOPIC).partitions[0].leader not in (leader, -1),
                f"round {round_}: a new leader for partition 0 after killing broker {leader}",
                _SETTLE_S,
            )
            acked = producer.acknowledged()
            wait_until(lambda: producer.acknowledged() > acked + 20, f"round {round_}: produce resumes", _SETTLE_S)
            agents.start(leader)
            wait_until(lambda: full_isr(cluster, agents), f"round {round_}: broker {leader} back in the ISR", _SETTLE_S)
    finally:
        producer.stop()

    failed = {i: r for i, r in producer.reports.items() if not isinstance(r, tuple)}
    assert not failed, f"{len(failed)} deliveries failed, e.g. {list(failed.items())[:3]}"
    wait_until(lambda: full_isr(cluster, agents), "full ISRs at the end", _SETTLE_S)
    high_watermarks = cluster.replicas.high_watermarks(TOPIC)
    for broker in (1, 2, 3):
        table = cluster.replicas.replica_table(TOPIC, broker)
        dt = table.snapshot()
        for p in range(PARTITIONS):
            rows = read_ranges(table, dt, {p: (0, high_watermarks[p])}, include_headers=False).to_pylist()
            offsets = [r["offset"] for r in rows]
            assert offsets == list(range(high_watermarks[p])), f"broker {broker} partition {p}: offsets not contiguous"
            numbers = [int(r["value"]) for r in rows]
            assert len(numbers) == len(set(numbers)), f"broker {broker} partition {p}: a record is stored twice"
            assert numbers == sorted(numbers), f"broker {broker} partition {p}: records out of send order"
            at = {r["offset"]: int(r["value"]) for r in rows}
            for i, (q, offset) in producer.reports.items():
                if q == p:
                    assert at.get(offset) == i, f"broker {broker}: record {i} not at {p}/{offset}"
