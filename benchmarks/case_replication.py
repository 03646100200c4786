"""Case (l): replication — produce throughput with replication factor 3 and acks=all vs
replication factor 1, and the time from a leader's loss to a new leader accepting writes.

Set-up per run: three broker agents (``sparklog broker start`` processes, separate log dirs,
ZooKeeper session timeout 3 s) in a fresh cluster.

Throughput: the light producer sends 2,000,000 records (value = 100 random bytes, keyless)
as 20 Arrow tables of 100,000 rows (``send_arrow``, one request each, round robin over the
topic's 8 partitions, whose leaders are spread over the three brokers) to

* an RF 3 topic with ``min.insync.replicas=2`` and ``acks=all``: a request returns once the
  leader committed it (data file, commit file and log dir fsynced) and both followers'
  agents committed it in their log dirs (Delta commit; the segment file itself is a hard
  link to the leader's, as the three log dirs share one filesystem: see
  docs/replication.md). For information, the same with ``replica.hard.links.enable=false``
  (each replica writes its own bytes, as across filesystems);
* the baseline: an RF 1 topic in the same cluster, ``acks=all`` (the same fsync of the
  leader's files and commit; nothing to wait for). ``acks=1`` on RF 1 is reported for
  information.

Target (issue 5): RF 3 / RF 1 ≥ 0.5 (Kafka's published figure for 3× synchronous
replication vs none is about 0.51).

Failover: one partition, RF 3, a thread sending one record at a time with ``acks=all``;
the leader's agent is killed with SIGKILL; measured: kill → the first acknowledged send
written to the new leader (an offset at or above where the new leader epoch starts: until the
controller fences the old leader's table, writes can still land there, since its storage
outlives its agent). Target: ≤ session timeout + 2 s = 5 s.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from benchmarks.case_light_producer import random_values
from benchmarks.harness import BenchContext, CaseResult, Metric, Target, run_record

if TYPE_CHECKING:
    import pyarrow as pa

CASE = "l"
TITLE = "replication: RF3 acks=all vs RF1 throughput; leader failover time"
RECORDS = 2_000_000
BATCH_ROWS = 100_000
TOPIC_PARTITIONS = 8
SESSION_TIMEOUT_MS = 3_000
TARGET_RATIO = 0.5
TARGET_FAILOVER_S = SESSION_TIMEOUT_MS / 1000 + 2


def _produce(cluster: object, topic: str, batches: list[pa.Table], acks: str) -> float:
    started = time.perf_counter()
    with cluster.producer(acks=acks, linger_ms=0) as producer:  # type: ignore[attr-defined]
        for batch in batches:
            producer.send_arrow(topic, batch)
    return time.perf_counter() - started


def _rf3_with_copies(env: object, agents: object, batches: list[pa.Table]) -> float:
    """RF 3 acks=all again with ``replica.hard.links.enable=false`` in the agents and the
    producer: every replica gets its own bytes, as when log dirs are on different filesystems."""
    import sparklog

    settings = agents.properties_file.read_text(encoding="utf-8")  # type: ignore[attr-defined]
    agents.properties_file.write_text(settings + "replica.hard.links.enable=false\n", encoding="utf-8")  # type: ignore[attr-defined]
    try:
        for broker in (1, 2, 3):
            agents.stop(broker)  # type: ignore[attr-defined]
        agents.start(1, 2, 3)  # type: ignore[attr-defined]
        with sparklog.connect(env.options, **{"replica.hard.links.enable": "false"}) as cluster:  # type: ignore[attr-defined]
            _produce(cluster, "rf3", batches[:2], "all")  # warm-up after the restart
            return _produce(cluster, "rf3", batches, "all")
    finally:
        agents.properties_file.write_text(settings, encoding="utf-8")  # type: ignore[attr-defined]
        for broker in (1, 2, 3):
            agents.stop(broker)  # type: ignore[attr-defined]
        agents.start(1, 2, 3)  # type: ignore[attr-defined]


def _failover(cluster: object, agents: object, ctx: BenchContext, run_no: int) -> float:
    cluster.create_topic("failover", 1, replication_factor=3, config={"min.insync.replicas": "2"})  # type: ignore[attr-defined]
    acks: list[tuple[float, int]] = []  # (monotonic time, offset)
    stop = threading.Event()

    def send_forever() -> None:
        with cluster.producer(acks="all", linger_ms=0) as producer:  # type: ignore[attr-defined]
            i = 0
            while not stop.is_set():
                meta = producer.send("failover", value=b"f%d" % i).result(timeout=60)
                acks.append((time.monotonic(), meta.offset))
                i += 1

    sender = threading.Thread(target=send_forever, daemon=True)
    sender.start()
    while len(acks) < 20:
        time.sleep(0.01)
    before = cluster.replicas.states("failover", [0])[0]  # type: ignore[attr-defined]
    leader = before.leader
    killed_at = time.monotonic()
    agents.kill(leader)  # type: ignore[attr-defined]
    first: float | None = None
    while first is None:
        if time.monotonic() - killed_at > 60:
            raise AssertionError("no new leader accepted writes within 60 s")
        time.sleep(0.005)
        state = cluster.replicas.states("failover", [0])[0]  # type: ignore[attr-defined]
        if state.leader_epoch == before.leader_epoch or state.leader < 0:
            continue
        # The new leader's epoch starts at this offset: an ack at or above it was written to
        # the new leader (acks below it may still have reached the old leader's storage).
        epoch_start = state.epochs[-1][1]
        first = next((t for t, offset in list(acks) if t > killed_at and offset >= epoch_start), None)
    stop.set()
    sender.join(30)
    seconds = first - killed_at
    ctx.log(
        CASE,
        f"run {run_no}: failover {seconds:.2f} s (leader {leader} killed -> leader {state.leader}, "
        f"epoch {state.leader_epoch} from offset {state.epochs[-1][1]})",
    )
    return seconds


def run(ctx: BenchContext) -> CaseResult:
    import sparklog
    from sparklog.testing import BrokerAgents

    records = ctx.scaled(RECORDS, minimum=10_000)
    batch_rows = min(BATCH_ROWS, records)
    batches = [random_values(batch_rows, seed) for seed in range(max(1, records // batch_rows))]
    records = batch_rows * len(batches)
    result = CaseResult(
        CASE,
        TITLE,
        __doc__ or "",
        params={
            "records": records,
            "batch_rows": batch_rows,
            "topic_partitions": TOPIC_PARTITIONS,
            "brokers": 3,
            "zookeeper.session.timeout.ms": SESSION_TIMEOUT_MS,
        },
    )
    rf3: list[float] = []
    rf1: list[float] = []
    rf1_acks1: list[float] = []
    rf3_copies: list[float] = []
    failovers: list[float] = []
    for run_no in range(1, ctx.runs + 1):
        with (
            ctx.fresh_env(CASE, run_no) as env,
            BrokerAgents(
                env.zk_connect,
                env.home,
                env.scratch / "brokers",
                session_timeout_ms=SESSION_TIMEOUT_MS,
                replica_lag_time_max_ms=10_000,
                log_level="WARNING",
            ) as agents,
        ):
            agents.start(1, 2, 3)
            with sparklog.connect(env.options) as cluster:
                cluster.create_topic("rf3", TOPIC_PARTITIONS, replication_factor=3, config={"min.insync.replicas": "2"})
                cluster.create_topic("rf1", TOPIC_PARTITIONS, replication_factor=1)
                _produce(cluster, "rf3", batches[:2], "all")  # warm-up: agents' fetchers found the topics
                _produce(cluster, "rf1", batches[:2], "all")
                order = ("rf3", "rf1") if run_no % 2 else ("rf1", "rf3")
                seconds = {topic: _produce(cluster, topic, batches, "all") for topic in order}
                seconds["rf1-acks1"] = _produce(cluster, "rf1", batches, "1")
                ctx.log(
                    CASE,
                    f"run {run_no}: RF3 acks=all {records / seconds['rf3']:,.0f} rec/s, RF1 acks=all "
                    f"{records / seconds['rf1']:,.0f} rec/s, RF1 acks=1 {records / seconds['rf1-acks1']:,.0f} rec/s",
                )
                seconds["rf3-copies"] = _rf3_with_copies(env, agents, batches)
                ctx.log(
                    CASE,
                    f"run {run_no}: RF3 acks=all with replica.hard.links.enable=false "
                    f"{records / seconds['rf3-copies']:,.0f} rec/s",
                )
                rf3.append(records / seconds["rf3"])
                rf1.append(records / seconds["rf1"])
                rf1_acks1.append(records / seconds["rf1-acks1"])
                rf3_copies.append(records / seconds["rf3-copies"])
                failovers.append(_failover(cluster, agents, ctx, run_no))
            result.runs.append(
                run_record(
                    run_no,
                    records,
                    seconds["rf3"],
                    seconds["rf1"],
                    failover_s=failovers[-1],
                    rf1_acks1_s=seconds["rf1-acks1"],
                    rf3_copies_s=seconds["rf3-copies"],
                )
            )
    result.metrics.append(
        Metric(
            CASE,
            "produce RF3 acks=all vs RF1 acks=all",
            "rec/s",
            rf3,
            rf1,
            [Target("ratio", ">=", TARGET_RATIO, f"≥ {TARGET_RATIO}×")],
            note="send_arrow 100k-row batches",
        )
    )
    result.metrics.append(
        Metric(CASE, "produce RF3 acks=all vs RF1 acks=1", "rec/s", rf3, rf1_acks1, [], note="informational")
    )
    result.metrics.append(
        Metric(
            CASE,
            "produce RF3 acks=all, replicas copy bytes (no hard links) vs RF1 acks=all",
            "rec/s",
            rf3_copies,
            rf1,
            [],
            note="informational: replica.hard.links.enable=false, as across filesystems",
        )
    )
    result.metrics.append(
        Metric(
            CASE,
            "leader kill -9 -> new leader accepts writes",
            "s",
            failovers,
            None,
            [Target("value", "<=", TARGET_FAILOVER_S, f"≤ {TARGET_FAILOVER_S:.0f} s")],
            higher_is_better=False,
            note=f"ZooKeeper session timeout {SESSION_TIMEOUT_MS} ms",
        )
    )
    return result
