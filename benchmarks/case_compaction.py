"""Case (j): log compaction of 5,000,000 keyed records vs a Spark "latest value per key" rewrite.

What it measures: wall time of ``sparklog.maintenance.runner.run_compaction(cluster.replicas, spark,
[topic], now_ms=now)`` on a topic (``cleanup.policy=compact``, ``min.cleanable.dirty.ratio=0``,
``min.compaction.lag.ms=0``, ``delete.retention.ms`` = 1 h) of 5,000,000 keyed records in 8
partitions: keys drawn uniformly from 500,000 distinct 8-byte keys (≈ 10 versions per key,
so ≈ 90% of the records are superseded), value = 100 random bytes, 2% tombstones (null
value), every record's create time 2 h old. Produced untimed with ``send_arrow`` in 20
batches of 250,000 rows (sparklog's murmur2 partitioner: same key → same partition; each
batch is one segment file per partition: 20 files of ≈ 31k records per partition). Timed:
planning on the Delta snapshot, one Spark task per partition (reads its files with
pyarrow, keeps the newest record per key, drops tombstones older than
``delete.retention.ms``, writes the survivors with their offsets) and one Delta commit per
partition. Reported as input records/s.

The active head: compaction never rewrites a partition's newest segment file. So that
both sides process exactly the same records, one last tiny batch of 8 *keyless* records
(one per partition, explicit ``partition``) is produced after the keyed data: it is every
partition's head, the 5,000,000 keyed records are all in the cleanable range, and the
baseline reads exactly the files sparklog rewrites (every live file but each partition's
newest). The 8 head records are not counted as input.

Checked every run: every partition ``compacted``, ``records_before`` sums to the input,
log-start and high watermark of every partition unchanged, and the surviving
``(partition, offset)`` pairs of sparklog's table (its live files but the heads) equal the
baseline's output rows exactly (so the same count, and the same records: offsets are
unique per partition).

Why the baseline is fair: it computes the same result from an identical copy of the table
(copied before compaction) the way a Spark user would without sparklog, on the same Spark
session: the non-head files of the copy's Delta snapshot (listing included, via delta-rs
``get_add_actions``) read by Spark's native Parquet reader with the file schema given (as
case (f)), ``row_number() over (partition by partition, key order by offset desc) = 1``,
drop tombstones whose timestamp is older than ``now - delete.retention.ms``, then
``repartition("partition").sortWithinPartitions("offset").write.partitionBy("partition")``
as Snappy Parquet (one file per partition, offset order as sparklog keeps it). Same input,
same surviving rows; the baseline writes no Delta commit and keeps no offsets/log
metadata, sparklog does (8 commits, stats, ``sparklog.cleaned.<p>``).

Target (issue): ≥ 0.8× the baseline's throughput. One untimed warm-up of both sides on a
small topic (1/20 of the data) before run 1 (Python workers, JIT).
"""

from __future__ import annotations

import shutil
import time
from typing import TYPE_CHECKING, Any

from benchmarks.case_light_producer import random_values
from benchmarks.harness import BenchContext, CaseResult, Metric, Target, alternate, fill_topic, run_record, timed

if TYPE_CHECKING:
    import pyarrow as pa

CASE = "j"
TITLE = "log compaction, 5M keyed records vs Spark latest-per-key rewrite"
RECORDS = 5_000_000
KEYS = 500_000
BATCH_ROWS = 250_000
TOMBSTONE_FRACTION = 0.02
TOPIC_PARTITIONS = 8
TOPIC = "bench"
TARGET_RATIO = 0.8
HOUR_MS = 3_600_000
KEY_DIGITS = 7  # keys are b"k" + 7 digits: 8 bytes

# The segment files' schema plus the ``partition`` directory column (as case (f)).
FILE_DDL = (
    "offset bigint, timestamp timestamp, timestampType int, key binary, value binary, "
    "headers array<struct<key: string, value: binary>>, partition int"
)


def _keys(ids: Any) -> pa.Array:
    """Fixed-width 8-byte binary keys ``b"k0000042"`` for the integer ids (numpy, no Python loop)."""
    import numpy as np
    import pyarrow as pa

    width = KEY_DIGITS + 1
    chars = np.empty((len(ids), width), dtype=np.uint8)
    chars[:, 0] = ord("k")
    powers = 10 ** np.arange(KEY_DIGITS - 1, -1, -1, dtype=np.int64)
    chars[:, 1:] = (ids[:, None] // powers) % 10 + ord("0")
    offsets = np.arange(0, (len(ids) + 1) * width, width, dtype=np.int32)
    return pa.Array.from_buffers(pa.binary(), len(ids), [None, pa.py_buffer(offsets), pa.py_buffer(chars.tobytes())])


def keyed_batch(rows: int, seed: int, keys: int, timestamp_ms: int) -> pa.Table:
    """``rows`` records: uniform random keys of ``keys`` distinct, 100 random bytes (2% null)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    rng = np.random.default_rng(1_000_000 + seed)
    values = random_values(rows, seed).column("value").combine_chunks()
    tombstone = pa.array(rng.random(rows) < TOMBSTONE_FRACTION)
    values = pc.if_else(tombstone, pa.scalar(None, pa.binary()), values)
    stamps = pa.repeat(pa.scalar(timestamp_ms * 1000, pa.timestamp("us", tz="UTC")), rows)
    return pa.table({"key": _keys(rng.integers(0, keys, rows)), "value": values, "timestamp": stamps})


def head_batch(timestamp_ms: int) -> pa.Table:
    """One keyless record per partition: every partition's active head (never compacted)."""
    import pyarrow as pa

    values = random_values(TOPIC_PARTITIONS, 999_999).column("value")
    stamps = pa.repeat(pa.scalar(timestamp_ms * 1000, pa.timestamp("us", tz="UTC")), TOPIC_PARTITIONS)
    return pa.table({"value": values, "partition": pa.array(range(TOPIC_PARTITIONS), pa.int32()), "timestamp": stamps})


def _non_head_files(root: str) -> list[str]:
    """Absolute paths of the live files of the Delta table at ``root`` but each partition's newest."""
    import pyarrow as pa
    from deltalake import DeltaTable

    actions = pa.table(DeltaTable(root).get_add_actions(flatten=True))
    rows = zip(
        actions.column("path").to_pylist(),
        actions.column("partition.partition").to_pylist(),
        actions.column("min.offset").to_pylist(),
        strict=False,
    )
    by_partition: dict[int, list[tuple[int, str]]] = {}
    for path, partition, first in rows:
        by_partition.setdefault(int(partition), []).append((int(first), path))
    return [f"{root}/{path}" for files in by_partition.values() for _, path in sorted(files)[:-1]]


def _baseline_compact(spark: Any, root: str, out: str, horizon_us: int) -> int:
    """Latest value per (partition, key) of the non-head files, expired tombstones dropped,
    written as Parquet partitioned by ``partition`` in offset order. -> files read."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    files = _non_head_files(root)
    df = spark.read.schema(FILE_DDL).option("basePath", root).parquet(*files)
    newest = Window.partitionBy("partition", "key").orderBy(F.col("offset").desc())
    latest = df.withColumn("_rn", F.row_number().over(newest)).where(F.col("_rn") == 1).drop("_rn")
    kept = latest.where(~(F.col("value").isNull() & (F.unix_micros("timestamp") < F.lit(horizon_us))))
    kept.repartition("partition").sortWithinPartitions("offset").write.partitionBy("partition").parquet(out)
    return len(files)


def _sparklog_compact(cluster: Any, spark: Any, now_ms: int, expected_input: int) -> tuple[int, int, int]:
    """Compact the topic; -> (survivors, files rewritten, files written)."""
    from sparklog.maintenance.runner import run_compaction

    results = run_compaction(cluster.replicas, spark, [TOPIC], now_ms=now_ms)
    assert sorted(r.partition for r in results) == list(range(TOPIC_PARTITIONS)), results
    assert all(r.status == "compacted" and r.files_rewritten > 0 for r in results), [r.line() for r in results]
    assert sum(r.records_before for r in results) == expected_input, [r.line() for r in results]
    return (
        sum(r.records_after for r in results),
        sum(r.files_rewritten for r in results),
        sum(r.files_written for r in results),
    )


def _sparklog_survivors(root: str) -> dict[int, list[int]]:
    """Offsets per partition in sparklog's compacted table (its live files but the heads)."""
    import pyarrow.parquet as pq

    out: dict[int, list[int]] = {}
    for path in _non_head_files(root):
        partition = int(path.rsplit("partition=", 1)[1].split("/", 1)[0])
        out.setdefault(partition, []).extend(pq.read_table(path, columns=["offset"]).column("offset").to_pylist())
    return {p: sorted(v) for p, v in out.items()}


def _baseline_survivors(out: str) -> dict[int, list[int]]:
    """Offsets per partition in the baseline's output."""
    import pyarrow.dataset as ds

    table = ds.dataset(out, format="parquet", partitioning="hive").to_table(columns=["partition", "offset"])
    result: dict[int, list[int]] = {}
    for partition, offset in zip(
        table.column("partition").to_pylist(), table.column("offset").to_pylist(), strict=False
    ):
        result.setdefault(int(partition), []).append(int(offset))
    return {p: sorted(v) for p, v in result.items()}


def _fill(cluster: Any, batches: list[pa.Table], configs: dict[str, str]) -> tuple[str, str]:
    """Produce the topic, copy its table for the baseline, set the compaction configs. -> (root, copy)."""
    filled = fill_topic(cluster, TOPIC, TOPIC_PARTITIONS, batches)
    copy = filled.table_root + "-baseline"
    shutil.copytree(filled.table_root, copy)
    cluster.alter_topic_config(TOPIC, set=configs)
    return filled.table_root, copy


def run(ctx: BenchContext) -> CaseResult:
    """Run case (j) ``ctx.runs`` times on a freshly produced topic; sparklog and baseline alternate."""
    import sparklog

    records = ctx.scaled(RECORDS, minimum=80_000)
    keys = ctx.scaled(KEYS, minimum=8_000)
    batch_rows = min(BATCH_ROWS, records // 4)
    n_batches = max(4, records // batch_rows)
    records = n_batches * batch_rows
    configs = {
        "cleanup.policy": "compact",
        "min.cleanable.dirty.ratio": "0",
        "min.compaction.lag.ms": "0",
        "delete.retention.ms": str(HOUR_MS),
        "compression.type": "snappy",  # the baseline writes Snappy (the default keeps the input's codec)
    }
    result = CaseResult(
        CASE,
        TITLE,
        __doc__ or "",
        params={
            "records": records,
            "distinct_keys": keys,
            "value_bytes": 100,
            "tombstone_fraction": TOMBSTONE_FRACTION,
            "topic_partitions": TOPIC_PARTITIONS,
            "topic_config": configs,
            "fill": f"send_arrow × {n_batches} keyed batches of {batch_rows:,} rows (murmur2 partitioner), "
            f"then 1 keyless record per partition (the active heads, not counted)",
            "sparklog": "sparklog.maintenance.runner.run_compaction(cluster.replicas, spark, [topic], now_ms=now)",
            "baseline": "spark.read.parquet(non-head files of a copy) → row_number() over (partition, key order by "
            "offset desc) = 1 → drop expired tombstones → repartition('partition')."
            "sortWithinPartitions('offset').write.partitionBy('partition').parquet()",
        },
    )
    old_ms = int(time.time() * 1000) - 2 * HOUR_MS
    batches = [keyed_batch(batch_rows, seed, keys, old_ms) for seed in range(n_batches)] + [head_batch(old_ms)]

    ctx.log(CASE, "warm-up: both sides once on a small topic, untimed …")
    warm_rows = max(1000, batch_rows // 20)
    warm = [keyed_batch(warm_rows, 10_000 + seed, max(100, keys // 20), old_ms) for seed in range(n_batches)]
    with ctx.fresh_env(CASE, "warmup") as env:
        with sparklog.connect(env.options) as cluster:
            _, copy = _fill(cluster, [*warm, head_batch(old_ms)], configs)
            now_ms = int(time.time() * 1000)
            _sparklog_compact(cluster, ctx.spark, now_ms, warm_rows * n_batches)
            _baseline_compact(ctx.spark, copy, str(env.scratch / "out"), (now_ms - HOUR_MS) * 1000)

    rates_s: list[float] = []
    rates_b: list[float] = []
    for run_no in range(1, ctx.runs + 1):
        with ctx.fresh_env(CASE, run_no) as env:
            with sparklog.connect(env.options) as cluster:
                ctx.log(CASE, f"run {run_no}/{ctx.runs} producing {records:,} keyed records (untimed) …")
                root, copy = _fill(cluster, batches, configs)
                out = str(env.scratch / "out")
                offsets_before = cluster.partition_offsets(TOPIC)
                now_ms = int(time.time() * 1000)
                side: dict[str, Any] = {}

                def sparklog_side() -> float:
                    seconds, done = timed(lambda: _sparklog_compact(cluster, ctx.spark, now_ms, records))
                    side["sparklog"] = done
                    ctx.log(
                        CASE,
                        f"run {run_no}/{ctx.runs} sparklog compaction: {seconds:.2f} s, {records / seconds:,.0f} records/s "
                        f"({done[1]} files -> {done[2]}, {records:,} -> {done[0]:,} records)",
                    )
                    return seconds

                def baseline_side() -> float:
                    seconds, files = timed(lambda: _baseline_compact(ctx.spark, copy, out, (now_ms - HOUR_MS) * 1000))
                    side["baseline_files"] = files
                    ctx.log(
                        CASE,
                        f"run {run_no}/{ctx.runs} baseline Spark rewrite: {seconds:.2f} s, {records / seconds:,.0f} records/s "
                        f"({files} files read)",
                    )
                    return seconds

                s_sec, b_sec = alternate(run_no, sparklog_side, baseline_side)
                survivors, rewritten, written = side["sparklog"]
                assert rewritten == side["baseline_files"], (rewritten, side["baseline_files"])
                offsets_after = cluster.partition_offsets(TOPIC)
                assert offsets_after == offsets_before, (offsets_before, offsets_after)
                mine, theirs = _sparklog_survivors(root), _baseline_survivors(out)
                assert mine == theirs, {
                    p: (len(mine.get(p, [])), len(theirs.get(p, []))) for p in range(TOPIC_PARTITIONS)
                }
                assert sum(len(v) for v in mine.values()) == survivors, (
                    survivors,
                    {p: len(v) for p, v in mine.items()},
                )
            result.runs.append(
                run_record(
                    run_no, records, s_sec, b_sec, survivors=survivors, files_rewritten=rewritten, files_written=written
                )
            )
            rates_s.append(records / s_sec)
            rates_b.append(records / b_sec)
    result.metrics.append(
        Metric(
            CASE,
            "run_compaction, input records/s",
            "records/s",
            rates_s,
            rates_b,
            [Target("ratio", ">=", TARGET_RATIO, f"≥ {TARGET_RATIO:.1f}×")],
            note="baseline: Spark row_number() latest-per-key rewrite of the same files (a copy) to Parquet",
        )
    )
    return result
