"""Case (p): confluent-kafka (librdkafka) consumer reading a topic from the start: sparklog's
broker, Apache Kafka, the mock.

What it measures: a 6-partition, replication-factor-1 topic of each system
(:mod:`benchmarks.wire`: sparklog's broker agent, a separate process; Apache Kafka, one KRaft
node, the baseline; librdkafka's mock cluster; the same run, the order rotated by run) is first
filled, untimed, with 5,000,000 keyed
100-byte records by the producer of case (m) (``acks=all``, lz4, ``linger.ms=5``): the
topic is what the broker itself wrote through the Kafka protocol (sparklog: its group
commits' segments; Kafka: its log segments), not bulk-loaded. Then one ``confluent_kafka.Consumer`` (``assign`` of all 6
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

Kafka gets the same fill and the same consumer, one pass, as sparklog. The mock keeps only the last
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

Target (issue 11): ≥ 1,000,000 records/s; the ratios sparklog ÷ Kafka and sparklog ÷ mock
are reported. The brokers' resident memory is sampled during the timed consume (and the fill)
for case (q).
"""

from __future__ import annotations

from typing import Any

from benchmarks.case_wire_produce import PRODUCER_CONFIG
from benchmarks.harness import BenchContext, CaseResult, Metric, Target
from benchmarks.wire import (
    PARTITIONS,
    Endpoint,
    Figures,
    RecordPool,
    check_stored,
    compare,
    consume_ranges,
    mib,
    produce_flood,
    record_pool,
    record_rss,
    sample_rss,
    systems_note,
    wire_metric,
)

CASE = "p"
TITLE = "confluent-kafka consumer reading from the start: sparklog broker vs Kafka vs librdkafka mock"
RECORDS = 5_000_000
TOPIC = "wire-consume"
# librdkafka stops fetching a partition for fetch.queue.backoff.ms (default 1 s) once its local
# queue holds queued.min.messages (100,000): against a broker faster than the application that
# pause, not the broker, decides the rate. 10 ms on every system (it never triggers against a
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


def broker_side(ctx: BenchContext, endpoint: Endpoint, run_no: int, pool: RecordPool, records: int) -> Figures:
    """sparklog or Kafka: fill the topic, then read it in one pass (RSS rows for (q))."""
    bootstrap = endpoint.bootstrap_servers
    with sample_rss(endpoint) as fill_rss:
        fill_s = produce_flood(bootstrap, TOPIC, pool, records, PRODUCER_CONFIG).seconds
    hw = endpoint.high_watermarks()
    stored = sum(hw.values())
    check_stored(stored, records, endpoint.system)  # more: retried requests stored twice (see (m))
    with sample_rss(endpoint) as rss:
        consumed = consume_ranges(bootstrap, TOPIC, {p: (0, end) for p, end in hw.items()}, stored, CONSUMER_CONFIG)
    assert consumed.passes == 1 and consumed.records == stored, consumed
    figures: Figures = {
        "records_per_s": stored / consumed.seconds,
        "fill_records_per_s": records / fill_s,
        "records_read": stored,
    }
    if fill_rss is not None and rss is not None:
        record_rss(ctx, f"{CASE}-fill", run_no, fill_rss, endpoint.system)
        figures["broker_rss"] = record_rss(ctx, CASE, run_no, rss, endpoint.system)
    return figures


def mock_side(endpoint: Endpoint, pool: RecordPool, records: int) -> Figures:
    """Fill the mock and read what it kept as often as it takes to read ``records`` records."""
    bootstrap = endpoint.bootstrap_servers
    fill_s = produce_flood(bootstrap, TOPIC, pool, records, MOCK_FILL_CONFIG).seconds
    ranges = endpoint.log_ranges()
    check_stored(sum(end for _start, end in ranges.values()), records, "the mock")
    consumed = consume_ranges(bootstrap, TOPIC, ranges, records, MOCK_CONSUMER_CONFIG)
    return {
        "records_per_s": consumed.records / consumed.seconds,
        "fill_records_per_s": records / fill_s,
        "records_read": consumed.records,
        "passes": consumed.passes,
        "retained_records": sum(end - start for start, end in ranges.values()),
    }


def measure(ctx: BenchContext, pool: RecordPool, records: int, endpoint: Endpoint, run_no: int) -> Figures:
    if endpoint.system == "mock":
        return mock_side(endpoint, pool, records)
    return broker_side(ctx, endpoint, run_no, pool, records)


def show(f: Figures) -> str:
    rss = f", broker max RSS {mib(f['broker_rss']['max_bytes']):.0f} MiB" if "broker_rss" in f else ""
    return f"{f['records_per_s']:,.0f} rec/s (fill {f['fill_records_per_s']:,.0f} rec/s){rss}"


def run(ctx: BenchContext) -> CaseResult:
    records = ctx.scaled(RECORDS, minimum=10_000)
    pool = record_pool()
    result = CaseResult(
        CASE,
        TITLE,
        __doc__ or "",
        params={
            "records": records,
            "topic_partitions": PARTITIONS,
            "replication_factor": 1,
            "fill_producer_config": PRODUCER_CONFIG,
            "mock_fill_producer_config": MOCK_FILL_CONFIG,
            "consumer_config": CONSUMER_CONFIG,
            "mock_consumer_config": MOCK_CONSUMER_CONFIG,
            "systems": systems_note(),
        },
    )
    result.runs = compare(
        ctx, CASE, lambda endpoint, run_no: measure(ctx, pool, records, endpoint, run_no), topic=TOPIC, show=show
    )
    result.metrics.append(
        wire_metric(
            CASE,
            result.runs,
            "records_per_s",
            "consume from offset 0, 6 partitions",
            "records/s",
            [Target("value", ">=", TARGET_RECORDS_PER_S, f"≥ {TARGET_RECORDS_PER_S // 1_000_000}M rec/s")],
            note="records written through each broker by case (m)'s producer; ratio = sparklog ÷ Kafka",
        )
    )
    fill: Metric = wire_metric(
        CASE,
        result.runs,
        "fill_records_per_s",
        "fill: one producer process as in (m), untimed here (info)",
        "records/s",
    )
    result.metrics.append(fill)
    return result
