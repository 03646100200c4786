"""Case (t): OffsetCommit latency through the Kafka protocol (confluent-kafka): sparklog's broker,
Apache Kafka, the mock.

What it measures, against each system (:mod:`benchmarks.wire`: sparklog's broker agent, a
separate process; Apache Kafka, one KRaft node, the baseline; librdkafka's mock cluster; the
same run, the order rotated by run; the group's ``__consumer_offsets`` partition has one
replica, as the offsets topic gets on a one-broker cluster) and a 6-partition topic:

* **one partition:** a ``confluent_kafka.Consumer`` with a ``group.id`` and ``assign()``
  (standalone commits, generation -1) commits offset ``i`` of partition 0 with
  ``commit(offsets=[...], asynchronous=False)``, 2,000 times one after the other (20 untimed
  warm-up commits first); latency = the ``commit`` call;
* **three partitions:** the same with partitions 0–2 in every commit.

Each commit is an OffsetCommit request answered, on sparklog, once the offsets are in the
coordinator's Delta table (and on every in-sync replica, none here): what ``sparklog groups
describe``, ``Cluster.committed_offsets`` and OffsetFetch read; on Kafka, once the offset
records are appended to ``__consumer_offsets`` (page cache, no fsync).

Targets (issue 12): p50 ≤ 5 ms, p99 ≤ 25 ms, for both. For reference, the sparklog library's
own commit (``Cluster.commit_offsets``, case (g)) measured p50 24.6 ms before this.
"""

from __future__ import annotations

import time

from benchmarks.harness import BenchContext, CaseResult
from benchmarks.wire import (
    QUIET,
    Endpoint,
    Figures,
    compare,
    fmt_latency,
    latency_targets,
    p50_p99,
    systems_note,
    wire_metric,
)

CASE = "t"
TITLE = "OffsetCommit latency (confluent-kafka, assign() + commit(asynchronous=False)), sparklog vs Kafka vs mock"
COMMITS = 2_000
WARMUP = 20
TOPIC = "wire-commits"
GROUP = "bench-commits"
TARGET_P50_MS = 5.0
TARGET_P99_MS = 25.0


def sequential_commits(bootstrap: str, partitions: int, commits: int) -> list[float]:
    """``commits`` synchronous commits of ``partitions`` partitions, one after the other (ms each)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"{GROUP}-{partitions}", "enable.auto.commit": False, **QUIET}
    )
    try:
        consumer.assign([TopicPartition(TOPIC, p) for p in range(partitions)])
        latencies = []
        for i in range(WARMUP + commits):
            offsets = [TopicPartition(TOPIC, p, i + 1) for p in range(partitions)]
            start = time.perf_counter_ns()
            stored = consumer.commit(offsets=offsets, asynchronous=False)
            elapsed_ms = (time.perf_counter_ns() - start) / 1e6
            failed = [tp for tp in stored or [] if tp.error is not None]
            if failed:
                raise AssertionError(f"commit {i} failed: {failed[0].error}")
            if i >= WARMUP:
                latencies.append(elapsed_ms)
        [check] = consumer.committed([TopicPartition(TOPIC, 0)], timeout=30)
        if check.offset != WARMUP + commits:
            raise AssertionError(f"committed offset {check.offset}, expected {WARMUP + commits}")
        return latencies
    finally:
        consumer.close()


def measure(commits: int, endpoint: Endpoint) -> Figures:
    one = sequential_commits(endpoint.bootstrap_servers, 1, commits)
    three = sequential_commits(endpoint.bootstrap_servers, 3, commits)
    o50, o99 = p50_p99(one)
    t50, t99 = p50_p99(three)
    return {
        "one_p50_ms": o50,
        "one_p99_ms": o99,
        "one_max_ms": max(one),
        "three_p50_ms": t50,
        "three_p99_ms": t99,
        "three_max_ms": max(three),
    }


def run(ctx: BenchContext) -> CaseResult:
    commits = ctx.scaled(COMMITS, minimum=200)
    result = CaseResult(
        CASE,
        TITLE,
        __doc__ or "",
        params={
            "commits": commits,
            "warmup": WARMUP,
            "offsets_replication_factor": 1,
            "systems": systems_note(),
        },
    )
    result.runs = compare(
        ctx,
        CASE,
        lambda endpoint, _run_no: measure(commits, endpoint),
        topic=TOPIC,
        show=lambda f: f"one partition {fmt_latency(f, 'one')}, three {fmt_latency(f, 'three')}",
    )
    p50, p99 = latency_targets(TARGET_P50_MS, TARGET_P99_MS)
    for key, name, targets in (
        ("one_p50_ms", "commit of 1 partition: p50", p50),
        ("one_p99_ms", "commit of 1 partition: p99", p99),
        ("three_p50_ms", "commit of 3 partitions: p50", p50),
        ("three_p99_ms", "commit of 3 partitions: p99", p99),
    ):
        result.metrics.append(wire_metric(CASE, result.runs, key, name, "ms", targets, higher_is_better=False))
    return result
