"""The group coordinator: where a group's offsets live and who may commit them.

Kafka's coordinator is a broker; here it is this library code run by every client, with
ZooKeeper (membership, generations) and the ``__consumer_offsets`` Delta table (offsets,
generation fence) as the shared state. Invariants (DESIGN §5.6, §5.7):

* a commit is accepted only from a member of the group's current generation (checked in
  ZooKeeper, then fenced in Delta by the generation marker), or, with generation -1, from
  a standalone client while the group has no live members;
* an accepted commit stores the offsets it carries, lower than the committed ones too (a
  member that seeks back and commits: Kafka's coordinator stores whatever passes the
  generation and member checks); only negative offsets are refused. Invariant 7 ("offsets
  move forward except by an explicit reset") counts such a commit as explicit, like
  :meth:`GroupCoordinator.reset` (which requires an inactive group, like Kafka's ``--reset-offsets``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from sparklog.errors import OffsetCommitError, TopicExistsError
from sparklog.log import group_offsets
from sparklog.log.group_offsets import NO_GENERATION, OffsetCommit
from sparklog.log.table import TopicTable
from sparklog.metadata.broker_registration import live_broker_ids
from sparklog.metadata.group_registry import GroupRegistry
from sparklog.model.group_ids import offsets_partition_for, validate_group_id
from sparklog.model.topic import OFFSETS_TOPIC, TopicPartition
from sparklog.runtime.replica_manager import ReplicaManager
from sparklog.runtime.topics import create_topic

__all__ = ["NO_GENERATION", "GroupCoordinator", "OffsetCommit"]


class GroupCoordinator:
    """Offsets and membership checks of the groups of one cluster. Thread-safe."""

    def __init__(self, replicas: ReplicaManager) -> None:
        self.replicas = replicas
        self.registry = GroupRegistry(replicas.zk)
        self._ready: set[str] = set()  # leader table roots seen to exist
        self._num_partitions = 0

    # -- the internal topic ----------------------------------------------------------------
    def offsets_table(self, group_id: str | None = None) -> TopicTable:
        """The table of the leader of ``group_id``'s ``__consumer_offsets`` partition, looked up
        on every call so a group's offsets follow leader changes (failover, reassignment); the
        topic is created on first use. Without ``group_id``: partition 0's leader (creation)."""
        self._ensure_topic()
        partition = 0 if group_id is None else offsets_partition_for(group_id, self._num_partitions)
        table = self.replicas.leader_table(OFFSETS_TOPIC, partition)
        if table.root not in self._ready:
            table.await_created()
            self._ready.add(table.root)
        return table

    def _ensure_topic(self) -> None:
        if self._num_partitions:
            return
        if OFFSETS_TOPIC not in self.replicas.metadata.list_topics():
            try:
                # Kafka's offsets.topic.replication.factor, capped at the live agents (with
                # none, the client's own log dir is the one replica: nobody would copy more).
                replication = min(
                    self.replicas.config.offsets_topic_replication_factor,
                    max(1, len(live_broker_ids(self.replicas.zk))),
                )
                create_topic(
                    self.replicas,
                    OFFSETS_TOPIC,
                    self.replicas.config.offsets_topic_num_partitions,
                    replication,
                    config={"cleanup.policy": "compact", "segment.bytes": 104_857_600},
                )
            except TopicExistsError:
                pass  # another client created it first
        self._num_partitions = len(self.replicas.partitions_of(OFFSETS_TOPIC))

    def log_partition(self, group_id: str) -> int:
        self._ensure_topic()
        return offsets_partition_for(group_id, self._num_partitions)

    # -- commits ---------------------------------------------------------------------------
    def commit(
        self,
        group_id: str,
        offsets: Mapping[TopicPartition, int | OffsetCommit],
        *,
        generation: int = NO_GENERATION,
        member_id: str = "",
        member_key: str | None = None,
    ) -> None:
        """Commit ``offsets`` (next offset to consume per partition) for ``group_id``."""
        validate_group_id(group_id)
        commits = {tp: v if isinstance(v, OffsetCommit) else OffsetCommit(int(v)) for tp, v in offsets.items()}
        self._check_offsets(group_id, commits)
        if generation == NO_GENERATION:
            # ensure_group costs 3+ round trips: only when the group has no state yet.
            if (
                self.registry.require_inactive(group_id, f"Committing offsets of group {group_id} without joining it")
                is None
            ):
                self.registry.ensure_group(group_id)
        else:
            self.registry.check_commit(group_id, generation, member_id, member_key or member_id)
        table = self.offsets_table(group_id)
        refused = group_offsets.commit_offsets(
            table,
            self.log_partition(group_id),
            group_id,
            commits,
            generation=generation,
            member_id=member_id,
            incarnations=self._incarnations(commits),
        )
        if refused:
            raise group_offsets.unknown_topic_error(group_id, refused)

    def reset(self, group_id: str, offsets: Mapping[TopicPartition, int | None]) -> None:
        """Set (or, with None, delete) committed offsets of an inactive group, backwards too."""
        validate_group_id(group_id)
        commits = {tp: OffsetCommit(None if v is None else int(v)) for tp, v in offsets.items()}
        self._check_offsets(group_id, commits)
        self.registry.require_inactive(group_id, f"Resetting offsets of group {group_id}")
        self.registry.ensure_group(group_id)  # a group reset into being is listed like any other
        table = self.offsets_table(group_id)
        refused = group_offsets.commit_offsets(
            table, self.log_partition(group_id), group_id, commits, reset=True, incarnations=self._incarnations(commits)
        )
        if refused:
            raise group_offsets.unknown_topic_error(group_id, refused)

    def _incarnations(self, commits: Mapping[TopicPartition, OffsetCommit]) -> dict[str, int]:
        """The topics' incarnations, read after the offsets table exists: a deletion that found
        no offsets table left no marker, but then it also ended before this read (DESIGN §8)."""
        return self.replicas.topic_incarnations({t for (t, _p), c in commits.items() if c.offset is not None})

    def _check_offsets(self, group_id: str, commits: Mapping[TopicPartition, OffsetCommit]) -> None:
        for (topic, partition), commit in commits.items():
            if commit.offset is not None and commit.offset < 0:
                raise OffsetCommitError(
                    f"Offset commit of group {group_id} for {topic}-{partition}: offset {commit.offset} is negative"
                )

    def generation(self, group_id: str) -> int:
        """The newest generation of ``group_id`` its offsets log has seen (-1: none)."""
        return group_offsets.group_generation(self.offsets_table(group_id), group_id)

    def mark_generation(self, group_id: str, generation: int) -> None:
        """Fence commits of generations before ``generation`` (called by the group leader)."""
        group_offsets.commit_generation(self.offsets_table(group_id), group_id, generation)

    # -- reads -----------------------------------------------------------------------------
    def committed(self, group_id: str, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        validate_group_id(group_id)
        if OFFSETS_TOPIC not in self.replicas.metadata.list_topics():
            return {}
        return group_offsets.committed_offsets(self.offsets_table(group_id), group_id, sorted(set(partitions)))

    def committed_all(self, group_id: str) -> dict[TopicPartition, OffsetCommit]:
        """Every (topic, partition) the group has a live committed offset for, with metadata."""
        validate_group_id(group_id)
        if OFFSETS_TOPIC not in self.replicas.metadata.list_topics():
            return {}
        table = self.offsets_table(group_id)
        records = group_offsets.offset_records(table, self.log_partition(group_id), group_id)
        candidates = [(t, p) for (_g, t, p), v in records.items() if v is not None]
        offsets = group_offsets.committed_offsets(table, group_id, candidates)
        return {
            tp: OffsetCommit(offset, str((records[(group_id, *tp)] or {}).get("metadata", "")))
            for tp, offset in offsets.items()
        }
