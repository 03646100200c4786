"""Case (c): SQL scan over the topic vs the topic's raw Parquet files.

What it measures: wall time of ::

    SELECT partition, count(*), sum(length(value)) FROM <topic> GROUP BY partition

over a topic of 5,000,000 records (100-byte values, 8 partitions, produced by the Spark
producer exactly as in case (a), untimed) through the topic's SQL view as
``sparklog.spark.register_topics`` creates it: planning (offset resolution against the
Delta snapshot and ZooKeeper metadata, file selection by stats), then Spark's native
Parquet reader over the chosen segments with the offset-range filter, and the
aggregation. Reported as records/s scanned. Also reported (informational, no target): the
same query through a ``USING sparklog`` view, i.e. the Python Data Source path, whose rows
cross a Python worker as Arrow batches.

Why the baseline is fair: the same query, on the same session, over *the same Parquet
files* — the live files of the topic's Delta snapshot, read by Spark's native Parquet
reader (``spark.read.option("basePath", root).parquet(*files)``), with ``partition``
recovered from the ``partition=N`` directories exactly as Delta stores it. Same bytes on
disk, same answer (asserted); the difference is purely sparklog's read path. Both timings
include creating the view/DataFrame (the baseline's includes listing the live files from
the Delta log), the query and ``collect()``. Before run 1 every query runs once untimed (warm-up).
"""

from __future__ import annotations

from benchmarks.case_spark_produce import RECORDS, TOPIC_PARTITIONS, cached_values
from benchmarks.harness import BenchContext, CaseResult, Metric, Target, run_record, timed

CASE = "c"
TITLE = "SQL scan + GROUP BY partition (5M records)"
TARGET_RATIO = 0.9
LABELS = {
    "sparklog": "sparklog SQL scan (register_topics view)",
    "source": "sparklog SQL scan (USING sparklog view, Python data source)",
    "baseline": "baseline Parquet scan",
}
QUERY = "SELECT partition, count(*) AS records, sum(length(value)) AS bytes FROM {view} GROUP BY partition"


def _sparklog_query(ctx: BenchContext, options: dict[str, str]) -> list[tuple[int, int, int]]:
    from sparklog.spark import register_topics

    register_topics(ctx.spark, True, **options)
    rows = ctx.spark.sql(QUERY.format(view="bench")).collect()
    return sorted((int(r[0]), int(r[1]), int(r[2])) for r in rows)


def _source_query(ctx: BenchContext, options: dict[str, str]) -> list[tuple[int, int, int]]:
    opts = ", ".join(f"`{k}` '{v}'" for k, v in sorted(options.items()))
    ctx.spark.sql(
        f"CREATE OR REPLACE TEMPORARY VIEW bench_c_sparklog USING sparklog OPTIONS (subscribe 'bench', {opts})"
    )
    rows = ctx.spark.sql(QUERY.format(view="bench_c_sparklog")).collect()
    return sorted((int(r[0]), int(r[1]), int(r[2])) for r in rows)


def _parquet_query(ctx: BenchContext, table_root: str) -> list[tuple[int, int, int]]:
    from deltalake import DeltaTable

    files = DeltaTable(table_root).file_uris()
    ctx.spark.read.option("basePath", table_root).parquet(*files).createOrReplaceTempView("bench_c_parquet")
    rows = ctx.spark.sql(QUERY.format(view="bench_c_parquet")).collect()
    return sorted((int(r[0]), int(r[1]), int(r[2])) for r in rows)


def run(ctx: BenchContext) -> CaseResult:
    """Run case (c) ``ctx.runs`` times on a freshly produced topic each run; the order rotates."""
    import sparklog
    from sparklog.spark import produce

    records = ctx.scaled(RECORDS, minimum=1000)
    result = CaseResult(
        CASE,
        TITLE,
        __doc__ or "",
        params={
            "records": records,
            "topic_partitions": TOPIC_PARTITIONS,
            "query": QUERY.format(view="<topic>"),
            "baseline": "same query over spark.read.parquet(<live files of the topic's Delta snapshot>)",
        },
    )
    df = cached_values(ctx, records)
    sparklog_rates: list[float] = []
    baseline_rates: list[float] = []
    source_rates: list[float] = []
    for run_no in range(1, ctx.runs + 1):
        with ctx.fresh_env(CASE, run_no) as env:
            with sparklog.connect(env.options) as cluster:
                cluster.create_topic("bench", partitions=TOPIC_PARTITIONS)
                ctx.log(CASE, f"run {run_no}/{ctx.runs} producing {records:,} records (untimed) …")
                produce(df, "bench", **env.options)
                table = cluster.replicas.leader_table("bench")
                table_root = table.root
                files = len(table.files(table.snapshot()))

            sides = {
                "sparklog": lambda: _sparklog_query(ctx, env.options),
                "source": lambda: _source_query(ctx, env.options),
                "baseline": lambda: _parquet_query(ctx, table_root),
            }
            if run_no == 1:
                ctx.log(CASE, "warm-up: every query once, untimed …")
                for query in sides.values():
                    query()
            # Rotate the order so that no side always runs first (or last).
            order = list(sides)[(run_no - 1) % 3 :] + list(sides)[: (run_no - 1) % 3]
            seconds: dict[str, float] = {}
            answers: dict[str, list[tuple[int, int, int]]] = {}
            for side in order:
                ctx.log(CASE, f"run {run_no}/{ctx.runs} {LABELS[side]} …")
                seconds[side], answers[side] = timed(sides[side])
                ctx.log(
                    CASE,
                    f"run {run_no}/{ctx.runs} {side}: {seconds[side]:.2f} s, {records / seconds[side]:,.0f} records/s",
                )
            s_rows = answers["sparklog"]
            assert s_rows == answers["baseline"] == answers["source"], answers
            assert sum(r[1] for r in s_rows) == records, s_rows
            assert sum(r[2] for r in s_rows) == records * 100, s_rows
            s_sec, b_sec, src_sec = seconds["sparklog"], seconds["baseline"], seconds["source"]
            result.runs.append(
                run_record(
                    run_no,
                    records,
                    s_sec,
                    b_sec,
                    order=order,
                    python_source_seconds=src_sec,
                    live_files=files,
                    result=s_rows,
                )
            )
            sparklog_rates.append(records / s_sec)
            baseline_rates.append(records / b_sec)
            source_rates.append(records / src_sec)
    result.metrics.append(
        Metric(
            CASE,
            "scan via register_topics view",
            "records/s",
            sparklog_rates,
            baseline_rates,
            [Target("ratio", ">=", TARGET_RATIO, f"≥ {TARGET_RATIO:.1f}×")],
        )
    )
    result.metrics.append(
        Metric(
            CASE,
            "scan via USING sparklog (Python data source)",
            "records/s",
            source_rates,
            baseline_rates,
            [],
            note="informational: format('sparklog') path; rows cross a Python worker",
        )
    )
    return result
