"""Case (t): OffsetCommit latency through the Kafka protocol (confluent-kafka).

What it measures, against one sparklog broker agent (a separate process, fresh cluster per
run; the group's ``__consumer_offsets`` partition is led by it, replication factor 1 as the
offsets topic gets on a one-broker cluster) and a 6-partition topic:

* **one partition:** a ``confluent_kafka.Consumer`` with a ``group.id`` and ``assign()``
  (standalone commits, generation -1) commits offset ``i`` of partition 0 with
  ``commit(offsets=[...], asynchronous=False)``, 2,000 times one after the other (20 untimed
  warm-up commits first); latency = the ``commit`` call;
* **three partitions:** the same with partitions 0–2 in every commit.

Each commit is an OffsetCommit request answered once the offsets are in the coordinator's
Delta table (and on every in-sync replica, none here): what ``sparklog groups describe``,
``Cluster.committed_offsets`` and OffsetFetch read.

Baseline: the same against librdkafka's in-memory mock cluster (one broker, see
:mod:`benchmarks.wire`), same runs, alternating which side goes first.

Targets (issue 12): p50 ≤ 5 ms, p99 ≤ 25 ms, for both. For reference, the sparklog library's
own commit (``Cluster.commit_offsets``, case (g)) measured p50 24.6 ms before this.
"""

from __future__ import annotations

import time
from typing import Any

from benchmarks.harness import BenchContext, CaseResult, Metric, Target, alternate
from benchmarks.wire import QUIET, MockCluster, p50_p99, sparklog_broker

CASE = "t"
TITLE = "OffsetCommit latency (confluent-kafka, assign() + commit(asynchronous=False)), sparklog vs mock"
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


def _measure(bootstrap: str, commits: int) -> dict[str, Any]:
    one = sequential_commits(bootstrap, 1, commits)
    three = sequential_commits(bootstrap, 3, commits)
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
            "baseline": "librdkafka mock cluster (test.mock.num.brokers=1), in-process",
        },
    )
    keys = ("one_p50_ms", "one_p99_ms", "three_p50_ms", "three_p99_ms")
    figures: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in keys}
    for run_no in range(1, ctx.runs + 1):
        with ctx.fresh_env(CASE, run_no) as env:

            def sparklog_side(env: Any = env) -> dict[str, Any]:
                with sparklog_broker(env, TOPIC) as broker:
                    return _measure(broker.bootstrap_servers, commits)

            def mock_side() -> dict[str, Any]:
                with MockCluster(TOPIC) as mock:
                    return _measure(mock.bootstrap_servers, commits)

            s, b = alternate(run_no, sparklog_side, mock_side)
        for key in keys:
            figures[key][0].append(s[key])
            figures[key][1].append(b[key])
        ctx.log(
            CASE,
            f"run {run_no}: one partition p50/p99 sparklog {s['one_p50_ms']:.2f}/{s['one_p99_ms']:.2f} ms, mock "
            f"{b['one_p50_ms']:.2f}/{b['one_p99_ms']:.2f} ms; three partitions sparklog "
            f"{s['three_p50_ms']:.2f}/{s['three_p99_ms']:.2f} ms, mock {b['three_p50_ms']:.2f}/{b['three_p99_ms']:.2f} ms",
        )
        result.runs.append(
            {"run": run_no, "order": "sparklog-first" if run_no % 2 else "baseline-first", "sparklog": s, "baseline": b}
        )
    p50 = [Target("value", "<=", TARGET_P50_MS, f"≤ {TARGET_P50_MS:g} ms")]
    p99 = [Target("value", "<=", TARGET_P99_MS, f"≤ {TARGET_P99_MS:g} ms")]
    for key, name, targets in (
        ("one_p50_ms", "commit of 1 partition: p50", p50),
        ("one_p99_ms", "commit of 1 partition: p99", p99),
        ("three_p50_ms", "commit of 3 partitions: p50", p50),
        ("three_p99_ms", "commit of 3 partitions: p99", p99),
    ):
        result.metrics.append(
            Metric(CASE, name, "ms", figures[key][0], figures[key][1], targets, higher_is_better=False)
        )
    return result
