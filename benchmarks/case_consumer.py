"""Case (e): light consumer read throughput — ``poll_arrow`` vs reading the same segment files with pyarrow.

What it measures: wall time for a light consumer (``cluster.consumer(None,
auto_offset_reset="earliest")``, no group) that assigns every partition of a topic of
2,000,000 records (value = 100 random bytes, keyless, 8 partitions, produced untimed with
``send_arrow`` in 16 batches of 125,000 rows: 2 segment files per partition) and calls
``poll_arrow(max_records=500_000)`` until it has every record. The client is connected
(ZooKeeper session) untimed, by a fresh ``sparklog.connect`` (no warm Delta snapshot). The
timing covers creating the consumer, ``assign``, opening the topic's Delta snapshot, every poll (high watermark from the Delta snapshot, position
resolution, file selection by stats, the Parquet read with the offset-range filter, the
``topic``/``partition`` columns, concatenation) and ``close``. Reported as records/s; the
records returned are checked (count per partition = high watermark, offsets contiguous).
Each side takes well under a second, so every run times 3 sparklog/baseline pairs
(alternating which goes first) and keeps their medians; one untimed warm-up before run 1.

Why the baseline is fair: it reads *the same Parquet files* — the live files of the topic's
Delta snapshot (``DeltaTable(root).file_uris()``, listing included in the timing), each
read whole with ``pyarrow.parquet.read_table`` (every column the consumer returns: key,
value, offset, timestamp, timestampType, headers). Same bytes, same decoder, no offsets,
no filter, no ZooKeeper: the floor of "read this topic's data in Python".

Informational (no target): ``poll_arrow`` with a small ``max_records`` (10,000) over the first
200,000 records, i.e. the per-poll overhead when polls are small; and ``poll()`` with
the default ``max.poll.records`` (500) over the first 50,000 records, i.e. the cost of
turning rows into ``ConsumerRecord`` objects plus per-poll overhead.
"""

from __future__ import annotations

import time
from typing import Any

from benchmarks.case_light_producer import random_values
from benchmarks.harness import BenchContext, CaseResult, Metric, alternate, fill_topic, median, run_record, timed

CASE = "e"
TITLE = "light consumer poll_arrow throughput (2M records)"
RECORDS = 2_000_000
BATCH_ROWS = 125_000
TOPIC_PARTITIONS = 8
MAX_RECORDS = 500_000
SMALL_POLL_RECORDS = 10_000
SMALL_POLL_TOTAL = 200_000
POLL_TOTAL = 50_000
TOPIC = "bench"
REPEATS = 3  # sparklog/baseline pairs per run (the run's figure is their median)


def _consume(
    options: dict[str, str], partitions: int, expected: int, max_records: int, arrow: bool = True
) -> tuple[float, dict[int, list[tuple[int, int]]]]:
    """Consume ``expected`` records from offset 0 -> (seconds, partition -> [(first, last)] of each piece).

    The client connects (ZooKeeper session) untimed: an application connects once. The
    timing starts at ``cluster.consumer(...)``, so opening the topic's Delta snapshot is in
    it, as the baseline's ``DeltaTable(root)`` is.
    """
    import numpy as np

    import sparklog

    pieces: dict[int, list[tuple[int, int]]] = {}
    with sparklog.connect(options) as cluster:
        cluster.partitions_of(TOPIC)  # the session is up (metadata read), untimed
        started = time.perf_counter()
        consumer = cluster.consumer(None, auto_offset_reset="earliest")
        try:
            consumer.assign([(TOPIC, p) for p in range(partitions)])
            total = 0
            empty = 0
            while total < expected:
                if arrow:
                    batch = consumer.poll_arrow(timeout_ms=1000, max_records=max_records)
                    n = batch.num_rows
                    if n:
                        parts = batch.column("partition").to_numpy()
                        offsets = batch.column("offset").to_numpy()
                        # pieces are contiguous runs of one partition each (partition, offset order)
                        cuts = np.flatnonzero(np.diff(parts)) + 1
                        for lo, hi in zip([0, *cuts.tolist()], [*cuts.tolist(), n], strict=False):
                            pieces.setdefault(int(parts[lo]), []).append((int(offsets[lo]), int(offsets[hi - 1])))
                else:
                    records = consumer.poll(timeout_ms=1000, max_records=max_records)
                    n = len(records)
                    for r in records:
                        pieces.setdefault(r.partition, []).append((r.offset, r.offset))
                total += n
                empty = 0 if n else empty + 1
                if empty > 10:
                    raise AssertionError(f"consumer stalled at {total:,} of {expected:,} records")
        finally:
            consumer.close()
        seconds = time.perf_counter() - started
    return seconds, pieces


def _check_contiguous(
    pieces: dict[int, list[tuple[int, int]]], expected_end: dict[int, int] | None, total: int
) -> None:
    seen = 0
    for p, ranges in pieces.items():
        next_offset = 0
        for first, last in ranges:
            assert first == next_offset, f"partition {p}: expected offset {next_offset}, got {first}"
            assert last >= first
            next_offset = last + 1
            seen += last - first + 1
        if expected_end is not None:
            assert next_offset == expected_end[p], (
                f"partition {p}: read up to {next_offset}, high watermark {expected_end[p]}"
            )
    assert seen >= total, (seen, total)


def _raw_read(table_root: str) -> tuple[int, int]:
    """Read every live file of the Delta snapshot whole with pyarrow; -> (rows, value bytes)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    rows = 0
    value_bytes = 0
    for uri in DeltaTable(table_root).file_uris():
        data = pq.read_table(uri)
        rows += data.num_rows
        value_bytes += pc.sum(pc.binary_length(data.column("value"))).as_py() or 0
    return rows, value_bytes


def run(ctx: BenchContext) -> CaseResult:
    """Run case (e) ``ctx.runs`` times on a freshly produced topic; sparklog and baseline alternate."""
    import sparklog

    records = ctx.scaled(RECORDS, minimum=8000)
    batch_rows = min(BATCH_ROWS, records // TOPIC_PARTITIONS)
    n_batches = max(TOPIC_PARTITIONS, records // batch_rows)
    records = n_batches * batch_rows
    small_total = min(records, ctx.scaled(SMALL_POLL_TOTAL, minimum=2000))
    poll_total = min(records, ctx.scaled(POLL_TOTAL, minimum=1000))
    result = CaseResult(
        CASE,
        TITLE,
        __doc__ or "",
        params={
            "records": records,
            "value_bytes": 100,
            "topic_partitions": TOPIC_PARTITIONS,
            "fill": f"send_arrow × {n_batches} batches of {batch_rows:,} rows (keyless: one partition per batch), acks=1",
            "consumer": f"cluster.consumer(None, auto_offset_reset='earliest'); assign all; poll_arrow(max_records={MAX_RECORDS:,})",
            "baseline": "DeltaTable(root).file_uris() + pyarrow.parquet.read_table(file) per live file (all columns)",
            "info_small_polls": f"poll_arrow(max_records={SMALL_POLL_RECORDS:,}) over the first {small_total:,} records",
            "info_poll": f"poll() with max.poll.records=500 over the first {poll_total:,} records",
        },
    )
    batches = [random_values(batch_rows, seed) for seed in range(n_batches)]
    sparklog_rates: list[float] = []
    baseline_rates: list[float] = []
    small_rates: list[float] = []
    poll_rates: list[float] = []
    for run_no in range(1, ctx.runs + 1):
        with ctx.fresh_env(CASE, run_no) as env:
            with sparklog.connect(env.options) as cluster:
                ctx.log(CASE, f"run {run_no}/{ctx.runs} producing {records:,} records (untimed) …")
                filled = fill_topic(cluster, TOPIC, TOPIC_PARTITIONS, batches)
                hw, table_root, live_files = filled.high_watermarks, filled.table_root, filled.live_files
            if run_no == 1:
                ctx.log(CASE, "warm-up: both sides once, untimed …")
                _consume(env.options, TOPIC_PARTITIONS, records, MAX_RECORDS)
                _raw_read(table_root)

            def sparklog_side() -> float:
                seconds, pieces = _consume(env.options, TOPIC_PARTITIONS, records, MAX_RECORDS)
                _check_contiguous(pieces, hw, records)
                ctx.log(
                    CASE,
                    f"run {run_no}/{ctx.runs} sparklog poll_arrow: {seconds:.2f} s, {records / seconds:,.0f} records/s",
                )
                return seconds

            def baseline_side() -> float:
                seconds, (rows, value_bytes) = timed(lambda: _raw_read(table_root))
                assert rows == records and value_bytes == records * 100, (rows, value_bytes)
                ctx.log(
                    CASE,
                    f"run {run_no}/{ctx.runs} baseline pyarrow read: {seconds:.2f} s, {records / seconds:,.0f} records/s",
                )
                return seconds

            # Each side takes < 1 s: repeat the pair (alternating order) and keep the run's medians.
            pairs = [alternate(run_no + i, sparklog_side, baseline_side) for i in range(REPEATS)]
            s_all, b_all = [p[0] for p in pairs], [p[1] for p in pairs]
            s_sec, b_sec = median(s_all), median(b_all)

            small_sec, pieces = _consume(env.options, TOPIC_PARTITIONS, small_total, SMALL_POLL_RECORDS)
            _check_contiguous(pieces, None, small_total)
            small_read = sum(last - first + 1 for r in pieces.values() for first, last in r)
            poll_sec, pieces = _consume(env.options, TOPIC_PARTITIONS, poll_total, 500, arrow=False)
            poll_read = sum(len(r) for r in pieces.values())
            ctx.log(
                CASE,
                f"run {run_no}/{ctx.runs} info: poll_arrow({SMALL_POLL_RECORDS:,}) {small_read / small_sec:,.0f} records/s; "
                f"poll() {poll_read / poll_sec:,.0f} records/s",
            )
            extra: dict[str, Any] = {
                "live_files": live_files,
                "sparklog_seconds_all": s_all,
                "baseline_seconds_all": b_all,
                "small_polls_seconds": small_sec,
                "small_polls_records": small_read,
                "poll_seconds": poll_sec,
                "poll_records": poll_read,
            }
            result.runs.append(run_record(run_no, records, s_sec, b_sec, **extra))
            sparklog_rates.append(records / s_sec)
            baseline_rates.append(records / b_sec)
            small_rates.append(small_read / small_sec)
            poll_rates.append(poll_read / poll_sec)
    result.metrics.append(
        Metric(
            CASE,
            f"poll_arrow(max_records={MAX_RECORDS:,}) throughput",
            "records/s",
            sparklog_rates,
            baseline_rates,
            [],
            note="no target in the issue: the figure and the ratio to a raw pyarrow read of the same files",
        )
    )
    result.metrics.append(
        Metric(
            CASE,
            f"poll_arrow(max_records={SMALL_POLL_RECORDS:,}) throughput",
            "records/s",
            small_rates,
            None,
            [],
            note=f"informational: first {small_total:,} records, per-poll overhead",
        )
    )
    result.metrics.append(
        Metric(
            CASE,
            "poll() throughput (max.poll.records=500)",
            "records/s",
            poll_rates,
            None,
            [],
            note=f"informational: first {poll_total:,} records as ConsumerRecord objects",
        )
    )
    return result
