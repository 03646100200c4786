"""Replica placement: Kafka's assignment of partition replicas to brokers, output for output.

Pure policy (no I/O; imports neither Spark, kazoo nor deltalake).

:func:`assign_replicas` is Kafka's ``AdminUtils.assignReplicasToBrokers``:

* **rack-unaware** (no broker has a rack): the first replica (preferred leader) of partition ``p``
  goes to broker ``(p + start) % n`` of the id-sorted broker list; follower ``j`` sits at
  ``first + 1 + (shift + j) % (n - 1)``, and ``shift`` grows by one every ``n`` partitions so the
  follower sets of one leader differ between rounds.
* **rack-aware** (every broker has a rack): the same round robin over the *rack-alternated* list
  (racks sorted, brokers sorted within a rack, one broker per rack in turn); a follower candidate
  is skipped while its rack already holds a replica of the partition and some rack holds none,
  and while it already holds one and some broker holds none.
* some brokers with a rack and others without: an error in ``"enforced"`` mode (Kafka's default
  for its tools), no racks in ``"safe"`` mode (Kafka's auto topic creation), racks ignored in
  ``"disabled"`` mode (``--disable-rack-aware``). An empty rack string counts as no rack, as
  ``broker.rack`` does in ``sparklog.config``.

Invariants (tested in ``tests/unit/test_placement.py``):

* every partition gets ``replication_factor`` distinct brokers out of ``broker_ids``;
* preferred leaders go round robin, so leader counts differ by at most one between brokers;
* with racks, the replicas of each partition span ``min(replication_factor, racks)`` racks;
* given ``start_index`` (and so the shift, see below) the output is deterministic. Kafka's
  ``fixedStartIndex`` fixes both the start index and the initial shift; ``start_index`` alone does
  the same here, ``replica_shift`` overrides the shift.

:func:`assign_new_partitions` is Kafka's partition increase (``AdminZkClient.addPartitions``):
new partitions continue the existing pattern. :func:`parse_replica_assignment` and
:func:`validate_replica_assignment` handle an explicit ``--replica-assignment``.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from typing import Literal

from sparklog.errors import (
    ConfigError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
)

__all__ = [
    "RACK_AWARE_MODES",
    "RackAwareMode",
    "assign_new_partitions",
    "assign_replicas",
    "parse_replica_assignment",
    "rack_alternated_broker_list",
    "validate_replica_assignment",
]

RackAwareMode = Literal["enforced", "safe", "disabled"]
RACK_AWARE_MODES: tuple[str, ...] = ("enforced", "safe", "disabled")

Assignment = dict[int, list[int]]

_BROKER_ID = re.compile(r"[0-9]+")  # ASCII digits only: int() would also take "+1", "1_0" and "٣"


def assign_replicas(
    broker_ids: Sequence[int],
    num_partitions: int,
    replication_factor: int,
    start_partition: int = 0,
    start_index: int | None = None,
    replica_shift: int | None = None,
    *,
    broker_racks: Mapping[int, str | None] | None = None,
    rack_aware_mode: RackAwareMode = "enforced",
) -> Assignment:
    """Partition id -> replica broker ids (first = preferred leader), for partitions
    ``start_partition .. start_partition + num_partitions - 1``.

    ``start_index``/``replica_shift`` None means random, as Kafka does for a new topic; a given
    ``start_index`` also fixes the shift (Kafka's ``fixedStartIndex``) unless ``replica_shift`` is
    given. ``broker_racks`` maps broker id -> rack (missing, None or "" = no rack).
    """
    brokers = sorted(set(broker_ids))
    if num_partitions < 1:
        raise InvalidPartitionsError(f"Number of partitions must be larger than 0, got {num_partitions}.")
    if replication_factor < 1:
        raise InvalidReplicationFactorError(f"Replication factor must be larger than 0, got {replication_factor}.")
    if replication_factor > len(brokers):
        raise InvalidReplicationFactorError(
            f"Replication factor: {replication_factor} larger than available brokers: {len(brokers)}. "
            "Start more brokers or lower the replication factor."
        )
    racks = _rack_map(brokers, broker_racks, rack_aware_mode)
    # Kafka draws the start index first, then the shift, each in [0, n).
    rng = random.Random()
    start = rng.randrange(len(brokers)) if start_index is None else start_index
    if replica_shift is not None:
        shift = replica_shift
    else:
        shift = rng.randrange(len(brokers)) if start_index is None else start_index
    first_partition = max(0, start_partition)
    if racks is None:
        return _assign_rack_unaware(brokers, num_partitions, replication_factor, first_partition, start, shift)
    return _assign_rack_aware(racks, num_partitions, replication_factor, first_partition, start, shift)


def rack_alternated_broker_list(broker_racks: Mapping[int, str]) -> list[int]:
    """Brokers interleaved by rack: racks in sorted order, each giving its next-lowest broker id in
    turn, racks that run out are passed over. Kafka's ``getRackAlternatedBrokerList``; e.g.
    racks ``a: 0 1 2, b: 3 4 5, c: 6 7 8`` -> ``0 3 6 1 4 7 2 5 8``."""
    by_rack: dict[str, list[int]] = {}
    for broker, rack in broker_racks.items():
        by_rack.setdefault(rack, []).append(broker)
    columns = [sorted(by_rack[rack]) for rack in sorted(by_rack)]
    depth = max((len(column) for column in columns), default=0)
    return [column[row] for row in range(depth) for column in columns if row < len(column)]


def assign_new_partitions(
    broker_ids: Sequence[int],
    existing: Mapping[int, Sequence[int]],
    total: int,
    *,
    broker_racks: Mapping[int, str | None] | None = None,
    rack_aware_mode: RackAwareMode = "enforced",
) -> Assignment:
    """Replicas for the partitions ``len(existing) .. total - 1`` only, continuing the topic's pattern.

    As Kafka's ``createNewPartitionsAssignment``: the replication factor is partition 0's, the
    start index is the position of partition 0's first replica in the id-sorted broker list (or of
    the next higher live broker; 0 if none), used as ``fixedStartIndex`` (start and shift), and
    numbering continues at the current partition count.
    """
    current = len(existing)
    if sorted(existing) != list(range(current)):
        missing = sorted(set(range(current)) - set(existing))
        raise InvalidReplicaAssignmentError(
            f"The existing replica assignment must cover partitions 0..{current - 1}, got {sorted(existing)} "
            f"(missing {missing}). Repair the topic's assignment before adding partitions."
        )
    if total <= current:
        raise InvalidPartitionsError(
            f"Topic currently has {current} partitions, {total} would not be an increase. "
            "Partitions can only be increased."
        )
    partition0 = list(existing[0])
    if not partition0:
        raise InvalidReplicaAssignmentError(
            "Partition 0 has no replicas, so the replication factor of the new partitions is unknown. "
            "Repair partition 0's assignment first."
        )
    brokers = sorted(set(broker_ids))
    start = next((index for index, broker in enumerate(brokers) if broker >= partition0[0]), 0)
    return assign_replicas(
        brokers,
        total - current,
        len(partition0),
        start_partition=current,
        start_index=start,
        replica_shift=start,
        broker_racks=broker_racks,
        rack_aware_mode=rack_aware_mode,
    )


def parse_replica_assignment(text: str, *, start_partition: int = 0) -> Assignment:
    """Parse kafka-topics' ``--replica-assignment``: ``"0:1:2,1:2:0"`` = partition 0 on brokers
    0, 1, 2 and partition 1 on 1, 2, 0 (first = preferred leader).

    The list always starts at partition 0. With ``start_partition`` (adding partitions to a topic
    that has that many) the entries of the existing partitions are checked, then skipped, as
    kafka-topics ``--alter`` does: only the new partitions are returned.
    """
    if not text or not text.strip():
        raise InvalidReplicaAssignmentError(
            "The replica assignment is empty. List each partition's broker ids separated by ':', "
            "partitions separated by ',' (e.g. 0:1:2,1:2:0)."
        )
    parsed: Assignment = {}
    for partition, entry in enumerate(text.split(",")):
        if not entry.strip():
            raise InvalidReplicaAssignmentError(
                f"Partition {partition} has no replicas in replica assignment {text!r}. "
                "Give every partition at least one broker id (e.g. 0:1:2), with no empty entries between commas."
            )
        replicas: list[int] = []
        for token in entry.split(":"):
            token = token.strip()
            if not _BROKER_ID.fullmatch(token):
                raise InvalidReplicaAssignmentError(
                    f"Partition {partition}: {token!r} in {entry.strip()!r} is not a broker id. "
                    "Broker ids are non-negative integers separated by ':'."
                )
            replicas.append(int(token))
        _check_no_duplicates(partition, replicas)
        parsed[partition] = replicas
        if len(replicas) != len(parsed[0]):
            raise InvalidReplicaAssignmentError(
                f"Partition {partition} has different replication factor: {replicas} has {len(replicas)} "
                f"replicas while partition 0 has {len(parsed[0])}. Give every partition the same number of brokers."
            )
    if start_partition > 0:
        if len(parsed) <= start_partition:
            raise InvalidReplicaAssignmentError(
                f"The replica assignment lists {len(parsed)} partitions, but the topic already has "
                f"{start_partition}: list the existing partitions' replicas first, then the new ones."
            )
        return {partition: replicas for partition, replicas in parsed.items() if partition >= start_partition}
    return parsed


def validate_replica_assignment(
    assignment: Mapping[int, Sequence[int]],
    live_broker_ids: Collection[int],
    *,
    start_partition: int = 0,
    replication_factor: int | None = None,
) -> None:
    """Raise :class:`InvalidReplicaAssignmentError` unless ``assignment`` is usable as is.

    Kafka's checks (``AdminZkClient.validateReplicaAssignment`` and topic-creation validation):
    partitions ``start_partition, start_partition + 1, ...`` without gaps; per partition, at least
    one replica, no broker twice, only live brokers, and the same replication factor everywhere
    (``replication_factor`` if given, e.g. the existing one when adding partitions; else that of
    the lowest partition).
    """
    if not assignment:
        raise InvalidReplicaAssignmentError("The replica assignment has no partitions. Give at least one partition.")
    partitions = sorted(assignment)
    expected = list(range(start_partition, start_partition + len(partitions)))
    if partitions != expected:
        raise InvalidReplicaAssignmentError(
            f"Partitions must be a consecutive sequence starting at {start_partition}, got {partitions}. "
            f"Assign exactly partitions {start_partition}..{start_partition + len(partitions) - 1}."
        )
    live = set(live_broker_ids)
    rf = len(assignment[partitions[0]]) if replication_factor is None else replication_factor
    for partition in partitions:
        replicas = list(assignment[partition])
        if not replicas:
            raise InvalidReplicaAssignmentError(
                f"Cannot have replication factor of 0 for partition {partition}. Give it at least one broker."
            )
        bad = [b for b in replicas if isinstance(b, bool) or not isinstance(b, int) or b < 0]
        if bad:
            raise InvalidReplicaAssignmentError(
                f"Partition {partition}: replicas {replicas} contain {bad}, which are not broker ids "
                "(non-negative integers)."
            )
        _check_no_duplicates(partition, replicas)
        unknown = sorted(set(replicas) - live)
        if unknown:
            raise InvalidReplicaAssignmentError(
                f"Some brokers specified for partition {partition} are not available: {unknown} "
                f"(replicas {replicas}, live brokers {sorted(live)}). Start those brokers or assign the "
                "partition to live ones."
            )
        if len(replicas) != rf:
            raise InvalidReplicaAssignmentError(
                f"Inconsistent replication factor between partitions: expected {rf} replicas, partition "
                f"{partition} has {len(replicas)} ({replicas}). Give every partition {rf} brokers."
            )


def _check_no_duplicates(partition: int, replicas: Sequence[int]) -> None:
    duplicates = sorted(broker for broker, count in Counter(replicas).items() if count > 1)
    if duplicates:
        raise InvalidReplicaAssignmentError(
            "Partition replica lists may not contain duplicate entries: partition "
            f"{partition} lists broker(s) {duplicates} more than once in {list(replicas)}. Name each broker once."
        )


def _rack_map(
    brokers: Sequence[int], broker_racks: Mapping[int, str | None] | None, mode: str
) -> dict[int, str] | None:
    """Broker -> rack when the assignment must be rack-aware, None for the rack-unaware algorithm."""
    if mode not in RACK_AWARE_MODES:
        raise ConfigError(f"rack_aware_mode must be one of {', '.join(RACK_AWARE_MODES)}, got {mode!r}")
    if broker_racks is None or mode == "disabled":
        return None
    racks = {broker: broker_racks.get(broker) or None for broker in brokers}
    without = [broker for broker, rack in racks.items() if rack is None]
    if len(without) == len(brokers):
        return None
    if without:
        if mode == "safe":
            return None
        with_rack = [broker for broker in brokers if racks[broker] is not None]
        raise InvalidReplicaAssignmentError(
            "Not all brokers have rack information for replica rack aware assignment: brokers "
            f"{without} have no rack, brokers {with_rack} do. Set broker.rack on every broker, or "
            "place replicas without racks (rack_aware_mode='disabled', Kafka's --disable-rack-aware)."
        )
    return {broker: rack for broker, rack in racks.items() if rack is not None}


def _follower_index(first: int, shift: int, follower: int, n: int) -> int:
    # Kafka's replicaIndex: followers never land on the leader's slot (offset 1 .. n-1).
    return (first + 1 + (shift + follower) % (n - 1)) % n


def _assign_rack_unaware(
    brokers: Sequence[int], num_partitions: int, rf: int, first_partition: int, start: int, shift: int
) -> Assignment:
    n = len(brokers)
    assignment: Assignment = {}
    for partition in range(first_partition, first_partition + num_partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        first = (partition + start) % n
        assignment[partition] = [brokers[first]] + [brokers[_follower_index(first, shift, j, n)] for j in range(rf - 1)]
    return assignment


def _assign_rack_aware(
    racks: Mapping[int, str], num_partitions: int, rf: int, first_partition: int, start: int, shift: int
) -> Assignment:
    arranged = rack_alternated_broker_list(racks)
    n = len(arranged)
    num_racks = len(set(racks.values()))
    assignment: Assignment = {}
    for partition in range(first_partition, first_partition + num_partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        first = (partition + start) % n
        leader = arranged[first]
        replicas = [leader]
        racks_used = {racks[leader]}
        brokers_used = {leader}
        candidate = 0  # Kafka's k: keeps counting across followers, so skipped brokers come back later
        while len(replicas) < rf:
            broker = arranged[_follower_index(first, shift * num_racks, candidate, n)]
            rack = racks[broker]
            rack_ok = rack not in racks_used or len(racks_used) == num_racks
            broker_ok = broker not in brokers_used or len(brokers_used) == n
            if rack_ok and broker_ok:
                replicas.append(broker)
                racks_used.add(rack)
                brokers_used.add(broker)
            candidate += 1
        assignment[partition] = replicas
    return assignment
