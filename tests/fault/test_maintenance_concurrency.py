"""Compaction and retention against live clients, racing jobs and ``kill -9``.

* Maintenance (the real Spark job, in this process) runs in a loop while a producer process
  appends and a consumer process reads: nothing the policies did not remove is lost,
  nothing is duplicated, and every polled batch comes from one consistent snapshot.
* Three compaction jobs on one topic at once (two processes without Spark, one Spark job):
  the result equals one run on a copy of the table; one job commits each partition.
* A maintenance process killed mid-way leaves every partition either as it was or as one
  complete run leaves it; a rerun completes. The loop of kills uses children without Spark
  (a Spark start costs ~10-30 s per child on 2 cores; the rewrite a Spark task runs is the
  same :func:`~sparklog.log.compaction.compact_task`, and the driver's plan/commit code is
  the same); one slow test kills a child running the Spark job (JVM and Python workers).

``SPARKLOG_TEST_SEED`` replays a kill schedule.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import shutil
import signal
import time
from collections.abc import Mapping
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import sparklog
from sparklog.log.compaction import compact_partitions
from sparklog.log.reader import read_ranges
from sparklog.log.table import TopicTable
from sparklog.maintenance.runner import run_compaction, run_maintenance
from tests.fault.maintenance_workers import compaction_job, consume_until_stopped, maintenance_until_killed
from tests.fault.workers import arrow_batch_id, produce_until_killed, read_ack_log
from tests.helpers import reaping, spawn_context, wait_for
from tests.integration.test_compaction import Record, records_of, send_file

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

HOUR_MS = 3_600_000
COMPACT = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0"}


# -- helpers -------------------------------------------------------------------------------
def seeded() -> random.Random:
    seed = int(os.environ.get("SPARKLOG_TEST_SEED", time.time_ns()))
    print(f"schedule seed: SPARKLOG_TEST_SEED={seed}")  # shown with a failure, to replay it
    return random.Random(seed)


def fill(
    cluster: sparklog.Cluster,
    topic: str,
    partitions: int,
    files: int,
    per_file: int,
    keys: int,
    now: int,
    rng: random.Random,
) -> None:
    with cluster.producer() as producer:
        for f in range(files):
            for p in range(partitions):
                rows = [
                    (b"k%d" % rng.randrange(keys), None if rng.random() < 0.02 else b"p%d-f%d-%d" % (p, f, i), now)
                    for i in range(per_file)
                ]
                send_file(producer, topic, p, rows)


def snapshot_records(cluster: sparklog.Cluster, topic: str) -> dict[int, list[Record]]:
    return {p: records_of(cluster, topic, p) for p in cluster.partitions_of(topic)}


def one_run_reference(cluster: sparklog.Cluster, topic: str, now: int, tmp: Path) -> dict[int, list[Record]]:
    """What ONE compaction run makes of the current table: run it on a copy."""
    source = cluster.replicas.leader_table(topic)
    shutil.copytree(source.root, tmp / "topics" / topic)
    copy = TopicTable(str(tmp), topic)
    partitions = cluster.partitions_of(topic)
    compact_partitions(copy, partitions, cluster.topic_config(topic), now)
    dt = copy.snapshot()
    result = {}
    for p in partitions:
        data = read_ranges(copy, dt, {p: (0, copy.log_end(dt, p))}, include_headers=False)
        result[p] = list(
            zip(
                data.column("offset").to_pylist(),
                data.column("key").to_pylist(),
                data.column("value").to_pylist(),
                strict=False,
            )
        )
    return result


def assert_no_stray_files(table: TopicTable) -> None:
    """Every data file on disk was committed at some point: losers deleted their files."""
    added = set()
    log_dir = Path(table.root) / "_delta_log"
    for commit in sorted(log_dir.glob("*.json")):
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            if "add" in action:
                added.add(action["add"]["path"])
    on_disk = {str(p.relative_to(table.root)) for p in Path(table.root).glob("partition=*/*.parquet")}
    assert on_disk <= added, f"files written but never committed: {sorted(on_disk - added)[:3]}"


def compaction_commits(table: TopicTable) -> dict[int, int]:
    counts: dict[int, int] = {}
    for entry in table.snapshot().history():
        if entry.get("sparklog.operation") == "COMPACTION":
            partition = int(entry["sparklog.partition"])
            counts[partition] = counts.get(partition, 0) + 1
    return counts


# -- 1. live producer and consumer -----------------------------------------------------------
TOPIC = "kv"
PARTITIONS = 3
PREFILL = 20  # old records per partition, in two files, removed by retention.ms
PRODUCE = 600


def key_of(value: str) -> str | None:
    """The key a value was produced with (see :func:`prefill` and ``produce_until_killed``)."""
    if value.startswith("old-"):
        return f"k{int(value.rsplit('-', 1)[1]) % 5}"
    return f"k{value.rsplit('-', 1)[1]}" if arrow_batch_id(value.encode()) else None


def prefill(cluster: sparklog.Cluster, now: int) -> dict[int, dict[int, str]]:
    produced: dict[int, dict[int, str]] = {p: {} for p in range(PARTITIONS)}
    with cluster.producer() as producer:
        for half in range(2):
            for p in range(PARTITIONS):
                values = [f"old-{p}-{i}" for i in range(half * PREFILL // 2, (half + 1) * PREFILL // 2)]
                rows = [(str(key_of(v)).encode(), v.encode(), now - 3 * HOUR_MS) for v in values]
                send_file(producer, TOPIC, p, rows)
                produced[p].update({int(v.rsplit("-", 1)[1]): v for v in values})
    return produced


def read_consumed(path: Path) -> dict[int, list[tuple[int, str]]]:
    consumed: dict[int, list[tuple[int, str]]] = {}
    for line in path.read_text().splitlines():
        for p, pairs in json.loads(line).items():
            consumed.setdefault(int(p), []).extend((o, v) for o, v in pairs)
    return consumed


def assert_policy_removed_only(
    produced: Mapping[int, Mapping[int, str]], stored: Mapping[int, list[Record]], log_starts: Mapping[int, int]
) -> None:
    """Per partition: stored records are produced ones at their offsets, strictly increasing;
    every produced record at/after log-start is stored unless a newer record of its key is."""
    for p, records in stored.items():
        offsets = [o for o, _k, _v in records]
        assert offsets == sorted(set(offsets)), f"partition {p}: offsets not strictly increasing (duplicates?)"
        for o, _k, v in records:
            assert produced[p].get(o) == (v or b"").decode(), (
                f"{TOPIC}-{p}@{o}: stored {v!r}, produced {produced[p].get(o)!r}"
            )
        kept = set(offsets)
        newest: dict[str, int] = {}
        for o, value in produced[p].items():
            key = key_of(value)
            if o >= log_starts[p] and key is not None:
                newest[key] = max(o, newest.get(key, -1))
        for o, value in sorted(produced[p].items()):
            if o < log_starts[p] or o in kept:
                continue
            key = key_of(value)
            assert key is not None, f"{TOPIC}-{p}@{o}: keyless record {value} lost (compaction never removes those)"
            assert newest[key] > o, f"{TOPIC}-{p}@{o}: {value}, the newest record of {key}, was lost"


def test_maintenance_beside_a_live_producer_and_consumer(
    cluster: sparklog.Cluster, cluster_options: dict[str, str], spark: SparkSession, tmp_path: Path
) -> None:
    config = {**COMPACT, "cleanup.policy": "compact,delete", "retention.ms": str(2 * HOUR_MS)}
    cluster.create_topic(TOPIC, PARTITIONS, config=config)
    produced = prefill(cluster, int(time.time() * 1000))
    ctx = spawn_context()
    ack_path, stop_path, consumed_path = tmp_path / "acks.log", tmp_path / "stop", tmp_path / "consumed.jsonl"
    with reaping([]) as processes:
        producer = ctx.Process(
            target=produce_until_killed,
            args=(cluster_options, TOPIC, "c0", str(ack_path), str(tmp_path / "ready"), 5000, PRODUCE),
        )
        # A fetch window larger than the log: Consumer._fetch does not yet move past a window
        # that compaction emptied (test_consumer_moves_past_a_gap_wider_than_max_records).
        consumer = ctx.Process(
            target=consume_until_stopped, args=(cluster_options, TOPIC, str(consumed_path), str(stop_path), 1_000_000)
        )
        processes += [producer, consumer]
        producer.start()
        consumer.start()
        wait_for(lambda: (tmp_path / "ready").exists(), 60, "the producer to start")
        runs, compacted = 0, 0
        while producer.exitcode is None:
            report = run_maintenance(cluster.replicas, spark, [TOPIC])
            runs += 1
            compacted += sum(1 for r in report.compaction if r.status == "compacted")
        assert producer.exitcode == 0, f"producer failed (exit {producer.exitcode})"
        run_maintenance(cluster.replicas, spark, [TOPIC])  # and once more on the final log
        stop_path.touch()
        consumer.join(120)
        assert consumer.exitcode == 0, f"consumer failed (exit {consumer.exitcode})"
    print(f"{runs} maintenance runs beside the producer, {compacted} partition compactions")
    assert runs >= 2 and compacted >= 2, "maintenance barely overlapped the producer: raise PRODUCE"
    for partition, offset, value in read_ack_log(ack_path):
        produced[partition][offset] = value.decode()
    offsets = cluster.partition_offsets(TOPIC)
    log_starts = {p: o.log_start for p, o in offsets.items()}
    assert log_starts == {p: PREFILL for p in range(PARTITIONS)}, "retention removed the old files, nothing else"
    assert {p: o.high_watermark for p, o in offsets.items()} == {p: max(produced[p]) + 1 for p in range(PARTITIONS)}
    stored = snapshot_records(cluster, TOPIC)
    assert sum(map(len, stored.values())) < PRODUCE, "compaction removed nothing"
    assert_policy_removed_only(produced, stored, log_starts)
    consumed = read_consumed(consumed_path)
    for p, pairs in consumed.items():
        seen = [o for o, _v in pairs]
        assert all(a < b for a, b in itertools.pairwise(seen)), (
            f"partition {p}: consumer saw offsets out of order or twice"
        )
        wrong = [(o, v) for o, v in pairs if produced[p].get(o) != v]
        assert not wrong, f"partition {p}: consumer got records that were never produced there: {wrong[:3]}"
        missed = {o for o, _k, _v in stored[p]} - set(seen)
        assert not missed, f"partition {p}: surviving offsets {sorted(missed)[:5]} never reached the consumer"


# -- 2. racing compaction jobs -------------------------------------------------------------
def test_three_compaction_jobs_at_once_equal_one_run(
    cluster: sparklog.Cluster, cluster_options: dict[str, str], spark: SparkSession, tmp_path: Path
) -> None:
    rng = seeded()
    cluster.create_topic("race", 4, config=COMPACT)
    ctx = spawn_context()
    for round_ in range(2):
        now = int(time.time() * 1000)
        fill(cluster, "race", 4, files=3, per_file=300, keys=40, now=now, rng=rng)
        expected = one_run_reference(cluster, "race", now, tmp_path / f"ref{round_}")
        ready, go, results = ctx.Semaphore(0), ctx.Event(), ctx.Queue()
        with reaping([]) as processes:
            for _ in range(2):
                child = ctx.Process(target=compaction_job, args=(cluster_options, "race", now, ready, go, results))
                child.start()
                processes.append(child)
            for n in range(2):  # each has imported sparklog, connected and opened the table
                assert ready.acquire(timeout=120), (
                    f"round {round_}: compaction child {n + 1} of 2 not at the start line in 120 s"
                )
            go.set()
            mine = run_compaction(cluster.replicas, spark, ["race"], now_ms=now)
            theirs = [results.get(timeout=120) for _ in range(2)]
        assert all(isinstance(t, list) for t in theirs), f"a compaction child failed: {theirs}"
        statuses = [(r.partition, r.status) for r in mine] + [s for t in theirs for s in t]
        winners = {p: sum(1 for q, s in statuses if q == p and s == "compacted") for p in range(4)}
        assert winners == {p: 1 for p in range(4)}, f"round {round_}: compactions per partition {winners}, {statuses}"
        assert {p for p, s in statuses if s not in ("compacted", "skipped")} == set()
        assert snapshot_records(cluster, "race") == expected, f"round {round_}: not what one run makes"
        assert compaction_commits(cluster.replicas.leader_table("race")) == {p: round_ + 1 for p in range(4)}
        assert_no_stray_files(cluster.replicas.leader_table("race"))


# -- 3. kill -9 ------------------------------------------------------------------------------
def start_maintenance(
    options: Mapping[str, str], topic: str, now: int, progress: Path, spark_master: str | None = None
) -> BaseProcess:
    child = spawn_context().Process(
        target=maintenance_until_killed, args=(options, topic, now, str(progress), spark_master)
    )
    child.start()
    return child


def progress_lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def assert_each_partition_before_or_after(
    cluster: sparklog.Cluster, topic: str, before: Mapping[int, list[Record]], after: Mapping[int, list[Record]]
) -> int:
    """Every partition is readable and exactly as before or as one complete run leaves it."""
    now = snapshot_records(cluster, topic)
    torn = [p for p in now if now[p] != before[p] and now[p] != after[p]]
    assert not torn, f"partitions {torn} are neither as before nor compacted: a partial rewrite is visible"
    return sum(1 for p in now if now[p] == after[p] and after[p] != before[p])


def test_killed_maintenance_leaves_the_previous_state_and_a_rerun_completes(
    cluster: sparklog.Cluster, cluster_options: dict[str, str], tmp_path: Path
) -> None:
    rng = seeded()
    cluster.create_topic("kill", 8, config=COMPACT)
    now = int(time.time() * 1000)
    fill(cluster, "kill", 8, files=4, per_file=1500, keys=200, now=now, rng=rng)
    before = snapshot_records(cluster, "kill")
    after = one_run_reference(cluster, "kill", now, tmp_path / "ref")
    offsets = cluster.partition_offsets("kill")
    done_counts = []
    with reaping([]) as processes:
        for n in range(4):
            path = tmp_path / f"progress-{n}.log"
            child = start_maintenance(cluster_options, "kill", now, path)
            processes.append(child)
            target = rng.randrange(0, 7)  # partitions to let finish before the kill
            wait_for(
                lambda: len(progress_lines(path)) > target or child.exitcode is not None, 60, "maintenance progress"
            )
            time.sleep(rng.uniform(0, 0.1))  # not a wait: the kill lands anywhere in the next rewrite
            if child.exitcode is None:
                os.kill(child.pid, signal.SIGKILL)  # type: ignore[arg-type]
            child.join(10)
            done_counts.append(assert_each_partition_before_or_after(cluster, "kill", before, after))
            assert cluster.partition_offsets("kill") == offsets
        final = start_maintenance(cluster_options, "kill", now, tmp_path / "final.log")
        processes.append(final)
        final.join(120)
    print(f"compacted partitions after each kill: {done_counts}")
    assert final.exitcode == 0 and progress_lines(tmp_path / "final.log")[-1] == "finished"
    assert snapshot_records(cluster, "kill") == after
    assert compaction_commits(cluster.replicas.leader_table("kill")) == {p: 1 for p in range(8)}, (
        "one commit per partition in all"
    )


@pytest.mark.slow
def test_killed_spark_maintenance_job_then_rerun(
    cluster: sparklog.Cluster, cluster_options: dict[str, str], spark: SparkSession, tmp_path: Path
) -> None:
    cluster.create_topic("skill", 6, config=COMPACT)
    now = int(time.time() * 1000)
    fill(cluster, "skill", 6, files=3, per_file=500, keys=50, now=now, rng=random.Random(7))
    before = snapshot_records(cluster, "skill")
    after = one_run_reference(cluster, "skill", now, tmp_path / "ref")
    path = tmp_path / "progress.log"
    child = start_maintenance(cluster_options, "skill", now, path, spark_master="local[1]")
    try:
        # The first wave (2 partitions) committed: kill the driver, its JVM and workers mid-job.
        wait_for(
            lambda: len(progress_lines(path)) >= 2 or child.exitcode is not None, 240, "the Spark job's first wave"
        )
        assert child.exitcode is None, "the Spark maintenance child ended before it could be killed"
        os.killpg(child.pid, signal.SIGKILL)  # type: ignore[arg-type]
        child.join(20)
    finally:
        if child.exitcode is None and child.pid is not None:
            os.killpg(child.pid, signal.SIGKILL)
    done = assert_each_partition_before_or_after(cluster, "skill", before, after)
    assert 1 <= done < 6, f"{done} partitions compacted when killed: expected a run killed mid-way"
    rerun = run_compaction(cluster.replicas, spark, ["skill"], now_ms=now)
    assert sum(1 for r in rerun if r.status == "compacted") == 6 - done
    assert snapshot_records(cluster, "skill") == after
