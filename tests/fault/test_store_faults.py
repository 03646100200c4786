"""A store that fails as real ones do (DESIGN §16): two brokers share one bucket prefix through
a proxy that answers some requests 503 SlowDown or 500 InternalError, drops the answer of
some PUTs after they landed, and adds latency, while idempotent producers and a Spark produce
job write one topic and the leading broker is killed -9 five times. Every acknowledged record
is in the Delta table exactly once, at the offset its acknowledgement gave, and every
partition's offsets are contiguous. The same run with the proxy stripping conditional writes
(once the brokers proved the store) must fail those checks: the checks can fail."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Producer

import sparklog
from sparklog.testing import BrokerAgents
from sparklog.testing.store_proxy import FaultPlan, StoreProxy
from tests.helpers import Ack, assert_acks_stored, assert_log_consistent, assert_values_unique, consumed, wait_until
from tests.wire.conftest import shared_store_brokers

TOPIC = "faulty"
KILLS = 5
SESSION_TIMEOUT_MS = 3_000
FAULTS = FaultPlan(
    slow_down=0.03, internal_error=0.02, lost_answer=0.2, latency_p50_ms=2.0, latency_p99_ms=20.0, seed=19
)
OVERWRITES = 3  # with conditions stripped: lost commits the checks must find
SPARK_JOBS = 3
SPARK_RECORDS = 200
SPARK_ATTEMPTS = 10


@dataclass
class Writers:
    """What the producers and the Spark job had acknowledged, and what failed them."""

    acks: list[Ack] = field(default_factory=list)
    spark_values: list[bytes] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    fatal: list[str] = field(default_factory=list)  # producers' fatal errors (desynchronised sequences)
    lock: threading.Lock = field(default_factory=threading.Lock)


@pytest.fixture
def proxied_store(proxy: StoreProxy, monkeypatch: pytest.MonkeyPatch) -> str:
    """A bucket prefix every process reaches through the proxy (its ``AWS_*`` variables)."""
    bucket = f"faults-{uuid.uuid4().hex[:10]}"
    proxy.upstream.create_bucket(bucket)
    for name, value in proxy.environ().items():
        monkeypatch.setenv(name, value)
    return f"s3://{bucket}/cluster"


@pytest.fixture
def options(zk_connect: str, sparklog_home: Path, proxied_store: str, proxy: StoreProxy) -> dict[str, str]:
    return {
        "zookeeper.connect": zk_connect,
        "sparklog.home": str(sparklog_home),
        "log.dirs": proxied_store,
        **proxy.settings(),
    }


@pytest.fixture
def brokers(zk_connect: str, sparklog_home: Path, tmp_path: Path, proxied_store: str) -> Iterator[BrokerAgents]:
    with shared_store_brokers(zk_connect, sparklog_home, tmp_path, proxied_store, SESSION_TIMEOUT_MS) as agents:
        yield agents


def produce_until(bootstrap: str, stop: threading.Event, writers: Writers, prefix: str) -> None:
    """Idempotent, acks=all; every acknowledged record noted with its (partition, offset)."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "message.timeout.ms": 120_000,
            "log_level": 2,
        }
    )

    def report(error: object, message: object) -> None:
        # No lock: both producers once hung here inside flush(), each waiting for it (a list's
        # append is atomic on its own).
        if error is not None:
            writers.errors.append(f"producer {prefix}: {error}")
            return
        partition, offset, value = consumed(message)  # type: ignore[arg-type]
        writers.acks.append(Ack(partition, offset, value))

    i = 0
    try:
        while not stop.is_set():
            for _ in range(20):
                producer.produce(TOPIC, value=f"{prefix}-{i}".encode(), partition=i % 2, on_delivery=report)
                i += 1
            producer.poll(0.05)
        assert producer.flush(180) == 0, f"producer {prefix}: records still unanswered"
    except KafkaException as fatal:  # a store that lost commits desynchronises the producer: the checks tell
        writers.fatal.append(f"producer {prefix}: {fatal}")


def spark_produce(spark: object, options: dict[str, str], writers: Writers) -> None:
    """Spark produce jobs into the same topic, each run again (its same rows) until it returns,
    as a user re-runs a failed job: a job that returned acknowledged its rows, and a failed
    one must have stored none of them (a job is atomic), or the re-run stores them twice."""
    from pyspark.sql import SparkSession

    assert isinstance(spark, SparkSession)
    for job in range(SPARK_JOBS):
        values = [f"spark-{job}-{k}".encode() for k in range(SPARK_RECORDS)]
        df = spark.createDataFrame([(v,) for v in values], "value binary")
        for attempt in range(SPARK_ATTEMPTS):
            try:
                sparklog.spark.produce(df, TOPIC, **options)
            except Exception as exc:  # leadership moved under it, or the store failed it: run it again
                with writers.lock:
                    writers.errors.append(f"spark job {job}, attempt {attempt}: {str(exc)[-300:]}")
                continue
            with writers.lock:
                writers.spark_values.extend(values)
            break


def kill_the_leader(cluster: sparklog.Cluster, agents: BrokerAgents) -> None:
    """Kill -9 the leader of partition 0; the other broker leads every partition; the killed
    one restarted and back in every ISR."""
    victim = cluster.describe_topic(TOPIC).partitions[0].leader
    survivor = 2 if victim == 1 else 1
    agents.kill(victim)
    wait_until(
        lambda: all(p.leader == survivor for p in cluster.describe_topic(TOPIC).partitions),
        f"broker {survivor} leading every partition",
        timeout_s=60,
    )
    agents.start(victim)
    wait_until(
        lambda: all(sorted(p.isr) == [1, 2] for p in cluster.describe_topic(TOPIC).partitions),
        f"broker {victim} back in every ISR",
        timeout_s=60,
    )


def write_through_faults(
    spark: object, proxy: StoreProxy, brokers: BrokerAgents, options: dict[str, str], plan: FaultPlan
) -> tuple[sparklog.Cluster, Writers]:
    cluster = sparklog.connect(options)
    # Partition 0 led by broker 1, partition 1 by broker 2: two leaders commit to one table.
    cluster.create_topic(TOPIC, replica_assignment={0: [1, 2], 1: [2, 1]})
    wait_until(
        lambda: (
            [(p.leader, sorted(p.isr)) for p in cluster.describe_topic(TOPIC).partitions] == [(1, [1, 2]), (2, [1, 2])]
        ),
        "each broker leading a partition, both in sync",
    )
    writers = Writers()
    stop = threading.Event()
    threads = [
        threading.Thread(target=produce_until, args=(brokers.bootstrap_servers, stop, writers, name), name=name)
        for name in ("a", "b")
    ]
    threads.append(threading.Thread(target=spark_produce, args=(spark, options, writers), name="spark"))
    proxy.inject(plan)  # the brokers proved the store already: stripping now goes unnoticed
    for thread in threads:
        thread.start()
    try:
        wait_until(lambda: len(writers.acks) >= 200, "records acknowledged with both brokers leading", timeout_s=120)
        if plan.strip_conditions:  # two leaders race one table only until the first kill
            wait_until(
                lambda: proxy.counts().get("overwritten", 0) >= OVERWRITES,
                f"{OVERWRITES} commits of one writer overwritten by the other's",
                timeout_s=120,
            )
        for _ in range(KILLS):
            kill_the_leader(cluster, brokers)
    finally:
        stop.set()
        for thread in threads:
            thread.join(300)
        proxy.inject(FaultPlan())
    print(
        f"acknowledged {len(writers.acks)} records and {len(writers.spark_values)} Spark rows; "
        f"store requests {proxy.counts()}; writers' errors {writers.errors[:5]}"
    )
    return cluster, writers


def check_stored_once(cluster: sparklog.Cluster, writers: Writers) -> None:
    records = assert_log_consistent(cluster, TOPIC)
    assert_values_unique(records)
    assert_acks_stored(records, writers.acks)
    stored = {r.value for r in records}
    missing = [v for v in writers.spark_values if v not in stored]
    assert not missing, f"{len(missing)} rows of Spark jobs that returned are not stored, e.g. {missing[0]!r}"


def test_every_acknowledged_record_is_stored_once_through_store_faults_and_kills(
    spark: object, proxy: StoreProxy, brokers: BrokerAgents, options: dict[str, str]
) -> None:
    cluster, writers = write_through_faults(spark, proxy, brokers, options, FAULTS)
    try:
        assert writers.acks and writers.spark_values, f"nothing acknowledged: {writers.errors[:5]}"
        assert not writers.fatal, f"a producer's sequence desynchronised: {writers.fatal}"
        check_stored_once(cluster, writers)
    finally:
        cluster.close()


def test_the_checks_fail_when_the_store_ignores_conditional_writes(
    spark: object, proxy: StoreProxy, brokers: BrokerAgents, options: dict[str, str]
) -> None:
    cluster, writers = write_through_faults(spark, proxy, brokers, options, FaultPlan(strip_conditions=True))
    try:
        with pytest.raises(AssertionError) as failed:
            check_stored_once(cluster, writers)
        print(f"the checks failed as they must: {str(failed.value)[:300]}")
    finally:
        cluster.close()
