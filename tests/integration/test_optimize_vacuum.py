"""Optimize, vacuum, log checkpoints and history on real Delta tables and a real ZooKeeper.

Optimize must keep every record at its offset (gaps from compaction included), swap files
atomically (no reader ever sees a duplicate or a gap, also with a producer appending and
another optimize racing), and commit ``dataChange=false``. Vacuum must delete only what
no snapshot within ``file.delete.delay.ms`` can still need, and never a live file.
"""

from __future__ import annotations

import glob
import itertools
import json
import os
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

import sparklog
from sparklog.errors import ConfigError, StorageError
from sparklog.log.history import HISTORY_COLUMNS, topic_history
from sparklog.log.optimize import OptimizeResult, optimize_topic, rewrite_app_id
from sparklog.log.reader import read_files, read_ranges
from sparklog.log.segment import SegmentFile, write_placeholder, write_segment
from sparklog.log.table import CommitConflict, TopicTable
from sparklog.log.vacuum import vacuum_topic
from tests.helpers import BOTH_STORES, assert_contiguous, assert_log_consistent, assert_unchanged, segment_batch
from tests.integration.test_retention import produce_batches

HOUR_MS = 3_600_000
DELAY_MS = 60_000


def produce_small_files(
    cluster: sparklog.Cluster, topic: str, batches: int, partitions: int = 1, per_batch: int = 5
) -> None:
    """``batches`` requests, each one small file per partition."""
    with cluster.producer(linger_ms=0) as producer:
        for b in range(batches):
            rows = [(p, f"b{b}-p{p}-{i}".encode()) for p in range(partitions) for i in range(per_batch)]
            producer.send_arrow(
                topic,
                pa.table(
                    {
                        "partition": pa.array([p for p, _ in rows], pa.int32()),
                        "value": [v for _, v in rows],
                        "headers": [[{"key": "b", "value": str(b).encode()}] for _ in rows],
                    }
                ),
            )


def live_files(table: TopicTable, partition: int | None = None) -> list:
    return table.files(table.snapshot(), None if partition is None else {partition})


def files_on_disk(table: TopicTable) -> set[str]:
    """The table's data files in its storage (a disk or a store), whatever the Delta log says."""
    return {
        path
        for path in table.storage.listing()
        if path.startswith("partition=") and path.endswith(".parquet") and not path.rpartition("/")[2].startswith("_")
    }


def commit_actions(table: TopicTable, version: int) -> list[dict]:
    data = table.storage.read(f"_delta_log/{version:020d}.json").decode()
    return [json.loads(line) for line in data.splitlines() if line.strip()]


def optimize(
    cluster: sparklog.Cluster, topic: str, table: TopicTable | None = None, **kwargs: Any
) -> list[OptimizeResult]:
    table = table or cluster.replicas.leader_table(topic)
    segment_bytes = kwargs.pop("segment_bytes", int(cluster.topic_config(topic)["segment.bytes"]))
    return optimize_topic(table, cluster.partitions_of(topic), segment_bytes, **kwargs)


# -- optimize ------------------------------------------------------------------------------------
@BOTH_STORES
def test_optimize_merges_small_files_keeps_every_record_and_commits_data_change_false(
    cluster: sparklog.Cluster,
) -> None:
    cluster.create_topic("t", 2)
    produce_small_files(cluster, "t", 12, partitions=2)
    table = cluster.replicas.leader_table("t")
    before, offsets_before = cluster.read("t"), cluster.partition_offsets("t")
    assert len(live_files(table)) == 24

    dry = optimize(cluster, "t", dry_run=True)
    assert [(r.partition, r.files_merged, r.files_written, r.bytes_written, r.dry_run) for r in dry] == [
        (0, 12, 1, 0, True),
        (1, 12, 1, 0, True),
    ]
    assert len(live_files(table)) == 24 and len(files_on_disk(table)) == 24, "a dry run writes nothing"

    results = optimize(cluster, "t")
    assert [(r.partition, r.files_merged, r.files_written, r.live_files_after, r.records) for r in results] == [
        (0, 12, 1, 1, 60),
        (1, 12, 1, 1, 60),
    ]
    assert cluster.read("t").equals(before), "every record, offset, timestamp, key, value and header kept"
    assert cluster.partition_offsets("t") == offsets_before
    assert_log_consistent(cluster, "t")
    for result in results:
        assert result.version is not None, result
        actions = commit_actions(table, result.version)
        info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
        assert info["sparklog.operation"] == "OPTIMIZE" and info["sparklog.partition"] == str(result.partition)
        adds, removes = [a["add"] for a in actions if "add" in a], [a["remove"] for a in actions if "remove" in a]
        assert (len(adds), len(removes)) == (1, 12)
        assert all(a["dataChange"] is False for a in adds + removes)
        txns = [a["txn"]["appId"] for a in actions if "txn" in a]
        assert txns == [rewrite_app_id(result.partition)], "no offset-bearing app transaction touched"
    last = json.loads(table.storage.read("_delta_log/_last_checkpoint"))
    assert last["version"] >= results[-1].version, "optimize checkpoints the log"
    assert [r.files_merged for r in optimize(cluster, "t")] == [0, 0], "nothing left to merge"


def test_optimize_bounds_live_files_and_keeps_compaction_gaps(cluster: sparklog.Cluster) -> None:
    cluster.create_topic("t", 1)
    produce_small_files(cluster, "t", 20)
    table = cluster.replicas.leader_table("t")
    files = live_files(table, 0)
    # Simulate compaction: the first 4 files become one file holding every other record.
    records = read_files(table, files[:4])
    kept = records.filter(pa.array([o % 2 == 0 for o in records.column("offset").to_pylist()]))
    gappy = write_segment(
        table.storage, 0, 0, kept.drop_columns(["offset"]), offsets=kept.column("offset").combine_chunks()
    )
    table.commit(table.snapshot(), [gappy], {}, {"sparklog.operation": "COMPACTION"}, removes=files[:4])
    before = cluster.read("t")
    assert before.column("offset").to_pylist()[:12] == [0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 21]

    segment_bytes = 5 * max(f.size_bytes for f in live_files(table, 0))
    [result] = optimize(cluster, "t", segment_bytes=segment_bytes)
    assert result.live_files_before == 17 and result.live_files_after <= 4, result
    assert len(live_files(table, 0)) == result.live_files_after
    assert cluster.read("t").equals(before), "offsets (with the gaps) and records unchanged"
    for _ in range(3):
        optimize(cluster, "t", segment_bytes=segment_bytes)
    assert len(live_files(table, 0)) <= 2 and cluster.read("t").equals(before)


def test_optimize_keeps_files_tiling_the_partition_across_compaction_gaps_and_placeholders(
    cluster: sparklog.Cluster,
) -> None:
    """Merged files span their group's offset range, not their first and last record, so a
    rewrite never moves log-start and a group of empty placeholders stays one placeholder."""
    cluster.create_topic("t", 1)
    produce_small_files(cluster, "t", 6)
    table = cluster.replicas.leader_table("t")
    files = live_files(table, 0)
    # As compaction leaves them: offsets 0..9 with no survivor (two placeholders), 10..14 without 10.
    stamps = [files[0].min_timestamp_us or 0]
    holes = [
        write_placeholder(table.storage, 0, 0, 4, stamps, "snappy"),
        write_placeholder(table.storage, 0, 5, 9, stamps, "snappy"),
    ]
    records = read_files(table, [files[2]]).slice(1)
    gappy = replace(
        write_segment(
            table.storage, 0, 0, records.drop_columns(["offset"]), offsets=records.column("offset").combine_chunks()
        ),
        base_offset=10,
    )
    table.commit(table.snapshot(), [*holes, gappy], {}, {"sparklog.operation": "COMPACTION"}, removes=files[:3])
    before, offsets_before = cluster.read("t"), cluster.partition_offsets("t")
    assert offsets_before[0][0] == 0 and before.column("offset").to_pylist()[:2] == [11, 12]

    optimize(cluster, "t", segment_bytes=5 * max(f.size_bytes for f in live_files(table, 0)))
    assert cluster.partition_offsets("t") == offsets_before, "log-start and log-end unchanged by optimize"
    assert cluster.read("t").equals(before)
    tiles = sorted((f.base_offset, f.last_offset) for f in live_files(table, 0))
    assert tiles[0][0] == 0 and all(a[1] + 1 == b[0] for a, b in itertools.pairwise(tiles)), tiles
    with cluster.consumer(auto_offset_reset="none") as consumer:
        consumer.assign([("t", 0)])
        consumer.seek(("t", 0), 3)  # inside the placeholders: moves on to the first survivor, no error
        assert [r.offset for r in consumer.poll(1)][:1] == [11]


def test_history_retention_bounds_the_delta_log(cluster: sparklog.Cluster) -> None:
    """history.retention.ms becomes delta.logRetentionDuration; maintenance (and nothing
    else: no writer's post-commit hook) deletes the expired commit files after a checkpoint."""
    from sparklog.maintenance.runner import run_optimize

    cluster.create_topic("short", 1, config={"history.retention.ms": "0"})
    cluster.create_topic("long", 1)
    for topic, expected in (("short", "interval 0 milliseconds"), ("long", "interval 600000 milliseconds")):
        configuration = cluster.replicas.leader_table(topic).snapshot().metadata().configuration
        assert (
            configuration["delta.logRetentionDuration"] == expected
            and configuration["delta.checkpointInterval"] == "100"
        )
        assert configuration["delta.enableExpiredLogCleanup"] == "false"
    for topic in ("short", "long"):
        with cluster.producer(linger_ms=0) as producer:
            for i in range(230):
                producer.send(topic, value=b"v%d" % i).result(timeout=30)

    def log_files(topic: str) -> int:
        return len(glob.glob(os.path.join(cluster.replicas.leader_table(topic).root, "_delta_log", "*.json")))

    assert log_files("short") >= 230 and log_files("long") >= 230, "writers never delete log files"
    assert glob.glob(os.path.join(cluster.replicas.leader_table("short").root, "_delta_log", "*199.checkpoint.parquet"))
    run_optimize(cluster.replicas, ["short", "long"])
    assert log_files("short") <= 2 and log_files("long") >= 230, (log_files("short"), log_files("long"))
    assert cluster.read("short").num_rows == 230 and cluster.partition_offsets("short")[0] == (0, 230)

    # A changed config reaches the table at the next optimize (one metadata commit), then never again.
    cluster.alter_topic_config("long", set={"history.retention.ms": "0"})
    version = cluster.replicas.leader_table("long").snapshot().version()
    _merged, [checkpoint] = run_optimize(cluster.replicas, ["long"])
    assert (
        cluster.replicas.leader_table("long").snapshot().metadata().configuration["delta.logRetentionDuration"]
        == "interval 0 milliseconds"
    )
    assert checkpoint.version == version + 1 and log_files("long") <= 2, log_files("long")
    run_optimize(cluster.replicas, ["long"])
    assert cluster.replicas.leader_table("long").snapshot().version() == version + 1, (
        "nothing to merge or sync, nothing committed"
    )
    assert cluster.read("long").num_rows == 230


@BOTH_STORES
def test_optimize_concurrent_with_a_producer_loses_and_duplicates_nothing(cluster: sparklog.Cluster) -> None:
    cluster.create_topic("t", 1)
    produce_small_files(cluster, "t", 10)
    stop = threading.Event()
    sent: list[bytes] = []
    failures: list[BaseException] = []

    def produce() -> None:
        try:
            with cluster.producer(linger_ms=0) as producer:
                n = 0
                while not stop.is_set():
                    values = [f"live-{n}-{i}".encode() for i in range(3)]
                    producer.send_arrow("t", pa.table({"value": values}))
                    sent.extend(values)
                    n += 1
        except BaseException as exc:
            failures.append(exc)

    def read() -> None:
        try:
            while not stop.is_set():
                offsets = cluster.read("t", 0, include_headers=False).column("offset").to_pylist()
                assert_contiguous(offsets, 0)
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=produce), threading.Thread(target=read)]
    for thread in threads:
        thread.start()
    try:
        merged = 0
        deadline = time.monotonic() + 20
        while (merged < 3 or len(sent) < 30) and time.monotonic() < deadline and not failures:
            merged += sum(1 for r in optimize(cluster, "t") if r.files_merged)
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
    assert not failures, failures
    assert merged >= 3, "optimize committed while the producer appended"
    records = assert_log_consistent(cluster, "t")
    stored = [r.value for r in records]
    expected = [f"b{b}-p0-{i}".encode() for b in range(10) for i in range(5)] + sent
    assert sorted(v or b"" for v in stored) == sorted(expected) and len(set(stored)) == len(stored)


def test_two_optimize_runs_racing_agree_and_leave_no_orphans(cluster: sparklog.Cluster) -> None:
    cluster.create_topic("t", 1)
    produce_small_files(cluster, "t", 30)
    table = cluster.replicas.leader_table("t")
    before, originals = cluster.read("t"), {f.path for f in live_files(table)}
    log_dir = str(Path(table.root).parents[1])
    barrier = threading.Barrier(2)
    outcomes: list[object] = []

    def run() -> None:
        own = TopicTable(log_dir, "t")  # as another process would
        barrier.wait()
        try:
            outcomes.append(optimize_topic(own, [0], 1 << 30)[0])
        except BaseException as exc:
            outcomes.append(exc)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not [o for o in outcomes if isinstance(o, BaseException)], outcomes
    assert cluster.read("t").equals(before)
    live = {f.path for f in live_files(table)}
    assert len(live) == 1 and not live & originals
    assert files_on_disk(table) == originals | live, "the loser deleted the file it wrote"
    assert sorted(o.files_merged for o in outcomes) == [0, 30], outcomes  # type: ignore[attr-defined]


def test_optimize_replans_when_a_merged_file_is_removed_concurrently(
    cluster: sparklog.Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sparklog.log.optimize as optimize_module

    cluster.create_topic("t", 1)
    produce_small_files(cluster, "t", 6)
    real_write = optimize_module.write_segment
    calls: list[int] = []

    def write_then_delete_records(*args: Any, **kwargs: Any) -> SegmentFile:
        calls.append(1)
        if len(calls) == 1:  # DeleteRecords lands between optimize's plan and its commit
            cluster.delete_records("t", {0: 5})
        return real_write(*args, **kwargs)

    monkeypatch.setattr(optimize_module, "write_segment", write_then_delete_records)
    [result] = optimize(cluster, "t")
    assert (result.attempts, result.files_merged) == (2, 5)
    assert cluster.read("t").column("offset").to_pylist() == list(range(5, 30))
    table = cluster.replicas.leader_table("t")
    assert len(files_on_disk(table)) == 6 + 1, "the first attempt's merged file was deleted"


def test_delta_rs_conflict_rules_optimize_relies_on(cluster: sparklog.Cluster) -> None:
    """Facts of deltalake 1.6.6 (DESIGN §6 style): with retries allowed, a commit rebases over
    concurrent appends and fails when a concurrent commit removed one of its files with
    dataChange=true; a concurrent dataChange=false removal goes unnoticed unless both
    commits touch one app id (hence ``sparklog.rewrite.<p>``)."""
    cluster.create_topic("t", 1)
    produce_small_files(cluster, "t", 8)
    table = cluster.replicas.leader_table("t")
    files = live_files(table)

    def stale() -> DeltaTable:
        return table.snapshot(version=table.snapshot().version())

    before = stale()
    produce_small_files(cluster, "t", 1)
    table.commit(before, [], {}, removes=files[:1], data_change=False, max_commit_retries=10)  # rebased: fine

    before = stale()
    table.advance_log_start(0, 10, files[1:2], "RETENTION")  # dataChange=true
    with pytest.raises(CommitConflict, match="concurrent transaction deleted data"):
        table.commit(before, [], {}, removes=files[1:3], data_change=False, max_commit_retries=10)

    before = stale()
    table.commit(table.snapshot(), [], {}, removes=files[2:3], data_change=False)
    table.commit(before, [], {}, removes=files[2:4], data_change=False, max_commit_retries=10)  # NOT detected

    before = stale()
    table.commit(table.snapshot(), [], {rewrite_app_id(0): 1}, removes=files[4:5], data_change=False)
    with pytest.raises(CommitConflict):
        table.commit(before, [], {rewrite_app_id(0): 1}, removes=files[4:6], data_change=False, max_commit_retries=10)


# -- vacuum --------------------------------------------------------------------------------------
def test_vacuum_waits_the_grace_period_for_readers_of_older_snapshots(cluster: sparklog.Cluster) -> None:
    cluster.create_topic("t", 1, config={"retention.ms": str(2 * HOUR_MS + HOUR_MS // 2)})
    now = produce_batches(cluster, "t", [3 * HOUR_MS, 2 * HOUR_MS, 0])
    table = cluster.replicas.leader_table("t")
    old = table.snapshot(version=table.snapshot().version())  # a reader opened before retention
    [oldest, *_] = live_files(table)
    cluster.run_retention(["t"], now_ms=now)
    assert cluster.partition_offsets("t")[0] == (10, 30)

    within = vacuum_topic(table, DELAY_MS)
    assert (within.deleted_files, within.candidates) == (0, ())
    assert read_ranges(table, old, {0: (0, 30)}).column("offset").to_pylist() == list(range(30))

    after = vacuum_topic(table, DELAY_MS, now_ms=int(time.time() * 1000) + DELAY_MS + 1000)
    assert (after.deleted_files, after.deleted_bytes, after.candidates) == (1, oldest.size_bytes, (oldest.path,))
    assert not os.path.exists(table.full_path(oldest.path))
    with pytest.raises(StorageError, match="removed by retention"):
        read_ranges(table, old, {0: (0, 30)})
    assert cluster.read("t").column("offset").to_pylist() == list(range(10, 30))
    assert all(os.path.exists(table.full_path(f.path)) for f in live_files(table))


@BOTH_STORES
def test_vacuum_after_optimize_reads_tombstones_from_the_checkpoint(cluster: sparklog.Cluster) -> None:
    cluster.create_topic("t", 1)
    produce_small_files(cluster, "t", 8)
    table = cluster.replicas.leader_table("t")
    before = cluster.read("t")
    [result] = optimize(cluster, "t")  # checkpoints at the optimize commit: removes live in the checkpoint
    assert result.version is not None, result
    assert not any(
        "remove" in a
        for v in range(result.version + 1, table.snapshot().version() + 1)
        for a in commit_actions(table, v)
    )
    done = vacuum_topic(table, DELAY_MS, now_ms=int(time.time() * 1000) + DELAY_MS + 1000)
    assert done.deleted_files == 8
    assert files_on_disk(table) == {f.path for f in live_files(table)}
    assert cluster.read("t").equals(before)


@BOTH_STORES
def test_vacuum_reclaims_orphans_after_the_grace_never_live_or_hidden_files(cluster: sparklog.Cluster) -> None:
    cluster.create_topic("t", 1)
    produce_small_files(cluster, "t", 3)
    table = cluster.replicas.leader_table("t")
    orphan = write_segment(table.storage, 0, 15, segment_batch([b"never committed"]))  # a killed writer's file
    hidden = ["partition=0/_tmp.parquet", "partition=0/.x.parquet.crc"]
    for path in hidden:
        table.storage.write(path, b"not data", durable=False)
    assert vacuum_topic(table, DELAY_MS).candidates == (), "a recent orphan may still be committed"
    done = vacuum_topic(table, DELAY_MS, now_ms=int(time.time() * 1000) + 10 * DELAY_MS)
    assert (done.candidates, done.deleted_files) == ((orphan.path,), 1)
    assert files_on_disk(table) == {f.path for f in live_files(table)}
    assert all(table.storage.exists(path) for path in hidden)
    assert vacuum_topic(table, 0, now_ms=int(time.time() * 1000) + 365 * 24 * HOUR_MS).deleted_files == 0
    assert_log_consistent(cluster, "t")


def test_vacuum_dry_run_deletes_nothing_and_long_delays_are_refused(
    cluster: sparklog.Cluster, sparklog_home: Path
) -> None:
    cluster.create_topic("t", 1)
    produce_small_files(cluster, "t", 4)
    table = cluster.replicas.leader_table("t")
    optimize(cluster, "t")
    with assert_unchanged(cluster, sparklog_home):
        dry = vacuum_topic(table, 0, now_ms=int(time.time() * 1000) + 1000, dry_run=True)
    assert (len(dry.candidates), dry.deleted_files, dry.dry_run) == (4, 0, True) and dry.candidate_bytes > 0
    with pytest.raises(ConfigError, match="deletedFileRetentionDuration"):
        vacuum_topic(table, 8 * 24 * HOUR_MS)


# -- history -------------------------------------------------------------------------------------
@BOTH_STORES
def test_history_has_describe_history_columns_and_sparklog_operations(cluster: sparklog.Cluster) -> None:
    cluster.create_topic("t", 1)
    produce_small_files(cluster, "t", 3)
    optimize(cluster, "t")
    cluster.delete_records("t", {0: 5})
    table = cluster.replicas.leader_table("t")
    rows = topic_history(table)
    assert all(tuple(row) == HISTORY_COLUMNS for row in rows)
    assert [r["version"] for r in rows] == list(range(table.snapshot().version(), -1, -1))
    assert [r["operation"] for r in rows][:2] == ["DELETE RECORDS", "OPTIMIZE"]
    assert rows[-1]["operation"] == "CREATE TABLE" and rows[-2]["operation"] == "WRITE"
    assert json.loads(rows[1]["userMetadata"])["sparklog.operation"] == "OPTIMIZE"
    assert rows[1]["engineInfo"].startswith("delta-rs") and rows[1]["timestamp"].tzinfo is not None
    assert rows[1]["userId"] is None and rows[1]["clusterId"] is None
    assert [r["version"] for r in topic_history(table, limit=2)] == [rows[0]["version"], rows[1]["version"]]


# -- CLI -----------------------------------------------------------------------------------------
def test_optimize_vacuum_history_cli(cluster: sparklog.Cluster, zk_connect: str, sparklog_home: Path) -> None:
    from tests.integration.test_cli import Cli, assert_single_error

    cli = Cli(zk_connect, sparklog_home)
    cluster.create_topic("t", 1, config={"file.delete.delay.ms": "0"})
    produce_small_files(cluster, "t", 3)
    table = cluster.replicas.leader_table("t")
    merged_bytes = sum(f.size_bytes for f in live_files(table))

    dry = cli("optimize", "--topic", "t", "--dry-run", forbid_pyspark=True)
    assert dry.stdout.splitlines() == [
        "DRY RUN: nothing was changed",
        "TOPIC PARTITION FILES-MERGED FILES-WRITTEN BYTES-MERGED BYTES-WRITTEN LIVE-FILES",
        f"t     0         3            1             {merged_bytes:<12} 0             3 -> 1",
    ]
    assert dry.stderr.splitlines() == [
        f"t-0: optimize would merge 3 files ({merged_bytes} bytes) into 1; live files 3 -> 1"
    ]
    assert len(live_files(table)) == 3

    done = cli("optimize", "--topic", "t", "--output", "json", forbid_pyspark=True)
    report = json.loads(done.stdout)
    [partition] = report["partitions"]
    assert (partition["files_merged"], partition["files_written"], partition["bytes_merged"]) == (3, 1, merged_bytes)
    assert report["checkpoints"][0]["version"] >= partition["version"]
    assert "t: checkpoint at version" in done.stderr and len(live_files(table)) == 1

    time.sleep(0.01)  # file.delete.delay.ms=0: anything removed before now may go
    vacuum_dry = cli("vacuum", "--topic", "t", "--dry-run", forbid_pyspark=True)
    assert vacuum_dry.stdout.splitlines() == [
        "DRY RUN: nothing was changed",
        "TOPIC FILES-DELETED BYTES-DELETED",
        f"t     3             {merged_bytes}",
    ]
    assert vacuum_dry.stderr.splitlines() == [f"t: partition=0: vacuum would delete 3 files ({merged_bytes} bytes)"]
    vacuum = cli("vacuum", "--topic", "t", forbid_pyspark=True)
    assert vacuum.stdout.splitlines()[1] == f"t     3             {merged_bytes}"
    assert files_on_disk(table) == {f.path for f in live_files(table)}

    history = cli("history", "--topic", "t", "--limit", "2", forbid_pyspark=True).stdout.splitlines()
    assert history[0].split() == list(HISTORY_COLUMNS) and len(history) == 3
    assert history[1].split()[0] == str(table.snapshot().version()) and "OPTIMIZE" in history[1].split()
    rows = json.loads(cli("history", "--topic", "t", "--output", "json", forbid_pyspark=True).stdout)
    assert [list(r) for r in rows] == [list(HISTORY_COLUMNS)] * len(rows) and rows[-1]["operation"] == "CREATE TABLE"
    assert rows[0]["timestamp"].endswith("Z")

    assert_single_error(cli("optimize", "--topic", "nope", expect=1), "nope")
    assert_single_error(cli("vacuum", "--topic", "nope", expect=1), "nope")
    assert_single_error(cli("history", "--topic", "nope", expect=1), "nope")
    cli("history", "--topic", "t", "--limit", "0", expect=2)


def test_optimize_and_vacuum_cover_every_topic_by_default(
    cluster: sparklog.Cluster, zk_connect: str, sparklog_home: Path
) -> None:
    from tests.integration.test_cli import Cli

    cli = Cli(zk_connect, sparklog_home)
    cluster.create_topic("a", 2)
    cluster.create_topic("b", 1)
    produce_small_files(cluster, "a", 2, partitions=2)
    for offset in (1, 2, 3):
        cluster.commit_offsets("g", {("a", 0): offset})
    topics = cluster.list_topics()
    assert "__consumer_offsets" in topics
    optimized = json.loads(cli("optimize", "--output", "json").stdout)
    assert sorted({r["topic"] for r in optimized["partitions"]}) == sorted(topics)
    assert [(r["partition"], r["files_merged"]) for r in optimized["partitions"] if r["topic"] == "a"] == [
        (0, 2),
        (1, 2),
    ]
    vacuumed = cli("vacuum", forbid_pyspark=True).stdout.splitlines()
    assert vacuumed[0] == "TOPIC              FILES-DELETED BYTES-DELETED"
    assert sorted(line.split()[0] for line in vacuumed[1:]) == sorted(topics)
    assert_log_consistent(cluster, "a")
