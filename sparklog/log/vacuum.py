"""VACUUM: delete the data files no snapshot needs any more, after a grace period (DESIGN §9).

Retention, DeleteRecords, compaction and optimize only *remove* files from the Delta log;
the files stay on disk so readers holding an older snapshot finish. This module deletes
them once ``file.delete.delay.ms`` has passed since their removal, plus orphans (files a
killed writer wrote but never committed) once their mtime is that old. The decision is the
pure :func:`sparklog.log.plans.vacuum_candidates`; this module gathers its inputs:

1. the data files on disk under the table directory (``_delta_log`` and every name starting
   with ``_`` or ``.`` skipped, as Delta does), with mtime and size — listed FIRST;
2. the live files of the latest snapshot — taken AFTER the listing, so a file committed
   meanwhile is live here, and one written meanwhile is not listed;
3. the removed paths with their ``deletionTimestamp``, read from the Delta log itself: the
   ``remove`` column of the newest checkpoint plus the ``remove`` actions of every commit
   file after it. delta-rs exposes no tombstone API; it keeps tombstones in checkpoints for
   ``delta.deletedFileRetentionDuration`` (default 1 week, verified with deltalake 1.6.6), so
   a delay longer than that is refused (the removal could be forgotten and the file taken
   for an old orphan). The commit files after the checkpoint must be contiguous; if log
   cleanup races the read, it is redone.

Before deleting, the candidates are checked once more against a fresh snapshot. Never a
live file: a path live in either snapshot is kept. Deleting a file that is already gone
(a concurrent vacuum) is not an error. A dry run deletes nothing.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq

from sparklog import clock
from sparklog.errors import ConfigError, StorageError
from sparklog.log.plans import vacuum_candidates
from sparklog.log.storage import TableStorage
from sparklog.log.table import TopicTable
from sparklog.retries import DELTA_LOG_READ

__all__ = ["DEFAULT_DELETED_FILE_RETENTION_MS", "VacuumResult", "data_files", "removed_files", "vacuum_topic"]

DEFAULT_DELETED_FILE_RETENTION_MS = 7 * 86_400_000  # Delta's "interval 1 week"
_COMMIT = re.compile(r"^(\d{20})\.json$")
_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint(?:\.(\d+)\.(\d+))?\.parquet$")
_INTERVAL_UNITS_MS = {
    "millisecond": 1,
    "second": 1000,
    "minute": 60_000,
    "hour": 3_600_000,
    "day": 86_400_000,
    "week": 604_800_000,
}


@dataclass(frozen=True)
class VacuumResult:
    """Files VACUUM deleted (in a dry run: none; ``candidates`` are what it would delete)."""

    deleted_files: int
    deleted_bytes: int
    candidates: tuple[str, ...]  # paths relative to the table root
    topic: str
    candidate_bytes: int = 0
    by_directory: dict[str, tuple[int, int]] = field(default_factory=dict)  # dir -> (files, bytes) of candidates
    dry_run: bool = False


def vacuum_topic(
    table: TopicTable,
    file_delete_delay_ms: int,
    *,
    now_ms: int | None = None,
    dry_run: bool = False,
    progress: Callable[[str, int, int], None] | None = None,
) -> VacuumResult:
    """Delete the files removed (or orphaned) more than ``file_delete_delay_ms`` ago.

    ``now_ms`` defaults to the wall clock (tests pass a later time instead of waiting).
    ``progress(directory, files, bytes)`` is called per partition directory after its
    files were deleted (or, dry, counted).
    """
    now = clock.now_ms() if now_ms is None else now_ms
    _check_delay(table, file_delete_delay_ms)
    on_disk = data_files(table.storage)
    live = {f.path for f in table.files(table.snapshot())}
    removed = removed_files(table)
    mtimes = {path: mtime for path, (mtime, _size) in on_disk.items()}
    candidates = vacuum_candidates(removed, mtimes, live, now_ms=now, file_delete_delay_ms=file_delete_delay_ms)
    if candidates:  # a last look: never delete a file some writer committed meanwhile
        live_now = {f.path for f in table.files(table.snapshot())}
        candidates = [path for path in candidates if path not in live_now]
    groups: dict[str, list[str]] = {}
    for path in candidates:
        groups.setdefault(os.path.dirname(path), []).append(path)
    deleted_files = deleted_bytes = 0
    by_directory: dict[str, tuple[int, int]] = {}
    for directory, paths in sorted(groups.items()):
        size = sum(on_disk[p][1] for p in paths)
        by_directory[directory] = (len(paths), size)
        if not dry_run:
            gone = [p for p in paths if _delete(table, p)]
            deleted_files += len(gone)
            deleted_bytes += sum(on_disk[p][1] for p in gone)
        if progress is not None:
            progress(directory, len(paths), size)
    return VacuumResult(
        topic=table.topic,
        deleted_files=deleted_files,
        deleted_bytes=deleted_bytes,
        candidates=tuple(candidates),
        candidate_bytes=sum(on_disk[p][1] for p in candidates),
        by_directory=by_directory,
        dry_run=dry_run,
    )


def _delete(table: TopicTable, relative: str) -> bool:
    try:
        return table.storage.delete(relative)  # False: a concurrent vacuum got there first
    except (OSError, StorageError) as exc:
        raise StorageError(
            f"Vacuum of topic {table.topic} cannot delete {table.full_path(relative)}: {exc}. Fix the permissions "
            "and run vacuum again (files deleted so far are gone; the table is consistent)."
        ) from exc


# -- inputs ----------------------------------------------------------------------------------
def data_files(storage: TableStorage) -> dict[str, tuple[int, int]]:
    """``relative path -> (modified ms, size)`` of every data file of a table, skipping
    ``_delta_log`` and any file or directory whose name starts with ``_`` or ``.``."""
    return {
        path: stamp
        for path, stamp in storage.listing().items()
        if not any(part.startswith(("_", ".")) for part in path.split("/"))
    }


def removed_files(table: TopicTable) -> list[tuple[str, int]]:
    """``(path, deletionTimestamp ms)`` of every remove action the log still remembers."""
    storage, log_dir = table.storage, f"{table.root}/_delta_log"
    for _attempt in DELTA_LOG_READ:
        try:
            names = [path.rpartition("/")[2] for path in storage.listing("_delta_log/")]
            checkpoint_version, parts = _newest_checkpoint(names)
            commits = sorted(
                int(m.group(1)) for m in map(_COMMIT.match, names) if m and int(m.group(1)) > checkpoint_version
            )
            if commits and commits != list(range(checkpoint_version + 1, commits[-1] + 1)):
                continue  # log cleanup or a checkpoint raced the listing: look again
            removed = [r for part in parts for r in _checkpoint_removes(storage, f"_delta_log/{part}")]
            for version in commits:
                removed += _commit_removes(storage.read(f"_delta_log/{version:020d}.json"))
            return removed
        except FileNotFoundError:
            continue  # a file listed was cleaned up meanwhile
        except (OSError, ValueError, pa.ArrowInvalid) as exc:
            raise StorageError(f"Vacuum of topic {table.topic} cannot read the Delta log at {log_dir}: {exc}") from exc
    raise DELTA_LOG_READ.exhausted(
        f"Vacuum of topic {table.topic} reading the Delta log at {log_dir}", "run vacuum again"
    )


def _newest_checkpoint(names: list[str]) -> tuple[int, list[str]]:
    """The newest complete checkpoint: (version, its part files), or (-1, []) when none."""
    parts: dict[int, dict[int, str]] = {}
    totals: dict[int, int] = {}
    for name in names:
        match = _CHECKPOINT.match(name)
        if match:
            version = int(match.group(1))
            parts.setdefault(version, {})[int(match.group(2) or 1)] = name
            totals[version] = int(match.group(3) or 1)
        elif ".checkpoint." in name and not name.endswith(".crc"):
            raise ValueError(f"unsupported checkpoint file {name} (only classic and multi-part checkpoints are read)")
    for version in sorted(parts, reverse=True):
        if len(parts[version]) == totals[version]:
            return version, [parts[version][i] for i in sorted(parts[version])]
    return -1, []


def _checkpoint_removes(storage: TableStorage, relative: str) -> list[tuple[str, int]]:
    column = pq.read_table(storage.source(relative), columns=["remove"]).column("remove")
    return [(unquote(r["path"]), int(r["deletionTimestamp"] or 0)) for r in column.to_pylist() if r]


def _commit_removes(data: bytes) -> list[tuple[str, int]]:
    removed = []
    for line in data.decode("utf-8").splitlines():
        if '"remove"' not in line:
            continue
        remove = json.loads(line).get("remove")
        if remove:
            removed.append((unquote(remove["path"]), int(remove.get("deletionTimestamp") or 0)))
    return removed


# -- the grace period -------------------------------------------------------------------------
def _check_delay(table: TopicTable, file_delete_delay_ms: int) -> None:
    if file_delete_delay_ms < 0:
        raise ConfigError(f"file.delete.delay.ms of topic {table.topic} must be >= 0, got {file_delete_delay_ms}")
    configuration = table.snapshot().metadata().configuration
    text = configuration.get("delta.deletedFileRetentionDuration")
    retention_ms = DEFAULT_DELETED_FILE_RETENTION_MS if text is None else _interval_ms(table, text)
    if file_delete_delay_ms > retention_ms:
        raise ConfigError(
            f"file.delete.delay.ms={file_delete_delay_ms} of topic {table.topic} exceeds the table's "
            f"delta.deletedFileRetentionDuration ({text or 'interval 1 week'} = {retention_ms} ms): checkpoints forget "
            "removals after that, so vacuum could delete files a reader still uses. Lower file.delete.delay.ms or "
            "raise delta.deletedFileRetentionDuration."
        )


def _interval_ms(table: TopicTable, text: str) -> int:
    """Delta's ``interval <n> <unit> [<n> <unit> ...]`` in milliseconds."""
    words = text.strip().lower().split()
    if words and words[0] == "interval":
        words = words[1:]
    if not words or len(words) % 2:
        raise ConfigError(f"Topic {table.topic}: cannot read delta.deletedFileRetentionDuration={text!r}")
    total = 0
    for amount, unit in zip(words[::2], words[1::2], strict=False):
        unit = unit.rstrip("s") if unit != "ms" else "millisecond"
        if not amount.isdigit() or unit not in _INTERVAL_UNITS_MS:
            raise ConfigError(
                f"Topic {table.topic}: cannot read delta.deletedFileRetentionDuration={text!r}; use e.g. 'interval 7 days'"
            )
        total += int(amount) * _INTERVAL_UNITS_MS[unit]
    return total
