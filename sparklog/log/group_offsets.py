"""Committed group offsets in the ``__consumer_offsets`` table (the Delta side of DESIGN §8).

An offset commit of group ``g`` is one Delta commit to partition ``p(g)`` of the internal
topic holding:

* one record per (topic, partition): key ``{"group","topic","partition"}`` (JSON), value
  ``{"offset","metadata","generation","member_id","commit_timestamp"}`` (JSON; ``null`` =
  tombstone after ``delete-offsets``), so the table *is* the offsets log, readable by SQL;
* application transactions, so the hot reads are O(1) snapshot lookups:

  - ``sparklog.offset/<g>/<topic>/<p>`` version = committed offset (-1 = deleted);
  - ``sparklog.group/<g>`` version = the newest generation of ``g`` seen in the log.

Invariants: every commit of ``g`` touches ``sparklog.group/<g>``, so two commits of one
group prepared on the same snapshot never both land (delta-rs fails the second), which
makes the check below atomic with the commit: a commit carrying a generation older than
``sparklog.group/<g>`` raises :class:`IllegalGenerationError`. The group leader commits a
*generation marker* (an empty commit raising ``sparklog.group/<g>``) before a new generation
goes live, which fences commits of the previous generation. The offset itself is not
checked against the stored one: as in Kafka, a commit stores what the member commits, a
lower offset too (seek back and commit); ``sparklog.offset/...`` is the newest commit's
value, not a maximum (a later ``txn`` action of an app id replaces an earlier one).

The partition is compacted as it is written: a commit replaces the partition's live file
by one holding the newest record of every key (offsets preserved, gaps allowed), so live
files, checkpoints and commit latency stay bounded. No write lease is taken: offsets of the internal topic stay contiguous because every
commit to ``p`` also touches ``sparklog.end.<p>``.

Deleted topics (DESIGN §8): deleting a topic tombstones every group's offsets of it
(:func:`delete_topic_offsets`) and leaves ``sparklog.deletedtopic/<topic>`` = the
*incarnation* of the deleted topic (the zxid that created its znode) in the table. A commit
carries the incarnation of each topic it names, as its committer looked it up, and is refused
for a topic whose incarnation is at or below the marker in the snapshot it commits on
(:func:`refused_partitions`). The deletion touches every partition's ``sparklog.end.<p>``, so
a commit prepared before it conflicts and is checked again: an offset of a deleted topic is
either tombstoned by the deletion or never stored, however stale the committer's metadata.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from sparklog import clock
from sparklog.errors import IllegalGenerationError, StorageError, UnknownTopicCommitError
from sparklog.log.append import MAX_COMMIT_ATTEMPTS
from sparklog.log.plans import SegmentLike
from sparklog.log.reader import read_files
from sparklog.log.segment import SegmentFile, discarded_unless_committed, write_segment
from sparklog.log.table import CommitConflict, TopicTable, end_app_id
from sparklog.model.records import records_to_arrow
from sparklog.model.schema import FILE_SCHEMA
from sparklog.model.topic import TopicPartition
from sparklog.retries import DELTA_COMMIT

__all__ = [
    "GROUP_APP_ID_PREFIXES",
    "NO_GENERATION",
    "OffsetCommit",
    "commit_generation",
    "commit_offsets",
    "committed_offsets",
    "delete_topic_offsets",
    "deleted_topic_app_id",
    "group_fence_app_id",
    "group_generation",
    "group_offset_app_id",
    "offset_key",
    "offset_records",
    "offset_value",
    "refused_partitions",
    "rows_to_arrow",
    "unknown_topic_error",
]

NO_GENERATION = -1  # commits from outside any generation (admin, standalone consumers)

_FENCE_PREFIX = "sparklog.group/"
_OFFSET_PREFIX = "sparklog.offset/"
_DELETED_PREFIX = "sparklog.deletedtopic/"
# Every app id a group's offsets are read from (follower fetch copies them: replica_fetch.py).
GROUP_APP_ID_PREFIXES = (_FENCE_PREFIX, _OFFSET_PREFIX, _DELETED_PREFIX)


def group_fence_app_id(group_id: str) -> str:
    return f"{_FENCE_PREFIX}{group_id}"


def group_offset_app_id(group_id: str, topic: str, partition: int) -> str:
    return f"{_OFFSET_PREFIX}{group_id}/{topic}/{partition}"


def deleted_topic_app_id(topic: str) -> str:
    """Version: the newest incarnation of ``topic`` deleted (commits naming it or an older one fail)."""
    return f"{_DELETED_PREFIX}{topic}"


@dataclass(frozen=True)
class OffsetCommit:
    """What one (topic, partition) commit stores; ``offset`` None = delete (tombstone)."""

    offset: int | None
    metadata: str = ""
    leader_epoch: int = -1  # the committed leader epoch a Kafka client sent (-1: none)


def offset_key(group_id: str, topic: str, partition: int) -> bytes:
    """The record key of a group's committed offset of ``topic``-``partition``."""
    return json.dumps({"group": group_id, "partition": partition, "topic": topic}, sort_keys=True).encode()


def refused_partitions(
    offsets: Mapping[TopicPartition, OffsetCommit],
    incarnations: Mapping[str, int] | None,
    app_version: Callable[[str], int | None],
) -> set[TopicPartition]:
    """The partitions of ``offsets`` whose topic is not the one that exists: absent from
    ``incarnations`` (topic -> incarnation the committer looked up; None: no check), or at or
    below the deletion marker ``app_version`` reads from the snapshot being committed on.
    Tombstones are never refused."""
    if incarnations is None:
        return set()
    refused = set()
    for (topic, partition), commit in offsets.items():
        if commit.offset is None:
            continue
        incarnation = incarnations.get(topic)
        deleted = app_version(deleted_topic_app_id(topic))
        if incarnation is None or (deleted is not None and deleted >= incarnation):
            refused.add((topic, partition))
    return refused


def unknown_topic_error(group_id: str, refused: Iterable[TopicPartition]) -> UnknownTopicCommitError:
    """The error of a commit whose ``refused`` partitions name topics that do not exist."""
    names = ", ".join(f"{t}-{p}" for t, p in sorted(refused))
    return UnknownTopicCommitError(
        f"Offset commit of group {group_id} refused for {names}: the topic does not exist (it was deleted, "
        "and its offsets were removed from every group; a topic created since under the name is a new topic). "
        "Look the topic up again and commit positions in the topic that exists now",
        frozenset(refused),
    )


def commit_offsets(
    table: TopicTable,
    log_partition: int,
    group_id: str,
    offsets: Mapping[TopicPartition, OffsetCommit],
    *,
    generation: int = NO_GENERATION,
    member_id: str = "",
    reset: bool = False,
    incarnations: Mapping[str, int] | None = None,
) -> set[TopicPartition]:
    """Store ``offsets`` of ``group_id`` in one Delta commit to ``log_partition``; returns the
    partitions refused because their topic was deleted (:func:`refused_partitions`), the others
    are stored (nothing is committed when every one is refused).

    ``generation`` is checked against the log's group fence (``NO_GENERATION`` skips the
    check: the caller has verified the group is inactive). Any offset is stored, below the
    committed one too; ``reset`` only names the commit an ``OFFSET RESET`` in the log.

    The partition is compacted as it is written (Kafka compacts this topic too): the
    commit replaces the partition's live file(s) by one file holding the newest record of
    every other key (with its original offset) followed by the new records, so live files
    and commit cost stay bounded however many commits a group makes.
    """
    for _attempt in range(MAX_COMMIT_ATTEMPTS):
        dt = table.snapshot()
        fence = table.app_version(dt, group_fence_app_id(group_id))
        fence = -1 if fence is None else fence
        if generation != NO_GENERATION and fence > generation:
            raise IllegalGenerationError(
                f"Offset commit of group {group_id} rejected: it carries generation {generation}, but generation "
                f"{fence} is already live; the member must rejoin the group (poll) and commit again"
            )
        refused = refused_partitions(offsets, incarnations, functools.partial(table.app_version, dt))
        if offsets and len(refused) == len(offsets):
            return refused
        live = table.files(dt, {log_partition})
        retained = latest_per_key(read_files(table, live))
        keys = {offset_key(group_id, t, p): tp for tp in offsets if tp not in refused for t, p in [tp]}
        transactions: dict[str, int] = {group_fence_app_id(group_id): max(fence, generation)}
        for topic, partition in keys.values():
            commit = offsets[(topic, partition)]
            transactions[group_offset_app_id(group_id, topic, partition)] = (
                -1 if commit.offset is None else commit.offset
            )
        now_ms = clock.now_ms()
        ordered = sorted(keys, key=lambda k: keys[k])
        values = [offset_value(offsets[keys[k]], generation, member_id, now_ms) for k in ordered]
        base = table.log_end(dt, log_partition)
        kept = [row for key, row in sorted(retained.items(), key=lambda kv: kv[1]["offset"]) if key not in keys]
        fresh = records_to_arrow(ordered, values, [now_ms] * len(ordered))
        records = pa.concat_tables([rows_to_arrow(kept).cast(fresh.schema), fresh])
        positions = pa.array([row["offset"] for row in kept] + list(range(base, base + len(ordered))), pa.int64())
        segments: list[SegmentFile] = []
        try:
            with discarded_unless_committed(table.storage, segments):
                if records.num_rows:
                    segments.append(write_segment(table.storage, log_partition, base, records, offsets=positions))
                transactions[end_app_id(log_partition)] = base + len(ordered)
                operation = "OFFSET RESET" if reset else "OFFSET COMMIT"
                metadata = {"sparklog.operation": operation, "sparklog.group": group_id}
                table.commit(dt, segments, transactions, metadata, removes=live)
                return refused
        except CommitConflict:
            continue
    raise StorageError(
        f"Offset commit of group {group_id} gave up after {MAX_COMMIT_ATTEMPTS} conflicting commits to "
        f"{table.topic}-{log_partition}"
    )


def delete_topic_offsets(
    table: TopicTable, log_partitions: Sequence[int], topic: str, incarnation: int
) -> list[tuple[str, int]]:
    """Kafka's clean-up of a deleted topic's offsets in the offsets partitions ``table`` leads:
    one Delta commit tombstoning every group's committed offset of ``topic`` in
    ``log_partitions`` (a null record and offset -1 each), raising the deletion marker to
    ``incarnation`` and touching the log end of every one of ``log_partitions`` — also where
    nothing is tombstoned — so any commit prepared before it conflicts and meets the marker
    when it tries again. Returns the (group, partition) offsets tombstoned."""
    marker = deleted_topic_app_id(topic)
    for _attempt in DELTA_COMMIT:
        dt = table.snapshot()
        transactions = {marker: max(incarnation, table.app_version(dt, marker) or 0)}
        by_partition: dict[int, list[SegmentLike]] = {p: [] for p in log_partitions}
        for entry in table.files(dt, set(log_partitions)):
            by_partition[entry.partition].append(entry)
        now_ms = clock.now_ms()
        tombstoned: list[tuple[str, int]] = []
        segments: list[SegmentFile] = []
        try:
            with discarded_unless_committed(table.storage, segments):
                for partition, files in sorted(by_partition.items()):
                    doomed = sorted(
                        key
                        for key, row in latest_per_key(read_files(table, files)).items()
                        if row["value"] is not None and json.loads(key)["topic"] == topic
                    )
                    for key in doomed:
                        parsed = json.loads(key)
                        transactions[group_offset_app_id(parsed["group"], topic, int(parsed["partition"]))] = -1
                        tombstoned.append((str(parsed["group"]), int(parsed["partition"])))
                    base = table.log_end(dt, partition)
                    if doomed:
                        tombstones = records_to_arrow(doomed, [None] * len(doomed), [now_ms] * len(doomed))
                        segments.append(write_segment(table.storage, partition, base, tombstones))
                    transactions[end_app_id(partition)] = base + len(doomed)
                table.commit(
                    dt, segments, transactions, {"sparklog.operation": "DELETE TOPIC OFFSETS", "sparklog.topic": topic}
                )
                return sorted(tombstoned)
        except CommitConflict:
            continue
    raise DELTA_COMMIT.exhausted(
        f"Removing the offsets of deleted topic {topic} from {table.topic} at {table.root}",
        f"delete the groups' offsets of {topic} with `sparklog groups delete-offsets`",
    )


def offset_value(commit: OffsetCommit, generation: int, member_id: str, now_ms: int) -> bytes | None:
    """The record value of ``commit`` (None: a tombstone)."""
    if commit.offset is None:
        return None
    payload: dict[str, object] = {
        "offset": commit.offset,
        "metadata": commit.metadata,
        "generation": generation,
        "member_id": member_id,
        "commit_timestamp": now_ms,
    }
    if commit.leader_epoch >= 0:
        payload["leader_epoch"] = commit.leader_epoch
    return json.dumps(payload, sort_keys=True).encode()


def latest_per_key(records: pa.Table) -> dict[bytes, dict[str, Any]]:
    """The newest record (highest offset) of every key, as row dicts."""
    latest: dict[bytes, dict[str, Any]] = {}
    for row in records.to_pylist():
        current = latest.get(row["key"])
        if current is None or row["offset"] > current["offset"]:
            latest[row["key"]] = row
    return latest


def rows_to_arrow(rows: list[dict[str, Any]]) -> pa.Table:
    columns = [f.name for f in FILE_SCHEMA if f.name != "offset"]
    schema = pa.schema([FILE_SCHEMA.field(c) for c in columns])
    return pa.Table.from_pylist([{c: row[c] for c in columns} for row in rows], schema=schema)


def commit_generation(table: TopicTable, group_id: str, generation: int) -> None:
    """The generation marker: after it, commits of older generations of ``group_id`` fail."""
    for _attempt in range(MAX_COMMIT_ATTEMPTS):
        dt = table.snapshot()
        current = table.app_version(dt, group_fence_app_id(group_id))
        if current is not None and current >= generation:
            return
        try:
            table.commit(
                dt,
                [],
                {group_fence_app_id(group_id): generation},
                {"sparklog.operation": "GENERATION MARKER", "sparklog.group": group_id},
            )
            return
        except CommitConflict:
            continue
    raise StorageError(f"Could not commit generation {generation} of group {group_id}: too many conflicts")


def group_generation(table: TopicTable, group_id: str) -> int:
    fence = table.app_version(table.snapshot(), group_fence_app_id(group_id))
    return -1 if fence is None else fence


def committed_offsets(table: TopicTable, group_id: str, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
    """The committed offset of each of ``partitions`` that has one (deleted ones are left out)."""
    dt = table.snapshot()
    result = {}
    for topic, partition in partitions:
        offset = table.app_version(dt, group_offset_app_id(group_id, topic, partition))
        if offset is not None and offset >= 0:
            result[(topic, partition)] = offset
    return result


def offset_records(
    table: TopicTable, log_partition: int, group_id: str | None = None
) -> dict[tuple[str, str, int], dict[str, object] | None]:
    """Latest value per (group, topic, partition) key in ``log_partition`` (None = tombstone)."""
    dt = table.snapshot()
    latest: dict[tuple[str, str, int], dict[str, object] | None] = {}
    for key, row in latest_per_key(read_files(table, table.files(dt, {log_partition}))).items():
        parsed = json.loads(key)
        if group_id is None or parsed["group"] == group_id:
            value = row["value"]
            latest[(parsed["group"], parsed["topic"], int(parsed["partition"]))] = (
                None if value is None else json.loads(value)
            )
    return latest
