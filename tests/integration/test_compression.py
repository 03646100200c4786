"""compression.type, as Kafka: every value the topic config allows reaches the Parquet files of
every write path (light producer, Spark produce, optimize, compaction, replica copies), read
back from the files' own column-chunk metadata."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F

import sparklog
from sparklog.log.append import append
from sparklog.log.optimize import optimize_topic
from sparklog.log.replica_fetch import copy_from_leader, truncate
from sparklog.log.table import TopicTable
from sparklog.maintenance.runner import run_compaction, run_optimize
from sparklog.model.records import records_to_arrow
from sparklog.spark import produce
from sparklog.spark import read as spark_read

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# compression.type of the topic -> Parquet codec name pyarrow reports for a column chunk
TOPIC_CODECS = {"uncompressed": "UNCOMPRESSED", "gzip": "GZIP", "snappy": "SNAPPY", "lz4": "LZ4", "zstd": "ZSTD"}
PRODUCER_CODECS = {"none": "UNCOMPRESSED", "gzip": "GZIP", "snappy": "SNAPPY", "lz4": "LZ4", "zstd": "ZSTD"}


def file_codecs(table: TopicTable, partitions: set[int] | None = None) -> dict[str, set[str]]:
    """Live file -> the codecs of all its column chunks (one element when the file is consistent)."""
    found: dict[str, set[str]] = {}
    for entry in table.files(table.snapshot(), partitions):
        metadata = pq.ParquetFile(table.full_path(entry.path)).metadata
        found[entry.path] = {
            metadata.row_group(g).column(c).compression
            for g in range(metadata.num_row_groups)
            for c in range(metadata.num_columns)
        }
    return found


def assert_codec(table: TopicTable, expected: str, partitions: set[int] | None = None) -> None:
    codecs = file_codecs(table, partitions)
    assert codecs, f"no live files in {table.root}"
    wrong = {path: sorted(c) for path, c in codecs.items() if c != {expected}}
    assert not wrong, f"expected every column chunk {expected}, got {wrong}"


def keyed_batch(keys: list[str], start: int = 0) -> pa.Table:
    n = len(keys)
    return records_to_arrow(
        [k.encode() for k in keys],
        [f"value-{start + i}".encode() * 8 for i in range(n)],
        [1_700_000_000_000 + start + i for i in range(n)],
        [None] * n,
    )


@pytest.mark.parametrize(
    "topic_codec, producer_codec, expected",
    [(t, "none", e) for t, e in TOPIC_CODECS.items()] + [("producer", p, e) for p, e in PRODUCER_CODECS.items()],
)
def test_light_producer_writes_the_configured_codec(
    cluster: sparklog.Cluster, topic_codec: str, producer_codec: str, expected: str
) -> None:
    cluster.create_topic("c", partitions=2, config={"compression.type": topic_codec})
    with cluster.producer(compression_type=producer_codec) as producer:
        for i in range(20):
            producer.send("c", f"value-{i}" * 10, key=f"k{i % 5}").result()
    assert_codec(cluster.replicas.leader_table("c"), expected)
    values = cluster.read("c").column("value").to_pylist()
    assert sorted(values) == sorted(f"value-{i}".encode() * 10 for i in range(20))


def test_spark_produce_writes_the_configured_codec(
    spark: SparkSession, cluster: sparklog.Cluster, cluster_options: dict[str, str]
) -> None:
    df = spark.range(200, numPartitions=2).select(F.concat(F.lit("v"), F.col("id").cast("string")).alias("value"))
    cases: list[tuple[str, dict[str, str], str]] = [(t, {}, e) for t, e in TOPIC_CODECS.items()] + [
        ("producer", {}, "UNCOMPRESSED"),  # Kafka's producer default: compression.type=none
        ("producer", {"kafka.compression.type": "zstd"}, "ZSTD"),  # as Spark's Kafka sink spells producer configs
        ("producer", {"compression_type": "lz4"}, "LZ4"),
    ]
    for i, (topic_codec, options, expected) in enumerate(cases):
        topic = f"spark-{i}"
        cluster.create_topic(topic, partitions=2, config={"compression.type": topic_codec})
        produce(df, topic, **cluster_options, **options)
        assert_codec(cluster.replicas.leader_table(topic), expected)
    # Spark's own Parquet reader reads every codec back.
    counts = spark_read(spark, **cluster_options, subscribePattern="spark-.*").groupBy("topic").count().collect()
    assert {row["topic"]: row["count"] for row in counts} == {f"spark-{i}": 200 for i in range(len(cases))}


@pytest.mark.parametrize("topic_codec, expected", [*TOPIC_CODECS.items(), ("producer", "ZSTD")])
def test_compaction_and_optimize_write_the_topics_codec(
    cluster: sparklog.Cluster, topic_codec: str, expected: str
) -> None:
    # Files produced as zstd, then the topic's codec is set: rewrites write it, except that
    # `producer` keeps the files' own codec (Kafka's cleaner keeps the producer's).
    config = {"compression.type": "producer", "cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0"}
    cluster.create_topic("m", partitions=1, config=config)
    with cluster.producer(compression_type="zstd") as producer:
        for i in range(7):  # the 7th file is the active head: compaction leaves it alone
            producer.send_arrow(
                "m",
                pa.table(
                    {
                        "key": pa.array([b"a", b"b", b"c"]),
                        "value": pa.array([f"v{3 * i + j}".encode() for j in range(3)]),
                        "partition": pa.array([0] * 3, pa.int32()),
                    }
                ),
            )
    table = cluster.replicas.leader_table("m")
    assert_codec(table, "ZSTD")
    cluster.alter_topic_config("m", set={"compression.type": topic_codec})

    [compacted] = run_compaction(cluster.replicas, None, ["m"], now_ms=1_800_000_000_000)
    assert (compacted.status, compacted.records_before, compacted.records_after) == ("compacted", 18, 3), compacted
    cleaned, head = sorted(table.files(table.snapshot()), key=lambda f: f.base_offset)
    assert file_codecs(table)[cleaned.path] == {expected} and file_codecs(table)[head.path] == {"ZSTD"}

    [merged], _checkpoints = run_optimize(cluster.replicas, ["m"])
    assert (merged.files_merged, merged.files_written) == (2, 1), merged
    assert_codec(table, expected)
    rows = cluster.read("m").to_pylist()
    assert [(r["offset"], r["key"]) for r in rows] == [
        (15, b"a"),
        (16, b"b"),
        (17, b"c"),
        (18, b"a"),
        (19, b"b"),
        (20, b"c"),
    ]


@pytest.mark.parametrize("codec, expected", [("none", "UNCOMPRESSED"), ("zstd", "ZSTD"), ("gzip", "GZIP")])
def test_replica_copies_keep_the_leaders_codec(tmp_path: Path, codec: str, expected: str) -> None:
    leader, follower = TopicTable(str(tmp_path / "a"), "t"), TopicTable(str(tmp_path / "b"), "t")
    for table in (leader, follower):
        table.create("topic-id", 600_000)
    for start in (0, 3):
        append(leader, {0: 1}, {0: keyed_batch(["x", "y", "z"], start)}, leader_epochs={0: 0}, compression=codec)
    copy_from_leader(leader, follower, 0, leader_epoch=0)  # whole files: the leader's bytes
    assert_codec(follower, expected)
    append(leader, {0: 1}, {0: keyed_batch(["x"], 6)}, leader_epochs={0: 0}, compression=codec)
    optimize_topic(leader, [0], 1 << 30, compression=codec)  # one file [0, 6]: the follower needs a slice of it
    copy_from_leader(leader, follower, 0, leader_epoch=0)
    assert_codec(follower, expected)
    assert truncate(follower, 0, 5, leader_epoch=1)  # keeps a prefix of the sliced file: rewritten too
    assert_codec(follower, expected)
    assert follower.log_end(follower.snapshot(), 0) == 5
