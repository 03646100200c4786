"""Case (q): the broker's resident memory under load and with 1,000 idle connections: sparklog's
broker agent, and Apache Kafka's JVM for reference.

What it measures: ``VmRSS`` of the broker process (``/proc/<pid>/status``: the ``sparklog
broker start`` process; Kafka's ``java`` process), sampled every 50 ms while

* case (m)'s timed produce runs (its 1, 2 and 4 producer processes, 2,000,000 records of 100 B
  each at full scale), and
* case (p)'s timed consume runs (5,000,000 records from offset 0), and, for information,
  (p)'s untimed fill (one producer as in (m), 5,000,000 records).

Reported: the maximum over all samples of all runs. When (m) and (p) ran earlier in the same
benchmark their samples are used (run ``--only m,p,q`` or all cases: nothing is measured
twice); otherwise this case runs their sparklog and Kafka sides itself, ``--runs`` times each
at the same ``--scale``, without the mock.

**Idle connections:** against a fresh broker of each system, 1,000 TCP connections are opened
one after the other, each sends an ApiVersions (v0) request and reads the answer, and all stay
open and idle; the broker's RSS 1 s after the last answer minus its RSS before the first
connection is the figure (median over runs). Target: < 50 MiB extra (issue 18).

The mock lives inside the client's process and has no broker process: no column for it. Kafka
runs with its start script's heap (``-Xms1G -Xmx1G``): its RSS is the JVM's heap as far as it
was touched plus the JVM itself, a reference rather than a like-for-like figure.
Target for sparklog under load (issue 11): < 1 GiB; RSS grows with the data a run moves, so only
a full-scale run (``--scale 1``) checks the target as the issue states it.
"""

from __future__ import annotations

import socket
import struct
import time
from typing import Any

from benchmarks import case_wire_consume, case_wire_produce
from benchmarks.fleet import Fleet
from benchmarks.harness import BenchContext, CaseResult, Metric, Target, median
from benchmarks.wire import (
    BROKERS,
    Endpoint,
    Figures,
    compare,
    kafka_request,
    mib,
    read_frame,
    record_pool,
    rss_bytes,
    wire_metric,
)

CASE = "q"
TITLE = "broker resident memory (VmRSS) during (m) produce and (p) consume, and with 1,000 idle connections"
TARGET_MIB = 1024.0
CONNECTIONS = 1_000
TARGET_IDLE_MIB = 50.0
TOPIC = "wire-memory"
API_VERSIONS = 18


def idle_connections(endpoint: Endpoint, _run_no: int) -> Figures:
    """Open :data:`CONNECTIONS` connections that complete an ApiVersions request; -> RSS growth."""
    assert endpoint.pid is not None
    host, port = endpoint.bootstrap_servers.rsplit(":", 1)
    time.sleep(1.0)  # the broker settles after start-up and topic creation
    before = rss_bytes(endpoint.pid) or 0
    sockets: list[socket.socket] = []
    try:
        for i in range(CONNECTIONS):
            sock = socket.create_connection((host, int(port)), timeout=30)
            sockets.append(sock)
            sock.sendall(kafka_request(API_VERSIONS, 0, i))
            with sock.makefile("rb") as stream:
                correlation_id, error_code = struct.unpack_from(">ih", read_frame(stream))
            assert (correlation_id, error_code) == (i, 0), (correlation_id, error_code, i)
        time.sleep(1.0)
        after = rss_bytes(endpoint.pid) or 0
    finally:
        for sock in sockets:
            sock.close()
    return {"rss_before_mib": mib(before), "rss_after_mib": mib(after), "extra_mib": mib(after - before)}


def _measure_missing(ctx: BenchContext, rows: list[dict[str, Any]]) -> list[str]:
    """Run (m) and/or (p) against sparklog and Kafka when this benchmark has not; -> notes."""
    notes = []
    have = {row["source"] for row in rows}
    pool = record_pool()
    if case_wire_produce.CASE not in have:
        records, warmup = case_wire_produce.sizes(ctx)
        with Fleet(max(case_wire_produce.PROCESSES)) as fleet:
            compare(
                ctx,
                f"{CASE}-m",
                lambda endpoint, run_no: case_wire_produce.measure(ctx, fleet, records, warmup, endpoint, run_no),
                topic=case_wire_produce.TOPIC,
                systems=BROKERS,
                show=case_wire_produce.show,
            )
        notes.append(f"(m) was not run in this benchmark: its sparklog and Kafka sides ran here ({records:,} records)")
    if case_wire_consume.CASE not in have:
        records = ctx.scaled(case_wire_consume.RECORDS, minimum=10_000)
        compare(
            ctx,
            f"{CASE}-p",
            lambda endpoint, run_no: case_wire_consume.measure(ctx, pool, records, endpoint, run_no),
            topic=case_wire_consume.TOPIC,
            systems=BROKERS,
            show=case_wire_consume.show,
        )
        notes.append(f"(p) was not run in this benchmark: its sparklog and Kafka sides ran here ({records:,} records)")
    return notes


def _load_metric(rows: list[dict[str, Any]], source: str, name: str, targets: list[Target]) -> Metric | None:
    """The maximum RSS of every run of ``source`` per system (sparklog, and Kafka as the baseline)."""
    maxima = {s: [mib(r["max_bytes"]) for r in rows if r["source"] == source and r.get("system") == s] for s in BROKERS}
    if not maxima["sparklog"]:
        return None
    detail = "; ".join(f"{s}: {', '.join(f'{m:.0f}' for m in v)} MiB" for s, v in maxima.items() if v)
    return Metric(
        CASE,
        name,
        "MiB",
        [max(maxima["sparklog"])],
        [max(maxima["kafka"])] if maxima["kafka"] else None,
        targets,
        higher_is_better=False,
        note=f"max over runs (per run {detail})",
        baseline_label="kafka",
    )


def run(ctx: BenchContext) -> CaseResult:
    rows: list[dict[str, Any]] = ctx.cache.setdefault("broker_rss", [])
    result = CaseResult(
        CASE,
        TITLE,
        __doc__ or "",
        params={
            "sample_interval_s": 0.05,
            "target_mib": TARGET_MIB,
            "idle_connections": CONNECTIONS,
            "target_idle_extra_mib": TARGET_IDLE_MIB,
        },
    )
    result.notes.extend(_measure_missing(ctx, rows))
    load = [dict(row) for row in rows]
    gib = [Target("value", "<=", TARGET_MIB, "≤ 1 GiB")]
    for source, name, targets in (
        (case_wire_produce.CASE, "max RSS during (m) produce", gib),
        (case_wire_consume.CASE, "max RSS during (p) consume", gib),
        (f"{case_wire_consume.CASE}-fill", "max RSS during (p)'s fill (info)", []),
    ):
        metric = _load_metric(load, source, name, targets)
        if metric is not None:
            result.metrics.append(metric)
    idle = compare(
        ctx,
        CASE,
        idle_connections,
        topic=TOPIC,
        systems=BROKERS,
        show=lambda f: f"{f['rss_before_mib']:.0f} → {f['rss_after_mib']:.0f} MiB",
    )
    result.runs = [{"load_samples": load}, *idle]
    result.metrics.append(
        wire_metric(
            CASE,
            idle,
            "extra_mib",
            f"{CONNECTIONS:,} idle connections (ApiVersions answered): extra RSS",
            "MiB",
            [Target("value", "<=", TARGET_IDLE_MIB, f"< {TARGET_IDLE_MIB:g} MiB")],
            higher_is_better=False,
        )
    )
    result.notes.append(
        "idle connections, RSS before (median): "
        + ", ".join(f"{s} {median([r[s]['rss_before_mib'] for r in idle]):.0f} MiB" for s in BROKERS)
    )
    return result
