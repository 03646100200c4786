"""Invariants 1, 2 and 4 under contention: 8 producer processes, one 3-partition topic."""

from __future__ import annotations

import json
import time
from pathlib import Path

import sparklog
from tests.fault.workers import produce_batches
from tests.helpers import (
    Ack,
    assert_acks_stored,
    assert_acks_unique,
    assert_log_consistent,
    assert_values_unique,
    reaping,
    spawn_context,
)

WORKERS = 8
BATCHES = 50
PER_BATCH = 20


def test_eight_producers_one_topic(cluster: sparklog.Cluster, cluster_options: dict[str, str], tmp_path: Path) -> None:
    cluster.create_topic("contended", partitions=3)
    ctx = spawn_context()
    start = ctx.Event()
    outs = [tmp_path / f"acks-{w}.json" for w in range(WORKERS)]
    children = [
        ctx.Process(
            target=produce_batches, args=(cluster_options, "contended", w, BATCHES, PER_BATCH, str(outs[w]), start)
        )
        for w in range(WORKERS)
    ]
    with reaping(children):
        for child in children:
            child.start()
        start.set()
        deadline = time.monotonic() + 180
        for child in children:
            child.join(max(0.0, deadline - time.monotonic()))
    assert [c.exitcode for c in children] == [0] * WORKERS, "a producer process failed (see its stderr)"
    acks = [Ack(p, o, v.encode()) for out in outs for p, o, v in json.loads(out.read_text())]
    assert len(acks) == WORKERS * BATCHES * PER_BATCH
    assert_acks_unique(acks)
    records = assert_log_consistent(cluster, "contended")
    assert len(records) == len(acks), f"{len(records)} records stored, {len(acks)} acknowledged"
    assert_values_unique(records)
    assert_acks_stored(records, acks)
    # Every partition got a share: the producers really contended for all three.
    assert {a.partition for a in acks} == {0, 1, 2}
