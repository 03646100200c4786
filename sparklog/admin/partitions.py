"""Partition admin: preferred-leader elections and reassignments (Kafka's ``kafka-leader-election``
and ``kafka-reassign-partitions``), as requests the controller executes.

* :func:`elect_preferred_leaders` writes ``/admin/preferred_replica_election`` and waits for
  the controller to take it; each partition then reports ``elected`` (its preferred replica
  leads now), ``already`` (it led before) or why not (not live, not in sync).
* :func:`generate_reassignment` proposes a new assignment of some topics over some brokers
  (Kafka's rack-aware placement), next to the current one; :func:`execute_reassignment`
  validates a plan and adds it to ``/admin/reassign_partitions``; :func:`verify_reassignment`
  tells, per partition, whether the assignment reached the target.
* :func:`alter_reassignments` (Kafka's AlterPartitionReassignments) takes or cancels each
  partition's reassignment on its own; :func:`ongoing_reassignments` (ListPartitionReassignments)
  reports the partitions still moving, with the replicas being added and removed.

Invariants: a request is validated completely before anything is written (unknown topics
and partitions, unknown or duplicate brokers, an empty replica list: clear errors, nothing
changed; :func:`alter_reassignments` refuses partitions one by one and writes the rest). One
preferred election at a time; reassignments are merged into the pending request by
compare-and-set (a new target replaces a partition's pending one, as in Kafka), and each
keeps the replicas it had when first requested, which a cancel returns it to. Needs a live
controller (an agent started with ``sparklog broker start``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence

from sparklog.errors import (
    ControllerNotAvailableError,
    CoordinationError,
    InvalidReplicationFactorError,
    NoReassignmentInProgressError,
    SparklogError,
    UnknownPartitionError,
)
from sparklog.metadata import zkdata
from sparklog.metadata.broker_registration import live_broker_ids
from sparklog.metadata.controller_election import current_controller
from sparklog.metadata.zkdata import ElectionRequestRecord, ReassignmentRecord, partition_key, split_partition_key
from sparklog.model.topic import TopicPartition
from sparklog.runtime.placement import validate_replica_assignment
from sparklog.runtime.policy import generate_reassignment as plan_reassignment
from sparklog.runtime.replica_manager import ReplicaManager

__all__ = [
    "alter_reassignments",
    "current_assignment",
    "elect_leaders",
    "elect_preferred_leaders",
    "execute_reassignment",
    "generate_reassignment",
    "ongoing_reassignments",
    "pending_reassignments",
    "verify_reassignment",
]


def _require_controller(replicas: ReplicaManager) -> None:
    if current_controller(replicas.zk) is None:
        raise ControllerNotAvailableError(
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
    return elect_leaders(replicas, partitions, timeout_s)


def elect_leaders(
    replicas: ReplicaManager,
    partitions: Iterable[TopicPartition] | None = None,
    timeout_s: float = 30.0,
    *,
    unclean: bool = False,
) -> dict[TopicPartition, str]:
    """Kafka's leader elections, executed by the controller: the preferred replica (default),
    or with ``unclean`` a live replica, out of sync if need be, for partitions without a live
    leader. Per partition ``elected``, ``already`` (its preferred replica / a live replica led
    before) or the reason it could not be. An election in progress is waited for first."""
    wanted = sorted(partitions) if partitions is not None else sorted(current_assignment(replicas))
    _check_partitions(replicas, wanted)
    _require_controller(replicas)
    what = "unclean leader election" if unclean else "preferred leader election"
    deadline = time.monotonic() + timeout_s
    assignment = current_assignment(replicas, {t for t, _ in wanted})
    live = set(live_broker_ids(replicas.zk))

    def done(tp: TopicPartition, leader: int) -> bool:
        return leader in live if unclean else leader == assignment[tp][0]

    before = {tp: replicas.states(tp[0], [tp[1]])[tp[1]].leader for tp in wanted}
    request = ElectionRequestRecord(partitions=[partition_key(*tp) for tp in wanted], unclean=unclean)
    while True:
        try:
            replicas.metadata.create_admin_request(zkdata.ADMIN_PREFERRED_ELECTION, request, what)
            break
        except CoordinationError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)  # another election is in progress: the controller takes it in a tick
    taken = lambda: replicas.metadata.preferred_election_request() is None  # noqa: E731
    _await_taken(taken, max(deadline - time.monotonic(), 1.0), what)
    led = lambda tp: done(tp, replicas.states(tp[0], [tp[1]])[tp[1]].leader)  # noqa: E731
    _await_taken(lambda: all(led(tp) for tp in wanted), 2.0, "", raise_on_timeout=False)  # the watch delivers
    outcome: dict[TopicPartition, str] = {}
    for tp in wanted:
        preferred = assignment[tp][0]
        state = replicas.states(tp[0], [tp[1]])[tp[1]]
        if done(tp, before[tp]):
            outcome[tp] = "already"
        elif done(tp, state.leader):
            outcome[tp] = "elected"
        elif unclean:
            outcome[tp] = f"no replica of {assignment[tp]} is live"
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
    _merge_reassignments(replicas, {tp: list(r) for tp, r in target.items()}, current)
    return {tp: current[tp] for tp in sorted(target)}


def alter_reassignments(
    replicas: ReplicaManager,
    changes: Mapping[TopicPartition, Sequence[int] | None],
    *,
    allow_replication_factor_change: bool = True,
) -> dict[TopicPartition, SparklogError | None]:
    """Kafka's AlterPartitionReassignments: per partition, a new target (the partition exists,
    its replicas are distinct live brokers, as many as now unless
    ``allow_replication_factor_change``) or None, a cancel (NO_REASSIGNMENT_IN_PROGRESS when
    none is pending). Returns what refused each partition, None for the accepted ones."""
    _require_controller(replicas)
    usable = set(replicas.placement_brokers())
    outcome: dict[TopicPartition, SparklogError | None] = {}
    for (topic, partition), target in sorted(changes.items()):
        try:
            _check_partitions(replicas, [(topic, partition)])
            if target is not None:
                validate_replica_assignment({partition: list(target)}, usable, start_partition=partition)
                now = replicas.metadata.assignment(topic)[0].replicas(partition)
                if not allow_replication_factor_change and len(target) != len(now):
                    raise InvalidReplicationFactorError(
                        f"The reassignment of {topic}-{partition} changes its replication factor from {len(now)} "
                        f"to {len(target)}, and the request does not allow it (allow_replication_factor_change)"
                    )
            outcome[(topic, partition)] = None
        except SparklogError as exc:
            outcome[(topic, partition)] = exc
    accepted = {tp: None if changes[tp] is None else list(changes[tp] or ()) for tp, e in outcome.items() if e is None}
    if accepted:
        current = current_assignment(replicas, {t for t, _ in accepted})
        outcome.update(_merge_reassignments(replicas, accepted, current))
    return outcome


def _merge_reassignments(
    replicas: ReplicaManager,
    changes: Mapping[TopicPartition, list[int] | None],
    current: Mapping[TopicPartition, list[int]],
) -> dict[TopicPartition, SparklogError]:
    """Add ``changes`` to the pending request (compare-and-set); the cancels refused."""
    refused: dict[TopicPartition, SparklogError] = {}

    def merge(record: ReassignmentRecord | None) -> ReassignmentRecord:
        refused.clear()
        targets = dict(record.partitions) if record is not None else {}
        original = dict(record.original) if record is not None else {}
        for tp, target in sorted(changes.items()):
            key = partition_key(*tp)
            if target is not None:
                targets[key] = target
                original.setdefault(key, current[tp])
            elif key not in targets or targets[key] == original.get(key):
                refused[tp] = NoReassignmentInProgressError(
                    f"No reassignment of {tp[0]}-{tp[1]} is in progress (replicas {current[tp]}); nothing to cancel"
                )
            elif original.get(key, current[tp]) == current[tp]:
                del targets[key]  # nothing moved yet
                original.pop(key, None)
            else:
                targets[key] = original[key]  # the controller moves it back, dropping the replicas it added
        return ReassignmentRecord(partitions=targets, original=original)

    replicas.metadata.update_reassignment_request(merge)
    return dict(refused)


def ongoing_reassignments(
    replicas: ReplicaManager, partitions: Iterable[TopicPartition] | None = None
) -> dict[TopicPartition, tuple[list[int], list[int], list[int]]]:
    """Partitions (of ``partitions``, default all) whose reassignment is in progress: their
    replicas (the old and new ones while it runs, as Kafka lists them), the replicas being
    added and those being removed. A cancelled one moving back to its replicas is not listed."""
    record = replicas.metadata.reassignment_record()
    wanted = None if partitions is None else set(partitions)
    result: dict[TopicPartition, tuple[list[int], list[int], list[int]]] = {}
    for key, target in sorted((record.partitions if record is not None else {}).items()):
        tp = split_partition_key(key)
        if wanted is not None and tp not in wanted:
            continue
        try:
            now = replicas.metadata.assignment(tp[0])[0].replicas(tp[1])
        except SparklogError:
            continue  # the topic is gone
        assert record is not None
        before = record.original.get(key, now)
        if target == before:
            continue
        adding = [b for b in target if b not in before]
        removing = [b for b in before if b not in target]
        result[tp] = (now + [b for b in adding if b not in now], adding, removing)
    return result


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
            raise ControllerNotAvailableError(
                f"The controller did not execute the {what} within {timeout_s:.0f} s; is it stuck?"
            )
        time.sleep(0.05)
