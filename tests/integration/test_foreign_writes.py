"""Following other writers through the write lease, against a real ZooKeeper: every append
by another writer (it takes and releases the lease) is announced, the broker's own lease
changes are not, and a partition is followed once however often it is asked for."""

from __future__ import annotations

import threading

import sparklog
from sparklog.metadata.foreign_writes import ForeignWrites
from sparklog.metadata.lease import WriterLease, broker_lease_owner
from tests.helpers import wait_until

BROKER = broker_lease_owner(7)


class Calls:
    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()

    def __call__(self) -> None:
        with self._lock:
            self.count += 1

    def seen(self) -> int:
        with self._lock:
            return self.count


def test_another_writers_append_is_announced_and_the_brokers_own_are_not(cluster: sparklog.Cluster) -> None:
    cluster.create_topic("t", 2)
    zk = cluster.replicas.zk
    calls = Calls()
    ForeignWrites(zk, BROKER).follow("t", 0, calls)
    assert calls.seen() == 0, "the lease as following began is no write"

    own = WriterLease(zk, "t", 0, BROKER, lease_ms=60_000)
    own.acquire(1000)
    own.renew()
    own.release()
    # A foreign writer's change after these would be announced; none came from ours.
    other = WriterLease(zk, "t", 0, "spark-job-1", lease_ms=60_000)
    other.acquire(1000)
    other.release()
    wait_until(lambda: calls.seen() >= 1, "the other writer's append announced")
    announced = calls.seen()
    assert announced <= 2, f"one announcement per lease change of the other writer, got {announced}"

    # The broker takes the lease back (a change away from the other writer: may be announced),
    # then its own renewals and release are not.
    own.acquire(1000)
    settled = calls.seen()
    for _ in range(3):
        own.renew()
    own.release()
    sentinel = WriterLease(zk, "t", 0, "light-producer", lease_ms=60_000)
    sentinel.acquire(1000)
    sentinel.release()
    wait_until(lambda: calls.seen() > settled, "the light producer's append announced")
    assert calls.seen() <= settled + 2, "the broker's own renewals and release were announced"


def test_a_partition_is_followed_once_and_other_partitions_stay_quiet(cluster: sparklog.Cluster) -> None:
    cluster.create_topic("t", 2)
    zk = cluster.replicas.zk
    foreign = ForeignWrites(zk, BROKER)
    first, second, other_partition = Calls(), Calls(), Calls()
    foreign.follow("t", 0, first)
    foreign.follow("t", 0, second)  # already followed: nothing new
    foreign.follow("t", 1, other_partition)
    writer = WriterLease(zk, "t", 0, "spark-job-2", lease_ms=60_000)
    writer.acquire(1000)
    writer.release()
    wait_until(lambda: first.seen() >= 1, "the write to t-0 announced")
    # A write to t-1 after it, so the absence below is not a race with ZooKeeper's events.
    marker = WriterLease(zk, "t", 1, "spark-job-2", lease_ms=60_000)
    marker.acquire(1000)
    marker.release()
    wait_until(lambda: other_partition.seen() >= 1, "the write to t-1 announced")
    assert second.seen() == 0
    assert first.seen() <= 2


def test_a_lease_znode_created_after_following_began_is_followed(cluster: sparklog.Cluster) -> None:
    cluster.create_topic("fresh", 1)
    zk = cluster.replicas.zk
    calls = Calls()
    ForeignWrites(zk, BROKER).follow("fresh", 0, calls)  # nobody has written it: no lease znode yet
    writer = WriterLease(zk, "fresh", 0, "light-producer", lease_ms=60_000)
    writer.acquire(1000)
    writer.release()
    wait_until(lambda: calls.seen() >= 1, "the first writer's append announced")
