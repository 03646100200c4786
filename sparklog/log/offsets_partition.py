"""One ``__consumer_offsets`` partition as its leader writes it: offset commits group-committed
on the leader's fast path (DESIGN §8, §14).

A broker coordinating the groups of partition ``p`` commits their offsets here rather than
through :func:`sparklog.log.group_offsets.commit_offsets` (a delta-rs snapshot and a rewrite
of the partition's live file on every commit). The Delta representation is the same — JSON
key/value records plus the app transactions ``sparklog.offset/<g>/<t>/<p>`` and
``sparklog.group/<g>`` (DESIGN §3) — so every reader (``Cluster.committed_offsets``, the
CLI, the ``consumer_lag`` view, Spark, the light consumer) reads what the broker wrote. What
differs:

* the log is read as :class:`~sparklog.log.leader_log.LeaderLog` reads it (the app
  transactions of the newest version from ``_delta_log``) and committed by the Delta
  protocol's put-if-absent rule (:mod:`sparklog.log.delta_commit`), no delta-rs snapshot;
* the newest record of every key and the partition's live files are kept in memory as of
  the version this object last wrote or read. A commit it did not make (a sparklog client
  committing directly, maintenance) shows as a version it does not know, and the memory is
  reloaded from a snapshot of that version before anything else is done;
* any number of offset commits, of any groups of the partition, go into one Delta commit:
  one new file with their records at offsets from the log end (so followers copy it whole,
  by hard link where they can);
* compaction as it is written stays, bounded instead of on every commit: after
  :data:`COMPACT_EVERY` appends, :meth:`OffsetsPartitionLog.compact` replaces the live files
  by one file with the newest record of every key (offsets kept, gaps allowed, log end
  unchanged), so live files stay at most ``COMPACT_EVERY + 1``.

Invariants: every commit touches ``sparklog.end.<p>`` and the leader-epoch ids of ``p`` (a
compaction also ``sparklog.rewrite.<p>``), so it never lands beside another commit prepared on
the same log state that touches ``p`` (a library commit, an optimize, an epoch marker); a
commit whose leader epoch is older than the replica's fenced leader epoch fails with
:class:`~sparklog.errors.NotLeaderError` (a deposed coordinator writes nothing); a request
carrying a generation older than its group's fence (``sparklog.group/<g>``) is refused with
:class:`~sparklog.errors.IllegalGenerationError` and nothing of it is written; a request's
partitions of a deleted topic (its incarnation at or below the table's deletion marker,
:func:`~sparklog.log.group_offsets.refused_partitions`) are left out and answered with
:class:`~sparklog.errors.UnknownTopicCommitError`, the rest of it is stored. A deletion's
tombstones (:func:`~sparklog.log.group_offsets.delete_topic_offsets`) are a commit this object
did not make: the memory is reloaded, so OffsetFetch never answers from a forgotten offset.
One lock: a read waits for a commit in flight, never sees half of one.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from sparklog import clock
from sparklog.errors import IllegalGenerationError, NotLeaderError, StorageError
from sparklog.log.append import MAX_COMMIT_ATTEMPTS
from sparklog.log.group_offsets import (
    NO_GENERATION,
    OffsetCommit,
    group_fence_app_id,
    group_offset_app_id,
    latest_per_key,
    offset_key,
    offset_value,
    refused_partitions,
    rows_to_arrow,
    unknown_topic_error,
)
from sparklog.log.leader_log import LeaderLog, StateView
from sparklog.log.plans import SegmentLike
from sparklog.log.reader import read_files
from sparklog.log.segment import SegmentFile, discard_segments, write_segment
from sparklog.log.table import CommitConflict, TopicTable
from sparklog.log.transactions import end_app_id, leader_app_id, leader_fence_app_id, rewrite_app_id
from sparklog.model.records import records_to_arrow
from sparklog.model.topic import TopicPartition

__all__ = ["COMPACT_EVERY", "GroupCommit", "OffsetsPartitionLog", "RoundResult"]

COMPACT_EVERY = 64  # appends between two rewrites of the partition's live files


@dataclass(frozen=True)
class GroupCommit:
    """One offset commit request of one group (a None offset deletes: a tombstone)."""

    group_id: str
    offsets: Mapping[TopicPartition, OffsetCommit]
    generation: int = NO_GENERATION
    member_id: str = ""
    # topic -> the incarnation the committer checked (None: unchecked, e.g. tombstones only)
    incarnations: Mapping[str, int] | None = None


@dataclass(frozen=True)
class RoundResult:
    errors: list[BaseException | None]  # per request, in order: None = stored
    log_end: int  # of the partition after the round's commit (what the ISR must reach)


class OffsetsPartitionLog:
    """The leader's writer and reader of one offsets partition of ``table``; see the module doc."""

    def __init__(self, table: TopicTable, partition: int) -> None:
        self.table = table
        self.partition = partition
        self._leader_log = LeaderLog(table)
        self._lock = threading.Lock()
        self._version: int | None = None  # the version the memory below is as of
        self._latest: dict[bytes, dict[str, Any]] = {}  # key -> newest row (file layout, with offset)
        self._files: list[SegmentLike] = []  # the partition's live files
        self._appends = 0

    # -- reads -----------------------------------------------------------------------------
    def committed(
        self, group_id: str, partitions: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, OffsetCommit]:
        """Committed offset, metadata and leader epoch of ``partitions`` (None: every one the
        group has) that have one; offsets are the app transactions every reader reads."""
        with self._lock:
            view = self._view()
            if partitions is None:
                wanted = []
                for key in self._latest:
                    parsed = json.loads(key)
                    if parsed["group"] == group_id:
                        wanted.append((str(parsed["topic"]), int(parsed["partition"])))
            else:
                wanted = list(partitions)
            found = {}
            for topic, partition in sorted(set(wanted)):
                offset = view.state.get(group_offset_app_id(group_id, topic, partition))
                if offset is None or offset < 0:
                    continue
                row = self._latest.get(offset_key(group_id, topic, partition))
                value = json.loads(row["value"]) if row is not None and row["value"] is not None else {}
                found[(topic, partition)] = OffsetCommit(
                    offset, str(value.get("metadata") or ""), int(value.get("leader_epoch", -1))
                )
            return found

    def generation(self, group_id: str) -> int:
        """The group's generation fence (-1: none)."""
        with self._lock:
            return self._view().state.get(group_fence_app_id(group_id), -1)

    # -- commits ---------------------------------------------------------------------------
    def commit_round(
        self,
        requests: Sequence[GroupCommit],
        leader_epoch: int,
        *,
        fsync: bool = False,
        stage_roots: Sequence[str] = (),
        hard_links: bool = True,
    ) -> RoundResult:
        """Store every acceptable request of ``requests`` in one Delta commit under
        ``leader_epoch``; ``stage_roots``: in-sync followers' table roots that get the new file
        at once (:func:`~sparklog.log.segment.write_segment`)."""
        with self._lock:
            for _attempt in range(MAX_COMMIT_ATTEMPTS):
                view = self._view()
                self._check_leader(view, leader_epoch)
                errors: list[BaseException | None] = [None] * len(requests)
                fences: dict[str, int] = {}
                offsets: dict[str, int] = {}
                keys: list[bytes] = []
                values: list[bytes | None] = []
                now_ms = clock.now_ms()
                for i, request in enumerate(requests):
                    group = request.group_id
                    fence = fences.get(group, view.state.get(group_fence_app_id(group), -1))
                    if request.generation != NO_GENERATION and fence > request.generation:
                        errors[i] = IllegalGenerationError(
                            f"Offset commit of group {group} rejected: it carries generation {request.generation}, "
                            f"but generation {fence} is already live; the member must rejoin and commit again"
                        )
                        continue
                    fences[group] = max(fence, request.generation)
                    refused = refused_partitions(request.offsets, request.incarnations, view.state.get)
                    if refused:
                        errors[i] = unknown_topic_error(group, refused)
                    for (topic, partition), commit in sorted(request.offsets.items()):
                        if (topic, partition) in refused:
                            continue
                        keys.append(offset_key(group, topic, partition))
                        values.append(offset_value(commit, request.generation, request.member_id, now_ms))
                        offsets[group_offset_app_id(group, topic, partition)] = (
                            -1 if commit.offset is None else commit.offset
                        )
                base = view.log_end(self.partition)
                if not keys:
                    return RoundResult(errors, base)
                records = records_to_arrow(keys, values, [now_ms] * len(keys))
                segment = write_segment(
                    self.table.storage,
                    self.partition,
                    base,
                    records,
                    "none",
                    fsync,
                    stage_roots=stage_roots,
                    hard_links=hard_links,
                )
                transactions = {
                    **self._epoch_transactions(leader_epoch),
                    end_app_id(self.partition): base + len(keys),
                    **{group_fence_app_id(g): f for g, f in fences.items()},
                    **offsets,
                }
                groups = sorted(fences)
                metadata = {
                    "sparklog.operation": "OFFSET COMMIT",
                    "sparklog.group": groups[0] if len(groups) == 1 else json.dumps(groups),
                }
                if not self._commit(view, [segment], transactions, metadata, fsync):
                    continue
                stamp = datetime.fromtimestamp(now_ms / 1000, tz=UTC)
                if self._version is not None:
                    for i, (key, value) in enumerate(zip(keys, values, strict=True)):
                        self._latest[key] = _row(base + i, stamp, key, value)
                    self._files.append(segment)
                    self._appends += 1
                return RoundResult(errors, base + len(keys))
            raise StorageError(
                f"Offset commit to {self.table.topic}-{self.partition} at {self.table.root} gave up after "
                f"{MAX_COMMIT_ATTEMPTS} conflicting commits"
            )

    def mark_generation(self, group_id: str, generation: int, leader_epoch: int) -> None:
        """The generation marker: commits of generations below ``generation`` fail afterwards."""
        with self._lock:
            for _attempt in range(MAX_COMMIT_ATTEMPTS):
                view = self._view()
                self._check_leader(view, leader_epoch)
                if view.state.get(group_fence_app_id(group_id), -1) >= generation:
                    return
                transactions = {
                    **self._epoch_transactions(leader_epoch),
                    end_app_id(self.partition): view.log_end(self.partition),
                    group_fence_app_id(group_id): generation,
                }
                metadata = {"sparklog.operation": "GENERATION MARKER", "sparklog.group": group_id}
                if self._commit(view, [], transactions, metadata, fsync=False):
                    return
            raise StorageError(f"Could not commit generation {generation} of group {group_id}: too many conflicts")

    def compaction_due(self) -> bool:
        return self._appends >= COMPACT_EVERY

    def compact(self, leader_epoch: int) -> bool:
        """Replace the live files by one holding the newest record of every key (offsets and
        log end unchanged). Returns whether a rewrite was committed."""
        with self._lock:
            for _attempt in range(MAX_COMMIT_ATTEMPTS):
                view = self._view()
                self._check_leader(view, leader_epoch)
                if len(self._files) <= 1:
                    self._appends = 0
                    return False
                kept = sorted(self._latest.values(), key=lambda row: int(row["offset"]))
                segments: list[SegmentFile] = []
                if kept:
                    positions = pa.array([row["offset"] for row in kept], pa.int64())
                    segments.append(
                        write_segment(
                            self.table.storage,
                            self.partition,
                            int(kept[0]["offset"]),
                            rows_to_arrow(kept),
                            "none",
                            offsets=positions,
                        )
                    )
                transactions = {
                    **self._epoch_transactions(leader_epoch),
                    end_app_id(self.partition): view.log_end(self.partition),
                    rewrite_app_id(self.partition): view.state.get(rewrite_app_id(self.partition), 0) + 1,
                }
                metadata = {"sparklog.operation": "OFFSETS COMPACTION", "sparklog.partition": str(self.partition)}
                removed = list(self._files)
                if not self._commit(view, segments, transactions, metadata, fsync=False, removes=removed):
                    continue
                if self._version is not None:
                    self._files = list(segments)
                    self._appends = 0
                return True
            raise StorageError(f"Could not compact {self.table.topic}-{self.partition}: too many conflicts")

    # -- internals -------------------------------------------------------------------------
    def _epoch_transactions(self, leader_epoch: int) -> dict[str, int]:
        # As every leader append: a concurrent leader-epoch marker touches these and conflicts.
        return {leader_app_id(self.partition): leader_epoch, leader_fence_app_id(self.partition): leader_epoch}

    def _check_leader(self, view: StateView, leader_epoch: int) -> None:
        fenced = view.fenced_leader_epoch(self.partition)
        if fenced > leader_epoch:
            raise NotLeaderError(
                f"{self.table.topic}-{self.partition} at {self.table.root} has seen leader epoch {fenced}, newer "
                f"than this coordinator's {leader_epoch}: the group coordinator moved"
            )

    def _commit(
        self,
        view: StateView,
        segments: list[SegmentFile],
        transactions: dict[str, int],
        metadata: dict[str, str],
        fsync: bool,
        removes: Sequence[SegmentLike] = (),
    ) -> bool:
        """Commit on ``view``; False on a conflict (files discarded, memory to be reloaded)."""
        try:
            view.commit(segments, transactions, metadata, fsync, removes=removes)
        except CommitConflict:
            discard_segments(self.table.storage, segments)
            self._version = None
            return False
        except BaseException:
            discard_segments(self.table.storage, segments)
            self._version = None
            raise
        landed = self._leader_log.known_version
        # Stepped over commits of others (other partitions, or ones touching none of our ids):
        # the memory may miss what they did to this partition's files; reload it next time.
        self._version = landed if landed == view.version + 1 else None
        return True

    def _view(self) -> StateView:
        """The newest log state, the memory reloaded first when someone else committed."""
        for _attempt in range(3):
            view = self._leader_log.state_view()
            if view is None:
                continue  # the log was cleaned up under the map, or the table re-created: read again
            if view.version != self._version:
                self._reload(view.version)
            return view
        raise StorageError(
            f"Cannot read the app transactions of {self.table.topic} at {self.table.root} from its _delta_log"
        )

    def _reload(self, version: int) -> None:
        dt = self.table.snapshot(version)
        files = self.table.files(dt, {self.partition})
        self._latest = latest_per_key(read_files(self.table, files))
        self._files = list(files)
        self._appends = len(files)  # many live files (written by others): compact soon
        self._version = version


def _row(offset: int, timestamp: datetime, key: bytes, value: bytes | None) -> dict[str, Any]:
    """A record in the file layout, as :func:`~sparklog.log.reader.read_files` rows are."""
    return {"offset": offset, "timestamp": timestamp, "timestampType": 0, "key": key, "value": value, "headers": None}
