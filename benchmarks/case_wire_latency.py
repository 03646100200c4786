"""Case (n): produce latency through the Kafka protocol (confluent-kafka), acks=all.

What it measures, against one sparklog broker agent (a separate process, fresh cluster per
run) and a 6-partition, replication-factor-1 topic:

* **one at a time:** one ``confluent_kafka.Producer`` (``acks=all``, ``linger.ms=0``: a
  single record would otherwise wait 5 ms in the client for company) sends 2,000 keyless
  100-byte records, each after the previous one's delivery report; latency = ``produce()``
  → its delivery report handled by ``poll()`` (20 untimed warm-up sends first);
* **16 concurrent producers at 50,000 records/s in total:** 16 producer instances (one
  thread each, same settings, each warmed up with one record) together offer 50,000
  records/s for 10 s (500,000 records; at least 2 s at reduced scale), open loop: producer
  ``j`` sends its ``i``-th record at ``t0 + (i + j/16) / 3,125 s``, whatever the broker does,
  waiting in ``poll()`` (which runs delivery callbacks as they arrive); latency of each record =
  ``produce()`` → its delivery report. Then ``flush()``. The delivered rate (records ÷ first
  send → last report) is reported: below 50,000/s the broker did not keep up and latencies
  include the queue that built up. Records not delivered within ``message.timeout.ms``
  (60 s here) are counted as failed;
* for information, the same 16 producers with ``linger.ms=5`` (librdkafka's default): the
  client batches 5 ms of records per partition into one request, fewer and larger requests
  for the broker (a latency floor of ~5 ms, so no target applies). It runs before the
  ``linger.ms=0`` part: when the broker cannot keep up, it goes on answering the pipelined
  requests of timed-out records after their producers are gone, which would weigh on
  whatever runs next on the same broker.

The three parts run in that order (one at a time, ``linger.ms=5``, ``linger.ms=0``) on the
same broker; the mock side runs entirely before or after the sparklog side (alternating),
and the broker process is killed before the mock's turn.

The send time travels in the record's first 8 bytes (``time.monotonic_ns()``), so the
delivery callback needs no per-record closure.

Baseline: the same against librdkafka's in-memory mock cluster (one broker, see
:mod:`benchmarks.wire`), same runs.

Targets (issue 11): p50 ≤ 5 ms, p99 ≤ 25 ms — applied to both the one-at-a-time and the
concurrent figures.
"""

from __future__ import annotations

from typing import Any

from benchmarks.harness import BenchContext, CaseResult, Metric, Target, alternate, median
from benchmarks.wire import (
    PARTITIONS,
    MockCluster,
    PacedResult,
    p50_p99,
    paced_producers,
    sequential_sends,
    sparklog_broker,
)

CASE = "n"
TITLE = "produce latency (acks=all): one at a time, and 16 producers at 50k records/s, sparklog vs mock"
SENDS = 2_000
PRODUCERS = 16
RATE = 50_000.0
CONCURRENT_RECORDS = 500_000
TOPIC = "wire-latency"
PRODUCER_CONFIG: dict[str, Any] = {"acks": "all", "linger.ms": 0, "message.timeout.ms": 60_000}
BATCHING_CONFIG: dict[str, Any] = {**PRODUCER_CONFIG, "linger.ms": 5}
TARGET_P50_MS = 5.0
TARGET_P99_MS = 25.0


def _measure(bootstrap: str, sends: int, duration_s: float) -> dict[str, Any]:
    sequential = sequential_sends(bootstrap, TOPIC, sends, PRODUCER_CONFIG)
    # linger.ms=5 before linger.ms=0: an overloaded broker keeps answering the requests of
    # timed-out records after their producers are gone, which would weigh on what follows.
    batching = paced_producers(bootstrap, TOPIC, PRODUCERS, RATE, duration_s, BATCHING_CONFIG)
    concurrent = paced_producers(bootstrap, TOPIC, PRODUCERS, RATE, duration_s, PRODUCER_CONFIG)
    return _summary(sequential, concurrent, batching)


def _summary(sequential: list[float], concurrent: PacedResult, batching: PacedResult) -> dict[str, Any]:
    s50, s99 = p50_p99(sequential)
    c50, c99 = p50_p99(concurrent.latencies_ms)
    l50, l99 = p50_p99(batching.latencies_ms)
    return {
        "sequential_p50_ms": s50,
        "sequential_p99_ms": s99,
        "sequential_max_ms": max(sequential),
        "concurrent_p50_ms": c50,
        "concurrent_p99_ms": c99,
        "concurrent_max_ms": max(concurrent.latencies_ms, default=float("nan")),
        "concurrent_offered": concurrent.offered,
        "concurrent_delivered": len(concurrent.latencies_ms),
        "concurrent_seconds": concurrent.seconds,
        "concurrent_delivered_per_s": concurrent.delivered_per_s,
        "concurrent_failed": concurrent.failed[:5],
        "concurrent_failed_count": len(concurrent.failed),
        "linger5_p50_ms": l50,
        "linger5_p99_ms": l99,
        "linger5_delivered_per_s": batching.delivered_per_s,
        "linger5_failed_count": len(batching.failed),
    }


def run(ctx: BenchContext) -> CaseResult:
    sends = ctx.scaled(SENDS, minimum=200)
    duration_s = ctx.scaled(CONCURRENT_RECORDS, minimum=100_000) / RATE
    result = CaseResult(
        CASE,
        TITLE,
        __doc__ or "",
        params={
            "sequential_sends": sends,
            "concurrent_producers": PRODUCERS,
            "concurrent_rate_per_s": RATE,
            "concurrent_seconds": duration_s,
            "topic_partitions": PARTITIONS,
            "replication_factor": 1,
            "producer_config": PRODUCER_CONFIG,
            "batching_producer_config": BATCHING_CONFIG,
            "baseline": "librdkafka mock cluster (test.mock.num.brokers=1), in-process",
        },
    )
    figures: dict[str, tuple[list[float], list[float]]] = {
        k: ([], []) for k in ("seq50", "seq99", "con50", "con99", "rate", "l50", "l99", "lrate")
    }
    for run_no in range(1, ctx.runs + 1):
        with ctx.fresh_env(CASE, run_no) as env:

            def sparklog_side(env: Any = env) -> dict[str, Any]:
                with sparklog_broker(env, TOPIC) as broker:
                    return _measure(broker.bootstrap_servers, sends, duration_s)

            def mock_side() -> dict[str, Any]:
                with MockCluster(TOPIC) as mock:
                    return _measure(mock.bootstrap_servers, sends, duration_s)

            s, b = alternate(run_no, sparklog_side, mock_side)
        for key, field in (
            ("seq50", "sequential_p50_ms"),
            ("seq99", "sequential_p99_ms"),
            ("con50", "concurrent_p50_ms"),
            ("con99", "concurrent_p99_ms"),
            ("rate", "concurrent_delivered_per_s"),
            ("l50", "linger5_p50_ms"),
            ("l99", "linger5_p99_ms"),
            ("lrate", "linger5_delivered_per_s"),
        ):
            figures[key][0].append(s[field])
            figures[key][1].append(b[field])
        ctx.log(
            CASE,
            f"run {run_no}: one at a time p50/p99 sparklog {s['sequential_p50_ms']:.2f}/{s['sequential_p99_ms']:.2f} ms, "
            f"mock {b['sequential_p50_ms']:.2f}/{b['sequential_p99_ms']:.2f} ms; 16 producers p50/p99 sparklog "
            f"{s['concurrent_p50_ms']:.1f}/{s['concurrent_p99_ms']:.1f} ms at {s['concurrent_delivered_per_s']:,.0f} rec/s "
            f"({s['concurrent_failed_count']} failed), mock {b['concurrent_p50_ms']:.2f}/{b['concurrent_p99_ms']:.2f} ms "
            f"at {b['concurrent_delivered_per_s']:,.0f} rec/s; with linger.ms=5 sparklog "
            f"{s['linger5_p50_ms']:.1f}/{s['linger5_p99_ms']:.1f} ms at {s['linger5_delivered_per_s']:,.0f} rec/s "
            f"({s['linger5_failed_count']} failed), mock {b['linger5_p50_ms']:.2f}/{b['linger5_p99_ms']:.2f} ms",
        )
        result.runs.append(
            {"run": run_no, "order": "sparklog-first" if run_no % 2 else "baseline-first", "sparklog": s, "baseline": b}
        )
    p50 = [Target("value", "<=", TARGET_P50_MS, f"≤ {TARGET_P50_MS:g} ms")]
    p99 = [Target("value", "<=", TARGET_P99_MS, f"≤ {TARGET_P99_MS:g} ms")]
    rows = (
        ("seq50", "one at a time: p50 produce → delivery report", p50),
        ("seq99", "one at a time: p99", p99),
        ("con50", f"{PRODUCERS} producers, {RATE / 1000:.0f}k rec/s offered: p50", p50),
        ("con99", f"{PRODUCERS} producers, {RATE / 1000:.0f}k rec/s offered: p99", p99),
    )
    for key, name, targets in rows:
        result.metrics.append(
            Metric(CASE, name, "ms", figures[key][0], figures[key][1], targets, higher_is_better=False)
        )
    result.metrics.append(
        Metric(
            CASE,
            f"{PRODUCERS} producers: delivered rate (info; {RATE:,.0f} offered)",
            "records/s",
            figures["rate"][0],
            figures["rate"][1],
            [],
            note="below the offered rate = the broker did not keep up",
        )
    )
    for key, name, unit in (
        ("l50", "16 producers, linger.ms=5 (info): p50", "ms"),
        ("l99", "16 producers, linger.ms=5 (info): p99", "ms"),
        ("lrate", "16 producers, linger.ms=5 (info): delivered rate", "records/s"),
    ):
        result.metrics.append(
            Metric(CASE, name, unit, figures[key][0], figures[key][1], [], higher_is_better=unit != "ms", note="info")
        )
    result.notes.append(
        f"sparklog delivered rate median {median(figures['rate'][0]):,.0f} rec/s of {RATE:,.0f} offered"
    )
    return result
