"""The commit of a Spark job's produce (DESIGN §6): segments written by tasks at reserved offsets.

A job reserves each partition's offsets from its log end under the write lease, its tasks
write segments there, and the driver commits them all in one Delta commit, checking they
tile the reservation and that nobody appended meanwhile.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from deltalake import DeltaTable

from sparklog.errors import FencedError, StorageError
from sparklog.log.append import MAX_COMMIT_ATTEMPTS, SnapshotView, at_least, check_fences, check_leader_epochs
from sparklog.log.segment import SegmentFile
from sparklog.log.table import CommitConflict, TopicTable, end_app_id, fence_app_id, leader_app_id, leader_fence_app_id

__all__ = ["commit_reserved"]


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
    ambiguous: StorageError | None = None
    for attempt in range(MAX_COMMIT_ATTEMPTS):
        dt = table.snapshot()
        if attempt and _landed(table, dt, segments):
            # Our own commit is in the log: a create retried after its answer was lost came
            # back refused (or failed), yet it had landed. Failing now would make a re-run
            # store the records twice.
            return ranges
        if ambiguous is not None:
            raise ambiguous
        if any(at_least(table.app_version(dt, app_id), version) for app_id, version in extra.items()):
            return None
        check_fences(table, SnapshotView(table, dt), epochs)
        if leader_epochs is not None:
            check_leader_epochs(table, SnapshotView(table, dt), leader_epochs)
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
        except StorageError as exc:
            ambiguous = exc  # the commit may have landed all the same: look before failing
    raise StorageError(f"Spark produce to {table.topic}: commit kept conflicting; nothing committed")


def _landed(table: TopicTable, dt: DeltaTable, segments: list[SegmentFile]) -> bool:
    """Whether every one of ``segments`` is live in ``dt``: their names are unique to this
    job's tasks, so only our own commit can have added them."""
    if not segments:
        return False
    live = {entry.path for entry in table.files(dt, {seg.partition for seg in segments})}
    return all(seg.path in live for seg in segments)
