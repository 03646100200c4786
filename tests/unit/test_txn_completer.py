"""The transaction completer (sparklog/broker/transactions/completer.py): the invariants its
module doc states, with real threads and a completion function that records what it saw."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from sparklog.broker.transactions.completer import TransactionCompleter
from tests.helpers import wait_until


class Completions:
    """A completion that counts its calls per id and the most calls of one id at once, and
    blocks while ``held`` is clear, so a test can hand an id over while it is being completed."""

    def __init__(self, outcome: bool = True) -> None:
        self.outcome = outcome
        self.held = threading.Event()
        self.held.set()
        self.calls: dict[str, int] = {}
        self.most_at_once: dict[str, int] = {}
        self._now: dict[str, int] = {}
        self._lock = threading.Lock()

    def __call__(self, transactional_id: str) -> bool:
        with self._lock:
            self.calls[transactional_id] = self.calls.get(transactional_id, 0) + 1
            self._now[transactional_id] = self._now.get(transactional_id, 0) + 1
            self.most_at_once[transactional_id] = max(
                self.most_at_once.get(transactional_id, 0), self._now[transactional_id]
            )
        try:
            if transactional_id == "boom":
                raise RuntimeError("ZooKeeper went away")
            self.held.wait(30)
            return self.outcome
        finally:
            with self._lock:
                self._now[transactional_id] -= 1


@pytest.fixture
def stop() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()


def started(completions: Completions, stop: threading.Event, threads: int = 4) -> TransactionCompleter:
    completer = TransactionCompleter(completions, threads)
    completer.start(stop)
    return completer


def test_an_id_handed_over_while_being_completed_is_completed_again_after_never_beside(
    stop: threading.Event,
) -> None:
    completions = Completions()
    completions.held.clear()
    completer = started(completions, stop)
    completer.submit("t")
    wait_until(lambda: completions.calls.get("t") == 1, "the first completion of t under way")
    for _ in range(5):  # decided again meanwhile (and the sweep's hand-overs): one more run, not five
        completer.submit("t")
    completions.held.set()
    wait_until(lambda: completions.calls.get("t") == 2, "t completed again after the first run")
    completer.submit("u")
    wait_until(lambda: completions.calls.get("u") == 1, "u completed")
    assert completions.calls["t"] == 2, completions.calls
    assert completions.most_at_once["t"] == 1, f"t completed by {completions.most_at_once['t']} threads at once"


def test_different_ids_are_completed_side_by_side(stop: threading.Event) -> None:
    completions = Completions()
    completions.held.clear()
    completer = started(completions, stop, threads=3)
    for transactional_id in ("a", "b", "c"):
        completer.submit(transactional_id)
    # All three are in progress together: none waits for another's markers.
    wait_until(lambda: len(completions.calls) == 3, f"three completions at once, got {completions.calls}")
    completions.held.set()


def test_a_failed_or_unfinished_completion_is_left_to_the_sweep_and_the_threads_go_on(
    stop: threading.Event,
) -> None:
    completions = Completions(outcome=False)
    completer = started(completions, stop, threads=1)
    completer.submit("boom")
    completer.submit("unfinished")
    wait_until(lambda: completions.calls.get("unfinished") == 1, "the thread past the failed completion")
    completer.submit("unfinished")  # the sweep's next hand-over
    wait_until(lambda: completions.calls.get("unfinished") == 2, "the sweep's retry")
    # One thread, first in first out: a retry of its own would have run before this one.
    completer.submit("after")
    wait_until(lambda: completions.calls.get("after") == 1, "the id handed over last")
    assert completions.calls == {"boom": 1, "unfinished": 2, "after": 1}, "no retry but the sweep's"


def test_the_threads_end_when_the_broker_stops(stop: threading.Event) -> None:
    completer = TransactionCompleter(Completions())
    completer.start(stop, name="stopping")
    names = {t.name for t in threading.enumerate() if t.name.startswith("stopping")}
    assert len(names) == 4, names
    stop.set()
    completer.join(10)
    left = [t.name for t in threading.enumerate() if t.name.startswith("stopping")]
    assert not left, f"still running after stop: {left}"
