"""Shared machinery of the Kafka-wire cases (m)–(u): the three systems every case measures with
the same clients and data in the same run, the loop over runs and systems, record pools, and
confluent-kafka drivers.

* The systems (:data:`SYSTEMS`, opened by :func:`open_system` as an :class:`Endpoint`):
  ``sparklog`` — one ``sparklog broker start`` process (``BrokerAgents``, id 1, in a fresh
  ``sparklog.home``/chroot of the run) and a topic of :data:`PARTITIONS` partitions,
  replication factor 1, every partition led by it; ``kafka`` — Apache Kafka 4 itself, one KRaft
  node (broker and controller) on loopback (:mod:`benchmarks.kafka_broker`), the baseline and
  the ratio's denominator; ``mock`` — librdkafka's in-memory mock cluster (one broker), started
  exactly as the ``test.mock.num.brokers`` client property starts it: a librdkafka client
  handle is created with that property and its mock cluster is taken with
  ``rd_kafka_handle_mock_cluster``. The Python binding has no call to create a topic on the
  mock (the mock refuses the Admin API's CreateTopics: it reports no controller), so the topic
  is created with librdkafka's ``rd_kafka_mock_topic_create`` through ``ctypes``, from the very
  library confluent-kafka loaded (its wheel's ``confluent_kafka.libs``). Auto-created topics
  would get the mock's default 4 partitions. The mock's brokers are threads of this process
  listening on 127.0.0.1, reachable by any client.
* :func:`compare` — every run in a fresh env, each system in turn (the order rotated by run),
  a case's measurement against each; :func:`wire_metric` turns the figures into a table row
  (sparklog, Kafka as the baseline, the mock beside it).
* :class:`RssSampler` — ``VmRSS`` of a process (``/proc/<pid>/status``) every 50 ms;
  :func:`cpu_seconds` — a process's user + system CPU time (``/proc/<pid>/stat``).
* the drivers — :func:`produce_flood` (throughput), :func:`consume_ranges`,
  :func:`sequential_sends`, :func:`end_to_end`; the multi-process ones are in
  :mod:`benchmarks.fleet`.

Timestamps that cross threads (a send time carried in a record and read by a delivery
callback or a consumer) are ``time.monotonic_ns()``: CLOCK_MONOTONIC is one clock for every
thread and process of the host.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import json
import math
import os
import random
import struct
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.harness import Metric, Target, percentile, rotate
from benchmarks.kafka_broker import create_topic, kafka_broker

if TYPE_CHECKING:
    from benchmarks.harness import BenchContext, RunEnv

PARTITIONS = 6
VALUE_BYTES = 100
POOL = 65_537  # distinct values (a prime: value i % POOL and key i % KEY_POOL rarely line up)
KEY_POOL = 100_003
_STAMP = struct.Struct(">q")  # a send time carried in the first 8 bytes of a value
_LEAD_TIMEOUT_S = 60.0
# librdkafka logs errors only: an overloaded broker makes it log every timed-out request (level
# 4-5), thousands of lines; failed deliveries are counted and reported by the drivers instead.
QUIET: dict[str, Any] = {"log_level": 3}
SYSTEMS = ("sparklog", "kafka", "mock")  # the first goes first in run 1, the second in run 2, …
BASELINE = "kafka"  # the ratio's denominator; the mock is a second column
BROKERS = ("sparklog", "kafka")  # the systems with a broker process of their own
_DESCRIPTIONS = {
    "sparklog": "sparklog broker agent",
    "kafka": "Apache Kafka (KRaft, one node; baseline)",
    "mock": "librdkafka mock cluster",
}


# -- data -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RecordPool:
    """Values of exactly :data:`VALUE_BYTES` random (incompressible) bytes and 8-byte keys
    (``k`` + 7 digits), used cyclically: record ``i`` is ``(keys[i % KEY_POOL], values[i % POOL])``."""

    values: list[bytes]
    keys: list[bytes]


def record_pool(seed: int = 11) -> RecordPool:
    rng = random.Random(seed)
    values = [rng.randbytes(VALUE_BYTES) for _ in range(POOL)]
    keys = [b"k%07d" % i for i in range(KEY_POOL)]
    assert all(len(v) == VALUE_BYTES for v in values) and all(len(k) == 8 for k in keys)
    return RecordPool(values, keys)


def stamped_value(filler: bytes) -> bytes:
    """A :data:`VALUE_BYTES` value whose first 8 bytes are ``time.monotonic_ns()`` now."""
    return _STAMP.pack(time.monotonic_ns()) + filler[: VALUE_BYTES - _STAMP.size]


def stamp_of(value: bytes | None) -> int:
    """The send time :func:`stamped_value` put in ``value``."""
    if value is None or len(value) < _STAMP.size:
        raise AssertionError(f"not a stamped benchmark value: {value!r}")
    return int(_STAMP.unpack_from(value)[0])


# -- the sparklog side ------------------------------------------------------------------------
@dataclass(frozen=True)
class Broker:
    """A running sparklog broker agent: where clients connect, which process it is, and where
    it serves its Prometheus metrics."""

    bootstrap_servers: str
    pid: int
    metrics_url: str


@contextlib.contextmanager
def sparklog_broker(
    env: RunEnv,
    topic: str,
    partitions: int = PARTITIONS,
    properties: dict[str, str] | None = None,
    log_dir: str | None = None,
) -> Iterator[Broker]:
    """One broker agent process (id 1) in ``env``'s cluster and ``topic`` (RF 1) led by it. Its
    log dir is ``log_dir`` (e.g. an ``s3://`` prefix, case (w)) or else a directory under
    ``env``'s scratch space."""
    import sparklog
    from sparklog.testing import BrokerAgents

    with BrokerAgents(
        env.zk_connect,
        env.home,
        env.scratch / "brokers",
        log_level="WARNING",
        properties=properties,
        log_store=log_dir,
        shared_log_dir=log_dir is not None,
    ) as agents:
        agents.start(1)
        agents.wait_controller()
        with sparklog.connect(env.options) as cluster:
            cluster.create_topic(topic, partitions=partitions, replication_factor=1)
            deadline = time.monotonic() + _LEAD_TIMEOUT_S
            while not all(p.leader == 1 for p in cluster.describe_topic(topic).partitions):
                if time.monotonic() > deadline:
                    raise AssertionError(f"{topic}: no leader within {_LEAD_TIMEOUT_S} s\n{agents.logs([1])}")
                time.sleep(0.05)
            yield Broker(agents.bootstrap_servers, agents.pid(1), agents.metrics_url(1))


# -- the baseline: librdkafka's mock cluster --------------------------------------------------
def _librdkafka() -> ctypes.CDLL:
    """The librdkafka that confluent-kafka's extension module loaded (same file, same handle)."""
    import confluent_kafka

    package = Path(confluent_kafka.__file__).resolve().parent
    candidates = sorted(glob.glob(str(package.parent / "confluent_kafka.libs" / "librdkafka*.so*")))
    if not candidates:
        raise RuntimeError(f"librdkafka shared library not found next to {package} (confluent_kafka.libs)")
    lib = ctypes.CDLL(candidates[0])
    lib.rd_kafka_conf_new.restype = ctypes.c_void_p
    lib.rd_kafka_conf_set.argtypes = [
        ctypes.c_void_p,
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_size_t,
    ]
    lib.rd_kafka_conf_set.restype = ctypes.c_int
    lib.rd_kafka_new.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.rd_kafka_new.restype = ctypes.c_void_p
    lib.rd_kafka_handle_mock_cluster.argtypes = [ctypes.c_void_p]
    lib.rd_kafka_handle_mock_cluster.restype = ctypes.c_void_p
    lib.rd_kafka_mock_cluster_bootstraps.argtypes = [ctypes.c_void_p]
    lib.rd_kafka_mock_cluster_bootstraps.restype = ctypes.c_char_p
    lib.rd_kafka_mock_topic_create.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
    lib.rd_kafka_mock_topic_create.restype = ctypes.c_int
    lib.rd_kafka_mock_group_initial_rebalance_delay_ms.argtypes = [ctypes.c_void_p, ctypes.c_int32]
    lib.rd_kafka_mock_group_initial_rebalance_delay_ms.restype = None
    lib.rd_kafka_destroy.argtypes = [ctypes.c_void_p]
    lib.rd_kafka_destroy.restype = None
    return lib


class MockCluster:
    """librdkafka's mock cluster with one broker and ``topic`` of ``partitions`` partitions."""

    def __init__(self, topic: str, partitions: int = PARTITIONS) -> None:
        self._lib = _librdkafka()
        err = ctypes.create_string_buffer(512)
        conf = self._lib.rd_kafka_conf_new()
        for key, value in ((b"test.mock.num.brokers", b"1"), (b"log_level", b"3")):
            if self._lib.rd_kafka_conf_set(conf, key, value, err, len(err)) != 0:
                raise RuntimeError(f"librdkafka refused {key.decode()}={value.decode()}: {err.value.decode()}")
        handle = self._lib.rd_kafka_new(0, conf, err, len(err))  # 0 = RD_KAFKA_PRODUCER; owns conf now
        if not handle:
            raise RuntimeError(f"librdkafka could not start a mock cluster: {err.value.decode()}")
        self._handle: int | None = handle
        mcluster = self._lib.rd_kafka_handle_mock_cluster(handle)
        if not mcluster:
            self.close()
            raise RuntimeError("librdkafka started no mock cluster for test.mock.num.brokers=1")
        self._mcluster = mcluster
        self.bootstrap_servers = self._lib.rd_kafka_mock_cluster_bootstraps(mcluster).decode()
        code = self._lib.rd_kafka_mock_topic_create(mcluster, topic.encode(), partitions, 1)
        if code != 0:
            self.close()
            raise RuntimeError(f"rd_kafka_mock_topic_create({topic}, {partitions}) failed: error {code}")
        self.topic = topic

    def set_group_initial_rebalance_delay_ms(self, delay_ms: int) -> None:
        """The mock's ``group.initial.rebalance.delay.ms`` (librdkafka's default for it: 3000):
        ``rd_kafka_mock_group_initial_rebalance_delay_ms``, for groups created afterwards too."""
        if not self._handle:
            raise RuntimeError("the mock cluster is closed")
        self._lib.rd_kafka_mock_group_initial_rebalance_delay_ms(self._mcluster, delay_ms)

    def close(self) -> None:
        if self._handle:
            self._lib.rd_kafka_destroy(self._handle)
            self._handle = None

    def __enter__(self) -> MockCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def watermarks(
    bootstrap: str, topic: str, partitions: int = PARTITIONS, read_committed: bool = False
) -> dict[int, tuple[int, int]]:
    """``(log start, high watermark)`` of each partition as a Kafka client sees them (ListOffsets);
    with ``read_committed`` the second is the last stable offset. A broker just started that
    has not taken up its leadership yet (NOT_LEADER_FOR_PARTITION, LEADER_NOT_AVAILABLE) is
    asked again for up to 30 s, as a client's own requests would retry."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    not_ready = {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE}

    isolation = "read_committed" if read_committed else "read_uncommitted"
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "bench-watermarks", "isolation.level": isolation, **QUIET}
    )
    deadline = time.monotonic() + 30
    try:
        found = {}
        for p in range(partitions):
            while True:
                try:
                    low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
                    break
                except KafkaException as exc:
                    if exc.args[0].code() not in not_ready or time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)
            found[p] = (int(low), int(high))
        return found
    finally:
        consumer.close()


# -- the three systems ------------------------------------------------------------------------
def systems_note(systems: Sequence[str] = SYSTEMS) -> str:
    """What a case compares, for its JSON parameters (with Kafka's version when its jars are here)."""
    from benchmarks.kafka_broker import KafkaJarsMissing, kafka_version

    try:
        version = f"Apache Kafka {kafka_version()}"
    except KafkaJarsMissing:
        version = "Apache Kafka"
    return "; ".join(_DESCRIPTIONS[s].replace("Apache Kafka", version) for s in systems)


@dataclass(frozen=True)
class Endpoint:
    """One system ready for a case: where clients connect, the topic, the broker's process
    (None for the mock: it lives in this process), and its Prometheus metrics (sparklog's only)."""

    system: str
    bootstrap_servers: str
    topic: str
    partitions: int
    pid: int | None
    metrics_url: str | None = None

    def log_ranges(self, read_committed: bool = False) -> dict[int, tuple[int, int]]:
        return watermarks(self.bootstrap_servers, self.topic, self.partitions, read_committed)

    def high_watermarks(self, read_committed: bool = False) -> dict[int, int]:
        return {p: high for p, (_low, high) in self.log_ranges(read_committed).items()}


@contextlib.contextmanager
def open_system(
    system: str, env: RunEnv, topic: str, partitions: int = PARTITIONS, properties: dict[str, str] | None = None
) -> Iterator[Endpoint]:
    """``system`` running with ``topic`` (RF 1) for as long as the ``with`` lasts. ``properties``
    are broker settings under Kafka's names, given to sparklog's agent and to Kafka alike; the
    mock takes ``group.initial.rebalance.delay.ms`` only (its one such knob)."""
    properties = properties or {}
    if system == "sparklog":
        with sparklog_broker(env, topic, partitions, properties) as broker:
            yield Endpoint(system, broker.bootstrap_servers, topic, partitions, broker.pid, broker.metrics_url)
    elif system == "kafka":
        with kafka_broker(env.scratch / "kafka", properties) as kafka:
            create_topic(kafka.bootstrap_servers, topic, partitions)
            yield Endpoint(system, kafka.bootstrap_servers, topic, partitions, kafka.pid)
    elif system == "mock":
        with MockCluster(topic, partitions) as mock:
            delay = properties.get("group.initial.rebalance.delay.ms")
            if delay is not None:
                mock.set_group_initial_rebalance_delay_ms(int(delay))
            yield Endpoint(system, mock.bootstrap_servers, topic, partitions, None)
    else:
        raise ValueError(f"unknown system {system!r}; one of {SYSTEMS}")


Figures = dict[str, Any]


def compare(
    ctx: BenchContext,
    case: str,
    measure: Callable[[Endpoint, int], Figures],
    *,
    topic: str,
    partitions: int = PARTITIONS,
    properties: dict[str, str] | None = None,
    systems: Sequence[str] = SYSTEMS,
    show: Callable[[Figures], str] | None = None,
) -> list[dict[str, Any]]:
    """``ctx.runs`` runs; in each, a fresh env and every system in turn (the order rotated by
    run), each opened with the topic, measured by ``measure(endpoint, run_no)`` and closed before
    the next one starts. -> per run ``{"run", "order", "load_avg", <system>: figures, …}`` (the case's
    JSON rows). ``show(figures)`` is a system's part of the progress line."""
    rows = []
    for run_no in range(1, ctx.runs + 1):
        with ctx.fresh_env(case, run_no) as env:

            def side(system: str, env: RunEnv = env, run_no: int = run_no) -> Callable[[], Figures]:
                def run_side() -> Figures:
                    with open_system(system, env, topic, partitions, properties) as endpoint:
                        return measure(endpoint, run_no)

                return run_side

            order, figures = rotate(run_no, {system: side(system) for system in systems})
        if show is not None:
            ctx.log(case, f"run {run_no}: " + "; ".join(f"{s} {show(figures[s])}" for s in systems))
        rows.append({"run": run_no, "order": order, "load_avg": list(os.getloadavg()), **figures})
    return rows


def column(rows: Sequence[dict[str, Any]], system: str, key: str) -> list[float]:
    """``key``'s figure of ``system`` in every run that measured it (None → NaN)."""
    values = [row[system].get(key) for row in rows if system in row]
    return [math.nan if v is None else float(v) for v in values]


def wire_metric(
    case: str,
    rows: Sequence[dict[str, Any]],
    key: str,
    name: str,
    unit: str,
    targets: Sequence[Target] = (),
    higher_is_better: bool = True,
    note: str = "",
) -> Metric:
    """A table row of ``key``: sparklog, Kafka as the baseline (the ratio's denominator) and every
    other system measured (the mock) as a further column with its own ratio."""
    systems = [s for s in SYSTEMS if any(s in row for row in rows)]
    others = {s: column(rows, s, key) for s in systems if s not in ("sparklog", BASELINE)}
    return Metric(
        case,
        name,
        unit,
        column(rows, "sparklog", key),
        column(rows, BASELINE, key) if BASELINE in systems else None,
        list(targets),
        higher_is_better=higher_is_better,
        note=note,
        baseline_label=BASELINE,
        others=others,
    )


def fmt_latency(figures: Figures, prefix: str) -> str:
    """``p50/p99 ms`` of ``<prefix>_p50_ms`` / ``<prefix>_p99_ms`` for a progress line."""
    return f"{figures[f'{prefix}_p50_ms']:.2f}/{figures[f'{prefix}_p99_ms']:.2f} ms"


# -- broker processes: memory and CPU ---------------------------------------------------------
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` so far, every thread (``/proc/<pid>/stat`` fields 14–15)."""
    with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
        # the command name (field 2) may hold spaces: split after its closing parenthesis
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


def rss_bytes(pid: int) -> int | None:
    """``VmRSS`` of ``pid`` in bytes (None once the process is gone)."""
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return None
    return None


class RssSampler:
    """Samples ``pid``'s resident memory every ``interval_s`` in a thread while active."""

    def __init__(self, pid: int, interval_s: float = 0.05) -> None:
        self.pid = pid
        self.interval_s = interval_s
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"rss-{pid}", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            rss = rss_bytes(self.pid)
            if rss is not None:
                self.samples.append(rss)
            self._stop.wait(self.interval_s)

    def __enter__(self) -> RssSampler:
        first = rss_bytes(self.pid)
        if first is not None:
            self.samples.append(first)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        last = rss_bytes(self.pid)
        if last is not None:
            self.samples.append(last)

    @property
    def max_bytes(self) -> int:
        return max(self.samples, default=0)


@contextlib.contextmanager
def sample_rss(endpoint: Endpoint) -> Iterator[RssSampler | None]:
    """An :class:`RssSampler` of the system's broker process while the ``with`` lasts (None for
    the mock: it has no process of its own)."""
    if endpoint.pid is None:
        yield None
        return
    with RssSampler(endpoint.pid) as sampler:
        yield sampler


class CpuMeter:
    """The broker process's CPU seconds (user + system) between ``with`` entry and exit; NaN for
    the mock (it lives in the benchmark's process)."""

    def __init__(self, pid: int | None) -> None:
        self.pid = pid
        self.seconds = math.nan
        self._start = 0.0

    def __enter__(self) -> CpuMeter:
        if self.pid is not None:
            self._start = cpu_seconds(self.pid)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.pid is not None:
            self.seconds = cpu_seconds(self.pid) - self._start


def record_rss(
    ctx: BenchContext, source: str, run_no: int, sampler: RssSampler, system: str = "sparklog"
) -> dict[str, Any]:
    """Keep a run's broker RSS samples for case (q) (``ctx.cache['broker_rss']``); -> JSON row."""
    row = {
        "system": system,
        "source": source,
        "run": run_no,
        "samples": len(sampler.samples),
        "start_bytes": sampler.samples[0] if sampler.samples else None,
        "max_bytes": sampler.max_bytes,
        "end_bytes": sampler.samples[-1] if sampler.samples else None,
    }
    ctx.cache.setdefault("broker_rss", []).append(row)
    return row


# -- drivers ----------------------------------------------------------------------------------
class DeliveryErrors:
    """Delivery-report callback that keeps the failed deliveries (``delivery.report.only.error``)."""

    def __init__(self) -> None:
        self.errors: list[str] = []

    def __call__(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors.append(str(err))


def _produce(producer: Any, topic: str, value: bytes, key: bytes | None = None) -> None:
    """``producer.produce`` that waits for room when the client's queue is full."""
    while True:
        try:
            producer.produce(topic, value, key)
            return
        except BufferError:
            producer.poll(0.005)


@dataclass
class Flood:
    """What :func:`produce_flood` measured: the time, and what librdkafka's statistics say about
    its requests (cumulative over the flood: produce requests sent, retried, timed out; the
    largest round-trip time of any 500 ms window, in ms). ``end_ns``: ``time.monotonic_ns()``
    when ``flush()`` returned — not after the wait for the last statistics window, which ends
    on librdkafka's 500 ms statistics tick and would round every flood up to it."""

    seconds: float
    end_ns: int = 0
    requests: int = 0
    retries: int = 0
    request_timeouts: int = 0
    max_rtt_ms: float = 0.0

    def counters(self) -> dict[str, float]:
        return {
            "requests": self.requests,
            "retries": self.retries,
            "request_timeouts": self.request_timeouts,
            "max_rtt_ms": self.max_rtt_ms,
        }


class _Statistics:
    """``stats_cb`` keeping the produce-request counters of the brokers (not the bootstrap entry)."""

    def __init__(self) -> None:
        self.requests = self.retries = self.timeouts = 0
        self.max_rtt_ms = 0.0

    def __call__(self, raw: str) -> None:
        stats = json.loads(raw)
        brokers = [b for b in stats.get("brokers", {}).values() if int(b.get("nodeid", -1)) >= 0]
        self.requests = max(self.requests, sum(int(b.get("tx", 0)) for b in brokers))
        self.retries = max(self.retries, sum(int(b.get("txretries", 0)) for b in brokers))
        self.timeouts = max(self.timeouts, sum(int(b.get("req_timeouts", 0)) for b in brokers))
        rtts = [float(b.get("rtt", {}).get("max", 0)) / 1000 for b in brokers]
        self.max_rtt_ms = max([self.max_rtt_ms, *rtts])


class FloodProducer:
    """One ``confluent_kafka.Producer`` that produces records of the pool as fast as it goes:
    created and connected (metadata known) by the constructor, untimed; :meth:`run` is timed."""

    def __init__(self, bootstrap: str, topic: str, pool: RecordPool, config: dict[str, Any]) -> None:
        from confluent_kafka import Producer

        self.topic, self.pool = topic, pool
        self.errors = DeliveryErrors()
        self.statistics = _Statistics()
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "delivery.report.only.error": True,
                "on_delivery": self.errors,
                "statistics.interval.ms": 500,
                "stats_cb": self.statistics,
                **QUIET,
                **config,
            }
        )
        self.producer.list_topics(topic, timeout=30)  # connected, metadata known: not timed

    def run(self, first: int, records: int) -> Flood:
        """Records ``first .. first+records-1``, then ``flush()``; -> the time from the first
        ``produce`` to ``flush`` returning and the client's request counters."""
        producer, topic = self.producer, self.topic
        values, keys = self.pool.values, self.pool.keys
        produce = producer.produce
        started = time.perf_counter()
        for i in range(first, first + records):
            try:
                produce(topic, values[i % POOL], keys[i % KEY_POOL])
            except BufferError:
                _produce(producer, topic, values[i % POOL], keys[i % KEY_POOL])
        left = producer.flush(600)
        seconds = time.perf_counter() - started
        end_ns = time.monotonic_ns()
        producer.poll(0.6)  # one more statistics window, so the counters include the end of the flood
        if left or self.errors.errors:
            errors = self.errors.errors
            raise AssertionError(f"{left} records undelivered, {len(errors)} failed: {errors[:3]}")
        stats = self.statistics
        return Flood(seconds, end_ns, stats.requests, stats.retries, stats.timeouts, stats.max_rtt_ms)


def produce_flood(
    bootstrap: str, topic: str, pool: RecordPool, records: int, config: dict[str, Any], first: int = 0
) -> Flood:
    """Produce records ``first .. first+records-1`` of the pool as fast as one client goes, then
    ``flush()``; -> seconds from the first ``produce`` to ``flush`` returning, and the request
    counters of librdkafka's statistics. Every record must be delivered (delivery reports for
    errors only). Without idempotence, a request that timed out in the client is sent again and
    may then be stored twice (at least once: Kafka's contract): callers check that the log holds
    *at least* every record and report the difference."""
    return FloodProducer(bootstrap, topic, pool, config).run(first, records)


def check_stored(stored: int, acknowledged: int, where: str) -> int:
    """-> how many more records ``where`` holds than were acknowledged (retried requests stored
    twice); fewer than acknowledged is a lost acknowledged record: an error."""
    if stored < acknowledged:
        raise AssertionError(f"{where} holds {stored} records, {acknowledged} were acknowledged: records lost")
    return stored - acknowledged


@dataclass(frozen=True)
class Consumed:
    """What :func:`consume_ranges` read: records, seconds, and how many passes over the ranges."""

    records: int
    seconds: float
    passes: int


def consume_ranges(
    bootstrap: str, topic: str, ranges: dict[int, tuple[int, int]], records: int, config: dict[str, Any]
) -> Consumed:
    """Read every partition's ``[start, end)`` (``ranges``) with ``consume(≤ 10_000)``, as many
    passes as it takes to read ``records`` records (one pass when the ranges hold them all;
    each further pass re-``assign``s the starts); -> time from the first ``assign`` to the last
    record. Checked without touching each message: every pass returns exactly the records of
    the ranges and leaves each partition's position at its end (an error message counted as
    a record would end a pass short of them; ``auto.offset.reset=error`` makes an out-of-range
    offset such a message)."""
    from confluent_kafka import Consumer, TopicPartition

    per_pass = sum(end - start for start, end in ranges.values())
    if per_pass <= 0:
        raise AssertionError(f"nothing to read in {ranges}")
    expected_positions = {p: end for p, (_start, end) in ranges.items()}
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-consume",
            "enable.auto.commit": False,
            "auto.offset.reset": "error",
            **QUIET,
            **config,
        }
    )
    try:
        consumer.list_topics(topic, timeout=30)  # connected: not timed
        got = passes = 0
        deadline = time.monotonic() + 600
        started = time.perf_counter()
        while got < records:
            partitions = [TopicPartition(topic, p, start) for p, (start, _end) in sorted(ranges.items())]
            consumer.assign(partitions)
            this_pass = 0
            while this_pass < per_pass:
                # consume(n) waits until it has n messages or the timeout passed: never ask for
                # more than are left, or the last call of a pass waits out its timeout.
                this_pass += len(consumer.consume(min(10_000, per_pass - this_pass), 1.0))
                if time.monotonic() > deadline:
                    raise AssertionError(f"pass {passes + 1}: consumed {this_pass} of {per_pass} records in 600 s")
            got += this_pass
            passes += 1
            positions = {tp.partition: tp.offset for tp in consumer.position(partitions)}
            if this_pass != per_pass or positions != expected_positions:
                raise AssertionError(
                    f"pass {passes}: consumed {this_pass} of {per_pass}; positions {positions} != {expected_positions}"
                )
        seconds = time.perf_counter() - started
    finally:
        consumer.close()
    return Consumed(got, seconds, passes)


# Untimed sends before the counted ones: enough for Kafka's JIT to compile its request path.
WARMUP_SENDS = 200


def sequential_sends(
    bootstrap: str, topic: str, sends: int, config: dict[str, Any], warmup: int = WARMUP_SENDS
) -> list[float]:
    """Send one record, wait for its delivery report, send the next; -> each one's latency in ms
    (``produce`` → the report handled by ``poll``). ``warmup`` sends first, not counted."""
    from confluent_kafka import Producer

    filler = random.Random(5).randbytes(VALUE_BYTES)
    done: list[float] = []
    failures: list[str] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            failures.append(str(err))
        done.append((time.monotonic_ns() - stamp_of(msg.value())) / 1e6)

    producer = Producer({"bootstrap.servers": bootstrap, "on_delivery": delivered, **QUIET, **config})
    producer.list_topics(topic, timeout=30)
    for _ in range(warmup + sends):
        before = len(done)
        producer.produce(topic, stamped_value(filler))
        deadline = time.monotonic() + 60
        while len(done) == before:
            producer.poll(0.1)
            if time.monotonic() > deadline:
                raise AssertionError("no delivery report within 60 s")
    producer.flush(30)
    if failures:
        raise AssertionError(f"{len(failures)} sends failed: {failures[:3]}")
    return done[warmup:]


_POLL_RESOLUTION_S = 0.001  # confluent-kafka's poll() truncates its timeout to whole ms


class PacedProducer:
    """One ``confluent_kafka.Producer`` that sends keyless stamped records on a schedule (open
    loop: each at its time whatever the broker does), recording ``produce`` → delivery report per
    record. The constructor connects and sends one untimed warm-up record."""

    def __init__(self, bootstrap: str, topic: str, config: dict[str, Any], seed: int) -> None:
        from confluent_kafka import Producer

        self.topic = topic
        self.filler = random.Random(seed).randbytes(VALUE_BYTES)
        self.latencies_ms: list[float] = []
        self.failed: list[str] = []
        self.last_report_ns = self.last_send_ns = 0
        self.producer = Producer({"bootstrap.servers": bootstrap, "on_delivery": self._delivered, **QUIET, **config})
        self.producer.list_topics(topic, timeout=30)
        self.producer.produce(topic, stamped_value(self.filler))
        self.producer.flush(60)
        self.latencies_ms.clear()

    def _delivered(self, err: Any, msg: Any) -> None:
        now = time.monotonic_ns()
        if err is not None:
            self.failed.append(str(err))
            return
        self.last_report_ns = now
        self.latencies_ms.append((now - stamp_of(msg.value())) / 1e6)

    def run(self, start_ns: int, interval_ns: float, count: int, flush_s: float) -> int:
        """Record ``i`` at ``start_ns + i * interval_ns`` (waiting in ``poll``, which runs the
        delivery callbacks), then ``flush``; -> how many records were still undelivered."""
        producer, topic, filler = self.producer, self.topic, self.filler
        self.last_send_ns = start_ns
        for i in range(count):
            due = start_ns + i * interval_ns
            while True:
                wait_s = (due - time.monotonic_ns()) / 1e9
                if wait_s <= 0:
                    break
                if wait_s < _POLL_RESOLUTION_S:
                    # poll() takes whole milliseconds: a shorter wait would be poll(0) in a loop,
                    # a client spinning a core that the broker on the same machine needs.
                    time.sleep(wait_s)
                else:
                    producer.poll(wait_s)
            _produce(producer, topic, stamped_value(filler))
            producer.poll(0)
        self.last_send_ns = time.monotonic_ns()
        return int(producer.flush(flush_s))


@dataclass
class EndToEnd:
    """What :func:`end_to_end` measured (ms)."""

    e2e_ms: list[float]
    ack_ms: list[float]


def end_to_end(
    bootstrap: str,
    topic: str,
    partitions: int,
    sends: int,
    producer_config: dict[str, Any],
    consumer_config: dict[str, Any],
    warmup: int = WARMUP_SENDS,
) -> EndToEnd:
    """A consumer (its own thread, ``assign`` of every partition at the end) and a producer that
    sends one record at a time (next after the delivery report). Per record: produce → the
    consumer's ``poll`` returned it (``e2e``), and produce → delivery report (``ack``)."""
    from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition

    filler = random.Random(7).randbytes(VALUE_BYTES)
    received: dict[int, float] = {}  # send stamp -> e2e ms
    failures: list[str] = []
    stop = threading.Event()
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-e2e",
            "enable.auto.commit": False,
            **QUIET,
            **consumer_config,
        }
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_END) for p in range(partitions)])
    ready = threading.Event()

    def consume() -> None:
        while not stop.is_set():
            msg = consumer.poll(0.05)
            ready.set()
            if msg is None:
                continue
            now = time.monotonic_ns()
            if msg.error() is not None:
                failures.append(str(msg.error()))
                continue
            stamp = stamp_of(msg.value())
            received[stamp] = (now - stamp) / 1e6

    reader = threading.Thread(target=consume, name="e2e-consumer", daemon=True)
    reader.start()
    acks: dict[int, float] = {}

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            failures.append(str(err))
            return
        stamp = stamp_of(msg.value())
        acks[stamp] = (time.monotonic_ns() - stamp) / 1e6

    producer = Producer({"bootstrap.servers": bootstrap, "on_delivery": delivered, **QUIET, **producer_config})
    producer.list_topics(topic, timeout=30)
    try:
        ready.wait(30)
        # The consumer's assignment at the end offset resolves asynchronously: warm-up sends
        # until one of them arrives, then the counted ones.
        stamps: list[int] = []
        deadline = time.monotonic() + 60
        while not received or len(stamps) < warmup:
            stamps.append(_send_and_wait(producer, topic, filler, acks, deadline))
        counted = [_send_and_wait(producer, topic, filler, acks, time.monotonic() + 60) for _ in range(sends)]
        deadline = time.monotonic() + 60
        while not all(s in received for s in counted):
            if time.monotonic() > deadline:
                missing = sum(1 for s in counted if s not in received)
                raise AssertionError(f"{missing} of {sends} records not received within 60 s")
            time.sleep(0.01)
    finally:
        stop.set()
        reader.join(10)
        consumer.close()
        producer.flush(10)
    if failures:
        raise AssertionError(f"{len(failures)} failures: {failures[:3]}")
    return EndToEnd([received[s] for s in counted], [acks[s] for s in counted])


def settle(bootstrap: str, topic: str, config: dict[str, Any], quiet_ms: float = 100.0, limit_s: float = 60.0) -> float:
    """Send one record at a time until one is acknowledged within ``quiet_ms`` — an overloaded
    broker goes on answering the requests its clients already pipelined after they gave up —
    for at most ``limit_s``; -> the seconds it took."""
    started = time.monotonic()
    while time.monotonic() - started < limit_s:
        if sequential_sends(bootstrap, topic, 1, config, warmup=0)[0] <= quiet_ms:
            break
    return time.monotonic() - started


def _send_and_wait(producer: Any, topic: str, filler: bytes, acks: dict[int, float], deadline: float) -> int:
    value = stamped_value(filler)
    stamp = stamp_of(value)
    producer.produce(topic, value)
    while stamp not in acks:
        producer.poll(0.1)
        if time.monotonic() > deadline:
            raise AssertionError("no delivery report within 60 s")
    return stamp


# -- raw Kafka protocol (cases q and u: requests no client library sends the way we need) ------
_CLIENT_ID = b"bench-raw"


def kafka_request(api_key: int, version: int, correlation_id: int, body: bytes = b"") -> bytes:
    """A size-prefixed request: header v1 (api key, version, correlation id, client id), then
    ``body`` (non-flexible versions only)."""
    header = struct.pack(">hhih", api_key, version, correlation_id, len(_CLIENT_ID)) + _CLIENT_ID
    return struct.pack(">i", len(header) + len(body)) + header + body


def read_frame(stream: Any) -> bytes:
    """One size-prefixed response from a socket's binary file (``sock.makefile("rb")``)."""
    size_bytes = stream.read(4)
    if len(size_bytes) < 4:
        raise AssertionError("the broker closed the connection")
    size = struct.unpack(">i", size_bytes)[0]
    frame = stream.read(size)
    if len(frame) < size:
        raise AssertionError("the broker closed the connection mid-response")
    return bytes(frame)


def kafka_string(value: str) -> bytes:
    data = value.encode()
    return struct.pack(">h", len(data)) + data


# -- small helpers ----------------------------------------------------------------------------
def latency_targets(p50_ms: float, p99_ms: float) -> tuple[list[Target], list[Target]]:
    """The usual pair of latency targets on a metric's median: (p50 ≤ …, p99 ≤ …)."""
    return (
        [Target("value", "<=", p50_ms, f"≤ {p50_ms:g} ms")],
        [Target("value", "<=", p99_ms, f"≤ {p99_ms:g} ms")],
    )


def p50_p99(values: list[float]) -> tuple[float, float]:
    return percentile(values, 50), percentile(values, 99)


def mib(n_bytes: float) -> float:
    return n_bytes / 2**20
