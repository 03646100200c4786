"""The broker's coordinator of consumer-protocol groups (KIP-848, DESIGN §8): the groups whose
``__consumer_offsets`` partition this broker leads and whose members heartbeat with
ConsumerGroupHeartbeat. The protocol itself is :mod:`sparklog.broker.groups.consumer_group`.

Invariants:

* only the leader of the group's offsets partition coordinates it
  (:meth:`BrokerGroups.check_coordinator`); a broker that stops leading it drops the group;
* one group is one group: a group id whose classic members are live refuses consumer-protocol
  members (GROUP_ID_NOT_FOUND, "not a consumer group", Kafka 4's answer when a group may not be
  converted) and the classic coordinator refuses classic members while this one has members
  (INCONSISTENT_GROUP_PROTOCOL); a group held by sparklog's ZooKeeper membership is refused
  as classic groups are (the group's leader znode is claimed);
* membership lives in memory: after a coordinator failover the group starts afresh, its epoch
  above the newest generation marker of the offsets log and the previous coordinator's
  published epoch (so no epoch is handed out twice for a group id); the members that record
  names are restored holding their partitions and fenced (FENCED_MEMBER_EPOCH) when they
  heartbeat, so they release and rejoin with epoch 0 (Kafka's clients do so) before anybody
  else gets their partitions; committed offsets are in the offsets log and intact;
* groups are published to ``/consumers`` for sparklog's tools (state, members, assignment) by
  the group publisher thread, as the classic groups are.

All of a broker's consumer groups share one lock: a heartbeat is a short computation; the
topic lookups (ZooKeeper, cached for a second) and the claim are made outside it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Protocol

from kio.schema.errors import ErrorCode

from sparklog import clock
from sparklog.broker.groups.consumer_group import (
    ASSIGNING,
    EMPTY,
    RECONCILING,
    STABLE,
    ConsumerGroup,
    HeartbeatRequest,
    HeartbeatResult,
)
from sparklog.config import ClusterConfig
from sparklog.errors import NotCoordinatorError, SparklogError, StaleMemberEpochError, UnknownMemberError
from sparklog.group.assignors import SERVER_ASSIGNORS
from sparklog.metadata.group_publisher import GroupPublisher
from sparklog.metadata.zkdata import GroupStateRecord, MemberRecord
from sparklog.model.group_ids import validate_instance_id
from sparklog.model.topic import TopicPartition

__all__ = ["ConsumerGroupView", "ConsumerGroups", "ConsumerMemberView", "GroupHost"]

log = logging.getLogger(__name__)
TOPICS_MAX_AGE_MS = 1000


class GroupHost(Protocol):
    """What consumer groups use of the broker's group coordinator (``BrokerGroups``)."""

    broker_id: int
    config: ClusterConfig
    publisher: GroupPublisher

    def check_coordinator(self, key: str) -> int: ...
    def has_classic_members(self, group_id: str) -> bool: ...
    def generation_floor(self, group_id: str) -> int: ...
    def published_record(self, group_id: str) -> GroupStateRecord | None: ...
    def mark_dirty(self) -> None: ...


@dataclass(frozen=True)
class ConsumerMemberView:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    topic_names: tuple[str, ...]
    topic_regex: str | None
    assigned: frozenset[TopicPartition]
    target: frozenset[TopicPartition]


@dataclass(frozen=True)
class ConsumerGroupView:
    """What ConsumerGroupDescribe, DescribeGroups and ListGroups show of a consumer group."""

    group_id: str
    state: str
    group_epoch: int
    assignment_epoch: int
    assignor: str
    members: tuple[ConsumerMemberView, ...]


class ConsumerGroups:
    """Every consumer-protocol group this broker coordinates. Thread-safe."""

    def __init__(self, groups: GroupHost) -> None:
        self.groups = groups
        self._lock = threading.Lock()
        self._groups: dict[str, ConsumerGroup] = {}
        self._published: dict[str, int] = {}

    def heartbeat(self, group_id: str, request: HeartbeatRequest, topics: Mapping[str, int]) -> HeartbeatResult:
        """One ConsumerGroupHeartbeat; ``topics``: partition count of every existing topic."""
        groups = self.groups
        groups.check_coordinator(group_id)
        if groups.has_classic_members(group_id):
            return HeartbeatResult(
                ErrorCode.group_id_not_found,
                message=f"Group {group_id} is not a consumer group: it has members of the classic protocol; "
                "use group.protocol=classic or another group id",
            )
        group = self._group(group_id, joining=request.member_epoch == 0)
        if group is None:
            return HeartbeatResult(
                ErrorCode.unknown_member_id,
                message=f"member {request.member_id} is not in group {group_id} (coordinator moved?); rejoin",
            )
        with self._lock:
            result = group.heartbeat(clock.now_ms(), request, topics, SERVER_ASSIGNORS[0])
            changed = group.changes != self._published.get(group_id)
        if changed:
            groups.mark_dirty()
        return result

    def _group(self, group_id: str, *, joining: bool) -> ConsumerGroup | None:
        with self._lock:
            group = self._groups.get(group_id)
            if group is not None and (group.members or not joining):
                return group
        if not joining:
            return group
        # One membership system: refused (InconsistentGroupProtocolError) while ZooKeeper members hold it.
        self.groups.publisher.claim(group_id)
        if group is not None:
            return group
        floor = self.groups.generation_floor(group_id)
        session_ms = self.groups.config.group_consumer_session_timeout_ms
        fresh = ConsumerGroup(group_id, session_ms, epoch_floor=floor)
        record = self.groups.published_record(group_id)
        if record is not None and _of_consumer_group(record):
            # A coordinator failover (or move): the previous coordinator's members keep their
            # partitions until they rejoin or expire.
            held = {key: frozenset((str(t), int(p)) for t, p in tps) for key, tps in record.assignment.items()}
            fresh.restore(clock.now_ms(), held)
        with self._lock:
            return self._groups.setdefault(group_id, fresh)

    # -- what other parts of the coordinator ask -----------------------------------------------
    def has_members(self, group_id: str) -> bool:
        with self._lock:
            group = self._groups.get(group_id)
            return group is not None and bool(group.members)

    def check_offsets(
        self, group_id: str, member_id: str, member_epoch: int, partitions: AbstractSet[TopicPartition]
    ) -> bool:
        """Kafka's OffsetCommit/OffsetFetch checks for a consumer group: False when the group is
        not one of ours (the classic checks apply); raises ``UnknownMemberError`` or
        ``StaleMemberEpochError``."""
        with self._lock:
            group = self._groups.get(group_id)
            if group is None or not group.members:
                return False
            code = group.check_offsets(member_id, member_epoch, partitions)
        if code is ErrorCode.stale_member_epoch:
            raise StaleMemberEpochError(
                f"Member {member_id} of group {group_id} used epoch {member_epoch}, which is not its current one; "
                "heartbeat and retry"
            )
        if code is not None:
            raise UnknownMemberError(f"Member {member_id} is not in consumer group {group_id}; rejoin")
        return True

    def subscribed_topics(self, group_id: str) -> set[str]:
        with self._lock:
            group = self._groups.get(group_id)
            return group.subscribed_topics() if group is not None and group.members else set()

    def view(self, group_id: str) -> ConsumerGroupView | None:
        with self._lock:
            group = self._groups.get(group_id)
            if group is None or not group.members:
                return None
            members = tuple(
                ConsumerMemberView(
                    m.member_id,
                    m.instance_id,
                    m.rack_id,
                    m.member_epoch,
                    m.client_id,
                    m.client_host,
                    tuple(m.subscribed(group.partition_counts)) if m.topic_regex else m.topic_names,
                    m.topic_regex,
                    frozenset(m.assigned),
                    group.target.get(m.member_id, frozenset()),
                )
                for m in group.members.values()
            )
            return ConsumerGroupView(
                group_id, group.state, group.group_epoch, group.assignment_epoch, group.assignor, members
            )

    def coordinated(self) -> list[str]:
        with self._lock:
            return sorted(g for g, group in self._groups.items() if group.members)

    def forget(self, group_id: str) -> None:
        with self._lock:
            self._groups.pop(group_id, None)
            self._published.pop(group_id, None)

    # -- ticking and publishing -----------------------------------------------------------------
    def tick(self, now_ms: int, check_ownership: bool) -> None:
        """Expire members; drop groups whose offsets partition moved away."""
        with self._lock:
            ids = list(self._groups)
        for group_id in ids:
            if check_ownership and not self._still_ours(group_id):
                continue
            with self._lock:
                group = self._groups.get(group_id)
                if group is not None and group.expire(now_ms):
                    self.groups.mark_dirty()

    def _still_ours(self, group_id: str) -> bool:
        try:
            self.groups.check_coordinator(group_id)
            return True
        except NotCoordinatorError:
            log.info("broker %s no longer coordinates consumer group %s", self.groups.broker_id, group_id)
        self.forget(group_id)
        try:
            self.groups.publisher.release(group_id)
        except SparklogError as exc:
            log.warning("could not release group %s: %s", group_id, exc)
        return False

    def publish(self) -> bool:
        """Write changed groups to ZooKeeper (publisher thread); False if one failed."""
        ok = True
        with self._lock:
            ids = [g for g, group in self._groups.items() if group.changes != self._published.get(g)]
        for group_id in ids:
            with self._lock:
                group = self._groups.get(group_id)
                if group is None:
                    continue
                changes, state = group.changes, group.state
                record, members = self._records(group)
            try:
                if state == EMPTY:
                    self.groups.publisher.withdraw(group_id, record)
                else:
                    self.groups.publisher.publish(group_id, record, members)
                with self._lock:
                    self._published[group_id] = changes
            except SparklogError as exc:
                log.warning("could not publish consumer group %s: %s", group_id, exc)
                ok = False
        return ok

    def _records(self, group: ConsumerGroup) -> tuple[GroupStateRecord, list[MemberRecord]]:
        members = [
            MemberRecord(
                member_id=m.member_id,
                client_id=m.client_id,
                host=m.client_host,
                topics=list(m.topic_names),
                pattern=m.topic_regex,
                instance_id=None,  # keys stay member ids: instance ids need not be path-safe
                session_timeout_ms=group.session_timeout_ms,
                rebalance_timeout_ms=m.rebalance_timeout_ms,
                protocols=[group.assignor],
                coordinator=self.groups.broker_id,
            )
            for m in group.members.values()
            if _path_safe(m.member_id)
        ]
        state = GroupStateRecord(
            state=group.state,
            generation=group.group_epoch,
            protocol=group.assignor,
            members={m.member_id: m.member_id for m in members},
            assignment={
                m.member_id: [[t, p] for t, p in sorted(m.assigned)] for m in group.members.values() if m.assigned
            },
        )
        return state, members


def _of_consumer_group(record: GroupStateRecord) -> bool:
    """Whether a published record is a live consumer-protocol group's: its states and no
    leader (a classic group in these states always has one)."""
    return record.state in (STABLE, RECONCILING, ASSIGNING) and not record.leader and bool(record.assignment)


def _path_safe(member_id: str) -> bool:
    """Member ids become znode names (DESIGN §4); Kafka's clients' ids (UUIDs) always are."""
    try:
        validate_instance_id(member_id)
        return True
    except SparklogError:
        return False
