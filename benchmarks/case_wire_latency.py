"""Case (n): produce latency and capacity through the Kafka protocol (confluent-kafka), acks=all,
``linger.ms=0``: sparklog's broker, Apache Kafka, the mock.

What it measures, against each system with a 6-partition, replication-factor-1 topic:

* **one at a time:** one ``confluent_kafka.Producer`` (``acks=all``, ``linger.ms=0``: a single
  record would otherwise wait 5 ms in the client for company) sends 2,000 keyless 100-byte
  records, each after the previous one's delivery report; latency = ``produce()`` → its delivery
  report handled by ``poll()`` (200 untimed warm-up sends first: Kafka's JIT);
* **capacity curve:** 16 and then 64 producer *processes* (:mod:`benchmarks.fleet`, one
  ``confluent_kafka.Producer`` each, same settings, each warmed up with one record) together
  offer 10k, 25k, 50k, 100k, 200k records/s, in that order, for 10 s per step (at least 2 s at
  reduced scale), open loop: process ``j`` of ``n`` sends its ``i``-th record at
  ``t0 + (i + j/n) × n / rate``, whatever the broker does, waiting in ``poll()`` (which runs
  delivery callbacks as they arrive; a wait under a millisecond, which ``poll()`` cannot express,
  sleeps instead of spinning on ``poll(0)``, so the 16 or 64 clients leave the broker its CPU). Per step: the **delivered rate** (records acknowledged ÷
  first send → last report), **p50/p99** of ``produce()`` → delivery report over the
  acknowledged records, the records that failed (``message.timeout.ms`` = 10 s here: an
  overloaded step ends within seconds instead of a minute), the rate the clients actually sent
  at (on 2 shared cores Python clients cannot offer 200k/s: the latency clock starts at the
  actual ``produce()``, so the clients' own lag is not counted as the broker's) and the CPU of
  the clients and of the broker. Before each step, one record at a time until one is
  acknowledged within 100 ms (at most 60 s): an overloaded broker goes on answering the requests
  pipelined before its clients gave up, which would weigh on the next step.

The curve is drawn (``<report>-n-capacity.png`` beside the JSON report): delivered vs offered
and p99 vs offered, log scales, one line per system and producer count. "Delivered never falls
as offered rises" is checked per system and producer count as the worst step-to-step ratio of
delivered rates (≥ 0.9: a saturated broker's plateau wobbles by a few percent from step to step).

The three systems (:mod:`benchmarks.wire`) in the same run, the order rotated by run; each
runs only while it is measured. Targets: one at a time p50 ≤ 5 ms, p99 ≤ 25 ms (issue 11); at
50k offered by 16 producers, delivered ≥ 49k records/s, p50 ≤ 5 ms, p99 ≤ 25 ms (issue 18).
"""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING, Any

from benchmarks.fleet import Fleet, PacedJob, latencies_of
from benchmarks.harness import BenchContext, CaseResult, Metric, Target, median
from benchmarks.wire import (
    PARTITIONS,
    SYSTEMS,
    CpuMeter,
    Endpoint,
    Figures,
    compare,
    fmt_latency,
    latency_targets,
    p50_p99,
    sequential_sends,
    settle,
    systems_note,
    wire_metric,
)

if TYPE_CHECKING:
    from pathlib import Path

CASE = "n"
TITLE = "produce latency (acks=all, linger.ms=0): one at a time, and a capacity curve of 16/64 producer processes"
SENDS = 2_000
PRODUCERS = (16, 64)
RATES = (10_000, 25_000, 50_000, 100_000, 200_000)
STEP_SECONDS = 10.0
MIN_STEP_SECONDS = 2.0
TOPIC = "wire-latency"
PRODUCER_CONFIG: dict[str, Any] = {"acks": "all", "linger.ms": 0, "message.timeout.ms": 60_000}
CURVE_TIMEOUT_MS = 10_000
CURVE_CONFIG: dict[str, Any] = {**PRODUCER_CONFIG, "message.timeout.ms": CURVE_TIMEOUT_MS}
TARGET_P50_MS = 5.0
TARGET_P99_MS = 25.0
TARGET_POINT = (16, 50_000)  # the step the targets apply to
TARGET_DELIVERED = 49_000.0
MONOTONE_TOLERANCE = 0.9


def step_key(producers: int, rate: int) -> str:
    return f"{producers}p_{rate // 1000}k"


def paced_step(fleet: Fleet, endpoint: Endpoint, producers: int, rate: int, seconds: float) -> dict[str, Any]:
    """``producers`` processes together offering ``rate`` records/s for ``seconds``."""
    interval_ns = producers / rate * 1e9
    count = max(1, round(rate / producers * seconds))
    jobs = [
        PacedJob(
            endpoint.bootstrap_servers,
            endpoint.topic,
            CURVE_CONFIG,
            interval_ns,
            j * interval_ns / producers,
            count,
            seed=100 + j,
            flush_s=CURVE_TIMEOUT_MS / 1000 + 5,
        )
        for j in range(producers)
    ]
    with CpuMeter(endpoint.pid) as broker_cpu:
        start_ns, results = fleet.run(jobs)
    latencies = latencies_of(results)
    last_report = max(r["last_report_ns"] for r in results)
    wall = max(seconds, (last_report - start_ns) / 1e9)
    sent_s = max((r["last_send_ns"] for r in results), default=start_ns) - start_ns
    p50, p99 = p50_p99(latencies)
    return {
        "offered_per_s": rate,
        "sent_per_s": count * producers / max(sent_s / 1e9, seconds),
        "delivered_per_s": len(latencies) / wall,
        "p50_ms": p50,
        "p99_ms": p99,
        "max_ms": max(latencies, default=math.nan),
        "delivered": len(latencies),
        "failed": sum(r["failed"] for r in results),
        "errors": [e for r in results for e in r["errors"]][:3],
        "client_cpu_cores": sum(r["cpu_s"] for r in results) / wall,
        "broker_cpu_cores": broker_cpu.seconds / wall,
    }


def measure(fleet: Fleet, sends: int, seconds: float, endpoint: Endpoint) -> Figures:
    bootstrap, topic = endpoint.bootstrap_servers, endpoint.topic
    sequential = sequential_sends(bootstrap, topic, sends, PRODUCER_CONFIG)
    s50, s99 = p50_p99(sequential)
    curve: dict[str, dict[str, Any]] = {}
    for producers in PRODUCERS:
        for rate in RATES:
            settled = settle(bootstrap, topic, PRODUCER_CONFIG)
            step = paced_step(fleet, endpoint, producers, rate, seconds)
            curve[step_key(producers, rate)] = {**step, "settle_s": settled}
    figures: Figures = {"seq_p50_ms": s50, "seq_p99_ms": s99, "seq_max_ms": max(sequential), "curve": curve}
    for key, step in curve.items():
        figures.update({f"{key}_{field}": step[field] for field in ("delivered_per_s", "p50_ms", "p99_ms")})
    for producers in PRODUCERS:
        delivered = [curve[step_key(producers, rate)]["delivered_per_s"] for rate in RATES]
        figures[f"monotone_{producers}p"] = min(min(b / a, 1.0) if a else 1.0 for a, b in itertools.pairwise(delivered))
    return figures


def show(f: Figures) -> str:
    key = step_key(*TARGET_POINT)
    return (
        f"one at a time {fmt_latency(f, 'seq')}; 16p@50k {f[f'{key}_delivered_per_s']:,.0f} rec/s "
        f"p50/p99 {f[f'{key}_p50_ms']:.1f}/{f[f'{key}_p99_ms']:.1f} ms; delivered by step (16p) "
        + "/".join(f"{f[f'{step_key(16, r)}_delivered_per_s'] / 1000:.1f}k" for r in RATES)
    )


def run(ctx: BenchContext) -> CaseResult:
    sends = ctx.scaled(SENDS, minimum=200)
    seconds = max(MIN_STEP_SECONDS, STEP_SECONDS * ctx.scale)
    result = CaseResult(
        CASE,
        TITLE,
        __doc__ or "",
        params={
            "sequential_sends": sends,
            "curve_producer_processes": list(PRODUCERS),
            "curve_offered_per_s": list(RATES),
            "curve_step_seconds": seconds,
            "topic_partitions": PARTITIONS,
            "replication_factor": 1,
            "producer_config": PRODUCER_CONFIG,
            "curve_producer_config": CURVE_CONFIG,
            "systems": systems_note(),
        },
    )
    with Fleet(max(PRODUCERS)) as fleet:

        def measure_system(endpoint: Endpoint, _run_no: int) -> Figures:
            return measure(fleet, sends, seconds, endpoint)

        result.runs = compare(ctx, CASE, measure_system, topic=TOPIC, show=show)
    result.metrics.extend(metrics(result.runs))
    png = draw_curve(result.runs, ctx.artifact("n-capacity.png"))
    result.params["capacity_png"] = png.name
    result.notes.append(f"capacity curve: {png}")
    return result


def metrics(rows: list[dict[str, Any]]) -> list[Metric]:
    p50, p99 = latency_targets(TARGET_P50_MS, TARGET_P99_MS)
    key = step_key(*TARGET_POINT)
    delivered = [Target("value", ">=", TARGET_DELIVERED, f"≥ {TARGET_DELIVERED / 1000:g}k rec/s")]
    out = [
        wire_metric(CASE, rows, "seq_p50_ms", "one at a time: p50 produce → delivery report", "ms", p50, False),
        wire_metric(CASE, rows, "seq_p99_ms", "one at a time: p99", "ms", p99, False),
        wire_metric(
            CASE, rows, f"{key}_delivered_per_s", "16 producers, 50k rec/s offered: delivered", "records/s", delivered
        ),
        wire_metric(CASE, rows, f"{key}_p50_ms", "16 producers, 50k rec/s offered: p50", "ms", p50, False),
        wire_metric(CASE, rows, f"{key}_p99_ms", "16 producers, 50k rec/s offered: p99", "ms", p99, False),
    ]
    for producers in PRODUCERS:
        out.append(
            wire_metric(
                CASE,
                rows,
                f"monotone_{producers}p",
                f"{producers} producers: delivered never falls as offered rises (worst step ratio)",
                "×",
                [Target("value", ">=", MONOTONE_TOLERANCE, f"≥ {MONOTONE_TOLERANCE:g}")],
            )
        )
    for producers in PRODUCERS:
        for rate in RATES:
            if (producers, rate) == TARGET_POINT:
                continue
            k = step_key(producers, rate)
            name = f"{producers} producers, {rate // 1000}k offered (info)"
            out.append(wire_metric(CASE, rows, f"{k}_delivered_per_s", f"{name}: delivered", "records/s"))
            out.append(wire_metric(CASE, rows, f"{k}_p99_ms", f"{name}: p99", "ms", higher_is_better=False))
    return out


def draw_curve(rows: list[dict[str, Any]], path: Path) -> Path:
    """Delivered vs offered and p99 vs offered (medians over runs), log scales, one line per
    system and producer count."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 5.6))
    colours = {"sparklog": "tab:red", "kafka": "tab:blue", "mock": "tab:gray"}
    styles = {PRODUCERS[0]: "-", PRODUCERS[1]: "--"}
    for system in SYSTEMS:
        for producers in PRODUCERS:
            points = []
            for rate in RATES:
                k = step_key(producers, rate)
                delivered = median([row[system][f"{k}_delivered_per_s"] for row in rows if system in row])
                p99 = median([row[system][f"{k}_p99_ms"] for row in rows if system in row])
                points.append((rate, delivered, p99))
            label = f"{system}, {producers} producers"
            style = dict(color=colours[system], linestyle=styles[producers], marker="o", label=label)
            left.plot([p[0] for p in points], [p[1] for p in points], **style)
            right.plot([p[0] for p in points], [p[2] for p in points], **style)
    left.plot(RATES, RATES, color="black", linewidth=0.8, linestyle=":", label="delivered = offered")
    left.set(xscale="log", yscale="log", xlabel="offered (records/s)", ylabel="delivered (records/s)")
    left.set_title("delivered vs offered (acks=all, linger.ms=0)")
    right.axhline(TARGET_P99_MS, color="black", linewidth=0.8, linestyle=":", label=f"p99 target {TARGET_P99_MS:g} ms")
    right.set(xscale="log", yscale="log", xlabel="offered (records/s)", ylabel="p99 produce → ack (ms)")
    right.set_title("p99 latency vs offered")
    for axis in (left, right):
        axis.grid(True, which="both", alpha=0.3)
    legend: dict[str, Any] = {}
    for axis in (left, right):
        for handle, label in zip(*axis.get_legend_handles_labels(), strict=True):
            legend.setdefault(label, handle)
    fig.legend(list(legend.values()), list(legend), fontsize=8, loc="lower center", ncol=4, frameon=False)
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
