"""``Cluster``: a client's handle on one sparklog cluster (a ZooKeeper chroot + its brokers).

A thin facade and the composition root of the Python API: it builds the
:class:`~sparklog.runtime.replica_manager.ReplicaManager` (on first use: connecting costs no
ZooKeeper session until something needs one) and hands it to the components that do the
work — topic admin (:mod:`sparklog.admin.topics`), log access
(:mod:`sparklog.runtime.log_access`), the light clients, group coordination and
administration. Components never call back into ``Cluster``. Metadata calls never start
Spark. One ``Cluster`` may be shared by threads.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from sparklog.admin import topics as topic_admin
from sparklog.config import (
    CONSUMER_CONFIGS,
    PRODUCER_CONFIGS,
    ClusterConfig,
    resolve_cluster_config,
    validate_configs,
)
from sparklog.model.offsets import OffsetSpec
from sparklog.model.topic import TopicDescription, is_internal
from sparklog.runtime import log_access
from sparklog.runtime.replica_manager import PartitionOffsets, ReplicaManager

if TYPE_CHECKING:
    from sparklog.admin.groups import GroupDescription, GroupListing
    from sparklog.clients.consumer import Consumer
    from sparklog.clients.producer import Producer
    from sparklog.group.coordinator import GroupCoordinator
    from sparklog.group.reset import ResetKind
    from sparklog.maintenance.runner import RetentionResult

__all__ = ["Cluster", "PartitionOffsets", "connect"]


class Cluster:
    """Entry point of the Python API; create with :func:`sparklog.connect`."""

    def __init__(self, config: ClusterConfig) -> None:
        self.config = config
        self._lock = threading.RLock()
        self._replicas: ReplicaManager | None = None
        self._groups: GroupCoordinator | None = None

    @property
    def replicas(self) -> ReplicaManager:
        """The replica manager every component of this client receives (started on first use)."""
        with self._lock:
            if self._replicas is None:
                self._replicas = ReplicaManager.connect(self.config)
            return self._replicas

    @property
    def groups(self) -> GroupCoordinator:
        """The group coordinator (``__consumer_offsets`` and membership checks)."""
        with self._lock:
            if self._groups is None:
                from sparklog.group.coordinator import GroupCoordinator

                self._groups = GroupCoordinator(self.replicas)
            return self._groups

    def close(self) -> None:
        with self._lock:
            if self._replicas is not None:
                self._replicas.close()
            self._replicas = None
            self._groups = None

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- topic admin ---------------------------------------------------------------------
    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replication_factor: int = 1,
        config: Mapping[str, Any] | None = None,
        replica_assignment: Mapping[int, Sequence[int]] | None = None,
    ) -> TopicDescription:
        """Create a topic (:func:`sparklog.admin.topics.create_topic`)."""
        return topic_admin.create_topic(self.replicas, name, partitions, replication_factor, config, replica_assignment)

    def list_topics(self, include_internal: bool = True) -> list[str]:
        return [t for t in self.replicas.list_topics() if include_internal or not is_internal(t)]

    def describe_topic(self, name: str) -> TopicDescription:
        return topic_admin.describe_topic(self.replicas, name)

    def topic_location(self, name: str, partition: int = 0) -> str:
        """Where the Delta table holding ``name``'s ``partition`` is: its leader's replica (on
        shared storage the topic's one table). Any Delta reader loads it, e.g. delta-spark's
        ``spark.read.format("delta").load(...)``."""
        return self.replicas.leader_table(name, partition).root

    def topic_config(self, name: str) -> dict[str, Any]:
        """Effective topic configs: defaults overridden by the topic's own settings."""
        return self.replicas.topic_config(name)

    def alter_topic_config(
        self, name: str, set: Mapping[str, Any] | None = None, delete: Iterable[str] | None = None
    ) -> dict[str, str]:
        """Set and/or remove config overrides atomically; returns the new overrides."""
        return topic_admin.alter_topic_config(self.replicas, name, set, delete)

    def create_partitions(self, name: str, total: int) -> TopicDescription:
        """Raise the partition count to ``total`` (Kafka allows increases only)."""
        return topic_admin.create_partitions(self.replicas, name, total)

    def delete_topic(self, name: str) -> None:
        """Delete the topic's metadata, every group's committed offsets of it, then its data on
        every replica (:func:`sparklog.admin.topics.delete_topic`)."""
        topic_admin.delete_topic(self.replicas, name)

    # -- offsets and reads ---------------------------------------------------------------
    def partitions_of(self, topic: str) -> list[int]:
        return self.replicas.partitions_of(topic)

    def partition_offsets(self, topic: str) -> dict[int, PartitionOffsets]:
        """``partition -> (log_start, high_watermark)``; the high watermark is the minimum log
        end over the partition's in-sync replicas."""
        return self.replicas.offsets(topic)

    def high_watermarks(self, topic: str) -> dict[int, int]:
        """``partition -> high watermark`` only: no file listing, cheap enough to poll."""
        return self.replicas.high_watermarks(topic)

    def list_offsets(self, topic: str, spec: OffsetSpec | str = "latest") -> dict[int, int]:
        """Per partition: earliest, latest, or the first offset with timestamp >= ``spec`` ms
        (-1: none, Kafka's "no such offset"); see :func:`sparklog.runtime.log_access.list_offsets`."""
        return log_access.list_offsets(self.replicas, topic, spec)

    def delete_records(self, topic: str, before: Mapping[int, int]) -> dict[int, int]:
        """Kafka's ``deleteRecords``; returns the new log-start offsets
        (:func:`sparklog.runtime.log_access.delete_records`)."""
        return log_access.delete_records(self.replicas, topic, before)

    def run_retention(
        self, topics: Iterable[str] | None = None, dry_run: bool = False, now_ms: int | None = None
    ) -> list[RetentionResult]:
        """Apply ``retention.ms``/``retention.bytes`` (metadata-only); see :mod:`sparklog.maintenance.runner`."""
        from sparklog.maintenance.runner import run_retention

        return run_retention(self.replicas, topics, dry_run, now_ms)

    def read(
        self,
        topic: str,
        partition: int | None = None,
        start_offset: int | None = None,
        end_offset: int | None = None,
        include_headers: bool = True,
        isolation_level: str = "read_committed",
    ) -> pa.Table:
        """Committed records of ``topic`` (one partition or all) in ``[start, end)`` as Arrow,
        by default log-start to the high watermark (:func:`sparklog.runtime.log_access.read`);
        ``read_committed`` (the default) stops at the last stable offset and leaves out
        aborted transactions' records."""
        return log_access.read(
            self.replicas, topic, partition, start_offset, end_offset, include_headers, isolation_level
        )

    # -- clients -------------------------------------------------------------------------
    def producer(self, **config: Any) -> Producer:
        """A light (non-Spark) producer; configs in Kafka's names (``linger_ms`` = ``linger.ms``)."""
        from sparklog.clients.producer import Producer

        return Producer(self.replicas, validate_configs(config, PRODUCER_CONFIGS, "producer"))

    def consumer(self, group_id: str | None = None, **config: Any) -> Consumer:
        """A light consumer; with ``group_id`` it can join that group (``subscribe``) and commit."""
        from sparklog.clients.consumer import Consumer

        return Consumer(self.replicas, self.groups, group_id, validate_configs(config, CONSUMER_CONFIGS, "consumer"))

    # -- consumer groups -----------------------------------------------------------------
    def commit_offsets(self, group_id: str, offsets: Mapping[tuple[str, int], int], metadata: str = "") -> None:
        """Commit offsets for a group from outside it (Kafka's standalone commit, generation -1):
        allowed while the group has no live members. Any offset >= 0 is stored, a lower one too;
        partitions of a topic that does not exist (deleted) are refused with
        ``UnknownTopicCommitError`` after the others are stored."""
        from sparklog.group.coordinator import OffsetCommit

        self.groups.commit(group_id, {tp: OffsetCommit(int(o), metadata) for tp, o in offsets.items()})

    def committed_offsets(self, group_id: str, topics: Iterable[str] | None = None) -> dict[tuple[str, int], int]:
        """The group's committed offsets (of ``topics``, or of every topic it committed for)."""
        if topics is None:
            return {tp: c.offset for tp, c in self.groups.committed_all(group_id).items() if c.offset is not None}
        wanted = [(t, p) for t in topics for p in self.partitions_of(t)]
        return self.groups.committed(group_id, wanted)

    def list_groups(self) -> list[GroupListing]:
        """Every consumer group with its state (``kafka-consumer-groups --list --state``)."""
        from sparklog.admin import groups

        return groups.list_groups(self.groups)

    def describe_group(self, group_id: str) -> GroupDescription:
        """State, members and per-partition CURRENT-OFFSET / LOG-END-OFFSET / LAG of a group."""
        from sparklog.admin import groups

        return groups.describe_group(self.groups, group_id)

    def delete_group(self, group_id: str) -> None:
        """Delete an inactive group: its committed offsets, then its znodes."""
        from sparklog.admin import groups

        groups.delete_group(self.groups, group_id)

    def delete_group_offsets(
        self, group_id: str, topic: str, partitions: Iterable[int] | None = None
    ) -> list[tuple[str, int]]:
        """Delete an inactive group's committed offsets of ``topic`` (all, or ``partitions``)."""
        from sparklog.admin import groups

        return groups.delete_group_offsets(self.groups, group_id, topic, partitions)

    def reset_group_offsets(
        self,
        group_id: str,
        scenario: ResetKind,
        value: Any = None,
        *,
        topics: Iterable[str] = (),
        partitions: Iterable[tuple[str, int]] = (),
        all_topics: bool = False,
        execute: bool = False,
    ) -> list[tuple[str, int, int]]:
        """Kafka's ``--reset-offsets`` for an inactive group; a dry run unless ``execute``.

        ``scenario``: to-earliest, to-latest, to-current, to-offset N, shift-by N,
        to-datetime 'YYYY-MM-DDTHH:mm:SS.sss[zone]', by-duration 'PnDTnHnMnS', from-file PATH.
        Returns ``(topic, partition, new offset)`` sorted.
        """
        from sparklog.admin import groups

        return groups.reset_group_offsets(
            self.groups,
            group_id,
            scenario,
            value,
            topics=list(topics),
            partitions=partitions,
            all_topics=all_topics,
            execute=execute,
        )


def connect(config: Mapping[str, Any] | None = None, **overrides: Any) -> Cluster:
    """Connect to the cluster described by ``config``/``overrides``, env, file and defaults."""
    return Cluster(resolve_cluster_config(config, **overrides))
