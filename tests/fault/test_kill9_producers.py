"""Invariants 1-4 across crashes: producer processes killed with SIGKILL at random points.

Children produce with ``acks=all`` and fsync a line per acknowledged record before going
on, so after any kill the parent knows a lower bound of what was acknowledged. Killed
writers leave unreleased leases (freed after ``writer.lease.ms``), written but
uncommitted segments, and maybe half-finished commits behind.
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections import Counter
from dataclasses import dataclass
from multiprocessing.process import BaseProcess
from pathlib import Path

import sparklog
from tests.fault.workers import ARROW_BATCH, arrow_batch_id, produce_until_killed, read_ack_log
from tests.helpers import (
    Ack,
    StoredRecord,
    assert_acks_stored,
    assert_acks_unique,
    assert_log_consistent,
    assert_values_unique,
    reaping,
    send_signal,
    spawn_context,
)

KILLS = 24
SLOTS = 3  # producers alive at once
LEASE_MS = 500
TOPIC = "crashy"


@dataclass
class Child:
    process: BaseProcess
    ack_path: Path
    ready_path: Path
    kill_at: float | None = None


def start_child(options: dict[str, str], tmp: Path, n: int, limit: int | None = None) -> Child:
    ctx = spawn_context()
    ack_path, ready_path = tmp / f"acks-{n}.log", tmp / f"ready-{n}"
    process = ctx.Process(
        target=produce_until_killed, args=(options, TOPIC, f"c{n}", str(ack_path), str(ready_path), LEASE_MS, limit)
    )
    process.start()
    return Child(process, ack_path, ready_path)


def assert_batches_atomic(records: list[StoredRecord]) -> None:
    """Invariant 2: each ``send_arrow`` request (one commit, several partitions) is stored whole or not at all."""
    sizes = Counter(arrow_batch_id(r.value) for r in records if r.value is not None)
    sizes.pop(None, None)
    torn = {batch: n for batch, n in sizes.items() if n != ARROW_BATCH}
    assert not torn, f"{len(torn)} batches stored in part, e.g. {next(iter(torn.items()))} of {ARROW_BATCH} rows"
    assert sizes, "no send_arrow batch was stored at all"


def run_kill_loop(
    options: dict[str, str], tmp: Path, rng: random.Random, children: list[Child], processes: list[BaseProcess]
) -> None:
    """Keep SLOTS producers running; SIGKILL each at a random moment after it starts sending."""
    alive: list[Child] = []
    kills = 0
    deadline = time.monotonic() + 150
    while kills < KILLS:
        assert time.monotonic() < deadline, f"only {kills} kills before the deadline"
        while len(alive) < SLOTS and len(children) < KILLS + SLOTS:
            child = start_child(options, tmp, len(children))
            children.append(child)
            processes.append(child.process)
            alive.append(child)
        for child in list(alive):
            assert child.process.exitcode is None, (
                f"producer {child.process.pid} died on its own (exit {child.process.exitcode})"
            )
            if child.kill_at is None and child.ready_path.exists():
                child.kill_at = time.monotonic() + rng.uniform(0.05, 1.2)
            if child.kill_at is not None and time.monotonic() >= child.kill_at:
                send_signal(child.process, signal.SIGKILL)
                child.process.join(10)
                assert child.process.exitcode == -signal.SIGKILL
                alive.remove(child)
                kills += 1
        time.sleep(0.01)  # the kill schedule's resolution, not a wait
    for child in alive:  # the survivors die too
        send_signal(child.process, signal.SIGKILL)
        child.process.join(10)


def test_kill9_producers(cluster: sparklog.Cluster, cluster_options: dict[str, str], tmp_path: Path) -> None:
    cluster.create_topic(TOPIC, partitions=3)
    seed = int(os.environ.get("SPARKLOG_TEST_SEED", time.time_ns()))
    print(f"kill schedule seed: SPARKLOG_TEST_SEED={seed}")  # shown with a failure, to replay it
    rng = random.Random(seed)
    children: list[Child] = []
    with reaping(list[BaseProcess]()) as processes:
        run_kill_loop(cluster_options, tmp_path, rng, children, processes)
        # After all that, a fresh producer still gets through (leases of the dead expire).
        final = start_child(cluster_options, tmp_path, len(children), limit=20)
        processes.append(final.process)
        final.process.join(60)
        assert final.process.exitcode == 0, f"the producer after the crashes failed (exit {final.process.exitcode})"
        children.append(final)
    final_acks = read_ack_log(final.ack_path)
    assert len(final_acks) == 20, f"the last producer got {len(final_acks)} of 20 acks"

    acks = [Ack(p, o, v) for child in children for p, o, v in read_ack_log(child.ack_path)]
    killed_with_acks = sum(1 for child in children[:-1] if read_ack_log(child.ack_path))
    assert killed_with_acks >= KILLS // 3, f"only {killed_with_acks} killed producers got any ack: kills came too early"
    assert_acks_unique(acks)
    records = assert_log_consistent(cluster, TOPIC)
    assert_values_unique(records)
    assert_acks_stored(records, acks)
    assert len(records) >= len(acks)
    assert_batches_atomic(records)
    # A fresh client sees the same log (nothing depends on this process's cached snapshot).
    with sparklog.connect(cluster_options) as fresh:
        assert len(assert_log_consistent(fresh, TOPIC)) == len(records)
