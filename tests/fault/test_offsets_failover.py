"""Committed offsets survive the loss of their coordinator: a confluent-kafka consumer
(``assign()`` + ``group.id``, standalone commits) commits ever-growing offsets one at a time
while the broker coordinating its group is killed -9 four times, every other time just
after writing a commit its paused followers never copied.

Three real broker agents; ``__consumer_offsets`` has three replicas. The client learns each new
coordinator from NOT_COORDINATOR / lost connections and FindCoordinator, as against Kafka.
Every commit the client saw acknowledged must be there afterwards: right after each failover
the new coordinator answers OffsetFetch with at least the last offset acknowledged before the
kill, and at the end OffsetFetch and ``Cluster.committed_offsets`` both give the last one.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition

import sparklog
from sparklog.model.topic import OFFSETS_TOPIC
from sparklog.testing import BrokerAgents
from tests.helpers import wait_until

TOPIC = "offsets-failover"
GROUP = "survivor"
ROUNDS = 4
_SETTLE_S = 90.0


@pytest.fixture
def agents(zk_connect: str, sparklog_home: Path, tmp_path: Path) -> Iterator[BrokerAgents]:
    with BrokerAgents(zk_connect, sparklog_home, tmp_path / "brokers", replica_lag_time_max_ms=3_000) as running:
        running.start(1, 2, 3)
        running.wait_controller()
        yield running


class Committer:
    """Commits offset 1, 2, 3, ... of partition 0 (synchronously, one at a time) from a thread;
    ``acknowledged`` is the highest commit the client reported as successful."""

    def __init__(self, bootstrap: str) -> None:
        self.consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False, "log_level": 2}
        )
        self.consumer.assign([TopicPartition(TOPIC, 0)])
        self.acknowledged = 0
        self.attempted = 0
        self.failures = 0
        self._stop = threading.Event()
        self._go = threading.Event()  # cleared: hold before the next commit
        self._go.set()
        self._holding = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def hold(self) -> None:
        """Return once no commit is in flight; none starts until :meth:`release`."""
        self._go.clear()
        wait_until(self._holding.is_set, "the committer to hold", _SETTLE_S)

    def release(self) -> None:
        self._holding.clear()
        self._go.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            if not self._go.is_set():
                self._holding.set()
                self._go.wait(1.0)
                continue
            offset = self.attempted + 1
            self.attempted = offset
            try:
                [result] = self.consumer.commit(offsets=[TopicPartition(TOPIC, 0, offset)], asynchronous=False)
            except KafkaException:
                self.failures += 1
                self._stop.wait(0.05)
                continue
            if result.error is None:
                self.acknowledged = offset
            else:
                self.failures += 1

    def start(self) -> Committer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(120)
        assert not self._thread.is_alive(), "the committer did not stop"


def log_ends(cluster: sparklog.Cluster, partition: int) -> set[int]:
    """The distinct log ends of the offsets partition over its three replicas."""
    return {cluster.replicas.replica_table(OFFSETS_TOPIC, b).current_log_end(partition) for b in (1, 2, 3)}


def fetched(bootstrap: str) -> int:
    """The group's committed offset of partition 0 as a fresh Kafka client gets it (OffsetFetch)."""
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False})
    try:
        [tp] = reader.committed([TopicPartition(TOPIC, 0)], timeout=30)
        return int(tp.offset)
    finally:
        reader.close()


@pytest.mark.slow
def test_coordinator_killed_four_times_loses_no_acknowledged_commit(
    cluster: sparklog.Cluster, agents: BrokerAgents
) -> None:
    cluster.create_topic(TOPIC, 1, replication_factor=3)
    cluster.groups.offsets_table()  # three replicas: one per live broker
    partition = cluster.groups.log_partition(GROUP)

    def state() -> tuple[int, list[int]]:
        [p] = [p for p in cluster.describe_topic(OFFSETS_TOPIC).partitions if p.partition == partition]
        return p.leader, sorted(p.isr)

    def in_sync() -> bool:
        leader, isr = state()
        return leader in agents.live() and isr == [1, 2, 3]

    wait_until(in_sync, f"{OFFSETS_TOPIC}-{partition}: a leader and three in-sync replicas", _SETTLE_S)
    committer = Committer(agents.bootstrap_servers).start()
    try:
        for round_ in range(ROUNDS):
            before = committer.acknowledged
            wait_until(lambda: committer.acknowledged >= before + 20, f"round {round_}: commits acknowledged")
            coordinator, _ = state()
            followers = [b for b in (1, 2, 3) if b != coordinator]
            if round_ % 2:
                # The followers stop copying; the coordinator writes a commit it can no longer get
                # into their tables, then dies. Had it answered before the followers held the
                # commit, the new coordinator would lack an acknowledged offset.
                leader_table = cluster.replicas.replica_table(OFFSETS_TOPIC, coordinator)
                committer.hold()
                wait_until(lambda: len(log_ends(cluster, partition)) == 1, f"round {round_}: followers caught up")
                for b in followers:
                    agents.pause(b)
                written = leader_table.current_log_end(partition)
                committer.release()
                wait_until(
                    lambda: leader_table.current_log_end(partition) > written,
                    f"round {round_}: a commit written while the followers are paused",
                )
            agents.kill(coordinator)
            acknowledged_before_kill = committer.acknowledged
            if round_ % 2:
                # Its disk goes with it (the log dirs share one machine here): nobody copies
                # from its table any more.
                agents.log_dir(coordinator).rename(away := agents.log_dir(coordinator).with_suffix(".away"))
                for b in followers:
                    agents.resume(b)
            wait_until(
                lambda: state()[0] not in (coordinator, -1),
                f"round {round_}: a new coordinator after killing broker {coordinator}",
                _SETTLE_S,
            )
            survivors = ",".join(f"127.0.0.1:{agents.port(b)}" for b in agents.live())
            assert fetched(survivors) >= acknowledged_before_kill, f"round {round_}: an acknowledged commit was lost"
            resumed = committer.acknowledged
            wait_until(lambda: committer.acknowledged >= resumed + 20, f"round {round_}: commits resume", _SETTLE_S)
            if round_ % 2:
                away.rename(agents.log_dir(coordinator))
            agents.start(coordinator)
            wait_until(in_sync, f"round {round_}: broker {coordinator} back in the ISR", _SETTLE_S)
    finally:
        committer.stop()
        committer.consumer.close()
    last = committer.acknowledged
    assert last > 0 and last == committer.attempted, "the last commit must have been acknowledged"
    assert fetched(agents.bootstrap_servers) == last
    assert cluster.committed_offsets(GROUP) == {(TOPIC, 0): last}
