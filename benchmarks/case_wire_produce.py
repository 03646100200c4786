"""Case (m): confluent-kafka (librdkafka) producer throughput into a sparklog broker.

What it measures: one ``confluent_kafka.Producer`` sends 2,000,000 keyed records (value =
100 random bytes, key = 8 bytes; values from a pool of 65,537, keys from 100,003, used
cyclically) with ``acks=all``, ``compression.type=lz4``, ``linger.ms=5`` (librdkafka's other
settings at their defaults: ``batch.size`` 1 MB, ``batch.num.messages`` 10,000, the
``consistent_random`` partitioner, ``max.in.flight`` 1,000,000; delivery reports for errors
only) into a 6-partition, replication-factor-1 topic led by one sparklog broker agent
(a separate ``sparklog broker start`` process, fresh cluster per run). Timed: the first
``produce()`` to ``flush()`` returning (every record acknowledged). Untimed before: the
producer's connection and metadata, and a warm-up of 10,000 records (1% at reduced scale,
at least 1,000) through the same path. Checked: the topic holds at least every
acknowledged record. librdkafka pipelines requests without limit on its one connection
(``max.in.flight`` 1,000,000) while the broker answers a connection's requests one after
another, so when the broker is slower than the client the last requests wait for all the
earlier ones; past ``request.timeout.ms`` (30 s) they time out and are sent again, and
without idempotence the original and the retry may both be stored (at least once, Kafka's
contract for this configuration). The records stored twice, and the client's request
counters from librdkafka's statistics (requests, retries, timeouts, largest round trip), are
in the JSON and the progress lines.

Baseline: the same producer, records and settings into librdkafka's in-memory mock cluster
(one broker, ``test.mock.num.brokers``; see :mod:`benchmarks.wire`), a 6-partition topic —
what the client itself can push when the broker costs nearly nothing. The broker runs only
while its side is measured.

Target (issue 11): ≥ 500,000 records/s; the ratio sparklog ÷ mock is reported. The broker's
resident memory during the timed produce is sampled for case (q).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from benchmarks.harness import BenchContext, CaseResult, Metric, Target, alternate, run_record
from benchmarks.wire import (
    MockCluster,
    RecordPool,
    RssSampler,
    check_stored,
    mib,
    produce_flood,
    record_pool,
    record_rss,
    sparklog_broker,
)

if TYPE_CHECKING:
    from benchmarks.harness import RunEnv

CASE = "m"
TITLE = "confluent-kafka producer throughput (acks=all, lz4, linger.ms=5), sparklog broker vs librdkafka mock"
RECORDS = 2_000_000
WARMUP = 10_000
TOPIC = "wire-produce"
PRODUCER_CONFIG: dict[str, Any] = {"acks": "all", "compression.type": "lz4", "linger.ms": 5}
TARGET_RECORDS_PER_S = 500_000


def sizes(ctx: BenchContext) -> tuple[int, int]:
    """(records, warm-up records) at the context's scale."""
    records = ctx.scaled(RECORDS, minimum=10_000)
    return records, max(1_000, min(WARMUP, records // 100))


def sparklog_side(
    ctx: BenchContext, env: RunEnv, run_no: int, pool: RecordPool, records: int, warmup: int
) -> tuple[float, dict[str, Any]]:
    """Produce into a fresh broker agent; -> (seconds, extra JSON: the broker's RSS row for
    case (q), the client's request counters, duplicates stored)."""
    with sparklog_broker(env, TOPIC) as broker:
        produce_flood(broker.bootstrap_servers, TOPIC, pool, warmup, PRODUCER_CONFIG)
        with RssSampler(broker.pid) as rss:
            flood = produce_flood(broker.bootstrap_servers, TOPIC, pool, records, PRODUCER_CONFIG, first=warmup)
        stored = sum(broker.high_watermarks().values())
        duplicates = check_stored(stored, warmup + records, "sparklog")
        return flood.seconds, {
            "broker_rss": record_rss(ctx, CASE, run_no, rss),
            "client": flood.counters(),
            "duplicates_stored": duplicates,
        }


def baseline_side(pool: RecordPool, records: int, warmup: int) -> tuple[float, dict[str, Any]]:
    with MockCluster(TOPIC) as mock:
        produce_flood(mock.bootstrap_servers, TOPIC, pool, warmup, PRODUCER_CONFIG)
        flood = produce_flood(mock.bootstrap_servers, TOPIC, pool, records, PRODUCER_CONFIG, first=warmup)
        stored = sum(mock.high_watermarks().values())
        duplicates = check_stored(stored, warmup + records, "the mock")
        return flood.seconds, {"client": flood.counters(), "duplicates_stored": duplicates}


def run(ctx: BenchContext) -> CaseResult:
    records, warmup = sizes(ctx)
    pool = record_pool()
    result = CaseResult(
        CASE,
        TITLE,
        __doc__ or "",
        params={
            "records": records,
            "warmup_records": warmup,
            "value_bytes": 100,
            "key_bytes": 8,
            "topic_partitions": 6,
            "replication_factor": 1,
            "producer_config": PRODUCER_CONFIG,
            "baseline": "librdkafka mock cluster (test.mock.num.brokers=1), in-process",
        },
    )
    sparklog_rates: list[float] = []
    mock_rates: list[float] = []
    duplicates: list[int] = []
    for run_no in range(1, ctx.runs + 1):
        with ctx.fresh_env(CASE, run_no) as env:
            extra: dict[str, Any] = {}

            def measure_sparklog(env: RunEnv = env, run_no: int = run_no) -> float:
                seconds, info = sparklog_side(ctx, env, run_no, pool, records, warmup)
                extra["sparklog"] = info
                return seconds

            def measure_mock() -> float:
                seconds, info = baseline_side(pool, records, warmup)
                extra["mock"] = info
                return seconds

            s_sec, b_sec = alternate(run_no, measure_sparklog, measure_mock)
        sparklog_rates.append(records / s_sec)
        mock_rates.append(records / b_sec)
        duplicates.append(extra["sparklog"]["duplicates_stored"])
        client = extra["sparklog"]["client"]
        ctx.log(
            CASE,
            f"run {run_no}: sparklog {records / s_sec:,.0f} rec/s, mock {records / b_sec:,.0f} rec/s, "
            f"broker max RSS {mib(extra['sparklog']['broker_rss']['max_bytes']):.0f} MiB; sparklog: "
            f"{client['requests']} requests, max RTT {client['max_rtt_ms']:,.0f} ms, "
            f"{client['request_timeouts']} timed out, {client['retries']} retried, {duplicates[-1]} records stored twice",
        )
        result.runs.append(run_record(run_no, records, s_sec, b_sec, **extra))
    if any(duplicates):
        result.notes.append(
            f"records stored twice (client request timeouts, retried without idempotence) per run: {duplicates}"
        )
    result.metrics.append(
        Metric(
            CASE,
            "produce 100 B keyed, acks=all, lz4, linger.ms=5 (vs mock cluster)",
            "records/s",
            sparklog_rates,
            mock_rates,
            [Target("value", ">=", TARGET_RECORDS_PER_S, f"≥ {TARGET_RECORDS_PER_S // 1000}k rec/s")],
            note="6 partitions, RF 1, one broker agent process; baseline librdkafka mock cluster",
        )
    )
    return result
