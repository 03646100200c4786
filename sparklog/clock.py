"""The one clock: wall time in Kafka's units (milliseconds since the epoch; microseconds for
record timestamps) and a monotonic clock for timeouts and deadlines.

Every time-dependent decision (lease expiry, retention, vacuum grace, static-member
departures, ISR lag, record timestamps) reads time here. Components that decide by time take
a :class:`Clock` (default :data:`SYSTEM_CLOCK`), so a test or a simulation can inject its own;
the module-level functions read the system clock for code with nothing to decide.
"""

from __future__ import annotations

import time
from typing import Protocol

__all__ = ["SYSTEM_CLOCK", "Clock", "SystemClock", "monotonic_s", "now_ms", "now_us"]


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


def now_ms() -> int:
    """Milliseconds since the epoch, from the system clock."""
    return SYSTEM_CLOCK.now_ms()


def now_us() -> int:
    """Microseconds since the epoch, from the system clock."""
    return SYSTEM_CLOCK.now_us()


def monotonic_s() -> float:
    """Seconds on the monotonic clock (for deadlines; never goes back)."""
    return SYSTEM_CLOCK.monotonic_s()
