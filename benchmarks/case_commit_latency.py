"""Case (g): offset commit latency — 1,000 sequential commits of one partition's offset.

What it measures: a light consumer in a group (``cluster.consumer(group,
enable_auto_commit=False)``, subscribed to a 1-partition topic, assignment adopted before
timing) calls ``consumer.commit({(topic, 0): offset})`` 1,000 times in a row, the offset
advancing by one each time. Each call is timed (``perf_counter`` around the call). One offset
commit is: the ZooKeeper check of the member's generation (one ``get`` of the group
state), an incremental update of the ``__consumer_offsets`` snapshot, the generation-fence
and offset checks on it, one 1-record Parquet segment (the offset record, so the table is
the offsets log) and one Delta commit carrying the application transactions
(``sparklog.group/<g>``, ``sparklog.offset/<g>/<t>/<p>``, ``sparklog.end.<p>``).
Reported: p50 and p99 over all commits and over the last 10% (the Delta log is then
~1,000 versions and live files longer: commit cost grows with the log).

Why the baseline is fair: it is the bare delta-rs primitive under every offset commit —
one tiny commit: an *empty* ``DeltaTable.create_write_transaction`` carrying one
application transaction (the offset as its version), made through the log layer's
``TopicTable.commit`` on an incrementally updated snapshot, on a fresh Delta table of the
same schema (the topic schema, partitioned by ``partition``), 1,000 times. No data file,
no ZooKeeper, no checks: the floor of "record an offset in a Delta log". The ratio is
sparklog's overhead over that floor.

Informational (no target):

* ``log layer only``: ``sparklog.log.group_offsets.commit_offsets`` on a fresh
  ``__consumer_offsets``-like table — everything sparklog does in Delta per commit (the
  1-record segment, the checks, the three app transactions) but no ZooKeeper. The gap
  between it and the consumer is the coordination (ZooKeeper) and API overhead; the gap
  between it and the baseline is the offset record file and the checks.
* ``standalone``: ``cluster.commit_offsets(group, {(topic, 0): offset})`` by a client
  outside the group (the group must be inactive: one more ZooKeeper read of the group).

Each side runs in its own fresh ``sparklog.home``/chroot (so none inherits another's log
length); the order of the sides rotates between runs.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from benchmarks.harness import BenchContext, CaseResult, Metric, Target, median, percentile

CASE = "g"
TITLE = "offset commit latency (1,000 sequential commits)"
COMMITS = 1_000
TARGET_P50_MS = 10.0
TARGET_P99_MS = 50.0
TOPIC = "bench"
GROUP = "bench-group"
SIDES = ("sparklog", "baseline", "log_layer", "standalone")
LABELS = {
    "sparklog": "consumer.commit (member of a group)",
    "baseline": "empty Delta commit with one app transaction (TopicTable.commit)",
    "log_layer": "group_offsets.commit_offsets (log layer only, no ZooKeeper)",
    "standalone": "cluster.commit_offsets (standalone, inactive group)",
}


def _summary(ms: list[float]) -> dict[str, Any]:
    tail = ms[-max(1, len(ms) // 10) :]
    return {
        "commits": len(ms),
        "p50_ms": percentile(ms, 50),
        "p99_ms": percentile(ms, 99),
        "max_ms": max(ms),
        "last10_p50_ms": percentile(tail, 50),
        "last10_p99_ms": percentile(tail, 99),
        "first10_p50_ms": percentile(ms[: max(1, len(ms) // 10)], 50),
        "total_s": sum(ms) / 1000,
        # (commit number, ms) of the 12 slowest: with delta-rs's checkpoint every 100 versions
        # they show whether p99 is the checkpoint-writing commits.
        "slowest": sorted(((i + 1, round(x, 2)) for i, x in enumerate(ms)), key=lambda t: -t[1])[:12],
    }


def _default_history_retention_ms() -> int:
    """As a topic created with default configs (imported late: the harness freezes the code first)."""
    from sparklog.config import TOPIC_CONFIGS

    return int(TOPIC_CONFIGS["history.retention.ms"].default)


def _time_commits(commit: Callable[[int], object], n: int) -> list[float]:
    times: list[float] = []
    for offset in range(1, n + 1):
        started = time.perf_counter()
        commit(offset)
        times.append((time.perf_counter() - started) * 1000)
    return times


def _sparklog_side(options: dict[str, str], n: int) -> dict[str, Any]:
    import sparklog

    with sparklog.connect(options) as cluster:
        cluster.create_topic(TOPIC, partitions=1)
        consumer = cluster.consumer(GROUP, enable_auto_commit=False, session_timeout_ms=30_000)
        try:
            consumer.subscribe([TOPIC])
            deadline = time.monotonic() + 60
            while not consumer.assignment():
                consumer.poll(100)
                if time.monotonic() > deadline:
                    raise AssertionError("the consumer was never assigned its partition")
            ms = _time_commits(lambda offset: consumer.commit({(TOPIC, 0): offset}), n)
            assert consumer.committed([(TOPIC, 0)]) == {(TOPIC, 0): n}
        finally:
            consumer.close()
        table = cluster.replicas.leader_table("__consumer_offsets")
        snapshot = table.snapshot()
        return {"ms": ms, "delta_version": snapshot.version(), "live_files": len(table.files(snapshot))}


def _standalone_side(options: dict[str, str], n: int) -> dict[str, Any]:
    import sparklog

    with sparklog.connect(options) as cluster:
        cluster.create_topic(TOPIC, partitions=1)
        cluster.commit_offsets(GROUP, {(TOPIC, 0): 0})  # creates __consumer_offsets and the group (untimed)
        ms = _time_commits(lambda offset: cluster.commit_offsets(GROUP, {(TOPIC, 0): offset}), n)
        assert cluster.committed_offsets(GROUP, [TOPIC]) == {(TOPIC, 0): n}
        snapshot = cluster.replicas.leader_table("__consumer_offsets").snapshot()
        return {"ms": ms, "delta_version": snapshot.version()}


def _log_layer_side(scratch: str, n: int) -> dict[str, Any]:
    from sparklog.log import group_offsets
    from sparklog.log.group_offsets import OffsetCommit
    from sparklog.log.table import TopicTable

    table = TopicTable(scratch, "log-layer-offsets")
    table.create("bench-log-layer", _default_history_retention_ms())
    ms = _time_commits(
        lambda offset: group_offsets.commit_offsets(table, 0, GROUP, {(TOPIC, 0): OffsetCommit(offset)}), n
    )
    assert group_offsets.committed_offsets(table, GROUP, [(TOPIC, 0)]) == {(TOPIC, 0): n}
    return {"ms": ms, "delta_version": table.snapshot().version()}


def _baseline_side(scratch: str, n: int) -> dict[str, Any]:
    from sparklog.log.table import TopicTable

    table = TopicTable(scratch, "baseline-offsets")
    table.create("bench-baseline", _default_history_retention_ms())
    app_id = f"bench.offset/{GROUP}/{TOPIC}/0"

    def commit(offset: int) -> None:
        table.commit(table.snapshot(), [], {app_id: offset})

    ms = _time_commits(commit, n)
    snapshot = table.snapshot()
    assert table.app_version(snapshot, app_id) == n
    return {"ms": ms, "delta_version": snapshot.version()}


def run(ctx: BenchContext) -> CaseResult:
    """Run case (g) ``ctx.runs`` times; every side in a fresh environment, order rotating."""
    n = ctx.scaled(COMMITS, minimum=50)
    result = CaseResult(
        CASE,
        TITLE,
        __doc__ or "",
        params={
            "commits": n,
            "topic_partitions": 1,
            "consumer_config": {"enable.auto.commit": False, "session.timeout.ms": 30_000},
            "offsets_topic_partitions": "default (50)",
            "baseline": "TopicTable.commit(snapshot, [], {app_id: offset}) on a fresh table of the topic schema",
            "sides": LABELS,
        },
    )
    with ctx.fresh_env(CASE, "warmup") as env:
        ctx.log(CASE, "warm-up: 20 commits of every side, untimed …")
        _sparklog_side(env.options, 20)
        _baseline_side(str(env.scratch), 20)
    per_side: dict[str, list[dict[str, Any]]] = {side: [] for side in SIDES}
    for run_no in range(1, ctx.runs + 1):
        order = list(SIDES)[(run_no - 1) % len(SIDES) :] + list(SIDES)[: (run_no - 1) % len(SIDES)]
        record: dict[str, Any] = {"run": run_no, "order": order}
        for side in order:
            with ctx.fresh_env(CASE, f"{run_no}-{side}") as env:
                ctx.log(CASE, f"run {run_no}/{ctx.runs} {LABELS[side]} × {n:,} …")
                if side == "sparklog":
                    out = _sparklog_side(env.options, n)
                elif side == "standalone":
                    out = _standalone_side(env.options, n)
                elif side == "log_layer":
                    out = _log_layer_side(str(env.scratch), n)
                else:
                    out = _baseline_side(str(env.scratch), n)
            summary = _summary(out.pop("ms"))
            summary.update(out)
            per_side[side].append(summary)
            record[side] = summary
            ctx.log(
                CASE,
                f"run {run_no}/{ctx.runs} {side}: p50 {summary['p50_ms']:.1f} ms, p99 {summary['p99_ms']:.1f} ms, "
                f"last 10% p50 {summary['last10_p50_ms']:.1f} / p99 {summary['last10_p99_ms']:.1f} ms",
            )
        record["load_avg"] = list(os.getloadavg())
        result.runs.append(record)

    def col(side: str, key: str) -> list[float]:
        return [float(r[key]) for r in per_side[side]]

    p50 = [Target("value", "<=", TARGET_P50_MS, f"≤ {TARGET_P50_MS:.0f} ms")]
    p99 = [Target("value", "<=", TARGET_P99_MS, f"≤ {TARGET_P99_MS:.0f} ms")]
    m = result.metrics
    m.append(
        Metric(
            CASE,
            "commit p50 (consumer.commit)",
            "ms",
            col("sparklog", "p50_ms"),
            col("baseline", "p50_ms"),
            p50,
            higher_is_better=False,
        )
    )
    m.append(
        Metric(
            CASE,
            "commit p99 (consumer.commit)",
            "ms",
            col("sparklog", "p99_ms"),
            col("baseline", "p99_ms"),
            p99,
            higher_is_better=False,
        )
    )
    m.append(
        Metric(
            CASE,
            "commit p50, last 10%",
            "ms",
            col("sparklog", "last10_p50_ms"),
            col("baseline", "last10_p50_ms"),
            p50,
            higher_is_better=False,
            note=f"commits {n - n // 10 + 1}..{n}",
        )
    )
    m.append(
        Metric(
            CASE,
            "commit p99, last 10%",
            "ms",
            col("sparklog", "last10_p99_ms"),
            col("baseline", "last10_p99_ms"),
            p99,
            higher_is_better=False,
            note=f"commits {n - n // 10 + 1}..{n}",
        )
    )
    m.append(
        Metric(
            CASE,
            "log layer only p50 (no ZooKeeper)",
            "ms",
            col("log_layer", "p50_ms"),
            col("baseline", "p50_ms"),
            [],
            higher_is_better=False,
            note="informational: group_offsets.commit_offsets on a fresh table",
        )
    )
    m.append(
        Metric(
            CASE,
            "log layer only p99 (no ZooKeeper)",
            "ms",
            col("log_layer", "p99_ms"),
            col("baseline", "p99_ms"),
            [],
            higher_is_better=False,
            note="informational",
        )
    )
    m.append(
        Metric(
            CASE,
            "standalone commit_offsets p50",
            "ms",
            col("standalone", "p50_ms"),
            col("baseline", "p50_ms"),
            [],
            higher_is_better=False,
            note="informational: cluster.commit_offsets, group inactive",
        )
    )
    m.append(
        Metric(
            CASE,
            "standalone commit_offsets p99",
            "ms",
            col("standalone", "p99_ms"),
            col("baseline", "p99_ms"),
            [],
            higher_is_better=False,
            note="informational",
        )
    )
    result.notes.append(
        "median of per-run p50/p99: " + ", ".join(f"{side} p50 {median(col(side, 'p50_ms')):.1f} ms" for side in SIDES)
    )
    return result
