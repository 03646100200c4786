"""Case (o): end-to-end latency through the Kafka protocol: produce → a confluent-kafka consumer has it.

What it measures, against one sparklog broker agent (a separate process, fresh cluster per
run) and a 6-partition, replication-factor-1 topic: a ``confluent_kafka.Consumer`` in its
own thread is assigned all 6 partitions at their end (``assign``: no group join in the
figure; group joins are case (r)) and loops on ``poll(0.05)`` (librdkafka's
default ``fetch.wait.max.ms`` 500: its fetches long-poll the broker, which answers as soon
as a commit made records visible); a
``confluent_kafka.Producer`` (``acks=all``, ``linger.ms=0``) in the main thread sends
2,000 keyless 100-byte records, each after the previous one's delivery report. Per record:
**end to end** = ``produce()`` → ``poll()`` returned it in the consumer thread; for
information, **ack** = ``produce()`` → delivery report. Both sides of a measurement run in
one process and read one clock (``time.monotonic_ns()``; the send time travels in the
record's first 8 bytes). Warm-up sends (at least 20, and until the consumer has received
one) are not counted.

Baseline: the same against librdkafka's in-memory mock cluster (one broker, see
:mod:`benchmarks.wire`), same runs, with one difference: the baseline's consumer sets
``fetch.wait.max.ms=1``. The mock does not wake a waiting fetch when records arrive (it
answers a fetch that found nothing only after ``fetch.wait.max.ms``), so with the default
500 ms its end-to-end p50 came out 320–510 ms — a property of the mock, not of a Kafka
broker, which answers a long poll as soon as data is there. A 1 ms wait makes the mock's
figure what a broker that answers at once would give (ack + at most ~1 ms + one fetch).

Targets (issue 11): end to end p50 ≤ 10 ms, p99 ≤ 50 ms.
"""

from __future__ import annotations

from typing import Any

from benchmarks.harness import BenchContext, CaseResult, Metric, Target, alternate
from benchmarks.wire import PARTITIONS, EndToEnd, MockCluster, end_to_end, p50_p99, sparklog_broker

CASE = "o"
TITLE = "end-to-end latency: produce (acks=all) → confluent-kafka consumer, sparklog vs mock"
SENDS = 2_000
TOPIC = "wire-e2e"
PRODUCER_CONFIG: dict[str, Any] = {"acks": "all", "linger.ms": 0}
SPARKLOG_CONSUMER_CONFIG: dict[str, Any] = {"fetch.wait.max.ms": 500}  # librdkafka's default
MOCK_CONSUMER_CONFIG: dict[str, Any] = {"fetch.wait.max.ms": 1}  # the mock does not wake long polls
TARGET_P50_MS = 10.0
TARGET_P99_MS = 50.0


def _summary(measured: EndToEnd) -> dict[str, float]:
    e50, e99 = p50_p99(measured.e2e_ms)
    a50, a99 = p50_p99(measured.ack_ms)
    return {
        "e2e_p50_ms": e50,
        "e2e_p99_ms": e99,
        "e2e_max_ms": max(measured.e2e_ms),
        "ack_p50_ms": a50,
        "ack_p99_ms": a99,
        "sends": len(measured.e2e_ms),
    }


def run(ctx: BenchContext) -> CaseResult:
    sends = ctx.scaled(SENDS, minimum=200)
    result = CaseResult(
        CASE,
        TITLE,
        __doc__ or "",
        params={
            "sends": sends,
            "topic_partitions": PARTITIONS,
            "replication_factor": 1,
            "producer_config": PRODUCER_CONFIG,
            "sparklog_consumer_config": SPARKLOG_CONSUMER_CONFIG,
            "baseline_consumer_config": MOCK_CONSUMER_CONFIG,
            "baseline": "librdkafka mock cluster (test.mock.num.brokers=1), in-process",
        },
    )
    keys = ("e2e_p50_ms", "e2e_p99_ms", "ack_p50_ms", "ack_p99_ms")
    figures: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in keys}
    for run_no in range(1, ctx.runs + 1):
        with ctx.fresh_env(CASE, run_no) as env:

            def sparklog_side(env: Any = env) -> dict[str, float]:
                with sparklog_broker(env, TOPIC) as broker:
                    return _summary(
                        end_to_end(
                            broker.bootstrap_servers,
                            TOPIC,
                            PARTITIONS,
                            sends,
                            PRODUCER_CONFIG,
                            SPARKLOG_CONSUMER_CONFIG,
                        )
                    )

            def mock_side() -> dict[str, float]:
                with MockCluster(TOPIC) as mock:
                    return _summary(
                        end_to_end(
                            mock.bootstrap_servers, TOPIC, PARTITIONS, sends, PRODUCER_CONFIG, MOCK_CONSUMER_CONFIG
                        )
                    )

            s, b = alternate(run_no, sparklog_side, mock_side)
        for key in keys:
            figures[key][0].append(s[key])
            figures[key][1].append(b[key])
        ctx.log(
            CASE,
            f"run {run_no}: end to end p50/p99 sparklog {s['e2e_p50_ms']:.2f}/{s['e2e_p99_ms']:.2f} ms "
            f"(ack {s['ack_p50_ms']:.2f}/{s['ack_p99_ms']:.2f}), mock {b['e2e_p50_ms']:.2f}/{b['e2e_p99_ms']:.2f} ms",
        )
        result.runs.append(
            {"run": run_no, "order": "sparklog-first" if run_no % 2 else "baseline-first", "sparklog": s, "baseline": b}
        )
    rows: tuple[tuple[str, str, list[Target]], ...] = (
        (
            "e2e_p50_ms",
            "produce → consumer poll: p50",
            [Target("value", "<=", TARGET_P50_MS, f"≤ {TARGET_P50_MS:g} ms")],
        ),
        (
            "e2e_p99_ms",
            "produce → consumer poll: p99",
            [Target("value", "<=", TARGET_P99_MS, f"≤ {TARGET_P99_MS:g} ms")],
        ),
        ("ack_p50_ms", "produce → delivery report: p50 (info)", []),
        ("ack_p99_ms", "produce → delivery report: p99 (info)", []),
    )
    for key, name, targets in rows:
        result.metrics.append(
            Metric(CASE, name, "ms", figures[key][0], figures[key][1], targets, higher_is_better=False)
        )
    return result
