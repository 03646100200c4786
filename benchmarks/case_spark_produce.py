"""Case (a): Spark produce throughput — ``sparklog.spark.produce(df, topic)`` vs ``df.write.parquet``.

What it measures: wall time of writing 5,000,000 keyless records whose value is 100
random bytes into an 8-partition topic, as one atomic Spark produce (planning + lease
acquisition, the tasks' JVM→Python Arrow transfer, partitioning, Parquet segment writes,
offset reservation in ZooKeeper, the single Delta commit, and the history lookup that
returns the committed offset ranges). Reported as records/s.

Why the baseline is fair: ``df.write.parquet(path)`` writes the *same cached DataFrame*
(same rows, same input partitioning, same Snappy codec, same session and cores) as plain
Parquet files with Spark's native JVM writer and no commit log at all. It is the floor
of "just put these rows on disk as Parquet"; sparklog adds offsets, timestamps, the
partitioner, Delta metadata and coordination on top. The DataFrame is cached and
materialised before timing, so generating the random values is timed on neither side.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from benchmarks.harness import BenchContext, CaseResult, Metric, Target, alternate, run_record, timed

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

CASE = "a"
TITLE = "Spark produce (5M × 100 B, 8 partitions, keyless)"
RECORDS = 5_000_000
VALUE_BYTES = 100
TOPIC_PARTITIONS = 8
INPUT_PARTITIONS = 8
# The baseline writes Snappy; compression.type's default (producer, with none) is uncompressed.
SNAPPY = {"compression.type": "snappy"}
TARGET_RECORDS_PER_S = 1_000_000
TARGET_RATIO = 0.7


def cached_values(ctx: BenchContext, records: int) -> DataFrame:
    """A cached, materialised DataFrame of ``records`` rows with one column ``value`` (100 random bytes).

    ``value`` = the first 100 bytes of two SHA-512 digests (of ``id`` and ``-id-1``), so it
    is incompressible binary of exactly 100 bytes. Shared by cases (a) and (c).
    """
    key = f"values-{records}"
    if key in ctx.cache:
        return ctx.cache[key]
    from pyspark.sql import functions as F

    ctx.log(CASE, f"generating and caching {records:,} random {VALUE_BYTES}-byte values …")
    ident = F.col("id")
    digest1 = F.unhex(F.sha2(ident.cast("string"), 512))
    digest2 = F.unhex(F.sha2((-ident - 1).cast("string"), 512))
    value = F.substring(F.concat(digest1, digest2), 1, VALUE_BYTES).alias("value")
    df = ctx.spark.range(0, records, 1, INPUT_PARTITIONS).select(value).cache()
    seconds, count = timed(df.count)
    lengths = df.select(F.min(F.length("value")), F.max(F.length("value"))).first()
    assert count == records, (count, records)
    assert lengths is not None and tuple(lengths) == (VALUE_BYTES, VALUE_BYTES), lengths
    ctx.log(CASE, f"cached {count:,} rows in {seconds:.1f} s")
    ctx.cache[key] = df
    return df


def _warm_up(ctx: BenchContext) -> None:
    """One small job on each side so JVM code paths and Python workers are warm for run 1."""
    import sparklog
    from sparklog.spark import produce

    df = ctx.spark.range(0, 20_000, 1, INPUT_PARTITIONS).selectExpr("cast(cast(id as string) as binary) as value")
    with ctx.fresh_env(CASE, "warmup") as env:
        with sparklog.connect(env.options) as cluster:
            cluster.create_topic("warmup", partitions=TOPIC_PARTITIONS, config=SNAPPY)
        produce(df, "warmup", **env.options)
        df.write.parquet(str(env.scratch / "warmup.parquet"))


def run(ctx: BenchContext) -> CaseResult:
    """Run case (a) ``ctx.runs`` times; sparklog and baseline alternate which goes first."""
    import sparklog
    from sparklog.spark import produce

    records = ctx.scaled(RECORDS, minimum=1000)
    result = CaseResult(
        CASE,
        TITLE,
        __doc__ or "",
        params={
            "records": records,
            "value_bytes": VALUE_BYTES,
            "topic_partitions": TOPIC_PARTITIONS,
            "input_partitions": INPUT_PARTITIONS,
            "baseline": "df.write.parquet(path) of the same cached DataFrame",
        },
    )
    df = cached_values(ctx, records)
    ctx.log(CASE, "warm-up …")
    _warm_up(ctx)
    sparklog_rates: list[float] = []
    baseline_rates: list[float] = []
    for run_no in range(1, ctx.runs + 1):
        with ctx.fresh_env(CASE, run_no) as env:
            with sparklog.connect(env.options) as cluster:
                cluster.create_topic("bench", partitions=TOPIC_PARTITIONS, config=SNAPPY)

            def sparklog_side() -> float:
                ctx.log(CASE, f"run {run_no}/{ctx.runs} sparklog produce of {records:,} records …")
                seconds, produced = timed(lambda: produce(df, "bench", **env.options))
                assert produced.records == records, (produced.records, records)
                assert sorted(produced.ranges) == list(range(TOPIC_PARTITIONS)), produced.ranges
                ctx.log(CASE, f"run {run_no}/{ctx.runs} sparklog: {seconds:.2f} s, {records / seconds:,.0f} records/s")
                return seconds

            def baseline_side() -> float:
                ctx.log(CASE, f"run {run_no}/{ctx.runs} baseline df.write.parquet …")
                seconds, _ = timed(lambda: df.write.parquet(str(env.scratch / "parquet")))
                ctx.log(CASE, f"run {run_no}/{ctx.runs} baseline: {seconds:.2f} s, {records / seconds:,.0f} records/s")
                return seconds

            s_sec, b_sec = alternate(run_no, sparklog_side, baseline_side)
            with sparklog.connect(env.options) as cluster:
                files = len(
                    cluster.replicas.leader_table("bench").files(cluster.replicas.leader_table("bench").snapshot())
                )
            result.runs.append(
                run_record(
                    run_no,
                    records,
                    s_sec,
                    b_sec,
                    sparklog_files=files,
                    baseline_files=len(list((env.scratch / "parquet").glob("*.parquet"))),
                )
            )
            sparklog_rates.append(records / s_sec)
            baseline_rates.append(records / b_sec)
    result.metrics.append(
        Metric(
            CASE,
            "produce throughput",
            "records/s",
            sparklog_rates,
            baseline_rates,
            [
                Target("value", ">=", TARGET_RECORDS_PER_S, "≥ 1.00M/s"),
                Target("ratio", ">=", TARGET_RATIO, f"≥ {TARGET_RATIO:.1f}×"),
            ],
        )
    )
    return result
