"""Segments: one partition per file, contiguous offsets inside it, offset/timestamp stats in
the Delta log, and files cut at ``segment.bytes``."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

import sparklog
from sparklog.log.table import FileEntry

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def live_files(cluster: sparklog.Cluster, topic: str) -> list[FileEntry]:
    table = cluster.replicas.leader_table(topic)
    return table.files(table.snapshot())


def assert_files_tile_partitions(cluster: sparklog.Cluster, topic: str) -> list[FileEntry]:
    """Each file: one partition, rows base..last contiguous and matching its stats; files tile 0..end."""
    table = cluster.replicas.leader_table(topic)
    files = live_files(cluster, topic)
    next_offset: dict[int, int] = {}
    for entry in files:
        assert entry.path.startswith(f"partition={entry.partition}/"), entry
        offsets = pq.read_table(table.full_path(entry.path), columns=["offset"]).column("offset").to_pylist()
        assert offsets == list(range(entry.base_offset, entry.last_offset + 1)), (
            f"{entry.path}: stats say {entry.base_offset}..{entry.last_offset}"
        )
        assert entry.num_records == len(offsets)
        assert entry.min_timestamp_us is not None and entry.max_timestamp_us is not None
        assert next_offset.get(entry.partition, 0) == entry.base_offset, f"gap or overlap before {entry}"
        next_offset[entry.partition] = entry.last_offset + 1
    assert next_offset == {p: hw for p, hw in cluster.high_watermarks(topic).items() if hw}
    return files


def test_one_file_per_partition_per_produce_request(cluster: sparklog.Cluster) -> None:
    cluster.create_topic("seg", partitions=3)
    with cluster.producer(linger_ms=1000, batch_size=1 << 30) as producer:
        for i in range(30):
            producer.send("seg", b"v%d" % i, partition=i % 3, timestamp_ms=1_700_000_000_000 + i)
    files = assert_files_tile_partitions(cluster, "seg")
    assert len(files) == 3, [f.path for f in files]
    first = next(f for f in files if f.partition == 0)
    assert (first.min_timestamp_us, first.max_timestamp_us) == (1_700_000_000_000_000, 1_700_000_000_027_000)


def test_segment_bytes_cuts_large_batches(cluster: sparklog.Cluster) -> None:
    cluster.create_topic("small-segments", partitions=2, config={"segment.bytes": 64 * 1024})
    values = pa.array([bytes([i % 256]) * 1000 for i in range(1000)], pa.binary())  # ~1 MB
    with cluster.producer() as producer:
        producer.send_arrow(
            "small-segments", pa.table({"value": values, "partition": pa.array([1] * 1000, pa.int32())})
        )
    files = assert_files_tile_partitions(cluster, "small-segments")
    assert len(files) >= 10, f"~1 MB at 64 KiB segments should make >= 10 files, got {len(files)}"
    assert all(f.partition == 1 for f in files)
    assert cluster.read("small-segments", partition=1).column("value").to_pylist() == values.to_pylist()


def test_spark_produce_respects_segment_bytes(
    spark: SparkSession, cluster: sparklog.Cluster, cluster_options: dict[str, str]
) -> None:
    from pyspark.sql import functions as F

    from sparklog.spark import produce

    cluster.create_topic("spark-segments", partitions=2, config={"segment.bytes": 256 * 1024})
    df = spark.range(20_000, numPartitions=2).select(F.expr("repeat('x', 100)").alias("value"))
    produce(df, "spark-segments", **cluster_options)
    files = assert_files_tile_partitions(cluster, "spark-segments")
    assert len(files) > 4, f"2 tasks x 2 partitions x ~0.5 MB at 256 KiB segments: got {len(files)} files"
