"""Where a topic's replicas live, which one leads each partition, and the offsets readers may see.

Kafka's metadata cache and the read side of its replica manager, over ZooKeeper partition
states (:class:`~sparklog.metadata.partition_states.PartitionStateCache`) and the
replicas' Delta tables:

* a partition's **leader table** is the topic's table on its leader broker's log dir
  (``leader = -1``: offline, ``LeaderNotAvailableError``);
* its **log-start** is the leader's; its **high watermark** is the minimum log end over the
  in-sync replicas' tables (DESIGN §2), each table read once per call (``sparklog.end.<p>``
  application transactions: O(1)). With one replica that is the leader's log end.

Invariants: nothing here writes; every offset comes from Delta snapshots, ZooKeeper only
says where to look. Callers: :class:`sparklog.cluster.Cluster` and the readers and writers
it hands tables to.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sparklog.metadata.zkdata import PartitionState
from sparklog.errors import LeaderNotAvailableError
from sparklog.log.table import TopicTable

if TYPE_CHECKING:
    from sparklog.cluster import Cluster

__all__ = ["ReplicaView", "PartitionOffsets", "LeaderSnapshot"]


class PartitionOffsets(tuple[int, int]):
    """``(log_start, high_watermark)`` of one partition."""

    @property
    def log_start(self) -> int:
        return self[0]

    @property
    def high_watermark(self) -> int:
        return self[1]


@dataclass(frozen=True)
class LeaderSnapshot:
    """A partition's leader table, a snapshot of it, and the offsets readers may use."""

    table: TopicTable
    snapshot: Any  # deltalake.DeltaTable (only log/ imports deltalake)
    high_watermark: int
    log_end: int  # the leader's: above the high watermark until the ISR has copied it


class ReplicaView:
    """Leaders, replica tables and ISR offsets of a cluster's topics. Thread-safe."""

    def __init__(self, cluster: "Cluster") -> None:
        self._cluster = cluster

    def states(self, topic: str, partitions: Iterable[int] | None = None) -> dict[int, PartitionState]:
        selected = self._cluster.partitions_of(topic) if partitions is None else list(partitions)
        return self._cluster.state_cache.states(topic, selected)

    def leader(self, topic: str, partition: int) -> PartitionState:
        state = self.states(topic, [partition])[partition]
        if state.leader < 0:
            raise LeaderNotAvailableError(
                f"Partition {topic}-{partition} has no leader: none of its in-sync replicas {state.isr} is live "
                "(start their brokers; `sparklog topics describe --unavailable-partitions` lists such partitions)"
            )
        return state

    def leader_table(self, topic: str, partition: int) -> TopicTable:
        return self._cluster.replica_table(topic, self.leader(topic, partition).leader)

    def leader_tables(self, topic: str, partitions: Iterable[int] | None = None) -> list[tuple[TopicTable, list[int]]]:
        """The leader tables of ``partitions`` (default all), each with the partitions it leads."""
        grouped: dict[int, list[int]] = {}
        selected = self._cluster.partitions_of(topic) if partitions is None else sorted(set(partitions))
        for partition in selected:
            grouped.setdefault(self.leader(topic, partition).leader, []).append(partition)
        return [(self._cluster.replica_table(topic, broker), parts) for broker, parts in sorted(grouped.items())]

    def replica_tables(self, topic: str) -> list[tuple[TopicTable, list[int]]]:
        """Every replica table of ``topic`` (leaders and followers), each with the partitions
        it holds a replica of."""
        assignment, _ = self._cluster.metadata.assignment(topic)
        held: dict[int, list[int]] = {}
        for partition, brokers in assignment.partitions.items():
            for broker in brokers:
                held.setdefault(int(broker), []).append(int(partition))
        return [(self._cluster.replica_table(topic, b), sorted(parts)) for b, parts in sorted(held.items())]

    def fetch_positions(
        self, topic: str, partitions: Iterable[int], *, skip_offline: bool = False
    ) -> dict[int, "LeaderSnapshot"]:
        """Per partition: its leader table, one snapshot of it and the high watermark (the
        minimum log end over the ISR), the leader's table refreshed once. A partition
        without a leader raises ``LeaderNotAvailableError``, or is left out (``skip_offline``)."""
        snapshots: dict[int, tuple[TopicTable, Any]] = {}

        def snapshot(broker: int) -> tuple[TopicTable, Any]:
            if broker not in snapshots:
                table = self._cluster.replica_table(topic, broker)
                snapshots[broker] = (table, table.snapshot())
            return snapshots[broker]

        result: dict[int, LeaderSnapshot] = {}
        states = self.states(topic, sorted(set(partitions)))
        for p, state in states.items():
            if state.leader < 0:
                if skip_offline:
                    continue
                self.leader(topic, p)  # raises, naming the partition
            table, dt = snapshot(state.leader)
            end = table.log_end(dt, p)
            # Followers' log ends only: read without refreshing their snapshots.
            followers = (self._cluster.replica_table(topic, b) for b in state.isr if b != state.leader)
            result[p] = LeaderSnapshot(table, dt, min([end, *(t.current_log_end(p) for t in followers)]), end)
        return result

    def offsets(
        self, topic: str, partitions: Iterable[int] | None = None, *, with_log_start: bool = True
    ) -> dict[int, PartitionOffsets]:
        """``partition -> (log_start, high_watermark)``: log-start of the leader, high watermark =
        minimum log end over the ISR, from one snapshot per replica table. Without
        ``with_log_start`` the first item is -1 (saves the file statistics)."""
        selected = self._cluster.partitions_of(topic) if partitions is None else partitions
        positions = self.fetch_positions(topic, selected)
        starts: dict[int, dict[int, int]] = {}
        result: dict[int, PartitionOffsets] = {}
        for p, at in positions.items():
            if not with_log_start:
                result[p] = PartitionOffsets((-1, at.high_watermark))
                continue
            if id(at.table) not in starts:
                starts[id(at.table)] = at.table.log_starts(at.snapshot)
            start = starts[id(at.table)].get(p, at.log_end)
            result[p] = PartitionOffsets((min(start, at.high_watermark), at.high_watermark))
        return result

    def high_watermarks(self, topic: str, partitions: Iterable[int] | None = None) -> dict[int, int]:
        return {p: o.high_watermark for p, o in self.offsets(topic, partitions, with_log_start=False).items()}
