"""Case (o): end-to-end latency through the Kafka protocol: produce → a confluent-kafka consumer
has it; sparklog's broker, Apache Kafka, the mock.

What it measures, against each system (:mod:`benchmarks.wire`: sparklog's broker agent, a
separate process; Apache Kafka, one KRaft node, the baseline; librdkafka's mock cluster; the
same run, the order rotated by run) and a 6-partition, replication-factor-1 topic: a ``confluent_kafka.Consumer`` in its
own thread is assigned all 6 partitions at their end (``assign``: no group join in the
figure; group joins are case (r)) and loops on ``poll(0.05)`` (librdkafka's
default ``fetch.wait.max.ms`` 500: its fetches long-poll the broker, which answers as soon
as a commit made records visible); a
``confluent_kafka.Producer`` (``acks=all``, ``linger.ms=0``) in the main thread sends
2,000 keyless 100-byte records, each after the previous one's delivery report. Per record:
**end to end** = ``produce()`` → ``poll()`` returned it in the consumer thread; for
information, **ack** = ``produce()`` → delivery report. Both sides of a measurement run in
one process and read one clock (``time.monotonic_ns()``; the send time travels in the
record's first 8 bytes). Warm-up sends (at least 200 — Kafka's JIT —, and until the consumer has
received one) are not counted.

Kafka's consumer keeps librdkafka's default 500 ms, like sparklog's: both brokers answer a long
poll as soon as records arrive. The mock's consumer sets ``fetch.wait.max.ms=1``. The mock does not wake a waiting fetch when records arrive (it
answers a fetch that found nothing only after ``fetch.wait.max.ms``), so with the default
500 ms its end-to-end p50 came out 320–510 ms — a property of the mock, not of Kafka. A 1 ms wait makes the mock's
figure what a broker that answers at once would give (ack + at most ~1 ms + one fetch).

Targets (issue 11): end to end p50 ≤ 10 ms, p99 ≤ 50 ms.
"""

from __future__ import annotations

from typing import Any

from benchmarks.harness import BenchContext, CaseResult
from benchmarks.wire import (
    PARTITIONS,
    Endpoint,
    Figures,
    compare,
    end_to_end,
    fmt_latency,
    latency_targets,
    p50_p99,
    systems_note,
    wire_metric,
)

CASE = "o"
TITLE = "end-to-end latency: produce (acks=all) → confluent-kafka consumer, sparklog vs Kafka vs mock"
SENDS = 2_000
TOPIC = "wire-e2e"
PRODUCER_CONFIG: dict[str, Any] = {"acks": "all", "linger.ms": 0}
CONSUMER_CONFIG: dict[str, Any] = {"fetch.wait.max.ms": 500}  # librdkafka's default
MOCK_CONSUMER_CONFIG: dict[str, Any] = {"fetch.wait.max.ms": 1}  # the mock does not wake long polls
TARGET_P50_MS = 10.0
TARGET_P99_MS = 50.0


def measure(sends: int, endpoint: Endpoint) -> Figures:
    consumer_config = MOCK_CONSUMER_CONFIG if endpoint.system == "mock" else CONSUMER_CONFIG
    measured = end_to_end(endpoint.bootstrap_servers, TOPIC, PARTITIONS, sends, PRODUCER_CONFIG, consumer_config)
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
            "consumer_config": CONSUMER_CONFIG,
            "mock_consumer_config": MOCK_CONSUMER_CONFIG,
            "systems": systems_note(),
        },
    )
    result.runs = compare(
        ctx,
        CASE,
        lambda endpoint, _run_no: measure(sends, endpoint),
        topic=TOPIC,
        show=lambda f: f"end to end {fmt_latency(f, 'e2e')} (ack {fmt_latency(f, 'ack')})",
    )
    p50, p99 = latency_targets(TARGET_P50_MS, TARGET_P99_MS)
    for key, name, targets in (
        ("e2e_p50_ms", "produce → consumer poll: p50", p50),
        ("e2e_p99_ms", "produce → consumer poll: p99", p99),
        ("ack_p50_ms", "produce → delivery report: p50 (info)", []),
        ("ack_p99_ms", "produce → delivery report: p99 (info)", []),
    ):
        result.metrics.append(wire_metric(CASE, result.runs, key, name, "ms", targets, higher_is_better=False))
    return result
