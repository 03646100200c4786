"""Invariant 4: a writer that sleeps through losing its lease is fenced, whatever it does next.

A child takes partition 0's write lease (short lease, short ZooKeeper session), then the
parent freezes it with SIGSTOP until both its lease and its session are gone, lets a new
writer take over (epoch marker + records) and thaws the zombie. The zombie's commit on its
old snapshot must conflict, and its retry through ``append`` must raise ``FencedError``.
"""

from __future__ import annotations

import signal
import uuid

import pytest

import sparklog
from sparklog.log.append import append
from sparklog.metadata.lease import WriterLease
from tests.fault.workers import zombie_writer
from tests.helpers import assert_log_consistent, reaping, segment_batch, send_signal, spawn_context, values_at, wait_for

LEASE_MS = 500
SESSION_MS = 1000  # the embedded server's tickTime is 250 ms: 1 s sessions are allowed
TOPIC = "zombie"


@pytest.mark.parametrize("snapshot_before_pause", [True, False], ids=["paused-before-commit", "paused-before-snapshot"])
def test_zombie_writer_is_fenced(
    cluster: sparklog.Cluster, cluster_options: dict[str, str], snapshot_before_pause: bool
) -> None:
    cluster.create_topic(TOPIC, partitions=2)
    table = cluster.replicas.leader_table(TOPIC)
    with cluster.producer() as producer:  # some history first, on both partitions
        for i in range(3):
            producer.send(TOPIC, b"early-%d" % i, partition=0)
        producer.send(TOPIC, b"other", partition=1)

    ctx = spawn_context()
    ready, go, results = ctx.Event(), ctx.Event(), ctx.Queue()
    alive_path = f"/zombie-alive-{uuid.uuid4().hex[:8]}"
    zombie_options = {**cluster_options, "zookeeper.session.timeout.ms": str(SESSION_MS)}
    child = ctx.Process(
        target=zombie_writer,
        args=(zombie_options, TOPIC, LEASE_MS, snapshot_before_pause, alive_path, ready, go, results),
    )
    child.start()
    try:
        assert ready.wait(60), "the zombie never got ready"
        send_signal(child, signal.SIGSTOP)
        # Frozen: its session expires (its ephemeral znode goes) and its lease runs out.
        wait_for(
            lambda: cluster.replicas.zk.client.exists(alive_path) is None,
            15,
            "the zombie's ZooKeeper session to expire",
        )

        successor = WriterLease(cluster.replicas.zk, TOPIC, 0, "successor", 10_000)
        grant = successor.acquire(10_000, table.fence_epoch(table.snapshot(), 0))
        assert grant.takeover, "the zombie never released: the new writer must see a takeover"
        table.commit_epoch_marker(0, grant.epoch)
        result = append(table, {0: grant.epoch}, {0: segment_batch([b"successor-0", b"successor-1"])})
        assert result.base_offsets == {0: 3}
        successor.release()

        send_signal(child, signal.SIGCONT)
        go.set()  # only after SIGCONT: setting a multiprocessing Event waits for its sleepers to wake
        report = results.get(timeout=60)
    finally:  # never leave a frozen child behind, whatever failed
        send_signal(child, signal.SIGCONT)
        go.set()
        with reaping([child]):
            child.join(30)
    assert "error" not in report, report.get("error")
    assert report["epoch"] < grant.epoch
    if snapshot_before_pause:
        assert report["commit"] == "CommitConflict", f"the zombie's commit on its old snapshot: {report['commit']}"
    assert report["append"] == "FencedError", f"the zombie's retry through append: {report}"
    assert f"epoch {grant.epoch}" in report["append_message"]

    records = assert_log_consistent(cluster, TOPIC)
    assert values_at(records, 0) == [b"early-0", b"early-1", b"early-2", b"successor-0", b"successor-1"]
    assert values_at(records, 1) == [b"other"]
    assert not [r for r in records if r.value and r.value.startswith(b"zombie")]
    assert table.fence_epoch(table.snapshot(), 0) == grant.epoch
    assert cluster.list_offsets(TOPIC) == {0: 5, 1: 1}
