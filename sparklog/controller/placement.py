"""Replica placement: Kafka's round-robin assignment of partition replicas to brokers.

Pure policy (no I/O). Same algorithm as Kafka's rack-unaware ``assignReplicasToBrokers``:
the first replica of partition ``p`` goes to broker ``(p + start) % n``; followers are
shifted by an amount that grows every ``n`` partitions, so leaders and followers spread
evenly. Passing ``start_index``/``replica_shift`` makes it deterministic (tests).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from sparklog.errors import InvalidReplicationFactorError

__all__ = ["assign_replicas"]


def assign_replicas(
    broker_ids: Sequence[int],
    num_partitions: int,
    replication_factor: int,
    start_partition: int = 0,
    start_index: int | None = None,
    replica_shift: int | None = None,
) -> dict[int, list[int]]:
    """Partition id -> replica broker ids (first = preferred leader)."""
    brokers = sorted(broker_ids)
    if replication_factor < 1:
        raise InvalidReplicationFactorError(f"Replication factor must be larger than 0, got {replication_factor}")
    if replication_factor > len(brokers):
        raise InvalidReplicationFactorError(
            f"Replication factor: {replication_factor} larger than available brokers: {len(brokers)}. "
            "Start more brokers or lower the replication factor."
        )
    n = len(brokers)
    rng = random.Random()
    start = rng.randrange(n) if start_index is None else start_index
    shift = rng.randrange(n) if replica_shift is None else replica_shift
    assignment: dict[int, list[int]] = {}
    partition = max(0, start_partition)
    for _ in range(num_partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        first = (partition + start) % n
        replicas = [brokers[first]]
        for j in range(replication_factor - 1):
            replicas.append(brokers[(first + 1 + (shift + j) % (n - 1)) % n])
        assignment[partition] = replicas
        partition += 1
    return assignment
