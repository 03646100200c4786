"""One consumer group under Kafka's consumer group protocol (KIP-848), as its coordinator sees it.

Members heartbeat (ConsumerGroupHeartbeat); the coordinator computes every member's target
assignment with a server-side assignor and hands it out as the previous owners let go.

Group states (Kafka's names)::

    Empty --first member joins--> Reconciling --every member at its target--> Stable
    Stable --join, leave, expiry, subscription or partition-count change--> Reconciling
    any --last member gone--> Empty

(Kafka's ``Assigning`` — a new group epoch whose target is not computed yet — is never seen:
the target is computed in the heartbeat that raised the epoch.)

Member states: stable (at the assignment epoch, holding its whole target), unrevoked (holding
partitions outside its target: it is told its assignment without them and keeps its epoch
until its heartbeat no longer lists them), unreleased (at the assignment epoch, waiting for
partitions of its target another member still holds).

Invariants:

* the group epoch rises by one on every change of membership, subscriptions or subscribed
  partition counts, and starts above ``epoch_floor`` (the newest generation the offsets log
  has fenced for this group id), so epochs of a previous coordinator are never handed out again;
* the target assignment is the server assignor's answer for the group epoch (the assignment
  epoch), sticky to the previous target;
* a partition is in at most one member's assignment or pending revocation at a time: a
  member is given a partition only once its previous owner has revoked it — every partition
  is consumed by at most one member at any moment;
* a member's epoch advances to the assignment epoch only when it holds nothing outside its
  target; the epoch it had before is its ``previous_epoch`` (a heartbeat or commit that
  carries it is Kafka's lost-response case);
* a member silent for ``session_timeout_ms``, or holding partitions to revoke for longer than
  its rebalance timeout, is removed (its partitions go to the others);
* after a coordinator failover the members the previous coordinator published are restored
  holding their partitions (:meth:`ConsumerGroup.restore`); their heartbeats are fenced
  (FENCED_MEMBER_EPOCH), so they release everything and rejoin with epoch 0, and their
  partitions go to others only then or when their session runs out — a failover does not
  give a partition two owners;
* a static member (``instance_id``) leaving with epoch -2 keeps its assignment for its session
  timeout; a new member id with the instance id takes it over with its epoch; while the
  instance is held by a live member another member id is refused (UNRELEASED_INSTANCE_ID).

No I/O and no clock: every call takes ``now_ms``; topics are given as partition counts by the
coordinator, which publishes what :attr:`ConsumerGroup.changes` reports.
"""

from __future__ import annotations

import re
import uuid
from collections import Counter
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from sparklog.group.assignors import SERVER_ASSIGNORS, MemberSubscription, server_assign
from sparklog.model.topic import TopicPartition

__all__ = [
    "ASSIGNING",
    "EMPTY",
    "LEAVE_EPOCH",
    "RECONCILING",
    "STABLE",
    "STATIC_LEAVE_EPOCH",
    "ConsumerGroup",
    "ConsumerMember",
    "HeartbeatRequest",
    "HeartbeatResult",
]

EMPTY, ASSIGNING, RECONCILING, STABLE = "Empty", "Assigning", "Reconciling", "Stable"
LEAVE_EPOCH, STATIC_LEAVE_EPOCH = -1, -2


@dataclass(frozen=True)
class HeartbeatRequest:
    """A ConsumerGroupHeartbeat; ``None`` fields did not change since the member's last one."""

    member_id: str
    member_epoch: int
    client_id: str = ""
    client_host: str = ""
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: frozenset[TopicPartition] | None = None


@dataclass(frozen=True)
class HeartbeatResult:
    error: ErrorCode
    member_id: str | None = None
    member_epoch: int = -1
    assignment: frozenset[TopicPartition] | None = None  # None: unchanged since the last answer
    message: str | None = None


@dataclass
class ConsumerMember:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    topic_names: tuple[str, ...]
    topic_regex: str | None
    assignor: str | None
    last_seen_ms: int
    member_epoch: int = 0
    previous_epoch: int = -1
    assigned: set[TopicPartition] = field(default_factory=set)
    revoking: set[TopicPartition] = field(default_factory=set)
    revoke_deadline_ms: int = 0
    owned: frozenset[TopicPartition] = frozenset()  # as its last heartbeat that listed them said
    sent: frozenset[TopicPartition] | None = None  # the assignment it was last told
    left: bool = False  # a static member that left with epoch -2, its instance kept
    restored: bool = False  # known from the previous coordinator's record only: must rejoin

    def subscribed(self, topics: Mapping[str, int]) -> tuple[str, ...]:
        """The existing topics it subscribes to (by name, or matching its regex)."""
        names = {t for t in self.topic_names if t in topics}
        if self.topic_regex:
            pattern = _compile(self.topic_regex)
            if pattern is not None:
                names |= {t for t in topics if pattern.fullmatch(t)}
        return tuple(sorted(names))


def _compile(regex: str) -> re.Pattern[str] | None:
    try:
        return re.compile(regex)
    except re.error:
        return None


@dataclass
class ConsumerGroup:
    group_id: str
    session_timeout_ms: int
    epoch_floor: int = -1  # the newest generation the offsets log has fenced for the group id
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    static: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    target: dict[str, frozenset[TopicPartition]] = field(default_factory=dict)
    assignor: str = ""  # the server assignor of the current target
    partition_counts: dict[str, int] = field(default_factory=dict)  # of the subscribed topics
    changes: int = 0  # bumped on every change the coordinator publishes

    def __post_init__(self) -> None:
        self.group_epoch = self.assignment_epoch = max(self.group_epoch, self.epoch_floor)

    # -- views ----------------------------------------------------------------------------
    @property
    def state(self) -> str:
        if not self.members:
            return EMPTY
        if self.assignment_epoch < self.group_epoch:
            return ASSIGNING
        if all(self._settled(m) for m in self.members.values()):
            return STABLE
        return RECONCILING

    def _settled(self, member: ConsumerMember) -> bool:
        return (
            member.member_epoch == self.assignment_epoch
            and not member.revoking
            and member.assigned == self.target.get(member.member_id, frozenset())
        )

    def subscribed_topics(self) -> set[str]:
        return set(self.partition_counts)

    # -- the heartbeat ----------------------------------------------------------------------
    def heartbeat(
        self, now_ms: int, request: HeartbeatRequest, topics: Mapping[str, int], default_assignor: str
    ) -> HeartbeatResult:
        """One ConsumerGroupHeartbeat. ``topics``: partition count of every existing topic."""
        if request.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return self._leave(now_ms, request)
        if request.server_assignor is not None and request.server_assignor not in SERVER_ASSIGNORS:
            return HeartbeatResult(
                ErrorCode.unsupported_assignor,
                message=f"server assignor {request.server_assignor!r} is not one of {', '.join(SERVER_ASSIGNORS)}",
            )
        if request.member_epoch == 0:
            joined = self._join(now_ms, request)
            if isinstance(joined, HeartbeatResult):
                return joined
            member, full = joined, True
        else:
            checked = self._existing(request)
            if isinstance(checked, HeartbeatResult):
                return checked
            member, full = checked, request.owned is not None
            self._update(member, request)
        member.last_seen_ms = now_ms
        if request.owned is not None:
            member.owned = request.owned
        self._refresh_target(topics, default_assignor)
        self._reconcile(now_ms, member)
        assignment = frozenset(member.assigned)
        if full or assignment != member.sent:
            member.sent = assignment
            return HeartbeatResult(ErrorCode.none, member.member_id, member.member_epoch, assignment)
        return HeartbeatResult(ErrorCode.none, member.member_id, member.member_epoch)

    def _join(self, now_ms: int, request: HeartbeatRequest) -> ConsumerMember | HeartbeatResult:
        if request.rebalance_timeout_ms < 0 or request.owned or request.owned is None:
            return _invalid("a first heartbeat (epoch 0) carries the rebalance timeout and no owned partitions")
        if request.subscribed_topic_names is None and request.subscribed_topic_regex is None:
            return _invalid("a first heartbeat (epoch 0) carries subscribed topic names or a regex")
        if request.subscribed_topic_regex is not None and _compile(request.subscribed_topic_regex) is None:
            return HeartbeatResult(
                ErrorCode.invalid_regular_expression, message=f"bad regex {request.subscribed_topic_regex!r}"
            )
        member_id = request.member_id or str(uuid.uuid4())
        member = ConsumerMember(
            member_id,
            request.instance_id,
            request.rack_id,
            request.client_id,
            request.client_host,
            request.rebalance_timeout_ms,
            tuple(sorted(request.subscribed_topic_names or ())),
            request.subscribed_topic_regex,
            request.server_assignor,
            now_ms,
        )
        predecessor = None
        if request.instance_id is not None:
            holder = self.members.get(self.static.get(request.instance_id, ""))
            if holder is not None and holder.member_id != member_id:
                if not holder.left:
                    return HeartbeatResult(
                        ErrorCode.unreleased_instance_id,
                        message=f"instance {request.instance_id} is held by member {holder.member_id}",
                    )
                predecessor = holder
        previous = self.members.pop(member_id, None)
        if previous is not None:
            # A member that rejoins (fenced, or restarted with its id) starts from nothing.
            self.target.pop(member_id, None)
        if predecessor is not None:
            # Kafka's static rejoin: the new member id takes over the assignment and epoch.
            del self.members[predecessor.member_id]
            member.member_epoch, member.previous_epoch = predecessor.member_epoch, predecessor.previous_epoch
            member.assigned, member.revoking = predecessor.assigned, predecessor.revoking
            self.target[member_id] = self.target.pop(predecessor.member_id, frozenset())
        self.members[member_id] = member
        if request.instance_id is not None:
            self.static[request.instance_id] = member_id
        if predecessor is None or predecessor.topic_names != member.topic_names:
            self._bump()
        return member

    def _existing(self, request: HeartbeatRequest) -> ConsumerMember | HeartbeatResult:
        member = self.members.get(request.member_id)
        if member is None or member.left:
            return HeartbeatResult(
                ErrorCode.unknown_member_id,
                message=f"member {request.member_id} is not in group {self.group_id}; rejoin with epoch 0",
            )
        if member.restored:
            return HeartbeatResult(
                ErrorCode.fenced_member_epoch,
                message=f"group {self.group_id} has a new coordinator: member {member.member_id} rejoins with epoch 0",
            )
        if request.instance_id is not None and self.static.get(request.instance_id) != member.member_id:
            return HeartbeatResult(ErrorCode.fenced_instance_id, message=f"instance {request.instance_id} moved")
        epoch = request.member_epoch
        lost_response = (
            epoch == member.previous_epoch
            and epoch < member.member_epoch
            and (request.owned is None or request.owned <= member.assigned)
        )
        if epoch != member.member_epoch and not lost_response:
            return HeartbeatResult(
                ErrorCode.fenced_member_epoch,
                message=f"member {member.member_id} sent epoch {epoch}, its epoch is {member.member_epoch}",
            )
        return member

    def _update(self, member: ConsumerMember, request: HeartbeatRequest) -> None:
        changed = False
        if request.subscribed_topic_names is not None:
            names = tuple(sorted(request.subscribed_topic_names))
            changed |= names != member.topic_names
            member.topic_names = names
        if request.subscribed_topic_regex is not None:
            regex = request.subscribed_topic_regex or None
            changed |= regex != member.topic_regex
            member.topic_regex = regex
        if request.rebalance_timeout_ms >= 0:
            member.rebalance_timeout_ms = request.rebalance_timeout_ms
        if request.server_assignor is not None:
            member.assignor = request.server_assignor
        if changed:
            self._bump()

    def _leave(self, now_ms: int, request: HeartbeatRequest) -> HeartbeatResult:
        member = self.members.get(request.member_id)
        if member is None:
            return HeartbeatResult(
                ErrorCode.unknown_member_id, message=f"member {request.member_id} is not in group {self.group_id}"
            )
        if request.member_epoch == STATIC_LEAVE_EPOCH and member.instance_id is not None:
            member.left, member.last_seen_ms = True, now_ms
            self.changes += 1
        else:
            self._remove(member)
        return HeartbeatResult(ErrorCode.none, member.member_id, request.member_epoch)

    # -- assignment and reconciliation --------------------------------------------------
    def _bump(self) -> None:
        self.group_epoch += 1
        self.changes += 1

    def _refresh_target(self, topics: Mapping[str, int], default_assignor: str) -> None:
        subscriptions = [
            MemberSubscription(m.member_id, m.subscribed(topics), m.instance_id) for m in self.members.values()
        ]
        counts = {t: topics[t] for s in subscriptions for t in s.topics}
        if counts != self.partition_counts:
            self.partition_counts = counts
            if self.group_epoch == self.assignment_epoch:  # one bump per heartbeat, as Kafka
                self._bump()
        if self.assignment_epoch == self.group_epoch:
            return
        # Kafka's choice: the assignor most members ask for (ties by name), else the broker's default.
        wanted = Counter(m.assignor for m in self.members.values() if m.assignor)
        self.assignor = min(wanted, key=lambda a: (-wanted[a], a)) if wanted else default_assignor
        previous = {m: sorted(tps) for m, tps in self.target.items()}
        computed = server_assign(self.assignor, subscriptions, counts, previous)
        self.target = {m: frozenset(tps) for m, tps in computed.items()}
        self.assignment_epoch = self.group_epoch
        self.changes += 1

    def _reconcile(self, now_ms: int, member: ConsumerMember) -> None:
        """Move ``member`` towards its target as far as the other members let it."""
        if member.revoking:
            if member.owned & member.revoking:
                return  # still owns what it must give up
            member.revoking = set()
            self.changes += 1
        target = self.target.get(member.member_id, frozenset())
        revoke = member.assigned - target
        if revoke:
            member.assigned -= revoke
            member.revoking = revoke
            member.revoke_deadline_ms = now_ms + member.rebalance_timeout_ms
            self.changes += 1
            return
        held = {tp for m in self.members.values() if m is not member for tp in m.assigned | m.revoking}
        free = (target - member.assigned) - held
        if free:
            member.assigned |= free
            self.changes += 1
        if member.member_epoch != self.assignment_epoch:
            member.previous_epoch, member.member_epoch = member.member_epoch, self.assignment_epoch
            self.changes += 1

    def restore(self, now_ms: int, assignments: Mapping[str, frozenset[TopicPartition]]) -> None:
        """The members a previous coordinator published, each holding what it was assigned:
        until it rejoins (its first heartbeat is fenced; a member that rejoins has released
        everything) or its session runs out, nobody else is given its partitions."""
        for member_id, assigned in assignments.items():
            if member_id not in self.members:
                self.members[member_id] = ConsumerMember(
                    member_id, None, None, "", "", 0, (), None, None, now_ms, -1, -1, set(assigned), restored=True
                )
        self.changes += 1

    # -- liveness and offsets -----------------------------------------------------------
    def expire(self, now_ms: int) -> bool:
        """Remove members whose session ran out or that did not revoke in time; True if any."""
        gone = [
            m
            for m in self.members.values()
            if now_ms > m.last_seen_ms + self.session_timeout_ms or (m.revoking and now_ms > m.revoke_deadline_ms)
        ]
        for member in gone:
            self._remove(member)
        return bool(gone)

    def _remove(self, member: ConsumerMember) -> None:
        self.members.pop(member.member_id, None)
        self.target.pop(member.member_id, None)
        if member.instance_id is not None and self.static.get(member.instance_id) == member.member_id:
            del self.static[member.instance_id]
        self._bump()

    def check_offsets(
        self, member_id: str, member_epoch: int, partitions: AbstractSet[TopicPartition]
    ) -> ErrorCode | None:
        """Kafka's OffsetCommit/OffsetFetch checks for a member: None when it may commit or
        fetch ``partitions`` with ``member_epoch`` — its epoch, or its previous epoch for
        partitions it still holds (a response carrying its new epoch may not have arrived)."""
        member = self.members.get(member_id)
        if member is None or member.left:
            return ErrorCode.unknown_member_id
        if member.restored:
            return ErrorCode.stale_member_epoch  # its epoch is the previous coordinator's: it rejoins first
        if member_epoch == member.member_epoch:
            return None
        if member_epoch == member.previous_epoch and partitions <= member.assigned | member.revoking:
            return None
        return ErrorCode.stale_member_epoch


def _invalid(message: str) -> HeartbeatResult:
    return HeartbeatResult(ErrorCode.invalid_request, message=message)
