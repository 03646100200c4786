"""``Cluster``: a client's handle on one sparklog cluster (a ZooKeeper chroot + its brokers).

It ties the layers together for callers: topic admin (ZooKeeper metadata then Delta
tables, in that order, so a failed step never leaves a half-made topic behind), offset
queries and reads over the Delta tables, and the light producer. Metadata calls never
start Spark. One ``Cluster`` may be shared by threads.
"""

from __future__ import annotations

import base64
import threading
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from sparklog.config import (
    CONSUMER_CONFIGS,
    PRODUCER_CONFIGS,
    TOPIC_CONFIGS,
    ClusterConfig,
    resolve_cluster_config,
    validate_configs,
    with_defaults,
)
from sparklog.server.controller.placement import assign_new_partitions, assign_replicas, validate_replica_assignment
from sparklog.metadata.broker_registration import live_broker_ids
from sparklog.metadata.store import MetadataStore
from sparklog.metadata.partition_states import PartitionStateCache
from sparklog.metadata.session import ZkSession
from sparklog.errors import (
    ConfigError,
    InvalidPartitionsError,
    SparklogError,
    UnknownPartitionError,
)
from sparklog.log.table import TopicTable
from sparklog.server import log_access
from sparklog.model.offsets import OffsetSpec
from sparklog.server.replica_manager import PartitionOffsets, ReplicaView
from sparklog.model.topic import PartitionDescription, TopicDescription, is_internal, validate_topic_name

if TYPE_CHECKING:
    from sparklog.clients.consumer import Consumer
    from sparklog.admin.groups import GroupDescription, GroupListing
    from sparklog.group.coordinator import GroupCoordinator
    from sparklog.clients.producer import Producer

__all__ = ["Cluster", "connect", "PartitionOffsets"]


def _new_topic_id() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")


def _stored_configs(configs: Mapping[str, Any]) -> dict[str, str]:
    def text(value: Any) -> str:
        return str(value).lower() if isinstance(value, bool) else str(value)

    return {key: text(value) for key, value in sorted(configs.items())}


class Cluster:
    """Entry point of the Python API; create with :func:`sparklog.connect`."""

    def __init__(self, config: ClusterConfig) -> None:
        self.config = config
        self._zk: ZkSession | None = None
        self._metadata: MetadataStore | None = None
        self._tables: dict[tuple[str, str], TopicTable] = {}
        self._log_dirs: dict[int, str] = {}
        self._lock = threading.RLock()
        self._groups: "GroupCoordinator | None" = None
        self._state_cache: PartitionStateCache | None = None
        self.replicas = ReplicaView(self)

    # -- plumbing ------------------------------------------------------------------------
    @property
    def zk(self) -> ZkSession:
        with self._lock:
            if self._zk is None:
                zk = ZkSession.from_config(self.config).start()
                self._zk, self._metadata = zk, MetadataStore(zk)
            return self._zk

    def placement_brokers(self) -> dict[int, str | None]:
        """Brokers new replicas may go to, with their racks: the live ones (agents running);
        with no agent at all, every registered broker plus this client's own log dir (the
        embedded one-broker default, which needs no agent)."""
        registry = self.metadata.brokers()
        live = live_broker_ids(self.zk)
        if live:
            return {b: registry[b].rack if b in registry else None for b in live}
        racks = {b: record.rack for b, record in registry.items()}
        racks.setdefault(self.config.broker_id, self.config.broker_rack)
        return racks

    def _register_self(self) -> None:
        """Offer this client's log dir as broker ``broker.id`` (only writers of metadata do,
        so a read-only client with other local settings never clashes with the registry)."""
        self.metadata.register_broker(self.config.broker_id, self.config.log_dir, self.config.broker_rack)

    @property
    def state_cache(self) -> PartitionStateCache:
        """Partition states (leader, epoch, ISR), kept current by ZooKeeper watches."""
        with self._lock:
            if self._state_cache is None:
                self._state_cache = PartitionStateCache(self.zk)
            return self._state_cache

    @property
    def metadata(self) -> MetadataStore:
        _ = self.zk
        assert self._metadata is not None
        return self._metadata

    def _log_dir_of(self, broker_id: int) -> str:
        """Where broker ``broker_id`` keeps its replicas, per the registry (cached)."""
        with self._lock:
            cached = self._log_dirs.get(broker_id)
        if cached is not None:
            return cached
        brokers = self.metadata.brokers()
        if broker_id in brokers:
            log_dir = brokers[broker_id].log_dir
        elif broker_id == self.config.broker_id:
            log_dir = self.config.log_dir
        else:
            raise SparklogError(f"Broker {broker_id} is not registered in ZooKeeper {self.zk.connect_string}")
        with self._lock:
            self._log_dirs[broker_id] = log_dir
        return log_dir

    def table(self, topic: str, partition: int = 0) -> TopicTable:
        """The table of the replica leading ``topic``'s partition ``partition``."""
        validate_topic_name(topic)
        return self.replicas.leader_table(topic, partition)

    def replica_table(self, topic: str, broker_id: int) -> TopicTable:
        """The table of ``topic``'s replicas on broker ``broker_id``'s log dir (cached)."""
        validate_topic_name(topic)
        log_dir = self._log_dir_of(broker_id)
        with self._lock:
            key = (log_dir, topic)
            table = self._tables.get(key)
            if table is None:
                table = self._tables[key] = TopicTable(log_dir, topic)
            return table

    def forget_tables(self, topic: str) -> None:
        """Drop cached snapshots of ``topic``'s tables (after a storage error or a re-creation)."""
        with self._lock:
            tables = [t for (_log_dir, name), t in self._tables.items() if name == topic]
        for table in tables:
            table.forget()

    def close(self) -> None:
        with self._lock:
            if self._zk is not None:
                self._zk.close()
            self._zk = None
            self._metadata = None
            self._groups = None
            self._tables.clear()
            self._log_dirs.clear()

    def __enter__(self) -> "Cluster":
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
        """Create a topic: ZooKeeper metadata in one multi-op, then one Delta table per replica.

        Replicas are placed by Kafka's rack-aware round robin over the live brokers, or as
        ``replica_assignment`` says (partition -> broker ids, first = preferred leader; then
        ``partitions`` and ``replication_factor`` are ignored)."""
        validate_topic_name(name)
        configs = _stored_configs(validate_configs(config, TOPIC_CONFIGS, "topic"))
        racks = self.placement_brokers()
        if replica_assignment is not None:
            validate_replica_assignment(replica_assignment, set(racks))
            assignment = {int(p): list(r) for p, r in sorted(replica_assignment.items())}
        else:
            if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1:
                raise InvalidPartitionsError(f"Number of partitions must be larger than 0, got {partitions!r}")
            assignment = assign_replicas(sorted(racks), partitions, replication_factor, broker_racks=racks)
        if self.config.broker_id in racks and not live_broker_ids(self.zk):
            self._register_self()
        topic_id = _new_topic_id()
        self.metadata.create_topic(name, topic_id, assignment, configs)
        try:
            for broker_id in sorted({b for replicas in assignment.values() for b in replicas}):
                table = TopicTable(self._log_dir_of(broker_id), name)
                if table.exists():
                    table.delete()  # debris of an earlier topic of this name whose delete was cut short
                table.create(topic_id, int(with_defaults(configs, TOPIC_CONFIGS)["history.retention.ms"]))
        except BaseException:
            self.metadata.delete_topic(name)
            raise
        return self.describe_topic(name)

    def list_topics(self, include_internal: bool = True) -> list[str]:
        return [t for t in self.metadata.list_topics() if include_internal or not is_internal(t)]

    def describe_topic(self, name: str) -> TopicDescription:
        validate_topic_name(name)
        assignment, _ = self.metadata.assignment(name)
        partitions = sorted(int(p) for p in assignment.partitions)
        states = self.metadata.partition_states(name, partitions)
        configs, _ = self.metadata.topic_config(name)
        return TopicDescription(
            name=name,
            topic_id=assignment.topic_id,
            partitions=tuple(
                PartitionDescription(
                    partition=p,
                    leader=states[p].leader,
                    leader_epoch=states[p].leader_epoch,
                    replicas=tuple(assignment.replicas(p)),
                    isr=tuple(states[p].isr),
                )
                for p in partitions
            ),
            configs=configs,
        )

    def topic_config(self, name: str) -> dict[str, Any]:
        """Effective topic configs: defaults overridden by the topic's own settings."""
        validate_topic_name(name)
        overrides, _ = self.metadata.topic_config(name)
        return with_defaults(validate_configs(overrides, TOPIC_CONFIGS, "topic"), TOPIC_CONFIGS)

    def alter_topic_config(
        self, name: str, set: Mapping[str, Any] | None = None, delete: Iterable[str] | None = None
    ) -> dict[str, str]:
        """Set and/or remove config overrides atomically; returns the new overrides."""
        validate_topic_name(name)
        updates = _stored_configs(validate_configs(set, TOPIC_CONFIGS, "topic"))
        removals = [key if key in TOPIC_CONFIGS else key.replace("_", ".") for key in (delete or [])]
        unknown = [key for key in removals if key not in TOPIC_CONFIGS]
        if unknown:
            raise ConfigError(f"Invalid config(s): {', '.join(unknown)}. Allowed keys: {', '.join(sorted(TOPIC_CONFIGS))}")
        while True:
            current, version = self.metadata.topic_config(name)
            new = {k: v for k, v in current.items() if k not in removals}
            new.update(updates)
            if self.metadata.set_topic_config(name, dict(sorted(new.items())), version):
                return new

    def create_partitions(self, name: str, total: int) -> TopicDescription:
        """Raise the partition count to ``total`` (Kafka allows increases only)."""
        validate_topic_name(name)
        while True:
            assignment, version = self.metadata.assignment(name)
            current = len(assignment.partitions)
            if isinstance(total, bool) or not isinstance(total, int) or total <= current:
                raise InvalidPartitionsError(
                    f"Topic currently has {current} partitions, which is higher than or equal to the requested "
                    f"{total}. Partitions can only be increased."
                )
            existing = {int(p): replicas for p, replicas in assignment.partitions.items()}
            racks = self.placement_brokers()
            new = assign_new_partitions(sorted(racks), existing, total, broker_racks=racks)
            if self.metadata.add_partitions(name, assignment, version, new):
                return self.describe_topic(name)

    def delete_topic(self, name: str) -> None:
        """Delete the topic's metadata, then its data on every replica."""
        validate_topic_name(name)
        assignment, _ = self.metadata.assignment(name)
        log_dirs = {self._log_dir_of(b) for replicas in assignment.partitions.values() for b in replicas}
        self.metadata.delete_topic(name)
        self.state_cache.forget(name)
        with self._lock:
            for log_dir in log_dirs:
                self._tables.pop((log_dir, name), None)
                TopicTable(log_dir, name).delete()

    # -- offsets and reads ---------------------------------------------------------------
    def partitions_of(self, topic: str) -> list[int]:
        validate_topic_name(topic)
        assignment, _ = self.metadata.assignment(topic)
        return sorted(int(p) for p in assignment.partitions)

    def check_partition(self, topic: str, partition: int, partitions: list[int]) -> None:
        if partition not in partitions:
            raise UnknownPartitionError(
                f"Topic {topic} has partitions 0..{len(partitions) - 1}; partition {partition} does not exist"
            )

    def partition_offsets(self, topic: str) -> dict[int, PartitionOffsets]:
        """``partition -> (log_start, high_watermark)``; the high watermark is the minimum log
        end over the partition's in-sync replicas."""
        return self.replicas.offsets(topic)

    def high_watermarks(self, topic: str) -> dict[int, int]:
        """``partition -> high watermark`` only: no file listing, cheap enough to poll."""
        return self.replicas.high_watermarks(topic)

    def list_offsets(self, topic: str, spec: OffsetSpec | str = "latest") -> dict[int, int]:
        """Per partition: earliest, latest, or the first offset with timestamp >= ``spec`` ms
        (-1: none, Kafka's "no such offset"); see :func:`sparklog.server.log_access.list_offsets`."""
        return log_access.list_offsets(self, topic, spec)

    def delete_records(self, topic: str, before: Mapping[int, int]) -> dict[int, int]:
        """Kafka's ``deleteRecords``; returns the new log-start offsets
        (:func:`sparklog.server.log_access.delete_records`)."""
        return log_access.delete_records(self, topic, before)

    def run_retention(
        self, topics: Iterable[str] | None = None, dry_run: bool = False, now_ms: int | None = None
    ) -> list[Any]:
        """Apply ``retention.ms``/``retention.bytes`` (metadata-only); see :mod:`sparklog.maintenance.runner`."""
        from sparklog.maintenance.runner import run_retention

        return run_retention(self, topics, dry_run, now_ms)

    def read(
        self,
        topic: str,
        partition: int | None = None,
        start_offset: int | None = None,
        end_offset: int | None = None,
        include_headers: bool = True,
    ) -> pa.Table:
        """Committed records of ``topic`` (one partition or all) in ``[start, end)`` as Arrow,
        by default log-start to the high watermark (:func:`sparklog.server.log_access.read`)."""
        return log_access.read(self, topic, partition, start_offset, end_offset, include_headers)

    # -- clients -------------------------------------------------------------------------
    def producer(self, **config: Any) -> "Producer":
        """A light (non-Spark) producer; configs in Kafka's names (``linger_ms`` = ``linger.ms``)."""
        from sparklog.clients.producer import Producer

        return Producer(self, validate_configs(config, PRODUCER_CONFIGS, "producer"))

    def consumer(self, group_id: str | None = None, **config: Any) -> "Consumer":
        """A light consumer; with ``group_id`` it can join that group (``subscribe``) and commit."""
        from sparklog.clients.consumer import Consumer

        return Consumer(self, group_id, validate_configs(config, CONSUMER_CONFIGS, "consumer"))

    # -- consumer groups -----------------------------------------------------------------
    @property
    def groups(self) -> "GroupCoordinator":
        with self._lock:
            if self._groups is None:
                from sparklog.group.coordinator import GroupCoordinator

                self._groups = GroupCoordinator(self)
            return self._groups

    def commit_offsets(self, group_id: str, offsets: Mapping[tuple[str, int], int], metadata: str = "") -> None:
        """Commit offsets for a group from outside it (Kafka's standalone commit, generation -1):
        allowed while the group has no live members. Offsets never move backwards here."""
        from sparklog.group.coordinator import OffsetCommit

        self.groups.commit(group_id, {tp: OffsetCommit(int(o), metadata) for tp, o in offsets.items()})

    def committed_offsets(self, group_id: str, topics: Iterable[str] | None = None) -> dict[tuple[str, int], int]:
        """The group's committed offsets (of ``topics``, or of every topic it committed for)."""
        if topics is None:
            return {tp: c.offset for tp, c in self.groups.committed_all(group_id).items() if c.offset is not None}
        wanted = [(t, p) for t in topics for p in self.partitions_of(t)]
        return self.groups.committed(group_id, wanted)

    def list_groups(self) -> list["GroupListing"]:
        """Every consumer group with its state (``kafka-consumer-groups --list --state``)."""
        from sparklog.group import admin

        return admin.list_groups(self)

    def describe_group(self, group_id: str) -> "GroupDescription":
        """State, members and per-partition CURRENT-OFFSET / LOG-END-OFFSET / LAG of a group."""
        from sparklog.group import admin

        return admin.describe_group(self, group_id)

    def delete_group(self, group_id: str) -> None:
        """Delete an inactive group: its committed offsets, then its znodes."""
        from sparklog.group import admin

        admin.delete_group(self, group_id)

    def delete_group_offsets(
        self, group_id: str, topic: str, partitions: Iterable[int] | None = None
    ) -> list[tuple[str, int]]:
        """Delete an inactive group's committed offsets of ``topic`` (all, or ``partitions``)."""
        from sparklog.group import admin

        return admin.delete_group_offsets(self, group_id, topic, partitions)

    def reset_group_offsets(
        self,
        group_id: str,
        scenario: str,
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
        from sparklog.group import admin

        return admin.reset_group_offsets(
            self, group_id, scenario, value, topics=list(topics), partitions=partitions, all_topics=all_topics,
            execute=execute,
        )  # fmt: skip


def connect(config: Mapping[str, Any] | None = None, **overrides: Any) -> Cluster:
    """Connect to the cluster described by ``config``/``overrides``, env, file and defaults."""
    return Cluster(resolve_cluster_config(config, **overrides))
