"""One consumer group under Kafka's classic group protocol, as its coordinator sees it.

States (Kafka's)::

    Empty --first join--> PreparingRebalance --everyone (re)joined / timeout--> CompletingRebalance
    CompletingRebalance --leader's SyncGroup--> Stable --join of a new/changed member, leave,
        session expiry--> PreparingRebalance
    PreparingRebalance --no member left--> Empty

Invariants:

* a generation's members, protocol and leader are fixed when its join phase completes; each
  completion raises the generation by one (above ``generation_floor``, the newest generation
  the offsets log has fenced), so a generation id is used once per group;
* in a generation every member gets the assignment the leader sent for it, and only the
  members that rejoined belong to it (the others are removed at the rebalance deadline,
  which is the largest rebalance timeout, Kafka's ``max.poll.interval.ms``);
* a member whose session timeout passes without a request (and that is not waiting in a
  join or sync) is removed; so is a member id handed out by MEMBER_ID_REQUIRED and not used;
* a static member (``group.instance.id``) that rejoins with a new member id replaces its
  predecessor, which is fenced (FENCED_INSTANCE_ID); while the group is Stable and its
  protocol would stay the same, it gets the current generation and assignment back without
  a rebalance (a leader gets the members with ``skip_assignment``, KIP-814).

No I/O and no clock: every call takes ``now_ms``; the coordinator persists and publishes
what :attr:`ProtocolGroup.changes` reports, and wakes waiters when :class:`Pending` results
complete (all under its lock).
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field, replace

from kio.schema.errors import ErrorCode

__all__ = [
    "COMPLETING",
    "DEAD",
    "EMPTY",
    "PREPARING",
    "STABLE",
    "JoinRequest",
    "JoinResult",
    "Member",
    "Pending",
    "ProtocolGroup",
    "SyncRequest",
    "SyncResult",
]

EMPTY, PREPARING, COMPLETING, STABLE, DEAD = "Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"


class Pending:
    """A response that completes later (a JoinGroup waiting for the join phase, a SyncGroup
    waiting for the leader's assignment)."""

    def __init__(self) -> None:
        self.done = False
        self.value: object = None

    def complete(self, value: object) -> None:
        if not self.done:
            self.done, self.value = True, value


@dataclass(frozen=True)
class JoinResult:
    error: ErrorCode
    member_id: str
    generation: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    members: tuple[tuple[str, str | None, bytes], ...] = ()  # to the leader only
    skip_assignment: bool = False


@dataclass(frozen=True)
class SyncResult:
    error: ErrorCode
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


@dataclass(frozen=True)
class JoinRequest:
    """A JoinGroup, as the protocol state machine needs it."""

    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    require_known_member_id: bool = True


@dataclass(frozen=True)
class SyncRequest:
    """A SyncGroup (``assignments`` from the leader only; ``protocol_*`` from v5 clients)."""

    member_id: str
    instance_id: str | None
    generation: int
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignments: tuple[tuple[str, bytes], ...] = ()


@dataclass
class Member:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    last_seen_ms: int
    assignment: bytes = b""
    join: Pending | None = None
    sync: Pending | None = None

    def metadata(self, protocol: str) -> bytes:
        return next((meta for name, meta in self.protocols if name == protocol), b"")

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.protocols]


@dataclass
class ProtocolGroup:
    group_id: str
    generation_floor: int = -1  # the newest generation the offsets log has fenced
    state: str = EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str = ""
    members: dict[str, Member] = field(default_factory=dict)
    static: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    pending_ids: dict[str, int] = field(default_factory=dict)  # MEMBER_ID_REQUIRED ids -> expiry
    rebalance_deadline_ms: int = 0
    join_delay_until_ms: int = 0  # group.initial.rebalance.delay.ms of a group that was empty
    changes: int = 0  # bumped on every change the coordinator publishes

    # -- joining ------------------------------------------------------------------------
    def join(self, now_ms: int, request: JoinRequest, initial_delay_ms: int) -> Pending:
        """A JoinGroup; the result completes now or when the join phase does."""
        pending = Pending()
        member_id, instance_id, protocol_type = request.member_id, request.instance_id, request.protocol_type
        protocols, client_id = request.protocols, request.client_id
        if self.state == DEAD:
            pending.complete(JoinResult(ErrorCode.coordinator_not_available, member_id))
            return pending
        if not protocols or not self._compatible(protocol_type, [name for name, _ in protocols]):
            pending.complete(JoinResult(ErrorCode.inconsistent_group_protocol, member_id))
            return pending
        known = self.members.get(member_id)
        if instance_id is not None and member_id and self.static.get(instance_id) not in (None, member_id):
            pending.complete(JoinResult(ErrorCode.fenced_instance_id, member_id))
            return pending
        if known is None and member_id and member_id not in self.pending_ids:
            pending.complete(JoinResult(ErrorCode.unknown_member_id, member_id))
            return pending
        if not member_id:
            # Member ids become znode names (DESIGN §4): the client id part keeps Kafka's look, path-safe.
            member_id = f"{re.sub(r'[^a-zA-Z0-9._-]', '_', client_id)[:100] or 'consumer'}-{uuid.uuid4()}"
            if instance_id is None and request.require_known_member_id:
                self.pending_ids[member_id] = now_ms + request.session_timeout_ms
                pending.complete(JoinResult(ErrorCode.member_id_required, member_id))
                return pending
        self.pending_ids.pop(member_id, None)
        member = Member(
            member_id,
            instance_id,
            client_id,
            request.client_host,
            request.session_timeout_ms,
            request.rebalance_timeout_ms,
            protocol_type,
            list(protocols),
            now_ms,
        )
        if known is not None:
            unchanged = known.protocols == member.protocols
            known.protocols, known.last_seen_ms = member.protocols, now_ms
            known.session_timeout_ms, known.rebalance_timeout_ms = (
                member.session_timeout_ms,
                member.rebalance_timeout_ms,
            )
            known.join = pending
            if self.state == STABLE and unchanged and member_id != self.leader:
                self._answer_current(known)
            elif self.state == COMPLETING and unchanged:
                known.join.complete(self._join_result(known, with_members=member_id == self.leader))
                known.join = None
            elif self.state != PREPARING:
                self._prepare(now_ms, initial_delay_ms)
            return pending
        predecessor_id = self.static.get(instance_id) if instance_id is not None else None
        predecessor = self.members.pop(predecessor_id, None) if predecessor_id else None
        member.join = pending
        if not self.members:
            self.protocol_type = protocol_type  # the group's type is its first member's (Kafka)
        self.members[member_id] = member
        if instance_id is not None:
            self.static[instance_id] = member_id
        self.changes += 1
        if predecessor is not None:
            self._fence(predecessor)
            member.assignment = predecessor.assignment
            if self.leader == predecessor.member_id:
                self.leader = member_id
            if self.state == STABLE and self._vote() == self.protocol:
                # A static restart (Kafka's rule: no rebalance while the group's protocol stays);
                # a leader gets the members with skip_assignment (KIP-814), its SyncGroup in
                # Stable returns the assignment it had.
                is_leader = self.leader == member_id
                member.join = None
                pending.complete(replace(self._join_result(member, with_members=is_leader), skip_assignment=is_leader))
                return pending
        if self.state != PREPARING:
            self._prepare(now_ms, initial_delay_ms)
        elif self.join_delay_until_ms:
            # Kafka's initial delay grows with each new member, up to the rebalance timeout.
            self.join_delay_until_ms = min(now_ms + initial_delay_ms, self.rebalance_deadline_ms)
        return pending

    def _compatible(self, protocol_type: str, names: list[str]) -> bool:
        if not self.members:
            return True
        if self.protocol_type is not None and protocol_type != self.protocol_type:
            return False
        return any(all(name in m.names for m in self.members.values()) for name in names)

    def _answer_current(self, member: Member) -> None:
        assert member.join is not None
        member.join.complete(self._join_result(member, with_members=False))
        member.join = None

    def _join_result(self, member: Member, *, with_members: bool) -> JoinResult:
        members: tuple[tuple[str, str | None, bytes], ...] = ()
        if with_members:
            assert self.protocol is not None
            members = tuple((m.member_id, m.instance_id, m.metadata(self.protocol)) for m in self.members.values())
        return JoinResult(
            ErrorCode.none,
            member.member_id,
            self.generation,
            self.protocol_type,
            self.protocol,
            self.leader,
            members,
        )

    def _prepare(self, now_ms: int, initial_delay_ms: int) -> None:
        was_empty = self.state == EMPTY
        self.state = PREPARING
        self.changes += 1
        timeout = max((m.rebalance_timeout_ms for m in self.members.values()), default=0)
        self.rebalance_deadline_ms = now_ms + timeout
        self.join_delay_until_ms = min(now_ms + initial_delay_ms, self.rebalance_deadline_ms) if was_empty else 0
        for member in self.members.values():
            if member.sync is not None:
                member.sync.complete(SyncResult(ErrorCode.rebalance_in_progress))
                member.sync = None

    def _fence(self, member: Member) -> None:
        for pending in (member.join, member.sync):
            if pending is not None:
                pending.complete(
                    JoinResult(ErrorCode.fenced_instance_id, member.member_id)
                    if pending is member.join
                    else SyncResult(ErrorCode.fenced_instance_id)
                )

    # -- completing the join phase ------------------------------------------------------
    def ready_to_complete(self, now_ms: int) -> bool:
        if self.state != PREPARING:
            return False
        if now_ms >= self.rebalance_deadline_ms:
            return True
        if self.join_delay_until_ms and now_ms < self.join_delay_until_ms:
            return False
        return all(m.join is not None for m in self.members.values())

    def complete_join(self) -> None:
        """End the join phase: drop members that did not rejoin, start the next generation."""
        for member in [m for m in self.members.values() if m.join is None]:
            self._remove(member)
        self.generation = max(self.generation, self.generation_floor) + 1
        self.changes += 1
        self.join_delay_until_ms = 0
        if not self.members:
            self.state, self.protocol, self.protocol_type, self.leader = EMPTY, None, None, ""
            return
        first = next(iter(self.members.values()))
        self.protocol_type = first.protocol_type
        self.protocol = self._vote()
        if self.leader not in self.members:
            self.leader = first.member_id
        self.state = COMPLETING
        for member in self.members.values():
            member.assignment = b""
            assert member.join is not None
            member.join.complete(self._join_result(member, with_members=member.member_id == self.leader))
            member.join = None

    def _vote(self) -> str:
        """Kafka's rule: among protocols every member supports, each member votes for the first
        of its own list; the most votes win (ties: the leader candidate's order)."""
        members = list(self.members.values())
        common = [name for name in members[0].names if all(name in m.names for m in members)]
        votes = {name: 0 for name in common}
        for member in members:
            votes[next(name for name in member.names if name in votes)] += 1
        return max(common, key=lambda name: votes[name])

    # -- syncing ------------------------------------------------------------------------
    def sync(self, now_ms: int, request: SyncRequest) -> Pending:
        pending = Pending()
        member_id = request.member_id
        error = self._check(member_id, request.instance_id, request.generation)
        if error is None and (
            (request.protocol_type is not None and request.protocol_type != self.protocol_type)
            or (request.protocol_name is not None and request.protocol_name != self.protocol)
        ):
            error = ErrorCode.inconsistent_group_protocol
        if error is None and self.state == PREPARING:
            error = ErrorCode.rebalance_in_progress
        if error is not None:
            pending.complete(SyncResult(error))
            return pending
        member = self.members[member_id]
        member.last_seen_ms = now_ms
        if self.state == STABLE:
            pending.complete(self._sync_result(member))
            return pending
        member.sync = pending
        if member_id == self.leader:
            given = dict(request.assignments)
            for other in self.members.values():
                other.assignment = given.get(other.member_id, b"")
            self.state = STABLE
            self.changes += 1
            for other in self.members.values():
                if other.sync is not None:
                    other.sync.complete(self._sync_result(other))
                    other.sync = None
        return pending

    def _sync_result(self, member: Member) -> SyncResult:
        return SyncResult(ErrorCode.none, member.assignment, self.protocol_type, self.protocol)

    # -- liveness -----------------------------------------------------------------------
    def heartbeat(self, now_ms: int, member_id: str, instance_id: str | None, generation: int) -> ErrorCode:
        error = self._check(member_id, instance_id, generation)
        if error is not None:
            return error
        self.members[member_id].last_seen_ms = now_ms
        return ErrorCode.rebalance_in_progress if self.state == PREPARING else ErrorCode.none

    def check_commit(self, member_id: str, instance_id: str | None, generation: int) -> ErrorCode | None:
        """Kafka's OffsetCommit checks: None when the member may commit in ``generation``."""
        error = self._check(member_id, instance_id, generation)
        if error is None and self.state == COMPLETING:
            return ErrorCode.rebalance_in_progress
        return error

    def _check(self, member_id: str, instance_id: str | None, generation: int) -> ErrorCode | None:
        if instance_id is not None and self.static.get(instance_id) not in (None, member_id):
            return ErrorCode.fenced_instance_id
        if member_id not in self.members:
            return ErrorCode.unknown_member_id
        if generation != self.generation:
            return ErrorCode.illegal_generation
        return None

    def leave(self, now_ms: int, member_id: str, instance_id: str | None) -> ErrorCode:
        if instance_id is not None:
            current = self.static.get(instance_id)
            if current is None:
                return ErrorCode.unknown_member_id
            if member_id and current != member_id:
                return ErrorCode.fenced_instance_id
            member_id = current
        member = self.members.get(member_id)
        if member is None:
            if self.pending_ids.pop(member_id, None) is not None:
                return ErrorCode.none
            return ErrorCode.unknown_member_id
        self._remove(member)
        self._after_removal(now_ms)
        return ErrorCode.none

    def expire(self, now_ms: int) -> bool:
        """Remove members whose session timed out and unused member ids; True if any."""
        self.pending_ids = {m: t for m, t in self.pending_ids.items() if t > now_ms}
        expired = [
            m
            for m in self.members.values()
            if m.join is None and m.sync is None and now_ms > m.last_seen_ms + m.session_timeout_ms
        ]
        for member in expired:
            self._remove(member)
        if self.state == COMPLETING and now_ms >= self.rebalance_deadline_ms + max(
            (m.session_timeout_ms for m in self.members.values()), default=0
        ):
            # The leader never sent the assignment: start over.
            expired.append(self.members.get(self.leader) or next(iter(self.members.values())))
            self._prepare(now_ms, 0)
        elif expired:
            self._after_removal(now_ms)
        return bool(expired)

    def _remove(self, member: Member) -> None:
        self.members.pop(member.member_id, None)
        if member.instance_id is not None and self.static.get(member.instance_id) == member.member_id:
            del self.static[member.instance_id]
        for pending in (member.join, member.sync):
            if pending is not None:
                pending.complete(
                    JoinResult(ErrorCode.unknown_member_id, member.member_id)
                    if pending is member.join
                    else SyncResult(ErrorCode.unknown_member_id)
                )
        self.changes += 1

    def _after_removal(self, now_ms: int) -> None:
        if self.state in (STABLE, COMPLETING):
            if self.members:
                self._prepare(now_ms, 0)
            else:
                self.state, self.generation = EMPTY, max(self.generation, self.generation_floor) + 1
                self.protocol, self.protocol_type, self.leader = None, None, ""
        # PREPARING: the coordinator's tick completes the join phase when the rest rejoined.
