"""The light consumer as a member of the brokers' group coordinator (DESIGN §8): Kafka's
classic consumer protocol, spoken by :mod:`sparklog.clients.kafka_wire`, so light consumers
and Kafka clients are members of one group. Records are still read from the Delta tables by
the consumer itself; only membership and offsets go through the coordinator.

It offers the consumer what :class:`sparklog.metadata.group_member.GroupMember` does
(``join``, ``sync``, ``ack``, ``leave``, ``update_subscription``, ``changed``,
``assignment``, ``member_id``, ``key``), plus ``commit`` and ``committed`` (OffsetCommit with
generation and member id, OffsetFetch).

Member states (:attr:`ProtocolMember.status`)::

    UNJOINED --join()--> JOINING (FindCoordinator, JoinGroup [MEMBER_ID_REQUIRED: again
        with the id given], SyncGroup; the leader assigns) --> ASSIGNED(generation g)
    ASSIGNED --heartbeat says REBALANCE_IN_PROGRESS, our subscription or (leader) a
        subscribed topic's partition count changed--> REVOKING (sync() says "revoke":
        the consumer commits, runs on_revoke, then ack()) --ack()--> JOINING --> ASSIGNED(g')
    ASSIGNED --no poll() for max.poll.interval.ms--> LeaveGroup (dynamic members), JOINING once
        the consumer polls again (sync() says "rejoined": the partitions are lost)
    ASSIGNED/REVOKING --UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION--> JOINING (sync() says
        "rejoined": the partitions are lost, nothing is committed); UNKNOWN_MEMBER_ID also
        drops the member id of a dynamic member
    any --NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, connection lost--> the same state,
        the coordinator looked up again (FindCoordinator on bootstrap.servers)
    any --FENCED_INSTANCE_ID, INCONSISTENT_GROUP_PROTOCOL, INVALID_SESSION_TIMEOUT...--> FAILED
        (terminal; sync() raises the error)
    any --leave()--> LEFT (terminal; a dynamic member sends LeaveGroup, a static one does
        not, so it keeps its place for session.timeout.ms as in Kafka)

Threads: the consumer's thread calls every public method; one background thread of the
member finds the coordinator, joins, syncs and heartbeats every ``heartbeat.interval.ms``,
over a connection of its own (a JoinGroup may wait a whole rebalance). ``commit`` and
``committed`` use a second connection, so a commit never waits behind a JoinGroup. The
eager protocol holds: the background thread does not send JoinGroup while the consumer still
owns partitions; it waits for ``ack()`` (heartbeating meanwhile).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from kio.schema.errors import ErrorCode

from sparklog import errors
from sparklog.clients import group_requests as requests
from sparklog.clients.group_requests import COORDINATOR_ERRORS
from sparklog.clients.kafka_wire import KafkaConnection, bootstrap_addresses, raise_for
from sparklog.group.assignors import MemberSubscription, assign
from sparklog.group.consumer_protocol import decode_assignment, decode_subscription, encode_subscription
from sparklog.group.coordinator import OffsetCommit
from sparklog.metadata.group_member import Assignment, SyncResult
from sparklog.model.topic import TopicPartition

__all__ = ["ProtocolMember"]

log = logging.getLogger("sparklog.clients.protocol_member")

REQUEST_TIMEOUT_S = 30.0  # Kafka's request.timeout.ms default
RETRY_BACKOFF_S = 0.1  # Kafka's retry.backoff.ms default
METADATA_CHECK_S = 1.0  # how often subscriptions and partition counts are looked at again
# The background thread also waits out ZooKeeper (subscriptions and partition counts come from it).
_RETRIABLE_IN_THREAD = (errors.RetriableError, errors.CoordinationError)


class ProtocolMember:
    """One light consumer in a group coordinated by a broker (see the module docstring)."""

    def __init__(
        self,
        group_id: str,
        *,
        bootstrap_servers: str,
        client_id: str,
        topics: Sequence[str] = (),
        pattern: str | None = None,
        instance_id: str | None = None,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        heartbeat_interval_ms: int,
        protocols: Sequence[str],
        resolve: Callable[[Sequence[str], str | None], list[str]],
        partition_counts: Callable[[Iterable[str]], dict[str, int]],
    ) -> None:
        if heartbeat_interval_ms >= session_timeout_ms:
            raise errors.ConfigError(
                f"heartbeat.interval.ms ({heartbeat_interval_ms}) must be lower than session.timeout.ms "
                f"({session_timeout_ms})"
            )
        self.group_id = group_id
        self.bootstrap = bootstrap_addresses(bootstrap_servers)
        self.client_id = client_id
        self.topics, self.pattern = sorted(set(topics)), pattern
        self.instance_id = instance_id
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.heartbeat_interval_s = heartbeat_interval_ms / 1000
        self.max_poll_interval_s = rebalance_timeout_ms / 1000  # Kafka: max.poll.interval.ms
        self._last_poll = time.monotonic()
        self._poll_expired = False  # left for not polling; rejoins at the next poll()
        self.protocols = list(protocols)
        self._resolve = resolve
        self._partition_counts = partition_counts
        self.status = "UNJOINED"
        self.member_id = ""
        self.generation = -1
        self.assignment: Assignment | None = None  # what the consumer adopted
        self.changed = threading.Event()  # something for the consumer: call sync()
        self._incoming: Assignment | None = None  # a completed generation not yet adopted
        self._wanted, self._joined = 1, 0  # rejoins asked for / done: join while _wanted > _joined
        self._lost = False
        self._error: errors.SparklogError | None = None
        self._subscribed: list[str] = []
        self._group_counts: dict[str, int] = {}  # the leader's view of the group's topics
        self._coordinator: tuple[int, str, int] | None = None
        self._cond = threading.Condition()
        self._closing = threading.Event()
        self._conn: KafkaConnection | None = None  # the background thread's
        self._client_conn: KafkaConnection | None = None  # the consumer thread's
        self._thread: threading.Thread | None = None

    # -- identity ------------------------------------------------------------------------
    @property
    def key(self) -> str:
        return self.instance_id or self.member_id

    def __repr__(self) -> str:
        return f"member {self.member_id or '(joining)'} of group {self.group_id}"

    # -- the consumer's side ---------------------------------------------------------------
    def join(self) -> None:
        self._last_poll = time.monotonic()
        self.status = "JOINING"
        self._thread = threading.Thread(target=self._run, name=f"sparklog-member-{self.group_id}", daemon=True)
        self._thread.start()

    def update_subscription(self, topics: Sequence[str] = (), pattern: str | None = None) -> None:
        with self._cond:
            self.topics, self.pattern = sorted(set(topics)), pattern
        self._need_rejoin("the subscription changed")

    def sync(self) -> SyncResult:
        """What the consumer must do now (call when :attr:`changed` is set)."""
        self.changed.clear()
        with self._cond:
            if self._error is not None:
                raise self._error
            if self.status == "LEFT":
                return SyncResult("none")
            if self._lost:
                self._lost = False
                self.assignment = None
                if self.status == "REVOKING":  # nothing left to revoke: join at once
                    self.status = "JOINING"
                    self._cond.notify_all()
                if self._incoming is not None:
                    self.changed.set()  # the next generation is already here: the next sync() adopts it
                return SyncResult("rejoined")
            if self.status == "REVOKING" and self.assignment is not None and self.assignment.partitions:
                return SyncResult("revoke", self.assignment)
            if self._incoming is not None:
                self.assignment, self._incoming = self._incoming, None
                return SyncResult("assigned", self.assignment)
            return SyncResult("none")

    def polled(self) -> None:
        """The consumer called ``poll()``: it is alive in Kafka's ``max.poll.interval.ms`` sense;
        a member that left for not polling rejoins now."""
        with self._cond:
            self._last_poll = time.monotonic()
            if self._poll_expired:
                self._poll_expired = False
                self._cond.notify_all()

    def ack(self) -> None:
        """After a "revoke": the consumer committed and stopped fetching; rejoin now."""
        with self._cond:
            if self.status == "REVOKING":
                self.assignment = Assignment(self.generation, ())
                self.status = "JOINING"
            self._cond.notify_all()

    def leave(self) -> None:
        """Stop heartbeating and leave (dynamic members send LeaveGroup; static ones keep their place)."""
        with self._cond:
            if self.status == "LEFT":
                return
            failed = self.status == "FAILED"
            self.status = "LEFT"
            self._closing.set()
            self._cond.notify_all()
        if self._conn is not None:
            self._conn.close()  # a JoinGroup in flight fails at once
        if self._thread is not None:
            self._thread.join(timeout=REQUEST_TIMEOUT_S)
        try:
            if not failed and self.member_id and self.instance_id is None:
                self._leave_group()
        except errors.SparklogError as exc:  # the coordinator expires us after session.timeout.ms
            log.warning("%r could not send LeaveGroup: %s", self, exc)
        finally:
            for conn in (self._conn, self._client_conn):
                if conn is not None:
                    conn.close()

    def _leave_group(self) -> None:
        response = self._client_call(requests.leave_group(self.group_id, self.member_id), "LeaveGroup", attempts=3)
        raise_for(response.error_code, f"LeaveGroup of {self!r}")

    # -- offsets (consumer thread) -----------------------------------------------------------
    def commit(self, commits: Mapping[TopicPartition, OffsetCommit]) -> None:
        """OffsetCommit in the adopted generation; a commit the coordinator refuses for
        membership reasons raises (UnknownMemberError, IllegalGenerationError,
        RebalanceInProgressError: the group is rebalancing, poll() again)."""
        with self._cond:
            generation = self.assignment.generation if self.assignment is not None else -1
            member_id = self.member_id
        body = requests.offset_commit(self.group_id, generation, member_id, self.instance_id, commits)
        response = self._client_call(body, "OffsetCommit", check=requests.commit_codes)
        what = f"OffsetCommit of {self!r} (generation {generation})"
        for code in requests.commit_codes(response):
            if code in (ErrorCode.unknown_member_id, ErrorCode.illegal_generation):
                self._lose(code)
            elif code == ErrorCode.rebalance_in_progress:
                self._need_rejoin("a commit found the group rebalancing")
            raise_for(code, what)

    def committed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The group's committed offsets of ``partitions`` (OffsetFetch; absent: none)."""
        wanted = list(partitions)
        if not wanted:
            return {}
        response = self._client_call(
            requests.offset_fetch(self.group_id, wanted), "OffsetFetch", check=requests.fetch_codes
        )
        for code in requests.fetch_codes(response):
            raise_for(code, f"OffsetFetch of group {self.group_id}")
        return requests.fetched_offsets(response)

    def _client_call(
        self, body: Any, api: str, *, attempts: int | None = None, check: Callable[[Any], list[ErrorCode]] | None = None
    ) -> Any:
        """``body`` to the coordinator on the consumer thread's connection, again after a lost
        connection, NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE (for up to
        ``session.timeout.ms``, or ``attempts`` tries)."""
        deadline = time.monotonic() + self.session_timeout_ms / 1000
        tries = 0
        while True:
            tries += 1
            try:
                coordinator = self._find_coordinator()
                conn = self._client_conn
                if conn is None or (conn.node, conn.host, conn.port) != coordinator:
                    if conn is not None:
                        conn.close()
                    conn = self._client_conn = KafkaConnection(*coordinator, self.client_id, REQUEST_TIMEOUT_S)
                response = conn.call(body)
                codes = check(response) if check is not None else [ErrorCode(int(response.error_code))]
                retry = [c for c in codes if c in COORDINATOR_ERRORS or c == ErrorCode.request_timed_out]
                if not retry:
                    return response
                raise_for(retry[0], f"{api} of {self!r} at {conn!r}")
            except errors.RetriableError as exc:
                self._forget_coordinator()
                if (attempts is not None and tries >= attempts) or time.monotonic() + RETRY_BACKOFF_S > deadline:
                    raise
                log.info("%s of %r: %s; finding the coordinator again", api, self, exc)
                time.sleep(RETRY_BACKOFF_S)

    # -- the coordinator ---------------------------------------------------------------------
    def _find_coordinator(self) -> tuple[int, str, int]:
        with self._cond:
            if self._coordinator is not None:
                return self._coordinator
        found = requests.find_coordinator(self.bootstrap, self.group_id, self.client_id, REQUEST_TIMEOUT_S)
        with self._cond:
            self._coordinator = found
        return found

    def _forget_coordinator(self) -> None:
        with self._cond:
            self._coordinator = None

    # -- the background thread -------------------------------------------------------------
    def _run(self) -> None:
        next_beat = next_check = 0.0
        while not self._closing.is_set():
            try:
                if self._must_join():
                    self._join_and_sync()
                    next_beat = next_check = time.monotonic() + self.heartbeat_interval_s
                    continue
                now = time.monotonic()
                if self._poll_overdue(now):
                    self._leave_for_not_polling()
                    continue
                if now >= next_beat:
                    next_beat = now + self.heartbeat_interval_s
                    self._heartbeat()
                if now >= next_check:
                    next_check = now + METADATA_CHECK_S
                    self._check_metadata()
                with self._cond:
                    if not self._must_join() and not self._closing.is_set():
                        self._cond.wait(max(0.0, min(next_beat, next_check) - time.monotonic()))
            except _RETRIABLE_IN_THREAD as exc:
                if self._closing.is_set():
                    return
                log.info("%r: %s; finding the coordinator again", self, exc)
                self._forget_coordinator()
                self._closing.wait(RETRY_BACKOFF_S)
            except errors.SparklogError as exc:
                if self._closing.is_set():
                    return
                self._fail(exc)
                return
            except Exception:  # keep the member alive; the next round retries
                log.exception("%r: unexpected failure", self)
                self._closing.wait(1.0)

    def _must_join(self) -> bool:
        with self._cond:
            if self._poll_expired:
                return False
            return self._wanted > self._joined and self.status not in ("REVOKING", "LEFT", "FAILED")

    def _poll_overdue(self, now: float) -> bool:
        with self._cond:
            return not self._poll_expired and self.generation >= 0 and now - self._last_poll > self.max_poll_interval_s

    def _leave_for_not_polling(self) -> None:
        """Kafka's rule: a consumer that does not poll within max.poll.interval.ms leaves the
        group (a static one just stops heartbeating), so its partitions move to members that
        make progress; it rejoins, with its partitions lost, at its next ``poll()``."""
        log.warning(
            "%r: poll() was not called for max.poll.interval.ms (%d ms); leaving the group",
            self,
            int(self.max_poll_interval_s * 1000),
        )
        if self.instance_id is None and self.member_id:
            leave = requests.leave_group(self.group_id, self.member_id)
            raise_for(ErrorCode(int(self._connection().call(leave).error_code)), f"LeaveGroup of {self!r}")
        with self._cond:
            self._poll_expired = True
            if self.instance_id is None:
                self.member_id = ""
        self._lose(ErrorCode.unknown_member_id)

    def _connection(self) -> KafkaConnection:
        coordinator = self._find_coordinator()
        conn = self._conn
        if conn is None or (conn.node, conn.host, conn.port) != coordinator:
            if conn is not None:
                conn.close()
            conn = self._conn = KafkaConnection(*coordinator, self.client_id, REQUEST_TIMEOUT_S)
        if self._closing.is_set():
            raise errors.BrokerNotAvailableError(f"{self!r} is leaving")
        return conn

    def _join_and_sync(self) -> None:
        conn = self._connection()
        with self._cond:
            target = self._wanted
            topics, pattern = list(self.topics), self.pattern
            owned = list(self.assignment.partitions) if self.assignment is not None else []
        subscribed = self._resolve(topics, pattern)
        metadata = encode_subscription(subscribed, owned)
        join = requests.join_group(
            self.group_id,
            self.member_id,
            self.instance_id,
            self.session_timeout_ms,
            self.rebalance_timeout_ms,
            self.protocols,
            metadata,
        )
        joined = conn.call(join, timeout_s=self.rebalance_timeout_ms / 1000 + REQUEST_TIMEOUT_S)
        code = ErrorCode(int(joined.error_code))
        if code in (ErrorCode.member_id_required, ErrorCode.unknown_member_id, ErrorCode.rebalance_in_progress):
            # Kafka's answers that mean "join again": with the id given, afresh, or once more.
            if code == ErrorCode.member_id_required:
                self.member_id = str(joined.member_id)
            elif code == ErrorCode.unknown_member_id:
                self.member_id = ""
            else:
                self._closing.wait(RETRY_BACKOFF_S)
            return
        if code == ErrorCode.invalid_session_timeout:
            raise errors.ConfigError(
                f"The coordinator of group {self.group_id} refused session.timeout.ms={self.session_timeout_ms}: "
                "it must lie within the brokers' group.min.session.timeout.ms and group.max.session.timeout.ms"
            )
        raise_for(code, f"JoinGroup of {self!r} at {conn!r}")
        self.member_id, generation = str(joined.member_id), int(joined.generation_id)
        protocol = str(joined.protocol_name or "")
        assignments: dict[str, list[TopicPartition]] = {}
        self._group_counts = {}
        if str(joined.leader) == self.member_id:
            assignments = self._assign(protocol, joined.members)
        sync = requests.sync_group(self.group_id, generation, self.member_id, self.instance_id, protocol, assignments)
        synced = conn.call(sync, timeout_s=self.rebalance_timeout_ms / 1000 + REQUEST_TIMEOUT_S)
        code = ErrorCode(int(synced.error_code))
        if code in (ErrorCode.rebalance_in_progress, ErrorCode.illegal_generation, ErrorCode.unknown_member_id):
            if code == ErrorCode.unknown_member_id:
                self.member_id = ""
            return  # join again
        raise_for(code, f"SyncGroup of {self!r} at {conn!r}")
        partitions = tuple(sorted(decode_assignment(synced.assignment)))
        with self._cond:
            self._subscribed = subscribed
            self.generation = generation
            self._joined = target
            if self._wanted > target or self.status != "JOINING":
                return  # asked to rejoin meanwhile: this generation is never handed out (eager)
            self._incoming = Assignment(generation, partitions)
            self.status = "ASSIGNED"
        log.info("%r: generation %d, partitions %s", self, generation, list(partitions))
        self.changed.set()

    def _assign(self, protocol: str, members: Sequence[Any]) -> dict[str, list[TopicPartition]]:
        """As the group's leader: every member's partitions, by sparklog's pure assignor."""
        subscriptions, previous = [], {}
        for member in members:
            topics, owned = decode_subscription(bytes(member.metadata))
            subscriptions.append(MemberSubscription(str(member.member_id), tuple(topics), member.group_instance_id))
            previous[str(member.member_id)] = owned
        counts = self._partition_counts({t for s in subscriptions for t in s.topics})
        self._group_counts = counts
        return assign(protocol, subscriptions, counts, previous)

    def _heartbeat(self) -> None:
        with self._cond:
            if self._poll_expired or self.generation < 0 or self.status not in ("ASSIGNED", "REVOKING"):
                return
            generation = self.generation
        conn = self._connection()
        beat = requests.heartbeat(self.group_id, generation, self.member_id, self.instance_id)
        code = ErrorCode(int(conn.call(beat).error_code))
        if code == ErrorCode.rebalance_in_progress:
            self._need_rejoin("the coordinator started a rebalance")
        elif code in (ErrorCode.unknown_member_id, ErrorCode.illegal_generation):
            self._lose(code)
        else:
            raise_for(code, f"Heartbeat of {self!r} at {conn!r}")

    def _check_metadata(self) -> None:
        """Rejoin when our pattern matches other topics, or (as the leader) when a topic of
        the group gained partitions: Kafka's clients notice both from metadata."""
        with self._cond:
            topics, pattern = list(self.topics), self.pattern
            if self.status != "ASSIGNED":
                return
        if self._resolve(topics, pattern) != self._subscribed:
            self._need_rejoin("the subscribed topics changed")
        elif self._group_counts and self._partition_counts(self._group_counts) != self._group_counts:
            self._need_rejoin("a subscribed topic's partition count changed")

    # -- transitions ---------------------------------------------------------------------------
    def _need_rejoin(self, why: str) -> None:
        with self._cond:
            if self.status in ("LEFT", "FAILED"):
                return
            if self._wanted <= self._joined:
                log.info("%r: rejoining: %s", self, why)
            self._wanted += 1
            self._incoming = None  # a generation the consumer never used needs no revoke
            if self.assignment is not None and self.assignment.partitions:
                if self.status != "REVOKING":
                    self.status = "REVOKING"
                    self.changed.set()
            else:
                self.status = "JOINING"
            self._cond.notify_all()

    def _lose(self, code: ErrorCode) -> None:
        with self._cond:
            if self.status in ("LEFT", "FAILED"):
                return
            log.info("%r lost its membership (%s); rejoining", self, code.name.upper())
            if code == ErrorCode.unknown_member_id:
                self.member_id = ""
            self.generation = -1
            self._wanted += 1
            self._incoming = None
            if self.assignment is not None and self.assignment.partitions:
                self._lost = True
                self.changed.set()
            self.status = "JOINING"
            self._cond.notify_all()

    def _fail(self, exc: errors.SparklogError) -> None:
        log.warning("%r failed: %s", self, exc)
        with self._cond:
            self._error = exc
            self.status = "FAILED"
        self.changed.set()
