"""Retry budgets: a spent budget is an error in the SparklogError tree that names the
operation, what it kept losing against, and what to do."""

from __future__ import annotations

import pytest

from sparklog.errors import RetriesExhaustedError, SparklogError
from sparklog.retries import DELTA_COMMIT, RetryBudget


def test_a_budget_gives_exactly_its_attempts() -> None:
    assert list(RetryBudget(3, "x")) == [0, 1, 2]


def test_a_spent_budget_raises_a_sparklog_error_naming_the_conflict() -> None:
    attempts = 0
    with pytest.raises(RetriesExhaustedError) as caught:
        for _attempt in DELTA_COMMIT:
            attempts += 1
        else:
            raise DELTA_COMMIT.exhausted("DeleteRecords on t-0 below offset 5", "retry later")
    assert attempts == DELTA_COMMIT.attempts
    assert isinstance(caught.value, SparklogError)
    message = str(caught.value)
    assert "DeleteRecords on t-0 below offset 5" in message and DELTA_COMMIT.conflict in message
    assert f"after {DELTA_COMMIT.attempts} attempts" in message and "retry later" in message
