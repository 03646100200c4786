"""The topic table: one Delta table per topic replica, partitioned by ``partition``.

This module (with the rest of ``log/``) is the only code that touches deltalake. It owns:

* the table's life cycle (create, open, delete) under ``<log_dir>/topics/<topic>``;
* the per-partition offsets kept *inside the Delta log* as application transactions, so
  they are read from the snapshot in O(1) and survive file removal:

  - ``sparklog.end.<p>``  version = log-end offset of partition ``p``;
  - ``sparklog.cleaned.<p>`` (compaction) and ``sparklog.rewrite.<p>`` (optimize), see
    those modules;
  - ``sparklog.start.<p>`` version = log-start offset set by retention / DeleteRecords
    (records below it are hidden even inside a file that straddles it);
  - ``sparklog.fence.<p>`` version = the newest writer epoch of ``p``;
  - ``sparklog.leader.<p>`` version = the leader epoch of the newest records of ``p`` here
    (appends and follower fetches set it); ``sparklog.leaderfence.<p>`` = the newest leader
    epoch claimed here (appends, fetches and epoch markers set it; docs/replication.md);
  - ``sparklog.producer.<id>.<p>`` version = last committed batch sequence of a producer
    in partition ``p``.

  Every append to ``p`` touches ``sparklog.end.<p>`` and ``sparklog.fence.<p>``: delta-rs
  fails concurrent commits that touch the same app id, so two writers can never both
  commit on one snapshot of ``p`` (invariant 1 and 4 of DESIGN §5);
* the single commit of a produce (all partitions of one topic in one Delta commit);
* the table's creation with the properties that bound its Delta log
  (:mod:`sparklog.log.table_properties`).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError
from deltalake.transaction import AddAction, RemoveAction

from sparklog import clock
from sparklog.errors import FencedError, StorageError
from sparklog.log.checkpoints import checkpoint_interval
from sparklog.log.delta_commit import commit_name
from sparklog.log.files import FileEntry, LiveFiles
from sparklog.log.plans import SegmentLike
from sparklog.log.segment import SegmentFile
from sparklog.log.storage import fsync_path, table_storage
from sparklog.log.table_properties import log_properties
from sparklog.log.transactions import (
    cleaned_app_id,
    end_app_id,
    fence_app_id,
    leader_app_id,
    leader_fence_app_id,
    producer_app_id,
    rewrite_app_id,
    start_app_id,
)
from sparklog.log.transactions import (
    transaction_version as _transaction_version,
)
from sparklog.log.txn_state import app_transactions
from sparklog.model.schema import TABLE_SCHEMA
from sparklog.model.storage_location import StorageSettings, parse_location
from sparklog.retries import EPOCH_MARKER

__all__ = [
    "CommitConflict",
    "FileEntry",
    "TopicTable",
    "cleaned_app_id",
    "end_app_id",
    "fence_app_id",
    "leader_app_id",
    "leader_fence_app_id",
    "producer_app_id",
    "rewrite_app_id",
    "start_app_id",
]
# The app ids are re-exported: callers name them through the table module.

_FROM_ENVIRONMENT = StorageSettings()  # no storage.* settings: the AWS_* variables decide


class CommitConflict(Exception):
    """A concurrent commit touched the same partition; re-read the snapshot and retry."""


class TopicTable:
    """The Delta table of one topic replica. Thread-safe: one snapshot per thread."""

    def __init__(self, log_dir: str, topic: str, settings: StorageSettings = _FROM_ENVIRONMENT) -> None:
        self.topic = topic
        self.root = _table_root(log_dir, topic)
        self.settings = settings  # how to reach its store: what tasks on other machines need
        self.storage = table_storage(self.root, settings)
        self._options = self.storage.delta_options or None
        self._local = threading.local()
        self._live = LiveFiles()
        self._newest_seen: tuple[str, int] | None = None  # (table id, version): current_log_end's

    # -- life cycle ----------------------------------------------------------------------
    def exists(self) -> bool:
        # Its first commit, or the checkpoint that replaced it after log cleanup. Not
        # delta-rs's is_deltatable: with deltalake 1.6.6 it never returns on S3 when the
        # table has no checkpoint (it asks for _last_checkpoint again and again).
        return self.storage.exists(commit_name(0)) or self.storage.exists("_delta_log/_last_checkpoint")

    def create(self, topic_id: str, history_retention_ms: int) -> None:
        self.storage.prove()
        try:
            DeltaTable.create(
                self.root,
                TABLE_SCHEMA,
                mode="error",
                partition_by=["partition"],
                name=self.topic,
                storage_options=self._options,
                description=json.dumps({"topic_id": topic_id}),
                configuration=log_properties(history_retention_ms, checkpoint_interval(self.storage)),
            )
        except (DeltaError, OSError) as exc:
            raise StorageError(f"Cannot create the table of topic {self.topic} at {self.root}: {exc}") from exc

    def await_created(self, timeout_s: float = 30.0) -> None:
        """Return once the table exists. A topic's znodes are created before its tables (DESIGN
        §4), so another client may be between the two; ``StorageError`` after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while not self.exists():
            if time.monotonic() > deadline:
                raise StorageError(
                    f"The {self.topic} topic exists in ZooKeeper but has no table at {self.root} after {timeout_s} s"
                )
            time.sleep(0.05)

    def topic_id(self) -> str | None:
        description = self.snapshot().metadata().description
        try:
            return json.loads(description or "{}").get("topic_id")
        except json.JSONDecodeError:
            return None

    def delete(self) -> None:
        self.storage.delete_all()
        self.forget()

    # -- snapshots -----------------------------------------------------------------------
    def snapshot(self, version: int | None = None) -> DeltaTable:
        """The latest (or a given) committed version of the table, for this thread.

        A thread's cached snapshot is refreshed when a newer commit exists, and thrown away
        when the commit file it was read at is no longer the same file (log cleanup, or the
        topic deleted and created again: a re-created table can reach the same versions)."""
        try:
            if version is not None:
                return DeltaTable(self.root, version=version, storage_options=self._options)
            dt: DeltaTable | None = getattr(self._local, "dt", None)
            stamp = getattr(self._local, "stamp", None)
            newest = None if dt is None else self.newest_version(dt.version(), stamp)
            if dt is None or (newest is None and stamp is not None):
                # None cached, or the commit file it was read at is gone or replaced: start over.
                dt = self._local.dt = DeltaTable(self.root, storage_options=self._options)
            elif newest != dt.version():
                try:
                    dt.update_incremental()
                except (DeltaError, OSError):
                    # Log cleanup deleted commit files this snapshot had not read yet: start
                    # over from the newest checkpoint.
                    dt = self._local.dt = DeltaTable(self.root, storage_options=self._options)
            self._local.stamp = self.commit_stamp(dt.version())
            return dt
        except TableNotFoundError as exc:
            raise StorageError(
                f"The table of topic {self.topic} is missing at {self.root}: was the topic deleted, "
                "or does this client use another log.dirs?"
            ) from exc
        except (DeltaError, OSError) as exc:
            raise StorageError(f"Cannot read the table of topic {self.topic} at {self.root}: {exc}") from exc

    def commit_stamp(self, version: int) -> tuple[object, ...] | None:
        """Which object commit ``version`` is (:meth:`TableStorage.stamp`; None: there is
        none): a table re-created up to the same version has other commit objects."""
        return self.storage.stamp(commit_name(version))

    def newest_version(self, known: int, stamp: tuple[object, ...] | None = None) -> int | None:
        """The newest commit version, probing commit files forward from ``known`` instead of
        delta-rs's listing of the whole ``_delta_log`` (two stats when nothing is new, about
        2·log2(n) for n new):
        commits are numbered without gaps, and log cleanup deletes the oldest first. None:
        ``known`` itself is missing (cleaned up, or a re-created table), or (with ``stamp``,
        :meth:`commit_stamp`) is another file than the one read: refresh instead."""
        if stamp is not None:
            if self.commit_stamp(known) != stamp:
                return None
        elif not self.storage.exists(commit_name(known)):
            return None
        if not self.storage.exists(commit_name(known + 1)):
            return known
        # Gallop (known + 2, + 4, + 8 …) then halve: a reader far behind others committing
        # fast asks a few times log2 of the distance, not once per commit (it never caught up).
        found, step = known + 1, 2
        while self.storage.exists(commit_name(known + step)):
            found, step = known + step, step * 2
        missing = known + step
        while missing - found > 1:
            middle = (found + missing) // 2
            if self.storage.exists(commit_name(middle)):
                found = middle
            else:
                missing = middle
        return found

    def forget(self) -> None:
        """Drop the cached snapshots (every thread's): the next :meth:`snapshot` re-opens the table."""
        self._local = threading.local()
        self._newest_seen = None
        self._live = LiveFiles()

    @staticmethod
    def log_end(dt: DeltaTable, partition: int) -> int:
        return _transaction_version(dt, end_app_id(partition)) or 0

    def current_log_end(self, partition: int) -> int:
        """The log end of ``partition`` as of the newest commit, without refreshing this
        thread's snapshot: the newest version is found by probing commit files forward, its
        app transactions read from the log (:mod:`sparklog.log.txn_state`). For pollers that
        only need the number (acks=all waits, high watermarks, the controller's ISR checks):
        a delta-rs refresh also rebuilds the file list (≈10 ms a version measured)."""
        dt: DeltaTable | None = getattr(self._local, "dt", None)
        seen = self._newest_seen
        if dt is None and seen is None:
            return self.log_end(self.snapshot(), partition)
        try:
            # Probe from the newest version any thread found, not from this thread's snapshot:
            # a thread that serves fetches from the tail never refreshes it, and probing one
            # stat per commit since then (thousands under load, per partition) made every
            # such fetch slower than the one before. A thread without a snapshot of its own
            # starts from there too: loading one costs a first Fetch tens of ms.
            if dt is None:
                assert seen is not None
                table_id, known = seen
            else:
                table_id, known = str(dt.metadata().id), dt.version()
                if seen is not None and seen[0] == table_id and seen[1] > known:
                    known = seen[1]
            newest = self.newest_version(known)
            if newest is not None:
                self._newest_seen = (table_id, newest)
            state = None if newest is None else app_transactions(self.storage, table_id, newest)
        except (DeltaError, OSError) as exc:
            raise StorageError(f"Cannot read the table of topic {self.topic} at {self.root}: {exc}") from exc
        if state is None:  # log cleaned up or table re-created under the snapshot, or not local
            return self.log_end(self.snapshot(), partition)
        return state.get(end_app_id(partition)) or 0

    @staticmethod
    def fence_epoch(dt: DeltaTable, partition: int) -> int:
        return _transaction_version(dt, fence_app_id(partition)) or 0

    @staticmethod
    def leader_epoch(dt: DeltaTable, partition: int) -> int:
        """The leader epoch of the newest records of ``partition`` in this replica (0: none)."""
        return _transaction_version(dt, leader_app_id(partition)) or 0

    @staticmethod
    def fenced_leader_epoch(dt: DeltaTable, partition: int) -> int:
        """Writers of an older leader epoch than this are refused by this replica."""
        return max(
            _transaction_version(dt, leader_app_id(partition)) or 0,
            _transaction_version(dt, leader_fence_app_id(partition)) or 0,
        )

    def drop_partition(self, partition: int) -> None:
        """Remove every file of ``partition`` from this replica and reset its offsets (a
        reassignment moved the replica away; metadata only, vacuum deletes the files)."""
        for _ in range(50):
            dt = self.snapshot()
            files = self.files(dt, {partition})
            transactions = {end_app_id(partition): 0, start_app_id(partition): 0, leader_app_id(partition): 0}
            try:
                self.commit(
                    dt,
                    [],
                    transactions,
                    {"sparklog.operation": "DROP REPLICA", "sparklog.partition": str(partition)},
                    removes=files,
                )
                return
            except CommitConflict:
                continue
        raise StorageError(f"Could not drop {self.topic}-{partition} from {self.root}: too many conflicts")

    def commit_leader_epoch(self, partition: int, epoch: int, *, lineage: bool) -> None:
        """An empty commit raising the leader epoch of ``partition`` to ``epoch``: on the new
        leader's replica ``lineage=True`` (its log is the new epoch's), on others only the
        fence. Any writer of an older epoch is refused afterwards; a concurrent one conflicts."""
        for _ in range(50):
            dt = self.snapshot()
            fenced = self.fenced_leader_epoch(dt, partition)
            if fenced >= epoch and (not lineage or self.leader_epoch(dt, partition) >= epoch):
                return
            # A late marker (from a controller deposed mid-election) must not lower a newer fence.
            transactions = {leader_fence_app_id(partition): max(epoch, fenced)}
            if lineage:
                transactions[leader_app_id(partition)] = epoch
            try:
                self.commit(
                    dt, [], transactions, {"sparklog.operation": "LEADER EPOCH", "sparklog.partition": str(partition)}
                )
                return
            except CommitConflict:
                continue
        raise StorageError(
            f"Could not commit leader epoch {epoch} of {self.topic}-{partition} at {self.root}: too many conflicts"
        )

    @staticmethod
    def producer_sequence(dt: DeltaTable, producer_id: str, partition: int) -> int | None:
        return _transaction_version(dt, producer_app_id(producer_id, partition))

    @staticmethod
    def app_version(dt: DeltaTable, app_id: str) -> int | None:
        """The version of any application transaction (stream batch ids, group offsets)."""
        return _transaction_version(dt, app_id)

    def files(self, dt: DeltaTable, partitions: set[int] | None = None) -> list[FileEntry]:
        """Live files (optionally of some partitions), ordered by partition and offset."""
        by_partition = self._live.by_partition(_version_key(dt), lambda: self._actions(dt))
        wanted = sorted(by_partition) if partitions is None else sorted(partitions)
        return [entry for p in wanted for entry in by_partition.get(p, ())]

    def _actions(self, dt: DeltaTable) -> pa.Table:
        try:
            return pa.table(dt.get_add_actions(flatten=True))
        except (DeltaError, OSError) as exc:
            raise StorageError(f"Cannot list the files of topic {self.topic} at {self.root}: {exc}") from exc

    def log_starts(self, dt: DeltaTable) -> dict[int, int]:
        """Log-start offset per partition that has files: its smallest live offset, or the
        explicit ``sparklog.start.<p>`` when higher (a partition without files starts at its
        log end)."""
        smallest = self._live.smallest_offsets(_version_key(dt), lambda: self._actions(dt))
        return {p: max(first, _transaction_version(dt, start_app_id(p)) or 0) for p, first in smallest.items()}

    def log_start(self, dt: DeltaTable, partition: int) -> int:
        return self.log_starts(dt).get(partition, self.log_end(dt, partition))

    def full_path(self, relative: str) -> str:
        return os.path.join(self.root, relative)

    # -- commits -------------------------------------------------------------------------
    def commit(
        self,
        dt: DeltaTable,
        segments: list[SegmentFile],
        transactions: dict[str, int],
        custom_metadata: dict[str, str] | None = None,
        fsync: bool = False,
        removes: Sequence[SegmentLike] | None = None,
        *,
        data_change: bool = True,
        max_commit_retries: int = 0,
    ) -> None:
        """Commit ``segments`` (and the removal of ``removes``) and app transactions in one
        Delta commit on top of ``dt``.

        ``data_change=False`` marks a rewrite that changes no record (optimize).
        ``max_commit_retries`` > 0 lets delta-rs rebase over concurrent commits that do not
        conflict logically (e.g. appends while maintenance removes other files); the default 0
        fails on any concurrent commit. Raises :class:`CommitConflict` on a conflict.
        """
        now_ms = clock.now_ms()
        actions: list[AddAction | RemoveAction] = [
            RemoveAction(entry.path, data_change, now_ms, entry.size_bytes, {"partition": str(entry.partition)})
            for entry in removes or []
        ]
        actions += [
            AddAction(
                seg.path,
                seg.size_bytes,
                {"partition": str(seg.partition)},
                seg.modification_time_ms,
                data_change,
                seg.stats_json(),
            )
            for seg in segments
        ]
        read_version = dt.version()
        self.storage.prove()
        properties = CommitProperties(
            custom_metadata=custom_metadata or None,
            max_commit_retries=max_commit_retries,
            app_transactions=[Transaction(app_id, version) for app_id, version in sorted(transactions.items())],
        )
        try:
            dt.create_write_transaction(
                actions, "append", TABLE_SCHEMA, partition_by=["partition"], commit_properties=properties
            )
        except CommitFailedError as exc:
            raise CommitConflict(str(exc)) from exc
        except (DeltaError, OSError) as exc:
            raise StorageError(f"Commit to the table of topic {self.topic} at {self.root} failed: {exc}") from exc
        if fsync:
            self._fsync_log_after(read_version)

    def _fsync_log_after(self, read_version: int) -> None:
        # The commit landed at some version > read_version; fsync every newer commit file
        # (cheap, and covers ours without needing to know its exact number). A store's
        # acknowledged PUT is durable already.
        log_dir = self.storage.local_path("_delta_log")
        if log_dir is None:
            return
        for name in os.listdir(log_dir):
            if name.endswith(".json") and name[:20].isdigit() and int(name[:20]) > read_version:
                fsync_path(os.path.join(log_dir, name))
        fsync_path(log_dir)

    def advance_log_start(
        self, partition: int, new_log_start: int, removed: Sequence[SegmentLike], operation: str
    ) -> bool:
        """:meth:`advance_log_starts` for one partition."""
        return self.advance_log_starts({partition: new_log_start}, removed, operation)

    def advance_log_starts(
        self, new_log_starts: dict[int, int], removed: Sequence[SegmentLike], operation: str
    ) -> bool:
        """Remove ``removed`` (whole files, metadata only) and raise the log-start offset of
        each partition in ``new_log_starts``, all in one commit. Returns False when a
        concurrent commit got there first (a file is no longer live, or a log-start moved
        past ours): the caller re-plans on a fresh snapshot."""
        dt = self.snapshot()
        live = {f.path for f in self.files(dt, set(new_log_starts))}
        if any(f.path not in live for f in removed):
            return False
        for partition, start in new_log_starts.items():
            if (self.app_version(dt, start_app_id(partition)) or 0) > start:
                return False
        transactions = {start_app_id(p): start for p, start in new_log_starts.items()}
        info = {
            "sparklog.operation": operation,
            # Which partitions' log-starts this commit raised, for `sparklog history`.
            "sparklog.log_starts": json.dumps({str(p): start for p, start in sorted(new_log_starts.items())}),
        }
        try:
            self.commit(dt, [], transactions, info, removes=removed)
        except CommitConflict:
            return False
        return True

    def commit_epoch_marker(self, partition: int, epoch: int) -> None:
        """An empty commit carrying ``epoch``: any older writer's later commit now fails."""
        for _attempt in EPOCH_MARKER:
            dt = self.snapshot()
            current = self.fence_epoch(dt, partition)
            if current > epoch:
                raise FencedError(
                    f"Partition {self.topic}-{partition}: epoch {epoch} is older than the epoch "
                    f"{current} already in the log; this writer is fenced"
                )
            if current == epoch:
                return
            try:
                self.commit(
                    dt, [], {fence_app_id(partition): epoch}, {"sparklog.operation": "EPOCH MARKER"}, fsync=False
                )
                return
            except CommitConflict:
                continue
        raise EPOCH_MARKER.exhausted(f"The epoch marker {epoch} of {self.topic}-{partition}", "the writer retries it")


def _table_root(log_dir: str, topic: str) -> str:
    """A local log dir's path as given (callers resolved it); a store's URI normalised."""
    if "://" not in log_dir:
        return str(Path(log_dir) / "topics" / topic)
    location = parse_location(log_dir)
    return (
        location.child("topics", topic).uri if location.is_object_store else str(Path(location.path) / "topics" / topic)
    )


def _version_key(dt: DeltaTable) -> tuple[str, int]:
    """A snapshot's table id and version: a topic deleted and created again restarts at 0."""
    return str(dt.metadata().id), dt.version()
