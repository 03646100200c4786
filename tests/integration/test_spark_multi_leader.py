"""Spark writes to a topic whose partitions are led by different brokers: one Delta commit
per leader table, the streaming sink and ``consume_into`` exactly once across partial
commits, writers of an old leader epoch refused.

Three brokers' log dirs registered in one process (no agents, no fetchers: RF 1, leaders
stay where topic creation put them), real Spark, ZooKeeper and Delta tables.
"""

from __future__ import annotations

import json
import pickle
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pytest
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType, StructField, StructType

import sparklog
import sparklog.log.reserved_commit
from sparklog.errors import FencedError, NotLeaderError, StorageError
from sparklog.log.delta_sink import input_app_id
from sparklog.model.records import partition_for_key
from sparklog.spark import consume_into, produce
from sparklog.spark.exactly_once import _Output
from sparklog.spark.stream_writer import SparklogStreamWriter, StreamSegmentsWritten, stream_app_id, write_stream_task
from sparklog.spark.writer import (
    ProducePlan,
    SegmentsWritten,
    abort_produce,
    commit_produce,
    plan_produce,
    release_leases,
    write_task_segments,
)
from tests.helpers import assert_log_consistent, assert_values_unique
from tests.integration.test_streaming import assert_leases_released, assert_once, copy_query, send

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Partition -> its only replica's broker: 0 and 3 on broker 0, 1 on broker 1, 2 on broker 2.
ASSIGNMENT = {0: [0], 1: [1], 2: [2], 3: [0]}


@pytest.fixture
def brokers(cluster: sparklog.Cluster, tmp_path: Path) -> sparklog.Cluster:
    for broker in (1, 2):
        cluster.replicas.metadata.register_broker(broker, str(tmp_path / f"broker-{broker}"), None)
    return cluster


def create_multi_leader(cluster: sparklog.Cluster, topic: str) -> None:
    cluster.create_topic(topic, replica_assignment=ASSIGNMENT)
    leaders = cluster.replicas.leader_tables(topic)
    assert [parts for _table, parts in leaders] == [[0, 3], [1], [2]], "partitions must be led by three brokers"


def versions(cluster: sparklog.Cluster, topic: str) -> dict[int, int]:
    return {b: cluster.replicas.replica_table(topic, b).snapshot().version() for b in (0, 1, 2)}


def assert_on_leader_tables(cluster: sparklog.Cluster, topic: str) -> None:
    """Each broker's table holds files of the partitions it leads only, and its log ends
    are the high watermarks."""
    hws = cluster.high_watermarks(topic)
    for table, parts in cluster.replicas.leader_tables(topic):
        dt = table.snapshot()
        stray = {f.partition for f in table.files(dt)} - set(parts)
        assert not stray, f"{table.root} holds files of partitions {sorted(stray)} it does not lead"
        assert {p: table.log_end(dt, p) for p in parts} == {p: hws[p] for p in parts}


def keyed_batch(keys: list[str]) -> pa.RecordBatch:
    return pa.record_batch({"key": [k.encode() for k in keys], "value": [f"v-{k}".encode() for k in keys]})


def commit_order(cluster: sparklog.Cluster, topic: str) -> list[int]:
    """The brokers in the order a produce commits to their leader tables (by log dir)."""
    return sorted((0, 1, 2), key=lambda b: cluster.replicas.replica_table(topic, b).root)


def led_by(broker: int) -> list[int]:
    return [p for p, replicas in ASSIGNMENT.items() if replicas[0] == broker]


def fail_at_table(monkeypatch: pytest.MonkeyPatch, root: str) -> list[str]:
    """Make ``commit_reserved`` fail (before committing) for the table at ``root``: a job
    dying between two leader tables' commits. Returns the roots it did commit to."""
    real = sparklog.log.reserved_commit.commit_reserved
    committed: list[str] = []

    def failing(table, *args, **kwargs):  # type: ignore[no-untyped-def]
        if table.root == root:
            raise StorageError(f"simulated crash before committing to {table.root}")
        result = real(table, *args, **kwargs)
        committed.append(table.root)
        return result

    monkeypatch.setattr(sparklog.log.reserved_commit, "commit_reserved", failing)
    return committed


def elect(cluster: sparklog.Cluster, topic: str, partition: int, epoch: int) -> None:
    """What the controller records on a re-election of the same leader: a newer epoch."""
    state, version = cluster.replicas.metadata.partition_state(topic, partition)
    assert cluster.replicas.metadata.set_partition_state(topic, partition, replace(state, leader_epoch=epoch), version)


# -- batch writes --------------------------------------------------------------------------
def test_batch_writes_land_once_on_each_leader_table(
    spark: SparkSession, brokers: sparklog.Cluster, cluster_options: dict[str, str]
) -> None:
    cluster = brokers
    create_multi_leader(cluster, "multi")
    before = versions(cluster, "multi")
    keyed = spark.range(3000, numPartitions=3).select(
        F.concat(F.lit("k"), F.col("id").cast("string")).alias("key"),
        F.concat(F.lit("a"), F.col("id").cast("string")).alias("value"),
    )
    result = produce(keyed, "multi", **cluster_options)
    assert versions(cluster, "multi") == {b: v + 1 for b, v in before.items()}, "one commit per leader table"
    expected = Counter(partition_for_key(f"k{i}".encode(), 4) for i in range(3000))
    assert result.ranges == {p: (0, n) for p, n in expected.items()}, "produce() reports every leader table's part"
    keyless = spark.range(2000, numPartitions=4).select(F.concat(F.lit("b"), F.col("id").cast("string")).alias("value"))
    keyless.write.format("sparklog").options(**cluster_options).option("topic", "multi").mode("append").save()
    records = assert_log_consistent(cluster, "multi")
    assert len(records) == 5000
    assert_values_unique(records)
    assert Counter(r.partition for r in records if (r.value or b"").startswith(b"a")) == expected, (
        "keys partition like Kafka"
    )
    assert_on_leader_tables(cluster, "multi")
    for table, parts in cluster.replicas.leader_tables("multi"):
        dt = table.snapshot()
        assert all(table.leader_epoch(dt, p) == 0 for p in parts), "commits carry the leader epoch"
    assert_leases_released(cluster, "multi")


def test_takeover_marks_each_partitions_leader_table(
    brokers: sparklog.Cluster, cluster_options: dict[str, str]
) -> None:
    cluster = brokers
    create_multi_leader(cluster, "marked")
    crashed = plan_produce(cluster_options, "marked", "job-x")  # never committed nor released
    segments = write_task_segments(crashed, iter([keyed_batch([f"k{i}" for i in range(20)])]), 0)
    rerun = plan_produce(cluster_options, "marked", "job-x", adopt=True)
    for partition in range(4):
        leader = ASSIGNMENT[partition][0]
        for broker in (0, 1, 2):
            table = cluster.replicas.replica_table("marked", broker)
            fence = table.fence_epoch(table.snapshot(), partition)
            assert fence == (rerun.epochs[partition] if broker == leader else 0), (partition, broker)
    with pytest.raises(FencedError):
        commit_produce(crashed, [SegmentsWritten(0, segments)], {})
    abort_produce(crashed, [SegmentsWritten(0, segments)])
    release_leases(rerun)
    assert cluster.high_watermarks("marked") == {p: 0 for p in range(4)}


# -- leader epochs ---------------------------------------------------------------------------
def test_spark_write_of_an_old_leader_epoch_is_refused(
    brokers: sparklog.Cluster, cluster_options: dict[str, str]
) -> None:
    cluster = brokers
    create_multi_leader(cluster, "epochs")
    first, *_middle, last = commit_order(cluster, "epochs")
    batch = keyed_batch([f"k{i}" for i in range(200)])
    per_partition = Counter(partition_for_key(f"k{i}".encode(), 4) for i in range(200))

    def planned() -> tuple[ProducePlan, list[SegmentsWritten | None]]:
        plan = plan_produce(cluster_options, "epochs", "job")
        return plan, [SegmentsWritten(0, write_task_segments(plan, iter([batch]), 0))]

    # An election on the first table's partition after planning: nothing commits anywhere.
    plan, messages = planned()
    moved = led_by(first)[0]
    cluster.replicas.replica_table("epochs", first).commit_leader_epoch(moved, 1, lineage=True)
    with pytest.raises(NotLeaderError, match=f"epochs-{moved}: .* leader epoch 1, newer than this writer's 0"):
        commit_produce(plan, messages, {})
    abort_produce(plan, messages)
    assert cluster.high_watermarks("epochs") == {p: 0 for p in range(4)}
    written = [(int(s["partition"]), str(s["path"])) for m in messages if m is not None for s in m.segments]
    assert written and not any(Path(plan.table_of(p).root, path).exists() for p, path in written), "files deleted"
    assert_leases_released(cluster, "epochs")

    # The controller's state catches up; then an election on the LAST table after planning:
    # the earlier tables committed (atomic per leader table), the error says so, and the
    # abort keeps their files.
    elect(cluster, "epochs", moved, 1)
    plan, messages = planned()
    assert plan.leader_epochs[moved] == 1, "the plan carries the partition state's epoch"
    cluster.replicas.replica_table("epochs", last).commit_leader_epoch(led_by(last)[0], 1, lineage=True)
    with pytest.raises(NotLeaderError, match="committed before this failure"):
        commit_produce(plan, messages, {})
    abort_produce(plan, messages)
    assert cluster.high_watermarks("epochs") == {p: 0 if p in led_by(last) else per_partition[p] for p in range(4)}
    assert_log_consistent(cluster, "epochs")
    table = cluster.replicas.replica_table("epochs", first)
    assert table.leader_epoch(table.snapshot(), moved) == 1
    assert_leases_released(cluster, "epochs")


# -- streaming ---------------------------------------------------------------------------------
def test_write_stream_to_multi_leader_topic_is_exactly_once(
    spark: SparkSession, brokers: sparklog.Cluster, cluster_options: dict[str, str], tmp_path: Path
) -> None:
    cluster = brokers
    cluster.create_topic("src", partitions=2)
    create_multi_leader(cluster, "dst")
    checkpoint = tmp_path / "ckpt"
    send(cluster, "src", [f"a{i}" for i in range(30)])
    copy_query(spark, cluster_options, checkpoint, maxOffsetsPerTrigger="12")
    send(cluster, "src", [f"b{i}" for i in range(10)])
    copy_query(spark, cluster_options, checkpoint, maxOffsetsPerTrigger="12")  # a restart
    records = assert_log_consistent(cluster, "dst")
    assert_once(
        [(r.value or b"").decode() for r in records], [f"a{i}" for i in range(30)] + [f"b{i}" for i in range(10)]
    )
    assert_on_leader_tables(cluster, "dst")
    query_id = json.loads((checkpoint / "metadata").read_text())["id"]
    commits = sorted(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    last = commits[-1]
    for table, _parts in cluster.replicas.leader_tables("dst"):
        assert table.app_version(table.snapshot(), stream_app_id(query_id)) == last, (
            "every leader table got the batch id"
        )

    # A crash after the Delta commits but before Spark recorded the batch: Spark replays it.
    (checkpoint / "commits" / str(last)).unlink()
    (checkpoint / "commits" / f".{last}.crc").unlink(missing_ok=True)
    before = versions(cluster, "dst")
    copy_query(spark, cluster_options, checkpoint, maxOffsetsPerTrigger="12")
    assert (checkpoint / "commits" / str(last)).exists(), "Spark did not replay the batch"
    assert versions(cluster, "dst") == before, "a replay must not commit to any leader table"
    assert len(assert_log_consistent(cluster, "dst")) == 40
    assert_leases_released(cluster, "dst")


def test_stream_batch_committed_to_some_leader_tables_is_completed_by_its_replay(
    brokers: sparklog.Cluster, cluster_options: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = brokers
    create_multi_leader(cluster, "sink")
    schema = StructType([StructField("key", BinaryType()), StructField("value", BinaryType())])
    options = {**cluster_options, "topic": "sink", "spark.writer.lease.ms": "60000"}
    keys = [f"k{i}" for i in range(300)]

    def run_batch(batch_id: int, batch: pa.RecordBatch) -> list[StreamSegmentsWritten | None]:
        planned = pickle.loads(pickle.dumps(SparklogStreamWriter(options, schema, False)))  # as Spark ships it
        messages: list[StreamSegmentsWritten | None] = [
            write_stream_task(planned.plan, iter([batch]), 0, "query-1", batch_id)
        ]
        writer = SparklogStreamWriter(options, schema, False)  # a fresh commit-side instance
        try:
            writer.commit(messages, batch_id)
        except Exception:
            writer.abort(messages, batch_id)  # what Spark does after a failed commit
            raise
        return messages

    first, *_middle, last = commit_order(cluster, "sink")
    with monkeypatch.context() as patch:
        committed = fail_at_table(patch, cluster.replicas.replica_table("sink", last).root)
        with pytest.raises(StorageError, match=r"simulated crash.*committed before this failure"):
            run_batch(0, keyed_batch(keys))
    assert len(committed) == 2, "two leader tables committed, the last one did not"
    partial = cluster.high_watermarks("sink")
    assert all((partial[p] == 0) == (p in led_by(last)) for p in range(4)), partial
    assert_leases_released(cluster, "sink")

    before = versions(cluster, "sink")
    replay = run_batch(0, keyed_batch(keys))
    after = versions(cluster, "sink")
    assert {b: after[b] - before[b] for b in after} == {b: int(b == last) for b in after}, (
        "only the missing table committed"
    )
    root = Path(cluster.replicas.replica_table("sink", first).root)
    replay_paths = [str(s["path"]) for m in replay if m for s in m.segments if int(s["partition"]) in led_by(first)]
    assert replay_paths and not any((root / p).exists() for p in replay_paths), (
        "the skipped table's replay files are deleted"
    )
    records = assert_log_consistent(cluster, "sink")
    assert sorted(r.value or b"" for r in records) == sorted(f"v-{k}".encode() for k in keys), "every row exactly once"
    assert all(r.partition == partition_for_key((r.value or b"")[2:], 4) for r in records)
    run_batch(0, keyed_batch(keys))  # a second replay: nothing anywhere
    assert versions(cluster, "sink") == after
    run_batch(1, keyed_batch(["late"]))
    assert len(assert_log_consistent(cluster, "sink")) == 301


# -- consume_into ----------------------------------------------------------------------------
def produce_keyed(cluster: sparklog.Cluster, topic: str, values: list[str]) -> None:
    with cluster.producer() as producer:
        for value in values:
            producer.send(topic, value.encode(), key=value.encode())
        producer.flush()


def stored_inputs(cluster: sparklog.Cluster, topic: str, group: str, source: str) -> dict[int, dict[int, int | None]]:
    """Broker -> input partition -> the input offset its leader table of ``topic`` stores."""
    found = {}
    for broker in (0, 1, 2):
        table = cluster.replicas.replica_table(topic, broker)
        dt = table.snapshot()
        found[broker] = {
            p: table.app_version(dt, input_app_id(group, source, p)) for p in cluster.partitions_of(source)
        }
    return found


def test_consume_into_multi_leader_topic_exactly_once(
    spark: SparkSession, brokers: sparklog.Cluster, cluster_options: dict[str, str]
) -> None:
    cluster = brokers
    cluster.create_topic("in", replica_assignment={0: [0], 1: [1]})
    create_multi_leader(cluster, "out")
    expected: list[str] = []
    for wave in range(2):
        values = [f"w{wave}-{i}" for i in range(40)]
        produce_keyed(cluster, "in", values)
        expected += values
        runs = 0
        options = {"output_topic": "out", "maxOffsetsPerTrigger": 30, **cluster_options}
        while (result := consume_into(spark, "pipe", "in", **options)).records:
            assert result.mirrored and sum(e - s for s, e in result.output_ranges.values()) == result.records
            runs += 1
        assert runs == 2, "40 records with a cap of 30 take two runs"
    records = assert_log_consistent(cluster, "out")
    assert Counter((r.value or b"").decode() for r in records) == Counter(expected), "each input record exactly once"
    assert_on_leader_tables(cluster, "out")
    hw = cluster.high_watermarks("in")
    assert stored_inputs(cluster, "out", "pipe", "in") == {b: hw for b in (0, 1, 2)}, (
        "every leader table holds the offsets"
    )
    assert_leases_released(cluster, "out")


def test_consume_into_completes_a_run_committed_to_some_leader_tables(
    spark: SparkSession, brokers: sparklog.Cluster, cluster_options: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = brokers
    cluster.create_topic("in", partitions=2)
    create_multi_leader(cluster, "out")
    values = [f"r{i}" for i in range(60)]
    produce_keyed(cluster, "in", values)
    hw = cluster.high_watermarks("in")
    ids = {p: input_app_id("pipe", "in", p) for p in hw}

    # Run 1, by hand (as consume_into's job would): output = input key/value, all of it;
    # it dies between the leader tables of brokers 0 and 2 (before its mirror).
    plan = plan_produce(cluster_options, "out", "consume-into-pipe", adopt=True)
    source = cluster.read("in", include_headers=False).select(["key", "value"])
    messages: list[SegmentsWritten | None] = [
        SegmentsWritten(0, write_task_segments(plan, iter(source.to_batches()), 0))
    ]
    stored: dict[str, dict[str, int | None]] = {d: {a: None for a in ids.values()} for d in plan.log_dirs}
    run1 = _Output(
        "run-1",
        plan=plan,
        transactions={ids[p]: e for p, e in hw.items()},
        expected_tables=stored,
        metadata={"sparklog.job": "run-1"},
    )
    last = commit_order(cluster, "out")[-1]
    with monkeypatch.context() as patch:
        fail_at_table(patch, cluster.replicas.replica_table("out", last).root)
        with pytest.raises(StorageError, match="simulated crash"):
            run1.commit(messages)
    run1.abort(messages)
    assert not run1.landed()
    none = {p: None for p in hw}
    assert stored_inputs(cluster, "out", "pipe", "in") == {b: none if b == last else hw for b in (0, 1, 2)}
    assert cluster.committed_offsets("pipe", ["in"]) == {}

    # The next run starts from the lowest stored offsets (the last table's: none) and
    # replays exactly run 1's range: the other tables skip it, the last one gets its part.
    before = versions(cluster, "out")
    result = consume_into(spark, "pipe", "in", output_topic="out", maxOffsetsPerTrigger=10, **cluster_options)
    assert result.input_ranges == {("in", p): (0, e) for p, e in hw.items()}, "the interrupted range, uncapped"
    assert set(result.output_ranges) == set(led_by(last)), "only the missing table's partitions were written"
    after = versions(cluster, "out")
    assert {b: after[b] - before[b] for b in after} == {b: int(b == last) for b in after}
    records = assert_log_consistent(cluster, "out")
    assert Counter((r.value or b"").decode() for r in records) == Counter(values), "each input record exactly once"
    assert stored_inputs(cluster, "out", "pipe", "in") == {b: hw for b in (0, 1, 2)}
    assert cluster.committed_offsets("pipe", ["in"]) == {("in", p): e for p, e in hw.items()}, "mirrored"
    assert consume_into(spark, "pipe", "in", output_topic="out", **cluster_options).records == 0
