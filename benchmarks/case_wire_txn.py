"""Case (s): transactional produce vs plain idempotent produce on the same broker: sparklog's
broker, Apache Kafka, the mock, each with its own ratio.

What it measures: one ``confluent_kafka.Producer`` sends 300,000 keyed records (value = 100
random bytes, key = 8 bytes, the pool of case (m)) with ``acks=all``, ``compression.type=lz4``,
``linger.ms=5`` and idempotence on, into a 6-partition, replication-factor-1 topic:

* **transactional** (``transactional.id`` set): ``begin_transaction()``, 1,000 ``produce()``,
  ``commit_transaction()``, repeated — every transaction adds its partitions
  (AddPartitionsToTxn), and its commit (EndTxn, answered once the decision is durable, as
  Kafka answers it) is followed by a marker in each of the 6 partitions; the next
  transaction's AddPartitionsToTxn is answered CONCURRENT_TRANSACTIONS until those are
  written, and the client retries it;
* **idempotent**: the same records with the same producer settings, no ``transactional.id``,
  ``flush()`` at the end.

Timed: first ``produce()`` to the last ``commit_transaction()`` / ``flush()`` returning.
Untimed before: connection, metadata, ``init_transactions()`` and a warm-up of 5 transactions
(5,000 records, same path) / 5,000 records. Both parts run against the same broker, one after
the other (which goes first alternates by run). Checked: the idempotent part stored exactly its
records (the high watermarks grew by that much), and at the end the topic holds at least every
record (plus one marker per partition per transaction) with nothing left open (the last stable
offset, read_committed ListOffsets, equals the high watermark, once the last transaction's
markers have landed).

The three systems (:mod:`benchmarks.wire`: sparklog's broker agent; Apache Kafka, one KRaft
node, the baseline; librdkafka's mock cluster), the same run, the order rotated by run. The
figure is each system's transactional ÷ idempotent ratio; the table's ratio compares sparklog's
with Kafka's. Target (issue 12): sparklog's ratio ≥ 0.7.
"""

from __future__ import annotations

import time
from typing import Any

from benchmarks.harness import BenchContext, CaseResult, Target
from benchmarks.wire import (
    QUIET,
    Endpoint,
    Figures,
    RecordPool,
    compare,
    produce_flood,
    record_pool,
    systems_note,
    wire_metric,
)

CASE = "s"
TITLE = "confluent-kafka transactional produce (1,000-record transactions) vs idempotent produce, per system"
RECORDS = 300_000
TRANSACTION_RECORDS = 1_000
WARMUP_TRANSACTIONS = 5
TOPIC = "wire-txn"
PRODUCER_CONFIG: dict[str, Any] = {"acks": "all", "compression.type": "lz4", "linger.ms": 5, "enable.idempotence": True}
TARGET_RATIO = 0.7
_TIMEOUT_S = 120


def transactional_flood(bootstrap: str, topic: str, pool: RecordPool, transactions: int, first: int) -> float:
    """``transactions`` transactions of :data:`TRANSACTION_RECORDS` records after a warm-up;
    -> seconds from the first timed ``produce`` to the last ``commit_transaction``."""
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


def idempotent_flood(endpoint: Endpoint, pool: RecordPool, records: int) -> float:
    """Warm-up, then ``records`` records; checks that exactly those were stored."""
    warmup = WARMUP_TRANSACTIONS * TRANSACTION_RECORDS
    before = sum(endpoint.high_watermarks().values())
    produce_flood(endpoint.bootstrap_servers, endpoint.topic, pool, warmup, PRODUCER_CONFIG)
    flood = produce_flood(endpoint.bootstrap_servers, endpoint.topic, pool, records, PRODUCER_CONFIG, first=warmup)
    stored = sum(endpoint.high_watermarks().values()) - before
    if stored != warmup + records:  # idempotent: exactly once
        raise AssertionError(f"{endpoint.system}: stored {stored} records, {warmup + records} sent")
    return flood.seconds


def settled(endpoint: Endpoint) -> tuple[dict[int, int], dict[int, int]]:
    """High watermarks and last stable offsets once they agree (or after :data:`_TIMEOUT_S`):
    ``commit_transaction`` returns before its markers are written, so the last transaction
    may still be open in some partition for a moment."""
    deadline = time.perf_counter() + _TIMEOUT_S
    while True:
        high = endpoint.high_watermarks()
        stable = endpoint.high_watermarks(read_committed=True)
        if stable == high or time.perf_counter() > deadline:
            return high, stable
        time.sleep(0.1)


def measure(pool: RecordPool, transactions: int, endpoint: Endpoint, run_no: int) -> Figures:
    records = transactions * TRANSACTION_RECORDS

    def transactional() -> float:
        return transactional_flood(endpoint.bootstrap_servers, endpoint.topic, pool, transactions, 0)

    if run_no % 2:
        txn_s, plain_s = transactional(), idempotent_flood(endpoint, pool, records)
    else:
        plain_s = idempotent_flood(endpoint, pool, records)
        txn_s = transactional()
    high, stable = settled(endpoint)
    sent = (WARMUP_TRANSACTIONS + transactions) * TRANSACTION_RECORDS + (
        WARMUP_TRANSACTIONS * TRANSACTION_RECORDS + records
    )
    if sum(high.values()) < sent or stable != high:
        raise AssertionError(f"{endpoint.system}: stored {high} (stable {stable}) for {sent} records")
    return {
        "transactional_per_s": records / txn_s,
        "idempotent_per_s": records / plain_s,
        "ratio": plain_s / txn_s,
        "transactions_per_s": transactions / txn_s,
        "markers": sum(high.values()) - sent,
    }


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
            "systems": systems_note(),
        },
    )
    result.runs = compare(
        ctx,
        CASE,
        lambda endpoint, run_no: measure(pool, transactions, endpoint, run_no),
        topic=TOPIC,
        show=lambda f: (
            f"transactional {f['transactional_per_s']:,.0f} rec/s ({f['transactions_per_s']:.1f} txn/s), "
            f"idempotent {f['idempotent_per_s']:,.0f} rec/s, ratio {f['ratio']:.2f}"
        ),
    )
    result.metrics.append(
        wire_metric(
            CASE,
            result.runs,
            "ratio",
            "transactional ÷ idempotent throughput, same broker (1,000-record transactions)",
            "×",
            [Target("value", ">=", TARGET_RATIO, f"≥ {TARGET_RATIO}")],
            note="each system's own ratio; the table's ratio = sparklog's ÷ Kafka's",
        )
    )
    for key, name in (
        ("transactional_per_s", "produce in 1,000-record transactions (info)"),
        ("idempotent_per_s", "the same producer idempotent, no transactions (info)"),
    ):
        result.metrics.append(wire_metric(CASE, result.runs, key, name, "records/s"))
    return result
