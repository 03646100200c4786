"""Replica placement: Kafka's rack-unaware and rack-aware assignment, partition increases and
explicit ``--replica-assignment``.

Expected layouts marked "Kafka:" are the expectations of Apache Kafka's own tests
(core/src/test/scala/unit/kafka/admin/AdminTest.scala, AdminRackAwareTest.scala and
AddPartitionsTest.scala; since 3.x server-common/src/test/java/org/apache/kafka/admin/AdminRackAwareTest.java).
"""

from __future__ import annotations

import random
from collections import Counter

import pytest

from sparklog.errors import InvalidPartitionsError, InvalidReplicaAssignmentError, InvalidReplicationFactorError
from sparklog.runtime.placement import (
    assign_new_partitions,
    assign_replicas,
    parse_replica_assignment,
    rack_alternated_broker_list,
    validate_replica_assignment,
)

SIX_BROKERS_THREE_RACKS = {0: "rack1", 1: "rack2", 2: "rack2", 3: "rack3", 4: "rack3", 5: "rack1"}


def assert_valid(assignment: dict[int, list[int]], brokers: list[int], partitions: range, rf: int) -> None:
    assert sorted(assignment) == list(partitions), f"partitions {sorted(assignment)} != {list(partitions)}"
    for partition, replicas in assignment.items():
        assert len(replicas) == rf, f"partition {partition}: {len(replicas)} replicas {replicas}, expected {rf}"
        assert len(set(replicas)) == rf, f"partition {partition}: replicas {replicas} repeat a broker"
        assert set(replicas) <= set(brokers), f"partition {partition}: replicas {replicas} outside brokers {brokers}"


def assert_even(counts: Counter[int], brokers: list[int], what: str) -> None:
    full = {b: counts.get(b, 0) for b in brokers}
    assert max(full.values()) - min(full.values()) <= 1, f"{what} are uneven across brokers: {full}"


def assert_rack_spread(assignment: dict[int, list[int]], racks: dict[int, str], rf: int) -> None:
    want = min(rf, len(set(racks.values())))
    for partition, replicas in assignment.items():
        spanned = {racks[b] for b in replicas}
        assert len(spanned) == want, (
            f"partition {partition}: replicas {replicas} span racks {sorted(spanned)}, expected {want} racks"
        )


# -- rack-unaware ------------------------------------------------------------------------


@pytest.mark.parametrize(("brokers", "rf"), [([0], 2), ([0, 1], 3), ([], 1)])
def test_rf_above_brokers_raises(brokers: list[int], rf: int) -> None:
    with pytest.raises(InvalidReplicationFactorError, match=str(rf)):
        assign_replicas(brokers, 3, rf)


@pytest.mark.parametrize("rf", [0, -1])
def test_rf_below_one_raises(rf: int) -> None:
    with pytest.raises(InvalidReplicationFactorError):
        assign_replicas([0, 1, 2], 3, rf)


@pytest.mark.parametrize("partitions", [0, -2])
def test_partitions_below_one_raise(partitions: int) -> None:
    # Kafka: InvalidPartitionsException("Number of partitions must be larger than 0.")
    with pytest.raises(InvalidPartitionsError, match="larger than 0"):
        assign_replicas([0, 1, 2], partitions, 1)


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


def test_kafka_replica_assignment_expected() -> None:
    # Kafka: AdminTest.testReplicaAssignment / AdminRackAwareTest.testReplicaAssignment
    # (brokers 0..4 without racks, 10 partitions, rf 3, fixedStartIndex 0).
    expected = {
        0: [0, 1, 2],
        1: [1, 2, 3],
        2: [2, 3, 4],
        3: [3, 4, 0],
        4: [4, 0, 1],
        5: [0, 2, 3],
        6: [1, 3, 4],
        7: [2, 4, 0],
        8: [3, 0, 1],
        9: [4, 1, 2],
    }
    assert assign_replicas([0, 1, 2, 3, 4], 10, 3, start_index=0) == expected
    assert assign_replicas([4, 3, 2, 1, 0], 10, 3, start_index=0, replica_shift=0) == expected


def test_start_index_alone_fixes_the_shift_like_kafka() -> None:
    # Kafka's fixedStartIndex sets both the start index and the first replica shift.
    for start in range(5):
        once = assign_replicas([0, 1, 2, 3, 4], 12, 3, start_index=start)
        again = assign_replicas([0, 1, 2, 3, 4], 12, 3, start_index=start, replica_shift=start)
        assert once == again, f"start_index={start}: {once} != {again}"


def test_broker_ids_are_used_not_indices() -> None:
    assignment = assign_replicas([10, 20], 4, 2, start_index=0, replica_shift=0)
    assert {tuple(r) for r in assignment.values()} == {(10, 20), (20, 10)}


def test_added_partitions_continue_numbering() -> None:
    assignment = assign_replicas([0, 1, 2], 4, 2, start_partition=3)
    assert_valid(assignment, [0, 1, 2], range(3, 7), 2)


# -- rack-aware --------------------------------------------------------------------------


def test_kafka_rack_alternated_list_and_assignment() -> None:
    # Kafka: AdminRackAwareTest.testGetRackAlternatedBrokerListAndAssignReplicasToBrokers
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    assert rack_alternated_broker_list(racks) == [0, 3, 1, 5, 4, 2]
    assert rack_alternated_broker_list({b: r for b, r in racks.items() if b != 5}) == [0, 3, 1, 4, 2]
    expected = {0: [0, 3, 1], 1: [3, 1, 5], 2: [1, 5, 4], 3: [5, 4, 2], 4: [4, 2, 0], 5: [2, 0, 3], 6: [0, 4, 2]}
    assert assign_replicas(sorted(racks), 7, 3, 0, 0, broker_racks=racks) == expected


def test_rack_alternated_list_doc_example() -> None:
    # Kafka's getRackAlternatedBrokerList doc: rack1 0,1,2 / rack2 3,4,5 / rack3 6,7,8.
    racks = {b: f"rack{b // 3 + 1}" for b in range(9)}
    assert rack_alternated_broker_list(racks) == [0, 3, 6, 1, 4, 7, 2, 5, 8]


def check_distribution(
    assignment: dict[int, list[int]],
    racks: dict[int, str],
    partitions: int,
    rf: int,
    *,
    rack_aware: bool = True,
    leaders: bool = True,
    replicas: bool = True,
) -> None:
    """Kafka's RackAwareTest.checkReplicaDistribution."""
    brokers = sorted(racks)
    assert_valid(assignment, brokers, range(min(assignment), min(assignment) + partitions), rf)
    if rack_aware:
        for partition, chosen in assignment.items():
            spanned = {racks[b] for b in chosen}
            assert len(spanned) == rf, f"partition {partition}: {chosen} spans {sorted(spanned)}, want {rf} racks"
    if leaders:
        counts = Counter(r[0] for r in assignment.values())
        want = partitions // len(brokers)
        assert all(counts.get(b, 0) == want for b in brokers), f"leader counts {dict(counts)}, want {want} each"
    if replicas:
        counts = Counter(b for r in assignment.values() for b in r)
        want = partitions * rf // len(brokers)
        assert all(counts.get(b, 0) == want for b in brokers), f"replica counts {dict(counts)}, want {want} each"


RACK_CASES = [
    # (name in Kafka's AdminRackAwareTest, racks, partitions, rf, fixed start or None, checks)
    ("testAssignmentWithRackAware", SIX_BROKERS_THREE_RACKS, 6, 3, 2, {}),
    ("testAssignmentWithRackAwareWithRandomStartIndex", SIX_BROKERS_THREE_RACKS, 6, 3, None, {}),
    (
        "testAssignmentWithRackAwareWithUnevenReplicas",
        SIX_BROKERS_THREE_RACKS,
        13,
        3,
        0,
        {"leaders": False, "replicas": False},
    ),
    (
        "testAssignmentWithRackAwareWithUnevenRacks",
        {0: "rack1", 1: "rack1", 2: "rack2", 3: "rack3", 4: "rack3", 5: "rack1"},
        12,
        3,
        None,
        {"replicas": False},
    ),
    ("testAssignmentWith2ReplicasRackAware", SIX_BROKERS_THREE_RACKS, 12, 2, None, {}),
    (
        "testAssignmentWith2ReplicasRackAwareWith6Partitions",
        {6: "rack1", 7: "rack2", 8: "rack2", 9: "rack3", 10: "rack3", 11: "rack1"},
        6,
        2,
        None,
        {},
    ),
    (
        "testAssignmentWith2ReplicasRackAwareWith6PartitionsAnd3Brokers",
        {0: "rack1", 1: "rack2", 4: "rack3"},
        3,
        2,
        None,
        {},
    ),
    (
        "testLargeNumberPartitionsAssignment",
        {
            0: "rack1",
            1: "rack2",
            2: "rack2",
            3: "rack3",
            4: "rack3",
            5: "rack1",
            6: "rack1",
            7: "rack2",
            8: "rack2",
            9: "rack3",
            10: "rack1",
            11: "rack3",
        },
        96,
        3,
        None,
        {},
    ),
]


@pytest.mark.parametrize(
    ("name", "racks", "partitions", "rf", "start", "checks"), RACK_CASES, ids=[c[0] for c in RACK_CASES]
)
def test_kafka_rack_aware_distributions(
    name: str, racks: dict[int, str], partitions: int, rf: int, start: int | None, checks: dict[str, bool]
) -> None:
    for _trial in range(1 if start is not None else 25):
        assignment = assign_replicas(sorted(racks), partitions, rf, start_index=start, broker_racks=racks)
        check_distribution(assignment, racks, partitions, rf, **checks)


def test_kafka_rack_aware_expansion() -> None:
    # Kafka: AdminRackAwareTest.testRackAwareExpansion (partitions 12..23 of a 6-broker cluster).
    racks = {6: "rack1", 7: "rack2", 8: "rack2", 9: "rack3", 10: "rack3", 11: "rack1"}
    for _trial in range(25):
        assignment = assign_replicas(sorted(racks), 12, 2, start_partition=12, broker_racks=racks)
        assert sorted(assignment) == list(range(12, 24))
        check_distribution(assignment, racks, 12, 2)


@pytest.mark.parametrize(
    ("racks", "rf", "want_racks"),
    [
        ({0: "rack1", 1: "rack2", 2: "rack2", 3: "rack3", 4: "rack3", 5: "rack2"}, 5, 3),  # testMoreReplicasThanRacks
        ({0: "rack1", 1: "rack2", 2: "rack2", 3: "rack3", 4: "rack3", 5: "rack2"}, 2, 2),  # testLessReplicasThanRacks
        ({b: "rack1" for b in range(6)}, 3, 1),  # testSingleRack
    ],
)
def test_kafka_racks_spanned_per_partition(racks: dict[int, str], rf: int, want_racks: int) -> None:
    for _trial in range(25):
        assignment = assign_replicas(sorted(racks), 6, rf, broker_racks=racks)
        for partition, replicas in assignment.items():
            assert len(replicas) == rf, f"partition {partition}: {replicas}"
            spanned = {racks[b] for b in replicas}
            assert len(spanned) == want_racks, f"partition {partition}: {replicas} spans {sorted(spanned)}"
        if want_racks == 1:  # testSingleRack: every broker leads exactly one of the 6 partitions
            assert Counter(r[0] for r in assignment.values()) == Counter(range(6))


def test_kafka_skip_broker_with_replica_already_assigned() -> None:
    # Kafka: AdminRackAwareTest.testSkipBrokerWithReplicaAlreadyAssigned (rf 4 over racks a, b, c).
    racks = {0: "a", 1: "b", 2: "c", 3: "a", 4: "a"}
    assignment = assign_replicas(list(range(5)), 6, 4, start_index=2, broker_racks=racks)
    check_distribution(assignment, racks, 6, 4, rack_aware=False, leaders=False, replicas=False)


def test_mixed_rack_information_is_an_error_unless_asked_otherwise() -> None:
    # Kafka: AdminRackAwareTest.testAssignReplicasToBrokersWithInvalidParameters (broker 4 has no rack).
    racks: dict[int, str | None] = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: None}
    with pytest.raises(InvalidReplicaAssignmentError, match="Not all brokers have rack information") as info:
        assign_replicas(sorted(racks), 10, 5, broker_racks=racks)
    assert "[4]" in str(info.value) and "disabled" in str(info.value), f"message should name broker 4: {info.value}"
    unaware = assign_replicas(sorted(racks), 10, 3, 0, 0)
    for mode in ("safe", "disabled"):
        got = assign_replicas(
            sorted(racks),
            10,
            3,
            0,
            0,
            broker_racks=racks,
            rack_aware_mode=mode,
        )
        assert got == unaware, f"{mode}: {got} != rack-unaware {unaware}"


def test_no_racks_or_empty_racks_mean_rack_unaware() -> None:
    unaware = assign_replicas([0, 1, 2, 3], 8, 2, 0, 0)
    for racks in ({}, {0: None, 1: None}, {0: "", 1: "", 2: "", 3: ""}):
        assert assign_replicas([0, 1, 2, 3], 8, 2, 0, 0, broker_racks=racks) == unaware, f"racks {racks}"
    with pytest.raises(InvalidReplicaAssignmentError):
        assign_replicas([0, 1, 2, 3], 8, 2, broker_racks={0: "a", 1: ""})


def test_disabled_mode_ignores_full_rack_information() -> None:
    got = assign_replicas(
        sorted(SIX_BROKERS_THREE_RACKS), 6, 3, 0, 0, broker_racks=SIX_BROKERS_THREE_RACKS, rack_aware_mode="disabled"
    )
    assert got == assign_replicas(sorted(SIX_BROKERS_THREE_RACKS), 6, 3, 0, 0)


def test_unknown_rack_mode_raises() -> None:
    with pytest.raises(ValueError, match="rack_aware_mode"):
        assign_replicas(
            [0, 1],
            2,
            1,
            broker_racks={0: "a", 1: "b"},
            rack_aware_mode="sometimes",  # type: ignore[arg-type]
        )


def test_seeded_random_rack_aware_properties() -> None:
    rng = random.Random(20240607)
    for trial in range(400):
        n_brokers = rng.randint(1, 12)
        brokers = rng.sample(range(100), n_brokers)
        racks = {b: f"r{rng.randint(0, rng.randint(0, 4))}" for b in brokers}
        rf = rng.randint(1, n_brokers)
        partitions = rng.randint(1, 40)
        start_partition = rng.choice([0, 0, rng.randint(1, 30)])
        assignment = assign_replicas(brokers, partitions, rf, start_partition, broker_racks=racks)
        context = f"trial {trial}: racks {racks}, rf {rf}, partitions {partitions} from {start_partition}"
        try:
            assert_valid(assignment, brokers, range(start_partition, start_partition + partitions), rf)
            assert_rack_spread(assignment, racks, rf)
            assert_even(Counter(r[0] for r in assignment.values()), brokers, "leaders")
        except AssertionError as exc:
            raise AssertionError(f"{context}: {exc}") from exc


# -- partition increase ------------------------------------------------------------------


def test_kafka_add_partitions_expected_leaders() -> None:
    # Kafka: AddPartitionsTest.testReplicaPlacementPartialServers and testReplicaPlacementAllServers
    # (4 brokers 0..3): new partitions follow partition 0's first replica.
    new = assign_new_partitions([0, 1, 2, 3], {0: [1, 2]}, 3)
    assert {p: (r[0], set(r)) for p, r in new.items()} == {1: (2, {0, 2}), 2: (3, {1, 3})}, new
    new = assign_new_partitions([0, 1, 2, 3], {0: [2, 3, 0, 1]}, 7)
    assert {p: r[0] for p, r in new.items()} == {1: 3, 2: 0, 3: 1, 4: 2, 5: 3, 6: 0}, new
    assert all(set(r) == {0, 1, 2, 3} for r in new.values()), new


def test_added_partitions_continue_the_pattern() -> None:
    brokers = [0, 1, 2, 3, 4]
    whole = assign_replicas(brokers, 12, 3, start_index=0)
    first = {p: r for p, r in whole.items() if p < 5}
    assert assign_new_partitions(brokers, first, 12) == {p: r for p, r in whole.items() if p >= 5}


def test_add_partitions_start_index_takes_next_live_broker() -> None:
    # Partition 0 led by a broker that is gone: Kafka starts at the next higher live broker, or 0.
    new = assign_new_partitions([0, 2, 4], {0: [3, 0]}, 2)
    assert new == assign_replicas([0, 2, 4], 1, 2, start_partition=1, start_index=2, replica_shift=2)
    new = assign_new_partitions([0, 2, 4], {0: [9, 0]}, 2)
    assert new == assign_replicas([0, 2, 4], 1, 2, start_partition=1, start_index=0, replica_shift=0)


def test_add_partitions_rack_aware() -> None:
    racks = SIX_BROKERS_THREE_RACKS
    existing = assign_replicas(sorted(racks), 6, 3, 0, 0, broker_racks=racks)
    new = assign_new_partitions(sorted(racks), existing, 18, broker_racks=racks)
    assert sorted(new) == list(range(6, 18))
    assert_rack_spread(new, racks, 3)


@pytest.mark.parametrize("total", [2, 1, 0])
def test_add_partitions_must_increase(total: int) -> None:
    with pytest.raises(InvalidPartitionsError, match="would not be an increase"):
        assign_new_partitions([0, 1], {0: [0, 1], 1: [1, 0]}, total)


def test_add_partitions_needs_partition_zero() -> None:
    # Kafka: AddPartitionsTest.testMissingPartition0 ("partition id 0 is missing").
    with pytest.raises(InvalidReplicaAssignmentError, match=r"missing \[0\]"):
        assign_new_partitions([0, 1], {1: [0, 1]}, 3)


# -- explicit assignment -----------------------------------------------------------------


def test_parse_replica_assignment() -> None:
    assert parse_replica_assignment("0:1:2,1:2:0") == {0: [0, 1, 2], 1: [1, 2, 0]}
    assert parse_replica_assignment(" 3 : 1 , 2:4 ") == {0: [3, 1], 1: [2, 4]}
    assert parse_replica_assignment("5") == {0: [5]}


def test_parse_replica_assignment_skips_existing_partitions() -> None:
    # kafka-topics --alter --partitions 3 --replica-assignment lists all partitions; new ones are kept.
    assert parse_replica_assignment("1:2,0:1,2:3", start_partition=1) == {1: [0, 1], 2: [2, 3]}
    with pytest.raises(InvalidReplicaAssignmentError, match="already has 2"):
        parse_replica_assignment("1:2,0:1", start_partition=2)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("", "empty"),
        ("  ", "empty"),
        ("0:1,,1:2", "Partition 1 has no replicas"),
        ("0:1,", "Partition 1 has no replicas"),
        ("0:a", "'a' in '0:a' is not a broker id"),
        ("0:+1", "not a broker id"),
        ("0:-1", "not a broker id"),
        ("0:1.0", "not a broker id"),
        ("0::1", "'' in '0::1' is not a broker id"),
        ("1:1", r"Partition replica lists may not contain duplicate entries: partition 0 lists broker\(s\) \[1\]"),
        ("0:1,2:3:2", r"partition 1 lists broker\(s\) \[2\]"),
        ("1,2:3", r"Partition 1 has different replication factor: \[2, 3\]"),
    ],
)
def test_parse_replica_assignment_errors(text: str, match: str) -> None:
    with pytest.raises(InvalidReplicaAssignmentError, match=match):
        parse_replica_assignment(text)


def test_validate_replica_assignment_accepts_good_assignment() -> None:
    # Kafka: AdminTest.testManualReplicaAssignment's good assignment.
    validate_replica_assignment({0: [0, 1, 2], 1: [1, 2, 3]}, [0, 1, 2, 3, 4])
    validate_replica_assignment({3: [0, 1], 4: [1, 0]}, {0, 1}, start_partition=3, replication_factor=2)


@pytest.mark.parametrize(
    ("assignment", "kwargs", "match"),
    [
        ({0: [0, 0]}, {}, "duplicate entries: partition 0"),  # Kafka: testManualReplicaAssignment
        ({0: [0, 1], 1: [0]}, {}, "partition 1 has 1"),  # Kafka: inconsistent replication factor
        ({}, {}, "no partitions"),
        ({0: []}, {}, "replication factor of 0 for partition 0"),
        ({0: [0], 2: [1]}, {}, r"consecutive sequence starting at 0, got \[0, 2\]"),
        ({1: [0]}, {}, "starting at 0"),
        ({0: [0, 7]}, {}, r"partition 0 are not available: \[7\]"),
        ({5: [0, 1]}, {"start_partition": 5, "replication_factor": 3}, "expected 3 replicas"),
        ({0: [0, "1"]}, {}, "not broker ids"),
        ({0: [0, True]}, {}, "not broker ids"),
    ],
)
def test_validate_replica_assignment_errors(assignment: dict, kwargs: dict, match: str) -> None:
    with pytest.raises(InvalidReplicaAssignmentError, match=match):
        validate_replica_assignment(assignment, [0, 1, 2, 3], **kwargs)


def test_parsed_assignment_round_trips_through_validation() -> None:
    parsed = parse_replica_assignment("2:0:1,0:1:2,1:2:0,2:1:0")
    validate_replica_assignment(parsed, [0, 1, 2])
    with pytest.raises(InvalidReplicaAssignmentError, match="not available"):
        validate_replica_assignment(parsed, [0, 1])
