"""Committed offsets of the groups a broker coordinates, in ``__consumer_offsets`` (DESIGN §8).

A group's offsets live in partition ``abs(javaHash(group)) % n`` of the offsets topic, in the
table of that partition's leader (this broker, while it coordinates the group). Invariants:

* an acknowledged commit is in the leader's table (a Delta commit) before it is answered;
* membership and generation checks happen before (:class:`~sparklog.server.groups.coordinator.BrokerGroups`);
  the Delta generation fence (``sparklog.group/<g>``) still refuses a commit of an older
  generation than the newest marker, also from a coordinator that lost its partition.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from sparklog.group.coordinator import OFFSETS_TOPIC, offsets_partition_for
from sparklog.log import group_offsets
from sparklog.log.group_offsets import NO_GENERATION, OffsetCommit
from sparklog.log.table import TopicTable
from sparklog.server.replica_manager import ReplicaManager

__all__ = ["OffsetLog"]

TopicPartition = tuple[str, int]


class OffsetLog:
    """Reads and writes the committed offsets of groups through their offsets partition's
    leader table. Thread-safe."""

    def __init__(self, replicas: ReplicaManager, num_partitions: int) -> None:
        self.replicas = replicas
        self.num_partitions = num_partitions

    def partition_of(self, group_id: str) -> int:
        return offsets_partition_for(group_id, self.num_partitions)

    def _table(self, group_id: str) -> tuple[TopicTable, int]:
        partition = self.partition_of(group_id)
        return self.replicas.leader_table(OFFSETS_TOPIC, partition), partition

    def commit(
        self,
        group_id: str,
        offsets: Mapping[TopicPartition, OffsetCommit],
        *,
        generation: int = NO_GENERATION,
        member_id: str = "",
    ) -> None:
        """Store ``offsets`` (None offset = delete) in one commit; the caller checked membership."""
        table, partition = self._table(group_id)
        group_offsets.commit_offsets(table, partition, group_id, offsets, generation=generation, member_id=member_id)

    def mark_generation(self, group_id: str, generation: int) -> None:
        """Fence commits of generations below ``generation`` (before the generation is used)."""
        table, _ = self._table(group_id)
        group_offsets.commit_generation(table, group_id, generation)

    def generation(self, group_id: str) -> int:
        """The newest generation marker of ``group_id`` (-1: none)."""
        table, _ = self._table(group_id)
        return group_offsets.group_generation(table, group_id)

    def committed(self, group_id: str, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, OffsetCommit]:
        """Committed offset and metadata of each of ``partitions`` that has one."""
        wanted = set(partitions)
        return {tp: c for tp, c in self.committed_all(group_id).items() if tp in wanted}

    def committed_all(self, group_id: str) -> dict[TopicPartition, OffsetCommit]:
        """Every (topic, partition) with a live committed offset of ``group_id``, with metadata."""
        table, partition = self._table(group_id)
        records = group_offsets.offset_records(table, partition, group_id)
        candidates = [(t, p) for (_g, t, p), v in records.items() if v is not None]
        offsets = group_offsets.committed_offsets(table, group_id, candidates)
        return {
            tp: OffsetCommit(offset, str((records[(group_id, *tp)] or {}).get("metadata", "")))
            for tp, offset in offsets.items()
        }
