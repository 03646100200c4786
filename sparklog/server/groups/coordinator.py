"""The broker's group coordinator (DESIGN §8, §14): the groups whose ``__consumer_offsets``
partition this broker leads.

Invariants:

* a group is coordinated by the leader of its offsets partition only; any other broker
  answers NOT_COORDINATOR, and a broker that stops leading a partition drops its groups;
* one membership system per group: a group whose members use sparklog's ZooKeeper
  membership (light consumers without a broker) is not joined through the protocol
  (and the other way round).
"""

from __future__ import annotations

import threading

from sparklog.errors import NotCoordinatorError, NotLeaderError, SparklogError
from sparklog.group.coordinator import OFFSETS_TOPIC, GroupCoordinator
from sparklog.server.groups.offset_log import OffsetLog
from sparklog.server.replica_manager import ReplicaManager

__all__ = ["BrokerGroups"]


class BrokerGroups:
    """Every group this broker coordinates. Thread-safe."""

    def __init__(self, replicas: ReplicaManager, broker_id: int) -> None:
        self.replicas = replicas
        self.broker_id = broker_id
        self.library = GroupCoordinator(replicas)
        self._lock = threading.Lock()
        self._offsets: OffsetLog | None = None

    def offsets_partition_count(self) -> int:
        """Partitions of ``__consumer_offsets`` (created on first use, as in Kafka)."""
        return self.offsets.num_partitions

    @property
    def offsets(self) -> OffsetLog:
        with self._lock:
            if self._offsets is None:
                self.library.offsets_table()
                count = len(self.replicas.partitions_of(OFFSETS_TOPIC, max_age_ms=1000))
                self._offsets = OffsetLog(self.replicas, count)
            return self._offsets

    def partition_of(self, key: str) -> int:
        return self.offsets.partition_of(key)

    def check_coordinator(self, key: str) -> int:
        """The offsets partition of group or transactional id ``key`` when this broker leads it;
        else ``NotCoordinatorError`` (the client looks the coordinator up again)."""
        partition = self.partition_of(key)
        try:
            state = self.replicas.states(OFFSETS_TOPIC, [partition])[partition]
        except SparklogError as exc:
            raise NotCoordinatorError(f"no coordinator for {key!r}: {exc}") from exc
        if state.leader != self.broker_id:
            raise NotCoordinatorError(
                f"broker {self.broker_id} does not coordinate {key!r}: {OFFSETS_TOPIC}-{partition} is led by "
                f"{state.leader}; find the coordinator again"
            ) from NotLeaderError(f"{OFFSETS_TOPIC}-{partition}")
        return partition
