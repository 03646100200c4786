"""Case (v): one topic's commit sequence on shared object storage, its partitions led by 1, 2
and 4 brokers (DESIGN §16), against raw delta-rs commits of the same rounds on the same store.

What it measures: moto's S3 server (a child process) behind the counting proxy
(:class:`sparklog.testing.store_proxy.StoreProxy`); ``L`` broker agents (L = 1, 2, 4)
share one bucket prefix as their log dir; a topic of :data:`PARTITIONS` partitions, replication
factor 1, is spread over them, so L brokers lead its partitions and commit to its one Delta
table. One ``confluent_kafka.Producer`` per partition (a thread each, acks=all, linger 0)
sends one record at a time, each waiting for its acknowledgement, for :data:`DURATION_S`
seconds after a warm-up. Reported per L: acknowledged records/s, ack p50/p99, commit rounds/s
(conditional PUTs that landed), and store requests per round by kind — segment PUTs, refused
conditional PUTs (another broker's commit took the version), GETs (the winners' commits
read), HEADs and LISTs.

How versions are handed out (the decision this measures): no committer per topic and no
counter in ZooKeeper. Each leader creates the next commit it knows of; when another leader
got there first (412), it reads only the winner's commit, and goes on to the version after
it (:mod:`sparklog.log.leader_log`). A refused create costs one PUT and one GET.

**Baseline:** L processes appending one one-row Parquet file each per commit with delta-rs
(``write_deltalake(mode="append")``) to one table on the same store, through the same proxy,
for the same time: the commit sequence delta-rs itself gives concurrent writers.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.harness import BenchContext, CaseResult, Metric, median, percentile
from benchmarks.store import delta_rs_commits, landed_commits, new_bucket, proxied_s3

CASE = "v"
TITLE = "Shared object storage: one topic's commits with partitions led by 1, 2, 4 brokers, vs raw delta-rs"
LEADERS = (1, 2, 4)
PARTITIONS = 4
DURATION_S = 10.0
WARMUP_RECORDS = 3
_KINDS = ("PUT", "POST", "PUT_IF_ABSENT 412", "GET", "HEAD", "LIST")


def _produce_for(bootstrap: str, topic: str, partition: int, until: float, latencies: list[float]) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0, "log_level": 3})
    for _ in range(WARMUP_RECORDS):
        producer.produce(topic, value=b"warm-up", partition=partition)
        producer.flush(30)
    i = 0
    while time.monotonic() < until:
        started = time.monotonic()
        producer.produce(topic, value=b"v%d" % i, partition=partition)
        if producer.flush(30) != 0:
            raise AssertionError(f"{topic}-{partition}: record {i} not acknowledged within 30 s")
        latencies.append((time.monotonic() - started) * 1000)
        i += 1


def _sparklog_side(ctx: BenchContext, run: int, leaders: int, proxy: Any, duration_s: float) -> dict[str, Any]:
    import sparklog
    from sparklog.testing import BrokerAgents

    bucket = new_bucket(proxy, "bench-v")
    topic = "shared-commits"
    with (
        ctx.fresh_env(CASE, f"{run}-{leaders}") as env,
        BrokerAgents(
            env.zk_connect,
            env.home,
            env.scratch / "brokers",
            log_level="WARNING",
            log_store=f"s3://{bucket}/cluster",
            shared_log_dir=True,
        ) as agents,
    ):
        agents.start(*range(1, leaders + 1))
        agents.wait_controller()
        with sparklog.connect(env.options) as cluster:
            cluster.create_topic(topic, partitions=PARTITIONS, replication_factor=1)
            deadline = time.monotonic() + 60
            while {p.leader for p in cluster.describe_topic(topic).partitions} != set(range(1, leaders + 1)):
                if time.monotonic() > deadline:
                    raise AssertionError(
                        f"{topic}: not led by brokers 1..{leaders}\n{agents.logs(list(range(1, leaders + 1)))}"
                    )
                time.sleep(0.05)
        latencies: list[list[float]] = [[] for _ in range(PARTITIONS)]
        start = time.monotonic() + 2.0  # every producer connected and warmed up by then
        threads = [
            threading.Thread(
                target=_produce_for, args=(agents.bootstrap_servers, topic, p, start + duration_s, latencies[p])
            )
            for p in range(PARTITIONS)
        ]
        for thread in threads:
            thread.start()
        time.sleep(max(0.0, start - time.monotonic()))
        proxy.reset()
        for thread in threads:
            thread.join()
        counts = proxy.counts()
    acks = [x for per_partition in latencies for x in per_partition]
    return {"acks": acks, "counts": counts, "seconds": duration_s}


def _figures(side: dict[str, Any]) -> dict[str, float]:
    counts: dict[str, int] = side["counts"]
    rounds = max(1, landed_commits(counts))
    acks = side["acks"]
    figures = {
        "records_per_s": len(acks) / side["seconds"],
        "p50_ms": percentile(acks, 50),
        "p99_ms": percentile(acks, 99),
        "rounds_per_s": rounds / side["seconds"],
    }
    for kind in _KINDS:
        figures[f"{kind} per round"] = counts.get(kind, 0) / rounds
    return figures


def run(ctx: BenchContext) -> CaseResult:
    result = CaseResult(CASE, TITLE, __doc__ or "", params={"leaders": LEADERS, "partitions": PARTITIONS})
    duration_s = max(2.0, DURATION_S * ctx.scale)
    per_leaders: dict[int, list[tuple[dict[str, float], dict[str, float]]]] = {n: [] for n in LEADERS}
    with proxied_s3(Path(ctx.work_dir) / "store-v") as proxy:
        for run_no in range(1, ctx.runs + 1):
            for leaders in LEADERS:
                ctx.log(CASE, f"run {run_no}/{ctx.runs}: {leaders} leader(s)")
                ours_side = _sparklog_side(ctx, run_no, leaders, proxy, duration_s)
                raw_side = delta_rs_commits(proxy, "bench-v-raw", leaders, duration_s)
                ours, raw = _figures(ours_side), _figures(raw_side)
                per_leaders[leaders].append((ours, raw))
                result.runs.append(
                    {
                        "run": run_no,
                        "leaders": leaders,
                        "sparklog": ours,
                        "baseline": raw,
                        "requests": {"sparklog": ours_side["counts"], "baseline": raw_side["counts"]},
                    }
                )
    for leaders, pairs in per_leaders.items():
        for key, unit, higher in (
            ("records_per_s", "rec/s", True),
            ("rounds_per_s", "commits/s", True),
            ("p50_ms", "ms", False),
            ("p99_ms", "ms", False),
            *((f"{kind} per round", "requests", False) for kind in _KINDS),
        ):
            result.metrics.append(
                Metric(
                    CASE,
                    f"{leaders} leader(s): {key}",
                    unit,
                    [ours[key] for ours, _ in pairs],
                    [raw[key] for _, raw in pairs],
                    higher_is_better=higher,
                    baseline_label="delta-rs",
                )
            )
    medians = {n: median([ours["rounds_per_s"] for ours, _ in pairs]) for n, pairs in per_leaders.items()}
    result.notes.append(f"commit rounds/s (median) by leaders: {medians}")
    return result
