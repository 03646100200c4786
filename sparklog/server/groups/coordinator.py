"""The broker's group coordinator (DESIGN §8, §14): the groups whose ``__consumer_offsets``
partition this broker leads.

Invariants:

* a group is coordinated by the leader of its offsets partition only; any other broker
  answers NOT_COORDINATOR, and a broker that stops leading a partition drops its groups;
* one membership system per group: a group whose members use sparklog's ZooKeeper
  membership (light consumers without a broker) is not joined through the protocol
  (and the other way round), see :mod:`sparklog.server.groups.registry`.
"""

from __future__ import annotations

import threading

from sparklog.group.coordinator import OFFSETS_TOPIC, GroupCoordinator, offsets_partition_for
from sparklog.server.replica_manager import ReplicaManager

__all__ = ["BrokerGroups"]


class BrokerGroups:
    """Every group this broker coordinates. Thread-safe."""

    def __init__(self, replicas: ReplicaManager, broker_id: int) -> None:
        self.replicas = replicas
        self.broker_id = broker_id
        self.offsets = GroupCoordinator(replicas)
        self._lock = threading.Lock()

    def offsets_partition_count(self) -> int:
        """Partitions of ``__consumer_offsets`` (created on first use, as in Kafka)."""
        self.offsets.offsets_table()
        return len(self.replicas.partitions_of(OFFSETS_TOPIC, max_age_ms=1000))

    def partition_of(self, key: str) -> int:
        return offsets_partition_for(key, self.offsets_partition_count())
