"""The pacing policy of commit rounds on an object store (sparklog/broker/round_pacing.py)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from sparklog.broker.round_pacing import RoundBounds, RoundBudget, RoundQueues, linger_left_s, take_within
from sparklog.config import resolve_cluster_config
from sparklog.errors import ConfigError


@dataclass
class Request:
    name: str
    size_bytes: int


class FakeClock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


BOUNDS = RoundBounds(round_linger_ms=20, round_max_bytes=1000, rounds_per_second=10)


def test_a_queue_lingers_until_its_first_request_is_old_enough() -> None:
    assert linger_left_s(10.0, 100, 10.005, BOUNDS) == pytest.approx(0.015)
    assert linger_left_s(10.0, 100, 10.020, BOUNDS) == 0.0
    assert linger_left_s(10.0, 100, 11.0, BOUNDS) == 0.0


def test_a_full_round_does_not_linger() -> None:
    assert linger_left_s(10.0, 1000, 10.0, BOUNDS) == 0.0


@pytest.mark.parametrize(
    ("sizes", "taken"),
    [
        ([], 0),
        ([400, 400, 400], 2),
        ([1000, 1], 1),
        ([5000, 1], 1),  # larger than a round: a round of its own
        ([1, 2, 3], 3),
    ],
)
def test_a_round_takes_what_fits_and_never_nothing(sizes: list[int], taken: int) -> None:
    assert take_within(sizes, 1000) == taken


def test_budget_spaces_round_starts_one_interval_apart() -> None:
    clock = FakeClock()
    budget = RoundBudget(10, clock)
    waits = [budget.reserve() for _ in range(4)]
    assert waits == pytest.approx([0.0, 0.1, 0.2, 0.3])
    clock.now_s += 1.0  # idle for a while: the next round starts at once, no burst saved up
    assert [budget.reserve(), budget.reserve()] == pytest.approx([0.0, 0.1])


def test_no_budget_never_waits() -> None:
    budget = RoundBudget(0)
    assert {budget.reserve() for _ in range(100)} == {0.0}


def test_queues_take_rounds_within_the_size_in_arrival_order() -> None:
    clock = FakeClock()
    queues: RoundQueues[Request] = RoundQueues(BOUNDS, clock)
    queues.put("t", [Request("a", 600), Request("b", 600)])
    queues.put("t", [Request("c", 100)])
    assert queues.linger_left_s("t") == 0.0  # 1300 bytes queued: a full round
    clock.now_s += 0.005
    assert [r.name for r in queues.take("t")] == ["a"]
    assert "t" in queues
    assert queues.linger_left_s("t") == pytest.approx(0.015), "what was left over lingers from its first arrival"
    assert [r.name for r in queues.take("t")] == ["b", "c"]
    assert "t" not in queues


def test_a_new_queue_lingers_from_its_first_request() -> None:
    clock = FakeClock()
    queues: RoundQueues[Request] = RoundQueues(BOUNDS, clock)
    queues.put("t", [Request("a", 10)])
    clock.now_s += 0.015
    queues.put("t", [Request("b", 10)])
    assert queues.linger_left_s("t") == pytest.approx(0.005)


def test_queues_on_a_disk_take_everything_at_once() -> None:
    queues: RoundQueues[Request] = RoundQueues(None)
    queues.put("t", [Request(str(i), 10_000_000) for i in range(3)])
    assert queues.linger_left_s("t") == 0.0
    assert len(queues.take("t")) == 3


def test_pacing_settings_are_cluster_settings() -> None:
    config = resolve_cluster_config(
        {"store.round.linger.ms": "250", "store.round.max.bytes": "1048576", "store.rounds.per.second": "4"}, environ={}
    )
    assert (config.store_round_linger_ms, config.store_round_max_bytes, config.store_rounds_per_second) == (
        250,
        1_048_576,
        4,
    )
    assert config.to_options()["store.rounds.per.second"] == "4"


@pytest.mark.parametrize(
    ("key", "value"),
    [("store.round.linger.ms", "-1"), ("store.round.max.bytes", "0"), ("store.rounds.per.second", "fast")],
)
def test_bad_pacing_settings_are_refused_by_name(key: str, value: str) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        resolve_cluster_config({key: value}, environ={})
