"""Retry budgets and deadlines: how an operation retries, in one place.

Every loop that retries after a conflict (a concurrent Delta commit, a log changing under a
read) takes its budget from here and, when the budget is spent, raises
:class:`~sparklog.errors.RetriesExhaustedError` naming the operation, what it kept losing
against and what to do. Nothing gives up silently. Pure: no I/O.

Usage::

    for _attempt in DELTA_COMMIT:
        if try_commit():
            break
    else:
        raise DELTA_COMMIT.exhausted(f"DeleteRecords on {topic}-{partition}", "run it again")

Operations that wait out a passing condition (a leader moving, ZooKeeper electing, not
enough replicas yet: :class:`~sparklog.errors.RetriableError`) retry until a deadline
instead, as Kafka's clients do until ``delivery.timeout.ms``: :func:`retry_until`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

from sparklog.errors import RetriableError, RetriesExhaustedError

__all__ = [
    "DELTA_COMMIT",
    "DELTA_LOG_READ",
    "EPOCH_MARKER",
    "MAINTENANCE_PLAN",
    "TABLE_PROPERTIES",
    "RetryBudget",
    "retry_until",
]

T = TypeVar("T")


@dataclass(frozen=True)
class RetryBudget:
    """``attempts`` tries of an operation that can lose against ``conflict``."""

    attempts: int
    conflict: str

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.attempts))

    def exhausted(self, operation: str, what_to_do: str) -> RetriesExhaustedError:
        return RetriesExhaustedError(
            f"{operation} gave up after {self.attempts} attempts: {self.conflict} kept winning; {what_to_do}"
        )


DELTA_COMMIT = RetryBudget(50, "concurrent commits touching the same partitions")
MAINTENANCE_PLAN = RetryBudget(20, "concurrent commits removing or rewriting the planned files")
TABLE_PROPERTIES = RetryBudget(10, "concurrent commits to the table")
DELTA_LOG_READ = RetryBudget(5, "log cleanup changing the Delta log during the read")
EPOCH_MARKER = RetryBudget(20, "concurrent commits to the partition")


def retry_until(deadline_s: float, backoff_s: float, call: Callable[[int], T]) -> T:
    """``call(attempt)`` (attempt 0, 1, ...) until it returns; a
    :class:`~sparklog.errors.RetriableError` is retried after ``backoff_s`` as long as the
    retry starts before ``deadline_s`` (``time.monotonic()``), else it is raised."""
    attempt = 0
    while True:
        try:
            return call(attempt)
        except RetriableError:
            if time.monotonic() + backoff_s > deadline_s:
                raise
            attempt += 1
            time.sleep(backoff_s)
