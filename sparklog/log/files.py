"""The live data files of a topic table, as the Delta log's add actions and stats list them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa

__all__ = ["FileEntry", "LiveFiles", "file_entries"]


@dataclass(frozen=True)
class FileEntry:
    """A live data file of the table, from the Delta log's add actions and stats."""

    path: str
    partition: int
    base_offset: int
    last_offset: int
    num_records: int
    size_bytes: int
    min_timestamp_us: int | None
    max_timestamp_us: int | None


def file_entries(actions: pa.Table) -> list[FileEntry]:
    """``actions`` (delta-rs's flattened add actions) as entries, ordered by partition and offset."""
    if actions.num_rows == 0:
        return []
    cols: dict[str, list[Any]] = {
        name: actions.column(name).to_pylist() if name in actions.column_names else [None] * actions.num_rows
        for name in (
            "path",
            "partition.partition",
            "min.offset",
            "max.offset",
            "num_records",
            "size_bytes",
            "min.timestamp",
            "max.timestamp",
        )
    }
    entries = [
        FileEntry(
            path=cols["path"][i],
            partition=int(cols["partition.partition"][i]),
            base_offset=int(cols["min.offset"][i]),
            last_offset=int(cols["max.offset"][i]),
            num_records=int(cols["num_records"][i]),
            size_bytes=int(cols["size_bytes"][i]),
            min_timestamp_us=_micros(cols["min.timestamp"][i]),
            max_timestamp_us=_micros(cols["max.timestamp"][i]),
        )
        for i in range(actions.num_rows)
    ]
    entries.sort(key=lambda e: (e.partition, e.base_offset))
    return entries


class LiveFiles:
    """The live files of one table per partition, in offset order, listed once per version
    (``key``: the table id and version of a snapshot). A Fetch from the segments asks for
    every request, and a listing costs time in proportion to the files: thousands after a
    produce load. ``actions`` lists them (delta-rs's flattened add actions) when needed.
    Thread-safe: the newest listing is one tuple, replaced whole."""

    def __init__(self) -> None:
        self._cached: tuple[tuple[str, int], dict[int, list[FileEntry]]] | None = None

    def by_partition(self, key: tuple[str, int], actions: Callable[[], pa.Table]) -> dict[int, list[FileEntry]]:
        cached = self._cached
        if cached is not None and cached[0] == key:
            return cached[1]
        by_partition: dict[int, list[FileEntry]] = {}
        for entry in file_entries(actions()):
            by_partition.setdefault(entry.partition, []).append(entry)
        self._cached = (key, by_partition)
        return by_partition

    def smallest_offsets(self, key: tuple[str, int], actions: Callable[[], pa.Table]) -> dict[int, int]:
        """Each partition's smallest live offset: from the listing when it is this version's,
        else in one vectorised pass over the add actions (no object per file)."""
        cached = self._cached
        if cached is not None and cached[0] == key:
            return {p: entries[0].base_offset for p, entries in cached[1].items()}
        listed = actions()
        if listed.num_rows == 0:
            return {}
        grouped = listed.group_by("partition.partition").aggregate([("min.offset", "min")])
        return dict(
            zip(
                grouped.column("partition.partition").to_pylist(),
                grouped.column("min.offset_min").to_pylist(),
                strict=True,
            )
        )


def _micros(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, int):
        return value
    # pyarrow gives datetime for timestamp stats
    moment = value if value.tzinfo else value.replace(tzinfo=UTC)
    return (moment - _EPOCH) // timedelta(microseconds=1)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
