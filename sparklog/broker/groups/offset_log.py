"""Committed offsets of the groups a broker coordinates, in ``__consumer_offsets`` (DESIGN §8, §14).

A group's offsets live in partition ``abs(javaHash(group)) % n`` of the offsets topic, in the
table of that partition's leader — this broker, while it coordinates the group. Every
partition this broker writes has one committer thread: offset commits from every connection
queue up, and the committer stores everything queued in one Delta commit on the leader's
fast path (:class:`~sparklog.log.offsets_partition.OffsetsPartitionLog`), then waits until
every in-sync follower holds it, as Kafka's coordinator appends offsets with ``acks=all``.
What arrives meanwhile goes into the next round.

Invariants:

* a commit is answered only once it is in the leader's table and, with followers in the
  ISR, on every in-sync replica (the new file is staged in their directories, then the high
  watermark must reach the round's log end), so it survives the loss of the coordinator's
  broker; ``min.insync.replicas`` of the offsets topic is checked before writing;
* a round is written only while this broker leads the partition, under the partition state's
  leader epoch: a deposed coordinator's round fails (``NotLeaderError``) and writes nothing;
* membership and generation are checked before (:mod:`sparklog.broker.kafka.offset_commit_api`);
  the Delta generation fence (``sparklog.group/<g>``) still refuses a generation older than the
  newest marker;
* tables not on a local filesystem (where the fast path cannot read ``_delta_log``) are
  written through :mod:`sparklog.log.group_offsets`, one commit per request.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from sparklog.errors import (
    LeaderNotAvailableError,
    NotCoordinatorError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderError,
)
from sparklog.log import group_offsets
from sparklog.log.group_offsets import NO_GENERATION, OffsetCommit
from sparklog.log.offsets_partition import GroupCommit, OffsetsPartitionLog
from sparklog.log.table import TopicTable
from sparklog.metadata.zkdata import PartitionState
from sparklog.model.group_ids import offsets_partition_for
from sparklog.model.topic import OFFSETS_TOPIC, TopicPartition
from sparklog.runtime.replica_manager import METADATA_MAX_AGE_MS, ReplicaManager

__all__ = ["COMMIT_TIMEOUT_MS", "OffsetLog"]

log = logging.getLogger(__name__)

COMMIT_TIMEOUT_MS = 30_000  # Kafka's offsets.commit.timeout.ms: the longest a commit waits for the ISR
_ISR_POLL_S = 0.001
_IDLE_S = 0.5  # an idle committer compacts what is due this often


@dataclass(eq=False)
class _Pending:
    commit: GroupCommit
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None

    def finish(self, error: BaseException | None = None) -> None:
        self.error = error
        self.done.set()


class OffsetLog:
    """Reads and writes the committed offsets of groups through their offsets partition's
    leader table (this broker's while it coordinates them). Thread-safe."""

    def __init__(self, replicas: ReplicaManager, num_partitions: int) -> None:
        self.replicas = replicas
        self.num_partitions = num_partitions
        self.broker_id = replicas.config.broker_id
        self._lock = threading.Condition()
        self._queues: dict[int, list[_Pending]] = {}
        self._threads: dict[int, threading.Thread] = {}
        self._logs: dict[int, OffsetsPartitionLog] = {}

    def partition_of(self, group_id: str) -> int:
        return offsets_partition_for(group_id, self.num_partitions)

    # -- writes ----------------------------------------------------------------------------
    def commit(
        self,
        group_id: str,
        offsets: Mapping[TopicPartition, OffsetCommit],
        *,
        generation: int = NO_GENERATION,
        member_id: str = "",
        incarnations: Mapping[str, int] | None = None,
    ) -> None:
        """Store ``offsets`` (None offset = delete) durably (see the module doc); the caller
        checked membership and looked up the ``incarnations`` of the topics (see
        :func:`~sparklog.log.group_offsets.refused_partitions`). Raises what failed:
        ``NotLeaderError`` (this broker stopped coordinating), ``NotEnoughReplicas*``,
        ``IllegalGenerationError``, ``UnknownTopicCommitError`` (only its partitions were
        left out), ..."""
        partition = self.partition_of(group_id)
        pending = _Pending(GroupCommit(group_id, dict(offsets), generation, member_id, incarnations))
        with self._lock:
            self._queues.setdefault(partition, []).append(pending)
            if partition not in self._threads:
                thread = threading.Thread(target=self._run, args=(partition,), name=f"offsets-{partition}", daemon=True)
                self._threads[partition] = thread
                thread.start()
            self._lock.notify_all()
        # The committer answers every item within COMMIT_TIMEOUT_MS plus one round.
        if not pending.done.wait(2 * COMMIT_TIMEOUT_MS / 1000):
            raise TimeoutError(f"offset commit of group {group_id} not answered within {2 * COMMIT_TIMEOUT_MS} ms")
        if pending.error is not None:
            raise pending.error

    def mark_generation(self, group_id: str, generation: int) -> None:
        """Fence commits of generations below ``generation`` (before the generation is used)."""
        partition, state, table = self._led(group_id)
        partition_log = self._partition_log(partition, table)
        if partition_log is None:
            group_offsets.commit_generation(table, group_id, generation)
        else:
            partition_log.mark_generation(group_id, generation, state.leader_epoch)

    # -- reads -----------------------------------------------------------------------------
    def generation(self, group_id: str) -> int:
        """The newest generation marker of ``group_id`` (-1: none)."""
        partition, _state, table = self._led(group_id)
        partition_log = self._partition_log(partition, table)
        if partition_log is None:
            return group_offsets.group_generation(table, group_id)
        return partition_log.generation(group_id)

    def committed(self, group_id: str, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, OffsetCommit]:
        """Committed offset, metadata and leader epoch of each of ``partitions`` that has one."""
        return self._committed(group_id, list(partitions))

    def committed_all(self, group_id: str) -> dict[TopicPartition, OffsetCommit]:
        """Every (topic, partition) with a live committed offset of ``group_id``, with metadata."""
        return self._committed(group_id, None)

    def _committed(self, group_id: str, partitions: list[TopicPartition] | None) -> dict[TopicPartition, OffsetCommit]:
        partition, _state, table = self._led(group_id)
        partition_log = self._partition_log(partition, table)
        if partition_log is not None:
            return partition_log.committed(group_id, partitions)
        records = group_offsets.offset_records(table, partition, group_id)
        candidates = [(t, p) for (_g, t, p), v in records.items() if v is not None]
        if partitions is not None:
            candidates = [tp for tp in candidates if tp in set(partitions)]
        offsets = group_offsets.committed_offsets(table, group_id, candidates)
        result = {}
        for tp, offset in offsets.items():
            value = records[(group_id, *tp)] or {}
            result[tp] = OffsetCommit(offset, str(value.get("metadata", "")), int(str(value.get("leader_epoch", -1))))
        return result

    # -- leadership ------------------------------------------------------------------------
    def _led(self, group_id: str) -> tuple[int, PartitionState, TopicTable]:
        """The group's partition, its state and this broker's table, while this broker leads it."""
        partition = self.partition_of(group_id)
        state = self.replicas.states(OFFSETS_TOPIC, [partition])[partition]
        if state.leader != self.broker_id:
            raise NotCoordinatorError(
                f"broker {self.broker_id} does not coordinate group {group_id!r}: {OFFSETS_TOPIC}-{partition} is led "
                f"by {state.leader}; find the coordinator again"
            )
        return partition, state, self.replicas.replica_table(OFFSETS_TOPIC, self.broker_id)

    def _partition_log(self, partition: int, table: TopicTable) -> OffsetsPartitionLog | None:
        """The fast-path log of ``partition`` in ``table``."""
        with self._lock:
            current = self._logs.get(partition)
            if current is None or current.table is not table:
                current = self._logs[partition] = OffsetsPartitionLog(table, partition)
            return current

    # -- the committer ---------------------------------------------------------------------
    def _run(self, partition: int) -> None:
        while True:
            with self._lock:
                if not self._queues.get(partition):
                    self._lock.wait(_IDLE_S)
                items = self._queues.pop(partition, [])
            if items:
                self._round(partition, items)
            self._compact_if_due(partition)

    def _round(self, partition: int, items: list[_Pending]) -> None:
        try:
            state = self.replicas.states(OFFSETS_TOPIC, [partition])[partition]
            if state.leader != self.broker_id:
                raise NotLeaderError(
                    f"broker {self.broker_id} no longer leads {OFFSETS_TOPIC}-{partition} (leader {state.leader})"
                )
            table = self.replicas.replica_table(OFFSETS_TOPIC, self.broker_id)
            partition_log = self._partition_log(partition, table)
            if partition_log is None:
                for item in items:
                    self._store_slowly(table, partition, item.commit, item)
                return
            config = self.replicas.topic_config(OFFSETS_TOPIC, METADATA_MAX_AGE_MS)
            min_isr = int(config["min.insync.replicas"])
            followers = sorted(set(state.isr) - {self.broker_id})
            if len(set(state.isr) | {self.broker_id}) < min_isr:
                raise NotEnoughReplicasError(
                    f"{OFFSETS_TOPIC}-{partition} has ISR {list(state.isr)}, fewer than min.insync.replicas={min_isr}"
                )
            stage_roots = [self.replicas.replica_table(OFFSETS_TOPIC, b).root for b in followers]
            result = partition_log.commit_round(
                [i.commit for i in items],
                state.leader_epoch,
                # Kafka's coordinator does not flush offsets either: an answered commit is durable by
                # being on every in-sync replica (below), not by fsync (DESIGN §8).
                fsync=False,
                stage_roots=stage_roots,
                hard_links=self.replicas.config.replica_hard_links_enable,
            )
            if followers:
                self._await_in_sync_replicas(partition, state, result.log_end, min_isr)
        except Exception as exc:  # noqa: BLE001 - answered to the clients as Kafka error codes
            log.debug("offset commit round on %s-%d failed: %s", OFFSETS_TOPIC, partition, exc)
            for item in items:
                if not item.done.is_set():
                    item.finish(exc)
            return
        for item, error in zip(items, result.errors, strict=True):
            item.finish(error)

    def _store_slowly(self, table: TopicTable, partition: int, commit: GroupCommit, item: _Pending) -> None:
        try:
            refused = group_offsets.commit_offsets(
                table,
                partition,
                commit.group_id,
                commit.offsets,
                generation=commit.generation,
                member_id=commit.member_id,
                incarnations=commit.incarnations,
            )
        except Exception as exc:  # noqa: BLE001 - answered as its Kafka code
            item.finish(exc)
            return
        item.finish(group_offsets.unknown_topic_error(commit.group_id, refused) if refused else None)

    def _await_in_sync_replicas(self, partition: int, appended: PartitionState, target: int, min_isr: int) -> None:
        """Until every in-sync replica's log end reaches ``target`` (the round's log end)."""
        deadline = time.monotonic() + COMMIT_TIMEOUT_MS / 1000
        while True:
            state = self.replicas.states(OFFSETS_TOPIC, [partition])[partition]
            if state.leader_epoch != appended.leader_epoch or state.leader != self.broker_id:
                raise NotLeaderError(
                    f"leadership of {OFFSETS_TOPIC}-{partition} moved (epoch {appended.leader_epoch} -> "
                    f"{state.leader_epoch}) before the in-sync replicas had the offsets"
                )
            if len(set(state.isr) | {self.broker_id}) < min_isr:
                raise NotEnoughReplicasAfterAppendError(
                    f"{OFFSETS_TOPIC}-{partition}: ISR {list(state.isr)} shrank below min.insync.replicas={min_isr}"
                )
            if self.replicas.current_high_watermark(OFFSETS_TOPIC, partition, state) >= target:
                return
            if time.monotonic() > deadline:
                raise NotEnoughReplicasAfterAppendError(
                    f"{OFFSETS_TOPIC}-{partition}: the in-sync replicas {list(state.isr)} did not reach offset {target} "
                    f"within {COMMIT_TIMEOUT_MS} ms"
                )
            time.sleep(_ISR_POLL_S)

    def _compact_if_due(self, partition: int) -> None:
        partition_log = self._logs.get(partition)
        if partition_log is None or not partition_log.compaction_due():
            return
        try:
            state = self.replicas.states(OFFSETS_TOPIC, [partition])[partition]
            if state.leader == self.broker_id:
                partition_log.compact(state.leader_epoch)
        except (NotLeaderError, LeaderNotAvailableError) as exc:
            log.debug("no compaction of %s-%d: %s", OFFSETS_TOPIC, partition, exc)
        except Exception:  # a missed compaction only leaves more live files; retried later
            log.warning("compaction of %s-%d failed", OFFSETS_TOPIC, partition, exc_info=True)
