"""Case (s): transactional produce vs plain idempotent produce, both into a sparklog broker.

What it measures: one ``confluent_kafka.Producer`` sends 300,000 keyed records (value = 100
random bytes, key = 8 bytes, the pool of case (m)) with ``acks=all``, ``compression.type=lz4``,
``linger.ms=5`` and idempotence on, into a 6-partition, replication-factor-1 topic led by one
sparklog broker agent (a separate ``sparklog broker start`` process):

* **transactional** (``transactional.id`` set): ``begin_transaction()``, 1,000 ``produce()``,
  ``commit_transaction()``, repeated — every transaction adds its partitions
  (AddPartitionsToTxn), and its commit writes a marker to each of the 6 partitions
  (EndTxn: one marker commit per partition's group commit, acks=all) before it returns;
* **baseline**: the same records with the same producer settings, no ``transactional.id``
  (an idempotent producer), ``flush()`` at the end.

Timed: first ``produce()`` to the last ``commit_transaction()`` / ``flush()`` returning.
Untimed before: connection, metadata, ``init_transactions()`` and a warm-up of 5 transactions
(5,000 records, same path). Both sides run against a fresh broker of the same run, one after
the other (alternating which goes first). Checked: every record stored (high watermarks:
records plus one marker per partition per transaction on the transactional side) and, after
the last commit, nothing open (the last stable offset equals the high watermark).

Target (issue 12): transactional ÷ plain throughput ≥ 0.7.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from benchmarks.harness import BenchContext, CaseResult, Metric, Target, alternate, run_record
from benchmarks.wire import QUIET, RecordPool, produce_flood, record_pool, sparklog_broker

if TYPE_CHECKING:
    from benchmarks.harness import RunEnv

CASE = "s"
TITLE = "confluent-kafka transactional produce (1,000-record transactions) vs idempotent produce, sparklog broker"
RECORDS = 300_000
TRANSACTION_RECORDS = 1_000
WARMUP_TRANSACTIONS = 5
PRODUCER_CONFIG: dict[str, Any] = {"acks": "all", "compression.type": "lz4", "linger.ms": 5, "enable.idempotence": True}
TARGET_RATIO = 0.7
_TIMEOUT_S = 120


def transactional_flood(bootstrap: str, topic: str, pool: RecordPool, transactions: int, first: int) -> float:
    """``transactions`` transactions of :data:`TRANSACTION_RECORDS` records after a warm-up;
    -> seconds from the first timed ``produce`` to the last ``commit_transaction``."""
    import time

    from confluent_kafka import Producer

    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"bench-{topic}", **QUIET, **PRODUCER_CONFIG}
    )
    producer.init_transactions(_TIMEOUT_S)
    values, keys = pool.values, pool.keys
    position = 0

    def one_transaction() -> None:
        nonlocal position
        producer.begin_transaction()
        for _ in range(TRANSACTION_RECORDS):
            i = first + position
            while True:
                try:
                    producer.produce(topic, values[i % len(values)], keys[i % len(keys)])
                    break
                except BufferError:
                    producer.poll(0.01)
            position += 1
        producer.commit_transaction(_TIMEOUT_S)

    for _ in range(WARMUP_TRANSACTIONS):
        one_transaction()
    started = time.perf_counter()
    for _ in range(transactions):
        one_transaction()
    return time.perf_counter() - started


def sparklog_transactional(env: RunEnv, pool: RecordPool, transactions: int) -> tuple[float, dict[str, Any]]:
    topic = "wire-txn"
    with sparklog_broker(env, topic) as broker:
        seconds = transactional_flood(broker.bootstrap_servers, topic, pool, transactions, 0)
        high = broker.high_watermarks()
        stable = broker.cluster.replicas.high_watermarks(topic, read_committed=True)
        records = (WARMUP_TRANSACTIONS + transactions) * TRANSACTION_RECORDS
        if sum(high.values()) < records or stable != high:
            raise AssertionError(f"stored {high} (stable {stable}) for {records} records")
        return seconds, {"high_watermarks": high, "markers": sum(high.values()) - records}


def sparklog_plain(env: RunEnv, pool: RecordPool, records: int) -> tuple[float, dict[str, Any]]:
    topic = "wire-plain"
    warmup = WARMUP_TRANSACTIONS * TRANSACTION_RECORDS
    with sparklog_broker(env, topic) as broker:
        produce_flood(broker.bootstrap_servers, topic, pool, warmup, PRODUCER_CONFIG)
        flood = produce_flood(broker.bootstrap_servers, topic, pool, records, PRODUCER_CONFIG, first=warmup)
        stored = sum(broker.high_watermarks().values())
        if stored != warmup + records:  # idempotent: exactly once
            raise AssertionError(f"stored {stored} records, {warmup + records} sent")
        return flood.seconds, {"client": flood.counters()}


def run(ctx: BenchContext) -> CaseResult:
    transactions = max(10, ctx.scaled(RECORDS, minimum=10_000) // TRANSACTION_RECORDS)
    records = transactions * TRANSACTION_RECORDS
    pool = record_pool()
    result = CaseResult(
        CASE,
        TITLE,
        __doc__ or "",
        params={
            "records": records,
            "transaction_records": TRANSACTION_RECORDS,
            "transactions": transactions,
            "warmup_transactions": WARMUP_TRANSACTIONS,
            "topic_partitions": 6,
            "replication_factor": 1,
            "producer_config": PRODUCER_CONFIG,
            "baseline": "the same producer without transactional.id (idempotent), same broker code",
        },
    )
    txn_rates: list[float] = []
    plain_rates: list[float] = []
    for run_no in range(1, ctx.runs + 1):
        with ctx.fresh_env(CASE, run_no) as env:
            extra: dict[str, Any] = {}

            def measure_transactional(env: RunEnv = env) -> float:
                seconds, info = sparklog_transactional(env, pool, transactions)
                extra["transactional"] = info
                return seconds

            def measure_plain(env: RunEnv = env) -> float:
                seconds, info = sparklog_plain(env, pool, records)
                extra["plain"] = info
                return seconds

            t_sec, p_sec = alternate(run_no, measure_transactional, measure_plain)
        txn_rates.append(records / t_sec)
        plain_rates.append(records / p_sec)
        ctx.log(
            CASE,
            f"run {run_no}: transactional {records / t_sec:,.0f} rec/s ({transactions / t_sec:,.1f} txn/s), "
            f"idempotent {records / p_sec:,.0f} rec/s, ratio {p_sec / t_sec:.2f}",
        )
        result.runs.append(run_record(run_no, records, t_sec, p_sec, **extra))
    result.metrics.append(
        Metric(
            CASE,
            "produce in 1,000-record transactions (vs the same producer, idempotent, no transactions)",
            "records/s",
            txn_rates,
            plain_rates,
            [Target("ratio", ">=", TARGET_RATIO, f"≥ {TARGET_RATIO}× idempotent")],
            note="6 partitions, RF 1, one broker agent; both sides sparklog",
        )
    )
    return result
