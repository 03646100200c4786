"""Partition admin: preferred-leader elections and reassignments (Kafka's ``kafka-leader-election``
and ``kafka-reassign-partitions``), as requests the controller executes.

* :func:`elect_preferred_leaders` writes ``/admin/preferred_replica_election`` and waits for
  the controller to take it; each partition then reports ``elected`` (its preferred replica
  leads now), ``already`` (it led before) or why not (not live, not in sync).
* :func:`generate_reassignment` proposes a new assignment of some topics over some brokers
  (Kafka's rack-aware placement), next to the current one; :func:`execute_reassignment`
  validates a plan and writes ``/admin/reassign_partitions``; :func:`verify_reassignment`
  tells, per partition, whether the assignment reached the target.

Invariants: a request is validated completely before anything is written (unknown topics
and partitions, unknown or duplicate brokers, an empty replica list: clear errors, nothing
changed); only one request of a kind at a time. Needs a live controller (an agent started
with ``sparklog broker start``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence

from sparklog.errors import CoordinationError, UnknownPartitionError
from sparklog.metadata import zkdata
from sparklog.metadata.broker_registration import live_broker_ids
from sparklog.metadata.controller_election import current_controller
from sparklog.metadata.zkdata import ElectionRequestRecord, ReassignmentRecord, partition_key, split_partition_key
from sparklog.model.topic import TopicPartition
from sparklog.runtime.placement import validate_replica_assignment
from sparklog.runtime.policy import generate_reassignment as plan_reassignment
from sparklog.runtime.replica_manager import ReplicaManager

__all__ = [
    "current_assignment",
    "elect_preferred_leaders",
    "execute_reassignment",
    "generate_reassignment",
    "pending_reassignments",
    "verify_reassignment",
]


def _require_controller(replicas: ReplicaManager) -> None:
    if current_controller(replicas.zk) is None:
        raise CoordinationError(
            f"No controller is running in {replicas.zk.connect_string}: start broker agents with "
            "`sparklog broker start --id N --log-dir DIR`; admin requests are executed by the controller"
        )


def _check_partitions(replicas: ReplicaManager, partitions: Iterable[TopicPartition]) -> None:
    for topic, partition in partitions:
        if partition not in replicas.partitions_of(topic):
            raise UnknownPartitionError(f"Topic {topic} has no partition {partition}")


def current_assignment(
    replicas: ReplicaManager, topics: Iterable[str] | None = None
) -> dict[TopicPartition, list[int]]:
    selected = replicas.list_topics() if topics is None else list(topics)
    result: dict[TopicPartition, list[int]] = {}
    for topic in selected:
        assignment, _ = replicas.metadata.assignment(topic)
        result.update({(topic, int(p)): list(r) for p, r in assignment.partitions.items()})
    return dict(sorted(result.items()))


def elect_preferred_leaders(
    replicas: ReplicaManager, partitions: Iterable[TopicPartition] | None = None, timeout_s: float = 30.0
) -> dict[TopicPartition, str]:
    """Ask the controller to make each partition's preferred replica its leader; returns per
    partition ``elected``, ``already`` or the reason it could not be."""
    wanted = sorted(partitions) if partitions is not None else sorted(current_assignment(replicas))
    _check_partitions(replicas, wanted)
    _require_controller(replicas)
    before = {tp: replicas.states(tp[0], [tp[1]])[tp[1]] for tp in wanted}
    replicas.metadata.create_admin_request(
        zkdata.ADMIN_PREFERRED_ELECTION,
        ElectionRequestRecord(partitions=[partition_key(*tp) for tp in wanted]),
        "preferred leader election",
    )
    _await_taken(lambda: replicas.metadata.preferred_election_request() is None, timeout_s, "preferred leader election")
    assignment = current_assignment(replicas, {t for t, _ in wanted})
    live = set(live_broker_ids(replicas.zk))
    led = lambda tp: replicas.states(tp[0], [tp[1]])[tp[1]].leader == assignment[tp][0]  # noqa: E731
    _await_taken(lambda: all(led(tp) for tp in wanted), 2.0, "", raise_on_timeout=False)  # the watch delivers
    outcome: dict[TopicPartition, str] = {}
    for tp in wanted:
        preferred = assignment[tp][0]
        state = replicas.states(tp[0], [tp[1]])[tp[1]]
        if before[tp].leader == preferred:
            outcome[tp] = "already"
        elif state.leader == preferred:
            outcome[tp] = "elected"
        elif preferred not in live:
            outcome[tp] = f"preferred replica {preferred} is not live"
        else:
            outcome[tp] = f"preferred replica {preferred} is not in the ISR {list(state.isr)}"
    return outcome


def generate_reassignment(
    replicas: ReplicaManager, topics: Sequence[str], broker_ids: Sequence[int]
) -> tuple[dict[TopicPartition, list[int]], dict[TopicPartition, list[int]]]:
    """(current, proposed) assignments of ``topics`` over ``broker_ids`` (nothing is written)."""
    current = current_assignment(replicas, topics)
    registry = replicas.metadata.brokers()
    unknown = sorted(set(broker_ids) - set(registry))
    if unknown:
        raise CoordinationError(f"Unknown broker id(s) {unknown}; registered brokers: {sorted(registry)}")
    racks = {b: registry[b].rack for b in broker_ids}
    proposed = plan_reassignment(current, sorted(set(broker_ids)), broker_racks=racks)
    return current, dict(sorted(proposed.items()))


def execute_reassignment(
    replicas: ReplicaManager, target: Mapping[TopicPartition, Sequence[int]]
) -> dict[TopicPartition, list[int]]:
    """Validate ``target`` and hand it to the controller; returns the current assignment
    (save it to roll back)."""
    if not target:
        raise CoordinationError("The reassignment names no partitions")
    _check_partitions(replicas, target)
    usable = set(replicas.placement_brokers())
    for (_topic, partition), brokers in target.items():
        # Live brokers only (as Kafka): a replica on a down broker could never catch up, and
        # the unfinished reassignment would block every later one.
        validate_replica_assignment({partition: list(brokers)}, usable, start_partition=partition)
    _require_controller(replicas)
    current = current_assignment(replicas, {t for t, _ in target})
    replicas.metadata.create_admin_request(
        zkdata.ADMIN_REASSIGN,
        ReassignmentRecord(partitions={partition_key(*tp): list(r) for tp, r in sorted(target.items())}),
        "partition reassignment",
    )
    return {tp: current[tp] for tp in sorted(target)}


def pending_reassignments(replicas: ReplicaManager) -> set[TopicPartition]:
    """Partitions whose reassignment the controller has not finished yet."""
    return {split_partition_key(key) for key in replicas.metadata.reassignment_request() or {}}


def verify_reassignment(
    replicas: ReplicaManager, target: Mapping[TopicPartition, Sequence[int]]
) -> dict[TopicPartition, bool]:
    """Per partition: has its assignment reached the target (and the controller finished it)?"""
    pending = replicas.metadata.reassignment_request() or {}
    current = current_assignment(replicas, {t for t, _ in target})
    return {tp: current.get(tp) == list(r) and partition_key(*tp) not in pending for tp, r in sorted(target.items())}


def _await_taken(taken: Callable[[], bool], timeout_s: float, what: str, raise_on_timeout: bool = True) -> None:
    deadline = time.monotonic() + timeout_s
    while not taken():
        if time.monotonic() > deadline:
            if not raise_on_timeout:
                return
            raise CoordinationError(f"The controller did not execute the {what} within {timeout_s:.0f} s; is it stuck?")
        time.sleep(0.05)
