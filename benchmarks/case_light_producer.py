"""Case (b): light producer throughput — ``Producer.send_arrow`` vs ``deltalake.write_deltalake``.

What it measures: wall time of producing 2,000,000 records (value = 100 random bytes,
keyless) as 20 Arrow tables of 100,000 rows with ``Producer.send_arrow(topic, table)``
and ``acks=1``: each call is one produce request (write leases in ZooKeeper, one
Parquet segment, one Delta commit with the offset/fence/producer transactions), blocking
until committed. Reported as records/s.

Why the baseline is fair: ``write_deltalake(path, table, mode="append")`` appends the
*same Arrow tables* one by one to a plain (unpartitioned) Delta table on the same disk —
the same storage engine (delta-rs), one commit per table, Snappy Parquet, no
coordination. It is the floor of "commit these batches to a Delta table"; sparklog adds
its columns (offset, timestamp, …), the lease round trips and the transactions.

Informational (no target, no baseline): per-record ``send()`` throughput for 200,000
records with the default ``linger.ms``/``batch.size`` and ``acks=1``, ending with
``flush()`` — how far the record-at-a-time API is from the batch API.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from benchmarks.harness import BenchContext, CaseResult, Metric, Target, alternate, run_record, timed

if TYPE_CHECKING:
    import pyarrow as pa

CASE = "b"
TITLE = "light producer (send_arrow 100k batches; send() info)"
# The baseline writes Snappy; compression.type's default (producer, with none) is uncompressed.
SNAPPY = {"compression.type": "snappy"}
RECORDS = 2_000_000
BATCH_ROWS = 100_000
SEND_RECORDS = 200_000
VALUE_BYTES = 100
TOPIC_PARTITIONS = 8
TARGET_RATIO = 0.8


def random_values(rows: int, seed: int) -> pa.Table:
    """An Arrow table with one binary column ``value`` of ``rows`` × 100 random bytes."""
    import numpy as np
    import pyarrow as pa

    data = np.random.default_rng(seed).bytes(rows * VALUE_BYTES)
    offsets = np.arange(0, (rows + 1) * VALUE_BYTES, VALUE_BYTES, dtype=np.int32)
    array = pa.Array.from_buffers(pa.binary(), rows, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    return pa.table({"value": array})


def run(ctx: BenchContext) -> CaseResult:
    """Run case (b) ``ctx.runs`` times; sparklog and baseline alternate which goes first."""
    from deltalake import DeltaTable, write_deltalake

    import sparklog

    records = ctx.scaled(RECORDS, minimum=1000)
    batch_rows = min(BATCH_ROWS, records)
    n_batches = max(1, records // batch_rows)
    records = n_batches * batch_rows
    send_records = ctx.scaled(SEND_RECORDS, minimum=100)
    batches = [random_values(batch_rows, seed) for seed in range(n_batches)]
    send_values: list[bytes] = random_values(send_records, 10_000).column("value").to_pylist()
    result = CaseResult(
        CASE,
        TITLE,
        __doc__ or "",
        params={
            "records": records,
            "batch_rows": batch_rows,
            "batches": n_batches,
            "value_bytes": VALUE_BYTES,
            "topic_partitions": TOPIC_PARTITIONS,
            "producer_config": {"acks": "1", "other": "defaults"},
            "send_records": send_records,
            "baseline": "deltalake.write_deltalake(path, table, mode='append') per batch",
        },
    )
    ctx.log(CASE, "warm-up …")
    with ctx.fresh_env(CASE, "warmup") as env:
        with sparklog.connect(env.options) as cluster:
            cluster.create_topic("warmup", partitions=TOPIC_PARTITIONS, config=SNAPPY)
            with cluster.producer(acks=1) as producer:
                producer.send_arrow("warmup", batches[0].slice(0, 1000))
        write_deltalake(str(env.scratch / "warmup"), batches[0].slice(0, 1000), mode="append")
    sparklog_rates: list[float] = []
    baseline_rates: list[float] = []
    send_rates: list[float] = []
    for run_no in range(1, ctx.runs + 1):
        with ctx.fresh_env(CASE, run_no) as env:
            cluster = sparklog.connect(env.options)
            try:
                cluster.create_topic("bench", partitions=TOPIC_PARTITIONS, config=SNAPPY)
                cluster.create_topic("bench-send", partitions=TOPIC_PARTITIONS, config=SNAPPY)

                def sparklog_side() -> float:
                    ctx.log(CASE, f"run {run_no}/{ctx.runs} sparklog send_arrow {n_batches} × {batch_rows:,} …")
                    producer = cluster.producer(acks=1)
                    try:
                        seconds, _ = timed(lambda: [producer.send_arrow("bench", b) for b in batches])
                    finally:
                        producer.close()
                    ctx.log(
                        CASE, f"run {run_no}/{ctx.runs} sparklog: {seconds:.2f} s, {records / seconds:,.0f} records/s"
                    )
                    return seconds

                def baseline_side() -> float:
                    ctx.log(CASE, f"run {run_no}/{ctx.runs} baseline write_deltalake {n_batches} × {batch_rows:,} …")
                    path = str(env.scratch / "delta")
                    seconds, _ = timed(lambda: [write_deltalake(path, b, mode="append") for b in batches])
                    ctx.log(
                        CASE, f"run {run_no}/{ctx.runs} baseline: {seconds:.2f} s, {records / seconds:,.0f} records/s"
                    )
                    return seconds

                s_sec, b_sec = alternate(run_no, sparklog_side, baseline_side)
                hw = sum(cluster.list_offsets("bench").values())
                assert hw == records, (hw, records)
                assert DeltaTable(str(env.scratch / "delta")).version() == n_batches - 1

                ctx.log(CASE, f"run {run_no}/{ctx.runs} sparklog send() × {send_records:,} (info) …")
                producer = cluster.producer(acks=1)
                try:

                    def send_all() -> None:
                        for value in send_values:
                            producer.send("bench-send", value)
                        producer.flush()

                    send_sec, _ = timed(send_all)
                finally:
                    producer.close()
                send_table = cluster.replicas.leader_table("bench-send")
                send_snapshot = send_table.snapshot()
                commits = send_snapshot.version()
                send_files = len(send_table.files(send_snapshot))
                assert sum(cluster.list_offsets("bench-send").values()) == send_records
                ctx.log(
                    CASE,
                    f"run {run_no}/{ctx.runs} send(): {send_sec:.2f} s, {send_records / send_sec:,.0f} records/s, "
                    f"{commits} commits, {send_files} files",
                )
            finally:
                cluster.close()
            result.runs.append(
                run_record(
                    run_no,
                    records,
                    s_sec,
                    b_sec,
                    send_seconds=send_sec,
                    send_records_per_s=send_records / send_sec,
                    send_delta_version=commits,
                    send_live_files=send_files,
                )
            )
            sparklog_rates.append(records / s_sec)
            baseline_rates.append(records / b_sec)
            send_rates.append(send_records / send_sec)
    result.metrics.append(
        Metric(
            CASE,
            "send_arrow throughput",
            "records/s",
            sparklog_rates,
            baseline_rates,
            [Target("ratio", ">=", TARGET_RATIO, f"≥ {TARGET_RATIO:.1f}×")],
        )
    )
    result.metrics.append(
        Metric(
            CASE,
            "send() throughput (linger default)",
            "records/s",
            send_rates,
            None,
            [],
            note="informational: per-record send() + flush(), acks=1, default linger.ms/batch.size",
        )
    )
    return result
