"""Case (p): confluent-kafka (librdkafka) consumer reading a topic from the start, from a sparklog broker.

What it measures: a 6-partition, replication-factor-1 topic led by one sparklog broker agent
(a separate process, fresh cluster per run) is first filled, untimed, with 5,000,000 keyed
100-byte records by the producer of case (m) (``acks=all``, lz4, ``linger.ms=5``): the
topic is what the broker itself wrote through the Kafka protocol (its group commits'
segments), not bulk-loaded. Then one ``confluent_kafka.Consumer`` (``assign`` of all 6
partitions at offset 0, ``consume(num_messages=10_000)`` in a loop — fewer for the last
call: ``consume(n)`` waits until it has ``n`` messages or its timeout passes —, librdkafka's default
fetch sizes: ``fetch.max.bytes`` 50 MB, ``max.partition.fetch.bytes`` 1 MB,
``fetch.wait.max.ms`` 500; ``fetch.queue.backoff.ms=10`` instead of 1 s on both sides: librdkafka
pauses a partition's fetching that long once 100,000 records wait in its local queue, which
against a fast broker, not the broker, sets the rate) reads everything; timed from ``assign``
to the last record.
Checked: the record count and every partition's final position equal the high watermarks
(the topic may hold a few more records than were sent: see (m) on retried requests; the
consumer reads them all and the figure is per record read).

Baseline: the same fill and the same consumer against librdkafka's in-memory mock cluster
(one broker, see :mod:`benchmarks.wire`), 6-partition topic. The mock keeps only the last
5 MB (≈ 45,000 of these records) of each partition — a limit built into librdkafka's mock
(``rd_kafka_mock_partition_new``), not settable from a client — and drops older batches as
new ones arrive; so its consumer reads what the mock kept, from each partition's log start
to its high watermark, and again (re-``assign``) until it has read as many records as the
sparklog side (every pass checked complete; the mock's consumer uses ``fetch.wait.max.ms=1``:
the mock holds a fetch that found nothing that long, not woken by data, which would stall
every pass boundary for 500 ms). Its figure is records read ÷ time, scaled to
exactly the sparklog side's record count; the passes and the retained records are in the JSON.
The mock also answers a fetch with a single stored batch per partition, so its records per
fetch are whatever batch sizes the producer made; it is filled with full batches
(``linger.ms=1000``, ``batch.num.messages=10000``: ≈ 1 MB each), which makes its answers about
as large as sparklog's (batches re-encoded from the segments, up to
``max.partition.fetch.bytes`` = 1 MB per partition, whatever the producer's batching was).
Filled like sparklog (``linger.ms=5``), the mock's batches at the end of a fill held ~90
records and it read ~110,000 records/s.

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
    check_stored,
    consume_ranges,
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
# librdkafka stops fetching a partition for fetch.queue.backoff.ms (default 1 s) once its local
# queue holds queued.min.messages (100,000): against a broker faster than the application that
# pause, not the broker, decides the rate. 10 ms on both sides (it never triggers against a
# broker slower than the application).
CONSUMER_CONFIG: dict[str, Any] = {"fetch.queue.backoff.ms": 10}
# The mock holds a fetch that found nothing for fetch.wait.max.ms (it is not woken by data):
# between two passes over its retained records that would be a 500 ms stall.
MOCK_CONSUMER_CONFIG: dict[str, Any] = {**CONSUMER_CONFIG, "fetch.wait.max.ms": 1}
# The mock answers a fetch with ONE stored batch per partition (librdkafka's mock: "FIXME:
# Multiple messageSets ?"), so its records per fetch are the batch sizes the producer made.
# Filled with full batches (10,000 records ≈ 1 MB), it answers about what sparklog answers:
# batches re-encoded from the segments, up to max.partition.fetch.bytes (1 MB) per partition.
MOCK_FILL_CONFIG: dict[str, Any] = {**PRODUCER_CONFIG, "linger.ms": 1000, "batch.num.messages": 10_000}
TARGET_RECORDS_PER_S = 1_000_000


def sparklog_side(
    ctx: BenchContext, env: RunEnv, run_no: int, pool: RecordPool, records: int
) -> tuple[float, float, dict[str, Any]]:
    """Fill a fresh broker's topic, then read it; -> (consume s, fill s, RSS row of the consume)."""
    with sparklog_broker(env, TOPIC) as broker:
        with RssSampler(broker.pid) as fill_rss:
            fill_s = produce_flood(broker.bootstrap_servers, TOPIC, pool, records, PRODUCER_CONFIG).seconds
        record_rss(ctx, f"{CASE}-fill", run_no, fill_rss)
        hw = broker.high_watermarks()
        stored = sum(hw.values())
        check_stored(stored, records, "sparklog")  # more: retried requests stored twice (see (m))
        ranges = {p: (0, end) for p, end in hw.items()}
        with RssSampler(broker.pid) as rss:
            consumed = consume_ranges(broker.bootstrap_servers, TOPIC, ranges, stored, CONSUMER_CONFIG)
        assert consumed.passes == 1 and consumed.records == stored, consumed
        # the time for ``records`` records (what the mock side is scaled to)
        return consumed.seconds * records / stored, fill_s, record_rss(ctx, CASE, run_no, rss)


def baseline_side(pool: RecordPool, records: int) -> tuple[float, dict[str, Any]]:
    """Fill the mock and read what it kept as often as it takes to read ``records`` records;
    -> (seconds, what was read)."""
    with MockCluster(TOPIC) as mock:
        produce_flood(mock.bootstrap_servers, TOPIC, pool, records, MOCK_FILL_CONFIG)
        ranges = mock.log_ranges()
        check_stored(sum(end for _start, end in ranges.values()), records, "the mock")
        consumed = consume_ranges(mock.bootstrap_servers, TOPIC, ranges, records, MOCK_CONSUMER_CONFIG)
        info = {
            "records_read": consumed.records,
            "passes": consumed.passes,
            "retained_records": sum(end - start for start, end in ranges.values()),
        }
        return consumed.seconds * records / consumed.records, info


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
            "mock_fill_producer_config": MOCK_FILL_CONFIG,
            "consumer_config": CONSUMER_CONFIG,
            "mock_consumer_config": MOCK_CONSUMER_CONFIG,
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

            def measure_mock() -> float:
                seconds, info = baseline_side(pool, records)
                extra.update(mock=info)
                return seconds

            s_sec, b_sec = alternate(run_no, measure_sparklog, measure_mock)
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
