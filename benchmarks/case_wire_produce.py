"""Case (m): confluent-kafka (librdkafka) producer throughput: sparklog's broker, Apache Kafka, the mock.

What it measures: 2,000,000 keyed records (value = 100 random bytes, key = 8 bytes; values from
a pool of 65,537, keys from 100,003, used cyclically) sent with ``acks=all``,
``compression.type=lz4``, ``linger.ms=5`` (librdkafka's other settings at their defaults:
``batch.size`` 1 MB, ``batch.num.messages`` 10,000, the ``consistent_random`` partitioner,
``max.in.flight`` 1,000,000; delivery reports for errors only) into a 6-partition,
replication-factor-1 topic, by **1, 2 and then 4 producer processes** (:mod:`benchmarks.fleet`;
each its own ``confluent_kafka.Producer`` and its share of the records), one after the other on
the same broker. A single Python producer process tops out near what its own interpreter can
hand librdkafka, so more processes are what it takes to saturate a fast broker; the system's
figure is its best of the three, reported with how many processes gave it and the CPU those
client processes used (cores = their CPU seconds ÷ the wall time) and the broker's.
Timed per step: the common start to the last process's ``flush()`` returning (every record
acknowledged). Untimed before: every producer's connection and metadata, and, once per system,
a warm-up of 10,000 records (1% at reduced scale, at least 1,000). Checked: the topic holds at
least every acknowledged record (without idempotence a request that timed out in the client is
sent again and both copies may be stored: at least once, Kafka's contract for this
configuration; the duplicates and the client's request counters are in the JSON).

The three systems (:mod:`benchmarks.wire`), same records and clients, the same run, the order
rotated by run: sparklog's broker agent (a ``sparklog broker start`` process), **Apache Kafka**
(one KRaft node, the baseline) and librdkafka's in-memory mock cluster (what the client itself
can push when the broker costs nearly nothing). Each system runs only while it is measured.

Targets: ≥ 500,000 records/s (issue 11) and ≥ 0.8× Kafka (issue 18); sparklog ÷ mock is
reported beside. The brokers' resident memory during the timed produce is sampled for (q).
"""

from __future__ import annotations

from typing import Any

from benchmarks.fleet import Fleet, FloodJob
from benchmarks.harness import BenchContext, CaseResult, Metric, Target
from benchmarks.wire import (
    PARTITIONS,
    CpuMeter,
    Endpoint,
    Figures,
    check_stored,
    compare,
    mib,
    record_rss,
    sample_rss,
    systems_note,
    wire_metric,
)

CASE = "m"
TITLE = "confluent-kafka producer throughput (acks=all, lz4, linger.ms=5), 1/2/4 producer processes"
RECORDS = 2_000_000
WARMUP = 10_000
PROCESSES = (1, 2, 4)
TOPIC = "wire-produce"
PRODUCER_CONFIG: dict[str, Any] = {"acks": "all", "compression.type": "lz4", "linger.ms": 5}
TARGET_RECORDS_PER_S = 500_000
TARGET_KAFKA_RATIO = 0.8


def sizes(ctx: BenchContext) -> tuple[int, int]:
    """(records per step, warm-up records) at the context's scale; records divide by every count."""
    records = ctx.scaled(RECORDS, minimum=12_000) // 12 * 12
    return records, max(1_000, min(WARMUP, records // 100))


def flood(
    fleet: Fleet,
    endpoint: Endpoint,
    processes: int,
    first: int,
    records: int,
    config: dict[str, Any] = PRODUCER_CONFIG,
) -> dict[str, float]:
    """``records`` records from ``processes`` processes together (each a producer with
    ``config``); -> rate, client and broker CPU."""
    share = records // processes
    jobs = [
        FloodJob(endpoint.bootstrap_servers, endpoint.topic, config, first + k * share, share) for k in range(processes)
    ]
    with CpuMeter(endpoint.pid) as broker_cpu:
        start_ns, results = fleet.run(jobs)
    seconds = (max(r["end_ns"] for r in results) - start_ns) / 1e9
    return {
        "records_per_s": records / seconds,
        "seconds": seconds,
        "client_cpu_cores": sum(r["cpu_s"] for r in results) / seconds,
        "broker_cpu_cores": broker_cpu.seconds / seconds,
        "requests": sum(r["requests"] for r in results),
        "request_timeouts": sum(r["request_timeouts"] for r in results),
        "retries": sum(r["retries"] for r in results),
    }


def measure(ctx: BenchContext, fleet: Fleet, records: int, warmup: int, endpoint: Endpoint, run_no: int) -> Figures:
    """Warm-up, then 1, 2, 4 processes; -> per count figures and the best (RSS row for (q))."""
    fleet.run([FloodJob(endpoint.bootstrap_servers, endpoint.topic, PRODUCER_CONFIG, 0, warmup)])
    steps: dict[int, dict[str, float]] = {}
    first = warmup
    with sample_rss(endpoint) as rss:
        for processes in PROCESSES:
            steps[processes] = flood(fleet, endpoint, processes, first, records)
            first += records
    duplicates = check_stored(sum(endpoint.high_watermarks().values()), first, endpoint.system)
    best = max(PROCESSES, key=lambda n: steps[n]["records_per_s"])
    figures: Figures = {
        "records_per_s": steps[best]["records_per_s"],
        "best_processes": best,
        "client_cpu_cores": steps[best]["client_cpu_cores"],
        "broker_cpu_cores": steps[best]["broker_cpu_cores"],
        "duplicates_stored": duplicates,
        "steps": {str(n): step for n, step in steps.items()},
        **{f"records_per_s_{n}": steps[n]["records_per_s"] for n in PROCESSES},
    }
    if rss is not None:
        figures["broker_rss"] = record_rss(ctx, CASE, run_no, rss, endpoint.system)
    return figures


def show(f: Figures) -> str:
    rates = "/".join(f"{f[f'records_per_s_{n}'] / 1000:,.0f}k" for n in PROCESSES)
    rss = f" RSS {mib(f['broker_rss']['max_bytes']):.0f} MiB" if "broker_rss" in f else ""
    return (
        f"{rates} rec/s with {'/'.join(map(str, PROCESSES))} processes (clients {f['client_cpu_cores']:.2f} cores, "
        f"broker {f['broker_cpu_cores']:.2f}){rss}, {f['duplicates_stored']} stored twice"
    )


def run(ctx: BenchContext) -> CaseResult:
    records, warmup = sizes(ctx)
    result = CaseResult(
        CASE,
        TITLE,
        __doc__ or "",
        params={
            "records_per_step": records,
            "warmup_records": warmup,
            "producer_processes": list(PROCESSES),
            "value_bytes": 100,
            "key_bytes": 8,
            "topic_partitions": PARTITIONS,
            "replication_factor": 1,
            "producer_config": PRODUCER_CONFIG,
            "systems": systems_note(),
        },
    )
    with Fleet(max(PROCESSES)) as fleet:

        def measure_system(endpoint: Endpoint, run_no: int) -> Figures:
            return measure(ctx, fleet, records, warmup, endpoint, run_no)

        result.runs = compare(ctx, CASE, measure_system, topic=TOPIC, show=show)
    duplicates = [row["sparklog"]["duplicates_stored"] for row in result.runs]
    if any(duplicates):
        result.notes.append(f"sparklog: records stored twice (client timeouts, retried) per run: {duplicates}")
    result.metrics.append(
        wire_metric(
            CASE,
            result.runs,
            "records_per_s",
            "produce 100 B keyed, acks=all, lz4, linger.ms=5: best of 1/2/4 producer processes",
            "records/s",
            [
                Target("value", ">=", TARGET_RECORDS_PER_S, f"≥ {TARGET_RECORDS_PER_S // 1000}k rec/s"),
                Target("ratio", ">=", TARGET_KAFKA_RATIO, f"≥ {TARGET_KAFKA_RATIO}× Kafka"),
            ],
            note="6 partitions, RF 1; ratio = sparklog ÷ Kafka",
        )
    )
    result.metrics.extend(info_rows(result.runs))
    return result


def info_rows(rows: list[dict[str, Any]]) -> list[Metric]:
    """Per process count, and what the best step cost (information)."""
    metrics = [
        wire_metric(CASE, rows, f"records_per_s_{n}", f"… with {n} producer process(es) (info)", "records/s")
        for n in PROCESSES
    ]
    for key, name, unit in (
        ("best_processes", "… producer processes of the best rate (info)", "processes"),
        ("client_cpu_cores", "… client processes' CPU at the best rate (info)", "cores"),
        ("broker_cpu_cores", "… broker process's CPU at the best rate (info)", "cores"),
    ):
        metrics.append(wire_metric(CASE, rows, key, name, unit, higher_is_better=False))
    return metrics
