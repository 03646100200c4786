"""Follower fetch on real Delta tables (log layer only): copies are exact, truncation keeps a
prefix, producer sequences and log-start travel with the records, stale leader epochs are
fenced on the follower."""

from __future__ import annotations

import filecmp
from pathlib import Path

import pyarrow as pa
import pytest

from sparklog.errors import NotLeaderError
from sparklog.log.append import AppendResult, append
from sparklog.log.reader import read_ranges
from sparklog.log.replica_fetch import FollowerPosition, copy_from_leader, follower_position, truncate
from sparklog.log.table import TopicTable
from sparklog.model.records import records_to_arrow

TOPIC = "t"


def tables(tmp_path: Path) -> tuple[TopicTable, TopicTable]:
    leader, follower = TopicTable(str(tmp_path / "a"), TOPIC), TopicTable(str(tmp_path / "b"), TOPIC)
    for table in (leader, follower):
        table.create("topic-id", 600_000)
    return leader, follower


def batch(values: list[str]) -> pa.Table:
    n = len(values)
    return records_to_arrow(
        [None] * n, [v.encode() for v in values], [1_700_000_000_000 + i for i in range(n)], [None] * n
    )


def produce(
    table: TopicTable,
    partition: int,
    values: list[str],
    *,
    leader_epoch: int = 0,
    producer: tuple[str, int] | None = None,
) -> AppendResult:
    return append(
        table,
        {partition: 1},
        {partition: batch(values)},
        leader_epochs={partition: leader_epoch},
        producer_id=producer[0] if producer else None,
        sequence=producer[1] if producer else None,
    )


def records(table: TopicTable, partition: int) -> list[tuple[int, bytes]]:
    dt = table.snapshot()
    got = read_ranges(table, dt, {partition: (0, table.log_end(dt, partition))})
    return list(zip(got.column("offset").to_pylist(), got.column("value").to_pylist(), strict=False))


def test_copy_is_exact_byte_for_byte_and_incremental(tmp_path: Path) -> None:
    leader, follower = tables(tmp_path)
    produce(leader, 0, ["a", "b", "c"])
    produce(leader, 1, ["x"])
    first = copy_from_leader(leader, follower, 0, leader_epoch=0)
    assert (first.files, first.records, first.log_end, first.leader_log_end) == (1, 3, 3, 3)
    assert records(follower, 0) == records(leader, 0) and records(follower, 1) == [], "only the partition asked for"
    [lfile], [ffile] = leader.files(leader.snapshot(), {0}), follower.files(follower.snapshot(), {0})
    assert filecmp.cmp(leader.full_path(lfile.path), follower.full_path(ffile.path), shallow=False)
    assert (ffile.base_offset, ffile.last_offset, ffile.num_records) == (0, 2, 3)

    produce(leader, 0, ["d", "e"])
    again = copy_from_leader(leader, follower, 0, leader_epoch=0)
    assert (again.files, again.records, again.log_end) == (1, 2, 5)
    assert records(follower, 0) == records(leader, 0)
    idle = copy_from_leader(leader, follower, 0, leader_epoch=0)
    assert idle.files == 0 and follower_position(follower, 0).log_end == 5


def test_producer_sequences_and_log_start_are_copied(tmp_path: Path) -> None:
    leader, follower = tables(tmp_path)
    produce(leader, 0, ["a", "b"], producer=("p1", 1))
    produce(leader, 0, ["c", "d"], producer=("p1", 2))
    produce(leader, 0, ["e"])
    copy_from_leader(leader, follower, 0, leader_epoch=0)
    assert follower.producer_sequence(follower.snapshot(), "p1", 0) == 2
    # The follower, once leader, recognises the producer's retry of sequence 2 as a duplicate.
    retry = produce(follower, 0, ["c", "d"], producer=("p1", 2))
    assert retry.duplicate and follower.log_end(follower.snapshot(), 0) == 5
    assert retry.base_offsets == {0: 2}, "the retry learns where the copied batch is"

    files = leader.files(leader.snapshot(), {0})
    assert leader.advance_log_starts({0: 2}, [files[0]], "DELETE RECORDS")
    moved = copy_from_leader(leader, follower, 0, leader_epoch=0)
    assert moved.log_start == 2 and follower.log_start(follower.snapshot(), 0) == 2
    assert records(follower, 0) == records(leader, 0) == [(2, b"c"), (3, b"d"), (4, b"e")]


def test_truncate_keeps_a_prefix_and_records_the_new_epoch(tmp_path: Path) -> None:
    leader, follower = tables(tmp_path)
    produce(leader, 0, ["a", "b", "c"])
    produce(leader, 0, ["d", "e"])
    copy_from_leader(leader, follower, 0, leader_epoch=0)
    assert truncate(follower, 0, 4, leader_epoch=1), "the straddling file keeps its prefix"
    assert records(follower, 0) == [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"d")]
    assert follower_position(follower, 0) == FollowerPosition(4, 1)
    assert not truncate(follower, 0, 10, leader_epoch=2), "nothing above the log end: only the epoch is recorded"
    assert follower_position(follower, 0) == FollowerPosition(4, 2)
    assert truncate(follower, 0, 3, leader_epoch=2) and records(follower, 0) == records(leader, 0)[:3]
    tiles = sorted((f.base_offset, f.last_offset) for f in follower.files(follower.snapshot(), {0}))
    assert tiles == [(0, 2)], tiles


def test_diverged_follower_reconciles_to_the_new_leader(tmp_path: Path) -> None:
    """The old leader (now follower) holds records the new leader never got: after truncating
    to where the new epoch started and copying, both replicas hold the same records."""
    old, new = tables(tmp_path)
    produce(old, 0, ["a", "b"])
    copy_from_leader(old, new, 0, leader_epoch=0)
    produce(old, 0, ["lost-1", "lost-2"])  # never copied: the old leader dies here
    produce(new, 0, ["c", "d", "e"], leader_epoch=1)  # the new leader's epoch 1 starts at offset 2
    truncate(old, 0, 2, leader_epoch=1)
    copy_from_leader(new, old, 0, leader_epoch=1)
    assert records(old, 0) == records(new, 0) == [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"d"), (4, b"e")]


def test_writer_of_an_older_leader_epoch_is_fenced_on_the_follower(tmp_path: Path) -> None:
    leader, follower = tables(tmp_path)
    produce(leader, 0, ["a"], leader_epoch=3)
    copy_from_leader(leader, follower, 0, leader_epoch=3)
    with pytest.raises(NotLeaderError, match="leader epoch 3, newer than this writer's 2"):
        produce(follower, 0, ["zombie"], leader_epoch=2)
    assert records(follower, 0) == [(0, b"a")]


def test_a_late_epoch_marker_never_lowers_a_newer_fence(tmp_path: Path) -> None:
    """A controller deposed mid-election commits its markers of epoch 4 after its successor
    fenced the replica at 5: the lineage may follow, the fence must stay at 5."""
    replica, _ = tables(tmp_path)
    produce(replica, 0, ["a"], leader_epoch=3)
    replica.commit_leader_epoch(0, 5, lineage=False)
    replica.commit_leader_epoch(0, 4, lineage=True)
    dt = replica.snapshot()
    assert (replica.leader_epoch(dt, 0), replica.fenced_leader_epoch(dt, 0)) == (4, 5)
    with pytest.raises(NotLeaderError, match="leader epoch 5, newer than this writer's 4"):
        produce(replica, 0, ["zombie"], leader_epoch=4)
    assert records(replica, 0) == [(0, b"a")]


def test_staged_files_are_committed_in_place_and_stale_ones_copied_again(tmp_path: Path) -> None:
    """An acks=all producer stages its new files in the followers' dirs under the leader's
    name; the fetch commits a fresh staged file as is, and copies over an old one."""
    import os

    leader, follower = tables(tmp_path)
    result = append(
        leader,
        {0: 1},
        {0: batch(["a", "b"])},
        leader_epochs={0: 0},
        stage_roots=[follower.root],
    )
    [entry] = leader.files(leader.snapshot(), {0})
    staged = follower.full_path(entry.path)
    assert result.base_offsets == {0: 0} and os.path.exists(staged), "staged under the leader's relative path"
    inode = os.stat(staged).st_ino
    assert copy_from_leader(leader, follower, 0, leader_epoch=0).files == 1
    assert os.stat(staged).st_ino == inode, "the staged file was committed in place, not copied"
    assert records(follower, 0) == records(leader, 0)

    append(leader, {0: 1}, {0: batch(["c"])}, leader_epochs={0: 0}, stage_roots=[follower.root])
    newest = max(leader.files(leader.snapshot(), {0}), key=lambda f: f.base_offset)
    source, old = leader.full_path(newest.path), follower.full_path(newest.path)
    assert os.stat(old).st_ino == os.stat(source).st_ino, "on one filesystem a staged file is a hard link"
    # A stale same-named file (e.g. of a replica removed and assigned back): other bytes, old.
    os.unlink(old)
    with open(old, "wb") as handle:
        handle.write(b"x" * newest.size_bytes)
    os.utime(old, (0, 0))
    copy_from_leader(leader, follower, 0, leader_epoch=0)
    assert os.stat(old).st_ino == os.stat(source).st_ino and records(follower, 0) == records(leader, 0)


def test_without_hard_links_replicas_get_their_own_copies(tmp_path: Path) -> None:
    import os

    leader, follower = tables(tmp_path)
    append(leader, {0: 1}, {0: batch(["a"])}, leader_epochs={0: 0}, stage_roots=[follower.root], hard_links=False)
    append(leader, {0: 1}, {0: batch(["b"])}, leader_epochs={0: 0})  # not staged: the fetch copies it
    assert copy_from_leader(leader, follower, 0, leader_epoch=0, hard_links=False).files == 2
    for entry in leader.files(leader.snapshot(), {0}):
        ours, theirs = follower.full_path(entry.path), leader.full_path(entry.path)
        assert os.stat(ours).st_ino != os.stat(theirs).st_ino, f"{entry.path} shares the leader's inode"
        with open(ours, "rb") as a, open(theirs, "rb") as b:
            assert a.read() == b.read()
    assert records(follower, 0) == records(leader, 0)
