"""Case (k): commit latency after 10,000 small commits with maintenance running vs after 100.

What it measures: one light producer (``linger.ms=0``, default ``acks``) sends 10,100
one-record batches to a 1-partition topic, each waited for (``send(...).result()``), so
every send is one Delta commit adding one small file. Each send is timed. Meanwhile a
separate process runs the scheduled maintenance (:func:`sparklog.maintenance.runner.run_maintenance`
on the topic, i.e. retention, optimize with a checkpoint and log cleanup, vacuum) in a loop,
one pass every :data:`MAINTENANCE_PAUSE_S` seconds, as a cron or Airflow schedule would.

Reported: p50 (and p99) of commits 10,001..10,100 ("after 10,000 commits") against p50 of
commits 101..200 ("after 100 commits") of the same run; the ratio is the growth. Target
(issue 4): ≤ 1.5×.

Why the comparison is fair: both windows are the same producer, topic and process; only
the history differs. Without maintenance the 10,000 live files and 10,000 commit files make
every commit list and load them (measured in docs/maintenance.md: 51–64 ms per commit
after 1,000 commits without checkpoints, 30 ms after 5,000 with checkpoints but a 30-day
log retention). The topic sets ``history.retention.ms`` to :data:`HISTORY_RETENTION_MS`
(default 10 minutes): the log keeps commit files that long, and every snapshot refresh
lists them, so at ~100 commits/s a topic needs a short history to keep commits flat.
Maintenance commits (optimize) race the producer's commits; a producer commit that loses
retries, and that time is in its latency.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from pathlib import Path
from typing import Any

from benchmarks.harness import BenchContext, CaseResult, Metric, Target, percentile

CASE = "k"
TITLE = "commit latency after 10,000 small commits with maintenance vs after 100"
COMMITS = 10_000
WINDOW = 100
TOPIC = "bench"
HISTORY_RETENTION_MS = 5_000
MAINTENANCE_PAUSE_S = 1.0
TARGET_GROWTH = 1.5


def maintenance_loop(options: dict[str, str], topic: str, stop_path: str, report_path: str) -> None:
    """Run the maintenance on ``topic`` until ``stop_path`` exists (child process)."""
    import sparklog
    from sparklog.maintenance.runner import run_maintenance

    passes = merged = 0
    with sparklog.connect(options) as cluster:
        while not os.path.exists(stop_path):
            report = run_maintenance(cluster.replicas, None, [topic])
            passes += 1
            merged += sum(r.files_merged for r in report.optimize)
            time.sleep(MAINTENANCE_PAUSE_S)
    Path(report_path).write_text(f"{passes} {merged}", encoding="utf-8")


def _one_run(ctx: BenchContext, options: dict[str, str], scratch: Path, n: int, run_no: int) -> dict[str, Any]:
    import sparklog

    stop, report = scratch / "stop", scratch / "maintenance"
    with sparklog.connect(options) as cluster:
        cluster.create_topic(TOPIC, partitions=1, config={"history.retention.ms": str(HISTORY_RETENTION_MS)})
        worker = multiprocessing.get_context("spawn").Process(
            target=maintenance_loop, args=(options, TOPIC, str(stop), str(report)), daemon=True
        )
        worker.start()
        ms: list[float] = []
        try:
            with cluster.producer(linger_ms=0) as producer:
                for i in range(n + WINDOW):
                    started = time.perf_counter()
                    producer.send(TOPIC, value=b"v%09d" % i).result(timeout=120)
                    ms.append((time.perf_counter() - started) * 1000)
                    if (i + 1) % 1000 == 0:
                        ctx.log(
                            CASE, f"run {run_no}: {i + 1:,} commits, last 1,000 p50 {percentile(ms[-1000:], 50):.1f} ms"
                        )
        finally:
            stop.touch()
            worker.join(timeout=300)
        passes, merged = (int(x) for x in report.read_text(encoding="utf-8").split())
        table = cluster.replicas.leader_table(TOPIC)
        snapshot = table.snapshot()
        assert cluster.partition_offsets(TOPIC)[0] == (0, n + WINDOW), cluster.partition_offsets(TOPIC)
        log_files = len(os.listdir(os.path.join(table.root, "_delta_log")))
        early, late = ms[WINDOW : 2 * WINDOW], ms[n : n + WINDOW]
        return {
            "run": run_no,
            "early_p50_ms": percentile(early, 50),
            "early_p99_ms": percentile(early, 99),
            "late_p50_ms": percentile(late, 50),
            "late_p99_ms": percentile(late, 99),
            "all_p50_ms": percentile(ms, 50),
            "total_s": sum(ms) / 1000,
            "maintenance_passes": passes,
            "files_merged": merged,
            "live_files_end": len(table.files(snapshot)),
            "log_files_end": log_files,
            "delta_version_end": snapshot.version(),
            "load_avg": list(os.getloadavg()),
        }


def run(ctx: BenchContext) -> CaseResult:
    n = ctx.scaled(COMMITS, minimum=2 * WINDOW)
    result = CaseResult(
        CASE,
        TITLE,
        __doc__ or "",
        params={
            "commits": n + WINDOW,
            "window": WINDOW,
            "history.retention.ms": HISTORY_RETENTION_MS,
            "maintenance_pause_s": MAINTENANCE_PAUSE_S,
            "producer": {"linger.ms": 0},
        },
    )
    for run_no in range(1, ctx.runs + 1):
        with ctx.fresh_env(CASE, run_no) as env:
            ctx.log(CASE, f"run {run_no}/{ctx.runs}: {n + WINDOW:,} one-record commits with maintenance running …")
            record = _one_run(ctx, env.options, env.scratch, n, run_no)
        ctx.log(
            CASE,
            f"run {run_no}/{ctx.runs}: after {WINDOW} p50 {record['early_p50_ms']:.1f} ms, after {n:,} p50 "
            f"{record['late_p50_ms']:.1f} ms; {record['maintenance_passes']} maintenance passes, "
            f"{record['live_files_end']} live files, {record['log_files_end']} log files at the end",
        )
        result.runs.append(record)

    def col(key: str) -> list[float]:
        return [float(r[key]) for r in result.runs]

    window = f"commits {n + 1}..{n + WINDOW} vs {WINDOW + 1}..{2 * WINDOW} of the same run"
    result.metrics.append(
        Metric(
            CASE,
            f"commit p50 after {n:,} commits (maintenance running) vs after {WINDOW}",
            "ms",
            col("late_p50_ms"),
            col("early_p50_ms"),
            [Target("ratio", "<=", TARGET_GROWTH, f"≤ {TARGET_GROWTH}×")],
            higher_is_better=False,
            note=window,
        )
    )
    result.metrics.append(
        Metric(
            CASE,
            f"commit p99 after {n:,} commits vs after {WINDOW}",
            "ms",
            col("late_p99_ms"),
            col("early_p99_ms"),
            [],
            higher_is_better=False,
            note="informational",
        )
    )
    return result
