"""Following other writers through the write lease, against a real ZooKeeper: every append
by another writer (it takes and releases the lease) is announced, the broker's own lease
changes are not, and a partition is followed once however often it is asked for."""

from __future__ import annotations

import threading

from kazoo.protocol.states import Callback

import sparklog
from sparklog.metadata.foreign_writes import ForeignWrites
from sparklog.metadata.lease import WriterLease, broker_lease_owner
from sparklog.metadata.session import ZkSession
from sparklog.metadata.zkdata import writer_path
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


def delivered(zk: ZkSession, path: str) -> None:
    """Return once every watch event caused by the writes made so far has been handled:
    ZooKeeper sends a client the watch events of a znode before the answer to its next read
    of it, and kazoo handles events and callbacks in order on one thread."""
    zk.client.exists(path)
    done = threading.Event()
    zk.client.handler.dispatch_callback(Callback("watch", done.set, ()))
    assert done.wait(30), "ZooKeeper's event thread did not get to the marker"


def test_another_writers_append_is_announced_and_the_brokers_own_are_not(cluster: sparklog.Cluster) -> None:
    cluster.create_topic("t", 2)
    zk = cluster.replicas.zk
    path = writer_path("t", 0)
    calls = Calls()
    ForeignWrites(zk, BROKER).follow("t", 0, calls)
    assert calls.seen() == 0, "the lease as following began is no write"

    own = WriterLease(zk, "t", 0, BROKER, lease_ms=60_000)
    own.acquire(1000)
    own.release()
    delivered(zk, path)
    before = calls.seen()  # the lease's first record may count: it had none
    for _ in range(3):
        own.acquire(1000)
        own.renew()
        own.release()
    delivered(zk, path)
    assert calls.seen() == before, "the broker's own acquires, renewals and releases were announced"

    other = WriterLease(zk, "t", 0, "spark-job-1", lease_ms=60_000)
    other.acquire(1000)
    other.release()
    delivered(zk, path)
    announced = calls.seen() - before
    assert 1 <= announced <= 2, f"one announcement per lease change of the other writer, got {announced}"


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
