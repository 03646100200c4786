"""The Delta table properties that bound a topic table's log.

delta-rs writes a checkpoint every ``delta.checkpointInterval`` commits (the leader's direct
commits write theirs at the same versions, :mod:`sparklog.log.delta_commit`); commit files
older than ``delta.logRetentionDuration`` (the topic's ``history.retention.ms``) are deleted
by the maintenance job only (``delta.enableExpiredLogCleanup=false``): measured with
deltalake 1.6.6, a writer's post-commit cleanup racing another cleanup fails *after* its
commit landed, which would report a produced batch as failed.
"""

from __future__ import annotations

from collections.abc import Callable

from deltalake import CommitProperties, DeltaTable
from deltalake.exceptions import CommitFailedError, DeltaError

from sparklog.errors import StorageError
from sparklog.retries import TABLE_PROPERTIES

__all__ = ["log_properties", "set_history_retention"]

_LOG_RETENTION = "delta.logRetentionDuration"


def log_properties(history_retention_ms: int, checkpoint_interval: int) -> dict[str, str]:
    """The Delta table properties of a topic table whose history is kept ``history_retention_ms``
    (``checkpoint_interval``: :func:`sparklog.log.checkpoints.checkpoint_interval`)."""
    return {
        "delta.checkpointInterval": str(checkpoint_interval),
        _LOG_RETENTION: f"interval {history_retention_ms} milliseconds",
        "delta.enableExpiredLogCleanup": "false",
    }


def set_history_retention(
    snapshot: Callable[[], DeltaTable], history_retention_ms: int, checkpoint_interval: int, where: str
) -> bool:
    """Make the log properties of the table ``snapshot`` reads (``where``: which, for errors)
    match ``history_retention_ms`` (a topic config change reaches the table at the next
    maintenance run). One metadata commit when
    they differ, retried over concurrent commits (which retry in turn: a metadata change
    fails them once). Returns whether a commit was made."""
    wanted = log_properties(history_retention_ms, checkpoint_interval)
    for _attempt in TABLE_PROPERTIES:
        dt = snapshot()
        configuration = dt.metadata().configuration
        if all(configuration.get(key) == value for key, value in wanted.items()):
            return False
        try:
            dt.alter.set_table_properties(wanted, commit_properties=CommitProperties(max_commit_retries=0))
            return True
        except CommitFailedError:
            continue
        except (DeltaError, OSError) as exc:
            raise StorageError(f"Cannot set the log properties of {where}: {exc}") from exc
    raise TABLE_PROPERTIES.exhausted(f"Setting the log properties of {where}", "run the maintenance again")
