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

Spark jobs (batch writes and streaming micro-batches) write segments in tasks and commit
through :func:`sparklog.log.reserved_commit.commit_reserved`.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
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
    discard_segments,
    split_for_size,
    write_segment,
)
from sparklog.log.storage import fsync_path, in_parallel
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
    "PreparedAppend",
    "ProjectedView",
    "SnapshotView",
    "WriteOptions",
    "append",
    "at_least",
    "check_fences",
    "check_leader_epochs",
    "prepare_append",
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


def check_fences(table: TopicTable, view: LogView, epochs: Mapping[int, int]) -> None:
    for partition, epoch in epochs.items():
        current = view.fence_epoch(partition)
        if current > epoch:
            raise FencedError(
                f"Partition {table.topic}-{partition}: the log carries writer epoch {current}, newer than "
                f"this writer's epoch {epoch}; a newer writer took over, this one is fenced"
            )


def check_leader_epochs(table: TopicTable, view: LogView, leader_epochs: Mapping[int, int]) -> None:
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
    if producer_id is not None and sequence is not None and views is not None:
        raise PolicyError("a light producer's idempotent append needs a snapshot (its duplicates are in the history)")
    options = WriteOptions(
        leader_epochs,
        producer_id,
        sequence,
        log_append_time,
        compression,
        segment_bytes,
        fsync,
        stage_roots,
        hard_links,
        kafka_producers,
    )
    for attempt in range(MAX_COMMIT_ATTEMPTS):
        view = views() if views is not None else None
        if view is None:
            dt = table.snapshot()
            view = SnapshotView(table, dt)
        pending = dict(batches)
        previous: dict[int, int] = {}
        # A conflict may hide a commit of ours that landed: from the 2nd attempt on, always look.
        if producer_id is not None and sequence is not None and (check_duplicate or attempt > 0):
            done = [p for p in batches if at_least(table.producer_sequence(dt, producer_id, p), sequence)]
            if done:
                found = _previous_offsets(table, dt, producer_id, sequence)
                previous = {p: found.get(p, -1) for p in done}
                pending = {p: b for p, b in batches.items() if p not in done}
                if not pending:
                    return AppendResult(previous, 0, duplicate=True)
        prepared = prepare_append(table, view, epochs, pending, options)
        try:
            result = prepared.commit(view, fsync)
        except CommitConflict:
            prepared.discard()
            continue
        except BaseException as exc:
            prepared.discard()
            if isinstance(exc, OSError):
                raise prepared.storage_error(exc) from exc
            raise
        return AppendResult({**previous, **result.base_offsets}, result.log_append_time_ms, duplicate=bool(previous))
    raise StorageError(
        f"Append to {table.topic} partitions {sorted(batches)} gave up after {MAX_COMMIT_ATTEMPTS} "
        "conflicting commits; is another writer ignoring the write lease?"
    )


@dataclass
class PreparedAppend:
    """Segments written for one append and the commit that makes them part of the log.

    Built against a view of the log (:func:`prepare_append`) and committed against the log
    as it is then: a leader builds its next round while the previous one is made durable,
    against a :class:`ProjectedView`, and :meth:`check` refuses the commit when the log is
    not the one the segments' offsets continue.
    """

    table: TopicTable
    epochs: Mapping[int, int]
    leader_epochs: Mapping[int, int] | None
    base_offsets: dict[int, int]
    segments: list[SegmentFile]
    transactions: dict[str, int]
    metadata: dict[str, str]
    append_ms: int

    def check(self, view: LogView) -> None:
        """Fail unless ``view`` is the log these segments continue: fences and leader epochs
        not newer than ours (:class:`FencedError`, :class:`NotLeaderError`), and every
        partition's log end where its segments start (else :class:`CommitConflict`)."""
        check_fences(self.table, view, {p: self.epochs[p] for p in self.base_offsets})
        if self.leader_epochs is not None:
            check_leader_epochs(self.table, view, {p: self.leader_epochs[p] for p in self.base_offsets})
        moved = {p: (o, view.log_end(p)) for p, o in self.base_offsets.items() if view.log_end(p) != o}
        if moved:
            raise CommitConflict(
                f"{self.table.topic}: the log moved under a prepared append (partition -> (its base offset, log end)) "
                f"{moved}"
            )

    @property
    def log_ends(self) -> dict[int, int]:
        """partition -> the log end once committed."""
        return {p: self.transactions[end_app_id(p)] for p in self.base_offsets}

    def make_durable(self) -> None:
        """fsync the segment files and their directories (before a commit that names them;
        a store's acknowledged PUT is durable already)."""
        paths = [path for seg in self.segments if (path := self.table.storage.local_path(seg.path)) is not None]
        for path in paths:
            fsync_path(path)
        for directory in sorted({os.path.dirname(path) for path in paths}):
            fsync_path(directory)

    def commit(self, view: LogView, fsync: bool) -> AppendResult:
        view.commit(self.segments, self.transactions, self.metadata, fsync)
        return AppendResult(dict(self.base_offsets), self.append_ms)

    def discard(self) -> None:
        _discard(self.table, self.segments)

    def storage_error(self, exc: OSError) -> StorageError:
        return _storage_error(self.table, self.base_offsets, exc)


class ProjectedView:
    """The log as ``base`` shows it once a commit of ``transactions`` (app id -> version) has
    landed on it: what a round built behind an uncommitted one continues from. Read only."""

    def __init__(self, base: LogView, transactions: Mapping[str, int]) -> None:
        self.base, self.transactions = base, transactions

    def fence_epoch(self, partition: int) -> int:
        return max(self.base.fence_epoch(partition), self.transactions.get(fence_app_id(partition), 0))

    def fenced_leader_epoch(self, partition: int) -> int:
        ours = max(
            self.transactions.get(leader_app_id(partition), 0), self.transactions.get(leader_fence_app_id(partition), 0)
        )
        return max(self.base.fenced_leader_epoch(partition), ours)

    def log_end(self, partition: int) -> int:
        return self.transactions.get(end_app_id(partition), self.base.log_end(partition))

    def commit(
        self, segments: list[SegmentFile], transactions: dict[str, int], metadata: dict[str, str], fsync: bool
    ) -> None:
        raise PolicyError("a projected view of the log is not committed to; commit against the log itself")


@dataclass(frozen=True)
class WriteOptions:
    """How an append writes: see :func:`append` for each."""

    leader_epochs: Mapping[int, int] | None = None
    producer_id: str | None = None
    sequence: int | None = None
    log_append_time: bool = False
    compression: str = "snappy"
    segment_bytes: int = 1 << 30
    fsync: bool = False
    stage_roots: Sequence[str] = ()
    hard_links: bool = True
    kafka_producers: KafkaProducerBatches | None = None


def prepare_append(
    table: TopicTable, view: LogView, epochs: Mapping[int, int], pending: Mapping[int, pa.Table], options: WriteOptions
) -> PreparedAppend:
    """Steps 2 and 3 of the protocol against ``view``: check fences and leader epochs, write
    each partition's segments from its log end, and make the commit's app transactions.
    Nothing is left behind when it raises."""
    leader_epochs, producer_id, sequence = options.leader_epochs, options.producer_id, options.sequence
    log_append_time, kafka_producers = options.log_append_time, options.kafka_producers
    check_fences(table, view, {p: epochs[p] for p in pending})
    if leader_epochs is not None:
        check_leader_epochs(table, view, {p: leader_epochs[p] for p in pending})
    idempotent = producer_id is not None and sequence is not None
    append_ms = clock.now_ms()
    base_offsets = {p: view.log_end(p) for p in pending}
    file_metadata = {PRODUCER_KEY: str(producer_id), SEQUENCE_KEY: str(sequence)} if idempotent else None
    writes: list[Callable[[], SegmentFile]] = []
    for partition, records in sorted(pending.items()):
        if log_append_time:
            records = with_append_time(records, append_ms)
        next_offset = base_offsets[partition]
        piece_metadata = file_metadata
        if kafka_producers is not None and kafka_producers.batches.get(partition):
            listed = [[*b[:4], next_offset + b[4]] for b in kafka_producers.batches[partition]]
            piece_metadata = {**(file_metadata or {}), KAFKA_BATCHES_KEY: json.dumps(listed)}
        for piece in split_for_size(records, options.segment_bytes):
            writes.append(
                functools.partial(
                    write_segment,
                    table.storage,
                    partition,
                    next_offset,
                    piece,
                    options.compression,
                    options.fsync,
                    metadata=piece_metadata,
                    stage_roots=options.stage_roots,
                    hard_links=options.hard_links,
                )
            )
            next_offset += piece.num_rows
    segments = _write_segments(table, pending, writes)
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
    return PreparedAppend(table, epochs, leader_epochs, base_offsets, segments, versions, metadata, append_ms)


def _write_segments(
    table: TopicTable, pending: Mapping[int, pa.Table], writes: Sequence[Callable[[], SegmentFile]]
) -> list[SegmentFile]:
    """Run ``writes``: in order on a disk; at once on a store, where each is a PUT's round
    trip (a round of many partitions then waits for about one PUT, not one per partition).
    When one fails, the files written are deleted and its error raised."""
    segments: list[SegmentFile] = []
    try:
        if table.storage.is_object_store:
            outcomes = in_parallel(writes)
            segments = [o for o in outcomes if isinstance(o, SegmentFile)]
            failure = next((o for o in outcomes if isinstance(o, Exception)), None)
            if failure is not None:
                raise failure
        else:
            for write in writes:
                segments.append(write())
    except BaseException as exc:
        _discard(table, segments)
        if isinstance(exc, OSError):
            raise _storage_error(table, pending, exc) from exc
        raise
    return segments


def _storage_error(table: TopicTable, partitions: Iterable[int], exc: OSError) -> StorageError:
    # The table's directory went away under the append (the topic was deleted) or the disk
    # failed: a StorageError naming where, not a bare OS error.
    return StorageError(
        f"Cannot append to {table.topic} partitions {sorted(partitions)} at {table.root}: {exc}; was the topic deleted?"
    )


def with_append_time(records: pa.Table, append_ms: int) -> pa.Table:
    """LogAppendTime topics: every record gets the broker's append time, timestampType 1."""
    ts = pa.array([append_ms * 1000] * records.num_rows, type=records.schema.field("timestamp").type)
    kinds = pa.array([1] * records.num_rows, type=pa.int32())
    records = records.set_column(records.schema.get_field_index("timestamp"), "timestamp", ts)
    return records.set_column(records.schema.get_field_index("timestampType"), "timestampType", kinds)


def _discard(table: TopicTable, segments: list[SegmentFile]) -> None:
    discard_segments(table.storage, segments)


def at_least(stored: int | None, version: int) -> bool:
    return stored is not None and stored >= version
