"""The write lease recipe against a real ZooKeeper: holders wait, expiry frees, a stable
owner id adopts its crashed predecessor's lease at once (with a higher epoch)."""

from __future__ import annotations

import time

import pytest

import sparklog
from sparklog.errors import LeaseTimeoutError
from sparklog.metadata.lease import WriterLease


def test_a_restarted_owner_adopts_its_predecessors_lease_with_a_new_epoch(cluster: sparklog.Cluster) -> None:
    cluster.create_topic("t", 1)
    crashed = WriterLease(cluster.replicas.zk, "t", 0, "job-42", lease_ms=60_000)
    first = crashed.acquire(1000)
    # Another owner has to wait for the expiry ...
    with pytest.raises(LeaseTimeoutError, match="held by job-42"):
        WriterLease(cluster.replicas.zk, "t", 0, "someone-else", lease_ms=60_000).acquire(200)
    # ... and so does the same owner name without adopt (a second live instance must not steal it).
    with pytest.raises(LeaseTimeoutError):
        WriterLease(cluster.replicas.zk, "t", 0, "job-42", lease_ms=60_000).acquire(200)
    started = time.monotonic()
    restarted = WriterLease(cluster.replicas.zk, "t", 0, "job-42", lease_ms=60_000).acquire(1000, adopt=True)
    assert time.monotonic() - started < 1.0
    assert restarted.epoch == first.epoch + 1 and restarted.takeover, (
        "the predecessor must be fenced by an epoch marker"
    )
