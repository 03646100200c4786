"""Replica placement (Kafka's rack-unaware assignment)."""

from __future__ import annotations

from collections import Counter

import pytest

from sparklog.controller.placement import assign_replicas
from sparklog.errors import InvalidReplicationFactorError


def assert_valid(assignment: dict[int, list[int]], brokers: list[int], partitions: range, rf: int) -> None:
    assert sorted(assignment) == list(partitions), f"partitions {sorted(assignment)} != {list(partitions)}"
    for partition, replicas in assignment.items():
        assert len(replicas) == rf, f"partition {partition}: {len(replicas)} replicas {replicas}, expected {rf}"
        assert len(set(replicas)) == rf, f"partition {partition}: replicas {replicas} repeat a broker"
        assert set(replicas) <= set(brokers), f"partition {partition}: replicas {replicas} outside brokers {brokers}"


def assert_even(counts: Counter[int], brokers: list[int], what: str) -> None:
    full = {b: counts.get(b, 0) for b in brokers}
    assert max(full.values()) - min(full.values()) <= 1, f"{what} are uneven across brokers: {full}"


@pytest.mark.parametrize(("brokers", "rf"), [([0], 2), ([0, 1], 3), ([], 1)])
def test_rf_above_brokers_raises(brokers: list[int], rf: int) -> None:
    with pytest.raises(InvalidReplicationFactorError, match=str(rf)):
        assign_replicas(brokers, 3, rf)


@pytest.mark.parametrize("rf", [0, -1])
def test_rf_below_one_raises(rf: int) -> None:
    with pytest.raises(InvalidReplicationFactorError):
        assign_replicas([0, 1, 2], 3, rf)


@pytest.mark.parametrize(
    ("brokers", "partitions", "rf"),
    [([0], 5, 1), ([0, 1, 2], 12, 3), ([1, 5, 9, 13, 17], 50, 3), ([3, 1, 2, 0], 7, 2), ([0, 1, 2, 3, 4, 5], 60, 4)],
)
def test_replicas_distinct_and_leaders_even(brokers: list[int], partitions: int, rf: int) -> None:
    for _trial in range(20):  # start index and shift are random
        assignment = assign_replicas(brokers, partitions, rf)
        assert_valid(assignment, brokers, range(partitions), rf)
        assert_even(Counter(r[0] for r in assignment.values()), brokers, "leaders")
        if partitions % len(brokers) == 0:
            assert_even(Counter(b for r in assignment.values() for b in r), brokers, "replicas")


def test_kafka_documented_layout() -> None:
    # The example in Kafka's AdminUtils.assignReplicasToBrokers doc (5 brokers, start 0, shift 0).
    assignment = assign_replicas([0, 1, 2, 3, 4], 10, 3, start_index=0, replica_shift=0)
    assert assignment[0] == [0, 1, 2]
    assert assignment[4] == [4, 0, 1]
    assert assignment[5] == [0, 2, 3]
    assert assignment[9] == [4, 1, 2]
    assert [assignment[p][0] for p in range(10)] == [0, 1, 2, 3, 4, 0, 1, 2, 3, 4]


def test_added_partitions_continue_numbering() -> None:
    assignment = assign_replicas([0, 1, 2], 4, 2, start_partition=3)
    assert_valid(assignment, [0, 1, 2], range(3, 7), 2)


def test_broker_ids_are_used_not_indices() -> None:
    assignment = assign_replicas([10, 20], 4, 2, start_index=0, replica_shift=0)
    assert {tuple(r) for r in assignment.values()} == {(10, 20), (20, 10)}
