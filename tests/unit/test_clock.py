"""The injectable clock: code that reads time through sparklog.clock sees an installed clock,
and the system clock is back afterwards."""

from __future__ import annotations

import time

import pyarrow as pa

from sparklog import clock
from sparklog.model.batches import normalise_input


class FixedClock:
    def __init__(self, ms: int) -> None:
        self.ms = ms

    def now_ms(self) -> int:
        return self.ms

    def now_us(self) -> int:
        return self.ms * 1000

    def monotonic_s(self) -> float:
        return self.ms / 1000


def test_an_installed_clock_decides_default_record_timestamps() -> None:
    with clock.installed(FixedClock(1_000)):
        assert clock.now_ms() == 1_000
        segment, _partitions = normalise_input(pa.table({"value": [b"x"]}), 1, "t", 1_000_000)
        assert segment.column("timestamp").cast(pa.int64()).to_pylist() == [1_000_000]
    assert clock.current() is clock.SYSTEM_CLOCK
    assert abs(clock.now_ms() - time.time() * 1000) < 5_000
