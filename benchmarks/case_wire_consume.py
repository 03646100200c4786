"""Case (p): confluent-kafka (librdkafka) consumer reading a topic from the start, from a sparklog broker.

What it measures: a 6-partition, replication-factor-1 topic led by one sparklog broker agent
(a separate process, fresh cluster per run) is first filled, untimed, with 5,000,000 keyed
100-byte records by the producer of case (m) (``acks=all``, lz4, ``linger.ms=5``): the
topic is what the broker itself wrote through the Kafka protocol (its group commits'
segments), not bulk-loaded. Then one ``confluent_kafka.Consumer`` (``assign`` of all 6
partitions at offset 0, ``consume(num_messages=10_000)`` in a loop, librdkafka's default
fetch settings: ``fetch.max.bytes`` 50 MB, ``max.partition.fetch.bytes`` 1 MB,
``fetch.wait.max.ms`` 500) reads everything; timed from ``assign`` to the last record.
Checked: the record count and every partition's final position equal the high watermarks.

Baseline: the same fill and the same consumer against librdkafka's in-memory mock cluster
(one broker, see :mod:`benchmarks.wire`), 6-partition topic.

Target (issue 11): ≥ 1,000,000 records/s; the ratio sparklog ÷ mock is reported. The
broker's resident memory is sampled during the timed consume (and the fill) for case (q).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from benchmarks.case_wire_produce import PRODUCER_CONFIG
from benchmarks.harness import BenchContext, CaseResult, Metric, Target, alternate, run_record
from benchmarks.wire import (
    MockCluster,
    RecordPool,
    RssSampler,
    consume_from_start,
    mib,
    produce_flood,
    record_pool,
    record_rss,
    sparklog_broker,
)

if TYPE_CHECKING:
    from benchmarks.harness import RunEnv

CASE = "p"
TITLE = "confluent-kafka consumer reading from the start, sparklog broker vs librdkafka mock"
RECORDS = 5_000_000
TOPIC = "wire-consume"
CONSUMER_CONFIG: dict[str, Any] = {}
TARGET_RECORDS_PER_S = 1_000_000


def sparklog_side(
    ctx: BenchContext, env: RunEnv, run_no: int, pool: RecordPool, records: int
) -> tuple[float, float, dict[str, Any]]:
    """Fill a fresh broker's topic, then read it; -> (consume s, fill s, RSS row of the consume)."""
    with sparklog_broker(env, TOPIC) as broker:
        with RssSampler(broker.pid) as fill_rss:
            fill_s = produce_flood(broker.bootstrap_servers, TOPIC, pool, records, PRODUCER_CONFIG)
        record_rss(ctx, f"{CASE}-fill", run_no, fill_rss)
        hw = broker.high_watermarks()
        if sum(hw.values()) != records:
            raise AssertionError(f"sparklog holds {sum(hw.values())} records, {records} were acknowledged")
        with RssSampler(broker.pid) as rss:
            seconds = consume_from_start(broker.bootstrap_servers, TOPIC, hw, CONSUMER_CONFIG)
        return seconds, fill_s, record_rss(ctx, CASE, run_no, rss)


def baseline_side(pool: RecordPool, records: int) -> float:
    with MockCluster(TOPIC) as mock:
        produce_flood(mock.bootstrap_servers, TOPIC, pool, records, PRODUCER_CONFIG)
        hw = mock.high_watermarks()
        if sum(hw.values()) != records:
            raise AssertionError(f"the mock holds {sum(hw.values())} records, {records} were acknowledged")
        return consume_from_start(mock.bootstrap_servers, TOPIC, hw, CONSUMER_CONFIG)


def run(ctx: BenchContext) -> CaseResult:
    records = ctx.scaled(RECORDS, minimum=10_000)
    pool = record_pool()
    result = CaseResult(
        CASE,
        TITLE,
        __doc__ or "",
        params={
            "records": records,
            "topic_partitions": 6,
            "replication_factor": 1,
            "fill_producer_config": PRODUCER_CONFIG,
            "consumer_config": CONSUMER_CONFIG or "librdkafka defaults",
            "baseline": "librdkafka mock cluster (test.mock.num.brokers=1), in-process",
        },
    )
    sparklog_rates: list[float] = []
    mock_rates: list[float] = []
    fill_rates: list[float] = []
    for run_no in range(1, ctx.runs + 1):
        with ctx.fresh_env(CASE, run_no) as env:
            extra: dict[str, Any] = {}

            def measure_sparklog(env: RunEnv = env, run_no: int = run_no) -> float:
                seconds, fill_s, row = sparklog_side(ctx, env, run_no, pool, records)
                extra.update(fill_seconds=fill_s, broker_rss=row)
                return seconds

            s_sec, b_sec = alternate(run_no, measure_sparklog, lambda: baseline_side(pool, records))
        sparklog_rates.append(records / s_sec)
        mock_rates.append(records / b_sec)
        fill_rates.append(records / extra["fill_seconds"])
        ctx.log(
            CASE,
            f"run {run_no}: sparklog {records / s_sec:,.0f} rec/s, mock {records / b_sec:,.0f} rec/s "
            f"(sparklog fill {fill_rates[-1]:,.0f} rec/s), broker max RSS {mib(extra['broker_rss']['max_bytes']):.0f} MiB",
        )
        result.runs.append(run_record(run_no, records, s_sec, b_sec, **extra))
    result.metrics.append(
        Metric(
            CASE,
            "consume from offset 0, 6 partitions (vs mock cluster)",
            "records/s",
            sparklog_rates,
            mock_rates,
            [Target("value", ">=", TARGET_RECORDS_PER_S, f"≥ {TARGET_RECORDS_PER_S // 1_000_000}M rec/s")],
            note="records written through the broker by case (m)'s producer",
        )
    )
    result.metrics.append(
        Metric(CASE, "fill: produce as in (m), untimed here (info)", "records/s", fill_rates, None, [], note="info")
    )
    return result
