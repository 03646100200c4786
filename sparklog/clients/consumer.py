"""The light consumer: Kafka's consumer API for applications, with no Spark.

``subscribe`` joins a consumer group and gets partitions from its leader
(:mod:`sparklog.clients.membership`: through the brokers' group coordinator with
``bootstrap.servers``, else through ZooKeeper); ``assign`` takes partitions by hand. ``poll`` reads committed
records from each assigned partition's position up to its high watermark (never beyond:
DESIGN §5.5) — for ``isolation.level=read_committed`` (the default) up to the last stable
offset, without aborted records —, at most ``max.poll.records`` per call, fairly.

Group protocol as Kafka's classic consumer runs it, inside ``poll`` (and ``commit``/``close``):
on a revocation the consumer commits its positions (``enable.auto.commit``), drops the
partitions and acknowledges; on a new generation it starts each partition from the committed
offset, or per ``auto.offset.reset`` (``none`` raises :class:`OffsetOutOfRangeError`). One thread.

A ZooKeeper failover within the session timeout is invisible: ``poll`` returns what it can
until ZooKeeper answers again; ``commit`` and a rebalance's acknowledgement are retried for up
to ``session.timeout.ms``, then :class:`~sparklog.errors.ZooKeeperUnavailableError` is
raised. An auto-commit inside ``poll`` is not retried: the next interval commits.
"""

from __future__ import annotations

import functools
import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import pyarrow as pa

from sparklog.clients.protocol_member import ProtocolMember
from sparklog.clients.records import ConsumerRecord, GroupMetadata, to_records
from sparklog.config import CONSUMER_CONFIGS, read_committed, with_defaults
from sparklog.errors import (
    ConfigError,
    ConsumerClosedError,
    CoordinationError,
    GroupError,
    InvalidOffsetSpecError,
    OffsetOutOfRangeError,
    UnknownPartitionError,
    ZooKeeperUnavailableError,
)
from sparklog.group.coordinator import NO_GENERATION, GroupCoordinator, OffsetCommit
from sparklog.log.reader import empty_read_table, offset_for_timestamp, read_ranges
from sparklog.model.group_ids import validate_group_id, validate_instance_id
from sparklog.model.topic import TopicPartition
from sparklog.runtime.replica_manager import LeaderSnapshot, ReplicaManager

if TYPE_CHECKING:
    from sparklog.metadata.group_member import GroupMember

__all__ = ["Consumer", "ConsumerRecord", "GroupMetadata", "TopicPartition"]

log = logging.getLogger("sparklog.clients.consumer")

_IDLE_WAIT_S = 0.02  # between looks at the log when nothing is new
_COORDINATION_BACKOFF_S = 0.1  # between tries while ZooKeeper is unreachable
T = TypeVar("T")


class Consumer:
    """Create with :meth:`sparklog.Cluster.consumer`."""

    def __init__(
        self, replicas: ReplicaManager, coordinator: GroupCoordinator, group_id: str | None, configs: Mapping[str, Any]
    ) -> None:
        self.replicas = replicas
        self.group_id = validate_group_id(group_id) if group_id is not None else None
        self.configs = with_defaults(configs, CONSUMER_CONFIGS)
        instance = self.configs["group.instance.id"]
        self.instance_id = validate_instance_id(instance) if instance else None
        self.client_id = str(self.configs["client.id"] or "consumer")
        if (
            self.configs["bootstrap.servers"]
            and self.configs["heartbeat.interval.ms"] >= self.configs["session.timeout.ms"]
        ):
            raise ConfigError("heartbeat.interval.ms must be lower than session.timeout.ms (Kafka's rule)")
        self.read_committed = read_committed(self.configs["isolation.level"])
        self.coordinator = coordinator
        self._member: GroupMember | ProtocolMember | None = None
        self._zk: Any = None
        self._assigned: list[TopicPartition] = []
        self._manual = False
        self._positions: dict[TopicPartition, int] = {}
        self._next_partition = 0
        self._last_auto_commit = time.monotonic()
        self._last_committed: dict[TopicPartition, int] = {}
        self._on_assign: Callable[[list[TopicPartition]], None] | None = None
        self._on_revoke: Callable[[list[TopicPartition]], None] | None = None
        self._closed = False

    # -- subscriptions -------------------------------------------------------------------
    def subscribe(
        self,
        topics: Sequence[str] | None = None,
        pattern: str | None = None,
        on_assign: Callable[[list[TopicPartition]], None] | None = None,
        on_revoke: Callable[[list[TopicPartition]], None] | None = None,
    ) -> None:
        """Join the group with a topic list or a regex (``pattern``); partitions come at ``poll``."""
        self._check_open()
        if self.group_id is None:
            raise GroupError("subscribe() needs a group id: Cluster.consumer(group_id=...); use assign() without one")
        if self._manual:
            raise GroupError(
                "Subscription to topics, partitions and pattern are mutually exclusive (assign() was used)"
            )
        if isinstance(topics, str):
            topics = [topics]
        if pattern is not None:
            re.compile(pattern)
        for topic in topics or []:
            self.replicas.partitions_of(topic)  # validates the name; the topic must exist
        self._on_assign, self._on_revoke = on_assign, on_revoke
        if self._member is not None:
            self._member.update_subscription(topics or [], pattern)
            return
        self._member = self._new_member(list(topics or []), pattern)
        self._member.join()

    def _new_member(self, topics: list[str], pattern: str | None) -> GroupMember | ProtocolMember:
        from sparklog.clients import membership

        group_id = self.group_id
        assert group_id is not None, "subscribe() checked the group id"
        args = (group_id, self.configs, self.client_id, self.instance_id, topics, pattern)
        if self.configs["bootstrap.servers"]:
            return membership.protocol_member(self.replicas, *args)
        member, self._zk = membership.zookeeper_member(self.replicas, self.coordinator, *args)
        return member

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Take ``partitions`` by hand (no group membership; commits need an inactive group)."""
        self._check_open()
        if self._member is not None:
            raise GroupError(
                "Subscription to topics, partitions and pattern are mutually exclusive (subscribe() was used)"
            )
        wanted = sorted({(str(t), int(p)) for t, p in partitions})
        for topic, partition in wanted:
            if partition not in self.replicas.partitions_of(topic):
                raise UnknownPartitionError(f"Topic {topic} has no partition {partition}")
        self._manual = True
        self._set_assignment(wanted)

    def assignment(self) -> set[TopicPartition]:
        return set(self._assigned)

    def group_metadata(self) -> GroupMetadata:
        member = self._member
        generation = member.assignment.generation if member is not None and member.assignment is not None else -1
        return GroupMetadata(
            self.group_id, generation, member.member_id if member is not None else "", self.instance_id
        )

    def unsubscribe(self) -> None:
        self._leave()
        self._manual = False
        self._set_assignment([])

    # -- group events --------------------------------------------------------------------
    def _set_assignment(self, partitions: list[TopicPartition]) -> None:
        self._assigned = list(partitions)
        self._positions = {tp: o for tp, o in self._positions.items() if tp in partitions}

    def _handle_group_events(self) -> None:
        member = self._member
        if isinstance(member, ProtocolMember):
            member.polled()
        if member is None or not member.changed.is_set():
            return
        result = member.sync()
        if result.action == "revoke":
            if self.configs["enable.auto.commit"]:
                self._commit_quietly()
            if self._on_revoke is not None:
                self._on_revoke(list(self._assigned))
            self._set_assignment([])
            self._retry_coordination(member.ack)
        elif result.action == "assigned" and result.assignment is not None:
            self._set_assignment(list(result.assignment.partitions))
            if self._on_assign is not None:
                self._on_assign(list(self._assigned))
        elif result.action == "rejoined":
            self._set_assignment([])

    def _retry_coordination(self, operation: Callable[[], T]) -> T:
        """``operation()``, tried again while ZooKeeper is unreachable, for up to
        ``session.timeout.ms`` after the first failure (a request to a hung server only fails
        once the client gives up on it): beyond that the session is gone anyway."""
        deadline: float | None = None
        while True:
            try:
                return operation()
            except ZooKeeperUnavailableError as exc:
                if deadline is None:
                    deadline = time.monotonic() + int(self.configs["session.timeout.ms"]) / 1000
                if time.monotonic() + _COORDINATION_BACKOFF_S > deadline:
                    raise
                log.info("group %s: ZooKeeper unreachable, retrying: %s", self.group_id, exc)
                time.sleep(_COORDINATION_BACKOFF_S)

    def _commit_quietly(self, retry: bool = True) -> None:
        try:
            self._commit(None, "", retry)
        except (GroupError, CoordinationError) as exc:  # auto-commit: Kafka logs and carries on
            log.warning("auto-commit of group %s failed: %s", self.group_id, exc)

    # -- positions -----------------------------------------------------------------------
    def _require_assigned(self, tp: TopicPartition) -> TopicPartition:
        tp = (str(tp[0]), int(tp[1]))
        if tp not in self._assigned:
            raise GroupError(
                f"Partition {tp[0]}-{tp[1]} is not assigned to this consumer (assignment: {sorted(self._assigned)})"
            )
        return tp

    def seek(self, tp: TopicPartition, offset: int) -> None:
        tp = self._require_assigned(tp)
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise InvalidOffsetSpecError(f"seek offset must not be a negative number: {offset!r} for {tp[0]}-{tp[1]}")
        self._positions[tp] = offset

    def seek_to_beginning(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        for tp in self._targets(partitions):
            self._positions[tp] = self._bounds(tp)[0]

    def seek_to_end(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        for tp in self._targets(partitions):
            self._positions[tp] = self._bounds(tp)[1]

    def _targets(self, partitions: Iterable[TopicPartition] | None) -> list[TopicPartition]:
        self._check_open()
        return [self._require_assigned(tp) for tp in partitions] if partitions is not None else list(self._assigned)

    def position(self, tp: TopicPartition) -> int:
        """The offset of the next record ``poll`` returns for ``tp`` (resolving it if needed)."""
        tp = self._require_assigned(tp)
        if tp not in self._positions:
            self._initialise_positions([tp])
        return self._positions[tp]

    def committed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        wanted = [(str(t), int(p)) for t, p in partitions]
        if self.group_id is None:
            return {tp: None for tp in wanted}
        member = self._member
        if isinstance(member, ProtocolMember):  # through the coordinator: OffsetFetch
            found = member.committed(wanted)
        else:
            found = self.coordinator.committed(self.group_id, wanted)
        return {tp: found.get(tp) for tp in wanted}

    def offsets_for_times(self, timestamps: Mapping[TopicPartition, int]) -> dict[TopicPartition, int | None]:
        """Per partition, the earliest offset whose timestamp (ms) is >= the one given (None: none)."""
        result: dict[TopicPartition, int | None] = {}
        for (topic, partition), ts in timestamps.items():
            table = self.replicas.leader_table(topic, int(partition))
            result[(topic, int(partition))] = offset_for_timestamp(table, table.snapshot(), int(partition), int(ts))
        return result

    def _bounds(self, tp: TopicPartition) -> tuple[int, int]:
        offsets = self.replicas.offsets(tp[0], read_committed=self.read_committed)
        if tp[1] not in offsets:
            raise UnknownPartitionError(f"Topic {tp[0]} has no partition {tp[1]}")
        return offsets[tp[1]]

    def _initialise_positions(self, partitions: list[TopicPartition]) -> None:
        committed = self.committed(partitions) if self.group_id is not None else {}
        for tp in partitions:
            offset = committed.get(tp)
            if offset is not None:
                self._positions[tp] = offset
            else:
                self._reset_position(tp, f"no committed offset for group {self.group_id}")

    def _reset_position(self, tp: TopicPartition, why: str) -> None:
        policy = self.configs["auto.offset.reset"]
        start, end = self._bounds(tp)
        if policy == "none":
            raise OffsetOutOfRangeError(
                f"{tp[0]}-{tp[1]}: {why}, and auto.offset.reset is 'none' (valid offsets {start}..{end}); "
                "seek to an offset in range or set auto.offset.reset to earliest/latest"
            )
        self._positions[tp] = start if policy == "earliest" else end

    # -- fetching ------------------------------------------------------------------------
    def poll(self, timeout_ms: int = 0, max_records: int | None = None) -> list[ConsumerRecord]:
        """Records (at most ``max_records``/``max.poll.records``) waiting up to ``timeout_ms``."""
        return to_records(self.poll_arrow(timeout_ms, max_records))

    def poll_arrow(self, timeout_ms: int = 0, max_records: int | None = None) -> pa.Table:
        """Like :meth:`poll`, as one Arrow table in the Kafka source's schema (with headers)."""
        self._check_open()
        if self._member is None and not self._manual:
            raise GroupError("Consumer is not subscribed to any topics or assigned any partitions")
        budget = int(max_records or self.configs["max.poll.records"])
        deadline = time.monotonic() + max(0, timeout_ms) / 1000
        while True:
            positions = dict(self._positions)
            try:
                self._handle_group_events()
                self._maybe_auto_commit()
                batch = self._fetch(budget)
            except ZooKeeperUnavailableError as exc:
                # A ZooKeeper failover: records read before the error are dropped with their
                # positions, and read again once ZooKeeper answers.
                log.info("group %s: ZooKeeper unreachable during poll: %s", self.group_id, exc)
                self._positions = {tp: o for tp, o in positions.items() if tp in self._assigned}
                batch = empty_read_table(True)
                time.sleep(min(_COORDINATION_BACKOFF_S, max(0.0, deadline - time.monotonic())))
            remaining = deadline - time.monotonic()
            if batch.num_rows or remaining <= 0:
                return batch
            if self._member is not None:
                self._member.changed.wait(min(remaining, _IDLE_WAIT_S))
            else:
                time.sleep(min(remaining, _IDLE_WAIT_S))

    def _fetch(self, budget: int) -> pa.Table:
        """Up to ``budget`` records, partitions taken in rotating order (one snapshot per topic)."""
        if not self._assigned:
            return empty_read_table(True)
        missing = [tp for tp in self._assigned if tp not in self._positions]
        if missing:
            self._initialise_positions(missing)
        turn = self._next_partition % len(self._assigned)
        self._next_partition += 1
        order = self._assigned[turn:] + self._assigned[:turn]
        pieces: list[pa.Table] = []
        views: dict[str, dict[int, LeaderSnapshot]] = {}
        for tp in order:
            if budget <= 0:
                break
            topic, partition = tp
            if topic not in views:
                views[topic] = self.replicas.fetch_positions(
                    topic, [p for t, p in self._assigned if t == topic], skip_offline=True
                )
            view = views[topic].get(partition)
            if view is None:
                continue  # no leader right now (its brokers are down): read it once one is elected
            table, dt, high = view.table, view.snapshot, view.high_watermark
            stop = view.end_for(self.read_committed)
            position = self._positions[tp]
            if position > high:
                self._reset_position(tp, f"offset {position} is above the high watermark {high}")
                position = self._positions[tp]
            if position >= stop:
                continue
            window_end = min(stop, position + budget)
            window = {partition: (position, window_end)}
            piece = read_ranges(table, dt, window, include_headers=True, read_committed=self.read_committed)
            if piece.num_rows == 0 or piece.column("offset")[0].as_py() != position:
                start = table.log_start(dt, partition)
                if position < start:
                    self._reset_position(tp, f"offset {position} is below the log-start offset {start}")
                    continue
                if piece.num_rows == 0:  # a gap (compaction, transaction markers, aborted records): step over it
                    self._positions[tp] = window_end
                    continue
            if piece.num_rows:
                pieces.append(piece)
                budget -= piece.num_rows
                self._positions[tp] = piece.column("offset")[-1].as_py() + 1
        return pa.concat_tables(pieces) if pieces else empty_read_table(True)

    # -- commits -------------------------------------------------------------------------
    def commit(self, offsets: Mapping[TopicPartition, int] | None = None, metadata: str = "") -> None:
        """Commit ``offsets`` (default: the current positions) synchronously."""
        self._commit(offsets, metadata, retry=True)

    def _commit(self, offsets: Mapping[TopicPartition, int] | None, metadata: str, retry: bool) -> None:
        self._check_open()
        if self.group_id is None:
            raise GroupError("commit() needs a group id: Cluster.consumer(group_id=...)")
        if offsets is None:
            offsets = {tp: self._positions[tp] for tp in self._assigned if tp in self._positions}
        if not offsets:
            return
        commits = {(str(t), int(p)): OffsetCommit(int(o), metadata) for (t, p), o in offsets.items()}
        member = self._member
        group_id = self.group_id
        if member is None:
            send = functools.partial(self.coordinator.commit, group_id, commits)
        elif isinstance(member, ProtocolMember):  # OffsetCommit with generation and member id
            send = functools.partial(member.commit, commits)
        else:
            generation = member.assignment.generation if member.assignment is not None else NO_GENERATION - 1
            send = functools.partial(
                self.coordinator.commit,
                group_id,
                commits,
                generation=generation,
                member_id=member.member_id,
                member_key=member.key,
            )
        if retry:
            self._retry_coordination(send)
        else:
            send()
        self._last_auto_commit = time.monotonic()
        self._last_committed.update({tp: c.offset for tp, c in commits.items() if c.offset is not None})

    def _maybe_auto_commit(self) -> None:
        if not self.configs["enable.auto.commit"] or self.group_id is None:
            return
        if time.monotonic() - self._last_auto_commit >= int(self.configs["auto.commit.interval.ms"]) / 1000:
            moved = any(self._last_committed.get(tp) != o for tp, o in self._positions.items())
            if moved:  # an idle consumer adds no commits to the log; a failed one is retried next interval
                self._commit_quietly(retry=False)
            self._last_auto_commit = time.monotonic()

    # -- life cycle ----------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise ConsumerClosedError("This consumer is closed")

    def _leave(self) -> None:
        if self._member is not None:
            self._member.leave()
            self._member = None
        if self._zk is not None:
            self._zk.close()
            self._zk = None

    def close(self) -> None:
        """Commit (with auto-commit), leave the group and release the session."""
        if self._closed:
            return
        try:
            if self.configs["enable.auto.commit"] and self.group_id is not None and self._assigned:
                self._commit_quietly()
        finally:
            self._leave()
            self._closed = True

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
