"""How a broker paces its commit rounds on an object store (DESIGN §16): linger, size, budget.

On a disk a commit round costs a few system calls, and a leader commits as soon as the
round before it is in: latency is what matters. On a store every round costs requests (one
PUT per partition's segment, one conditional PUT of the commit), which are billed, so rounds
are bounded the way object-storage Kafkas bound their flushes:

* **linger**: a round starts ``round_linger_ms`` after the first request it holds was
  queued, so requests arriving together share one round (Kafka's producer ``linger.ms``,
  on the broker's side);
* **size**: a round holds at most ``round_max_bytes`` of record batches; what is left over
  starts the next round at once (its linger has passed);
* **budget**: all rounds of one broker, every topic's, start at most ``rounds_per_second``
  times a second, each start at least one interval after the one before (no bursts), so a
  broker's request rate has a ceiling whatever its clients do.

Invariants:

* a round holds at least one request (a request larger than ``round_max_bytes`` is a round
  of its own), and requests keep their queue order across rounds;
* two round starts reserved from one :class:`RoundBudget` are at least ``1 /
  rounds_per_second`` seconds apart (0 means no budget);
* nothing here touches a store, a thread or the wall clock: the appender asks, and waits.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

__all__ = ["RoundBounds", "RoundBudget", "RoundQueues", "linger_left_s", "take_within"]


class _Sized(Protocol):
    @property
    def size_bytes(self) -> int: ...


@dataclass(frozen=True)
class RoundBounds:
    """A broker's bounds on the commit rounds of topics on an object store."""

    round_linger_ms: int = 5
    round_max_bytes: int = 32 * 1024 * 1024
    rounds_per_second: int = 50  # 0: no budget


def linger_left_s(first_queued_s: float, queued_bytes: int, now_s: float, bounds: RoundBounds) -> float:
    """How long a topic's queue waits before its round may start: 0 once its first request
    lingered ``round_linger_ms`` or the queue fills a round."""
    if queued_bytes >= bounds.round_max_bytes:
        return 0.0
    return max(0.0, first_queued_s + bounds.round_linger_ms / 1000 - now_s)


def take_within(sizes: Sequence[int], max_bytes: int) -> int:
    """How many of the queued requests (their ``sizes`` in order) one round takes: as many
    as fit in ``max_bytes``, and never none."""
    total = 0
    for count, size in enumerate(sizes):
        total += size
        if total > max_bytes:
            return max(count, 1)
    return len(sizes)


class RoundBudget:
    """Start times of a broker's commit rounds, at most ``rounds_per_second`` a second.

    States: *open* (a round reserved now starts now) and *spent* (the next start is at a
    reserved time in the future). :meth:`reserve` hands out start times one interval apart,
    in the order asked, so topics take turns instead of racing."""

    def __init__(self, rounds_per_second: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._interval_s = 1 / rounds_per_second if rounds_per_second > 0 else 0.0
        self._clock = clock
        self._lock = threading.Lock()
        self._next_start_s = 0.0

    def reserve(self) -> float:
        """Reserve the next round start: the seconds to wait for it (0: start now)."""
        if self._interval_s == 0:
            return 0.0
        with self._lock:
            now = self._clock()
            start = max(now, self._next_start_s)
            self._next_start_s = start + self._interval_s
            return start - now


_T = TypeVar("_T", bound=_Sized)


class RoundQueues(Generic[_T]):
    """Each topic's requests waiting for its next round, in arrival order; ``bounds`` None
    (a disk) takes everything queued at once, with no linger.

    Not thread-safe: the appender calls it under its own lock."""

    def __init__(self, bounds: RoundBounds | None, clock: Callable[[], float] = time.monotonic) -> None:
        self.bounds = bounds
        self._clock = clock
        self._queues: dict[str, list[_T]] = {}
        self._first_queued_s: dict[str, float] = {}

    def put(self, topic: str, items: Sequence[_T]) -> None:
        queue = self._queues.setdefault(topic, [])
        if not queue:
            self._first_queued_s[topic] = self._clock()
        queue.extend(items)

    def __contains__(self, topic: str) -> bool:
        return bool(self._queues.get(topic))

    def linger_left_s(self, topic: str) -> float:
        """How long ``topic``'s queued requests wait before their round may start."""
        if self.bounds is None:
            return 0.0
        queued = sum(i.size_bytes for i in self._queues[topic])
        return linger_left_s(self._first_queued_s[topic], queued, self._clock(), self.bounds)

    def take(self, topic: str) -> list[_T]:
        """The requests of ``topic``'s next round; what exceeds the round size stays queued,
        due at once (its first request lingered already)."""
        queue = self._queues.pop(topic, [])
        if self.bounds is None or not queue:
            return queue
        count = take_within([i.size_bytes for i in queue], self.bounds.round_max_bytes)
        if count < len(queue):
            self._queues[topic] = queue[count:]
        return queue[:count]
