"""The one clock: wall time in Kafka's units (milliseconds since the epoch; microseconds for
record timestamps) and a monotonic clock for timeouts and deadlines.

Every time-dependent decision (lease expiry, retention, vacuum grace, static-member
departures, ISR lag, record timestamps) reads time through this module, never through
``time.time()`` (a layering test checks that). The clock is injectable: :func:`installed`
puts another :class:`Clock` in place for the code running inside it (a test's fixed or
stepping clock, a simulation), and :data:`SYSTEM_CLOCK` is the machine's.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

__all__ = ["SYSTEM_CLOCK", "Clock", "SystemClock", "current", "installed", "monotonic_s", "now_ms", "now_us"]


class Clock(Protocol):
    def now_ms(self) -> int: ...

    def now_us(self) -> int: ...

    def monotonic_s(self) -> float: ...


class SystemClock:
    """The machine's clocks."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def now_us(self) -> int:
        return time.time_ns() // 1_000

    def monotonic_s(self) -> float:
        return time.monotonic()


SYSTEM_CLOCK: Clock = SystemClock()
_current: Clock = SYSTEM_CLOCK


def current() -> Clock:
    """The clock in force."""
    return _current


@contextmanager
def installed(clock: Clock) -> Iterator[Clock]:
    """Put ``clock`` in force for this process until the block ends (tests, simulations)."""
    global _current
    previous, _current = _current, clock
    try:
        yield clock
    finally:
        _current = previous


def now_ms() -> int:
    """Milliseconds since the epoch, from the clock in force."""
    return _current.now_ms()


def now_us() -> int:
    """Microseconds since the epoch, from the clock in force."""
    return _current.now_us()


def monotonic_s() -> float:
    """Seconds on the monotonic clock of the clock in force (for deadlines; never goes back)."""
    return _current.monotonic_s()
