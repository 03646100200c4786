"""A topic table's commit history in the columns of Delta's ``DESCRIBE HISTORY``.

Each row is one Delta version, newest first, with exactly the keys of :data:`HISTORY_COLUMNS`
(Spark's ``DESCRIBE HISTORY`` columns, in its order). delta-rs records ``timestamp``,
``operation``, ``operationParameters``, ``engineInfo`` and, for some operations,
``readVersion``, ``isolationLevel``, ``isBlindAppend``, ``operationMetrics`` and
``userMetadata``; anything it does not record (``userId``, ``userName``, ``job``,
``notebook``, ``clusterId`` ...) is ``None``.

sparklog's own commitInfo keys (``sparklog.operation``, ``sparklog.offsets``,
``sparklog.producer``, ``sparklog.group`` ...) are surfaced this way:

* ``operation``: the ``sparklog.operation`` of the commit when it has one (``OPTIMIZE``,
  ``RETENTION``, ``DELETE RECORDS``, ``EPOCH MARKER``, ``SPARK PRODUCE`` ...): every sparklog
  commit is a delta-rs ``WRITE``, so Delta's name alone would not tell them apart. Other
  commits (a light producer's append, the table's creation) keep Delta's name
  (``WRITE``, ``CREATE TABLE``).
* ``userMetadata``: the commit's own ``userMetadata`` when a writer set one; otherwise
  the non-standard keys (all ``sparklog.*`` ones) as a compact JSON object with sorted
  keys, or ``None`` when there are none.

``timestamp`` is a timezone-aware UTC ``datetime`` (Delta's column is a timestamp).
Only the versions whose commit files are still in the log appear: checkpoints plus
``cleanup_metadata`` drop commit files older than ``delta.logRetentionDuration``.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from deltalake.exceptions import DeltaError

from sparklog.errors import ConfigError, StorageError
from sparklog.log.table import TopicTable

__all__ = ["HISTORY_COLUMNS", "topic_history"]

HISTORY_COLUMNS = (
    "version",
    "timestamp",
    "userId",
    "userName",
    "operation",
    "operationParameters",
    "job",
    "notebook",
    "clusterId",
    "readVersion",
    "isolationLevel",
    "isBlindAppend",
    "operationMetrics",
    "userMetadata",
    "engineInfo",
)
# commitInfo keys that are Delta's own (not surfaced through userMetadata).
_STANDARD_KEYS = frozenset(HISTORY_COLUMNS) | {"clientVersion", "txnId", "inCommitTimestamp", "tags"}


def topic_history(table: TopicTable, limit: int | None = None) -> list[dict[str, Any]]:
    """The newest ``limit`` (default: all remaining) versions of ``table``, newest first."""
    if limit is not None and limit < 1:
        raise ConfigError(f"history limit must be >= 1, got {limit}")
    try:
        entries = table.snapshot().history(limit)
    except (DeltaError, OSError) as exc:
        raise StorageError(f"Cannot read the history of topic {table.topic} at {table.root}/_delta_log: {exc}") from exc
    return [_row(entry) for entry in entries]


def _row(info: dict[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = {column: info.get(column) for column in HISTORY_COLUMNS}
    custom = {key: value for key, value in info.items() if key not in _STANDARD_KEYS}
    if custom.get("sparklog.operation"):
        row["operation"] = custom["sparklog.operation"]
    if row["userMetadata"] is None and custom:
        row["userMetadata"] = json.dumps(custom, sort_keys=True, separators=(",", ":"))
    if row["engineInfo"] is None:
        row["engineInfo"] = info.get("clientVersion")
    if isinstance(row["timestamp"], (int, float)):
        row["timestamp"] = datetime.fromtimestamp(row["timestamp"] / 1000.0, tz=UTC)
    return row
