"""Retry budgets: how many times an operation re-plans after losing a race, in one place.

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
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from sparklog.errors import RetriesExhaustedError

__all__ = [
    "DELTA_COMMIT",
    "DELTA_LOG_READ",
    "EPOCH_MARKER",
    "MAINTENANCE_PLAN",
    "TABLE_PROPERTIES",
    "RetryBudget",
]


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
