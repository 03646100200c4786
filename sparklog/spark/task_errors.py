"""Errors raised inside Spark tasks, brought back to the driver as sparklog errors.

A sparklog error raised in a Python task reaches the driver only as Spark's exception with
the task's Python traceback in its text.
"""

from __future__ import annotations

import re

from sparklog import errors

__all__ = ["reraise_sparklog_error"]


def reraise_sparklog_error(exc: Exception) -> None:
    """Raise the sparklog error named last in ``exc``'s text, if there is one; else return."""
    found = re.findall(r"sparklog\.errors\.(\w+): (.+)", str(exc))
    kind = getattr(errors, found[-1][0], None) if found else None
    if isinstance(kind, type) and issubclass(kind, errors.SparklogError):
        raise kind(found[-1][1].strip()) from exc
