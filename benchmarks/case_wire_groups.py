"""Case (r): consumer groups through the Kafka protocol — 8 confluent-kafka consumers join a
group, then one of them leaves (issue 12 part 5); sparklog's broker, Apache Kafka, the mock.

Set-up, per system and run (:mod:`benchmarks.wire`: sparklog's broker agent, a separate
process; Apache Kafka, one KRaft node, the baseline; librdkafka's mock cluster; the same run,
the order rotated by run): the broker started with
**``group.initial.rebalance.delay.ms=0``** (sparklog and Kafka alike; the mock's own knob), and a
topic of :data:`PARTITIONS` (48) partitions, replication factor 1, with
:data:`RECORDS_PER_PARTITION` keyless 100-byte records (× ``--scale``, at least 10) in **every**
partition, produced untimed. Why the delay is 0: with Kafka's default (3000 ms) the first join
of an empty group waits 3 s for more members, which would be the whole figure; Kafka's own test
configurations set it to 0. An untimed warm-up group (one consumer, one record) runs first, so
``__consumer_offsets`` exists before the first timed join.

Eight ``confluent_kafka.Consumer`` s, each polled by its own thread of the benchmark process
(``poll(0.05)``), with ``enable.auto.commit=false`` and ``auto.offset.reset=earliest``: nothing
is committed, so a partition's new owner reads it from offset 0 and every partition has a
record to deliver after any rebalance; and ``heartbeat.interval.ms`` = :data:`HEARTBEAT_MS`:
members learn of a rebalance only from a Heartbeat answer (classic protocol), so with
librdkafka's default 3 s any broker's rebalance after a leave would take up to 3 s. In practice
librdkafka 2.x sends a classic-protocol heartbeat only when its main thread wakes up, which an
idle consumer does every 500 ms (the ``max.poll.interval.ms`` check timer): survivors hear of a
rebalance 0–0.5 s after it starts whatever the interval below 500 ms, and the last of the 7
heard of it ≈ 0.45 s after the LeaveGroup in the traced runs — a floor under *leave* for any
broker. Everything else is librdkafka's default (``fetch.wait.max.ms`` 500,
``session.timeout.ms`` 45 s on the sparklog side). The consumers are created and connected
(``list_topics``) before anything is timed.

Per repetition, for ``partition.assignment.strategy`` eager ``range`` and then
``cooperative-sticky``, a fresh group:

1. **join** — the 8 threads call ``subscribe()`` at once.
   *join → every consumer's first record* (target): from the earliest ``subscribe()`` until
   every consumer's ``poll`` has returned a record (in whatever generation it came).
   *join → all 48 partitions assigned* (info): until the 8 assignments, as the
   ``on_assign``/``on_revoke``/``on_lost`` callbacks left them, are all non-empty, pairwise
   disjoint and cover the 48 partitions.
2. **leave** — once the group is stable (all assigned, no callback for 1 s, every consumer has
   received a record since its last assignment), the eighth consumer's thread stops polling and
   calls ``close()`` (revoke, LeaveGroup; its duration is in the JSON).
   *leave → survivors own all 48* (target): from the start of ``close()`` until the 7
   survivors' assignments — updated in their assignment callbacks, so: until the survivors'
   assignment callbacks of the rebalance have run — are pairwise disjoint and cover the 48
   partitions again.
   *leave → … and moved ones delivered* (info): until, in addition, every partition whose
   owner changed (``range``: most, 12 to 27 in the runs; ``cooperative-sticky``: the leaver's
   6) has delivered a record to its new owner (``poll`` returned it after the assignment). This adds
   the client's fetch start-up for a new partition, the same against any broker: OffsetFetch,
   a 100 ms offset-query timer, ListOffsets (answered after the fetch long poll already in
   flight on that connection), then the partition joins the *next* fetch, after the in-flight
   long poll of the idle partitions (``fetch.wait.max.ms`` 500) — 0.3–1.1 s more.
   *range: leave → last survivor's on_revoke* (info): eager members revoke when they hear of
   the rebalance, so this shows when the last survivor heard of it (the heartbeat floor above).

Figures are medians over every repetition of every run (``REPEATS`` × ``--scale``, at least 1,
repetitions per run and side), as in case (h).

Kafka gets the same clients, settings and data as sparklog; its coordinator, like sparklog's,
ends a join phase as soon as every known member has rejoined. The mock's initial rebalance
delay is set to 0 as well (``rd_kafka_mock_group_initial_rebalance_delay_ms``; its default is
3000 ms). The
mock's group coordinator is **timer-driven** (librdkafka ``src/rdkafka_mock_cgrp.c``): a join
phase does not end when every member has rejoined but when a timer fires — the initial delay
for an empty group, otherwise ``session.timeout.ms − 1000`` ms of the last joiner (44 s with
librdkafka's 45 s default). Its consumers therefore use ``session.timeout.ms`` =
:data:`MOCK_SESSION_TIMEOUT_MS`, a 1 s join window: long enough for every survivor to hear of
the rebalance (heartbeats ≤ 0.5 s apart, measured gaps up to ≈ 0.7 s on a loaded box); with a
0.4 s window the survivors missed it and lost their assignments (an extra generation). So the
mock's join and leave figures are ≈ its 1 s timer plus client work (≈ 2 s when a member still
missed the window) — not a coordinator's
processing cost; the ratio to the mock compares sparklog with a timer, the ratio to Kafka with a
coordinator.

Targets (issue 12): join → first record ≤ 1 s; leave → survivors own all 48 ≤ 0.5 s.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmarks.harness import BenchContext, CaseResult, Target
from benchmarks.wire import QUIET, SYSTEMS, VALUE_BYTES, Endpoint, Figures, compare, systems_note, wire_metric

CASE = "r"
TITLE = "consumer groups: 8 confluent-kafka consumers join / one leaves, sparklog vs mock"
TOPIC = "wire-groups"
PARTITIONS = 48
CONSUMERS = 8
RECORDS_PER_PARTITION = 200
REPEATS = 3  # joins and leaves per strategy, side and run (× --scale, at least 1)
STRATEGIES = ("range", "cooperative-sticky")
HEARTBEAT_MS = 100
MOCK_SESSION_TIMEOUT_MS = 2000
BROKER_PROPERTIES = {"group.initial.rebalance.delay.ms": "0"}
CONSUMER_CONFIG: dict[str, Any] = {
    "enable.auto.commit": False,
    "auto.offset.reset": "earliest",
    "heartbeat.interval.ms": HEARTBEAT_MS,
}
MOCK_CONSUMER_CONFIG: dict[str, Any] = {"session.timeout.ms": MOCK_SESSION_TIMEOUT_MS}
STABLE_QUIET_S = 1.0
POLL_S = 0.05
TIMEOUT_S = 120.0
TARGET_JOIN_S = 1.0
TARGET_LEAVE_S = 0.5


# -- the group under observation ---------------------------------------------------------------
@dataclass
class _Member:
    index: int
    client: Any  # confluent_kafka.Consumer
    owned: set[int] = field(default_factory=set)
    assigned_at: dict[int, float] = field(default_factory=dict)  # partition -> when it was (re)assigned
    delivered: set[int] = field(default_factory=set)  # owned partitions that delivered since assigned
    first_record: float | None = None
    subscribed: float | None = None
    callbacks: int = 0
    last_revoke: float | None = None  # when its last on_revoke/on_lost callback ran
    errors: list[str] = field(default_factory=list)
    leave: threading.Event = field(default_factory=threading.Event)
    gone: bool = False
    close_started: float | None = None
    close_seconds: float | None = None


class _Watch:
    """A condition over the members, evaluated after every event; remembers when it first held."""

    def __init__(self, condition: Callable[[], bool]) -> None:
        self.condition = condition
        self.at: float | None = None
        self.done = threading.Event()

    def check(self, now: float) -> None:
        if self.at is None and self.condition():
            self.at = now
            self.done.set()


class _Group:
    """Eight consumers of one group, one thread each, and what their callbacks and polls saw."""

    def __init__(self, bootstrap: str, group_id: str, strategy: str, extra: dict[str, Any]) -> None:
        from confluent_kafka import Consumer

        self.strategy = strategy
        self.cooperative = strategy == "cooperative-sticky"
        self.lock = threading.Lock()
        self.last_callback = time.perf_counter()
        self.watches: list[_Watch] = []
        self.stop = threading.Event()
        self.go = threading.Event()
        self.members = []
        for i in range(CONSUMERS):
            config = {
                "bootstrap.servers": bootstrap,
                "group.id": group_id,
                "client.id": f"bench-r-{i}",
                "partition.assignment.strategy": strategy,
                **QUIET,
                **CONSUMER_CONFIG,
                **extra,
            }
            client = Consumer(config)
            client.list_topics(TOPIC, timeout=30)  # connected, metadata known: not timed
            self.members.append(_Member(i, client))
        self.threads = [
            threading.Thread(target=self._run, args=(m,), name=f"bench-r-{m.index}", daemon=True) for m in self.members
        ]
        for thread in self.threads:
            thread.start()

    # -- per-consumer thread ---------------------------------------------------------------
    def _run(self, member: _Member) -> None:
        from confluent_kafka import TopicPartition

        def on_assign(_client: Any, partitions: list[TopicPartition]) -> None:
            self._event(member, assigned=[p.partition for p in partitions])

        def on_revoke(_client: Any, partitions: list[TopicPartition]) -> None:
            self._event(member, revoked=[p.partition for p in partitions])

        def on_lost(_client: Any, partitions: list[TopicPartition]) -> None:
            self._event(member, revoked=[p.partition for p in partitions], lost=True)

        self.go.wait()
        client = member.client
        member.subscribed = time.perf_counter()
        client.subscribe([TOPIC], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
        while not self.stop.is_set():
            if member.leave.is_set():
                member.close_started = time.perf_counter()
                client.close()
                member.close_seconds = time.perf_counter() - member.close_started
                return
            msg = client.poll(POLL_S)
            if msg is None:
                continue
            now = time.perf_counter()
            error = msg.error()
            if error is not None:
                with self.lock:
                    member.errors.append(str(error))
                continue
            partition = msg.partition()
            with self.lock:
                if member.first_record is None:
                    member.first_record = now
                if partition in member.owned and partition not in member.delivered:
                    member.delivered.add(partition)
                self._check(now)
        client.close()

    def _event(
        self, member: _Member, assigned: Sequence[int] = (), revoked: Sequence[int] = (), lost: bool = False
    ) -> None:
        now = time.perf_counter()
        with self.lock:
            member.callbacks += 1
            self.last_callback = now
            if revoked or lost:
                member.last_revoke = now
            if revoked or (lost or (not self.cooperative and not assigned)):
                gone = set(revoked) if self.cooperative else set(member.owned)
                member.owned -= gone
                member.delivered -= gone
            if assigned:
                if not self.cooperative:
                    member.owned.clear()
                    member.delivered.clear()
                for p in assigned:
                    member.owned.add(p)
                    member.assigned_at[p] = now
                    member.delivered.discard(p)
            self._check(now)

    def _check(self, now: float) -> None:
        for watch in self.watches:
            watch.check(now)

    # -- conditions (called under the lock) ----------------------------------------------------
    def live(self) -> list[_Member]:
        return [m for m in self.members if not m.gone]

    def all_owned(self) -> bool:
        """The live members' assignments are non-empty, pairwise disjoint and cover every partition."""
        live = self.live()
        if any(not m.owned for m in live):
            return False
        total = sum(len(m.owned) for m in live)
        union = set().union(*(m.owned for m in live))
        return total == len(union) == PARTITIONS

    def owners(self) -> dict[int, int]:
        return {p: m.index for m in self.live() for p in m.owned}

    def watch(self, condition: Callable[[], bool]) -> _Watch:
        with self.lock:
            watch = _Watch(condition)
            self.watches.append(watch)
            watch.check(time.perf_counter())
            return watch

    # -- phases --------------------------------------------------------------------------------
    def join(self) -> dict[str, float]:
        first_records = self.watch(lambda: all(m.first_record is not None for m in self.members))
        assigned = self.watch(self.all_owned)
        self.go.set()
        self._wait(first_records, "every consumer's first record")
        self._wait(assigned, "all 48 partitions assigned")
        start = min(m.subscribed for m in self.members if m.subscribed is not None)
        assert first_records.at is not None and assigned.at is not None
        return {
            "join_first_record_s": first_records.at - start,
            "join_all_assigned_s": assigned.at - start,
        }

    def wait_stable(self) -> None:
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            with self.lock:
                quiet = time.perf_counter() - self.last_callback
                ready = self.all_owned() and all(m.delivered for m in self.live()) and quiet >= STABLE_QUIET_S
            if ready:
                return
            self._raise_errors()
            if time.monotonic() > deadline:
                raise AssertionError(f"group not stable within {TIMEOUT_S:.0f} s: {self._state()}")
            time.sleep(0.05)

    def leave(self) -> dict[str, Any]:
        leaver = self.members[-1]
        with self.lock:
            before = self.owners()
            leaver.gone = True
            self.watches.clear()

        def moved_delivered() -> bool:
            if not self.all_owned():
                return False
            return all(p in m.delivered for m in self.live() for p in m.owned if before.get(p) != m.index)

        owned = self.watch(self.all_owned)
        delivered = self.watch(moved_delivered)
        # The watches were set with the leaver marked gone: the survivors own 42 partitions now.
        assert owned.at is None and delivered.at is None, "survivors already own every partition"
        leaver.leave.set()
        self._wait(delivered, "survivors own all 48 partitions and moved ones delivered")
        self._wait(owned, "survivors own all 48 partitions")
        assert leaver.close_started is not None and owned.at is not None and delivered.at is not None
        with self.lock:
            after = self.owners()
        moved = sorted(p for p, owner in after.items() if before.get(p) != owner)
        revokes = [m.last_revoke for m in self.live()]
        heard = max(revokes) - leaver.close_started if all(r and r > leaver.close_started for r in revokes) else None
        return {
            "leave_moved_delivered_s": delivered.at - leaver.close_started,
            "leave_all_owned_s": owned.at - leaver.close_started,
            "close_s": leaver.close_seconds,
            # eager only: every survivor revokes before rejoining, so this is when the last one heard
            "leave_last_survivor_revoked_s": heard,
            "moved_partitions": len(moved),
            "survivor_assignment_sizes": sorted(len(m.owned) for m in self.live()),
        }

    def _wait(self, watch: _Watch, what: str) -> None:
        deadline = time.monotonic() + TIMEOUT_S
        while not watch.done.wait(0.1):
            self._raise_errors()
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.strategy}: not reached within {TIMEOUT_S:.0f} s: {what}; {self._state()}")

    def _raise_errors(self) -> None:
        with self.lock:
            errors = [e for m in self.members for e in m.errors]
        if errors:
            raise AssertionError(f"{self.strategy}: consumer errors: {errors[:3]}")

    def _state(self) -> str:
        with self.lock:
            return "; ".join(
                f"#{m.index}{' (gone)' if m.gone else ''}: owns {sorted(m.owned)}, delivered {len(m.delivered)}, "
                f"callbacks {m.callbacks}"
                for m in self.members
            )

    def close(self) -> None:
        """Stop the polling threads (each closes its consumer)."""
        self.stop.set()
        self.go.set()
        for thread in self.threads:
            thread.join(60)

    @property
    def callbacks(self) -> list[int]:
        return [m.callbacks for m in self.members]


# -- one side ----------------------------------------------------------------------------------
def _fill(bootstrap: str, records_per_partition: int) -> None:
    """``records_per_partition`` keyless 100-byte records into every partition (untimed)."""
    from confluent_kafka import Producer

    rng = random.Random(23)
    values = [rng.randbytes(VALUE_BYTES) for _ in range(997)]
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, **QUIET})
    n = 0
    for partition in range(PARTITIONS):
        for _ in range(records_per_partition):
            while True:
                try:
                    producer.produce(TOPIC, values[n % len(values)], partition=partition)
                    break
                except BufferError:
                    producer.poll(0.01)
            n += 1
    left = producer.flush(120)
    if left:
        raise AssertionError(f"{left} of {n} records undelivered")


def _warm_up(bootstrap: str, extra: dict[str, Any]) -> None:
    """One consumer of an untimed group gets a record (the coordinator and its offsets topic exist)."""
    from confluent_kafka import Consumer

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "bench-r-warmup", **QUIET, **CONSUMER_CONFIG, **extra}
    )
    try:
        consumer.subscribe([TOPIC])
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            msg = consumer.poll(0.1)
            if msg is not None and msg.error() is None:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"warm-up consumer got no record within {TIMEOUT_S:.0f} s")
    finally:
        consumer.close()


def measure(bootstrap: str, run_no: int, repeats: int, extra: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """``repeats`` times both strategies' join and leave, each a fresh group, against
    ``bootstrap`` (topic filled); -> each strategy's repetitions."""
    _warm_up(bootstrap, extra)
    figures: dict[str, list[dict[str, Any]]] = {strategy: [] for strategy in STRATEGIES}
    for rep in range(1, repeats + 1):
        for strategy in STRATEGIES:
            group = _Group(bootstrap, f"bench-r-{strategy}-{run_no}-{rep}", strategy, extra)
            try:
                joined = group.join()
                group.wait_stable()
                left = group.leave()
            finally:
                group.close()
            figures[strategy].append({**joined, **left, "callbacks": group.callbacks})
    return figures


def measure_system(endpoint: Endpoint, run_no: int, repeats: int, records_per_partition: int) -> Figures:
    """Fill the topic, check it, then the repetitions (the mock's consumers: its 1 s join window)."""
    _fill(endpoint.bootstrap_servers, records_per_partition)
    hw = endpoint.high_watermarks()
    assert len(hw) == PARTITIONS and all(v == records_per_partition for v in hw.values()), hw
    extra = MOCK_CONSUMER_CONFIG if endpoint.system == "mock" else {}
    return measure(endpoint.bootstrap_servers, run_no, repeats, extra)


# -- the case ----------------------------------------------------------------------------------
_ROWS: tuple[tuple[str, str, float | None, tuple[str, ...]], ...] = (
    ("join_first_record_s", "join → every consumer's first record", TARGET_JOIN_S, STRATEGIES),
    ("join_all_assigned_s", "join → all 48 partitions assigned (info)", None, STRATEGIES),
    ("leave_all_owned_s", "leave → survivors own all 48", TARGET_LEAVE_S, STRATEGIES),
    ("leave_moved_delivered_s", "leave → … and moved ones delivered (info)", None, STRATEGIES),
    ("leave_last_survivor_revoked_s", "leave → last survivor's on_revoke (info)", None, ("range",)),
)


def _value(x: float | None) -> float:
    return math.nan if x is None else float(x)


def _repetitions(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per repetition (of every run), ``{system: {"<strategy>:<key>": value}}``: the
    figures are medians over every repetition, as in case (h)."""
    flat: list[dict[str, Any]] = []
    for row in rows:
        systems = [s for s in SYSTEMS if s in row]
        for rep in range(max(len(row[s][strategy]) for s in systems for strategy in STRATEGIES)):
            flat.append(
                {
                    s: {
                        f"{strategy}:{key}": _value(row[s][strategy][rep][key])
                        for strategy in STRATEGIES
                        if rep < len(row[s][strategy])
                        for key, *_ in _ROWS
                    }
                    for s in systems
                }
            )
    return flat


def _show(figures: Figures) -> str:
    return "; ".join(
        f"{strategy} join→first record "
        + "/".join(f"{rep['join_first_record_s']:.2f}" for rep in figures[strategy])
        + " s, leave→all owned "
        + "/".join(f"{rep['leave_all_owned_s']:.2f}" for rep in figures[strategy])
        + " s"
        for strategy in STRATEGIES
    )


def run(ctx: BenchContext) -> CaseResult:
    records_per_partition = ctx.scaled(RECORDS_PER_PARTITION, minimum=10)
    repeats = ctx.scaled(REPEATS)
    result = CaseResult(
        CASE,
        TITLE,
        __doc__ or "",
        params={
            "consumers": CONSUMERS,
            "topic_partitions": PARTITIONS,
            "records_per_partition": records_per_partition,
            "repetitions_per_run": repeats,
            "strategies": list(STRATEGIES),
            "broker_properties": BROKER_PROPERTIES,
            "consumer_config": CONSUMER_CONFIG,
            "mock_consumer_config": {**CONSUMER_CONFIG, **MOCK_CONSUMER_CONFIG},
            "systems": systems_note() + " (initial rebalance delay 0 everywhere)",
        },
    )
    result.runs = compare(
        ctx,
        CASE,
        lambda endpoint, run_no: measure_system(endpoint, run_no, repeats, records_per_partition),
        topic=TOPIC,
        partitions=PARTITIONS,
        properties=BROKER_PROPERTIES,
        show=_show,
    )
    reps = _repetitions(result.runs)
    for strategy in STRATEGIES:
        for key, name, bound, strategies in _ROWS:
            if strategy not in strategies:
                continue
            targets = [Target("value", "<=", bound, f"≤ {bound:g} s")] if bound is not None else []
            result.metrics.append(
                wire_metric(
                    CASE, reps, f"{strategy}:{key}", f"{strategy}: {name}", "s", targets, higher_is_better=False
                )
            )
    return result
