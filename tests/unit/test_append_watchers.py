"""The fetch waiters' wake-ups (sparklog/broker/append_watchers.py): the invariants its
module doc states, each with a failure message that shows what happened."""

from __future__ import annotations

from sparklog.broker.append_watchers import AppendWatchers

KEYS = [("t", 0), ("t", 1)]


class Wakes:
    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> None:
        self.count += 1


def test_a_watch_from_stale_versions_wakes_at_once() -> None:
    watchers, wakes = AppendWatchers(), Wakes()
    seen = watchers.versions(KEYS)
    watchers.appended("t", [1])  # between the fetch's read and its watch
    watchers.watch(KEYS, seen, wakes)
    assert wakes.count == 1, f"woken {wakes.count} times, expected at once"
    assert watchers.watching() == 0, "a watch woken at once must not stay registered"


def test_an_append_wakes_each_watch_of_its_partitions_once() -> None:
    watchers, first, second, other = AppendWatchers(), Wakes(), Wakes(), Wakes()
    watchers.watch(KEYS, watchers.versions(KEYS), first)
    watchers.watch([("t", 1)], watchers.versions([("t", 1)]), second)
    watchers.watch([("u", 0)], watchers.versions([("u", 0)]), other)
    watchers.appended("t", [0, 1])
    watchers.appended("t", [1])
    assert (first.count, second.count, other.count) == (1, 1, 0), (first.count, second.count, other.count)
    assert watchers.watching() == 1, "only the other topic's watch is left"


def test_a_cancelled_watch_holds_nothing() -> None:
    watchers, wakes = AppendWatchers(), Wakes()
    cancel = watchers.watch(KEYS, watchers.versions(KEYS), wakes)
    cancel()
    assert watchers.watching() == 0, "a cancelled watch stayed registered"
    watchers.appended("t", [0])
    assert wakes.count == 0, "a cancelled watch was woken"


def test_partitions_are_followed_before_their_first_versions_and_retried_until_followed() -> None:
    followed: list[tuple[str, int]] = []
    refuse = {("t", 1)}

    def follow(topic: str, partition: int) -> bool:
        followed.append((topic, partition))
        return (topic, partition) not in refuse  # ZooKeeper away for t-1 at first

    watchers = AppendWatchers(follow)
    watchers.versions(KEYS)
    refuse.clear()
    watchers.versions(KEYS)
    watchers.versions(KEYS)
    assert followed == [("t", 0), ("t", 1), ("t", 1)], "each partition followed until it is, then never again"


def test_another_writers_append_announced_through_follow_wakes_the_watch() -> None:
    announce: dict[tuple[str, int], list[object]] = {}
    wakes = Wakes()

    def follow(topic: str, partition: int) -> bool:
        announce[(topic, partition)] = [lambda: watchers.appended(topic, [partition])]
        return True

    watchers = AppendWatchers(follow)
    seen = watchers.versions(KEYS)
    watchers.watch(KEYS, seen, wakes)
    on_write = announce[("t", 1)][0]
    assert callable(on_write)
    on_write()
    assert wakes.count == 1, f"woken {wakes.count} times by the other writer's append"
