"""Partition assignors: Kafka's RangeAssignor / RoundRobinAssignor cases, sticky moves, invariants."""

from __future__ import annotations

import ast
import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from sparklog.errors import ConfigError, GroupError
from sparklog.group.assignors import (
    ASSIGNORS,
    MemberSubscription,
    Previous,
    assign,
    range_assign,
    roundrobin_assign,
    sticky_assign,
)
from sparklog.model.topic import TopicPartition

Assignment = dict[str, list[TopicPartition]]
T, T1, T2 = "topic", "topic1", "topic2"


def m(member_id: str, *topics: str, instance_id: str | None = None) -> MemberSubscription:
    return MemberSubscription(member_id, tuple(topics), instance_id)


def assert_valid(assignment: Assignment, members: Sequence[MemberSubscription], partitions: Mapping[str, int]) -> None:
    """Every subscribed partition assigned exactly once, to a member subscribed to its topic."""
    ids = sorted(x.member_id for x in members)
    assert sorted(assignment) == ids, f"members {sorted(assignment)} != expected {ids}"
    topics = {x.member_id: set(x.topics) for x in members}
    for member_id, tps in assignment.items():
        assert tps == sorted(tps), f"{member_id}: list not sorted: {tps}"
        foreign = [tp for tp in tps if tp[0] not in topics[member_id]]
        assert not foreign, (
            f"{member_id} got {foreign} from topics it does not subscribe to {sorted(topics[member_id])}"
        )
    owners: dict[TopicPartition, list[str]] = {}
    for member_id, tps in assignment.items():
        for tp in tps:
            owners.setdefault(tp, []).append(member_id)
    subscribed = {t for ts in topics.values() for t in ts if t in partitions}
    expected = {(t, p) for t in subscribed for p in range(partitions[t])}
    twice = {tp: who for tp, who in owners.items() if len(who) > 1}
    assert not twice, f"partitions assigned more than once: {twice}"
    missing, extra = sorted(expected - owners.keys()), sorted(owners.keys() - expected)
    assert not missing, f"partitions not assigned: {missing}"
    assert not extra, f"partitions assigned that do not exist or nobody subscribes to: {extra}"


def run(
    strategy: str,
    members: Sequence[MemberSubscription],
    partitions: Mapping[str, int],
    previous: Previous | None = None,
) -> Assignment:
    result = assign(strategy, members, partitions, previous)
    assert_valid(result, members, partitions)
    shuffled = list(members)
    random.Random(7).shuffle(shuffled)
    again = assign(strategy, shuffled, dict(reversed(list(partitions.items()))), previous)
    assert again == result, f"{strategy} not deterministic under input reordering: {result} vs {again}"
    return result


def moved(previous: Mapping[str, Sequence[TopicPartition]], current: Assignment) -> list[TopicPartition]:
    """Previously owned partitions that now belong to a different (still present) or no member."""
    owner = {tp: member for member, tps in current.items() for tp in tps}
    return sorted(tp for member, tps in previous.items() for tp in tps if tp in owner and owner[tp] != member)


def counts(assignment: Assignment) -> dict[str, int]:
    return {member: len(tps) for member, tps in assignment.items()}


# --- Kafka RangeAssignorTest -------------------------------------------------------------


def test_range_one_consumer_no_topic() -> None:
    assert run("range", [m("c")], {}) == {"c": []}


def test_range_one_consumer_nonexistent_topic() -> None:
    assert run("range", [m("c", T)], {}) == {"c": []}


def test_range_one_consumer_one_topic() -> None:
    assert run("range", [m("c", T)], {T: 3}) == {"c": [(T, 0), (T, 1), (T, 2)]}


def test_range_only_assigns_partitions_from_subscribed_topics() -> None:
    assert run("range", [m("c", T)], {T: 3, "otherTopic": 3}) == {"c": [(T, 0), (T, 1), (T, 2)]}


def test_range_one_consumer_multiple_topics() -> None:
    assert run("range", [m("c", T1, T2)], {T1: 1, T2: 2}) == {"c": [(T1, 0), (T2, 0), (T2, 1)]}


def test_range_two_consumers_one_topic_one_partition() -> None:
    assert run("range", [m("c1", T), m("c2", T)], {T: 1}) == {"c1": [(T, 0)], "c2": []}


def test_range_two_consumers_one_topic_two_partitions() -> None:
    assert run("range", [m("c1", T), m("c2", T)], {T: 2}) == {"c1": [(T, 0)], "c2": [(T, 1)]}


def test_range_multiple_consumers_mixed_topic_subscriptions() -> None:
    members = [m("consumer1", T1), m("consumer2", T1, T2), m("consumer3", T1)]
    assert run("range", members, {T1: 3, T2: 2}) == {
        "consumer1": [(T1, 0)],
        "consumer2": [(T1, 1), (T2, 0), (T2, 1)],
        "consumer3": [(T1, 2)],
    }


def test_range_two_consumers_two_topics_six_partitions() -> None:
    assert run("range", [m("c1", T1, T2), m("c2", T1, T2)], {T1: 3, T2: 3}) == {
        "c1": [(T1, 0), (T1, 1), (T2, 0), (T2, 1)],
        "c2": [(T1, 2), (T2, 2)],
    }


def test_range_orders_static_members_first_by_instance_id() -> None:
    members = [m("a", T, instance_id="z"), m("b", T, instance_id="y"), m("0-dynamic", T)]
    assert run("range", members, {T: 3}) == {"b": [(T, 0)], "a": [(T, 1)], "0-dynamic": [(T, 2)]}


# --- Kafka RoundRobinAssignorTest ------------------------------------------------------


def test_roundrobin_one_consumer_cases() -> None:
    assert run("roundrobin", [m("c")], {}) == {"c": []}
    assert run("roundrobin", [m("c", T)], {}) == {"c": []}
    assert run("roundrobin", [m("c", T)], {T: 3, "otherTopic": 3}) == {"c": [(T, 0), (T, 1), (T, 2)]}
    assert run("roundrobin", [m("c1", T), m("c2", T)], {T: 1}) == {"c1": [(T, 0)], "c2": []}


def test_roundrobin_two_consumers_two_topics_six_partitions() -> None:
    assert run("roundrobin", [m("c1", T1, T2), m("c2", T1, T2)], {T1: 3, T2: 3}) == {
        "c1": [(T1, 0), (T1, 2), (T2, 1)],
        "c2": [(T1, 1), (T2, 0), (T2, 2)],
    }


def test_roundrobin_multiple_consumers_mixed_topics() -> None:
    members = [m("consumer1", T1), m("consumer2", T1, T2), m("consumer3", T1)]
    assert run("roundrobin", members, {T1: 3, T2: 2}) == {
        "consumer1": [(T1, 0)],
        "consumer2": [(T1, 1), (T2, 0), (T2, 1)],
        "consumer3": [(T1, 2)],
    }


def test_roundrobin_orders_static_members_first_by_instance_id() -> None:
    members = [m("a", T, instance_id="z"), m("b", T, instance_id="y"), m("0-dynamic", T)]
    assert run("roundrobin", members, {T: 4}) == {"b": [(T, 0), (T, 3)], "a": [(T, 1)], "0-dynamic": [(T, 2)]}


@pytest.mark.parametrize("strategy", ["roundrobin", "sticky"])
@pytest.mark.parametrize("seed", range(20))
def test_balanced_when_all_subscribe_to_the_same_topics(strategy: str, seed: int) -> None:
    rng = random.Random(seed)
    topics = [f"t{i}" for i in range(rng.randint(1, 4))]
    partitions = {t: rng.randint(0, 12) for t in topics}
    members = [m(f"member-{i:02d}", *topics) for i in range(rng.randint(1, 8))]
    spread = counts(run(strategy, members, partitions))
    assert max(spread.values()) - min(spread.values()) <= 1, f"{strategy} unbalanced: {spread}"


@pytest.mark.parametrize("strategy", ASSIGNORS)
@pytest.mark.parametrize("seed", range(20))
def test_invariants_with_mixed_subscriptions(strategy: str, seed: int) -> None:
    rng = random.Random(1000 + seed)
    topics = [f"t{i}" for i in range(5)]
    partitions = {t: rng.randint(0, 6) for t in topics[:4]}  # t4 is subscribable but does not exist
    members = [
        m(f"m{i}", *rng.sample(topics, rng.randint(0, 3)), instance_id=f"i{i}" if rng.random() < 0.3 else None)
        for i in range(rng.randint(1, 6))
    ]
    previous = run(strategy, members[1:], partitions) if len(members) > 1 else None
    run(strategy, members, partitions, previous)


# --- sticky ------------------------------------------------------------------------------


def test_sticky_without_previous_is_balanced() -> None:
    result = run("sticky", [m("a", T1, T2), m("b", T1, T2), m("c", T1, T2)], {T1: 6, T2: 4})
    assert sorted(counts(result).values()) == [3, 3, 4], counts(result)


def test_sticky_adding_a_member_moves_the_minimum() -> None:
    three = [m(x, T) for x in "abc"]
    before = run("sticky", three, {T: 12})
    assert counts(before) == {"a": 4, "b": 4, "c": 4}
    after = run("sticky", [*three, m("d", T)], {T: 12}, before)
    assert counts(after) == {"a": 3, "b": 3, "c": 3, "d": 3}
    assert len(moved(before, after)) == 3, moved(before, after)
    for member in "abc":
        assert set(after[member]) <= set(before[member]), f"{member} gained {set(after[member]) - set(before[member])}"


def test_sticky_removing_a_member_moves_only_its_partitions() -> None:
    four = [m(x, T1, T2) for x in "abcd"]
    before = run("sticky", four, {T1: 7, T2: 5})
    after = run("sticky", [x for x in four if x.member_id != "b"], {T1: 7, T2: 5}, before)
    for member in "acd":
        assert set(before[member]) <= set(after[member]), f"{member} lost {set(before[member]) - set(after[member])}"
    assert sorted(tp for x in "acd" for tp in set(after[x]) - set(before[x])) == before["b"]
    assert sorted(counts(after).values()) == [4, 4, 4]


def test_sticky_partition_increase_keeps_existing_ownership() -> None:
    members = [m(x, T) for x in "abc"]
    before = run("sticky", members, {T: 6})
    after = run("sticky", members, {T: 9}, before)
    assert moved(before, after) == []
    for member in "abc":
        assert set(before[member]) <= set(after[member]) and len(after[member]) == 3, (before, after)


def test_sticky_drops_invalid_previous_ownership() -> None:
    members = [m("a", T1), m("b", T1, T2)]
    previous = {
        "a": [(T1, 0), (T2, 0), (T1, 9)],  # T2 not subscribed by a; T1-9 no longer exists
        "b": [(T1, 0), (T1, 1)],  # T1-0 also claimed by a, who comes first
        "gone": [(T2, 1)],  # member left
    }
    result = run("sticky", members, {T1: 2, T2: 2}, previous)
    # a keeps T1-0; b keeps T1-1 and gets T2-0, T2-1 (3 vs 1), so balancing moves T1-1 to a
    assert result == {"a": [(T1, 0), (T1, 1)], "b": [(T2, 0), (T2, 1)]}


def test_sticky_static_member_rejoining_under_new_member_id_keeps_its_partitions() -> None:
    before = run("sticky", [m("a-1", T, instance_id="a"), m("b-1", T, instance_id="b")], {T: 4})
    rejoined = [m("a-2", T, instance_id="a"), m("b-1", T, instance_id="b")]
    after = run("sticky", rejoined, {T: 4}, {"a": before["a-1"], "b-1": before["b-1"]})
    assert after == {"a-2": before["a-1"], "b-1": before["b-1"]}


def test_sticky_accepts_json_style_previous() -> None:
    members = [m("a", T), m("b", T)]
    previous: dict[str, Any] = {"a": [[T, 1], [T, 0]], "b": [[T, 2], [T, 3]]}  # as decoded from JSON
    assert run("sticky", members, {T: 4}, previous) == {"a": [(T, 0), (T, 1)], "b": [(T, 2), (T, 3)]}


def minimum_moves(previous: Mapping[str, Sequence[TopicPartition]], members: list[str], total: int) -> int:
    """Least number of still-valid previous ownerships a balanced assignment must break."""
    floor, extra = divmod(total, len(members))
    kept = sorted((len(previous.get(x, [])) for x in members), reverse=True)
    return sum(max(0, k - (floor + (1 if i < extra else 0))) for i, k in enumerate(kept))


@pytest.mark.parametrize("seed", range(60))
def test_sticky_random_moves_equal_theoretical_minimum(seed: int) -> None:
    rng = random.Random(seed)
    topics = [f"t{i}" for i in range(rng.randint(1, 3))]
    old_partitions = {t: rng.randint(0, 10) for t in topics}
    new_partitions = {t: max(0, n + rng.randint(-3, 3)) for t, n in old_partitions.items()}
    old_ids = [f"m{i}" for i in range(rng.randint(1, 7))]
    new_ids = sorted(
        set(rng.sample(old_ids, rng.randint(0, len(old_ids)))) | {f"n{i}" for i in range(rng.randint(0, 3))}
    )
    if not new_ids:
        new_ids = ["n0"]
    old_members = [m(x, *topics) for x in old_ids]
    if rng.random() < 0.5:  # a skewed previous assignment, not just a balanced one
        previous: dict[str, list[TopicPartition]] = {x: [] for x in old_ids}
        for t, n in old_partitions.items():
            for p in range(n):
                previous[rng.choice(old_ids[: rng.randint(1, len(old_ids))])].append((t, p))
    else:
        previous = run("sticky", old_members, old_partitions)
    new_members = [m(x, *topics) for x in new_ids]
    result = run("sticky", new_members, new_partitions, previous)

    spread = counts(result)
    assert max(spread.values()) - min(spread.values()) <= 1, f"unbalanced: {spread}"
    valid = {x: [(t, p) for t, p in tps if p < new_partitions[t]] for x, tps in previous.items() if x in set(new_ids)}
    total = sum(new_partitions.values())
    assert len(moved(valid, result)) == minimum_moves(valid, new_ids, total), (
        f"moved {moved(valid, result)}; previous {valid}; result {result}"
    )


# --- API -----------------------------------------------------------------------------------


def test_unknown_strategy_raises_config_error_naming_allowed_values() -> None:
    with pytest.raises(ConfigError, match="range, roundrobin, sticky"):
        assign("cooperative-sticky", [m("c", T)], {T: 1})


def test_duplicate_member_ids_are_rejected() -> None:
    with pytest.raises(GroupError, match="'c'"):
        assign("range", [m("c", T), m("c", T)], {T: 1})


def test_every_member_appears_and_named_functions_match_assign() -> None:
    members = [m("a", T), m("b"), m("c", "missing")]
    for name, fn in [("range", range_assign), ("roundrobin", roundrobin_assign), ("sticky", sticky_assign)]:
        assert fn(members, {T: 2}) == assign(name, members, {T: 2}) == {"a": [(T, 0), (T, 1)], "b": [], "c": []}
    for name in ASSIGNORS:
        assert run(name, [], {T: 3}) == {}


def test_assignors_module_is_pure() -> None:
    source = Path(__file__).resolve().parents[2] / "sparklog" / "group" / "assignors.py"
    roots: set[str] = set()
    for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    assert not roots & {"pyspark", "kazoo", "deltalake"}, f"assignors imports {sorted(roots)}"
