"""Every kind of writer on ONE topic at the same time: Kafka clients through a real broker agent
(confluent-kafka, kafka-python), a Spark produce job and sparklog's light producer.

Afterwards, per partition, offsets are unique and contiguous from 0 to the log end, and every
acknowledged record (delivery reports, futures, the Spark job's input) is stored exactly once,
at the offset its writer was told. The writers coordinate through the partitions' write
leases and the Delta app transactions every commit carries (docs/DESIGN.md §6): the Spark job
holds the leases of every partition from planning to commit, so the broker's group commit
and the light producer wait for it, and carry on after it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from kafka import KafkaProducer
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import sparklog
from sparklog.spark import produce
from sparklog.testing import BrokerAgents
from tests.wire.conftest import create_led_topic, wait_until

TOPIC = "mixed-writers"
PARTITIONS = 3
SPARK_ROWS = 20_000
MAX_RECORDS_PER_WRITER = 20_000  # bounds each client's loop whatever happens
BURST = 5  # records a client sends per 20 ms (~250 records/s per client)
RUN_TIMEOUT_S = 180.0


@dataclass
class Acks:
    """What one writer sent and what it was told: value -> (partition, offset) or the error,
    and how long each acknowledgement took (seconds) with the time it arrived."""

    name: str
    sent: int = 0
    acked: dict[bytes, tuple[int, int]] = field(default_factory=dict)
    failed: dict[bytes, str] = field(default_factory=dict)
    latencies: list[tuple[float, float]] = field(default_factory=list)  # (acked at, waited s)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def ok(self, value: bytes, partition: int, offset: int, sent_at: float) -> None:
        now = time.monotonic()
        with self.lock:
            self.acked[value] = (partition, offset)
            self.latencies.append((now, now - sent_at))

    def error(self, value: bytes, error: object) -> None:
        with self.lock:
            self.failed[value] = str(error)

    def count(self) -> int:
        with self.lock:
            return len(self.acked) + len(self.failed)

    def acked_since(self, since: float) -> int:
        with self.lock:
            return sum(1 for at, _w in self.latencies if at > since)

    def max_wait_between(self, start: float, end: float) -> float:
        """The longest a record sent in [start, end] waited for its acknowledgement."""
        with self.lock:
            return max((w for at, w in self.latencies if at - w <= end and at >= start), default=0.0)


class Writer(threading.Thread):
    """Sends records ``<name>-<i>`` in bursts until stopped (or ``MAX_RECORDS_PER_WRITER``)."""

    def __init__(self, acks: Acks) -> None:
        super().__init__(name=f"writer-{acks.name}", daemon=True)
        self.acks = acks
        self.stop = threading.Event()
        self.crashed: BaseException | None = None

    def run(self) -> None:
        try:
            self.open()
            i = 0
            while not self.stop.is_set() and i < MAX_RECORDS_PER_WRITER:
                for _ in range(BURST):
                    value = f"{self.acks.name}-{i}".encode()
                    key = None if i % 4 == 0 else f"k{i % 17}".encode()
                    self.send(key, value, time.monotonic())
                    i += 1
                self.acks.sent = i
                self.pause()
            self.finish()
        except BaseException as exc:  # reported by the test
            self.crashed = exc

    def open(self) -> None: ...
    def send(self, key: bytes | None, value: bytes, sent_at: float) -> None: ...
    def finish(self) -> None: ...

    def pause(self) -> None:
        self.stop.wait(0.02)


class ConfluentWriter(Writer):
    def __init__(self, acks: Acks, config: dict[str, Any]) -> None:
        super().__init__(acks)
        self.config = config

    def open(self) -> None:
        self.producer = Producer(self.config)

    def send(self, key: bytes | None, value: bytes, sent_at: float) -> None:
        def delivered(err: KafkaError | None, msg: Any) -> None:
            if err is not None:
                self.acks.error(value, err)
            else:
                self.acks.ok(value, msg.partition(), msg.offset(), sent_at)

        self.producer.produce(TOPIC, key=key, value=value, on_delivery=delivered)

    def pause(self) -> None:
        self.producer.poll(0.02)

    def finish(self) -> None:
        assert self.producer.flush(60) == 0, "confluent-kafka left messages undelivered"


class KafkaPythonWriter(Writer):
    def __init__(self, acks: Acks, config: dict[str, Any]) -> None:
        super().__init__(acks)
        self.config = config

    def open(self) -> None:
        self.producer = KafkaProducer(**self.config)

    def send(self, key: bytes | None, value: bytes, sent_at: float) -> None:
        future = self.producer.send(TOPIC, key=key, value=value)
        future.add_callback(lambda m: self.acks.ok(value, m.partition, m.offset, sent_at))
        future.add_errback(lambda e: self.acks.error(value, e))

    def finish(self) -> None:
        self.producer.flush(60)
        self.producer.close(10)


class LightWriter(Writer):
    def __init__(self, acks: Acks, cluster: sparklog.Cluster) -> None:
        super().__init__(acks)
        self.cluster = cluster

    def open(self) -> None:
        self.producer = self.cluster.producer(linger_ms=5)

    def send(self, key: bytes | None, value: bytes, sent_at: float) -> None:
        future = self.producer.send(TOPIC, value, key=key)

        def done(f: Any) -> None:
            if f.exception() is not None:
                self.acks.error(value, f.exception())
            else:
                self.acks.ok(value, f.result().partition, f.result().offset, sent_at)

        future.add_done_callback(done)

    def finish(self) -> None:
        self.producer.flush(60)
        self.producer.close()


def run_writers_around_a_spark_job(
    spark: SparkSession,
    cluster: sparklog.Cluster,
    cluster_options: dict[str, str],
    broker: BrokerAgents,
    writers: list[Writer],
) -> tuple[dict[int, tuple[int, int]], float, float]:
    """Start ``writers``, run a Spark produce job once each has been acknowledged, keep them
    writing until each is acknowledged again after the job, stop them; returns the job's
    ranges and its start and end (monotonic)."""
    for w in writers:
        w.start()

    def all_writing(since: float) -> Callable[[], bool]:
        def check() -> bool:
            crashed = [f"{w.acks.name}: {w.crashed!r}" for w in writers if w.crashed is not None]
            assert not crashed, f"writers crashed: {crashed}; broker log: {broker_log_tail(broker)}"
            return all(w.acks.acked_since(since) >= 2 * BURST for w in writers)

        return check

    try:
        wait_until(all_writing(0.0), "every writer acknowledged before the Spark job", RUN_TIMEOUT_S)
        df = spark.range(SPARK_ROWS, numPartitions=4).select(
            F.when(F.col("id") % 3 != 0, F.concat(F.lit("k"), (F.col("id") % 17).cast("string")))
            .cast("binary")
            .alias("key"),
            F.concat(F.lit("spark-"), F.col("id").cast("string")).cast("binary").alias("value"),
        )
        started = time.monotonic()
        result = produce(df, TOPIC, **cluster_options)
        ended = time.monotonic()
        wait_until(all_writing(ended), "every writer acknowledged after the Spark job", RUN_TIMEOUT_S)
    finally:
        for w in writers:
            w.stop.set()
        for w in writers:
            w.join(RUN_TIMEOUT_S)
    assert not any(w.is_alive() for w in writers), "a writer did not finish"
    crashed = [f"{w.acks.name}: {w.crashed!r}" for w in writers if w.crashed is not None]
    assert not crashed, f"writers crashed: {crashed}; broker log: {broker_log_tail(broker)}"
    return result.ranges, started, ended


def broker_log_tail(broker: BrokerAgents, lines: int = 40) -> str:
    try:
        return "\n".join(broker.log_path(1).read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"(no log: {exc})"


def check_every_acknowledged_record_stored_once(
    cluster: sparklog.Cluster, writers: list[Acks], spark_ranges: dict[int, tuple[int, int]]
) -> None:
    table = cluster.read(TOPIC, include_headers=False)
    partitions = table.column("partition").to_pylist()
    offsets = table.column("offset").to_pylist()
    values = table.column("value").to_pylist()
    # invariant 1: per partition, offsets unique and contiguous from 0
    ends = {}
    for p in range(PARTITIONS):
        got = sorted(o for q, o in zip(partitions, offsets, strict=True) if q == p)
        assert got == list(range(len(got))), (
            f"partition {p}: {len(got)} offsets, {len(set(got))} distinct, "
            f"first gap or duplicate at index {next((i for i, o in enumerate(got) if o != i), len(got))}"
        )
        ends[p] = len(got)
    assert ends == {p: end for p, (_start, end) in cluster.partition_offsets(TOPIC).items()}
    # every record at most once
    stored: dict[bytes, tuple[int, int]] = {}
    twice: dict[bytes, list[tuple[int, int]]] = {}
    for p, o, v in zip(partitions, offsets, values, strict=True):
        if v in stored:
            twice.setdefault(v, [stored[v]]).append((p, o))
        stored[v] = (p, o)
    if twice:
        told = {v: (w.name, w.acked.get(v)) for w in writers for v in twice if v in w.acked}
        raise AssertionError(f"{len(twice)} records stored twice, e.g. {list(twice.items())[:5]}; acked: {told}")
    for w in writers:
        assert not w.failed, f"{w.name}: deliveries failed: {list(w.failed.items())[:3]}"
        assert len(w.acked) == w.sent, f"{w.name}: {w.sent} sent, {len(w.acked)} acked"
        for value, position in w.acked.items():
            assert stored.get(value) == position, (
                f"{w.name}: {value!r} acknowledged at {position}, stored at {stored.get(value)}"
            )
    # the Spark job's whole input, at the ranges it reported
    spark_positions = {v: po for v, po in stored.items() if v.startswith(b"spark-")}
    assert sorted(spark_positions) == sorted(f"spark-{i}".encode() for i in range(SPARK_ROWS))
    for p, (start, end) in spark_ranges.items():
        assert sorted(o for q, o in spark_positions.values() if q == p) == list(range(start, end))
    # nothing else: every stored record was acknowledged to someone
    assert len(stored) == SPARK_ROWS + sum(len(w.acked) for w in writers)
    # the writers really interleaved: client records on both sides of the job's range
    for p, (start, end) in spark_ranges.items():
        client = [o for v, (q, o) in stored.items() if q == p and not v.startswith(b"spark-")]
        assert min(client) < start and max(client) >= end, f"partition {p}: no client record around the job"


@pytest.mark.parametrize("idempotent", [False, True], ids=["acks1", "acks_all_idempotent"])
def test_kafka_clients_spark_and_light_producer_write_one_topic_at_once(
    spark: SparkSession,
    cluster: sparklog.Cluster,
    cluster_options: dict[str, str],
    one_broker: BrokerAgents,
    idempotent: bool,
) -> None:
    create_led_topic(cluster, one_broker, TOPIC, partitions=PARTITIONS)
    bootstrap = one_broker.bootstrap_servers
    confluent = {"bootstrap.servers": bootstrap, "linger.ms": 5}
    kafka_python: dict[str, Any] = {"bootstrap_servers": bootstrap, "linger_ms": 5}
    if idempotent:
        confluent |= {"acks": "all", "enable.idempotence": True}
        kafka_python |= {"acks": "all", "enable_idempotence": True}
    else:
        confluent |= {"acks": 1, "enable.idempotence": False}
        kafka_python |= {"acks": 1, "enable_idempotence": False}
    writers: list[Writer] = [
        ConfluentWriter(Acks("confluent"), confluent),
        KafkaPythonWriter(Acks("kafkapython"), kafka_python),
        LightWriter(Acks("light"), cluster),
    ]
    spark_ranges, started, ended = run_writers_around_a_spark_job(spark, cluster, cluster_options, one_broker, writers)
    waits = {w.acks.name: round(w.acks.max_wait_between(started, ended), 3) for w in writers}
    print(f"\nSpark job of {SPARK_ROWS} rows took {ended - started:.2f} s; longest waits {waits}")
    check_every_acknowledged_record_stored_once(cluster, [w.acks for w in writers], spark_ranges)


def test_requests_queued_behind_another_writer_go_into_few_commits(
    cluster: sparklog.Cluster, one_broker: BrokerAgents
) -> None:
    """While another writer holds a partition's write lease (a Spark job holds it from planning
    to commit), a Kafka producer's requests queue up on its connection; once the lease is free
    they are committed together. Before the listener read a connection's requests ahead, each
    queued request took a commit of its own: a backlog drained one commit per request, and a
    producer sending faster than that never caught up (requests then outlived the clients'
    timeouts, and non-idempotent retries stored records twice)."""
    import json

    from sparklog.metadata.lease import WriterLease

    topic = "stalled"
    create_led_topic(cluster, one_broker, topic, partitions=1)
    stats: list[dict[str, Any]] = []
    producer = Producer(
        {
            "bootstrap.servers": one_broker.bootstrap_servers,
            "linger.ms": 0,
            "acks": 1,
            "enable.idempotence": False,
            "statistics.interval.ms": 100,
            "stats_cb": lambda raw: stats.append(json.loads(raw)),
        }
    )
    reports: dict[int, Any] = {}

    def send(i: int) -> None:
        def delivered(err: KafkaError | None, msg: Any) -> None:
            reports[i] = err if err is not None else msg.offset()

        producer.produce(topic, value=f"v{i}".encode(), on_delivery=delivered)

    send(0)
    assert producer.flush(30) == 0
    table = cluster.replicas.leader_table(topic)

    def produce_requests() -> int:
        producer.poll(0.2)  # serves the statistics callback
        return sum(b.get("req", {}).get("Produce", 0) for b in stats[-1]["brokers"].values()) if stats else 0

    lease = WriterLease(cluster.replicas.zk, topic, 0, "stand-in-for-a-spark-job", 60_000)
    lease.acquire(10_000)
    try:
        commits_before = table.snapshot().version()
        requests_before = produce_requests()
        for i in range(1, 201):
            send(i)
            producer.poll(0.005)  # one request per record or so: linger.ms=0, no in-flight limit
        wait_until(lambda: produce_requests() - requests_before >= 100, "100 produce requests sent")
        assert table.snapshot().version() == commits_before, "a commit under someone else's lease"
    finally:
        lease.release()
    assert producer.flush(60) == 0
    requests = produce_requests() - requests_before
    commits = table.snapshot().version() - commits_before
    assert sorted(reports.values()) == list(range(201)), "every record delivered, offsets contiguous"
    assert commits <= requests / 4, f"{requests} produce requests took {commits} commits"


# -- 64 producers --------------------------------------------------------------------------------
PRODUCER_PROCESSES = 8
PRODUCERS_PER_PROCESS = 8  # 64 producers, each a client with connections of its own


def produce_from_a_process(bootstrap: str, process_no: int, started: Any, job_done: Any, results: Any) -> None:
    """One process's producers (idempotent, acks=all, linger.ms=0: "every acknowledged record
    once" is what idempotence promises even when a request times out and is sent again)
    sending until the Spark job is done and a few more records after it; puts
    ``{name: (sent, acked, failed)}`` on ``results``."""
    log: dict[str, tuple[dict[bytes, tuple[int, int]], dict[bytes, str]]] = {}
    producers: list[tuple[str, Producer]] = []
    for j in range(PRODUCERS_PER_PROCESS):
        name = f"p{process_no}.{j}"
        idempotent = j % 2 == 0
        config: dict[str, Any] = {"bootstrap.servers": bootstrap, "linger.ms": 0, "client.id": name}
        config |= (
            {"acks": "all", "enable.idempotence": True} if idempotent else {"acks": 1, "enable.idempotence": False}
        )
        producers.append((name, Producer(config)))
        log[name] = ({}, {})

    def reporter(name: str, value: bytes) -> Callable[[KafkaError | None, Any], None]:
        def delivered(err: KafkaError | None, msg: Any) -> None:
            if err is not None:
                log[name][1][value] = str(err)
            else:
                log[name][0][value] = (msg.partition(), msg.offset())

        return delivered

    i = after = 0
    while i < MAX_RECORDS_PER_WRITER and after < 5:
        for name, producer in producers:
            value = f"{name}-{i}".encode()
            producer.produce(TOPIC, key=f"k{i % 17}".encode(), value=value, on_delivery=reporter(name, value))
            producer.poll(0)
        i += 1
        if i == 3:
            started.release()
        if job_done.is_set():
            after += 1
        time.sleep(0.2)
    for name, producer in producers:
        assert producer.flush(60) == 0, f"{name} left messages undelivered"
    results.put({name: (i, acked, failed) for name, (acked, failed) in log.items()})


def test_sixty_four_producers_and_a_spark_job_write_one_topic(
    spark: SparkSession, cluster: sparklog.Cluster, cluster_options: dict[str, str], one_broker: BrokerAgents
) -> None:
    import multiprocessing

    create_led_topic(cluster, one_broker, TOPIC, partitions=PARTITIONS)
    context = multiprocessing.get_context("spawn")
    started, job_done, results = context.Semaphore(0), context.Event(), context.Queue()
    processes = [
        context.Process(
            target=produce_from_a_process,
            args=(one_broker.bootstrap_servers, n, started, job_done, results),
            daemon=True,
        )
        for n in range(PRODUCER_PROCESSES)
    ]
    for process in processes:
        process.start()
    try:
        for _ in processes:
            assert started.acquire(timeout=RUN_TIMEOUT_S), "a producer process did not start sending"
        # The job starts once client records are in every partition, so they land on both
        # sides of its range (a partition the first keys missed would start with the job).
        wait_until(
            lambda: all(end > 0 for _start, end in cluster.partition_offsets(TOPIC).values()),
            "a client record in every partition",
            timeout_s=RUN_TIMEOUT_S,
        )
        df = spark.range(SPARK_ROWS, numPartitions=2).select(
            F.concat(F.lit("k"), (F.col("id") % 17).cast("string")).cast("binary").alias("key"),
            F.concat(F.lit("spark-"), F.col("id").cast("string")).cast("binary").alias("value"),
        )
        job_started = time.monotonic()
        spark_ranges = produce(df, TOPIC, **cluster_options).ranges
        job_s = time.monotonic() - job_started
        job_done.set()
        logs: dict[str, tuple[int, dict[bytes, tuple[int, int]], dict[bytes, str]]] = {}
        for _ in processes:
            logs |= results.get(timeout=RUN_TIMEOUT_S)
    finally:
        job_done.set()
        for process in processes:
            process.join(30)
            if process.is_alive():
                process.kill()
    assert len(logs) == PRODUCER_PROCESSES * PRODUCERS_PER_PROCESS
    print(f"\nSpark job of {SPARK_ROWS} rows took {job_s:.2f} s beside {len(logs)} producers")
    writers = [Acks(name, sent, acked, failed) for name, (sent, acked, failed) in sorted(logs.items())]
    check_every_acknowledged_record_stored_once(cluster, writers, spark_ranges)
