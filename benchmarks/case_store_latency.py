"""Case (w): one broker whose log dir is on S3, at the latency of S3 Express One Zone and of S3
Standard: produce and end-to-end latency, bulk throughput against local disk, store requests
and their cost, against raw delta-rs commits on the same store.

What it measures: moto's S3 server (a child process) behind the counting proxy
(:class:`sparklog.testing.store_proxy.StoreProxy`, :func:`benchmarks.store.proxied_s3`), which
delays every store request by a latency drawn from a profile's log-normal — ``express`` (p50
5 ms, p99 15 ms: S3 Express One Zone PUTs) and ``standard`` (p50 60 ms, p99 200 ms: S3
Standard PUTs) — and injects no errors. Per profile, in a fresh cluster: one broker agent whose
log dir is an ``s3://`` prefix reached through the proxy, a topic of 6 partitions
(replication factor 1) led by it, and in turn:

1. **ack latency** (confluent-kafka, ``acks=all``, ``linger.ms=0``, keyless 100-byte values,
   latency = ``produce()`` → delivery report): (a) one producer sends 500 records one at a time,
   each after the previous one's report (20 untimed first); (b) 16 producer processes
   (:mod:`benchmarks.fleet`) together offer 50,000 records/s for 10 s, open loop (case (n)'s
   :func:`~benchmarks.case_wire_latency.paced_step`, ``message.timeout.ms`` 10 s): delivered
   rate, p50/p99. **Target on both p99s: ≤ 2 × the profile's PUT p99 + 20 ms** (50 ms express,
   420 ms standard): a round is a segment PUT and then the commit's conditional PUT.
2. **produce → consume** (:func:`benchmarks.wire.end_to_end`, as case (o)): a consumer
   long-polling every partition from its end (``fetch.wait.max.ms`` 500), one record at a time
   produced, the send time in the value, 500 records. **Target: p99 ≤ that run's ack p99 + 50 ms.**
3. **bulk throughput**: 3,000,000 keyed 108-byte records from 2 producer processes (case
   (m)'s :func:`~benchmarks.case_wire_produce.flood`: ``acks=all``, lz4, ``linger.ms=5``,
   librdkafka's 1 MB batches, up to 600,000 records a producer unacknowledged
   (``queue.buffering.max.messages``; librdkafka's default is 100,000); a warm-up of 1% first): records/s and MB/s of payload, against
   the same with the broker's log dir on local disk (measured once per run, no proxy).
   **Target: ≥ 0.8 × local disk.**
4. **store requests** the proxy counted: per commit round (a round = one landed conditional
   PUT of a ``_delta_log`` commit) in (1a), by kind (PUT, PUT_IF_ABSENT, GET, HEAD, LIST);
   during 60 s idle after (1a), once the store saw no request for 3 s (the checkpoint the
   last commits started is theirs), per minute (**target: 0**); and the requests' cost per
   GiB of payload produced in (3) and in (1b) at S3 Standard list prices
   (:data:`benchmarks.store.PRICE_PER_1000`: PUT/POST/LIST $0.005 per 1,000, GET/HEAD
   $0.0004 per 1,000). Every phase's raw counts are in the JSON.
5. **baseline**: one process appending one one-row Parquet file per commit with delta-rs
   (``write_deltalake(mode="append")``) to a table on the same store through the same proxy
   and profile, for 20 s (case (v)'s baseline, :func:`benchmarks.store.delta_rs_commits`): its
   commit latency p50/p99 is the baseline of the one-at-a-time ack latency (the ratio), its
   requests per commit that of the requests per round.

``--scale`` multiplies the record counts (at least 50 one at a time, 12,000 bulk), the offered
rate (at least 1,000/s) and the durations (step at least 2 s, idle 10 s, baseline 3 s). The
idle count is scaled to a minute.

Order per profile: (1a), the idle period of (4), (1b), (3), (2), then the baseline; the local
disk broker goes first in each run. A phase that fails (e.g. the consumer of (2) never gets a
record) is reported — its error in the JSON (``errors``) and the progress line, its rows
empty (n/a) — and the next phase runs on the same broker.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.case_wire_latency import CURVE_CONFIG, paced_step
from benchmarks.case_wire_produce import PRODUCER_CONFIG as FLOOD_CONFIG
from benchmarks.case_wire_produce import flood
from benchmarks.fleet import Fleet
from benchmarks.harness import BenchContext, CaseResult, Metric, Target, median
from benchmarks.store import (
    PRICE_PER_1000,
    PRICES_NOTE,
    delta_rs_commits,
    landed_commits,
    new_bucket,
    proxied_s3,
    request_cost,
)
from benchmarks.wire import (
    PARTITIONS,
    VALUE_BYTES,
    Endpoint,
    end_to_end,
    p50_p99,
    sequential_sends,
    settle,
    sparklog_broker,
)

if TYPE_CHECKING:
    from sparklog.testing.store_proxy import FaultPlan, StoreProxy

CASE = "w"
TITLE = "one broker on S3 (express / standard latency): ack and end-to-end latency, bulk vs local disk, store requests"
TOPIC = "store-latency"
SENDS = 500
WARMUP_SENDS = 20
PRODUCERS = 16
RATE = 50_000
STEP_S = 10.0
BULK_RECORDS = 3_000_000  # several seconds of flood: 500,000 took under a second, 10 rounds on a store,
# and the first and last rounds' latency weighed as much as the rate between them
BULK_PROCESSES = 2
BULK_RECORD_BYTES = VALUE_BYTES + 8  # benchmarks.wire.record_pool: 8-byte keys
IDLE_S = 60.0
QUIET_S = 3.0  # no store request for this long: the broker is done with the last commits
BASELINE_S = 20.0
PRODUCER_CONFIG: dict[str, Any] = {"acks": "all", "linger.ms": 0, "message.timeout.ms": 60_000}
# A bulk load keeps enough records unacknowledged to cover a round's latency (Little's law:
# records in flight = records/s × seconds each waits), as the object-storage Kafkas tell their
# users to; librdkafka's default window of 100,000 records a producer held 2 producers to
# ~390k records/s on standard latency whatever the broker did. Local disk gets the same.
BULK_CONFIG: dict[str, Any] = {**FLOOD_CONFIG, "queue.buffering.max.messages": 600_000}
CONSUMER_CONFIG: dict[str, Any] = {"fetch.wait.max.ms": 500}  # librdkafka's default: a long poll
E2E_SLACK_MS = 50.0
ACK_SLACK_MS = 20.0
BULK_TARGET_RATIO = 0.8
KINDS = ("PUT", "PUT_IF_ABSENT", "GET", "HEAD", "LIST")
GIB = 2**30


@dataclass(frozen=True)
class Sizes:
    """The case's counts and durations at the context's scale."""

    sends: int
    rate: int
    step_s: float
    bulk_records: int
    bulk_warmup: int
    idle_s: float
    baseline_s: float


def sizes(ctx: BenchContext) -> Sizes:
    bulk = ctx.scaled(BULK_RECORDS, minimum=12_000) // 12 * 12
    return Sizes(
        sends=ctx.scaled(SENDS, minimum=50),
        rate=ctx.scaled(RATE, minimum=1_000),
        step_s=max(2.0, STEP_S * ctx.scale),
        bulk_records=bulk,
        bulk_warmup=max(1_000, bulk // 100),
        idle_s=max(10.0, IDLE_S * ctx.scale),
        baseline_s=max(3.0, BASELINE_S * ctx.scale),
    )


def profiles() -> dict[str, FaultPlan]:
    from sparklog.testing.store_proxy import EXPRESS, STANDARD

    return {"express": EXPRESS, "standard": STANDARD}


def ack_bound_ms(plan: FaultPlan) -> float:
    """The ack p99 target of a profile: 2 × its PUT p99 + 20 ms."""
    return 2 * plan.latency_p99_ms + ACK_SLACK_MS


def per_round(counts: dict[str, int]) -> dict[str, float]:
    """Requests of each kind per commit round (NaN when no commit landed)."""
    rounds = landed_commits(counts)
    figures = {kind: counts.get(kind, 0) / rounds if rounds else math.nan for kind in (*KINDS, "PUT_IF_ABSENT 412")}
    return {**figures, "rounds": rounds}


def cost_per_gib(counts: dict[str, int], payload_bytes: float) -> float:
    return request_cost(counts) / (payload_bytes / GIB) if payload_bytes else math.nan


def _endpoint(broker: Any) -> Endpoint:
    return Endpoint("sparklog", broker.bootstrap_servers, TOPIC, PARTITIONS, broker.pid, broker.metrics_url)


def bulk(fleet: Fleet, endpoint: Endpoint, size: Sizes, proxy: StoreProxy | None = None) -> dict[str, Any]:
    """An untimed warm-up flood, then the timed one; -> its figures (and the proxy's counts over it)."""
    flood(fleet, endpoint, 1, 0, size.bulk_warmup, BULK_CONFIG)
    if proxy is not None:
        proxy.reset()
    figures: dict[str, Any] = dict(
        flood(fleet, endpoint, BULK_PROCESSES, size.bulk_warmup, size.bulk_records, BULK_CONFIG)
    )
    figures["mb_per_s"] = figures["records_per_s"] * BULK_RECORD_BYTES / 1e6
    if proxy is not None:
        figures["counts"] = proxy.counts()
    return figures


def measure_local(ctx: BenchContext, fleet: Fleet, run_no: int, size: Sizes) -> dict[str, Any]:
    """Bulk throughput with the broker's log dir on local disk."""
    with ctx.fresh_env(CASE, f"{run_no}-local") as env, sparklog_broker(env, TOPIC, PARTITIONS) as broker:
        return bulk(fleet, _endpoint(broker), size)


def store_quiet(proxy: StoreProxy, quiet_s: float = QUIET_S, limit_s: float = 120.0) -> float:
    """Wait until the proxy has seen no request for ``quiet_s`` (the checkpoint the last
    commits started, in the broker's child process, is their cost, not the idle period's);
    -> seconds waited, at most ``limit_s``."""
    started = time.monotonic()
    seen, since = proxy.counts(), time.monotonic()
    while time.monotonic() - since < quiet_s and time.monotonic() - started < limit_s:
        time.sleep(0.2)
        now = proxy.counts()
        if now != seen:
            seen, since = now, time.monotonic()
    return time.monotonic() - started


def _one_at_a_time(proxy: StoreProxy, bootstrap: str, size: Sizes) -> dict[str, Any]:
    """(1a) one record at a time, then (4) an idle period once the store is quiet."""
    sequential_sends(bootstrap, TOPIC, WARMUP_SENDS, PRODUCER_CONFIG, warmup=0)
    proxy.reset()
    acks = sequential_sends(bootstrap, TOPIC, size.sends, PRODUCER_CONFIG, warmup=0)
    counts = proxy.counts()
    quiet_after_s = store_quiet(proxy)
    proxy.reset()
    time.sleep(size.idle_s)
    idle = proxy.counts()
    rounds = per_round(counts)
    p50, p99 = p50_p99(acks)
    return {
        "ack_p50_ms": p50,
        "ack_p99_ms": p99,
        "ack_max_ms": max(acks),
        **{f"{kind} per round": rounds[kind] for kind in KINDS},
        "rounds_per_record": rounds["rounds"] / size.sends,
        "one_at_a_time_cost_per_gib": cost_per_gib(counts, size.sends * VALUE_BYTES),
        "idle_requests_per_min": sum(n for kind, n in idle.items() if " " not in kind) * 60 / size.idle_s,
        "quiet_after_s": quiet_after_s,
        "requests": {"one_at_a_time": counts, "idle": idle},
    }


def _paced(fleet: Fleet, proxy: StoreProxy, endpoint: Endpoint, size: Sizes) -> dict[str, Any]:
    """(1b) 16 producer processes at the offered rate (their one warm-up record each is counted)."""
    proxy.reset()
    step = paced_step(fleet, endpoint, PRODUCERS, size.rate, size.step_s)
    counts = proxy.counts()
    return {
        **{f"paced_{k}": step[k] for k in ("delivered_per_s", "sent_per_s", "p50_ms", "p99_ms", "failed")},
        "paced": step,
        "paced_cost_per_gib": cost_per_gib(counts, (step["delivered"] + PRODUCERS) * VALUE_BYTES),
        "requests": {"paced": counts},
    }


def _end_to_end(proxy: StoreProxy, bootstrap: str, plan: FaultPlan, size: Sizes) -> dict[str, Any]:
    """(2) produce → consume, once the broker is done with what the phases before left queued."""
    settle_s = settle(bootstrap, TOPIC, PRODUCER_CONFIG, quiet_ms=ack_bound_ms(plan), limit_s=30.0)
    proxy.reset()
    e2e = end_to_end(bootstrap, TOPIC, PARTITIONS, size.sends, PRODUCER_CONFIG, CONSUMER_CONFIG, warmup=WARMUP_SENDS)
    e50, e99 = p50_p99(e2e.e2e_ms)
    a50, a99 = p50_p99(e2e.ack_ms)
    return {
        "settle_s": settle_s,
        "e2e_p50_ms": e50,
        "e2e_p99_ms": e99,
        "e2e_max_ms": max(e2e.e2e_ms),
        "e2e_ack_p50_ms": a50,
        "e2e_ack_p99_ms": a99,
        "requests": {"end_to_end": proxy.counts()},
    }


def _bulk(fleet: Fleet, proxy: StoreProxy, endpoint: Endpoint, size: Sizes) -> dict[str, Any]:
    """(3) bulk throughput on the store."""
    flooded = bulk(fleet, endpoint, size, proxy)
    counts = flooded.pop("counts")
    return {
        "bulk_records_per_s": flooded["records_per_s"],
        "bulk_mb_per_s": flooded["mb_per_s"],
        "bulk": flooded,
        "bulk_cost_per_gib": cost_per_gib(counts, size.bulk_records * BULK_RECORD_BYTES),
        "requests": {"bulk": counts},
    }


def measure_store(
    ctx: BenchContext, fleet: Fleet, proxy: StoreProxy, name: str, plan: FaultPlan, run_no: int, size: Sizes
) -> dict[str, Any]:
    """Phases (1)–(4) against one broker whose log dir is on the proxied store (the profile in
    force). A phase that fails is reported (``errors``; its figures missing: NaN in the table)
    and the next one runs: a benchmark reports what it saw."""
    log_dir = f"s3://{new_bucket(proxy, f'bench-w-{name}')}/cluster"
    figures: dict[str, Any] = {"requests": {}, "errors": {}}
    with ctx.fresh_env(CASE, f"{run_no}-{name}") as env, sparklog_broker(env, TOPIC, PARTITIONS, log_dir=log_dir) as b:
        endpoint, bootstrap = _endpoint(b), b.bootstrap_servers
        phases: dict[str, Callable[[], dict[str, Any]]] = {
            "one at a time": lambda: _one_at_a_time(proxy, bootstrap, size),
            f"{PRODUCERS} producers": lambda: _paced(fleet, proxy, endpoint, size),
            "bulk": lambda: _bulk(fleet, proxy, endpoint, size),
            "produce → consume": lambda: _end_to_end(proxy, bootstrap, plan, size),
        }
        for phase, measure in phases.items():
            started = time.monotonic()
            try:
                found = measure()
            except Exception as exc:  # noqa: BLE001 - reported, and the other phases still run
                figures["errors"][phase] = f"{type(exc).__name__}: {exc}"
                ctx.log(CASE, f"{name}: {phase} FAILED after {time.monotonic() - started:.0f} s: {exc}")
                continue
            figures["requests"].update(found.pop("requests"))
            figures.update(found)
            ctx.log(CASE, f"{name}: {phase} done in {time.monotonic() - started:.0f} s")
    figures["per_round"] = {phase: per_round(c) for phase, c in figures["requests"].items() if phase != "idle"}
    return figures


def measure_baseline(proxy: StoreProxy, name: str, size: Sizes) -> dict[str, Any]:
    """Raw delta-rs commits on the proxied store (the profile in force)."""
    side = delta_rs_commits(proxy, f"bench-w-raw-{name}", 1, size.baseline_s)
    rounds = per_round(side["counts"])
    p50, p99 = p50_p99(side["acks"])
    return {
        "ack_p50_ms": p50,
        "ack_p99_ms": p99,
        "commits": len(side["acks"]),
        "commits_per_s": len(side["acks"]) / side["seconds"],
        **{f"{kind} per round": rounds[kind] for kind in KINDS},
        "per_round": rounds,
        "requests": side["counts"],
    }


def show(name: str, plan: FaultPlan, ours: dict[str, Any], raw: dict[str, Any], local: dict[str, Any]) -> str:
    """A profile's progress line, each target checked (a failed phase's figures: nan, n/a)."""

    def f(key: str, figures: dict[str, Any] = ours) -> float:
        value = figures.get(key)
        return math.nan if value is None else float(value)

    def verdict(value: float, op: str, bound: float) -> str:
        if math.isnan(value) or math.isnan(bound):
            return "n/a"
        return "pass" if (value <= bound if op == "<=" else value >= bound) else "MISS"

    bound = ack_bound_ms(plan)
    e2e_bound = f("e2e_ack_p99_ms") + E2E_SLACK_MS
    ratio = f("bulk_records_per_s") / f("records_per_s", local)
    rounds = "/".join(f"{f(f'{k} per round'):.2f}" for k in KINDS)
    return (
        f"{name}: one at a time p50/p99 {f('ack_p50_ms'):.1f}/{f('ack_p99_ms'):.1f} ms "
        f"({verdict(f('ack_p99_ms'), '<=', bound)} ≤ {bound:g}); {PRODUCERS} producers "
        f"{f('paced_delivered_per_s'):,.0f} rec/s p50/p99 {f('paced_p50_ms'):.1f}/{f('paced_p99_ms'):.1f} ms "
        f"({verdict(f('paced_p99_ms'), '<=', bound)}); e2e p99 {f('e2e_p99_ms'):.1f} ms "
        f"({verdict(f('e2e_p99_ms'), '<=', e2e_bound)} ≤ {e2e_bound:.0f}); bulk {f('bulk_records_per_s'):,.0f} rec/s "
        f"= {ratio:.2f}× local ({verdict(ratio, '>=', BULK_TARGET_RATIO)}); per round {rounds} "
        f"{'/'.join(KINDS)}; idle {f('idle_requests_per_min'):.0f}/min "
        f"({verdict(f('idle_requests_per_min'), '<=', 0.0)}); delta-rs p50/p99 "
        f"{f('ack_p50_ms', raw):.0f}/{f('ack_p99_ms', raw):.0f} ms"
        + (f"; FAILED: {', '.join(ours['errors'])}" if ours.get("errors") else "")
    )


def run(ctx: BenchContext) -> CaseResult:
    from sparklog.testing.store_proxy import FaultPlan

    size = sizes(ctx)
    plans = profiles()
    result = CaseResult(
        CASE,
        TITLE,
        __doc__ or "",
        params={
            **asdict(size),
            "profiles": {name: asdict(plan) for name, plan in plans.items()},
            "ack_p99_targets_ms": {name: ack_bound_ms(plan) for name, plan in plans.items()},
            "partitions": PARTITIONS,
            "producers": PRODUCERS,
            "bulk_processes": BULK_PROCESSES,
            "producer_config": PRODUCER_CONFIG,
            "paced_producer_config": CURVE_CONFIG,
            "bulk_producer_config": BULK_CONFIG,
            "consumer_config": CONSUMER_CONFIG,
            "prices_per_1000_requests_usd": PRICE_PER_1000,
        },
    )
    ctx.log(CASE, f"request costs at {PRICES_NOTE}")
    with Fleet(PRODUCERS) as fleet, proxied_s3(Path(ctx.work_dir) / "store-w") as proxy:
        for run_no in range(1, ctx.runs + 1):
            row: dict[str, Any] = {"run": run_no}
            ctx.log(CASE, f"run {run_no}/{ctx.runs}: bulk with the log dir on local disk")
            row["local"] = measure_local(ctx, fleet, run_no, size)
            for name, plan in plans.items():
                latency = f"{plan.latency_p50_ms:g}/{plan.latency_p99_ms:g} ms"
                ctx.log(CASE, f"run {run_no}/{ctx.runs}: {name}, every store request delayed (p50/p99 {latency})")
                proxy.inject(plan)
                try:
                    ours = measure_store(ctx, fleet, proxy, name, plan, run_no, size)
                    raw = measure_baseline(proxy, name, size)
                finally:
                    proxy.inject(FaultPlan())
                row[name] = {"sparklog": ours, "baseline": raw}
                ctx.log(CASE, f"run {run_no}: {show(name, plan, ours, raw, row['local'])}")
            row["load_avg"] = list(os.getloadavg())
            result.runs.append(row)
    for name, plan in plans.items():
        result.metrics.extend(metrics(result.runs, name, plan, size))
    result.notes.append(f"request costs at {PRICES_NOTE}")
    return result


def _column(rows: list[dict[str, Any]], *path: str) -> list[float]:
    """The figure at ``path`` in every run (missing: a phase failed → NaN)."""
    values = []
    for row in rows:
        value: Any = row
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        values.append(math.nan if value is None else float(value))
    return values


def metrics(rows: list[dict[str, Any]], name: str, plan: FaultPlan, size: Sizes) -> list[Metric]:
    """A profile's table rows: sparklog's figures against delta-rs's (latency, requests) or
    local disk's (bulk) as the baseline, or alone."""

    def ours(key: str) -> list[float]:
        return _column(rows, name, "sparklog", key)

    def raw(key: str) -> list[float]:
        return _column(rows, name, "baseline", key)

    bound = ack_bound_ms(plan)
    ack = [Target("value", "<=", bound, f"≤ 2 × PUT p99 + {ACK_SLACK_MS:g} = {bound:g} ms")]
    e2e_bound = median(ours("e2e_ack_p99_ms")) + E2E_SLACK_MS
    value = "" if math.isnan(e2e_bound) else f" = {e2e_bound:.0f}"
    e2e = [Target("value", "<=", e2e_bound, f"≤ ack p99 + {E2E_SLACK_MS:g}{value} ms")]
    bulk = [Target("ratio", ">=", BULK_TARGET_RATIO, f"≥ {BULK_TARGET_RATIO:g}× local disk")]
    idle = [Target("value", "<=", 0.0, "0")]
    step = f"{PRODUCERS} producers, {size.rate / 1000:g}k rec/s offered"
    p = f"{name}: "
    out = [
        Metric(
            CASE,
            p + "one at a time: ack p50",
            "ms",
            ours("ack_p50_ms"),
            raw("ack_p50_ms"),
            higher_is_better=False,
            baseline_label="delta-rs",
        ),
        Metric(
            CASE,
            p + "one at a time: ack p99",
            "ms",
            ours("ack_p99_ms"),
            raw("ack_p99_ms"),
            ack,
            False,
            baseline_label="delta-rs",
        ),
        Metric(CASE, p + f"{step}: delivered", "records/s", ours("paced_delivered_per_s")),
        Metric(CASE, p + f"{step}: ack p50", "ms", ours("paced_p50_ms"), higher_is_better=False),
        Metric(CASE, p + f"{step}: ack p99", "ms", ours("paced_p99_ms"), None, ack, False),
        Metric(CASE, p + "produce → consume p50", "ms", ours("e2e_p50_ms"), higher_is_better=False),
        Metric(CASE, p + "produce → consume p99", "ms", ours("e2e_p99_ms"), None, e2e, False),
        Metric(
            CASE,
            p + "bulk: records/s",
            "records/s",
            ours("bulk_records_per_s"),
            _column(rows, "local", "records_per_s"),
            bulk,
            baseline_label="local disk",
        ),
        Metric(
            CASE,
            p + "bulk: MB/s",
            "MB/s",
            ours("bulk_mb_per_s"),
            _column(rows, "local", "mb_per_s"),
            baseline_label="local disk",
        ),
    ]
    for kind in KINDS:
        key = f"{kind} per round"
        out.append(
            Metric(
                CASE,
                p + f"store requests per commit round: {kind}",
                "requests",
                ours(key),
                raw(key),
                higher_is_better=False,
                baseline_label="delta-rs",
            )
        )
    out += [
        Metric(
            CASE, p + "store requests per idle minute", "requests", ours("idle_requests_per_min"), None, idle, False
        ),
        Metric(
            CASE,
            p + "bulk: request cost per GiB produced (S3 Standard prices)",
            "$/GiB",
            ours("bulk_cost_per_gib"),
            higher_is_better=False,
        ),
        Metric(
            CASE,
            p + f"{step}: request cost per GiB produced",
            "$/GiB",
            ours("paced_cost_per_gib"),
            higher_is_better=False,
        ),
    ]
    return out
