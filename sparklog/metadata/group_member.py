"""The group membership recipe: one consumer's life in a consumer group (DESIGN §8).

Member states (:attr:`GroupMember.status`)::

    UNJOINED --join()--> JOINED (no assignment yet) --sync()--> ASSIGNED(generation g)
    ASSIGNED --leader starts a rebalance--> REVOKING (sync() says "revoke": commit, then ack())
    REVOKING --ack()--> JOINED --new generation--> ASSIGNED(g+1)
    any --session expired--> JOINED again under a new member id (dynamic members)
    any --another process took our group.instance.id--> FENCED (terminal)
    any --leave()--> LEFT (terminal)

Group states, written by the leader only: ``Empty -> PreparingRebalance -> CompletingRebalance
-> Stable``. The leader is the member holding ``/consumers/<g>/leader``; it runs in a thread of
its own (watch callbacks only wake it) and, on any change of membership, subscriptions or
partition counts:

1. records ``PreparingRebalance`` (generation g, old assignment) and waits until every live
   member that owns partitions acknowledged (it committed and stopped fetching), or the
   rebalance timeout passed (stragglers are left out of the next generation);
2. computes the assignment with the pure assignor, records ``CompletingRebalance`` (g+1),
   runs ``on_generation(g+1)`` (the Delta generation marker that fences commits of g; the
   next generation is also above ``generation_floor()``, the newest one that log has seen), then
   records ``Stable`` (g+1). Members adopt a generation only once it is ``Stable``.

Every leader write is a multi-op that checks the leader znode's version, so a leader whose
session expired (paused process) cannot overwrite its successor's decisions. Static members
(``group.instance.id``) use the instance id as member key: a restarted process replaces its
predecessor's znode and member id in one multi-op (no rebalance; the predecessor is fenced),
and a clean close leaves a departure record that keeps the place for ``session.timeout.ms``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import re
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, RolledBackError, SessionExpiredError
from kazoo.protocol.states import KazooState

from sparklog import clock
from sparklog.errors import FencedInstanceIdError, SparklogError, ZooKeeperUnavailableError
from sparklog.metadata import zkdata
from sparklog.metadata.group_publisher import coordinator_of, refuse_if_coordinated
from sparklog.metadata.group_registry import (
    COMPLETING,
    EMPTY,
    PREPARING,
    STABLE,
    GroupRegistry,
    StaticDeparture,
)
from sparklog.metadata.session import ZkSession, zk_errors
from sparklog.metadata.zkdata import GroupStateRecord, MemberRecord, encode
from sparklog.model.topic import TopicPartition, is_internal

__all__ = ["AssignFn", "Assignment", "GroupMember", "SyncAction", "SyncResult"]

log = logging.getLogger("sparklog.group")

# (protocol, members, partition counts, previous assignment) -> key -> partitions
AssignFn = Callable[
    [str, Sequence[MemberRecord], Mapping[str, Sequence[str]], Mapping[str, int], Mapping[str, list[TopicPartition]]],
    dict[str, list[TopicPartition]],
]


@dataclass(frozen=True)
class Assignment:
    generation: int
    partitions: tuple[TopicPartition, ...]


SyncAction = Literal["none", "revoke", "assigned", "rejoined"]


@dataclass(frozen=True)
class SyncResult:
    """What the consumer must do after :meth:`GroupMember.sync`."""

    action: SyncAction
    assignment: Assignment | None = None


class GroupMember:
    """One member (see the module docstring). Not thread-safe except :meth:`wakeup`."""

    def __init__(
        self,
        zk: ZkSession,
        group_id: str,
        *,
        client_id: str,
        member_id: str,
        topics: Sequence[str] = (),
        pattern: str | None = None,
        instance_id: str | None = None,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocols: Sequence[str],
        assign: AssignFn,
        on_generation: Callable[[int], None],
        generation_floor: Callable[[], int] = lambda: 0,
    ) -> None:
        self.zk = zk
        self.registry = GroupRegistry(zk)
        self.group_id = group_id
        self.record = MemberRecord(
            member_id=member_id,
            client_id=client_id,
            host=socket.gethostname(),
            topics=sorted(set(topics)),
            pattern=pattern,
            instance_id=instance_id,
            session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms,
            protocols=list(protocols),
        )
        self._assign = assign
        self._on_generation = on_generation
        self._generation_floor = generation_floor
        self.status = "UNJOINED"
        self.assignment: Assignment | None = None
        self.changed = threading.Event()  # set by watches: call sync()
        self._leader_wake = threading.Event()
        self._closing = threading.Event()
        self._leader_thread: threading.Thread | None = None
        self._leader_version: int | None = None
        self._session_lost = False
        self._coordinator: int | None = None  # a broker coordinating this group (we may not join)

    # -- identity ------------------------------------------------------------------------
    @property
    def key(self) -> str:
        return self.record.key

    @property
    def member_id(self) -> str:
        return self.record.member_id

    @property
    def path(self) -> str:
        return zkdata.group_member_path(self.group_id, self.key)

    def wakeup(self, *_args: object) -> None:
        self.changed.set()
        self._leader_wake.set()

    # -- member side ---------------------------------------------------------------------
    def join(self) -> None:
        self.registry.ensure_group(self.group_id)
        self._refuse_if_coordinated()
        self.zk.client.add_listener(self._on_connection_state)
        self._register()
        self.status = "JOINED"
        self._leader_thread = threading.Thread(
            target=self._lead_loop, name=f"sparklog-group-{self.group_id}", daemon=True
        )
        self._leader_thread.start()
        self.wakeup()

    def _on_connection_state(self, state: str) -> None:
        if state == KazooState.LOST:
            self._session_lost = True
        self.wakeup()

    def _register(self) -> None:
        client = self.zk.client
        data = encode(self.record)
        with zk_errors(f"joining group {self.group_id}"):
            if self.record.instance_id is None:
                client.create(self.path, data, ephemeral=True)
            else:
                self._register_static(data)
            client.exists(self.path, watch=self.wakeup)
            self.registry.state_record(self.group_id, watch=self.wakeup)

    def _register_static(self, data: bytes) -> None:
        """Take the instance id's place: replace a predecessor's znode and member id atomically."""
        client = self.zk.client
        departure = zkdata.group_static_path(self.group_id, self.key)
        for _ in range(50):
            record, state_version = self.registry.state_record(self.group_id)
            txn = client.transaction()
            stat = client.exists(self.path)
            if stat is not None:
                txn.delete(self.path, version=stat.version)
            if client.exists(departure) is not None:
                txn.delete(departure)
            txn.create(self.path, data, ephemeral=True)
            if record is not None and self.key in record.members:
                members = dict(record.members, **{self.key: self.member_id})
                txn.set_data(
                    zkdata.group_state_path(self.group_id),
                    encode(replace(record, members=members)),
                    version=state_version,
                )
                # The generation stays the same: sync() hands us the predecessor's partitions.
            if not any(isinstance(r, Exception) for r in txn.commit()):
                return
        raise SparklogError(f"Could not join group {self.group_id} as static member {self.key}: too much contention")

    def update_subscription(self, topics: Sequence[str] = (), pattern: str | None = None) -> None:
        self.record = replace(self.record, topics=sorted(set(topics)), pattern=pattern)
        with zk_errors(f"updating the subscription in group {self.group_id}"):
            self.zk.client.set(self.path, encode(self.record))

    def sync(self) -> SyncResult:
        """Read the group state and tell the consumer what to do (call when :attr:`changed`)."""
        self.changed.clear()
        if self.status in ("FENCED", "LEFT"):
            return SyncResult("none")
        if self._coordinator is not None:
            self._refuse_if_coordinated()
        try:
            with zk_errors(f"syncing with group {self.group_id}"):
                stat = self.zk.client.exists(self.path, watch=self.wakeup)
                record, _ = self.registry.state_record(self.group_id, watch=self.wakeup)
        except ZooKeeperUnavailableError as exc:
            self.changed.set()  # look again: kazoo holds the next request back until it reconnects
            time.sleep(0.05)
            if not (self._session_lost or isinstance(exc.__cause__, SessionExpiredError)):
                # Only the connection was lost (a failover of the ensemble): the session, our
                # znode and our assignment live on.
                return SyncResult("none")
            # Our session expired (e.g. the process was paused) and kazoo is opening a new
            # one: nothing is ours any more; rejoin once reads work again.
            self._session_lost = True
            self.assignment = None
            return SyncResult("rejoined")
        if stat is None or self._session_lost:
            return self._rejoin(record)
        if record is None:
            return SyncResult("none")
        owner = record.members.get(self.key)
        if owner is not None and owner != self.member_id:
            self.status = "FENCED"
            raise FencedInstanceIdError(
                f"Another consumer joined group {self.group_id} with group.instance.id {self.key} "
                f"(member {owner}); this one ({self.member_id}) is fenced and must close"
            )
        if record.state == PREPARING and owner == self.member_id and record.partitions_of(self.key):
            if self.record.acked_generation <= record.generation:
                if self.assignment is not None and self.assignment.partitions:
                    self.status = "REVOKING"
                    return SyncResult("revoke", self.assignment)
                self.ack()  # owner on record but never fetched: nothing to commit
                return SyncResult("none")
        if record.state == STABLE and owner == self.member_id:
            if self.assignment is None or record.generation > self.assignment.generation:
                self.assignment = Assignment(record.generation, tuple(record.partitions_of(self.key)))
                self.status = "ASSIGNED"
                return SyncResult("assigned", self.assignment)
        return SyncResult("none")

    def ack(self) -> None:
        """After a "revoke": this member committed and stopped fetching its partitions.
        May be called again after a ``ZooKeeperUnavailableError``: nothing changes until
        the acknowledgement is written."""
        record, _ = self.registry.state_record(self.group_id)
        generation = record.generation if record is not None else 0
        acked = replace(self.record, acked_generation=generation + 1)
        with zk_errors(f"acknowledging the rebalance of group {self.group_id}"):
            self.zk.client.set(self.path, encode(acked))
        self.record = acked
        self.assignment = Assignment(generation, ())
        self.status = "JOINED"

    def _rejoin(self, record: GroupStateRecord | None) -> SyncResult:
        """Our session expired (or our znode vanished): join again, with nothing assigned."""
        from sparklog.model.group_ids import new_member_id

        self._session_lost = False
        self._leader_version = None
        self.assignment = None
        if self.record.instance_id is None:
            self.record = replace(self.record, member_id=new_member_id(self.record.client_id), acked_generation=-1)
        self._register()
        self.status = "JOINED"
        self._leader_wake.set()
        return SyncResult("rejoined")

    def leave(self) -> None:
        """Leave the group (a static member leaves a departure record and keeps its place)."""
        if self.status in ("LEFT",):
            return
        fenced = self.status == "FENCED"
        self.status = "LEFT"
        self._closing.set()
        self._leader_wake.set()
        if self._leader_thread is not None:
            self._leader_thread.join(timeout=10)
        if fenced:
            return
        client = self.zk.client
        with contextlib.suppress(ZooKeeperUnavailableError), zk_errors(f"leaving group {self.group_id}"):
            try:
                if self.record.instance_id is not None:
                    departure = StaticDeparture(self.record, clock.now_ms())
                    client.create(zkdata.group_static_path(self.group_id, self.key), departure.encode())
                client.delete(self.path)
            except (NoNodeError, NodeExistsError):
                pass
            if self._leader_version is not None:
                try:
                    client.delete(zkdata.group_leader_path(self.group_id), version=self._leader_version)
                except (NoNodeError, BadVersionError):
                    pass

    # -- leader side ---------------------------------------------------------------------
    def _lead_loop(self) -> None:
        timeout: float | None = 1.0
        while not self._closing.is_set():
            self._leader_wake.wait(timeout)
            self._leader_wake.clear()
            if self._closing.is_set():
                return
            try:
                timeout = self._lead_once() if self._ensure_leadership() else None
            except SparklogError as exc:  # lost session, metadata races: look again shortly
                log.debug("group %s leader step failed: %s", self.group_id, exc)
                timeout = 0.5
            except Exception:  # keep the thread alive; the next change retries
                log.exception("group %s leader step failed", self.group_id)
                timeout = 1.0

    def _ensure_leadership(self) -> bool:
        client = self.zk.client
        path = zkdata.group_leader_path(self.group_id)
        with zk_errors(f"electing the leader of group {self.group_id}"):
            try:
                client.create(path, json.dumps({"member_id": self.member_id}).encode(), ephemeral=True)
            except NodeExistsError:
                pass
            try:
                _data, stat = client.get(path, watch=self._leader_wake_watch)
            except NoNodeError:
                self._leader_wake.set()
                return False
        mine = stat.ephemeralOwner == self.zk.session_id
        self._leader_version = stat.version if mine else None
        self._coordinator = coordinator_of(_data)
        if self._coordinator is not None:
            self.wakeup()  # sync() raises: the group belongs to a broker's coordinator
        return mine

    def _refuse_if_coordinated(self) -> None:
        """One membership system per group: not through ZooKeeper when a broker coordinates it."""
        refuse_if_coordinated(self.zk, self.group_id, self._coordinator)

    def _leader_wake_watch(self, *_args: object) -> None:
        self._leader_wake.set()

    def _lead_once(self) -> float | None:
        """One step of the leader's state machine; returns when to look again (s), if no watch will."""
        group = self.group_id
        watch = self._leader_wake_watch
        members = self.registry.members(group, watch=watch, member_watch=watch)
        now = clock.now_ms()
        departed = {k: d for k, d in self.registry.departures(group, watch=watch).items() if k not in members}
        expired = [k for k, d in departed.items() if d.expires_ms <= now]
        for key in expired:
            with zk_errors(f"expiring static member {key} of group {group}"):
                try:
                    self.zk.client.delete(zkdata.group_static_path(group, key))
                except NoNodeError:
                    pass
            departed.pop(key)
        everyone = dict(members)
        everyone.update({k: d.member for k, d in departed.items()})
        subscriptions, counts = self._resolve(everyone.values())
        signature = _signature(subscriptions, counts)
        record, version = self.registry.state_record(group, watch=watch)
        next_expiry = min((d.expires_ms for d in departed.values()), default=None)
        wait = None if next_expiry is None else max(0.05, (next_expiry - now) / 1000)
        if record is None:
            return 0.5
        if not everyone:
            if record.state != EMPTY:
                self._write(replace(record, state=EMPTY, members={}, assignment={}, signature="", leader=""), version)
            return wait
        if record.state == STABLE and record.signature == signature:
            return wait
        if record.state in (STABLE, EMPTY) or (record.state == COMPLETING and record.signature != signature):
            deadline = now + max(m.rebalance_timeout_ms for m in everyone.values())
            self._write(
                replace(record, state=PREPARING, rebalance_deadline_ms=deadline, leader=self.member_id), version
            )
            return 0.05
        if record.state == PREPARING:
            owners = [k for k, parts in record.assignment.items() if parts and k in members]
            pending = [k for k in owners if members[k].acked_generation <= record.generation]
            if pending and now < record.rebalance_deadline_ms:
                return (record.rebalance_deadline_ms - now) / 1000
            eligible = {k: m for k, m in everyone.items() if k not in pending}
            if not eligible:
                return 0.5
            protocol = _choose_protocol(self.record.protocols, eligible.values())
            previous = {k: [(str(t), int(p)) for t, p in parts] for k, parts in record.assignment.items()}
            assignment = self._assign(
                protocol, list(eligible.values()), {k: subscriptions[k] for k in eligible}, counts, previous
            )
            record = replace(
                record,
                state=COMPLETING,
                # A group deleted and re-created restarts in ZooKeeper, not in its offsets log.
                generation=max(record.generation, self._generation_floor()) + 1,
                protocol=protocol,
                leader=self.member_id,
                members={k: m.member_id for k, m in eligible.items()},
                assignment={k: [[t, p] for t, p in sorted(parts)] for k, parts in assignment.items()},
                signature=_signature({k: subscriptions[k] for k in eligible}, counts) if not pending else "",
            )
            version = self._write(record, version)
        if record.state == COMPLETING:
            self._on_generation(record.generation)
            self._write(replace(record, state=STABLE), version)
            return 0.05
        return wait

    def _write(self, record: GroupStateRecord, version: int) -> int:
        """Leader write, fenced by our leader znode's version; returns the new state version."""
        client = self.zk.client
        txn = client.transaction()
        txn.check(
            zkdata.group_leader_path(self.group_id), self._leader_version if self._leader_version is not None else -2
        )
        txn.set_data(zkdata.group_state_path(self.group_id), encode(record), version=version)
        with zk_errors(f"recording the state of group {self.group_id}"):
            results = txn.commit()
        if any(
            isinstance(r, (BadVersionError, NoNodeError, RolledBackError)) or isinstance(r, Exception) for r in results
        ):
            raise SparklogError(f"Group {self.group_id}: state changed under the leader; re-reading")
        return results[1].version

    def _resolve(self, records: Iterable[MemberRecord]) -> tuple[dict[str, list[str]], dict[str, int]]:
        """Subscriptions with patterns resolved, and partition counts of subscribed topics (watched)."""
        client = self.zk.client
        watch = self._leader_wake_watch
        members = list(records)
        all_topics: list[str] | None = None
        if any(m.pattern for m in members):
            with zk_errors("listing topics"):
                try:
                    all_topics = sorted(client.get_children(zkdata.TOPICS, watch=watch))
                except NoNodeError:
                    all_topics = []
        subscriptions: dict[str, list[str]] = {}
        for m in members:
            topics = set(m.topics)
            if m.pattern:
                regex = re.compile(m.pattern)
                topics |= {t for t in all_topics or [] if regex.fullmatch(t) and not is_internal(t)}
            subscriptions[m.key] = sorted(topics)
        counts: dict[str, int] = {}
        for topic in sorted({t for ts in subscriptions.values() for t in ts}):
            path = zkdata.topic_path(topic)
            with zk_errors(f"reading topic {topic}"):
                try:
                    data, _ = client.get(path, watch=watch)
                except NoNodeError:
                    client.exists(path, watch=watch)
                    continue
            counts[topic] = len(zkdata.TopicAssignment.decode(data, path).partitions)
        return subscriptions, counts


def _choose_protocol(preferred: Sequence[str], records: Iterable[MemberRecord]) -> str:
    """The leader's most preferred assignor that every member supports (Kafka's rule)."""
    members = list(records)
    for protocol in preferred:
        if all(protocol in m.protocols for m in members):
            return protocol
    common = [p for p in members[0].protocols if all(p in m.protocols for m in members)]
    if not common:
        raise SparklogError("Members of the group have no partition.assignment.strategy in common")
    return common[0]


def _signature(subscriptions: Mapping[str, Sequence[str]], counts: Mapping[str, int]) -> str:
    payload = json.dumps(
        {"members": {k: list(v) for k, v in sorted(subscriptions.items())}, "partitions": dict(sorted(counts.items()))},
        sort_keys=True,
    )
    return hashlib.sha1(payload.encode()).hexdigest()
