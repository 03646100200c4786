"""A plain Delta table as the output of an exactly-once consumer (the deltalake side).

``sparklog.spark.consume_into(..., output_path=...)`` writes a transformed range of topic
records to any Delta table and stores, *in the same Delta commit*, the input offsets it
consumed as application transactions (the ``txn`` actions Delta's own streaming sink uses):

  ``sparklog.input/<group>/<topic>/<partition>`` version = next input offset to consume;
  ``sparklog.inputtopic/<group>/<topic>`` version = the incarnation of the input topic those
  offsets are of (a topic deleted and re-created under the name is another topic: its
  predecessor's offsets must not position the run, DESIGN §8).

The same ids are used when the output is a sparklog topic (:func:`input_app_id`,
:func:`input_topic_app_id`).

Two halves:

* :func:`write_task_files` (Spark tasks, pure pyarrow, no Delta log access): write the
  task's Arrow batches as Parquet files into the table directory, cast to the table's
  schema, and describe them (:class:`DataFile`) for the commit;
* :class:`DeltaSink` (driver side): inspect the target (is it a Delta table, does its schema
  match), read stored input offsets, and commit the files plus the input offsets.

Invariant: a commit lands only if the stored input offsets on the snapshot it is built on
are exactly those the run started from, and nobody commits in between: every attempt uses
``max_commit_retries=0``, so any concurrent commit makes it fail, and the check is redone
on the fresh snapshot (unrelated writers: retry; a run of the same group that committed
first: fail with nothing committed). Files of a commit that does not land are deleted. The
first commit of a new table creates it (schema, files and offsets in version 0).
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable, Schema, Transaction
from deltalake.exceptions import CommitFailedError, DeltaError
from deltalake.transaction import AddAction, RemoveAction, create_table_with_add_actions

from sparklog import clock
from sparklog.errors import FencedError, SchemaMismatchError, StorageError
from sparklog.retries import DELTA_COMMIT

__all__ = [
    "TARGET_FILE_BYTES",
    "DataFile",
    "DeltaSink",
    "check_input_offsets",
    "input_app_id",
    "input_topic_app_id",
    "is_input_offset_app_id",
    "write_task_files",
]

TARGET_FILE_BYTES = 128 << 20  # in-memory Arrow bytes per data file before rolling to the next


def input_app_id(group_id: str, topic: str, partition: int) -> str:
    """The application transaction holding group ``group_id``'s next offset of ``topic-partition``."""
    return f"sparklog.input/{group_id}/{topic}/{partition}"


def is_input_offset_app_id(app_id: str) -> bool:
    """Whether ``app_id`` (of :func:`input_app_id`) holds an input offset, not an incarnation."""
    return app_id.startswith("sparklog.input/")


def input_topic_app_id(group_id: str, topic: str) -> str:
    """The application transaction holding the incarnation of ``topic`` the group's stored
    input offsets of it belong to."""
    return f"sparklog.inputtopic/{group_id}/{topic}"


def check_input_offsets(where: str, stored: Mapping[str, int | None], expected: Mapping[str, int | None]) -> None:
    """``FencedError`` unless the input offsets stored in the output (``where``) are still
    ``expected``, the values a run started from: else another run of the group got there first."""
    moved = {app_id: (was, stored.get(app_id)) for app_id, was in expected.items() if stored.get(app_id) != was}
    if moved:
        app_id, (was, now) = sorted(moved.items())[0]
        raise FencedError(
            f"The input offsets stored in the output {where} changed while this run was processing: "
            f"{app_id} was {was}, is now {now} ({len(moved)} changed). Another run of the same group "
            "committed first; nothing committed by this run. Run it again to continue from there."
        )


@dataclass(frozen=True)
class DataFile:
    """A Parquet file written by a task, not yet committed."""

    path: str  # relative to the table root
    size_bytes: int
    num_records: int
    stats: str  # Delta stats JSON
    modification_time_ms: int

    def to_dict(self) -> dict[str, int | str]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: Mapping[str, int | str]) -> DataFile:
        return cls(**raw)  # type: ignore[arg-type]


# -- tasks ---------------------------------------------------------------------------------
def write_task_files(
    root: str, schema: pa.Schema, batches: Iterable[pa.RecordBatch], prefix: str, target_bytes: int = TARGET_FILE_BYTES
) -> list[DataFile]:
    """Write ``batches`` (cast to ``schema``) as Parquet files named ``part-<prefix>-<uuid>``
    under ``root``, a new file every ``target_bytes``; nothing for an empty task."""
    files: list[DataFile] = []
    pending: list[pa.Table] = []
    pending_bytes = 0
    for batch in batches:
        if batch.num_rows == 0:
            continue
        try:
            table = pa.Table.from_batches([batch]).select(schema.names).cast(schema)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, KeyError) as exc:
            raise SchemaMismatchError(
                f"Rows for the Delta table at {root} do not fit its schema {schema}: {exc}"
            ) from exc
        pending.append(table)
        pending_bytes += table.nbytes
        if pending_bytes >= target_bytes:
            files.append(_write_file(root, pa.concat_tables(pending), prefix))
            pending, pending_bytes = [], 0
    if pending:
        files.append(_write_file(root, pa.concat_tables(pending), prefix))
    return files


def _write_file(root: str, table: pa.Table, prefix: str) -> DataFile:
    os.makedirs(root, exist_ok=True)
    relative = f"part-{prefix}-{uuid.uuid4().hex}.snappy.parquet"
    full = os.path.join(root, relative)
    try:
        pq.write_table(table, full, compression="snappy")
    except (OSError, pa.ArrowException) as exc:
        raise StorageError(f"Cannot write data file {full} of the Delta table at {root}: {exc}") from exc
    return DataFile(relative, os.path.getsize(full), table.num_rows, _stats(table), clock.now_ms())


def _stats(table: pa.Table) -> str:
    """Delta file stats: record count, null counts, min/max of integer, date and (UTC) timestamp columns."""
    stats: dict[str, Any] = {"numRecords": table.num_rows, "nullCount": {}, "minValues": {}, "maxValues": {}}
    for field, column in zip(table.schema, table.columns, strict=False):
        kind = field.type
        if pa.types.is_nested(kind):
            continue
        stats["nullCount"][field.name] = column.null_count
        timestamp = pa.types.is_timestamp(kind) and kind.tz is not None  # timestamp_ntz: no stats
        if not (pa.types.is_integer(kind) or pa.types.is_date(kind) or timestamp):
            continue
        if column.null_count == len(column):
            continue
        bounds = pc.min_max(column)
        stats["minValues"][field.name] = _stat_value(bounds["min"].as_py(), ceil=False)
        stats["maxValues"][field.name] = _stat_value(bounds["max"].as_py(), ceil=True)
    return json.dumps(stats)


def _stat_value(value: Any, ceil: bool) -> Any:
    if isinstance(value, datetime):
        # Delta keeps milliseconds: round outward so pruning never drops a matching file.
        moment = value if value.tzinfo else value.replace(tzinfo=UTC)
        micros = (moment - _EPOCH) // timedelta(microseconds=1)
        millis = -(-micros // 1000) if ceil else micros // 1000
        text = datetime.fromtimestamp(millis / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.")
        return text + f"{millis % 1000:03d}Z"
    if isinstance(value, date):
        return value.isoformat()
    return value


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


# -- driver side ---------------------------------------------------------------------------
class DeltaSink:
    """The Delta table at ``root`` (a local path) as a consumer's output."""

    def __init__(self, root: str) -> None:
        local = root.removeprefix("file://")
        if "://" in local:
            raise StorageError(f"Output path {root}: only local (or locally mounted) paths are supported")
        self.root = os.path.abspath(local)

    def exists(self) -> bool:
        return DeltaTable.is_deltatable(self.root)

    def _open(self) -> DeltaTable:
        try:
            return DeltaTable(self.root)
        except (DeltaError, OSError) as exc:
            raise StorageError(f"Cannot open the Delta table at {self.root}: {exc}") from exc

    def check_target(self) -> None:
        """Fail unless ``root`` is a Delta table, missing, or an empty directory."""
        if self.exists() or not os.path.exists(self.root):
            return
        if not os.path.isdir(self.root) or os.listdir(self.root):
            raise StorageError(
                f"Output path {self.root} exists but is not a Delta table (no _delta_log); "
                "choose a new or empty directory, or an existing Delta table"
            )

    def file_schema(self, proposed: pa.Schema) -> pa.Schema:
        """The Arrow schema data files must have: the table's, which must match ``proposed``
        (column names and types; nullability aside), or ``proposed`` in Delta's types for a
        new table. ``SchemaMismatchError`` names the differing columns."""
        wanted = _delta_schema(proposed, self.root)
        if not self.exists():
            return pa.schema(wanted.to_arrow())
        current = self._open().schema()
        _require_same(current, wanted, self.root)
        return pa.schema(current.to_arrow())

    def app_versions(self, app_ids: Iterable[str]) -> dict[str, int | None]:
        """Stored version of each application transaction (None: never committed)."""
        ids = list(app_ids)
        if not self.exists():
            return {app_id: None for app_id in ids}
        return _versions(self._open(), ids, self.root)

    def live_paths(self) -> set[str]:
        """Relative paths of the table's live data files (empty for a missing table)."""
        if not self.exists():
            return set()
        try:
            return set(pa.table(self._open().get_add_actions(flatten=True)).column("path").to_pylist())
        except (DeltaError, OSError) as exc:
            raise StorageError(f"Cannot list the files of the Delta table at {self.root}: {exc}") from exc

    def commit_version(self, key: str, value: str, depth: int = 50) -> int | None:
        """Version of the recent commit whose commitInfo has ``key == value``."""
        if not self.exists():
            return None
        for entry in self._open().history(depth):
            if entry.get(key) == value:
                return int(entry["version"])
        return None

    def commit(
        self,
        files: list[DataFile],
        schema: pa.Schema,
        transactions: Mapping[str, int],
        expected: Mapping[str, int | None],
        metadata: Mapping[str, str],
    ) -> None:
        """Commit ``files`` and ``transactions`` in one Delta commit, only on a snapshot whose
        stored versions of ``expected``'s app ids equal it. ``FencedError`` (files deleted,
        nothing committed) if they moved; commits of others meanwhile: retry."""
        adds = [AddAction(f.path, f.size_bytes, {}, f.modification_time_ms, True, f.stats) for f in files]
        actions: list[AddAction | RemoveAction] = list(adds)
        properties = CommitProperties(
            custom_metadata=dict(metadata) or None,
            max_commit_retries=0,
            app_transactions=[Transaction(app_id, version) for app_id, version in sorted(transactions.items())],
        )
        try:
            for _attempt in DELTA_COMMIT:
                if self.exists():
                    dt = self._open()
                    current = dt.schema()
                    _require_same(current, _delta_schema(schema, self.root), self.root)
                    check_input_offsets(
                        f"Delta table at {self.root}", _versions(dt, list(expected), self.root), expected
                    )
                    try:
                        dt.create_write_transaction(actions, "append", current, commit_properties=properties)
                        return
                    except CommitFailedError:
                        continue  # someone committed since our snapshot: check again
                    except (DeltaError, OSError) as exc:
                        raise StorageError(f"Commit to the Delta table at {self.root} failed: {exc}") from exc
                check_input_offsets(f"Delta table at {self.root}", {app_id: None for app_id in expected}, expected)
                try:
                    create_table_with_add_actions(
                        self.root, _delta_schema(schema, self.root), adds, mode="error", commit_properties=properties
                    )
                    return
                except (DeltaError, OSError) as exc:
                    if self.exists():
                        continue  # another writer created the table first
                    raise StorageError(f"Cannot create the Delta table at {self.root}: {exc}") from exc
            raise DELTA_COMMIT.exhausted(
                f"Commit to the Delta table at {self.root}",
                "nothing committed; are many writers appending to it at once?",
            )
        except BaseException:
            self.discard(files)
            raise

    def discard(self, files: Iterable[DataFile], prefix: str | None = None) -> None:
        """Delete ``files``, and with ``prefix`` every file :func:`write_task_files` named with
        it (a failed task's files never reach the driver), unless a commit carrying them landed
        (they are live then: an error after the commit, e.g. in a post-commit hook, must not
        delete committed data)."""
        pending = {f.path for f in files}
        if prefix is not None and os.path.isdir(self.root):
            pending.update(n for n in os.listdir(self.root) if n.startswith(f"part-{prefix}-"))
        if not pending:
            return
        try:
            live = self.live_paths()
        except StorageError:
            return  # cannot tell: keep them (an orphan file is harmless, a lost one is not)
        if pending & live:
            return
        for path in pending:
            try:
                os.remove(os.path.join(self.root, path))
            except FileNotFoundError:
                pass


def _delta_schema(arrow: pa.Schema, root: str) -> Schema:
    try:
        return Schema.from_arrow(arrow)
    except Exception as exc:  # deltalake raises a bare Exception for unsupported types
        raise SchemaMismatchError(
            f"The output for the Delta table at {root} has a column type Delta Lake does not support: "
            f"{str(exc).splitlines()[0]}"
        ) from exc


def _versions(dt: DeltaTable, app_ids: list[str], root: str) -> dict[str, int | None]:
    try:
        return {app_id: dt.transaction_version(app_id) for app_id in app_ids}
    except (DeltaError, OSError) as exc:
        raise StorageError(f"Cannot read the application transactions of the Delta table at {root}: {exc}") from exc


def _require_same(current: Schema, wanted: Schema, root: str) -> None:
    """Same column names and types (order, nullability and field metadata aside)."""
    have, want = _columns(current), _columns(wanted)
    if have == want:
        return
    problems = [f"missing column {n!r}" for n in have if n not in want]
    problems += [f"new column {n!r}" for n in want if n not in have]
    problems += [
        f"column {n!r} is {have[n]} in the table but {want[n]} in the output"
        for n in want
        if n in have and have[n] != want[n]
    ]
    raise SchemaMismatchError(
        f"The output does not match the schema of the Delta table at {root}: {'; '.join(problems)}. "
        "Change the transform to produce the table's columns, or write to a new path; nothing was written."
    )


def _columns(schema: Schema) -> dict[str, str]:
    return {f["name"]: json.dumps(_bare(f["type"]), sort_keys=True) for f in json.loads(schema.to_json())["fields"]}


def _bare(kind: Any) -> Any:
    """A Delta type without nullability flags and metadata, for comparison."""
    if isinstance(kind, dict):
        return {
            k: _bare(v)
            for k, v in kind.items()
            if k not in ("nullable", "containsNull", "valueContainsNull", "metadata")
        }
    if isinstance(kind, list):
        return [_bare(v) for v in kind]
    return kind
