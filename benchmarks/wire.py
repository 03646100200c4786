"""Shared machinery of the Kafka-wire cases (m)–(q): a sparklog broker agent process, the
librdkafka mock cluster that is their baseline, record pools, and confluent-kafka drivers.

* :func:`sparklog_broker` — one ``sparklog broker start`` process (``BrokerAgents``, id 1,
  in a fresh ``sparklog.home``/chroot of the run) and a topic of :data:`PARTITIONS`
  partitions, replication factor 1, every partition led by it.
* :class:`MockCluster` — librdkafka's in-memory mock cluster (one broker), started exactly
  as the ``test.mock.num.brokers`` client property starts it: a librdkafka client handle is
  created with that property and its mock cluster is taken with
  ``rd_kafka_handle_mock_cluster``. The Python binding has no call to create a topic on the
  mock (the mock refuses the Admin API's CreateTopics: it reports no controller), so the
  topic is created with librdkafka's ``rd_kafka_mock_topic_create`` through ``ctypes``, from
  the very library confluent-kafka loaded (its wheel's ``confluent_kafka.libs``). Auto-created
  topics would get the mock's default 4 partitions. Nothing is downloaded; the brokers are
  threads of this process listening on 127.0.0.1, reachable by any client.
* :class:`RssSampler` — ``VmRSS`` of a process (``/proc/<pid>/status``) every 50 ms.
* the drivers — :func:`produce_flood` (throughput), :func:`consume_ranges`,
  :func:`sequential_sends`, :func:`paced_producers`, :func:`end_to_end`.

Timestamps that cross threads (a send time carried in a record and read by a delivery
callback or a consumer) are ``time.monotonic_ns()``: CLOCK_MONOTONIC is one clock for every
thread and process of the host.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import json
import random
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.harness import percentile

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
@dataclass
class Broker:
    """A running sparklog broker agent: where clients connect and which process it is."""

    bootstrap_servers: str
    pid: int
    topic: str
    cluster: Any  # sparklog.Cluster (observer client of the run's cluster)
    agents: Any  # sparklog.testing.BrokerAgents

    def high_watermarks(self) -> dict[int, int]:
        return {int(p): int(hw) for p, hw in self.cluster.high_watermarks(self.topic).items()}


@contextlib.contextmanager
def sparklog_broker(
    env: RunEnv, topic: str, partitions: int = PARTITIONS, properties: dict[str, str] | None = None
) -> Iterator[Broker]:
    """One broker agent process (id 1) in ``env``'s cluster and ``topic`` (RF 1) led by it."""
    import sparklog
    from sparklog.testing import BrokerAgents

    with BrokerAgents(
        env.zk_connect, env.home, env.scratch / "brokers", log_level="WARNING", properties=properties
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
            yield Broker(agents.bootstrap_servers, agents.pid(1), topic, cluster, agents)


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

    def high_watermarks(self) -> dict[int, int]:
        return {p: high for p, (_low, high) in self.log_ranges().items()}

    def log_ranges(self) -> dict[int, tuple[int, int]]:
        """``(log start, high watermark)`` per partition. The mock keeps at most the last 5 MB
        (and 100,000 record batches) of a partition (``rd_kafka_mock_partition_new``: not
        configurable through a client): older batches are dropped as new ones arrive."""
        return watermarks(self.bootstrap_servers, self.topic)

    def close(self) -> None:
        if self._handle:
            self._lib.rd_kafka_destroy(self._handle)
            self._handle = None

    def __enter__(self) -> MockCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def watermarks(bootstrap: str, topic: str, partitions: int = PARTITIONS) -> dict[int, tuple[int, int]]:
    """``(log start, high watermark)`` of each partition as a Kafka client sees them (ListOffsets)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-watermarks", **QUIET})
    try:
        found = {}
        for p in range(partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
            found[p] = (int(low), int(high))
        return found
    finally:
        consumer.close()


# -- broker memory ----------------------------------------------------------------------------
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


def record_rss(ctx: BenchContext, source: str, run_no: int, sampler: RssSampler) -> dict[str, Any]:
    """Keep a run's broker RSS samples for case (q) (``ctx.cache['broker_rss']``); -> JSON row."""
    row = {
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
    largest round-trip time of any 500 ms window, in ms)."""

    seconds: float
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


def produce_flood(
    bootstrap: str, topic: str, pool: RecordPool, records: int, config: dict[str, Any], first: int = 0
) -> Flood:
    """Produce records ``first .. first+records-1`` of the pool as fast as the client goes, then
    ``flush()``; -> seconds from the first ``produce`` to ``flush`` returning, and the request
    counters of librdkafka's statistics. Every record must be delivered (delivery reports for
    errors only). Without idempotence, a request that timed out in the client is sent again and
    may then be stored twice (at least once: Kafka's contract): callers check that the log holds
    *at least* every record and report the difference."""
    from confluent_kafka import Producer

    errors = DeliveryErrors()
    statistics = _Statistics()
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "delivery.report.only.error": True,
            "on_delivery": errors,
            "statistics.interval.ms": 500,
            "stats_cb": statistics,
            **QUIET,
            **config,
        }
    )
    producer.list_topics(topic, timeout=30)  # connected, metadata known: not timed
    values, keys = pool.values, pool.keys
    produce = producer.produce
    started = time.perf_counter()
    for i in range(first, first + records):
        try:
            produce(topic, values[i % POOL], keys[i % KEY_POOL])
        except BufferError:
            _produce(producer, topic, values[i % POOL], keys[i % KEY_POOL])
    left = producer.flush(600)
    seconds = time.perf_counter() - started
    producer.poll(0.6)  # one more statistics window, so the counters include the end of the flood
    if left or errors.errors:
        raise AssertionError(f"{left} records undelivered, {len(errors.errors)} failed: {errors.errors[:3]}")
    return Flood(seconds, statistics.requests, statistics.retries, statistics.timeouts, statistics.max_rtt_ms)


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


def sequential_sends(bootstrap: str, topic: str, sends: int, config: dict[str, Any], warmup: int = 20) -> list[float]:
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


@dataclass
class PacedResult:
    """What :func:`paced_producers` measured."""

    latencies_ms: list[float]
    offered: int
    seconds: float  # first send → last delivery report
    failed: list[str] = field(default_factory=list)

    @property
    def delivered_per_s(self) -> float:
        return len(self.latencies_ms) / self.seconds if self.seconds else 0.0


def paced_producers(
    bootstrap: str, topic: str, producers: int, rate: float, duration_s: float, config: dict[str, Any]
) -> PacedResult:
    """``producers`` producer instances (one thread each) together offering ``rate`` records/s
    for ``duration_s`` (open loop: producer ``j`` sends its ``i``-th record at
    ``t0 + (i + j/producers) / per_producer_rate``, whatever the broker does), then flush; each
    record's latency is ``produce`` → its delivery report. Threads wait in ``poll`` (delivery
    reports are handled as they arrive) until their next send."""
    from confluent_kafka import Producer

    per_producer = rate / producers
    count = max(1, round(per_producer * duration_s))
    latencies: list[list[float]] = [[] for _ in range(producers)]
    failed: list[str] = []
    clients = []
    for j in range(producers):

        def delivered(err: Any, msg: Any, sink: list[float] = latencies[j]) -> None:
            if err is not None:
                failed.append(str(err))
                return
            sink.append((time.monotonic_ns() - stamp_of(msg.value())) / 1e6)

        client = Producer({"bootstrap.servers": bootstrap, "on_delivery": delivered, **QUIET, **config})
        client.list_topics(topic, timeout=30)
        clients.append(client)
    fillers = [random.Random(100 + j).randbytes(VALUE_BYTES) for j in range(producers)]
    # warm-up: every client has a connection and one delivered record (not counted)
    for j, client in enumerate(clients):
        client.produce(topic, stamped_value(fillers[j]))
        client.flush(60)
    for sink in latencies:
        sink.clear()
    start_ns = time.monotonic_ns() + 50_000_000
    interval_ns = 1e9 / per_producer

    def run(j: int) -> None:
        client, filler = clients[j], fillers[j]
        offset_ns = j * interval_ns / producers
        for i in range(count):
            due = start_ns + offset_ns + i * interval_ns
            while True:
                wait_s = (due - time.monotonic_ns()) / 1e9
                if wait_s <= 0:
                    break
                client.poll(wait_s)
            _produce(client, topic, stamped_value(filler))
            client.poll(0)
        client.flush(120)

    threads = [threading.Thread(target=run, args=(j,), name=f"paced-{j}", daemon=True) for j in range(producers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    seconds = (time.monotonic_ns() - start_ns) / 1e9
    left = sum(len(client) for client in clients)
    all_latencies = [x for sink in latencies for x in sink]
    if left:
        failed.append(f"{left} records still undelivered after flush")
    return PacedResult(all_latencies, count * producers, seconds, failed)


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
    warmup: int = 20,
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


def _send_and_wait(producer: Any, topic: str, filler: bytes, acks: dict[int, float], deadline: float) -> int:
    value = stamped_value(filler)
    stamp = stamp_of(value)
    producer.produce(topic, value)
    while stamp not in acks:
        producer.poll(0.1)
        if time.monotonic() > deadline:
            raise AssertionError("no delivery report within 60 s")
    return stamp


# -- small helpers ----------------------------------------------------------------------------
def p50_p99(values: list[float]) -> tuple[float, float]:
    return percentile(values, 50), percentile(values, 99)


def mib(n_bytes: float) -> float:
    return n_bytes / 2**20
