"""Case (f): Spark group consumption vs a raw Spark scan of the same files.

What it measures: wall time of one Spark consume for a *fresh* consumer group over a topic of
5,000,000 records (value = 100 random bytes, keyless, 8 partitions, produced untimed with
``send_arrow`` in 40 batches of 125,000 rows: 5 segment files per partition)::

    batch = sparklog.spark.consume(spark, group, [topic], startingOffsets="earliest", **cluster_options)
    batch.df.selectExpr("partition", "length(value) AS n").groupBy("partition")
         .agg(count("*"), sum("n")).collect()
    batch.commit()

i.e. joining/resolving the group's offsets (none committed: from the earliest offset),
pinning the offset ranges (``batch.ranges``) against the Delta snapshot, the DataFrame over
the selected segments, an action that reads every value, and the offset commit of the
ranges. Reported as records/s; the answer is checked (records and bytes per partition), and
so are ``batch.ranges`` (every record, once) and the committed offsets afterwards.

Why the baseline is fair: the same action, on the same session, over *the same Parquet
files* — the live files of the topic's Delta snapshot read by Spark's native Parquet reader
(``spark.read.schema(<file schema>).option("basePath", root).parquet(*files)``, ``partition``
from the ``partition=N`` directories; the explicit schema as sparklog's native read path
gives it, so neither side infers the schema from footers), listing included. Same bytes, same answer (asserted); the
difference is sparklog's group and offset work plus its read path. (No commit: a raw scan
has no group.) The commit's own time is reported separately (informational).

Status: written against the documented signature ``sparklog.spark.consume(spark, group_id,
topics, **options) -> GroupBatch`` (``.df``, ``.ranges``, ``.commit()``). When
``sparklog.spark.consume`` is not importable the case is skipped (reported as such, no
figures).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from benchmarks.case_light_producer import random_values
from benchmarks.harness import BenchContext, CaseResult, Metric, Target, alternate, fill_topic, run_record, timed

CASE = "f"
TITLE = "Spark group consume + action vs raw Parquet scan (5M records)"
RECORDS = 5_000_000
BATCH_ROWS = 125_000
TOPIC_PARTITIONS = 8
TOPIC = "bench"
TARGET_RATIO: float | None = None  # the issue sets no target; the figure and ratio are reported


def _consume_fn() -> Any:
    """``sparklog.spark.consume`` or None when it does not exist (yet)."""
    import importlib
    import types

    try:
        module = importlib.import_module("sparklog.spark")
        fn = getattr(module, "consume", None)
        if fn is None or isinstance(fn, types.ModuleType):  # only the submodule: take its function
            fn = getattr(importlib.import_module("sparklog.spark.consume"), "consume", None)
    except ImportError:
        return None
    return fn if callable(fn) else None


def _aggregate(df: Any) -> list[tuple[int, int, int]]:
    from pyspark.sql import functions as F

    rows = df.selectExpr("partition", "length(value) AS n").groupBy("partition").agg(F.count("*"), F.sum("n")).collect()
    return sorted((int(r[0]), int(r[1]), int(r[2])) for r in rows)


def _range_records(ranges: Any, topic: str) -> dict[int, tuple[int, int]]:
    """``GroupBatch.ranges`` as partition -> (start, end), whatever its nesting (by topic or by (topic, p))."""
    out: dict[int, tuple[int, int]] = {}
    items = ranges.items() if isinstance(ranges, Mapping) else ranges
    for key, value in items:
        if isinstance(key, tuple):  # {(topic, p): (start, end)}
            if key[0] == topic:
                out[int(key[1])] = (int(value[0]), int(value[1]))
        elif isinstance(value, Mapping):  # {topic: {p: (start, end)}}
            if key == topic:
                out.update({int(p): (int(v[0]), int(v[1])) for p, v in value.items()})
        else:  # {p: (start, end)} of the single topic
            out[int(key)] = (int(value[0]), int(value[1]))
    return out


def _sparklog_side(
    ctx: BenchContext, consume: Any, group: str, options: dict[str, str]
) -> tuple[list[tuple[int, int, int]], Any, float]:
    batch = consume(ctx.spark, group, [TOPIC], startingOffsets="earliest", **options)
    rows = _aggregate(batch.df)
    commit_sec, _ = timed(batch.commit)
    return rows, batch.ranges, commit_sec


# The segment files' schema plus the ``partition`` directory column, given to the reader as
# sparklog's native read path does (no schema inference from Parquet footers on either side).
FILE_DDL = (
    "offset bigint, timestamp timestamp, timestampType int, key binary, value binary, "
    "headers array<struct<key: string, value: binary>>, partition int"
)


def _baseline_side(ctx: BenchContext, table_root: str) -> list[tuple[int, int, int]]:
    from deltalake import DeltaTable

    files = DeltaTable(table_root).file_uris()
    return _aggregate(ctx.spark.read.schema(FILE_DDL).option("basePath", table_root).parquet(*files))


def run(ctx: BenchContext) -> CaseResult:
    """Run case (f) ``ctx.runs`` times on a freshly produced topic; sparklog and baseline alternate."""
    consume = _consume_fn()
    result = CaseResult(CASE, TITLE, __doc__ or "")
    if consume is None:
        result.params["skipped"] = True
        result.notes.append("sparklog.spark.consume does not exist in the code under test: case not run")
        ctx.log(CASE, "skipped: sparklog.spark.consume does not exist (yet)")
        return result

    import sparklog

    records = ctx.scaled(RECORDS, minimum=8000)
    batch_rows = min(BATCH_ROWS, records // TOPIC_PARTITIONS)
    n_batches = max(TOPIC_PARTITIONS, records // batch_rows)
    records = n_batches * batch_rows
    result.params.update(
        {
            "records": records,
            "value_bytes": 100,
            "topic_partitions": TOPIC_PARTITIONS,
            "fill": f"send_arrow × {n_batches} batches of {batch_rows:,} rows (keyless: one partition per batch), acks=1",
            "sparklog": "sparklog.spark.consume(spark, <fresh group>, [topic], startingOffsets='earliest') + action + batch.commit()",
            "action": "df.selectExpr('partition', 'length(value) AS n').groupBy('partition').agg(count(*), sum(n)).collect()",
            "baseline": "same action over spark.read.schema(FILE_DDL).option('basePath', root).parquet(<live files of the Delta snapshot>)",
        }
    )
    batches = [random_values(batch_rows, seed) for seed in range(n_batches)]
    sparklog_rates: list[float] = []
    baseline_rates: list[float] = []
    commit_ms: list[float] = []
    for run_no in range(1, ctx.runs + 1):
        with ctx.fresh_env(CASE, run_no) as env:
            with sparklog.connect(env.options) as cluster:
                ctx.log(CASE, f"run {run_no}/{ctx.runs} producing {records:,} records (untimed) …")
                filled = fill_topic(cluster, TOPIC, TOPIC_PARTITIONS, batches)
                hw, table_root, live_files = filled.high_watermarks, filled.table_root, filled.live_files
                expected = sorted((p, end, end * 100) for p, end in hw.items())
                if run_no == 1:
                    ctx.log(CASE, "warm-up: both sides once, untimed …")
                    _sparklog_side(ctx, consume, "bench-warmup", env.options)
                    _baseline_side(ctx, table_root)
                group = f"bench-f-{run_no}"
                side_out: dict[str, Any] = {}

                def sparklog_side() -> float:
                    seconds, out = timed(lambda: _sparklog_side(ctx, consume, group, env.options))
                    side_out["sparklog"] = out
                    ctx.log(
                        CASE,
                        f"run {run_no}/{ctx.runs} sparklog consume: {seconds:.2f} s, {records / seconds:,.0f} records/s "
                        f"(commit {out[2] * 1000:.0f} ms)",
                    )
                    return seconds

                def baseline_side() -> float:
                    seconds, rows = timed(lambda: _baseline_side(ctx, table_root))
                    side_out["baseline"] = rows
                    ctx.log(
                        CASE,
                        f"run {run_no}/{ctx.runs} baseline Parquet scan: {seconds:.2f} s, {records / seconds:,.0f} records/s",
                    )
                    return seconds

                s_sec, b_sec = alternate(run_no, sparklog_side, baseline_side)
                s_rows, ranges, c_sec = side_out["sparklog"]
                assert s_rows == side_out["baseline"] == expected, (s_rows, side_out["baseline"], expected)
                assert _range_records(ranges, TOPIC) == {p: (0, end) for p, end in hw.items()}, ranges
                committed = cluster.committed_offsets(group, [TOPIC])
                assert committed == {(TOPIC, p): end for p, end in hw.items()}, committed
            result.runs.append(
                run_record(run_no, records, s_sec, b_sec, commit_seconds=c_sec, live_files=live_files, result=s_rows)
            )
            sparklog_rates.append(records / s_sec)
            baseline_rates.append(records / b_sec)
            commit_ms.append(c_sec * 1000)
    targets = [] if TARGET_RATIO is None else [Target("ratio", ">=", TARGET_RATIO, f"≥ {TARGET_RATIO:.1f}×")]
    result.metrics.append(
        Metric(
            CASE,
            "consume(fresh group) + action + commit",
            "records/s",
            sparklog_rates,
            baseline_rates,
            targets,
            note="baseline: same action over spark.read.parquet(same files)",
        )
    )
    result.metrics.append(
        Metric(
            CASE,
            "GroupBatch.commit()",
            "ms",
            commit_ms,
            None,
            [],
            higher_is_better=False,
            note="informational: offset commit of the batch's ranges (inside the timing above)",
        )
    )
    return result
