"""The write leases a leading broker keeps between its commit rounds (DESIGN §6, §14, §16).

A broker holds the write leases of the partitions it appends to from one round to the next,
so a round asks ZooKeeper nothing while more than half of a lease is left; it lets go of one
as soon as another writer waits for it (Spark jobs and light producers queue for the same
leases) and no round built under it is in flight.

Invariants:

* one :class:`~sparklog.metadata.lease.WriterLease` per partition, owner ``broker-<id>``;
* a lease is released only by the topic's builder thread, never while a round built under it
  is in flight (the caller's rule);
* :meth:`HeldLeases.undisturbed_serial` answers from memory and a ZooKeeper watch only: any
  thread may ask it.
"""

from __future__ import annotations

import logging

from sparklog.metadata.lease import WriterLease, broker_lease_owner
from sparklog.metadata.session import ZkSession
from sparklog.runtime.produce_request import release_lease

__all__ = ["HeldLeases"]

log = logging.getLogger(__name__)


class HeldLeases:
    """The leases of one broker's led partitions, per topic."""

    def __init__(self, zk: ZkSession, broker_id: int, lease_ms: int) -> None:
        self.zk, self.owner, self.lease_ms = zk, broker_lease_owner(broker_id), lease_ms
        self._leases: dict[str, dict[int, WriterLease]] = {}

    def lease(self, topic: str, partition: int) -> WriterLease:
        leases = self._leases.setdefault(topic, {})
        lease = leases.get(partition)
        if lease is None:
            lease = leases[partition] = WriterLease(self.zk, topic, partition, self.owner, self.lease_ms)
        return lease

    def wanted(self, topic: str) -> bool:
        """Whether another writer waits for one of ``topic``'s held leases."""
        return any(lease.grant is not None and lease.wanted() for lease in self._leases.get(topic, {}).values())

    def release_wanted(self, topic: str, everything: bool = False) -> None:
        """Release this topic's held leases that another writer waits for (every held one
        with ``everything``, before waiting for another's). Nothing may be in flight."""
        for lease in list(self._leases.get(topic, {}).values()):
            if lease.grant is not None and (everything or lease.wanted()):
                try:
                    release_lease(lease)
                except Exception as exc:  # noqa: BLE001 - the lease expires; the waiter gets it then
                    log.warning("releasing the lease of %s-%d failed: %s", topic, lease.partition, exc)

    def undisturbed_serial(self, topic: str, partition: int) -> int | None:
        """The grant serial of ``partition``'s lease while it is held and nobody touched it
        since our last write (:meth:`~sparklog.metadata.lease.WriterLease.undisturbed`): no
        one else appended meanwhile. None otherwise."""
        lease = self._leases.get(topic, {}).get(partition)
        if lease is None or not lease.undisturbed():
            return None
        return lease.grant_serial
