"""The broker's group coordinator (DESIGN §8, §14): the groups whose ``__consumer_offsets``
partition this broker leads, under Kafka's classic group protocol (and, through
:class:`~sparklog.broker.groups.consumer_coordinator.ConsumerGroups`, its consumer protocol).

Invariants:

* a group is coordinated by the leader of its offsets partition only; any other broker
  answers NOT_COORDINATOR, and a broker that stops leading a partition drops its groups
  (their waiting requests get NOT_COORDINATOR; members find the new coordinator and rejoin);
* one protocol per group: classic members are refused (INCONSISTENT_GROUP_PROTOCOL) while the
  group has consumer-protocol members, and the other way round;
* one membership system per group: groups are published to ``/consumers`` for sparklog's
  tools, and a group whose members use sparklog's ZooKeeper membership is refused
  (:mod:`sparklog.metadata.group_publisher`);
* a new generation is fenced in the offsets log (generation marker) by the publisher, and a
  group loaded after a failover continues above the newest fenced generation, so commits of
  the old coordinator's generations are refused everywhere.

Requests wait (JoinGroup for the join phase, SyncGroup for the leader's assignment) on the
group's condition; a ticker expires sessions and ends join phases, a publisher thread writes
ZooKeeper and the generation markers outside the groups' locks.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import TypeVar

from kio.schema.errors import ErrorCode

from sparklog import clock
from sparklog.broker.groups.consumer_coordinator import ConsumerGroups
from sparklog.broker.groups.group import (
    EMPTY,
    STABLE,
    JoinRequest,
    JoinResult,
    Pending,
    ProtocolGroup,
    SyncRequest,
    SyncResult,
)
from sparklog.broker.groups.offset_log import OffsetLog
from sparklog.config import ClusterConfig
from sparklog.errors import (
    FencedInstanceIdError,
    GroupIdNotFoundError,
    IllegalGenerationError,
    NotCoordinatorError,
    NotLeaderError,
    RebalanceInProgressError,
    SparklogError,
    UnknownMemberError,
)
from sparklog.group.consumer_protocol import (
    CONSUMER,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from sparklog.group.coordinator import GroupCoordinator
from sparklog.log.group_offsets import NO_GENERATION
from sparklog.metadata.group_activity import GroupActivity
from sparklog.metadata.group_publisher import GroupPublisher
from sparklog.metadata.zkdata import GroupStateRecord, MemberRecord
from sparklog.model.group_ids import validate_instance_id
from sparklog.model.topic import OFFSETS_TOPIC, TopicPartition
from sparklog.runtime.replica_manager import ReplicaManager

__all__ = ["BrokerGroups", "GroupView"]

log = logging.getLogger(__name__)
TICK_S = 0.05
OWNERSHIP_CHECK_MS = 1000
_T = TypeVar("_T")


@dataclass
class _Entry:
    group: ProtocolGroup
    cond: threading.Condition = field(default_factory=threading.Condition)
    published: int = -1
    marked: int = -1


@dataclass(frozen=True)
class GroupView:
    """What DescribeGroups and ListGroups show of a group this broker coordinates."""

    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: tuple[tuple[str, str | None, str, str, bytes, bytes], ...]  # id, instance, client, host, meta, assignment
    group_type: str = "classic"  # Kafka's: "consumer" for the consumer protocol's groups (KIP-848)


class BrokerGroups:
    """Every group this broker coordinates. Thread-safe."""

    def __init__(self, replicas: ReplicaManager, broker_id: int, config: ClusterConfig | None = None) -> None:
        self.replicas = replicas
        self.broker_id = broker_id
        self.config = config or replicas.config
        self.library = GroupCoordinator(replicas)
        self.publisher = GroupPublisher(replicas.zk, broker_id)
        self.activity = GroupActivity(replicas.zk)
        self._lock = threading.Lock()
        self._offsets: OffsetLog | None = None
        self._entries: dict[str, _Entry] = {}
        self._dirty = threading.Event()
        self._last_ownership_check_ms = 0
        self.consumer = ConsumerGroups(self)

    # -- placement -----------------------------------------------------------------------
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

    def generation_floor(self, group_id: str) -> int:
        """The newest generation fenced for the group id, in the offsets log or ZooKeeper's record."""
        record = self.published_record(group_id)
        return max(self.offsets.generation(group_id), record.generation if record is not None else -1)

    def published_record(self, group_id: str) -> GroupStateRecord | None:
        """The group's state as its last coordinator (or leader member) published it."""
        record, _ = self.library.registry.state_record(group_id)
        return record

    def has_classic_members(self, group_id: str) -> bool:
        entry = self._existing(group_id)
        if entry is None:
            return False
        with entry.cond:
            return bool(entry.group.members)

    def mark_dirty(self) -> None:
        """A group changed: the publisher thread writes it out."""
        self._dirty.set()

    # -- the group protocol ----------------------------------------------------------------
    def join(self, group_id: str, request: JoinRequest) -> JoinResult:
        self.check_coordinator(group_id)
        low, high = self.config.group_min_session_timeout_ms, self.config.group_max_session_timeout_ms
        if not low <= request.session_timeout_ms <= high:
            return JoinResult(ErrorCode.invalid_session_timeout, request.member_id)
        if self.consumer.has_members(group_id):
            return JoinResult(ErrorCode.inconsistent_group_protocol, request.member_id)
        # A MEMBER_ID_REQUIRED round adds no member: the group is claimed when one joins.
        claim = bool(request.member_id or request.instance_id is not None or not request.require_known_member_id)
        entry = self._entry(group_id, claim=claim)
        delay_ms = self.config.group_initial_rebalance_delay_ms
        gone = JoinResult(ErrorCode.not_coordinator, request.member_id)
        return self._wait(entry, lambda now: entry.group.join(now, request, delay_ms), gone)

    def sync(self, group_id: str, request: SyncRequest) -> SyncResult:
        self.check_coordinator(group_id)
        entry = self._existing(group_id)
        if entry is None:
            return SyncResult(ErrorCode.unknown_member_id)
        return self._wait(entry, lambda now: entry.group.sync(now, request), SyncResult(ErrorCode.not_coordinator))

    def heartbeat(self, group_id: str, member_id: str, instance_id: str | None, generation: int) -> ErrorCode:
        self.check_coordinator(group_id)
        entry = self._existing(group_id)
        if entry is None:
            return ErrorCode.unknown_member_id
        with entry.cond:
            return entry.group.heartbeat(clock.now_ms(), member_id, instance_id, generation)

    def leave(self, group_id: str, members: Sequence[tuple[str, str | None]]) -> list[ErrorCode]:
        self.check_coordinator(group_id)
        entry = self._existing(group_id)
        if entry is None:
            return [ErrorCode.unknown_member_id for _ in members]
        with entry.cond:
            now = clock.now_ms()
            codes = [entry.group.leave(now, member_id, instance_id) for member_id, instance_id in members]
            self._advance(entry, now)
            return codes

    def check_member(
        self,
        group_id: str,
        member_id: str,
        generation: int,
        instance_id: str | None,
        partitions: AbstractSet[TopicPartition] = frozenset(),
    ) -> int:
        """Kafka's OffsetCommit checks (raising ``UnknownMemberError``, ``IllegalGenerationError``,
        ``FencedInstanceIdError``, ``RebalanceInProgressError``; for a consumer-protocol group,
        where the generation is the member epoch, ``StaleMemberEpochError``); generation -1 with
        no member id is a standalone commit, accepted only while the group has no members.

        Returns the generation the offsets log fences the commit with: ``generation``, except
        for consumer-protocol members, whose epochs differ from member to member (one still
        reconciling commits below the others' epochs) and are checked here only (NO_GENERATION)."""
        if (generation >= 0 or member_id) and self.consumer.check_offsets(group_id, member_id, generation, partitions):
            return NO_GENERATION
        self._check_classic_member(group_id, member_id, generation, instance_id)
        return generation

    def _check_classic_member(self, group_id: str, member_id: str, generation: int, instance_id: str | None) -> None:
        entry = self._existing(group_id)
        if generation < 0 and not member_id:
            if self.active(group_id):
                raise UnknownMemberError(f"Group {group_id} has members: a commit from outside it is refused")
            return
        if entry is None:
            registry = self.library.registry
            if not registry.exists(group_id):
                # Kafka: GROUP_ID_NOT_FOUND (OffsetCommit v9+; ILLEGAL_GENERATION before).
                raise GroupIdNotFoundError(f"Group {group_id} does not exist; member {member_id} cannot commit for it")
            registry.check_commit(group_id, generation, member_id, instance_id or member_id)  # a ZooKeeper member
            return
        with entry.cond:
            code = entry.group.check_commit(member_id, instance_id, generation)
        if code is None:
            return
        error = {
            ErrorCode.fenced_instance_id: FencedInstanceIdError,
            ErrorCode.illegal_generation: IllegalGenerationError,
            ErrorCode.rebalance_in_progress: RebalanceInProgressError,
        }.get(code, UnknownMemberError)
        raise error(f"Commit of member {member_id} (generation {generation}) in group {group_id}: {code.name}")

    def active(self, group_id: str) -> bool:
        """Whether the group has members, through the protocol or sparklog's ZooKeeper
        membership (a watched cache: no ZooKeeper round trip per standalone commit)."""
        if self.consumer.has_members(group_id):
            return True
        entry = self._existing(group_id)
        if entry is not None:
            with entry.cond:
                if entry.group.members:
                    return True  # claimed by us: no ZooKeeper member can be in it meanwhile
        return self.activity.presence(group_id).active

    def record_group(self, group_id: str) -> None:
        """Make a group that only has offsets known to ``sparklog groups list`` (its znodes)."""
        if not self.activity.presence(group_id).recorded:
            self.library.registry.ensure_group(group_id)
            self.activity.forget(group_id)

    def subscribed_topics(self, group_id: str) -> set[str]:
        """Topics the group's current members subscribe to (consumer protocol)."""
        entry = self._existing(group_id)
        if entry is None:
            return self.consumer.subscribed_topics(group_id)
        with entry.cond:
            group = entry.group
            return {t for m in group.members.values() for t in decode_subscription(m.metadata(group.protocol or ""))[0]}

    def view(self, group_id: str) -> GroupView | None:
        consumer = self.consumer.view(group_id)
        if consumer is not None:
            return GroupView(
                group_id,
                consumer.state,
                CONSUMER,
                consumer.assignor,
                tuple(
                    (
                        m.member_id,
                        m.instance_id,
                        m.client_id,
                        m.client_host,
                        encode_subscription(list(m.topic_names)),
                        encode_assignment(sorted(m.assigned)),
                    )
                    for m in consumer.members
                ),
                group_type=CONSUMER,
            )
        entry = self._existing(group_id)
        if entry is None:
            return None
        with entry.cond:
            g = entry.group
            members = tuple(
                (m.member_id, m.instance_id, m.client_id, m.client_host, m.metadata(g.protocol or ""), m.assignment)
                for m in g.members.values()
            )
            return GroupView(group_id, g.state, g.protocol_type or "", g.protocol or "", members)

    def coordinated(self) -> list[GroupView]:
        with self._lock:
            ids = sorted(set(self._entries) | set(self.consumer.coordinated()))
        return [v for v in (self.view(g) for g in ids) if v is not None]

    def forget(self, group_id: str) -> None:
        """A deleted group: nothing of it stays in memory."""
        self.consumer.forget(group_id)
        with self._lock:
            self._entries.pop(group_id, None)

    # -- internals ------------------------------------------------------------------------
    def _existing(self, group_id: str) -> _Entry | None:
        with self._lock:
            return self._entries.get(group_id)

    def _entry(self, group_id: str, *, claim: bool) -> _Entry:
        entry = self._existing(group_id)
        if entry is not None and (entry.group.members or not claim):
            return entry
        if claim:
            # One membership system: an empty group is claimed again (its znodes were withdrawn);
            # refused (InconsistentGroupProtocolError) while ZooKeeper members hold it.
            self.publisher.claim(group_id)
        if entry is not None:
            return entry
        floor = self.generation_floor(group_id)
        with self._lock:
            entry = self._entries.get(group_id)
            if entry is None:
                entry = self._entries[group_id] = _Entry(ProtocolGroup(group_id, generation_floor=floor))
                entry.group.generation = max(floor, 0)
            return entry

    def _wait(self, entry: _Entry, start: Callable[[int], Pending], gone: _T) -> _T:
        with entry.cond:
            now = clock.now_ms()
            pending = start(now)
            self._advance(entry, now)
            while not pending.done:
                if self._existing(entry.group.group_id) is not entry:
                    return gone
                entry.cond.wait(TICK_S * 4)
            return pending.value  # type: ignore[return-value]

    def _advance(self, entry: _Entry, now_ms: int) -> None:
        """Under ``entry.cond``: end a join phase that is ready, wake waiters, note changes."""
        group = entry.group
        if group.ready_to_complete(now_ms):
            group.complete_join()
        if group.changes != entry.published:
            self._dirty.set()
        entry.cond.notify_all()

    def tick(self) -> None:
        """Expire sessions, end join phases, and drop groups whose partition moved away."""
        now = clock.now_ms()
        with self._lock:
            entries = list(self._entries.values())
        check = now - self._last_ownership_check_ms >= OWNERSHIP_CHECK_MS
        if check:
            self._last_ownership_check_ms = now
        self.consumer.tick(now, check)
        for entry in entries:
            if check and not self._still_ours(entry):
                continue
            with entry.cond:
                entry.group.expire(now)
                self._advance(entry, now)

    def _still_ours(self, entry: _Entry) -> bool:
        group_id = entry.group.group_id
        try:
            self.check_coordinator(group_id)
            return True
        except NotCoordinatorError:
            log.info("broker %s no longer coordinates group %s", self.broker_id, group_id)
        with self._lock:
            self._entries.pop(group_id, None)
        with entry.cond:
            entry.cond.notify_all()  # waiters see the entry gone: NOT_COORDINATOR
        try:
            self.publisher.release(group_id)
        except SparklogError as exc:
            log.warning("could not release group %s: %s", group_id, exc)
        return False

    def publish_changes(self) -> None:
        """Write changed groups to ZooKeeper and fence their new generations (publisher thread)."""
        self._dirty.clear()
        if not self.consumer.publish():
            self._dirty.set()
        with self._lock:
            entries = list(self._entries.values())
        for entry in entries:
            with entry.cond:
                group = entry.group
                if group.changes == entry.published:
                    continue
                changes, generation, state = group.changes, group.generation, group.state
                record, members = self._records(group)
            try:
                if state != EMPTY and generation > entry.marked:
                    self.offsets.mark_generation(group.group_id, generation)
                    entry.marked = generation
                if state == EMPTY:
                    self.publisher.withdraw(group.group_id, record)
                else:
                    self.publisher.publish(group.group_id, record, members)
                entry.published = changes
            except SparklogError as exc:
                log.warning("could not publish group %s: %s", group.group_id, exc)
                self._dirty.set()

    def _records(self, group: ProtocolGroup) -> tuple[GroupStateRecord, list[MemberRecord]]:
        members, keys, assignment = [], {}, {}
        for m in group.members.values():
            topics, _owned = decode_subscription(m.metadata(group.protocol or "") or m.protocols[0][1])
            instance = m.instance_id if m.instance_id is not None and _path_safe(m.instance_id) else None
            record = MemberRecord(
                member_id=m.member_id,
                client_id=m.client_id,
                host=m.client_host,
                topics=topics,
                pattern=None,
                instance_id=instance,
                session_timeout_ms=m.session_timeout_ms,
                rebalance_timeout_ms=m.rebalance_timeout_ms,
                protocols=m.names,
                coordinator=self.broker_id,
            )
            members.append(record)
            keys[record.key] = m.member_id
            if group.state == STABLE:
                assignment[record.key] = [[t, p] for t, p in decode_assignment(m.assignment)]
        leader = group.members.get(group.leader)
        state = GroupStateRecord(
            state=group.state,
            generation=group.generation,
            protocol=group.protocol or "",
            leader=(leader.instance_id or leader.member_id) if leader is not None else "",
            members=keys,
            assignment=assignment,
        )
        return state, members

    def run(self, stop: threading.Event) -> None:
        """The ticker loop (a broker thread)."""
        while not stop.wait(TICK_S):
            try:
                self.tick()
            except Exception:  # keep ticking: one group's failure must not stop the others
                log.exception("group coordinator tick failed")

    def run_publisher(self, stop: threading.Event) -> None:
        while not stop.is_set():
            if self._dirty.wait(0.5):
                self.publish_changes()


def _path_safe(value: str) -> bool:
    try:
        validate_instance_id(value)
        return True
    except SparklogError:
        return False
