"""Who waits for data to be appended to which led partition (Kafka's fetch purgatory, keyed
by partition).

A long-polling Fetch notes the partitions' append versions before it reads; finding too
little, it watches them from those versions. Invariants:

* a watch from versions that are already stale wakes at once: an append between a fetch's
  read and its watch is never missed;
* an append wakes every watch of its partitions, each exactly once, and drops them;
* a cancelled watch (its fetch answered by deadline) holds nothing, so idle partitions do
  not collect the watches of consumers polling them;
* with ``follow`` (the broker's :class:`~sparklog.metadata.foreign_writes.ForeignWrites`),
  a partition's appends by other writers are followed from before its first
  :meth:`AppendWatchers.versions` returns, so a fetch that notes versions, reads and then
  watches misses no append by anyone.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence

__all__ = ["AppendWatchers"]

PartitionKey = tuple[str, int]


class _Watch:
    __slots__ = ("keys", "wake")

    def __init__(self, keys: Sequence[PartitionKey], wake: Callable[[], None]) -> None:
        self.keys = keys
        self.wake = wake


class AppendWatchers:
    """Append versions and watches of a broker's led partitions. Thread-safe; ``wake``
    callbacks run on the appending thread, so they only hand work on."""

    def __init__(self, follow: Callable[[str, int], bool] | None = None) -> None:
        """``follow(topic, partition)``: start announcing other writers' appends to the
        partition through :meth:`appended`; False when it could not (tried again later)."""
        self._lock = threading.Lock()
        self._versions: dict[PartitionKey, int] = {}
        self._watches: dict[PartitionKey, set[_Watch]] = {}
        self._follow = follow
        self._followed: set[PartitionKey] = set()

    def versions(self, keys: Sequence[PartitionKey]) -> tuple[int, ...]:
        with self._lock:
            new = [] if self._follow is None else [k for k in keys if k not in self._followed]
            if not new:  # every fetch after a partition's first: one lock, no ZooKeeper
                return tuple(self._versions.get(k, 0) for k in keys)
        assert self._follow is not None
        followed = [k for k in new if self._follow(*k)]
        with self._lock:
            self._followed.update(followed)
            return tuple(self._versions.get(k, 0) for k in keys)

    def watch(self, keys: Sequence[PartitionKey], seen: Sequence[int], wake: Callable[[], None]) -> Callable[[], None]:
        """Call ``wake`` once when one of ``keys`` gets an append after ``seen`` (its
        :meth:`versions`); returns a cancel."""
        watch = _Watch(keys, wake)
        with self._lock:
            stale = any(self._versions.get(k, 0) != v for k, v in zip(keys, seen, strict=True))
            if not stale:
                for key in keys:
                    self._watches.setdefault(key, set()).add(watch)
        if stale:
            wake()
            return _nothing
        return lambda: self._drop(watch)

    def appended(self, topic: str, partitions: Iterable[int]) -> None:
        """Partitions of ``topic`` got records (or lost them: a truncation, a new leader)."""
        woken: set[_Watch] = set()
        with self._lock:
            for partition in partitions:
                key = (topic, partition)
                self._versions[key] = self._versions.get(key, 0) + 1
                woken.update(self._watches.pop(key, ()))
            for watch in woken:
                self._unlink(watch)
        for watch in woken:
            watch.wake()

    def watching(self) -> int:
        """How many watches are registered (for tests: cancelled ones must not stay)."""
        with self._lock:
            return len({w for ws in self._watches.values() for w in ws})

    def _drop(self, watch: _Watch) -> None:
        with self._lock:
            self._unlink(watch)

    def _unlink(self, watch: _Watch) -> None:
        for key in watch.keys:
            watches = self._watches.get(key)
            if watches is not None:
                watches.discard(watch)
                if not watches:
                    del self._watches[key]


def _nothing() -> None:
    pass
