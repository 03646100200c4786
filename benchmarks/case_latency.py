"""Case (d): produce-to-visible latency of single records, on a fresh topic and after 5,000 commits.

What it measures: for each of 1,000 sequential single-record sends (100-byte value,
``producer.send(topic, value, partition=0).result()`` with ``acks=1`` and the default
``linger.ms``), the time from the start of ``send`` until a reader polling in a
*separate process* with ``cluster.list_offsets(topic)`` sees a high watermark past the
record's offset (the poll's return time counts). p50 and p99 in ms, first on a fresh
1-partition topic, then again after 5,000 further single-record commits to that topic
(made with ``send_arrow`` of 1-row tables: one commit each, one live file each), and
the growth p(after) ÷ p(fresh). Also recorded: the ack latency (``send`` → ``result()``),
how long one poll takes, and how long the 5,000 filler commits took (first vs last 10%).

Why the baseline is fair: the same thing with no sparklog in between — one record per
commit to a plain Delta table with the *same delta-rs commit primitive sparklog uses*
(pyarrow writes a 1-row Snappy Parquet file, ``DeltaTable.create_write_transaction``
commits its add action on an incrementally updated snapshot), seen by a reader process
polling ``DeltaTable.update_incremental()`` until the version is reached; fresh table and
after 5,000 one-file commits, the same as sparklog. It is the floor that any design
committing each produce request to Delta inherits (including Delta's own commit-cost
growth with the number of live files). ``write_deltalake`` was not used: on this
delta-rs it costs more per commit and grows faster (≈0.08 ms per prior commit measured),
which would have made the baseline look worse than the primitive sparklog is built on.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
import uuid
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Event
from typing import Any

from benchmarks.harness import BenchContext, CaseResult, Metric, Target, alternate, median, percentile

CASE = "d"
TITLE = "single-record produce → visible latency"
SENDS = 1_000
PRIOR_COMMITS = 5_000
VALUE_BYTES = 100
TARGET_P50_MS = 25.0
TARGET_P99_MS = 100.0
TARGET_GROWTH = 1.5
POLL_PAUSE_S = 0.0005  # between polls, so the poller does not monopolise one of 2 cores
VISIBLE_TIMEOUT_S = 120.0


# -- pollers (run in spawned processes) -------------------------------------------------
def _summary(seconds: list[float]) -> dict[str, float | int]:
    ms = [s * 1000 for s in seconds]
    return {
        "polls": len(ms),
        "p50_ms": percentile(ms, 50),
        "p99_ms": percentile(ms, 99),
        "max_ms": max(ms, default=0.0),
    }


def _parent_alive() -> bool:
    # A killed benchmark must not leave its poller spinning as an orphan.
    return os.getppid() != 1


def _poll_sparklog(options: dict[str, str], topic: str, conn: Connection, stop: Event) -> None:
    """Report ``(high watermark of partition 0, monotonic time seen)`` whenever it changes."""
    import sparklog

    cluster = sparklog.connect(options)
    durations: list[float] = []
    last = None
    try:
        while not stop.is_set() and _parent_alive():
            started = time.monotonic()
            hw = cluster.list_offsets(topic)[0]
            seen = time.monotonic()
            durations.append(seen - started)
            if hw != last:
                conn.send((hw, seen))
                last = hw
            time.sleep(POLL_PAUSE_S)
    finally:
        conn.send(("stats", _summary(durations)))
        cluster.close()


def _poll_delta(path: str, conn: Connection, stop: Event) -> None:
    """Report ``(table version, monotonic time seen)`` whenever it changes."""
    from deltalake import DeltaTable

    dt = DeltaTable(path)
    durations: list[float] = []
    last = None
    while not stop.is_set() and _parent_alive():
        started = time.monotonic()
        dt.update_incremental()
        version = dt.version()
        seen = time.monotonic()
        durations.append(seen - started)
        if version != last:
            conn.send((version, seen))
            last = version
        time.sleep(POLL_PAUSE_S)
    conn.send(("stats", _summary(durations)))


class _Poller:
    """A polling reader process and the moments it saw each new value."""

    def __init__(self, target: Callable[..., None], *args: Any) -> None:
        ctx = mp.get_context("spawn")  # deltalake must not be forked with an initialised runtime
        self._conn, child = ctx.Pipe(duplex=False)
        self._stop = ctx.Event()
        self._proc = ctx.Process(target=target, args=(*args, child, self._stop), daemon=True)
        self._proc.start()
        child.close()
        self.value = -1
        self.seen = 0.0
        self.stats: dict[str, float | int] = {}
        self.wait_for(0)  # the first poll has happened: the reader is up

    def wait_for(self, threshold: int) -> float:
        """Monotonic time at which the reader first saw a value ``>= threshold``."""
        deadline = time.monotonic() + VISIBLE_TIMEOUT_S
        while self.value < threshold:
            if not self._conn.poll(max(0.0, deadline - time.monotonic())):
                raise TimeoutError(f"the polling reader did not see {threshold} within {VISIBLE_TIMEOUT_S} s")
            value, seen = self._conn.recv()
            if value == "stats":
                raise RuntimeError("the polling reader stopped early")
            self.value, self.seen = int(value), float(seen)
        return self.seen

    def close(self) -> None:
        self._stop.set()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and self._conn.poll(max(0.0, deadline - time.monotonic())):
            value, data = self._conn.recv()
            if value == "stats":
                self.stats = dict(data)
                break
        self._proc.join(10)
        if self._proc.is_alive():
            self._proc.terminate()


# -- writers ----------------------------------------------------------------------------
class _DeltaAppender:
    """The baseline writer: 1-row Parquet file + one ``create_write_transaction`` per record."""

    def __init__(self, path: str) -> None:
        import pyarrow as pa
        from deltalake import DeltaTable

        self.path = path
        self.schema = pa.schema([("value", pa.binary())])
        self.dt = DeltaTable.create(path, self.schema)
        self.version = self.dt.version()

    def append(self, value: bytes) -> int:
        """Commit one record; returns the table version it is visible at."""
        import pyarrow as pa
        import pyarrow.parquet as pq
        from deltalake.transaction import AddAction

        name = f"part-{uuid.uuid4().hex}.parquet"
        full = os.path.join(self.path, name)
        pq.write_table(pa.table({"value": pa.array([value], pa.binary())}), full, compression="snappy")
        self.dt.update_incremental()
        action = AddAction(name, os.path.getsize(full), {}, int(time.time() * 1000), True, '{"numRecords":1}')
        self.dt.create_write_transaction([action], "append", self.dt.schema())
        self.version += 1
        return self.version


def _measure(ctx: BenchContext, label: str, send_one: Callable[[], int], poller: _Poller, n: int) -> dict[str, Any]:
    """``n`` sequential sends; per send: start → visible (and start → ack) in ms."""
    visible: list[float] = []
    acked: list[float] = []
    for i in range(n):
        started = time.monotonic()
        threshold = send_one()
        ack = time.monotonic()
        seen = poller.wait_for(threshold)
        visible.append((seen - started) * 1000)
        acked.append((ack - started) * 1000)
        if (i + 1) % max(1, n // 4) == 0:
            ctx.log(CASE, f"{label}: {i + 1}/{n} sends, p50 so far {percentile(visible, 50):.1f} ms")
    return {
        "p50_ms": percentile(visible, 50),
        "p90_ms": percentile(visible, 90),
        "p99_ms": percentile(visible, 99),
        "max_ms": max(visible),
        "mean_ms": sum(visible) / len(visible),
        "ack_p50_ms": percentile(acked, 50),
        "ack_p99_ms": percentile(acked, 99),
        "latencies_ms": [round(v, 3) for v in visible],
    }


def _fill(ctx: BenchContext, label: str, commit_one: Callable[[], object], n: int) -> dict[str, Any]:
    """``n`` sequential single-record commits; per-commit times summarised."""
    times: list[float] = []
    for i in range(n):
        started = time.perf_counter()
        commit_one()
        times.append((time.perf_counter() - started) * 1000)
        if (i + 1) % max(1, n // 5) == 0:
            ctx.log(
                CASE,
                f"{label}: {i + 1}/{n} prior commits, last {n // 10 or 1}: median {median(times[-(n // 10 or 1) :]):.1f} ms",
            )
    tenth = max(1, n // 10)
    return {
        "commits": n,
        "seconds": sum(times) / 1000,
        "first_tenth_median_ms": median(times[:tenth]),
        "last_tenth_median_ms": median(times[-tenth:]),
    }


def _sparklog_side(ctx: BenchContext, env: Any, run_no: int, sends: int, prior: int) -> dict[str, Any]:
    import pyarrow as pa

    import sparklog

    value = os.urandom(VALUE_BYTES)
    one_row = pa.table({"value": pa.array([value], pa.binary())})
    cluster = sparklog.connect(env.options)
    producer = cluster.producer(acks=1)
    out: dict[str, Any] = {}
    try:
        cluster.create_topic("latency", partitions=1)

        def send_one() -> int:
            return producer.send("latency", value, partition=0).result(timeout=VISIBLE_TIMEOUT_S).offset + 1

        for phase in ("fresh", "after"):
            if phase == "after":
                out["prior"] = _fill(
                    ctx, f"run {run_no}/{ctx.runs} sparklog", lambda: producer.send_arrow("latency", one_row), prior
                )
            poller = _Poller(_poll_sparklog, env.options, "latency")
            try:
                out[phase] = _measure(ctx, f"run {run_no}/{ctx.runs} sparklog {phase}", send_one, poller, sends)
            finally:
                poller.close()
            out[phase]["poll"] = poller.stats
            ctx.log(
                CASE,
                f"run {run_no}/{ctx.runs} sparklog {phase}: p50 {out[phase]['p50_ms']:.1f} ms, p99 {out[phase]['p99_ms']:.1f} ms, poll p50 {poller.stats.get('p50_ms', float('nan')):.1f} ms",
            )
        table = cluster.replicas.leader_table("latency")
        snapshot = table.snapshot()
        out["live_files"] = len(table.files(snapshot))
        out["delta_version"] = snapshot.version()
        assert cluster.list_offsets("latency")[0] == 2 * sends + prior
    finally:
        producer.close()
        cluster.close()
    return out


def _baseline_side(ctx: BenchContext, env: Any, run_no: int, sends: int, prior: int) -> dict[str, Any]:
    value = os.urandom(VALUE_BYTES)
    path = str(env.scratch / "delta-latency")
    appender = _DeltaAppender(path)
    out: dict[str, Any] = {}
    for phase in ("fresh", "after"):
        if phase == "after":
            out["prior"] = _fill(ctx, f"run {run_no}/{ctx.runs} baseline", lambda: appender.append(value), prior)
        poller = _Poller(_poll_delta, path)
        try:
            out[phase] = _measure(
                ctx, f"run {run_no}/{ctx.runs} baseline {phase}", lambda: appender.append(value), poller, sends
            )
        finally:
            poller.close()
        out[phase]["poll"] = poller.stats
        ctx.log(
            CASE,
            f"run {run_no}/{ctx.runs} baseline {phase}: p50 {out[phase]['p50_ms']:.1f} ms, p99 {out[phase]['p99_ms']:.1f} ms",
        )
    out["delta_version"] = appender.version
    return out


def run(ctx: BenchContext) -> CaseResult:
    """Run case (d) ``ctx.runs`` times (sparklog, then the baseline, alternating order)."""
    sends = ctx.scaled(SENDS, minimum=20)
    prior = ctx.scaled(PRIOR_COMMITS, minimum=50)
    result = CaseResult(
        CASE,
        TITLE,
        __doc__ or "",
        params={
            "sends": sends,
            "prior_commits": prior,
            "value_bytes": VALUE_BYTES,
            "topic_partitions": 1,
            "producer_config": {"acks": "1", "other": "defaults (linger.ms=5)"},
            "reader": "separate process polling cluster.list_offsets(topic)",
            "baseline": "1-row Parquet + DeltaTable.create_write_transaction; reader polls DeltaTable.update_incremental()",
            "poll_pause_s": POLL_PAUSE_S,
        },
    )
    s_runs: list[dict[str, Any]] = []
    b_runs: list[dict[str, Any]] = []
    for run_no in range(1, ctx.runs + 1):
        with ctx.fresh_env(CASE, run_no) as env:
            s, b = alternate(
                run_no,
                lambda: _sparklog_side(ctx, env, run_no, sends, prior),
                lambda: _baseline_side(ctx, env, run_no, sends, prior),
            )
        s_runs.append(s)
        b_runs.append(b)
        result.runs.append(
            {
                "run": run_no,
                "order": "sparklog-first" if run_no % 2 else "baseline-first",
                "load_avg": list(os.getloadavg()),
                "sparklog": s,
                "baseline": b,
            }
        )

    def col(runs: list[dict[str, Any]], phase: str, key: str) -> list[float]:
        return [float(r[phase][key]) for r in runs]

    def growth(runs: list[dict[str, Any]], key: str) -> list[float]:
        return [float(r["after"][key]) / float(r["fresh"][key]) for r in runs]

    m = result.metrics
    m.append(
        Metric(
            CASE,
            "p50 visible, fresh topic",
            "ms",
            col(s_runs, "fresh", "p50_ms"),
            col(b_runs, "fresh", "p50_ms"),
            [Target("value", "<=", TARGET_P50_MS, f"≤ {TARGET_P50_MS:.0f} ms")],
            higher_is_better=False,
        )
    )
    m.append(
        Metric(
            CASE,
            "p99 visible, fresh topic",
            "ms",
            col(s_runs, "fresh", "p99_ms"),
            col(b_runs, "fresh", "p99_ms"),
            [Target("value", "<=", TARGET_P99_MS, f"≤ {TARGET_P99_MS:.0f} ms")],
            higher_is_better=False,
        )
    )
    m.append(
        Metric(
            CASE,
            f"p50 visible, after {prior:,} commits",
            "ms",
            col(s_runs, "after", "p50_ms"),
            col(b_runs, "after", "p50_ms"),
            [Target("value", "<=", TARGET_P50_MS, f"≤ {TARGET_P50_MS:.0f} ms")],
            higher_is_better=False,
        )
    )
    m.append(
        Metric(
            CASE,
            f"p99 visible, after {prior:,} commits",
            "ms",
            col(s_runs, "after", "p99_ms"),
            col(b_runs, "after", "p99_ms"),
            [Target("value", "<=", TARGET_P99_MS, f"≤ {TARGET_P99_MS:.0f} ms")],
            higher_is_better=False,
        )
    )
    m.append(
        Metric(
            CASE,
            "p50 growth after/fresh",
            "×",
            growth(s_runs, "p50_ms"),
            growth(b_runs, "p50_ms"),
            [Target("value", "<=", TARGET_GROWTH, f"≤ {TARGET_GROWTH:.1f}×")],
            higher_is_better=False,
        )
    )
    m.append(
        Metric(
            CASE,
            "p99 growth after/fresh",
            "×",
            growth(s_runs, "p99_ms"),
            growth(b_runs, "p99_ms"),
            [Target("value", "<=", TARGET_GROWTH, f"≤ {TARGET_GROWTH:.1f}×")],
            higher_is_better=False,
        )
    )
    m.append(
        Metric(
            CASE,
            "p50 ack (send→result), fresh",
            "ms",
            col(s_runs, "fresh", "ack_p50_ms"),
            None,
            [],
            higher_is_better=False,
            note="informational: lower bound of visibility",
        )
    )
    m.append(
        Metric(
            CASE,
            f"p50 ack (send→result), after {prior:,}",
            "ms",
            col(s_runs, "after", "ack_p50_ms"),
            None,
            [],
            higher_is_better=False,
            note="informational",
        )
    )
    m.append(
        Metric(
            CASE,
            "p50 one list_offsets poll, fresh",
            "ms",
            [float(r["fresh"]["poll"].get("p50_ms", "nan")) for r in s_runs],
            [float(r["fresh"]["poll"].get("p50_ms", "nan")) for r in b_runs],
            [],
            higher_is_better=False,
            note="informational: reader poll cost (baseline: update_incremental)",
        )
    )
    m.append(
        Metric(
            CASE,
            f"p50 one list_offsets poll, after {prior:,}",
            "ms",
            [float(r["after"]["poll"].get("p50_ms", "nan")) for r in s_runs],
            [float(r["after"]["poll"].get("p50_ms", "nan")) for r in b_runs],
            [],
            higher_is_better=False,
            note="informational: reader poll cost (baseline: update_incremental)",
        )
    )
    m.append(
        Metric(
            CASE,
            "prior commit, first 10%",
            "ms",
            [r["prior"]["first_tenth_median_ms"] for r in s_runs],
            [r["prior"]["first_tenth_median_ms"] for r in b_runs],
            [],
            higher_is_better=False,
            note="informational: median time of one filler commit (sparklog: send_arrow of 1 row)",
        )
    )
    m.append(
        Metric(
            CASE,
            "prior commit, last 10%",
            "ms",
            [r["prior"]["last_tenth_median_ms"] for r in s_runs],
            [r["prior"]["last_tenth_median_ms"] for r in b_runs],
            [],
            higher_is_better=False,
            note="informational: median time of one filler commit near 5,000 live files",
        )
    )
    return result
