"""delta-spark conformance: what Delta Lake's own Spark connector reads of a topic table
equals what sparklog's readers give, after every writer (a Kafka client through a broker,
Spark's ``produce`` and ``format("sparklog")``, the light producer) and every maintenance
(compaction's offset gaps, retention and DeleteRecords moving log-start, Kafka transactions
committed, aborted and open, optimize, vacuum, Delta log checkpoints), and for a topic whose
partitions two brokers lead (two tables) — DESIGN §1, "delta-spark".

Per table, three comparisons (chispa shows the differing rows):

* ``spark.read.format("delta")`` minus the rows sparklog documents as hidden from its readers
  (control rows; records below an explicit log-start inside a straddling file) equals
  ``format("sparklog")`` at read_uncommitted, and exactly those rows are hidden;
* :func:`sparklog.spark.committed_view` (delta-spark read and filtered in Spark) equals
  ``format("sparklog")`` at read_committed (the default);
* and equals what the light consumer polls at read_committed.

In the wire tier because two of the writers are Kafka clients through a broker agent.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import reduce

import pyarrow as pa
import pytest
from confluent_kafka import Producer
from pyspark.sql import DataFrame, SparkSession

import sparklog
from sparklog.maintenance.runner import run_compaction, run_optimize, run_vacuum
from sparklog.model.schema import SPARK_READ_DDL_WITH_HEADERS
from sparklog.spark import committed_view, produce
from sparklog.testing import BrokerAgents
from tests.integration.test_compaction import compact_topic, send_file
from tests.integration.test_delta_spark import same
from tests.integration.test_optimize_vacuum import produce_small_files
from tests.integration.test_retention import HOUR_MS, produce_batches
from tests.wire.conftest import create_led_topic, wait_transactions_complete
from tests.wire.test_transactions import PARTITIONS, TIMEOUT_S, send, transactional

COLUMNS = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"]
NOTHING = "false"


@dataclass
class Table:
    """A topic whose table a case wrote, and what of it sparklog's readers never return."""

    topic: str
    hidden: str = NOTHING  # SQL predicate over the Delta table's rows
    hidden_rows: int = 0


@dataclass
class Case:
    cluster: sparklog.Cluster
    spark: SparkSession
    options: dict[str, str]
    request: pytest.FixtureRequest

    def broker(self, fixture: str = "one_broker") -> BrokerAgents:
        agents: BrokerAgents = self.request.getfixturevalue(fixture)
        return agents


def light_producer(case: Case) -> Table:
    case.cluster.create_topic("light", partitions=3)
    with case.cluster.producer() as producer:
        for i in range(30):
            producer.send("light", f"v{i}", key=f"k{i % 7}", headers=[("n", str(i).encode())])
    return Table("light")


def spark_writers(case: Case) -> Table:
    case.cluster.create_topic("spark-out", partitions=3)
    rows = case.spark.createDataFrame([(f"k{i}", f"v{i}") for i in range(40)], "key string, value string")
    assert produce(rows, "spark-out", **case.options).records == 40
    (
        rows.where("key < 'k2'")
        .write.format("sparklog")
        .options(**case.options)
        .option("topic", "spark-out")
        .mode("append")
        .save()
    )
    return Table("spark-out")


def kafka_wire(case: Case) -> Table:
    agents = case.broker()
    create_led_topic(case.cluster, agents, "wire", partitions=3)
    producer = Producer({"bootstrap.servers": agents.bootstrap_servers, "linger.ms": 5})
    for i in range(60):
        producer.produce("wire", value=f"v{i}".encode(), key=f"k{i % 5}".encode(), headers=[("h", b"x")])
    assert producer.flush(TIMEOUT_S) == 0
    return Table("wire")


def two_leaders(case: Case) -> Table:
    """Partitions led by two brokers: two tables, each read at its own version."""
    agents = case.broker("two_brokers")
    create_led_topic(case.cluster, agents, "spread", partitions=4)
    leaders = {p.leader for p in case.cluster.describe_topic("spread").partitions}
    assert len(leaders) == 2, leaders
    producer = Producer({"bootstrap.servers": agents.bootstrap_servers, "linger.ms": 5})
    for i in range(40):
        producer.produce("spread", value=f"v{i}".encode(), partition=i % 4)
    assert producer.flush(TIMEOUT_S) == 0
    return Table("spread")


def compaction(case: Case) -> Table:
    compact_topic(case.cluster)  # topic "t", one partition
    now = int(time.time() * 1000)
    with case.cluster.producer() as producer:
        send_file(producer, "t", 0, [(b"k%d" % (i % 3), b"v%d" % i, now) for i in range(30)])
        send_file(producer, "t", 0, [(b"z", b"head", now)])
    run_compaction(case.cluster.replicas, case.spark, ["t"], now_ms=now)
    assert case.cluster.read("t").column("offset").to_pylist() == [27, 28, 29, 30], "offset gaps"
    return Table("t")


def retention(case: Case) -> Table:
    case.cluster.create_topic("aging", 1, config={"retention.ms": str(2 * HOUR_MS + HOUR_MS // 2)})
    now = produce_batches(case.cluster, "aging", [3 * HOUR_MS, 0, 0])
    case.cluster.run_retention(["aging"], now_ms=now)  # removes the first file: log-start 10
    case.cluster.delete_records("aging", {0: 15})  # inside the second file
    assert case.cluster.partition_offsets("aging")[0] == (15, 30)
    return Table("aging", hidden="`offset` < 15", hidden_rows=5)


def transactions(case: Case) -> Table:
    agents = case.broker()
    create_led_topic(case.cluster, agents, "txns", partitions=PARTITIONS)
    bootstrap = agents.bootstrap_servers
    committing, aborting = transactional(bootstrap, "committing"), transactional(bootstrap, "aborting")
    plain = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    committing.begin_transaction()
    aborting.begin_transaction()
    for i in range(4):  # interleaved: the aborted runs are split by the others' records
        send(committing, [f"committed-{i}-{p}" for p in range(PARTITIONS)], topic="txns")
        send(aborting, [f"aborted-{i}-{p}" for p in range(PARTITIONS)], topic="txns")
        send(plain, [f"plain-{i}-{p}" for p in range(PARTITIONS)], topic="txns")
    committing.commit_transaction(TIMEOUT_S)
    aborting.abort_transaction(TIMEOUT_S)
    wait_transactions_complete(case.cluster, "committing", "aborting")
    # Left open: read_committed readers stop at its first offset (the last stable offset).
    open_one = transactional(bootstrap, "open", **{"transaction.timeout.ms": 600_000})
    open_one.begin_transaction()
    send(open_one, [f"open-{p}" for p in range(PARTITIONS)], topic="txns")
    send(plain, [f"after-open-{p}" for p in range(PARTITIONS)], topic="txns")
    return Table("txns", hidden="timestampType < 0", hidden_rows=2 * PARTITIONS)


def optimize(case: Case) -> Table:
    case.cluster.create_topic("merged", 2)
    produce_small_files(case.cluster, "merged", 8, partitions=2)
    merged, _checkpoints = run_optimize(case.cluster.replicas, ["merged"])
    assert len(merged) == 2 and all(result.version is not None for result in merged), merged
    return Table("merged")


def vacuum(case: Case) -> Table:
    optimize(case)
    [done] = run_vacuum(case.cluster.replicas, ["merged"], now_ms=int(time.time() * 1000) + 24 * HOUR_MS)
    assert done.deleted_files == 16, done
    return Table("merged")


def checkpoints(case: Case) -> Table:
    case.cluster.create_topic("long-log", 2, config={"history.retention.ms": "0"})
    with case.cluster.producer(linger_ms=0) as producer:
        for i in range(105):  # one commit each: past delta.checkpointInterval (100)
            producer.send("long-log", f"v{i}", partition=i % 2).result(timeout=30)
    run_optimize(case.cluster.replicas, ["long-log"])  # a checkpoint, the commits before it deleted
    table = case.cluster.replicas.leader_table("long-log")
    assert table.storage.exists(f"_delta_log/{table.snapshot().version():020d}.checkpoint.parquet")
    assert not table.storage.exists(f"_delta_log/{0:020d}.json"), "delta-spark must start from the checkpoint"
    return Table("long-log")


CASES: dict[str, Callable[[Case], Table]] = {
    "light-producer": light_producer,
    "spark-writers": spark_writers,
    "kafka-wire": kafka_wire,
    "two-leaders": two_leaders,
    "compaction": compaction,
    "retention": retention,
    "transactions": transactions,
    "optimize": optimize,
    "vacuum": vacuum,
    "checkpoints": checkpoints,
}


def delta_read(case: Case, topic: str) -> DataFrame:
    """The topic as delta-spark reads it: each leader's table, its led partitions (a table may
    hold other replicas too)."""
    led: dict[str, list[int]] = {}
    for p in case.cluster.partitions_of(topic):
        led.setdefault(case.cluster.topic_location(topic, p), []).append(p)
    frames = [
        case.spark.read.format("delta").load(root).where(f"`partition` IN ({', '.join(map(str, parts))})")
        for root, parts in led.items()
    ]
    return reduce(DataFrame.unionByName, frames).selectExpr("*", f"'{topic}' AS topic").select(COLUMNS)


def sparklog_read(case: Case, topic: str, level: str) -> DataFrame:
    reader = case.spark.read.format("sparklog").options(**case.options)
    return reader.option("subscribe", topic).option("includeHeaders", "true").option("isolation.level", level).load()


def light_consumer_read(case: Case, topic: str) -> DataFrame:
    """Everything the light consumer polls (read_committed), up to the last stable offsets."""
    ends = case.cluster.replicas.high_watermarks(topic, read_committed=True)
    consumer = case.cluster.consumer(auto_offset_reset="earliest")
    consumer.assign([(topic, p) for p in ends])
    polled: list[pa.Table] = []
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while any(consumer.position((topic, p)) < end for p, end in ends.items()):
            assert time.monotonic() < deadline, f"the light consumer did not reach {ends}"
            polled.append(consumer.poll_arrow(timeout_ms=200))
    finally:
        consumer.close()
    return case.spark.createDataFrame(pa.concat_tables(polled).to_pylist(), SPARK_READ_DDL_WITH_HEADERS)


@pytest.mark.parametrize("build", CASES.values(), ids=CASES.keys())
def test_delta_spark_reads_what_sparklog_reads(
    build: Callable[[Case], Table],
    cluster: sparklog.Cluster,
    spark: SparkSession,
    cluster_options: dict[str, str],
    request: pytest.FixtureRequest,
) -> None:
    case = Case(cluster, spark, cluster_options, request)
    table = build(case)
    plain = delta_read(case, table.topic)
    assert plain.where(table.hidden).count() == table.hidden_rows
    same(plain.where(f"NOT ({table.hidden})"), sparklog_read(case, table.topic, "read_uncommitted").select(COLUMNS))

    committed = committed_view(spark, table.topic, include_headers=True, **cluster_options).select(COLUMNS)
    same(committed, sparklog_read(case, table.topic, "read_committed").select(COLUMNS))
    same(committed, light_consumer_read(case, table.topic).select(COLUMNS))
