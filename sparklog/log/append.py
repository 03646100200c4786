"""The append protocol of DESIGN §6, for writers that hold their partitions' leases.

One call = one produce request = one Delta commit covering every partition in it:

1. refresh the snapshot; partitions where the producer's sequence is already committed are
   a retry: they keep their original offsets and nothing is written for them (idempotent
   produce; per partition, because after a failover one batch's partitions may have been
   split between leaders);
2. for every partition, check the log's fence epoch (write lease) and leader epoch are not
   newer than ours (else :class:`~sparklog.errors.FencedError` /
   :class:`~sparklog.errors.NotLeaderError`) and read its log-end offset;
3. write one segment per partition (more if over ``segment.bytes``) continuing from it; the
   producer id and sequence go into each file's Parquet metadata, so a follower copying the
   file can carry the producer's sequence over (docs/replication.md);
4. commit files + ``end``/``fence``/``leader``/``producer`` app transactions in one Delta commit.
   A conflict means someone else committed to one of our partitions: delete our files,
   go back to 1 (the fence check then tells a zombie it is fenced).

Spark jobs (batch writes and streaming
micro-batches) write segments in tasks and commit through :func:`commit_reserved`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa
from deltalake import DeltaTable

from sparklog import clock
from sparklog.errors import FencedError, NotLeaderError, PolicyError, StorageError
from sparklog.log.segment import (
    KAFKA_BATCHES_KEY,
    PRODUCER_KEY,
    SEQUENCE_KEY,
    SegmentFile,
    split_for_size,
    write_segment,
)
from sparklog.log.table import (
    CommitConflict,
    TopicTable,
    end_app_id,
    fence_app_id,
    leader_app_id,
    leader_fence_app_id,
    producer_app_id,
)

__all__ = [
    "COPIED_BATCHES_KEY",
    "MAX_COMMIT_ATTEMPTS",
    "AppendResult",
    "KafkaProducerBatches",
    "LogView",
    "SnapshotView",
    "append",
    "commit_reserved",
    "with_append_time",
]

MAX_COMMIT_ATTEMPTS = 50
COPIED_BATCHES_KEY = "sparklog.copied"  # commit info of a follower fetch: producer batches it copied


@dataclass(frozen=True)
class KafkaProducerBatches:
    """Idempotent Kafka producers' batches in one append (a broker's group commit): their last
    sequences become app transactions of the commit, the batches themselves the files'
    :data:`~sparklog.log.segment.KAFKA_BATCHES_KEY` metadata."""

    last_sequences: Mapping[str, int]  # app id (producer_app_id) -> last sequence
    # partition -> (producer id, epoch, first sequence, last sequence, row index in the partition's records)
    batches: Mapping[int, Sequence[tuple[int, int, int, int, int]]]
    # More app transactions of the commit that depend on where it lands (partition -> base
    # offset): Kafka transactions' open and aborted runs (sparklog/log/txn_log.py).
    transactions_for: Callable[[Mapping[int, int]], Mapping[str, int]] | None = None


@dataclass(frozen=True)
class AppendResult:
    base_offsets: dict[int, int]  # partition -> offset of its first record in this batch
    log_append_time_ms: int  # the commit's append time (LogAppendTime topics use it)
    duplicate: bool = False


class LogView(Protocol):
    """What an append reads of the log and how it commits: a delta-rs snapshot
    (:class:`SnapshotView`), or a leader's app-transaction map (:mod:`sparklog.log.leader_log`)."""

    def fence_epoch(self, partition: int) -> int: ...

    def fenced_leader_epoch(self, partition: int) -> int: ...

    def log_end(self, partition: int) -> int: ...

    def commit(
        self, segments: list[SegmentFile], transactions: dict[str, int], metadata: dict[str, str], fsync: bool
    ) -> None: ...


class SnapshotView:
    """The log as one delta-rs snapshot of ``table``; commits through delta-rs."""

    def __init__(self, table: TopicTable, dt: DeltaTable) -> None:
        self.table, self.dt = table, dt

    def fence_epoch(self, partition: int) -> int:
        return self.table.fence_epoch(self.dt, partition)

    def fenced_leader_epoch(self, partition: int) -> int:
        return self.table.fenced_leader_epoch(self.dt, partition)

    def log_end(self, partition: int) -> int:
        return self.table.log_end(self.dt, partition)

    def commit(
        self, segments: list[SegmentFile], transactions: dict[str, int], metadata: dict[str, str], fsync: bool
    ) -> None:
        self.table.commit(self.dt, segments, transactions, metadata, fsync=fsync)


def _check_fences(table: TopicTable, view: LogView, epochs: Mapping[int, int]) -> None:
    for partition, epoch in epochs.items():
        current = view.fence_epoch(partition)
        if current > epoch:
            raise FencedError(
                f"Partition {table.topic}-{partition}: the log carries writer epoch {current}, newer than "
                f"this writer's epoch {epoch}; a newer writer took over, this one is fenced"
            )


def _check_leader_epochs(table: TopicTable, view: LogView, leader_epochs: Mapping[int, int]) -> None:
    for partition, epoch in leader_epochs.items():
        current = view.fenced_leader_epoch(partition)
        if current > epoch:
            raise NotLeaderError(
                f"Partition {table.topic}-{partition}: the replica at {table.root} has seen leader epoch {current}, "
                f"newer than this writer's {epoch}; leadership moved: refresh the metadata and write to the new leader"
            )


def _previous_offsets(table: TopicTable, dt: DeltaTable, producer_id: str, sequence: int) -> dict[int, int]:
    """Base offsets of an earlier commit of this batch: the commit info of the original
    append, or of the follower fetches that copied it here (after a failover); bounded look back."""
    found: dict[int, int] = {}
    key = f"{producer_id} {sequence}"
    for entry in dt.history(200):
        if entry.get("sparklog.producer") == producer_id and entry.get("sparklog.sequence") == str(sequence):
            return {int(p): int(o) for p, o in json.loads(entry.get("sparklog.offsets", "{}")).items()} | found
        copied = entry.get(COPIED_BATCHES_KEY)
        if copied and key in copied:
            found.setdefault(int(entry["sparklog.partition"]), int(json.loads(copied)[key]))
    return found


def append(
    table: TopicTable,
    epochs: Mapping[int, int],
    batches: Mapping[int, pa.Table],
    *,
    leader_epochs: Mapping[int, int] | None = None,
    producer_id: str | None = None,
    sequence: int | None = None,
    check_duplicate: bool = True,
    log_append_time: bool = False,
    compression: str = "snappy",
    segment_bytes: int = 1 << 30,
    fsync: bool = False,
    stage_roots: Sequence[str] = (),
    hard_links: bool = True,
    kafka_producers: KafkaProducerBatches | None = None,
    views: Callable[[], LogView | None] | None = None,
) -> AppendResult:
    """Append ``batches`` (partition -> records without offsets) under ``epochs`` (partition ->
    write-lease epoch) and ``leader_epochs`` (partition -> leader epoch; None: not checked).
    ``stage_roots``: follower replicas' table roots to stage the new files in
    (:func:`~sparklog.log.segment.write_segment`).

    ``check_duplicate=False`` skips the idempotence lookup on the first attempt; callers
    pass it only for a sequence they have never sent before. ``kafka_producers``: the Kafka
    producers' sequences and batches of a broker's group commit. ``views``: where a leader
    reads the log and commits without a delta-rs snapshot
    (:meth:`sparklog.log.leader_log.LeaderLog.view`; None from it: use a snapshot).
    """
    missing = set(batches) - set(epochs)
    if missing:
        raise FencedError(f"No write lease held for partitions {sorted(missing)} of {table.topic}")
    idempotent = producer_id is not None and sequence is not None
    if idempotent and views is not None:
        raise PolicyError("a light producer's idempotent append needs a snapshot (its duplicates are in the history)")
    for attempt in range(MAX_COMMIT_ATTEMPTS):
        view = views() if views is not None else None
        if view is None:
            dt = table.snapshot()
            view = SnapshotView(table, dt)
        pending = dict(batches)
        previous: dict[int, int] = {}
        # A conflict may hide a commit of ours that landed: from the 2nd attempt on, always look.
        if producer_id is not None and sequence is not None and (check_duplicate or attempt > 0):
            done = [p for p in batches if _at_least(table.producer_sequence(dt, producer_id, p), sequence)]
            if done:
                found = _previous_offsets(table, dt, producer_id, sequence)
                previous = {p: found.get(p, -1) for p in done}
                pending = {p: b for p, b in batches.items() if p not in done}
                if not pending:
                    return AppendResult(previous, 0, duplicate=True)
        _check_fences(table, view, {p: epochs[p] for p in pending})
        if leader_epochs is not None:
            _check_leader_epochs(table, view, {p: leader_epochs[p] for p in pending})
        append_ms = clock.now_ms()
        base_offsets = {p: view.log_end(p) for p in pending}
        file_metadata = {PRODUCER_KEY: str(producer_id), SEQUENCE_KEY: str(sequence)} if idempotent else None
        segments: list[SegmentFile] = []
        try:
            for partition, records in sorted(pending.items()):
                if log_append_time:
                    records = with_append_time(records, append_ms)
                next_offset = base_offsets[partition]
                piece_metadata = file_metadata
                if kafka_producers is not None and kafka_producers.batches.get(partition):
                    listed = [[*b[:4], next_offset + b[4]] for b in kafka_producers.batches[partition]]
                    piece_metadata = {**(file_metadata or {}), KAFKA_BATCHES_KEY: json.dumps(listed)}
                for piece in split_for_size(records, segment_bytes):
                    segments.append(
                        write_segment(
                            table.root,
                            partition,
                            next_offset,
                            piece,
                            compression,
                            fsync,
                            metadata=piece_metadata,
                            stage_roots=stage_roots,
                            hard_links=hard_links,
                        )
                    )
                    next_offset += piece.num_rows
            versions = dict(kafka_producers.last_sequences if kafka_producers else {})
            if kafka_producers is not None and kafka_producers.transactions_for is not None:
                versions.update(kafka_producers.transactions_for(base_offsets))
            versions.update({fence_app_id(p): epochs[p] for p in pending})
            versions.update({end_app_id(p): base_offsets[p] + pending[p].num_rows for p in pending})
            if leader_epochs is not None:
                versions.update({leader_app_id(p): leader_epochs[p] for p in pending})
                versions.update({leader_fence_app_id(p): leader_epochs[p] for p in pending})
            metadata = {"sparklog.offsets": json.dumps({str(p): o for p, o in base_offsets.items()})}
            if producer_id is not None and sequence is not None:
                versions.update({producer_app_id(producer_id, p): sequence for p in pending})
                metadata.update({"sparklog.producer": producer_id, "sparklog.sequence": str(sequence)})
            view.commit(segments, versions, metadata, fsync)
            return AppendResult({**previous, **base_offsets}, append_ms, duplicate=bool(previous))
        except CommitConflict:
            _discard(table, segments)
            continue
        except OSError as exc:
            # The table's directory went away under the append (the topic was deleted) or
            # the disk failed: a StorageError naming where, not a bare OS error.
            _discard(table, segments)
            raise StorageError(
                f"Cannot append to {table.topic} partitions {sorted(pending)} at {table.root}: {exc}; "
                "was the topic deleted?"
            ) from exc
        except BaseException:
            _discard(table, segments)
            raise
    raise StorageError(
        f"Append to {table.topic} partitions {sorted(batches)} gave up after {MAX_COMMIT_ATTEMPTS} "
        "conflicting commits; is another writer ignoring the write lease?"
    )


def with_append_time(records: pa.Table, append_ms: int) -> pa.Table:
    """LogAppendTime topics: every record gets the broker's append time, timestampType 1."""
    ts = pa.array([append_ms * 1000] * records.num_rows, type=records.schema.field("timestamp").type)
    kinds = pa.array([1] * records.num_rows, type=pa.int32())
    records = records.set_column(records.schema.get_field_index("timestamp"), "timestamp", ts)
    return records.set_column(records.schema.get_field_index("timestampType"), "timestampType", kinds)


def _discard(table: TopicTable, segments: list[SegmentFile]) -> None:
    for seg in segments:
        try:
            os.remove(table.full_path(seg.path))
        except FileNotFoundError:
            pass


def _at_least(stored: int | None, version: int) -> bool:
    return stored is not None and stored >= version


def commit_reserved(
    table: TopicTable,
    epochs: Mapping[int, int],
    start_offsets: Mapping[int, int],
    segments: list[SegmentFile],
    custom_metadata: dict[str, str] | None = None,
    fsync: bool = False,
    *,
    app_transactions: Mapping[str, int] | None = None,
    leader_epochs: Mapping[int, int] | None = None,
) -> dict[int, tuple[int, int]] | None:
    """Commit segments written by Spark tasks at offsets reserved from ``start_offsets``.

    Verifies, per partition, that the segments tile ``[start, end)`` with no gap or overlap
    and that the log end is still ``start`` (nobody else appended). Returns
    partition -> (start, end). Any violation fails the job; nothing is committed.

    ``leader_epochs`` (partition -> the leader epoch the job planned with; None: not
    checked) fence a job that planned before a leader election, as :func:`append` does:
    :class:`~sparklog.errors.NotLeaderError` when this replica has seen a newer epoch of any
    of them, and the written partitions' commit carries ``leader``/``leaderfence`` at it.

    ``app_transactions`` (app id -> version) ride along in the same Delta commit and make
    it idempotent: when the snapshot already holds one of them at that version or higher,
    the batch was committed to this table before (a replayed streaming micro-batch, or a job
    completing a commit that stopped between two leader tables): nothing is committed and
    ``None`` is returned; the caller deletes its segments. The check is repeated on every
    attempt, so a conflict with our own earlier commit is recognised too.
    """
    ranges: dict[int, tuple[int, int]] = {}
    by_partition: dict[int, list[SegmentFile]] = {}
    for seg in segments:
        by_partition.setdefault(seg.partition, []).append(seg)
    for partition, segs in by_partition.items():
        segs.sort(key=lambda s: s.base_offset)
        expected = start_offsets[partition]
        for seg in segs:
            if seg.base_offset != expected:
                raise StorageError(
                    f"Spark produce to {table.topic}-{partition}: files do not tile the reserved offsets "
                    f"(expected a file starting at {expected}, found {seg.base_offset}); nothing committed"
                )
            expected = seg.last_offset + 1
        ranges[partition] = (start_offsets[partition], expected)
    metadata = dict(custom_metadata or {})
    metadata["sparklog.ranges"] = json.dumps({str(p): list(r) for p, r in sorted(ranges.items())})
    extra = dict(app_transactions or {})
    for _attempt in range(MAX_COMMIT_ATTEMPTS):
        dt = table.snapshot()
        if any(_at_least(table.app_version(dt, app_id), version) for app_id, version in extra.items()):
            return None
        _check_fences(table, SnapshotView(table, dt), epochs)
        if leader_epochs is not None:
            _check_leader_epochs(table, SnapshotView(table, dt), leader_epochs)
        for partition in ranges:
            end = table.log_end(dt, partition)
            if end != start_offsets[partition]:
                raise FencedError(
                    f"Spark produce to {table.topic}-{partition}: log end moved to {end} while the job "
                    f"reserved offsets from {start_offsets[partition]}; nothing committed"
                )
        transactions = {fence_app_id(p): epochs[p] for p in epochs}
        transactions.update({end_app_id(p): end for p, (_start, end) in ranges.items()})
        if leader_epochs is not None:
            # As append: the written partitions' records are of our epoch, and a concurrent
            # epoch marker touching the same ids makes one of the two commits fail.
            transactions.update({leader_app_id(p): leader_epochs[p] for p in ranges})
            transactions.update({leader_fence_app_id(p): leader_epochs[p] for p in ranges})
        transactions.update(extra)
        try:
            table.commit(dt, segments, transactions, metadata, fsync=fsync)
            return ranges
        except CommitConflict:
            continue
    raise StorageError(f"Spark produce to {table.topic}: commit kept conflicting; nothing committed")
