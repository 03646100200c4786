"""Follower fetch on Delta: truncate a follower replica's partition, copy what it lacks.

The Delta side of docs/replication.md. A follower replica of partition ``p`` is the rows
``partition = p`` of the topic's table on the follower's log dir; only its broker's fetcher
(or the replication job) writes them, in two kinds of commit:

* :func:`truncate` (reconcile after a leader change): files wholly at or above the
  truncation offset are removed, a file straddling it is replaced by its prefix, and the
  commit sets ``sparklog.end.<p>`` to the offset and ``sparklog.leader.<p>`` to the epoch the
  follower now follows. The caller computes the offset with
  :func:`sparklog.runtime.policy.truncation_offset`.
* :func:`copy_from_leader`: the leader's files holding offsets at or above the follower's
  log end, in offset order: a file wholly above is copied byte for byte (same records, same
  offsets, same stats), a straddling one sliced; the leader's log-start is copied (files
  wholly below removed, ``sparklog.start.<p>`` raised); producer sequences found in the
  copied files' metadata raise ``sparklog.producer.<id>.<p>``, so the follower deduplicates
  a producer's retry once it leads; Kafka transactions' open and aborted runs are copied
  too (``sparklog.txnopen.<p>.*``, ``sparklog.aborted.<p>.*``), and in ``__consumer_offsets``
  the leader's group offsets and generation fences (app transactions), so a follower elected
  leader answers with them. ``sparklog.leader.<p>`` is set to the followed epoch, so a zombie
  writer of an older epoch is fenced here too.

Invariants: every commit is checked against the snapshot it was planned on (max commit
retries 0): a concurrent commit (another fetcher, maintenance) fails it and the round is
redone; a follower's records are always a prefix-copy of the leader's (offsets, bytes);
nothing is read from the leader beyond its log end at the time of its snapshot.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable

from sparklog import clock
from sparklog.errors import FencedError, StorageError
from sparklog.log.append import COPIED_BATCHES_KEY
from sparklog.log.group_offsets import GROUP_APP_ID_PREFIXES
from sparklog.log.reader import read_files
from sparklog.log.segment import (
    PRODUCER_KEY,
    SEQUENCE_KEY,
    SegmentFile,
    discard_segments,
    discarded_unless_committed,
    file_compression,
    place_copy,
    write_placeholder,
    write_segment,
)
from sparklog.log.storage import fsync_path
from sparklog.log.table import (
    CommitConflict,
    FileEntry,
    TopicTable,
    end_app_id,
    leader_app_id,
    leader_fence_app_id,
    producer_app_id,
    start_app_id,
)
from sparklog.log.transactions import KAFKA_PRODUCERS_PREFIX, transaction_versions
from sparklog.log.txn_log import transaction_app_ids

__all__ = [
    "MAX_ROUNDS",
    "CopyResult",
    "FollowerPosition",
    "copy_from_leader",
    "follower_position",
    "truncate",
]

MAX_ROUNDS = 20  # re-plans after conflicting concurrent commits
_SLICE_SUFFIX = ".slice.parquet"
_STAGED_MAX_AGE_S = 10.0


@dataclass(frozen=True)
class FollowerPosition:
    log_end: int
    leader_epoch: int  # the epoch of the leader it last followed (0: none recorded)


@dataclass(frozen=True)
class CopyResult:
    partition: int
    files: int  # files added to the follower
    records: int
    bytes: int
    log_end: int  # the follower's log end after the copy
    leader_log_end: int  # the leader's log end in the snapshot copied from
    log_start: int


def follower_position(follower: TopicTable, partition: int) -> FollowerPosition:
    dt = follower.snapshot()
    return FollowerPosition(follower.log_end(dt, partition), follower.leader_epoch(dt, partition))


def truncate(follower: TopicTable, partition: int, offset: int, leader_epoch: int) -> bool:
    """Cut the follower's partition to ``[.., offset)`` and record ``leader_epoch`` (one
    commit; also when nothing is cut, so the epoch is recorded). Returns whether records
    were removed."""
    for _round in range(MAX_ROUNDS):
        dt = follower.snapshot()
        end = follower.log_end(dt, partition)
        target = min(offset, end)
        doomed = [f for f in follower.files(dt, {partition}) if f.last_offset >= target]
        written: list[SegmentFile] = []
        try:
            with discarded_unless_committed(follower.storage, written):
                for entry in doomed:
                    if entry.base_offset < target:
                        written.append(_prefix(follower, entry, target))
                transactions = {end_app_id(partition): target, **_followed(follower, dt, partition, leader_epoch)}
                metadata = {
                    "sparklog.operation": "TRUNCATE",
                    "sparklog.partition": str(partition),
                    "sparklog.offset": str(target),
                }
                follower.commit(dt, written, transactions, metadata, removes=doomed)
                return target < end
        except CommitConflict:
            continue
    raise StorageError(
        f"Truncating {follower.topic}-{partition} at {follower.root} to offset {offset} kept conflicting with other "
        "commits; is another fetcher writing this replica?"
    )


def _followed(table: TopicTable, dt: object, partition: int, leader_epoch: int) -> dict[str, int]:
    """The epoch transactions of a follower commit; refuses a fetch for an epoch older than
    one this replica was already fenced at (the caller's metadata is stale)."""
    fenced = table.fenced_leader_epoch(dt, partition)  # type: ignore[arg-type]
    if fenced > leader_epoch:
        raise FencedError(
            f"{table.topic}-{partition} at {table.root} is already at leader epoch {fenced}; a fetch for epoch "
            f"{leader_epoch} comes from stale metadata"
        )
    return {leader_app_id(partition): leader_epoch, leader_fence_app_id(partition): leader_epoch}


def _prefix(table: TopicTable, entry: FileEntry, offset: int) -> SegmentFile:
    """``entry``'s records below ``offset``, as a new file spanning ``[base, offset)``."""
    records = read_files(table, [entry])
    kept = records.filter(pc.less(records.column("offset"), offset))
    codec = file_compression(table.storage, entry.path)  # a replica keeps the leader's codec
    if kept.num_rows == 0:
        stamps = [t for t in (entry.min_timestamp_us, entry.max_timestamp_us) if t is not None]
        return write_placeholder(table.storage, entry.partition, entry.base_offset, offset - 1, stamps, codec)
    segment = write_segment(
        table.storage,
        entry.partition,
        entry.base_offset,
        kept.drop_columns(["offset"]),
        codec,
        offsets=kept.column("offset").combine_chunks(),
    )
    return replace(segment, base_offset=entry.base_offset, last_offset=offset - 1)


def copy_from_leader(
    leader: TopicTable,
    follower: TopicTable,
    partition: int,
    leader_epoch: int,
    *,
    fsync: bool = False,
    hard_links: bool = True,
) -> CopyResult:
    """Copy what the follower's partition lacks from the leader (one commit on the follower).
    Whole new files keep the leader's bytes and name (a hard link where allowed:
    :func:`~sparklog.log.segment.place_copy`)."""
    for _round in range(MAX_ROUNDS):
        fdt = follower.snapshot()
        have = follower.log_end(fdt, partition)
        ldt = leader.snapshot()
        leader_end = leader.log_end(ldt, partition)
        start_now = follower.app_version(fdt, start_app_id(partition)) or 0
        explicit_start = leader.app_version(ldt, start_app_id(partition)) or 0
        if leader_end <= have and explicit_start <= start_now and follower.leader_epoch(fdt, partition) == leader_epoch:
            # Nothing new (the usual idle round): decided from app transactions alone, without
            # building either table's file list.
            return CopyResult(partition, 0, 0, 0, have, leader_end, start_now)
        leader_start = leader.log_start(ldt, partition)
        wanted = [f for f in leader.files(ldt, {partition}) if f.last_offset >= have]
        below = (
            [f for f in follower.files(fdt, {partition}) if f.last_offset < leader_start]
            if leader_start > start_now
            else []
        )
        if not wanted and not below and follower.leader_epoch(fdt, partition) == leader_epoch:
            return CopyResult(partition, 0, 0, 0, have, leader_end, max(start_now, 0))
        copied: list[SegmentFile] = []
        try:
            sequences: dict[str, int] = {}
            batches: dict[str, int] = {}  # "<producer> <sequence>" -> base offset of the batch here
            for entry in wanted:
                segment, producer = _copy_file(leader, follower, entry, have, fsync, hard_links)
                copied.append(segment)
                if producer is not None:
                    sequences[producer[0]] = max(sequences.get(producer[0], 0), producer[1])
                    key = f"{producer[0]} {producer[1]}"
                    batches[key] = min(batches.get(key, entry.base_offset), entry.base_offset)
            new_end = max([have, *(s.last_offset + 1 for s in copied)])
            transactions = {end_app_id(partition): new_end, **_followed(follower, fdt, partition, leader_epoch)}
            transactions.update({producer_app_id(pid, partition): seq for pid, seq in sequences.items()})
            # Kafka producers' sequences (a broker's group commits mix producers in one file):
            # copied from the leader's snapshot the copied files come from.
            transactions.update(transaction_versions(ldt, KAFKA_PRODUCERS_PREFIX, f".{partition}"))
            transactions.update(_group_transactions(ldt, fdt))
            # Kafka transactions' open and aborted runs, as of the same snapshot (docs/transactions.md).
            transactions.update(transaction_app_ids(ldt, partition))
            if below:
                transactions[start_app_id(partition)] = leader_start
            metadata = {
                "sparklog.operation": "REPLICA FETCH",
                "sparklog.partition": str(partition),
                "sparklog.leader_epoch": str(leader_epoch),
            }
            if batches:  # so a producer's retry, deduplicated here once this replica leads, learns its offsets
                metadata[COPIED_BATCHES_KEY] = json.dumps(batches, sort_keys=True)
            follower.commit(fdt, copied, transactions, metadata, fsync=fsync, removes=below)
            return CopyResult(
                partition,
                len(copied),
                sum(s.num_records for s in copied),
                sum(s.size_bytes for s in copied),
                new_end,
                leader_end,
                max(leader_start if below else start_now, 0),
            )
        except CommitConflict:
            discard_segments(follower.storage, _own_names(copied))
        except FileNotFoundError:
            discard_segments(follower.storage, _own_names(copied))  # a leader file was removed and vacuumed meanwhile
        except BaseException:
            discard_segments(follower.storage, _own_names(copied))
            raise
    raise StorageError(
        f"Copying {leader.topic}-{partition} from {leader.root} to {follower.root} kept conflicting with other "
        "commits; is another fetcher writing this replica?"
    )


def _group_transactions(ldt: DeltaTable, fdt: DeltaTable) -> dict[str, int]:
    """``__consumer_offsets``: the leader's committed group offsets and generation fences
    (``sparklog.offset/...``, ``sparklog.group/...``: what every reader of a group's offsets
    asks) where the follower's differ, so a follower elected leader answers with them. App
    ids are table-wide while groups live in partitions: ids of groups of other partitions
    ride along too, never older than the records the follower copies (the leader's snapshot
    is at least as new), and the next copy from a new leader replaces them again."""
    copied = {}
    for prefix in GROUP_APP_ID_PREFIXES:
        mine = transaction_versions(fdt, prefix)
        copied.update({k: v for k, v in transaction_versions(ldt, prefix).items() if mine.get(k) != v})
    return copied


def _fresh_copy(path: str, size: int) -> bool:
    """A complete, recently staged copy (an old same-named file, e.g. of a replica removed
    and assigned back, is copied again: vacuum may be about to delete it)."""
    try:
        stat = os.stat(path)
    except FileNotFoundError:
        return False
    return stat.st_size == size and clock.now_ms() / 1000 - stat.st_mtime < _STAGED_MAX_AGE_S


def _own_names(segments: list[SegmentFile]) -> list[SegmentFile]:
    """The files of a failed copy round that are safe to delete: those under names of their
    own (slices). A whole-file copy has the leader's name, which another fetch (the
    replication job beside an agent) may have committed meanwhile: left to vacuum if not."""
    return [s for s in segments if s.path.endswith(_SLICE_SUFFIX)]


def _copy_file(
    leader: TopicTable, follower: TopicTable, entry: FileEntry, have: int, fsync: bool, hard_links: bool
) -> tuple[SegmentFile, tuple[str, int] | None]:
    """One leader file into the follower: byte for byte when wholly new, else its new part."""
    producer = _producer_of(leader.storage.source(entry.path))
    if entry.base_offset >= have:
        # Same relative path as the leader's: an acks=all producer may have staged the bytes
        # here already (write_segment's stage_roots); a partial staged file is replaced.
        size_bytes, modified_ms = _copy_whole(leader, follower, entry, fsync, hard_links)
        segment = SegmentFile(
            path=entry.path,
            partition=entry.partition,
            base_offset=entry.base_offset,
            last_offset=entry.last_offset,
            size_bytes=size_bytes,
            min_timestamp_us=entry.min_timestamp_us or 0,
            max_timestamp_us=entry.max_timestamp_us or 0,
            modification_time_ms=modified_ms,
            record_count=entry.num_records,
        )
        return segment, producer
    records = read_files(leader, [entry])
    tail = records.filter(pc.greater_equal(records.column("offset"), have))
    codec = file_compression(leader.storage, entry.path)  # a slice keeps the leader file's codec, as a whole copy does
    if tail.num_rows == 0:
        stamps = [t for t in (entry.min_timestamp_us, entry.max_timestamp_us) if t is not None]
        segment = write_placeholder(follower.storage, entry.partition, have, entry.last_offset, stamps, codec)
    else:
        segment = write_segment(
            follower.storage,
            entry.partition,
            have,
            tail.drop_columns(["offset"]),
            codec,
            fsync=fsync,
            offsets=tail.column("offset").combine_chunks(),
            suffix=_SLICE_SUFFIX,
        )
    return replace(segment, base_offset=have, last_offset=entry.last_offset), producer


def _copy_whole(
    leader: TopicTable, follower: TopicTable, entry: FileEntry, fsync: bool, hard_links: bool
) -> tuple[int, int]:
    """``entry``'s bytes under its own name in the follower: (size, modification ms)."""
    source, target = leader.storage.local_path(entry.path), follower.storage.local_path(entry.path)
    if source is None or target is None:  # a store on either side: the bytes travel through here
        data = leader.storage.read(entry.path)
        follower.storage.write(entry.path, data, fsync)
        return len(data), clock.now_ms()
    if not _fresh_copy(target, entry.size_bytes):
        place_copy(source, target, hard_links)
    if fsync:
        fsync_path(target)
    return os.path.getsize(target), _mtime_ms(target)


def _producer_of(source: str | pa.NativeFile) -> tuple[str, int] | None:
    metadata = pq.read_schema(source).metadata or {}
    producer = metadata.get(PRODUCER_KEY.encode())
    sequence = metadata.get(SEQUENCE_KEY.encode())
    if producer is None or sequence is None:
        return None
    return producer.decode(), int(sequence)


def _mtime_ms(path: str) -> int:
    return int(os.stat(path).st_mtime * 1000)
