"""The replica manager: where a topic's replicas live, who leads each partition, what readers see.

Kafka's metadata cache and replica manager at sparklog's scale. Every runtime and broker
component (the produce path, the replica fetcher, the controller, the agent, maintenance,
group coordination) and every client (producer, consumer, Spark jobs, admin) receives one
``ReplicaManager`` instead of reaching back into :class:`sparklog.cluster.Cluster`. It owns:

* the ZooKeeper session and the metadata store (brokers, topics, configs), and the
  **partition-state cache** (leader, leader epoch, ISR; kept current by watches);
* the **replica tables**: the topic's Delta table on each broker's log dir, one cached
  :class:`~sparklog.log.table.TopicTable` per (log dir, topic);
* a partition's **leader table** (``leader = -1``: offline, ``LeaderNotAvailableError``), its
  **log-start** (the leader's) and its **high watermark**: the minimum log end over the
  in-sync replicas (DESIGN §2, :func:`sparklog.runtime.policy.high_watermark`),
  each table read once per call.

Invariants: nothing here writes records; every offset comes from Delta snapshots, ZooKeeper
only says where to look (DESIGN §4). Thread-safe: one instance may serve many threads.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from sparklog.config import TOPIC_CONFIGS, ClusterConfig, validate_configs, with_defaults
from sparklog.errors import LeaderNotAvailableError, SparklogError, TopicNotFoundError, UnknownPartitionError
from sparklog.log.table import TopicTable
from sparklog.log.txn_log import last_stable_offset
from sparklog.metadata.broker_registration import live_broker_ids
from sparklog.metadata.partition_states import PartitionStateCache
from sparklog.metadata.session import ZkSession
from sparklog.metadata.store import MetadataStore
from sparklog.metadata.zkdata import PartitionState
from sparklog.model.storage_location import StorageSettings
from sparklog.model.topic import validate_topic_name
from sparklog.runtime.policy import high_watermark

# Brokers' request paths accept topic metadata (partitions, configs) read this recently from
# ZooKeeper, as Kafka's brokers act on metadata propagated a moment ago.
METADATA_MAX_AGE_MS = 1_000

__all__ = ["METADATA_MAX_AGE_MS", "LeaderSnapshot", "PartitionOffsets", "ReplicaManager"]

# Brokers' request paths accept topic metadata (partitions, configs) read this recently from
# ZooKeeper, as Kafka's brokers act on metadata propagated a moment ago.
METADATA_MAX_AGE_MS = 1_000


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
    # The first offset of the oldest open transaction, else the high watermark: what
    # read_committed readers read up to (docs/transactions.md).
    last_stable_offset: int = -1

    def end_for(self, read_committed: bool) -> int:
        """Where a reader of that isolation level stops (exclusive)."""
        return self.last_stable_offset if read_committed else self.high_watermark


class ReplicaManager:
    """Metadata, partition states, replica tables and offsets of one cluster. Thread-safe.

    States: *open* (the ZooKeeper session is started by whoever builds it) → *closed*
    (:meth:`close`: the session ends, cached tables are dropped)."""

    def __init__(self, config: ClusterConfig, zk: ZkSession) -> None:
        self.config = config
        self.zk = zk
        self.metadata = MetadataStore(zk)
        self.state_cache = PartitionStateCache(zk)
        self._lock = threading.RLock()
        self._recently_read: dict[tuple[str, str], tuple[float, Any]] = {}
        self._tables: dict[tuple[str, str], TopicTable] = {}
        self._log_dirs: dict[int, str] = {}

    @classmethod
    def connect(cls, config: ClusterConfig) -> ReplicaManager:
        """A replica manager on a new ZooKeeper session for ``config``."""
        return cls(config, ZkSession.from_config(config).start())

    def close(self) -> None:
        self.zk.close()
        with self._lock:
            self._tables.clear()
            self._log_dirs.clear()

    def __enter__(self) -> ReplicaManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- topics and configs --------------------------------------------------------------
    def list_topics(self) -> list[str]:
        return self.metadata.list_topics()

    def partitions_of(self, topic: str, max_age_ms: int = 0) -> list[int]:
        """``topic``'s partitions; ``max_age_ms`` > 0 accepts an answer read that recently
        (brokers' request paths: Kafka's brokers also act on metadata a moment old)."""
        validate_topic_name(topic)
        return self._recent(("partitions", topic), max_age_ms, lambda: self._read_partitions(topic))

    def _read_partitions(self, topic: str) -> list[int]:
        assignment, _ = self.metadata.assignment(topic)
        return sorted(int(p) for p in assignment.partitions)

    def topic_id(self, topic: str, max_age_ms: int = 0) -> str:
        """``topic``'s id (base64url of 16 bytes, as Kafka prints topic ids; Metadata answers it as
        a UUID). ``max_age_ms``: see :meth:`partitions_of`."""
        validate_topic_name(topic)
        return str(self._recent(("id", topic), max_age_ms, lambda: self.metadata.assignment(topic)[0].topic_id))

    def topic_incarnation(self, topic: str, max_age_ms: int = 0) -> int:
        """Which topic of this name exists (the zxid that created it; ``TopicNotFoundError`` when
        none does): offset commits carry it, so a commit checked against a topic deleted since
        is refused (:mod:`sparklog.runtime.deleted_topics`). ``max_age_ms``: see :meth:`partitions_of`."""
        validate_topic_name(topic)
        return int(self._recent(("incarnation", topic), max_age_ms, lambda: self.metadata.topic_incarnation(topic)))

    def topic_incarnations(self, topics: Iterable[str], max_age_ms: int = 0) -> dict[str, int]:
        """:meth:`topic_incarnation` of each of ``topics`` that exists (the others are left out)."""
        found = {}
        for topic in sorted(set(topics)):
            try:
                found[topic] = self.topic_incarnation(topic, max_age_ms)
            except TopicNotFoundError:
                continue
        return found

    def _recent(self, key: tuple[str, str], max_age_ms: int, read: Callable[[], Any]) -> Any:
        now = time.monotonic()
        if max_age_ms > 0:
            with self._lock:
                cached = self._recently_read.get(key)
            if cached is not None and now - cached[0] <= max_age_ms / 1000:
                return cached[1]
        value = read()
        with self._lock:
            self._recently_read[key] = (now, value)
        return value

    def check_partition(
        self, topic: str, partition: int, partitions: list[int] | None = None, max_age_ms: int = 0
    ) -> None:
        """``UnknownPartitionError`` unless ``partition`` is one of ``topic``'s."""
        known = self.partitions_of(topic, max_age_ms) if partitions is None else partitions
        if partition not in known:
            raise UnknownPartitionError(
                f"Topic {topic} has partitions 0..{len(known) - 1}; partition {partition} does not exist"
            )

    def topic_config(self, topic: str, max_age_ms: int = 0) -> dict[str, Any]:
        """Effective topic configs: defaults overridden by the topic's own settings
        (``max_age_ms``: see :meth:`partitions_of`)."""
        validate_topic_name(topic)
        return dict(self._recent(("config", topic), max_age_ms, lambda: self._read_config(topic)))

    def _read_config(self, topic: str) -> dict[str, Any]:
        overrides, _ = self.metadata.topic_config(topic)
        return with_defaults(validate_configs(overrides, TOPIC_CONFIGS, "topic"), TOPIC_CONFIGS)

    # -- brokers and replica tables ------------------------------------------------------
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

    def log_dir_of(self, broker_id: int) -> str:
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

    def replica_table(self, topic: str, broker_id: int) -> TopicTable:
        """The table of ``topic``'s replicas on broker ``broker_id``'s log dir (cached)."""
        validate_topic_name(topic)
        log_dir = self.log_dir_of(broker_id)
        with self._lock:
            key = (log_dir, topic)
            table = self._tables.get(key)
            if table is None:
                table = self._tables[key] = self.table_at(log_dir, topic)
            return table

    def shares_table(self, topic: str, broker_id: int, other_id: int) -> bool:
        """Whether two brokers' replicas of ``topic`` are one table: their log dir is the same
        (shared storage, DESIGN §16). Nothing is copied between such replicas, and removing
        one of them must not empty the table the other serves. False when either broker's log
        dir is unknown (never registered): nothing can be assumed shared."""
        try:
            return self.replica_table(topic, broker_id).root == self.replica_table(topic, other_id).root
        except SparklogError:
            return False

    def table_at(self, log_dir: str, topic: str) -> TopicTable:
        """A new (uncached) handle on ``topic``'s table in ``log_dir``, with this cluster's
        storage settings."""
        return TopicTable(log_dir, topic, StorageSettings(self.config.storage))

    def forget_tables(self, topic: str) -> None:
        """Drop cached snapshots of ``topic``'s tables (after a storage error or a re-creation)."""
        with self._lock:
            tables = [t for (_log_dir, name), t in self._tables.items() if name == topic]
        for table in tables:
            table.forget()

    def drop_tables(self, topic: str) -> None:
        """Forget ``topic``'s tables and partition states entirely (the topic was deleted)."""
        self.state_cache.forget(topic)
        with self._lock:
            for key in [k for k in self._tables if k[1] == topic]:
                del self._tables[key]

    # -- leaders -------------------------------------------------------------------------
    def states(self, topic: str, partitions: Iterable[int] | None = None) -> dict[int, PartitionState]:
        selected = self.partitions_of(topic) if partitions is None else list(partitions)
        return self.state_cache.states(topic, selected)

    def leader(self, topic: str, partition: int) -> PartitionState:
        state = self.states(topic, [partition])[partition]
        if state.leader < 0:
            raise LeaderNotAvailableError(
                f"Partition {topic}-{partition} has no leader: none of its in-sync replicas {state.isr} is live "
                "(start their brokers; `sparklog topics describe --unavailable-partitions` lists such partitions)"
            )
        return state

    def leader_table(self, topic: str, partition: int = 0) -> TopicTable:
        """The table of the replica leading ``topic``'s partition ``partition``."""
        return self.replica_table(topic, self.leader(topic, partition).leader)

    def leader_tables(self, topic: str, partitions: Iterable[int] | None = None) -> list[tuple[TopicTable, list[int]]]:
        """The leader tables of ``partitions`` (default all), each with the partitions it leads."""
        grouped: dict[int, list[int]] = {}
        selected = self.partitions_of(topic) if partitions is None else sorted(set(partitions))
        for partition in selected:
            grouped.setdefault(self.leader(topic, partition).leader, []).append(partition)
        return [(self.replica_table(topic, broker), parts) for broker, parts in sorted(grouped.items())]

    def replica_tables(self, topic: str) -> list[tuple[TopicTable, list[int]]]:
        """Every replica table of ``topic`` (leaders and followers), each with the partitions
        it holds a replica of."""
        assignment, _ = self.metadata.assignment(topic)
        held: dict[int, list[int]] = {}
        for partition, brokers in assignment.partitions.items():
            for broker in brokers:
                held.setdefault(int(broker), []).append(int(partition))
        return [(self.replica_table(topic, b), sorted(parts)) for b, parts in sorted(held.items())]

    # -- offsets -------------------------------------------------------------------------
    def fetch_positions(
        self, topic: str, partitions: Iterable[int], *, skip_offline: bool = False
    ) -> dict[int, LeaderSnapshot]:
        """Per partition: its leader table, one snapshot of it and the high watermark (the
        minimum log end over the ISR), the leader's table refreshed once. A partition
        without a leader raises ``LeaderNotAvailableError``, or is left out (``skip_offline``)."""
        snapshots: dict[int, tuple[TopicTable, Any]] = {}

        def snapshot(broker: int) -> tuple[TopicTable, Any]:
            if broker not in snapshots:
                table = self.replica_table(topic, broker)
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
            ends = {b: self.replica_table(topic, b).current_log_end(p) for b in state.isr if b != state.leader}
            ends[state.leader] = end
            high = high_watermark([state.leader, *state.isr], ends)
            result[p] = LeaderSnapshot(table, dt, high, end, last_stable_offset(dt, p, high))
        return result

    def offsets(
        self,
        topic: str,
        partitions: Iterable[int] | None = None,
        *,
        with_log_start: bool = True,
        read_committed: bool = False,
    ) -> dict[int, PartitionOffsets]:
        """``partition -> (log_start, high_watermark)``: log-start of the leader, high watermark =
        minimum log end over the ISR, from one snapshot per replica table. Without
        ``with_log_start`` the first item is -1 (saves the file statistics). With
        ``read_committed`` the second item is the last stable offset instead."""
        selected = self.partitions_of(topic) if partitions is None else partitions
        positions = self.fetch_positions(topic, selected)
        starts: dict[int, dict[int, int]] = {}
        result: dict[int, PartitionOffsets] = {}
        for p, at in positions.items():
            end = at.end_for(read_committed)
            if not with_log_start:
                result[p] = PartitionOffsets((-1, end))
                continue
            if id(at.table) not in starts:
                starts[id(at.table)] = at.table.log_starts(at.snapshot)
            start = starts[id(at.table)].get(p, at.log_end)
            result[p] = PartitionOffsets((min(start, end), end))
        return result

    def current_high_watermark(self, topic: str, partition: int, state: PartitionState) -> int:
        """The high watermark from the newest commit of every ISR member's table, without
        refreshing any snapshot (a few file probes): for pollers at the end of the log."""
        isr = [state.leader, *state.isr]
        ends = {b: self.replica_table(topic, b).current_log_end(partition) for b in set(isr)}
        return high_watermark(isr, ends)

    def high_watermarks(
        self, topic: str, partitions: Iterable[int] | None = None, *, read_committed: bool = False
    ) -> dict[int, int]:
        """``partition -> high watermark`` (the last stable offset with ``read_committed``)
        only: no file listing, cheap enough to poll."""
        offsets = self.offsets(topic, partitions, with_log_start=False, read_committed=read_committed)
        return {p: o.high_watermark for p, o in offsets.items()}
