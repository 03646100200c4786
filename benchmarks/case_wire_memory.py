"""Case (q): the broker agent's resident memory under load (issue 11: below 1 GiB).

What it measures: ``VmRSS`` of the broker agent process (``/proc/<pid>/status``, the
``sparklog broker start`` process itself), sampled every 50 ms while

* case (m)'s timed produce runs (2,000,000 records of 100 B at full scale), and
* case (p)'s timed consume runs (5,000,000 records from offset 0), and, for information,
  (p)'s untimed fill (the same producer as (m), 5,000,000 records).

Reported: the maximum over all samples of all runs (per-run maxima, the RSS at the start of
each sampled phase and at its end are in the JSON). When (m) and (p) ran earlier in the
same benchmark their samples are used (run ``--only m,p,q`` or all cases: nothing is
measured twice); otherwise this case runs their sparklog sides itself, ``--runs`` times
each at the same ``--scale``, without the mock baseline.

No baseline: the mock cluster lives inside the client's process, so it has no broker
process to compare with; the table shows the target comparison instead of a ratio.
"""

from __future__ import annotations

from typing import Any

from benchmarks import case_wire_consume, case_wire_produce
from benchmarks.harness import BenchContext, CaseResult, Metric, Target
from benchmarks.wire import mib, record_pool

CASE = "q"
TITLE = "broker agent resident memory (VmRSS) during (m) produce and (p) consume"
TARGET_MIB = 1024.0


def _measure_missing(ctx: BenchContext, rows: list[dict[str, Any]]) -> list[str]:
    """Run the sparklog sides of (m) and/or (p) for the sources ``rows`` lacks; -> notes."""
    notes = []
    have = {row["source"] for row in rows}
    pool = None
    if case_wire_produce.CASE not in have:
        pool = pool or record_pool()
        records, warmup = case_wire_produce.sizes(ctx)
        for run_no in range(1, ctx.runs + 1):
            with ctx.fresh_env(f"{CASE}-m", run_no) as env:
                seconds, info = case_wire_produce.sparklog_side(ctx, env, run_no, pool, records, warmup)
            ctx.log(
                CASE,
                f"(m) run {run_no}: {records / seconds:,.0f} rec/s, "
                f"max RSS {mib(info['broker_rss']['max_bytes']):.0f} MiB",
            )
        notes.append(f"(m) was not run in this benchmark: its sparklog side ran here ({records:,} records)")
    if case_wire_consume.CASE not in have:
        pool = pool or record_pool()
        records = ctx.scaled(case_wire_consume.RECORDS, minimum=10_000)
        for run_no in range(1, ctx.runs + 1):
            with ctx.fresh_env(f"{CASE}-p", run_no) as env:
                seconds, _fill, row = case_wire_consume.sparklog_side(ctx, env, run_no, pool, records)
            ctx.log(CASE, f"(p) run {run_no}: {records / seconds:,.0f} rec/s, max RSS {mib(row['max_bytes']):.0f} MiB")
        notes.append(f"(p) was not run in this benchmark: its sparklog side ran here ({records:,} records)")
    return notes


def run(ctx: BenchContext) -> CaseResult:
    rows: list[dict[str, Any]] = ctx.cache.setdefault("broker_rss", [])
    result = CaseResult(CASE, TITLE, __doc__ or "", params={"sample_interval_s": 0.05, "target_mib": TARGET_MIB})
    result.notes.extend(_measure_missing(ctx, rows))
    result.runs = [dict(row) for row in rows]
    phases: tuple[tuple[str, str, list[Target]], ...] = (
        (case_wire_produce.CASE, "max RSS during (m) produce", [Target("value", "<=", TARGET_MIB, "≤ 1 GiB")]),
        (case_wire_consume.CASE, "max RSS during (p) consume", [Target("value", "<=", TARGET_MIB, "≤ 1 GiB")]),
        (f"{case_wire_consume.CASE}-fill", "max RSS during (p)'s fill (info)", []),
    )
    for source, name, targets in phases:
        maxima = [mib(row["max_bytes"]) for row in rows if row["source"] == source]
        if not maxima:
            continue
        starts = [mib(row["start_bytes"]) for row in rows if row["source"] == source and row["start_bytes"]]
        result.metrics.append(
            Metric(
                CASE,
                name,
                "MiB",
                [max(maxima)],
                None,
                targets,
                higher_is_better=False,
                note=f"max over {len(maxima)} run(s) (per run: {', '.join(f'{m:.0f}' for m in maxima)} MiB; "
                f"at the phase's start: {', '.join(f'{m:.0f}' for m in starts)} MiB)",
            )
        )
    return result
