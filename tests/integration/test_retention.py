"""The delete policy and DeleteRecords on real Delta tables: exact surviving offsets,
metadata-only removal, log-start honoured by every reader (invariant 8)."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import sparklog
from sparklog.errors import OffsetOutOfRangeError
from tests.helpers import BOTH_STORES, assert_unchanged

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

HOUR_MS = 3_600_000


def produce_batches(cluster: sparklog.Cluster, topic: str, ages_ms: list[int], per_batch: int = 10) -> int:
    """One request (one file) per batch, records timestamped ``now - age``; returns now."""
    now = int(time.time() * 1000)
    with cluster.producer(linger_ms=0) as producer:
        for b, age in enumerate(ages_ms):
            for i in range(per_batch):
                producer.send(topic, value=f"b{b}-{i}".encode(), partition=0, timestamp_ms=now - age)
            producer.flush()
    return now


def surviving_offsets(cluster: sparklog.Cluster, topic: str) -> list[int]:
    return cluster.read(topic, 0).column("offset").to_pylist()


def live_paths(cluster: sparklog.Cluster, topic: str) -> list[str]:
    table = cluster.replicas.leader_table(topic)
    return [f.path for f in table.files(table.snapshot())]


@BOTH_STORES
def test_time_retention_removes_whole_old_files_metadata_only(cluster: sparklog.Cluster) -> None:
    cluster.create_topic("t", 1, config={"retention.ms": str(2 * HOUR_MS + HOUR_MS // 2)})
    now = produce_batches(cluster, "t", [3 * HOUR_MS, 2 * HOUR_MS, 0])
    before = live_paths(cluster, "t")
    [result] = cluster.run_retention(["t"], now_ms=now)
    assert (result.removed_files, result.removed_records, result.old_log_start, result.new_log_start) == (1, 10, 0, 10)
    assert surviving_offsets(cluster, "t") == list(range(10, 30))
    assert cluster.partition_offsets("t")[0] == (10, 30)
    storage = cluster.replicas.leader_table("t").storage
    assert storage.exists(before[0]), "retention must not delete files (VACUUM does, later)"
    with pytest.raises(OffsetOutOfRangeError, match=r"10..30"):
        cluster.read("t", 0, start_offset=5)
    again = cluster.run_retention(["t"], now_ms=now)
    assert again[0].removed_files == 0 and again[0].new_log_start == 10


@BOTH_STORES
def test_size_retention_keeps_the_newest_files_within_budget(cluster: sparklog.Cluster) -> None:
    cluster.create_topic("t", 1)
    produce_batches(cluster, "t", [0, 0, 0, 0])
    table = cluster.replicas.leader_table("t")
    sizes = [f.size_bytes for f in table.files(table.snapshot())]
    cluster.alter_topic_config("t", set={"retention.bytes": str(sizes[-1] + sizes[-2])})
    [result] = cluster.run_retention(["t"])
    assert result.removed_files == 2 and result.new_log_start == 20
    assert surviving_offsets(cluster, "t") == list(range(20, 40))


def test_unlimited_and_dry_run_and_compact_topics_change_nothing(
    cluster: sparklog.Cluster, sparklog_home: Path
) -> None:
    cluster.create_topic("keep", 1, config={"retention.ms": "-1", "retention.bytes": "-1"})
    cluster.create_topic("dry", 1, config={"retention.ms": "1"})
    cluster.create_topic("compacted", 1, config={"cleanup.policy": "compact", "retention.ms": "1"})
    for topic in ("keep", "dry", "compacted"):
        produce_batches(cluster, topic, [10 * HOUR_MS, 0])
    with assert_unchanged(cluster, sparklog_home):
        dry = cluster.run_retention(["keep", "dry", "compacted"], dry_run=True, now_ms=int(time.time() * 1000) + 10)
    assert [(r.topic, r.removed_files, r.new_log_start, r.dry_run) for r in dry] == [
        ("keep", 0, 0, True),
        ("dry", 2, 20, True),
    ]
    cluster.run_retention(["keep", "compacted"])
    assert surviving_offsets(cluster, "keep") == surviving_offsets(cluster, "compacted") == list(range(20))


def test_delete_records_hides_records_inside_a_straddling_file(cluster: sparklog.Cluster, spark: SparkSession) -> None:
    cluster.create_topic("t", 1)
    produce_batches(cluster, "t", [0, 0, 0])
    files_before = live_paths(cluster, "t")
    assert cluster.delete_records("t", {0: 15}) == {0: 15}
    assert live_paths(cluster, "t") == files_before[1:], "only the file wholly below 15 is removed"
    assert surviving_offsets(cluster, "t") == list(range(15, 30))
    assert cluster.list_offsets("t", "earliest") == {0: 15}
    assert cluster.list_offsets("t", 0) == {0: 15}, "a lookup by time never answers below log-start"
    consumer = cluster.consumer(None, auto_offset_reset="earliest")
    consumer.assign([("t", 0)])
    consumer.seek(("t", 0), 11)  # inside the straddling file, below log-start
    assert [r.offset for r in consumer.poll(1000, max_records=100)] == list(range(15, 30))
    consumer.close()
    from sparklog.spark import read

    assert sorted(r.offset for r in read(spark, "t", **cluster.config.to_options()).collect()) == list(range(15, 30))
    by_time = read(spark, "t", startingTimestamp="0", **cluster.config.to_options())  # was offset 11, below log-start
    assert sorted(r.offset for r in by_time.collect()) == list(range(15, 30))
    assert cluster.delete_records("t", {0: 3}) == {0: 15}, "log-start never moves back"
    with pytest.raises(OffsetOutOfRangeError, match="high watermark"):
        cluster.delete_records("t", {0: 31})
    assert cluster.delete_records("t", {0: 30}) == {0: 30}
    assert surviving_offsets(cluster, "t") == []


def test_spark_sources_below_log_start_fail_or_continue_with_a_warning(
    cluster: sparklog.Cluster, spark: SparkSession, caplog: pytest.LogCaptureFixture
) -> None:
    """failOnDataLoss=true names topic, partition and the missing range; false reads from
    log-start and logs a warning (the batch and the stream source plan the same way)."""
    from sparklog.spark.stream_reader import SparklogStreamReader

    cluster.create_topic("t", 1)
    produce_batches(cluster, "t", [0, 0, 0])
    cluster.delete_records("t", {0: 15})
    options = {**cluster.config.to_options(), "subscribe": "t"}
    below = json.dumps({"t": {"0": 3}})
    df = spark.read.format("sparklog").options(**options).option("startingOffsets", below)
    with pytest.raises(Exception, match=r"Offsets 3\.\.14 of t-0 are no longer available \(log-start is 15\)"):
        df.load().collect()
    assert sorted(r.offset for r in df.option("failOnDataLoss", "false").load().collect()) == list(range(15, 30))

    # Spark plans in a Python worker whose log is not ours: plan here to see the warning.
    with pytest.raises(OffsetOutOfRangeError, match=r"Offsets 3\.\.14 of t-0 .*failOnDataLoss=false"):
        SparklogStreamReader(options, include_headers=False).partitions({"t": {"0": 3}}, {"t": {"0": 30}})
    lenient = SparklogStreamReader({**options, "failOnDataLoss": "false"}, include_headers=False)
    with caplog.at_level(logging.WARNING, logger="sparklog"):
        assert lenient.partitions({"t": {"0": 3}}, {"t": {"0": 30}})
    assert "t-0: offsets 3..14 were removed; reading from 15" in caplog.text


def test_retention_and_delete_records_cli(cluster: sparklog.Cluster, zk_connect: str, sparklog_home: Path) -> None:
    from tests.integration.test_cli import Cli, assert_single_error

    cli = Cli(zk_connect, sparklog_home)
    cluster.create_topic("t", 1, config={"retention.ms": str(HOUR_MS)})
    produce_batches(cluster, "t", [3 * HOUR_MS, 0])
    table = cluster.replicas.leader_table("t")
    oldest_bytes = table.files(table.snapshot())[0].size_bytes
    dry = cli("retention", "run", "--topic", "t", "--dry-run", forbid_pyspark=True)
    assert dry.stdout.splitlines()[0] == "DRY RUN: nothing was changed"
    assert dry.stdout.splitlines()[1:] == [
        "TOPIC PARTITION REMOVED-FILES REMOVED-RECORDS REMOVED-BYTES LOG-START-OFFSET",
        f"t     0         1             10              {oldest_bytes:<13} 0 -> 10",
    ]
    assert cluster.partition_offsets("t")[0] == (0, 20)
    cli("retention", "run", "--topic", "t", forbid_pyspark=True)
    assert cluster.partition_offsets("t")[0] == (10, 20)
    done = cli("delete-records", "--topic", "t", "--partition", "0", "--offset", "15", forbid_pyspark=True)
    assert done.stdout.splitlines() == [
        "Executing records delete operation",
        "Records delete operation completed:",
        "partition: t-0\tlow_watermark: 15",
    ]
    assert_single_error(
        cli("delete-records", "--topic", "t", "--partition", "0", "--offset", "99", expect=1), "t-0", "99"
    )
    assert_single_error(
        cli("delete-records", "--topic", "t", "--partition", "7", "--offset", "1", expect=1), "partition 7"
    )
