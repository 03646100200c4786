"""Case (h): consumer-group rebalance time — a member joins; a member is killed (SIGKILL).

Set-up per run: a topic of 12 partitions (1,000 records each), and three member
*processes* (``multiprocessing`` spawn; each ``cluster.consumer(group,
auto_offset_reset="earliest", session_timeout_ms=3000)`` with the default auto-commit, so
a revocation commits positions as Kafka's consumer does) that ``subscribe`` and
``poll(100)`` in a loop. Every member journals, with wall-clock times (``time.time()``,
shared by all processes of the machine), the moment just before ``subscribe()`` and every
assignment it adopts (from the ``on_assign`` callback: the generation and partitions).

Then, ``repetitions`` times per run (5 by default):

1. **join** — a 4th member process starts; measured: from its ``subscribe()`` call to the
   moment the *last* of the four members adopted the new generation, i.e. the group state
   in ZooKeeper (``/consumers/<g>/state``) is ``Stable`` with 4 members at a generation
   newer than before, and every member's journal shows it adopted that generation (the
   leader noticed the join, recorded ``PreparingRebalance``, the three owners committed and
   acknowledged the revocation, the leader computed the assignment, committed the Delta
   generation marker, recorded ``Stable``, and every member picked it up in ``poll``).
   Also recorded: subscribe → ``Stable`` written (the state znode's ``mtime``).
2. **kill** — one of the four members is killed with ``SIGKILL`` (odd repetitions kill the
   group leader, even ones the newest follower: a leader's death also moves leadership); measured: from the kill
   to the last surviving member adopting the new ``Stable`` generation without the dead one.
   It includes waiting for ZooKeeper to expire the dead member's session
   (``session.timeout.ms`` = 3,000 ms), so the target is session timeout + 2 s.
   The group is back to three members for the next repetition.

Targets: join ≤ 2 s; kill ≤ ``session.timeout.ms`` + 2 s = 5 s (on the median over all
repetitions of all runs; the max is reported next to it). There is no baseline: no
simpler system does the same thing on this stack, so the table compares with the targets.
"""

from __future__ import annotations

import math
import os
import signal
import time
from collections.abc import Mapping
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from benchmarks.harness import BenchContext, CaseResult, Metric, Target, median

CASE = "h"
TITLE = "group rebalance time (join; SIGKILL)"
TOPIC = "bench"
GROUP = "bench-rebalance"
PARTITIONS = 12
RECORDS_PER_PARTITION = 1_000
MEMBERS = 3
REPETITIONS = 5
SESSION_TIMEOUT_MS = 3_000
TARGET_JOIN_S = 2.0
TARGET_KILL_EXTRA_S = 2.0
START_TIMEOUT_S = 120.0  # a spawned member imports pyarrow/deltalake/kazoo: slow on a loaded box
SETTLE_TIMEOUT_S = 60.0
POLL_S = 0.005


# -- the member process (spawned) ---------------------------------------------------------
def member(options: Mapping[str, str], journal_path: str, stop_path: str, config: Mapping[str, Any]) -> None:
    """Subscribe, poll until the stop file appears, journal subscribe time and adoptions."""
    import sparklog

    fd = os.open(journal_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def note(line: str) -> None:
        os.write(fd, (line + "\n").encode())

    cluster = sparklog.connect(options)
    consumer = cluster.consumer(GROUP, **config)

    def on_assign(partitions: list[tuple[str, int]]) -> None:
        now = time.time()
        generation = consumer.group_metadata().generation
        note(f"A {generation} {now!r} {','.join(str(p) for _t, p in sorted(partitions)) or '-'}")

    try:
        note(f"S {time.time()!r}")
        consumer.subscribe([TOPIC], on_assign=on_assign)
        note(f"M {consumer.group_metadata().member_id}")
        while not os.path.exists(stop_path):
            consumer.poll(100)
    finally:
        consumer.close()
        cluster.close()
        os.close(fd)


def read_journal(path: Path) -> dict[str, Any]:
    """``{"subscribe": t | None, "member_id": str | None, "adopted": {generation: (t, partitions)}}``."""
    out: dict[str, Any] = {"subscribe": None, "member_id": None, "adopted": {}}
    try:
        text = path.read_text()
    except FileNotFoundError:
        return out
    for line in text.split("\n")[:-1]:
        parts = line.split(" ")
        if parts[0] == "S":
            out["subscribe"] = float(parts[1])
        elif parts[0] == "M":
            out["member_id"] = parts[1]
        elif parts[0] == "A":
            partitions = [] if parts[3] == "-" else [int(p) for p in parts[3].split(",")]
            out["adopted"].setdefault(int(parts[1]), (float(parts[2]), partitions))
    return out


# -- the parent's side ---------------------------------------------------------------------
def _spawn_context() -> Any:
    import multiprocessing

    return multiprocessing.get_context("spawn")  # deltalake panics in forked children


class _Members:
    """The member processes of one run; each has its own journal and stop file."""

    def __init__(self, options: dict[str, str], tmp: Path) -> None:
        self.options, self.tmp = options, tmp
        self.count = 0
        self.live: list[tuple[BaseProcess, Path, Path]] = []  # (process, journal, stop file)
        self.all: list[BaseProcess] = []
        self.config = {"auto_offset_reset": "earliest", "session_timeout_ms": SESSION_TIMEOUT_MS}

    def start(self) -> tuple[BaseProcess, Path]:
        self.count += 1
        journal, stop = self.tmp / f"member-{self.count}.log", self.tmp / f"stop-{self.count}"
        process = _spawn_context().Process(
            target=member,
            args=(self.options, str(journal), str(stop), {**self.config, "client_id": f"m{self.count}"}),
            daemon=True,
        )
        process.start()
        self.all.append(process)
        self.live.append((process, journal, stop))
        return process, journal

    def kill(self, index: int) -> tuple[float, Path]:
        process, journal, _stop = self.live.pop(index)
        killed_at = time.time()
        os.kill(process.pid, signal.SIGKILL)  # type: ignore[arg-type]
        return killed_at, journal

    def reap(self) -> None:
        for process in self.all:
            if process.exitcode is None and not process.is_alive():
                process.join(0)

    def stop_all(self) -> None:
        for _process, _journal, stop in self.live:
            stop.write_text("stop")
        deadline = time.monotonic() + 30
        for process in self.all:
            process.join(max(0.1, deadline - time.monotonic()))
        for process in self.all:  # whatever did not stop in time
            if process.exitcode is None and process.pid is not None:
                try:
                    os.kill(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                process.join(5)
        self.live.clear()


def _state(cluster: Any) -> tuple[Any, float]:
    """(GroupStateRecord | None, mtime of the state znode in s)."""
    from kazoo.exceptions import NoNodeError

    from sparklog.metadata import zkdata
    from sparklog.metadata.zkdata import GroupStateRecord

    path = zkdata.group_state_path(GROUP)
    try:
        data, stat = cluster.replicas.zk.client.get(path)
    except NoNodeError:
        return None, 0.0
    return GroupStateRecord.decode(data, path), stat.mtime / 1000.0


def _wait_settled(
    cluster: Any,
    journals: list[Path],
    members: int,
    after_generation: int,
    timeout_s: float,
    exclude_member: str | None = None,
) -> dict[str, Any]:
    """Wait for Stable with ``members`` members at a generation > ``after_generation``, adopted by every journal.

    With ``exclude_member`` (a killed member's id) also note when its znode disappeared
    (ZooKeeper expired its session), to within one poll (5 ms).
    """
    from sparklog.metadata import zkdata

    deadline = time.monotonic() + timeout_s
    last = None
    gone_path = None if exclude_member is None else zkdata.group_member_path(GROUP, exclude_member)
    gone_at: float | None = None
    while time.monotonic() < deadline:
        if gone_path is not None and gone_at is None and cluster.replicas.zk.client.exists(gone_path) is None:
            gone_at = time.time()
        record, mtime = _state(cluster)
        last = record
        if (
            record is not None
            and record.state == "Stable"
            and record.generation > after_generation
            and len(record.members) == members
            and (exclude_member is None or exclude_member not in record.members.values())
        ):
            seen = [read_journal(j) for j in journals]
            adopted = [s["adopted"].get(record.generation) for s in seen]
            if all(a is not None for a in adopted):
                owned = sorted(p for a in adopted for p in a[1])
                assert owned == list(range(PARTITIONS)), f"generation {record.generation}: partitions adopted {owned}"
                return {
                    "generation": record.generation,
                    "stable_written": mtime,
                    "adopted": [a[0] for a in adopted],
                    "leader": record.leader,
                    "member_ids": [s["member_id"] for s in seen],
                    "member_gone": gone_at,
                }
        time.sleep(POLL_S)
    raise AssertionError(
        f"group never settled with {members} members after generation {after_generation}: last state {last}"
    )


def _wait_journal(journal: Path, key: str, timeout_s: float) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = read_journal(journal)[key]
        if value is not None:
            return value
        time.sleep(POLL_S)
    raise AssertionError(f"{journal.name}: no {key} line after {timeout_s:.0f} s")


def _one_run(ctx: BenchContext, run_no: int, repetitions: int) -> dict[str, Any]:
    import pyarrow as pa

    import sparklog

    joins: list[dict[str, Any]] = []
    kills: list[dict[str, Any]] = []
    with ctx.fresh_env(CASE, run_no) as env:
        cluster = sparklog.connect(env.options)
        members = _Members(env.options, env.scratch)
        try:
            cluster.create_topic(TOPIC, partitions=PARTITIONS)
            batch = pa.table({"value": pa.array([b"x" * 100] * RECORDS_PER_PARTITION, pa.binary())})
            with cluster.producer(acks=1) as producer:
                for _ in range(PARTITIONS):  # keyless send_arrow: one partition per batch, round robin
                    producer.send_arrow(TOPIC, batch)
            ctx.log(CASE, f"run {run_no}/{ctx.runs}: starting {MEMBERS} members …")
            for _ in range(MEMBERS):
                members.start()
            settled = _wait_settled(cluster, [j for _p, j, _s in members.live], MEMBERS, 0, START_TIMEOUT_S)
            for rep in range(1, repetitions + 1):
                # -- join ------------------------------------------------------------------
                before = settled["generation"]
                _process, journal = members.start()
                subscribed = _wait_journal(journal, "subscribe", START_TIMEOUT_S)
                settled = _wait_settled(
                    cluster, [j for _p, j, _s in members.live], MEMBERS + 1, before, SETTLE_TIMEOUT_S
                )
                join = {
                    "rep": rep,
                    "generations": settled["generation"] - before,
                    "to_all_adopted_s": max(settled["adopted"]) - subscribed,
                    "to_first_adopted_s": min(settled["adopted"]) - subscribed,
                    "to_stable_written_s": settled["stable_written"] - subscribed,
                }
                joins.append(join)
                ctx.log(
                    CASE,
                    f"run {run_no}/{ctx.runs} rep {rep}: join → all adopted {join['to_all_adopted_s']:.2f} s "
                    f"(Stable written {join['to_stable_written_s']:.2f} s, {join['generations']} generation(s))",
                )
                time.sleep(0.5)  # let the members' post-rebalance work (fetch, commits) finish
                # -- kill ------------------------------------------------------------------
                before = settled["generation"]
                # Odd repetitions kill the group leader, even ones the newest follower.
                ids = [read_journal(j)["member_id"] for _p, j, _s in members.live]
                followers = [i for i, member_id in enumerate(ids) if member_id != settled["leader"]]
                victim_index = ids.index(settled["leader"]) if rep % 2 and settled["leader"] in ids else followers[-1]
                victim_id = ids[victim_index]
                was_leader = victim_id == settled["leader"]
                killed_at, _journal = members.kill(victim_index)
                settled = _wait_settled(
                    cluster,
                    [j for _p, j, _s in members.live],
                    MEMBERS,
                    before,
                    SESSION_TIMEOUT_MS / 1000 + SETTLE_TIMEOUT_S,
                    exclude_member=victim_id,
                )
                kill = {
                    "rep": rep,
                    "killed_leader": was_leader,
                    "generations": settled["generation"] - before,
                    "to_all_adopted_s": max(settled["adopted"]) - killed_at,
                    "to_stable_written_s": settled["stable_written"] - killed_at,
                    "to_session_expired_s": (settled["member_gone"] or math.nan) - killed_at,
                    "expired_to_all_adopted_s": max(settled["adopted"]) - (settled["member_gone"] or math.nan),
                }
                kills.append(kill)
                members.reap()
                ctx.log(
                    CASE,
                    f"run {run_no}/{ctx.runs} rep {rep}: SIGKILL ({'leader' if was_leader else 'follower'}) → all "
                    f"adopted {kill['to_all_adopted_s']:.2f} s (session expired {kill['to_session_expired_s']:.2f} s, "
                    f"then rebalance {kill['expired_to_all_adopted_s']:.2f} s)",
                )
                time.sleep(0.5)
        finally:
            members.stop_all()
            cluster.close()
    return {"run": run_no, "load_avg": list(os.getloadavg()), "joins": joins, "kills": kills}


def run(ctx: BenchContext) -> CaseResult:
    """Run case (h) ``ctx.runs`` times, ``repetitions`` joins and kills each."""
    repetitions = max(2, ctx.scaled(REPETITIONS))
    bound_kill = SESSION_TIMEOUT_MS / 1000 + TARGET_KILL_EXTRA_S
    result = CaseResult(
        CASE,
        TITLE,
        __doc__ or "",
        params={
            "topic_partitions": PARTITIONS,
            "records_per_partition": RECORDS_PER_PARTITION,
            "members": MEMBERS,
            "repetitions_per_run": repetitions,
            "member_config": {
                "auto.offset.reset": "earliest",
                "session.timeout.ms": SESSION_TIMEOUT_MS,
                "enable.auto.commit": True,
                "partition.assignment.strategy": "range (default)",
            },
            "member_loop": "poll(100) until a stop file appears; on_assign journals generation + time",
            "baseline": None,
        },
    )
    for run_no in range(1, ctx.runs + 1):
        result.runs.append(_one_run(ctx, run_no, repetitions))
    joins = [j for r in result.runs for j in r["joins"]]
    kills = [k for r in result.runs for k in r["kills"]]
    join_all = [j["to_all_adopted_s"] for j in joins]
    kill_all = [k["to_all_adopted_s"] for k in kills]
    m = result.metrics
    m.append(
        Metric(
            CASE,
            "join: subscribe → all 4 adopted (median)",
            "s",
            join_all,
            None,
            [Target("value", "<=", TARGET_JOIN_S, f"≤ {TARGET_JOIN_S:.0f} s")],
            higher_is_better=False,
            note=f"per repetition, {len(join_all)} repetitions over {ctx.runs} run(s)",
        )
    )
    m.append(
        Metric(
            CASE,
            "join: max",
            "s",
            [max(join_all)],
            None,
            [],
            higher_is_better=False,
            note="informational: worst repetition",
        )
    )
    m.append(
        Metric(
            CASE,
            "join: subscribe → Stable written",
            "s",
            [j["to_stable_written_s"] for j in joins],
            None,
            [],
            higher_is_better=False,
            note="informational: the state znode's mtime",
        )
    )
    m.append(
        Metric(
            CASE,
            f"kill: SIGKILL → all 3 adopted (median; session {SESSION_TIMEOUT_MS} ms)",
            "s",
            kill_all,
            None,
            [Target("value", "<=", bound_kill, f"≤ {bound_kill:.0f} s (session + 2 s)")],
            higher_is_better=False,
            note=f"per repetition, {len(kill_all)} repetitions; killed the leader {sum(k['killed_leader'] for k in kills)} time(s)",
        )
    )
    m.append(
        Metric(
            CASE,
            "kill: max",
            "s",
            [max(kill_all)],
            None,
            [],
            higher_is_better=False,
            note="informational: worst repetition",
        )
    )
    m.append(
        Metric(
            CASE,
            "kill: beyond session timeout",
            "s",
            [x - SESSION_TIMEOUT_MS / 1000 for x in kill_all],
            None,
            [],
            higher_is_better=False,
            note="informational: kill → adopted − session.timeout.ms",
        )
    )
    m.append(
        Metric(
            CASE,
            "kill: SIGKILL → session expired",
            "s",
            [k["to_session_expired_s"] for k in kills],
            None,
            [],
            higher_is_better=False,
            note="informational: the dead member's znode gone (ZooKeeper's share)",
        )
    )
    m.append(
        Metric(
            CASE,
            "kill: session expired → all 3 adopted",
            "s",
            [k["expired_to_all_adopted_s"] for k in kills],
            None,
            [],
            higher_is_better=False,
            note="informational: the rebalance itself (sparklog's share)",
        )
    )
    leader_kills = [k["to_all_adopted_s"] for k in kills if k["killed_leader"]]
    follower_kills = [k["to_all_adopted_s"] for k in kills if not k["killed_leader"]]
    result.notes.append(
        f"join: median {median(join_all):.2f} s, max {max(join_all):.2f} s; kill: median {median(kill_all):.2f} s, "
        f"max {max(kill_all):.2f} s (leader killed: median {median(leader_kills):.2f} s over {len(leader_kills)}; "
        f"follower killed: median {median(follower_kills):.2f} s over {len(follower_kills)})"
    )
    return result
