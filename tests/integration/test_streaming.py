"""Structured Streaming: ``readStream``/``writeStream.format("sparklog")`` on a real Spark,
ZooKeeper and Delta tables. Every query runs to completion (``trigger(availableNow=True)``
or ``processAllAvailable``) so the tests are deterministic."""

from __future__ import annotations

import json
import pickle
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import BinaryType, StructField, StructType

import sparklog
from sparklog.metadata import zkdata
from sparklog.metadata.zkdata import WriterLeaseRecord
from sparklog.spark.stream_reader import rate_limit
from sparklog.spark.stream_writer import SparklogStreamWriter, stream_app_id, write_stream_task
from tests.helpers import BOTH_STORES, assert_log_consistent, stored_records

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Batch = list[tuple[str, int, int, bytes]]  # (topic, partition, offset, value) per record


def send(cluster: sparklog.Cluster, topic: str, values: Iterable[str], partition: int | None = None) -> None:
    with cluster.producer(linger_ms=20) as producer:
        for value in values:
            producer.send(topic, value, partition=partition)


def stream(spark: SparkSession, options: dict[str, str], **extra: str) -> DataFrame:
    return spark.readStream.format("sparklog").options(**options).options(**extra).load()


def run_available_now(df: DataFrame, checkpoint: Path, batches: list[Batch] | None = None) -> list[Batch]:
    """Run ``df`` to a foreachBatch sink until everything available now is processed."""
    collected: list[Batch] = [] if batches is None else batches

    def collect(batch_df: DataFrame, _batch_id: int) -> None:
        rows = batch_df.select("topic", "partition", "offset", "value").collect()
        collected.append([(r.topic, r.partition, r.offset, bytes(r.value)) for r in rows])

    query = (
        df.writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(180)
    assert not query.isActive, "the availableNow query did not finish"
    if query.exception() is not None:
        raise query.exception()  # type: ignore[misc]
    return collected


def values_of(batches: list[Batch]) -> list[str]:
    return [r[3].decode() for batch in batches for r in batch]


def assert_once(seen: list[str], wanted: Iterable[str]) -> None:
    counts = Counter(seen)
    twice = sorted(v for v, n in counts.items() if n > 1)
    assert not twice, f"{len(twice)} records seen more than once, e.g. {twice[:3]}"
    missing = sorted(set(wanted) - set(counts))
    extra = sorted(set(counts) - set(wanted))
    assert not missing and not extra, f"missing {missing[:5]} ({len(missing)}), unexpected {extra[:5]} ({len(extra)})"


# -- readStream --------------------------------------------------------------------------
@pytest.mark.parametrize("limit", [1, 2, 3, 7, 50, 76, 77, 500])
def test_rate_limit_is_exact_and_proportional(limit: int) -> None:
    starts = {"t": {0: 10, 1: 0}}  # partition 2 is new: it starts at 0
    ends = {"t": {0: 60, 1: 20, 2: 7}}
    capped = rate_limit(starts, ends, limit)
    taken = {p: capped["t"][p] - starts["t"].get(p, 0) for p in ends["t"]}
    assert sum(taken.values()) == min(limit, 77), taken
    assert all(0 <= taken[p] <= ends["t"][p] - starts["t"].get(p, 0) for p in taken), taken
    if limit >= 3:
        assert all(n > 0 for n in taken.values()), f"no partition starves: {taken}"
        assert taken[0] >= taken[1] >= taken[2], f"shares follow the backlog (50, 20, 7): {taken}"


@BOTH_STORES
def test_read_stream_sees_every_record_once_across_restarts(
    spark: SparkSession, cluster: sparklog.Cluster, cluster_options: dict[str, str], tmp_path: Path
) -> None:
    cluster.create_topic("events", partitions=3)
    wanted: list[str] = []
    batches: list[Batch] = []
    df = stream(spark, cluster_options, subscribe="events", startingOffsets="earliest", includeHeaders="true")
    assert df.schema.fieldNames()[-1] == "headers"
    for round_ in range(3):
        values = [f"r{round_}-{i}" for i in range(20 + round_)]
        send(cluster, "events", values)
        wanted += values
        run_available_now(df, tmp_path / "ckpt", batches)
        assert_once(values_of(batches), wanted)
    offsets = sorted((r[1], r[2]) for batch in batches for r in batch)
    hws = cluster.high_watermarks("events")
    assert offsets == [(p, o) for p in sorted(hws) for o in range(hws[p])], "each offset read once, in range"


def test_running_query_sees_new_records_and_new_partitions_from_zero(
    spark: SparkSession, cluster: sparklog.Cluster, cluster_options: dict[str, str]
) -> None:
    cluster.create_topic("live", partitions=1)
    send(cluster, "live", ["before"])  # startingOffsets defaults to latest: never seen
    query = (
        stream(spark, cluster_options, subscribe="live")
        .selectExpr("CAST(value AS STRING) AS v", "partition", "offset")
        .writeStream.format("memory")
        .queryName("live_view")
        .start()
    )
    try:
        query.processAllAvailable()
        send(cluster, "live", [f"a{i}" for i in range(5)])
        query.processAllAvailable()
        cluster.create_partitions("live", 2)
        send(cluster, "live", [f"p1-{i}" for i in range(3)], partition=1)
        send(cluster, "live", ["a5"], partition=0)
        query.processAllAvailable()
        rows = spark.sql("SELECT v, partition, offset FROM live_view").collect()
    finally:
        query.stop()
    assert sorted((r.v, r.partition, r.offset) for r in rows) == sorted(
        [(f"a{i}", 0, i + 1) for i in range(6)] + [(f"p1-{i}", 1, i) for i in range(3)]
    )


def test_max_offsets_per_trigger_is_an_exact_cap(
    spark: SparkSession, cluster: sparklog.Cluster, cluster_options: dict[str, str], tmp_path: Path
) -> None:
    cluster.create_topic("capped", partitions=3)
    for partition, count in enumerate([50, 20, 7]):
        send(cluster, "capped", [f"{partition}-{i}" for i in range(count)], partition=partition)
    df = stream(spark, cluster_options, subscribe="capped", startingOffsets="earliest", maxOffsetsPerTrigger="10")
    batches = run_available_now(df, tmp_path / "ckpt")
    sizes = [len(b) for b in batches]
    assert all(size <= 10 for size in sizes), f"a batch exceeded maxOffsetsPerTrigger=10: {sizes}"
    assert sizes == [10] * 7 + [7], f"77 records with a cap of 10 take 8 batches, got {sizes}"
    assert_once(values_of(batches), [f"{p}-{i}" for p, n in enumerate([50, 20, 7]) for i in range(n)])
    first = Counter(r[1] for r in batches[0])
    assert first[0] > first[1] > 0 and first[2] > 0, f"the cap is shared in proportion to the backlog: {first}"


def test_starting_offsets_earliest_latest_and_json(
    spark: SparkSession, cluster: sparklog.Cluster, cluster_options: dict[str, str], tmp_path: Path
) -> None:
    cluster.create_topic("starts", partitions=3)
    for partition in range(3):
        send(cluster, "starts", [f"{partition}-{i}" for i in range(5)], partition=partition)
    earliest = run_available_now(
        stream(spark, cluster_options, subscribe="starts", startingOffsets="earliest"), tmp_path / "e"
    )
    assert len(values_of(earliest)) == 15
    latest_df = stream(spark, cluster_options, subscribe="starts")  # default: latest
    assert values_of(run_available_now(latest_df, tmp_path / "l")) == []
    spec = json.dumps({"starts": {"0": 3, "1": -2, "2": -1}})
    json_df = stream(spark, cluster_options, subscribe="starts", startingOffsets=spec)
    assert sorted(values_of(run_available_now(json_df, tmp_path / "j"))) == ["0-3", "0-4"] + [
        f"1-{i}" for i in range(5)
    ]
    for partition in range(3):
        send(cluster, "starts", [f"{partition}-new"], partition=partition)
    new = ["0-new", "1-new", "2-new"]
    assert sorted(values_of(run_available_now(latest_df, tmp_path / "l"))) == new
    assert sorted(values_of(run_available_now(json_df, tmp_path / "j"))) == new


def test_ending_offsets_and_bad_options_are_rejected(
    spark: SparkSession, cluster: sparklog.Cluster, cluster_options: dict[str, str], tmp_path: Path
) -> None:
    cluster.create_topic("strict", partitions=1)
    for extra, message in [
        ({"endingOffsets": "latest"}, "not allowed for streaming"),
        ({"maxOffsetsPerTrigger": "0"}, "maxOffsetsPerTrigger must be a positive"),
        ({"startingOffsets": json.dumps({"strict": {"1": 0}})}, "must name every partition"),
    ]:
        with pytest.raises(Exception, match=message):
            run_available_now(
                stream(spark, cluster_options, subscribe="strict", **extra), tmp_path / f"c{len(message)}"
            )


def _start_below_log_start(
    spark: SparkSession,
    cluster: sparklog.Cluster,
    cluster_options: dict[str, str],
    tmp_path: Path,
    fail_on_data_loss: str,
) -> Callable[[], list[Batch]]:
    """Read 0..9 of a topic, then move log-start past the query's position (offset 15)."""
    cluster.create_topic("trimmed", partitions=1)
    send(cluster, "trimmed", [f"v{i}" for i in range(10)])
    df = stream(
        spark, cluster_options, subscribe="trimmed", startingOffsets="earliest", failOnDataLoss=fail_on_data_loss
    )
    assert len(values_of(run_available_now(df, tmp_path / "ckpt"))) == 10
    send(cluster, "trimmed", [f"v{i}" for i in range(10, 20)])
    assert cluster.delete_records("trimmed", {0: 15}) == {0: 15}
    return lambda: run_available_now(df, tmp_path / "ckpt")


def test_fail_on_data_loss_true_fails_below_log_start(
    spark: SparkSession, cluster: sparklog.Cluster, cluster_options: dict[str, str], tmp_path: Path
) -> None:
    resume = _start_below_log_start(spark, cluster, cluster_options, tmp_path, "true")
    with pytest.raises(Exception, match=r"Offsets 10\.\.14 of trimmed-0 are no longer available \(log-start is 15\)"):
        resume()
    # A new query asking for removed offsets fails the same way.
    spec = json.dumps({"trimmed": {"0": 3}})
    with pytest.raises(Exception, match="failOnDataLoss=false"):
        run_available_now(stream(spark, cluster_options, subscribe="trimmed", startingOffsets=spec), tmp_path / "other")


def test_fail_on_data_loss_false_skips_to_log_start(
    spark: SparkSession, cluster: sparklog.Cluster, cluster_options: dict[str, str], tmp_path: Path
) -> None:
    resume = _start_below_log_start(spark, cluster, cluster_options, tmp_path, "false")
    assert values_of(resume()) == [f"v{i}" for i in range(15, 20)]


def test_group_id_records_the_processed_offsets(
    spark: SparkSession, cluster: sparklog.Cluster, cluster_options: dict[str, str], tmp_path: Path
) -> None:
    cluster.create_topic("tracked", partitions=2)
    send(cluster, "tracked", [f"v{i}" for i in range(12)])
    df = stream(
        spark,
        cluster_options,
        subscribe="tracked",
        startingOffsets="earliest",
        groupId="reporting",
        maxOffsetsPerTrigger="5",
    )
    assert len(values_of(run_available_now(df, tmp_path / "ckpt"))) == 12
    assert cluster.committed_offsets("reporting") == {("tracked", 0): 6, ("tracked", 1): 6}
    send(cluster, "tracked", ["late"], partition=1)
    assert values_of(run_available_now(df, tmp_path / "ckpt")) == ["late"]
    assert cluster.committed_offsets("reporting") == {("tracked", 0): 6, ("tracked", 1): 7}
    # Spark's Kafka-source option name works too, and lag tools see the query's group.
    spark_named = stream(
        spark, cluster_options, subscribe="tracked", startingOffsets="earliest", **{"kafka.group.id": "q"}
    )
    assert len(values_of(run_available_now(spark_named, tmp_path / "ckpt-q"))) == 13
    assert cluster.committed_offsets("q") == {("tracked", 0): 6, ("tracked", 1): 7}
    assert [row.lag for row in cluster.describe_group("q").partitions] == [0, 0]


# -- writeStream ------------------------------------------------------------------------------
def copy_query(spark: SparkSession, options: dict[str, str], checkpoint: Path, **extra: str) -> None:
    """Topic ``src`` -> topic ``dst`` (key and value), availableNow, exactly once."""
    query = (
        stream(spark, options, subscribe="src", startingOffsets="earliest", **extra)
        .select("key", "value")
        .writeStream.format("sparklog")
        .options(**options)
        .option("topic", "dst")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(180)
    if query.exception() is not None:
        raise query.exception()  # type: ignore[misc]


@BOTH_STORES
def test_write_stream_is_exactly_once_across_restarts_and_replays(
    spark: SparkSession, cluster: sparklog.Cluster, cluster_options: dict[str, str], tmp_path: Path
) -> None:
    cluster.create_topic("src", partitions=2)
    cluster.create_topic("dst", partitions=3)
    checkpoint = tmp_path / "ckpt"
    send(cluster, "src", [f"a{i}" for i in range(30)])
    copy_query(spark, cluster_options, checkpoint, maxOffsetsPerTrigger="12")
    assert len(stored_records(cluster, "dst")) == 30
    # A partition increase without data makes a micro-batch that reads nothing: it commits
    # nothing and releases its leases.
    cluster.create_partitions("src", 3)
    batches_before = len(list((checkpoint / "commits").glob("[0-9]*")))
    copy_query(spark, cluster_options, checkpoint, maxOffsetsPerTrigger="12")
    assert len(list((checkpoint / "commits").glob("[0-9]*"))) == batches_before + 1, "expected one empty batch"
    assert_leases_released(cluster, "dst")
    send(cluster, "src", [f"b{i}" for i in range(10)])
    copy_query(spark, cluster_options, checkpoint, maxOffsetsPerTrigger="12")
    records = assert_log_consistent(cluster, "dst")
    assert_once(
        [(r.value or b"").decode() for r in records], [f"a{i}" for i in range(30)] + [f"b{i}" for i in range(10)]
    )

    # A crash after the Delta commit but before Spark recorded the batch: Spark replays it.
    commits = sorted((checkpoint / "commits").iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else -1)
    last = int(commits[-1].name)
    commits[-1].unlink()
    (checkpoint / "commits" / f".{last}.crc").unlink(missing_ok=True)
    version_before = cluster.replicas.leader_table("dst").snapshot().version()
    copy_query(spark, cluster_options, checkpoint, maxOffsetsPerTrigger="12")
    assert (checkpoint / "commits" / str(last)).exists(), "Spark did not replay the batch"
    assert len(stored_records(cluster, "dst")) == 40, "the replayed batch was written twice"
    table = cluster.replicas.leader_table("dst")
    assert table.snapshot().version() == version_before, "a replay must not commit anything"
    query_id = json.loads((checkpoint / "metadata").read_text())["id"]
    assert table.app_version(table.snapshot(), stream_app_id(query_id)) == last
    assert_leases_released(cluster, "dst")  # the replay released its leases


def assert_leases_released(cluster: sparklog.Cluster, topic: str) -> None:
    for partition in cluster.partitions_of(topic):
        path = zkdata.writer_path(topic, partition)
        data, _ = cluster.replicas.zk.client.get(path)
        record = WriterLeaseRecord.decode(data, path)
        assert record.released, f"the write lease of {topic}-{partition} is still held by {record.owner}"


def test_committing_one_query_batch_twice_writes_once(
    cluster: sparklog.Cluster, cluster_options: dict[str, str]
) -> None:
    cluster.create_topic("sink", partitions=2)
    schema = StructType([StructField("value", BinaryType())])
    options = {**cluster_options, "topic": "sink", "spark.writer.lease.ms": "60000"}

    def run_batch(query_id: str, batch_id: int, values: list[bytes]) -> list[str]:
        planned = pickle.loads(pickle.dumps(SparklogStreamWriter(options, schema, False)))  # as Spark ships it
        message = write_stream_task(planned.plan, iter([pa.record_batch({"value": values})]), 0, query_id, batch_id)
        SparklogStreamWriter(options, schema, False).commit([message], batch_id)  # a fresh commit-side instance
        return [str(s["path"]) for s in message.segments]

    run_batch("query-1", 0, [b"x0", b"x1", b"x2"])
    replay_files = run_batch("query-1", 0, [b"x0", b"x1", b"x2"])
    assert sorted(r.value or b"" for r in stored_records(cluster, "sink")) == [b"x0", b"x1", b"x2"]
    root = Path(cluster.replicas.leader_table("sink").root)
    assert not any((root / path).exists() for path in replay_files), "the replay's files must be deleted"
    run_batch("query-1", 1, [b"y0"])
    run_batch("query-2", 0, [b"z0"])  # another query's batch 0 is its own
    records = assert_log_consistent(cluster, "sink")
    assert sorted(r.value or b"" for r in records) == [b"x0", b"x1", b"x2", b"y0", b"z0"]
