"""Case (i): time retention on a 10,000,000-record topic — metadata-only vs a Delta DELETE.

What it measures: wall time of ``cluster.run_retention([topic])`` on a topic of 10,000,000
records (value = 100 random bytes, 8 partitions, 80 segment files of 125,000 records) whose
older half is past ``retention.ms``: planning from the Delta snapshot's file stats, one
metadata-only commit per partition (remove actions + the new log-start), no data read or
written. Checked: the log-start of every partition moved to the first kept offset and the
kept records are all readable.

Why the baseline is fair: it removes the same records from an identical copy of the table
the way a Delta user would without sparklog, with delta-rs ``DeltaTable.delete(predicate)``
on the timestamp (which scans the files the predicate may match and rewrites what
straddles it). Same data, same outcome (the old half gone); the difference is planning on
file stats and committing removes instead of scanning.

Target (issue 4): ≤ 2 s for sparklog.
"""

from __future__ import annotations

import shutil
import time
from datetime import UTC

import pyarrow as pa

from benchmarks.case_light_producer import random_values
from benchmarks.harness import BenchContext, CaseResult, Metric, Target, alternate, fill_topic, run_record, timed

CASE = "i"
TITLE = "time retention, 10M records (metadata-only) vs Delta DELETE"
RECORDS = 10_000_000
BATCH_ROWS = 125_000
TOPIC_PARTITIONS = 8
TOPIC = "bench"
TARGET_S = 2.0
HOUR_MS = 3_600_000


def _aged(batch: pa.Table, timestamp_ms: int) -> pa.Table:
    """``batch`` with every record's create time set to ``timestamp_ms``."""
    stamps = pa.repeat(pa.scalar(timestamp_ms * 1000, pa.timestamp("us", tz="UTC")), batch.num_rows)
    return batch.append_column("timestamp", stamps)


def _baseline_delete(root: str, cutoff_ms: int) -> None:
    from datetime import datetime

    from deltalake import DeltaTable

    cutoff = datetime.fromtimestamp(cutoff_ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    DeltaTable(root).delete(f"timestamp < '{cutoff}'")


def run(ctx: BenchContext) -> CaseResult:
    import sparklog

    records = ctx.scaled(RECORDS, minimum=80_000)
    batch_rows = min(BATCH_ROWS, records // (TOPIC_PARTITIONS * 2))
    n_batches = max(TOPIC_PARTITIONS * 2, records // batch_rows)
    records = n_batches * batch_rows
    result = CaseResult(
        CASE,
        TITLE,
        __doc__ or "",
        params={"records": records, "files": n_batches, "topic_partitions": TOPIC_PARTITIONS, "retention.ms": HOUR_MS},
    )
    now_ms = int(time.time() * 1000)
    old, new = now_ms - 3 * HOUR_MS, now_ms
    batches = [
        _aged(random_values(batch_rows, seed), old if seed < n_batches // 2 else new) for seed in range(n_batches)
    ]
    seconds_s: list[float] = []
    seconds_b: list[float] = []
    for run_no in range(1, ctx.runs + 1):
        with ctx.fresh_env(CASE, run_no) as env:
            with sparklog.connect(env.options) as cluster:
                ctx.log(CASE, f"run {run_no}/{ctx.runs} producing {records:,} records (untimed) …")
                filled = fill_topic(cluster, TOPIC, TOPIC_PARTITIONS, batches)
                copy = filled.table_root + "-baseline"
                shutil.copytree(filled.table_root, copy)
                cluster.alter_topic_config(TOPIC, set={"retention.ms": str(HOUR_MS)})

                def sparklog_side() -> float:
                    seconds, results = timed(lambda: cluster.run_retention([TOPIC], now_ms=now_ms))
                    removed = sum(r.removed_records for r in results)
                    assert removed == records // 2, (removed, records)
                    ctx.log(
                        CASE,
                        f"run {run_no}/{ctx.runs} sparklog retention: {seconds:.2f} s, {removed:,} records removed",
                    )
                    return seconds

                def baseline_side() -> float:
                    seconds, _ = timed(lambda: _baseline_delete(copy, now_ms - HOUR_MS))
                    ctx.log(CASE, f"run {run_no}/{ctx.runs} baseline Delta DELETE: {seconds:.2f} s")
                    return seconds

                s_sec, b_sec = alternate(run_no, sparklog_side, baseline_side)
                offsets = cluster.partition_offsets(TOPIC)
                assert sum(hw - start for start, hw in offsets.values()) == records // 2, offsets
            result.runs.append(run_record(run_no, records, s_sec, b_sec))
            seconds_s.append(s_sec)
            seconds_b.append(b_sec)
    result.metrics.append(
        Metric(
            CASE,
            "time retention wall time",
            "s",
            seconds_s,
            seconds_b,
            [Target("value", "<=", TARGET_S, f"≤ {TARGET_S:.0f} s")],
            higher_is_better=False,
            note="baseline: delta-rs DeltaTable.delete(timestamp < cutoff) on a copy of the table",
        )
    )
    return result
