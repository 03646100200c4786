"""A topic's rounds in flight (sparklog.broker.rounds_in_flight): settled oldest first, the
items of those to build again handed back in build order, and each round built on the log as
the rounds before it will leave it."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Any, cast

import pytest

from sparklog.broker.pending_append import PendingAppend
from sparklog.broker.rounds_in_flight import CommitRound, RoundsInFlight, Settled
from sparklog.log.append import PreparedAppend
from sparklog.log.segment import SegmentFile
from sparklog.log.transactions import end_app_id, fence_app_id

TOPIC = "t"


class _Item:
    """What a round's items are to the bookkeeping: answered or not."""

    def __init__(self, name: str, done: bool = False) -> None:
        self.name, self.is_done = name, done

    def __repr__(self) -> str:
        return self.name


def a_round(items: list[str], transactions: dict[str, int] | None = None) -> CommitRound:
    written: Future[list[SegmentFile]] = Future()
    written.set_result([])
    prepared = PreparedAppend(
        cast(Any, None), {}, None, {}, written, dict(transactions or {}), {}, 0
    )  # only its transactions are read here
    pending = cast(list[PendingAppend], [_Item(i, done=i.endswith("!")) for i in items])
    unused = cast(Any, None)
    return CommitRound(TOPIC, unused, pending, unused, prepared, unused, {}, "1", False, 0.0, 0, 0.0, {})


def settle(round_: CommitRound, outcome: Settled) -> None:
    round_.settled.set_result(outcome)


def names(redo: list[list[PendingAppend]]) -> list[list[str]]:
    return [[repr(i) for i in items] for items in redo]


class _Log:
    """A committed log: partition 0 ends at 10, writer epoch 1."""

    def fence_epoch(self, partition: int) -> int:
        return 1

    def fenced_leader_epoch(self, partition: int) -> int:
        return 0

    def log_end(self, partition: int) -> int:
        return 10

    def commit(self, *args: object) -> None:
        raise AssertionError("not committed to here")


def test_settle_takes_rounds_back_oldest_first_and_hands_back_what_to_build_again() -> None:
    rounds = RoundsInFlight(4)
    first, second, third = a_round(["a", "b!"]), a_round(["c"]), a_round(["d"])
    for round_ in (first, second, third):
        rounds.add(round_)
    settle(first, "rebuild")
    settle(second, "committed")
    settle(third, "rebuild")
    redo, committed = rounds.settle(TOPIC)
    assert names(redo) == [["a"], ["d"]], "answered items are not built again; order kept"
    assert not committed
    assert rounds.count(TOPIC) == 0


def test_settle_keeps_the_newest_rounds_in_flight() -> None:
    rounds = RoundsInFlight(2)
    first, second = a_round(["a"]), a_round(["b"])
    rounds.add(first)
    rounds.add(second)
    settle(first, "committed")
    redo, committed = rounds.settle(TOPIC, keep=1)
    assert (redo, committed, rounds.count(TOPIC)) == ([], True, 1)
    assert not rounds.oldest_settled(TOPIC), "the second round is still on its way"


def test_settle_waits_for_a_round_the_committer_has_not_settled() -> None:
    rounds = RoundsInFlight(2)
    pending = a_round(["a"])
    rounds.add(pending)
    timer = threading.Timer(0.05, settle, args=(pending, "failed"))
    timer.start()
    try:
        redo, committed = rounds.settle(TOPIC)
    finally:
        timer.join()
    assert (redo, committed) == ([], False), "a failed round was answered: nothing to build again"


def test_settle_done_takes_back_only_the_settled_rounds_at_the_front() -> None:
    rounds = RoundsInFlight(4)
    first, second, third = a_round(["a"]), a_round(["b"]), a_round(["c"])
    for round_ in (first, second, third):
        rounds.add(round_)
    settle(first, "rebuild")
    settle(third, "committed")  # behind an unsettled one: stays
    assert names(rounds.settle_done(TOPIC)) == [["a"]]
    assert rounds.count(TOPIC) == 2
    assert rounds.settle_done(TOPIC) == [] and rounds.count(TOPIC) == 2


def test_a_round_is_built_on_the_log_the_rounds_in_flight_leave() -> None:
    rounds = RoundsInFlight(4)
    assert rounds.projected(TOPIC, _Log()).log_end(0) == 10
    rounds.add(a_round(["a"], {end_app_id(0): 12, fence_app_id(0): 2}))
    rounds.add(a_round(["b"], {end_app_id(0): 15}))
    rounds.add(a_round(["c"], {end_app_id(1): 3}))
    view = rounds.projected(TOPIC, _Log())
    assert (view.log_end(0), view.log_end(1), view.fence_epoch(0)) == (15, 3, 2)
    assert rounds.projected("other", _Log()).log_end(0) == 10, "topics are apart"


def test_at_least_one_round_is_in_flight() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        RoundsInFlight(0)
