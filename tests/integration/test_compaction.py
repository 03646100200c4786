"""Log compaction (cleanup.policy=compact / compact,delete) on real Delta tables with the real
Spark job: exact survivors, tombstones and delete.retention.ms, min.compaction.lag.ms, the
dirty-ratio threshold, equivalence with a reference model on random keyed data, readers
after compaction (gaps, no error), dry runs, and the conflict rules a commit obeys."""

from __future__ import annotations

import os
import random
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pytest

import sparklog
from sparklog.log.compaction import (
    cleaned_app_id,
    commit_partition,
    compact_partitions,
    compact_task,
    plan_partition,
)
from sparklog.log.segment import write_segment
from sparklog.log.table import CommitConflict, end_app_id
from sparklog.maintenance.runner import run_compaction, run_maintenance
from tests.helpers import BOTH_STORES, assert_unchanged, segment_batch

if TYPE_CHECKING:
    from deltalake import DeltaTable
    from pyspark.sql import SparkSession

HOUR_MS = 3_600_000
Row = tuple[bytes | None, bytes | None, int]  # key, value, timestamp ms
Record = tuple[int, bytes | None, bytes | None]  # offset, key, value


# -- helpers (also used by tests/fault/test_maintenance_concurrency.py) ---------------------
def send_file(producer: sparklog.clients.producer.Producer, topic: str, partition: int, rows: Sequence[Row]) -> None:
    """One produce request = one Delta commit = one file of ``partition``."""
    producer.send_arrow(
        topic,
        pa.table(
            {
                "key": pa.array([r[0] for r in rows], pa.binary()),
                "value": pa.array([r[1] for r in rows], pa.binary()),
                "partition": pa.array([partition] * len(rows), pa.int32()),
                "timestamp": pa.array([r[2] * 1000 for r in rows], pa.timestamp("us", tz="UTC")),
            }
        ),
    )


def records_of(cluster: sparklog.Cluster, topic: str, partition: int) -> list[Record]:
    data = cluster.read(topic, partition, include_headers=False)
    return list(
        zip(
            data.column("offset").to_pylist(),
            data.column("key").to_pylist(),
            data.column("value").to_pylist(),
            strict=False,
        )
    )


def expected_survivors(
    records: Sequence[tuple[int, bytes | None, bytes | None, int]],
    first_uncleanable: int,
    now_ms: int,
    delete_retention_ms: int,
) -> list[Record]:
    """Reference model of one compaction pass (independent of the implementation): below
    ``first_uncleanable``, the newest record of each key survives unless it is a tombstone
    older than ``now - delete.retention.ms``; keyless records and the rest stay."""
    newest = {key: offset for offset, key, _v, _ts in records if key is not None and offset < first_uncleanable}
    horizon = now_ms - delete_retention_ms
    kept = []
    for offset, key, value, ts in records:
        cleanable = offset < first_uncleanable and key is not None
        if cleanable and key is not None and (newest[key] != offset or (value is None and ts < horizon)):
            continue
        kept.append((offset, key, value))
    return kept


def live_files(cluster: sparklog.Cluster, topic: str, partition: int = 0) -> list[tuple[str, int, int, int]]:
    table = cluster.replicas.leader_table(topic)
    return [(f.path, f.base_offset, f.last_offset, f.num_records) for f in table.files(table.snapshot(), {partition})]


def compact_topic(cluster: sparklog.Cluster, **config: str) -> None:
    cluster.create_topic("t", 1, config={"cleanup.policy": "compact", "delete.retention.ms": str(HOUR_MS), **config})


# -- exact survivors -----------------------------------------------------------------------
def test_compact_keeps_the_newest_record_per_key_with_offsets_and_the_head(
    cluster: sparklog.Cluster, spark: SparkSession
) -> None:
    compact_topic(cluster)
    now = int(time.time() * 1000)
    with cluster.producer() as producer:
        send_file(producer, "t", 0, [(b"a", b"a0", now), (b"b", b"b1", now), (b"a", b"a2", now), (None, b"n3", now)])
        send_file(producer, "t", 0, [(b"c", b"c4", now), (b"b", None, now), (b"a", b"a6", now)])
        send_file(producer, "t", 0, [(b"a", b"a7", now), (b"c", b"c8", now)])  # the head
    head = live_files(cluster, "t")[-1]
    lines: list[str] = []
    [result] = run_compaction(cluster.replicas, spark, ["t"], now_ms=now, progress=lines.append)
    assert records_of(cluster, "t", 0) == [
        (3, None, b"n3"),
        (4, b"c", b"c4"),
        (5, b"b", None),
        (6, b"a", b"a6"),
        (7, b"a", b"a7"),
        (8, b"c", b"c8"),
    ]
    assert (result.status, result.files_rewritten, result.records_before, result.records_after) == (
        "compacted",
        2,
        7,
        4,
    )
    assert result.cleaned_up_to == 7 and result.dirty_ratio == 1.0 and result.bytes_after and result.bytes_before
    assert lines == [result.line()] and lines[0].startswith("t-0: compacted 2 files -> 1, 7 -> 4 records")
    files = live_files(cluster, "t")
    assert files[-1] == head, "the active head is never rewritten"
    assert [(lo, hi, n) for _p, lo, hi, n in files] == [(0, 6, 4), (7, 8, 2)], (
        "stats tile the offsets; numRecords exact"
    )
    assert cluster.partition_offsets("t")[0] == (0, 9), "log-start and the high watermark do not move"
    table = cluster.replicas.leader_table("t")
    dt = table.snapshot()
    assert table.app_version(dt, cleaned_app_id(0)) == 7
    assert dt.history(1)[0]["sparklog.operation"] == "COMPACTION"
    again = run_compaction(cluster.replicas, spark, ["t"], now_ms=now)
    assert again[0].status == "skipped" and "nothing to clean" in again[0].reason


def test_compact_delete_topic_runs_retention_then_compaction(cluster: sparklog.Cluster, spark: SparkSession) -> None:
    cluster.create_topic("cd", 1, config={"cleanup.policy": "compact,delete", "retention.ms": str(2 * HOUR_MS)})
    cluster.create_topic("plain", 1, config={"retention.ms": str(2 * HOUR_MS)})
    now = int(time.time() * 1000)
    old = now - 3 * HOUR_MS
    with cluster.producer() as producer:
        for topic in ("cd", "plain"):
            send_file(producer, topic, 0, [(b"a", b"a0", old), (b"b", b"b1", old)])  # expired by retention.ms
            send_file(producer, topic, 0, [(b"a", b"a2", now), (b"b", b"b3", now), (b"a", b"a4", now)])
            send_file(producer, topic, 0, [(b"b", b"b5", now)])  # head
    report = run_maintenance(cluster.replicas, spark, ["cd", "plain"], now_ms=now)
    assert [(r.topic, r.removed_files, r.new_log_start) for r in report.retention] == [("cd", 1, 2), ("plain", 1, 2)]
    assert [(r.topic, r.status, r.records_before, r.records_after) for r in report.compaction] == [
        ("cd", "compacted", 3, 2)
    ]
    assert records_of(cluster, "cd", 0) == [(3, b"b", b"b3"), (4, b"a", b"a4"), (5, b"b", b"b5")]
    assert [o for o, _k, _v in records_of(cluster, "plain", 0)] == [2, 3, 4, 5], "a delete-only topic is not compacted"
    assert cluster.partition_offsets("cd")[0] == (2, 6)


# -- tombstones, lag, dirty ratio ------------------------------------------------------------
def test_tombstone_kept_until_delete_retention_ms_then_removed(cluster: sparklog.Cluster, spark: SparkSession) -> None:
    compact_topic(cluster, **{"min.cleanable.dirty.ratio": "0.01"})
    now = int(time.time() * 1000)
    with cluster.producer() as producer:
        send_file(producer, "t", 0, [(b"a", b"a0", now), (b"b", b"b1", now)])
        send_file(producer, "t", 0, [(b"a", None, now)])  # tombstone of a
        send_file(producer, "t", 0, [(b"c", b"c3", now)])  # head
    run_compaction(cluster.replicas, spark, ["t"], now_ms=now + HOUR_MS - 1)
    kept = [(1, b"b", b"b1"), (2, b"a", None), (3, b"c", b"c3")]
    assert records_of(cluster, "t", 0) == kept, "a tombstone younger than delete.retention.ms stays"
    with cluster.producer() as producer:
        send_file(producer, "t", 0, [(b"d", b"d4", now)])  # a new head: offset 3 becomes cleanable
    [result] = run_compaction(cluster.replicas, spark, ["t"], now_ms=now + HOUR_MS + 1)
    assert result.status == "compacted" and result.cleaned_up_to == 4
    assert records_of(cluster, "t", 0) == [(1, b"b", b"b1"), (3, b"c", b"c3"), (4, b"d", b"d4")], (
        "expired tombstone removed"
    )


def test_min_compaction_lag_keeps_recent_segments(cluster: sparklog.Cluster, spark: SparkSession) -> None:
    compact_topic(cluster, **{"min.compaction.lag.ms": str(HOUR_MS)})
    now = int(time.time() * 1000)
    with cluster.producer() as producer:
        send_file(producer, "t", 0, [(b"a", b"a0", now - 2 * HOUR_MS), (b"a", b"a1", now - 2 * HOUR_MS)])
        send_file(producer, "t", 0, [(b"a", b"a2", now - 10_000), (b"a", b"a3", now - 10_000)])  # within the lag
        send_file(producer, "t", 0, [(b"a", b"a4", now)])
    [result] = run_compaction(cluster.replicas, spark, ["t"], now_ms=now)
    assert (result.status, result.files_rewritten, result.cleaned_up_to) == ("compacted", 1, 2)
    assert [o for o, _k, _v in records_of(cluster, "t", 0)] == [1, 2, 3, 4], (
        "only the segment older than the lag was cleaned"
    )


def test_dirty_ratio_below_threshold_skips_the_partition(cluster: sparklog.Cluster, spark: SparkSession) -> None:
    compact_topic(cluster, **{"min.cleanable.dirty.ratio": "0.5"})
    now = int(time.time() * 1000)
    with cluster.producer() as producer:
        send_file(producer, "t", 0, [(b"k%d" % i, b"v" * 200, now) for i in range(50)])
        send_file(producer, "t", 0, [(b"k0", b"x", now)])
    unique = live_files(cluster, "t")
    [first] = run_compaction(cluster.replicas, spark, ["t"], now_ms=now)
    assert (first.status, first.files_rewritten, first.records_before, first.records_after) == ("compacted", 0, 50, 50)
    assert live_files(cluster, "t") == unique, "nothing to drop: files kept, only cleaned_up_to recorded"
    assert (
        cluster.replicas.leader_table("t").app_version(cluster.replicas.leader_table("t").snapshot(), cleaned_app_id(0))
        == 50
    )
    with cluster.producer() as producer:
        send_file(producer, "t", 0, [(b"k1", b"y", now)])  # small dirty part behind a big clean one
    before = live_files(cluster, "t")
    [result] = run_compaction(cluster.replicas, spark, ["t"], now_ms=now)
    assert result.status == "skipped" and "below min.cleanable.dirty.ratio 0.5" in result.reason
    assert result.dirty_ratio is not None and 0 < result.dirty_ratio < 0.5
    assert live_files(cluster, "t") == before
    cluster.alter_topic_config("t", set={"min.cleanable.dirty.ratio": "0.01"})
    assert run_compaction(cluster.replicas, spark, ["t"], now_ms=now)[0].status == "compacted"


# -- equivalence on random data ------------------------------------------------------------
def test_compaction_equals_the_reference_on_random_keyed_data(cluster: sparklog.Cluster, spark: SparkSession) -> None:
    rng = random.Random(20240611)
    cluster.create_topic(
        "r",
        3,
        config={
            "cleanup.policy": "compact",
            "delete.retention.ms": str(HOUR_MS),
            "segment.bytes": "1024",
            "min.cleanable.dirty.ratio": "0",
        },
    )
    now = int(time.time() * 1000)
    produced: dict[int, list[tuple[int, bytes | None, bytes | None, int]]] = {0: [], 1: [], 2: []}
    with cluster.producer() as producer:
        for batch in range(12):
            for p in range(3):
                rows = []
                for i in range(rng.randint(1, 60)):
                    key = None if rng.random() < 0.05 else b"k%d" % rng.randint(0, 40)
                    value = None if key is not None and rng.random() < 0.1 else b"p%d-b%d-%d" % (p, batch, i)
                    ts = now - rng.choice([0, 2 * HOUR_MS])  # some tombstones expired, some not
                    rows.append((key, value, ts))
                start = len(produced[p])
                send_file(producer, "r", p, rows)
                produced[p] += [(start + j, k, v, ts) for j, (k, v, ts) in enumerate(rows)]
    heads = {p: live_files(cluster, "r", p)[-1] for p in range(3)}
    results = run_compaction(cluster.replicas, spark, ["r"], now_ms=now)
    assert [r.status for r in results] == ["compacted"] * 3
    for r in results:
        p = r.partition
        assert r.cleaned_up_to == heads[p][1], "everything but the head was cleanable"
        assert records_of(cluster, "r", p) == expected_survivors(produced[p], heads[p][1], now, HOUR_MS)
        assert live_files(cluster, "r", p)[-1] == heads[p]
        assert r.files_written > 1, "output files are cut at segment.bytes"
        assert cluster.partition_offsets("r")[p] == (0, len(produced[p]))


# -- readers after compaction ----------------------------------------------------------------
def test_consumers_read_survivors_with_offset_gaps(cluster: sparklog.Cluster, spark: SparkSession) -> None:
    compact_topic(cluster)
    now = int(time.time() * 1000)
    with cluster.producer() as producer:
        send_file(producer, "t", 0, [(b"k%d" % (i % 3), b"v%d" % i, now) for i in range(30)])
        send_file(producer, "t", 0, [(b"z", b"head", now)])
    run_compaction(cluster.replicas, spark, ["t"], now_ms=now)
    survivors = [27, 28, 29, 30]
    with cluster.consumer(None, auto_offset_reset="earliest") as consumer:
        consumer.assign([("t", 0)])
        seen = [r.offset for r in consumer.poll(2000, max_records=1000)]
        assert seen == survivors and consumer.position(("t", 0)) == 31
    from sparklog.spark import read

    assert sorted(r.offset for r in read(spark, "t", **cluster.config.to_options()).collect()) == survivors
    df = spark.read.format("sparklog").options(subscribe="t", **cluster.config.to_options()).load()
    assert sorted(r.offset for r in df.collect()) == survivors
    assert cluster.list_offsets("t", "earliest") == {0: 0}, "log-start stays: a consumer at 0 is not out of range"


def test_consumer_moves_past_a_gap_wider_than_max_records(cluster: sparklog.Cluster, spark: SparkSession) -> None:
    compact_topic(cluster)
    now = int(time.time() * 1000)
    with cluster.producer() as producer:
        send_file(producer, "t", 0, [(b"same", b"v%d" % i, now) for i in range(30)])
        send_file(producer, "t", 0, [(b"z", b"head", now)])
    run_compaction(cluster.replicas, spark, ["t"], now_ms=now)
    with cluster.consumer(None, auto_offset_reset="earliest") as consumer:
        consumer.assign([("t", 0)])
        seen = [r.offset for _ in range(5) for r in consumer.poll(200, max_records=10)]
    assert seen == [29, 30]


def test_fully_compacted_prefix_keeps_log_start(cluster: sparklog.Cluster, spark: SparkSession) -> None:
    compact_topic(cluster, **{"delete.retention.ms": "0"})
    now = int(time.time() * 1000)
    with cluster.producer() as producer:
        send_file(producer, "t", 0, [(b"a", None, now - 10), (b"b", None, now - 10)])  # only expired tombstones
        send_file(producer, "t", 0, [(b"c", b"c2", now)])
    [result] = run_compaction(cluster.replicas, spark, ["t"], now_ms=now)
    assert (result.records_before, result.records_after, result.files_written) == (2, 0, 1)
    assert [(lo, hi, n) for _p, lo, hi, n in live_files(cluster, "t")] == [(0, 1, 0), (2, 2, 1)], "an empty placeholder"
    assert cluster.partition_offsets("t")[0] == (0, 3)
    assert records_of(cluster, "t", 0) == [(2, b"c", b"c2")]
    from sparklog.spark import read

    assert [r.offset for r in read(spark, "t", **cluster.config.to_options()).collect()] == [2]
    df = spark.read.format("sparklog").options(subscribe="t", **cluster.config.to_options()).load()
    assert [r.offset for r in df.collect()] == [2]


def test_records_below_log_start_are_not_resurrected(cluster: sparklog.Cluster, spark: SparkSession) -> None:
    compact_topic(cluster)
    now = int(time.time() * 1000)
    with cluster.producer() as producer:
        send_file(producer, "t", 0, [(b"k%d" % i, b"v%d" % i, now) for i in range(10)])
        send_file(producer, "t", 0, [(b"z", b"head", now)])
    cluster.delete_records("t", {0: 6})  # log-start inside the first file
    [result] = run_compaction(cluster.replicas, spark, ["t"], now_ms=now)
    assert (result.records_before, result.records_after) == (4, 4)
    assert [o for o, _k, _v in records_of(cluster, "t", 0)] == [6, 7, 8, 9, 10]
    assert cluster.partition_offsets("t")[0] == (6, 11)
    assert all(lo >= 6 for _p, lo, _hi, _n in live_files(cluster, "t"))


# -- dry run, job --------------------------------------------------------------------------
def test_dry_run_changes_nothing(cluster: sparklog.Cluster, spark: SparkSession, sparklog_home: Path) -> None:
    cluster.create_topic("cd", 2, config={"cleanup.policy": "compact,delete", "retention.ms": str(HOUR_MS)})
    now = int(time.time() * 1000)
    with cluster.producer() as producer:
        for p in range(2):
            send_file(producer, "cd", p, [(b"a", b"old", now - 2 * HOUR_MS)])
            send_file(producer, "cd", p, [(b"a", b"x", now), (b"a", b"y", now)])
            send_file(producer, "cd", p, [(b"b", b"head", now)])
    with assert_unchanged(cluster, sparklog_home):
        report = run_maintenance(cluster.replicas, spark, ["cd"], dry_run=True, now_ms=now)
    assert [(r.partition, r.removed_files, r.dry_run) for r in report.retention] == [(0, 1, True), (1, 1, True)]
    assert [
        (r.status, r.files_rewritten, r.records_before, r.records_after, r.bytes_after) for r in report.compaction
    ] == [
        ("dry-run", 2, 3, 1, None),
        ("dry-run", 2, 3, 1, None),
    ], "a dry run plans on the unchanged table (the old file is still there)"


def test_maintenance_job_prints_a_line_per_partition(
    cluster: sparklog.Cluster,
    spark: SparkSession,
    cluster_options: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from jobs.retention import main

    cluster.create_topic("c", 2, config={"cleanup.policy": "compact"})
    cluster.create_topic("d", 1)
    now = int(time.time() * 1000)
    with cluster.producer() as producer:
        for p in range(2):
            send_file(producer, "c", p, [(b"a", b"1", now), (b"a", b"2", now)])
            send_file(producer, "c", p, [(b"a", b"3", now)])
    monkeypatch.setenv("SPARKLOG_ZOOKEEPER", cluster_options["zookeeper.connect"])
    monkeypatch.setenv("SPARKLOG_HOME", cluster_options["sparklog.home"])
    assert main(["--topic", "c", "--topic", "d"]) == 0
    out = capsys.readouterr().out.splitlines()
    steps = [(line.split(":")[0], line.split(": ")[1].split(" ")[0]) for line in out[:-1]]
    assert steps == [
        ("c-0", "compacted"),
        ("c-1", "compacted"),
        ("c-0", "optimize"),
        ("c-1", "optimize"),
        ("c", "checkpoint"),
        ("d-0", "retention"),
        ("d-0", "optimize"),
        ("d", "checkpoint"),
    ], out
    assert "compacted 1 files -> 1, 2 -> 1 records" in out[0] and out[5].startswith("d-0: retention removed 0 files")
    assert re.fullmatch(r"c-0: optimize merged 2 files \(\d+ bytes\) into 1; live files 2 -> 1", out[2]), out
    assert out[6:8] == [
        "d-0: optimize found nothing to merge (0 live files)",
        "d: checkpoint at version 0; 0 expired log files removed",
    ]
    assert out[-1].startswith(
        "retention: 0 files removed in 1 partitions; compaction: 2 of 2 partitions; optimize: "
    ), out


# -- conflicts -----------------------------------------------------------------------------
@BOTH_STORES
def test_losing_compaction_deletes_its_files_and_does_nothing(cluster: sparklog.Cluster) -> None:
    """Two jobs plan and rewrite the same partition; the second commit finds the plan stale."""
    compact_topic(cluster)
    now = int(time.time() * 1000)
    with cluster.producer() as producer:
        send_file(producer, "t", 0, [(b"a", b"1", now), (b"a", b"2", now)])
        send_file(producer, "t", 0, [(b"a", b"3", now)])
    table = cluster.replicas.leader_table("t")
    configs = cluster.topic_config("t")
    first, second = (plan_partition(table, 0, configs, now) for _ in range(2))
    out_first, out_second = compact_task(first.task), compact_task(second.task)  # type: ignore[union-attr]
    with cluster.producer() as producer:
        send_file(producer, "t", 0, [(b"b", b"4", now)])  # an append in between only costs a retry
    assert commit_partition(table, first, out_first)  # type: ignore[arg-type]
    assert not commit_partition(table, second, out_second)  # type: ignore[arg-type]
    assert not any(os.path.exists(table.full_path(str(s["path"]))) for s in out_second.segments), (
        "loser's files deleted"
    )
    assert records_of(cluster, "t", 0) == [(1, b"a", b"2"), (2, b"a", b"3"), (3, b"b", b"4")]
    [again] = compact_partitions(table, [0], configs, now)
    assert again.status == "compacted" and again.cleaned_up_to == 3, "a re-plan sees the new head only"


@BOTH_STORES
def test_an_append_between_check_and_commit_costs_a_retry_not_a_rewrite(
    cluster: sparklog.Cluster, cluster_options: dict[str, str]
) -> None:
    compact_topic(cluster)
    now = int(time.time() * 1000)
    with cluster.producer() as producer:
        send_file(producer, "t", 0, [(b"a", b"1", now), (b"a", b"2", now)])
        send_file(producer, "t", 0, [(b"a", b"3", now)])
    table = cluster.replicas.leader_table("t")
    planned = plan_partition(table, 0, cluster.topic_config("t"), now)
    output = compact_task(planned.task)  # type: ignore[union-attr]
    attempts: list[str] = []
    real_commit = table.commit

    def append_then_commit(*args: object, **kwargs: object) -> None:
        if not attempts:  # another client appends right after the compaction's check
            with sparklog.connect(cluster_options) as other, other.producer() as producer:
                send_file(producer, "t", 0, [(b"b", b"4", now)])
        try:
            real_commit(*args, **kwargs)  # type: ignore[arg-type]
            attempts.append("committed")
        except CommitConflict:
            attempts.append("conflict")
            raise

    table.commit = append_then_commit  # type: ignore[method-assign]
    try:
        assert commit_partition(table, planned, output)  # type: ignore[arg-type]
    finally:
        del table.commit
    assert attempts == ["conflict", "committed"], "the append failed the first attempt; the same files went in next"
    assert records_of(cluster, "t", 0) == [(1, b"a", b"2"), (2, b"a", b"3"), (3, b"b", b"4")]


def test_delta_rs_conflict_facts(cluster: sparklog.Cluster) -> None:
    """Measured with deltalake 1.6.6: why compaction commits with max_commit_retries=0 after
    its own check. Two removals of one file from one snapshot: the second fails, except when
    the loser lets delta-rs rebase (max_commit_retries > 0) over a winner that removed it with
    dataChange=false (an optimize): then both land and the range is duplicated."""
    cases = ((True, 0, True), (True, 5, True), (False, 0, True), (False, 5, False))
    for n, (winner_data_change, loser_retries, loser_fails) in enumerate(cases):
        topic = f"x{n}"
        cluster.create_topic(topic, 1)
        table = cluster.replicas.leader_table(topic)
        with cluster.producer() as producer:
            send_file(producer, topic, 0, [(b"a", b"1", 0)])
            send_file(producer, topic, 0, [(b"a", b"2", 0)])
        [old, _head] = table.files(table.snapshot(), {0})
        pinned = table.snapshot(table.snapshot().version())

        def rewrite(data_change: bool, retries: int, dt: DeltaTable) -> None:
            seg = write_segment(table.storage, 0, 0, segment_batch([b"r"], [b"a"]))
            table.commit(
                dt,
                [seg],
                {},
                removes=[old],
                data_change=data_change,
                max_commit_retries=retries,
            )

        rewrite(winner_data_change, 0, table.snapshot())
        if loser_fails:
            with pytest.raises(CommitConflict):
                rewrite(True, loser_retries, pinned)
        else:
            rewrite(True, loser_retries, pinned)
            assert len(table.files(table.snapshot(), {0})) == 3, "both rewrites landed: a duplicated range"
    # Any commit (an append) between a compaction's check and its commit fails it (retries=0).
    pinned = table.snapshot(table.snapshot().version())
    table.commit(table.snapshot(), [], {end_app_id(0): table.log_end(table.snapshot(), 0)})
    with pytest.raises(CommitConflict):
        table.commit(pinned, [], {cleaned_app_id(0): 1}, max_commit_retries=0)
