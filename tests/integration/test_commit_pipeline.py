"""The leader's pipelined commit rounds (sparklog/broker/leader_appender.py): the next round
is built while the one before is committed, and a round whose log moved under it is built
again, after the round before it. Real ZooKeeper, real Delta tables, record batches built by
kafka-python; the committer is held by handing its thread a call that waits on a gate, so
what the builder does meanwhile is seen on disk, not guessed from timings."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import sparklog
from sparklog.broker.leader_appender import LeaderAppender
from sparklog.broker.partition import LeaderPartitions
from sparklog.broker.pending_append import PendingAppend
from sparklog.log.append import append
from sparklog.log.table import TopicTable
from tests.helpers import segment_batch, wait_until
from tests.integration.conftest import LEADER_TOPIC as TOPIC
from tests.integration.test_leader_partition import WAIT_S, appended, batch


@contextmanager
def holding_the_committer(appender: LeaderAppender, topic: str) -> Iterator[None]:
    """The topic's committer thread waits on a gate until the block ends: rounds handed to it
    meanwhile queue behind the gate, built but not committed."""
    gate = threading.Event()
    holding = threading.Event()

    def hold() -> None:
        holding.set()
        gate.wait(WAIT_S)

    appender._committers[topic].submit(hold)  # the stage exists once the topic had a round
    holding.wait(WAIT_S)
    try:
        yield
    finally:
        gate.set()


def queued(leader: LeaderPartitions, partition: int, data: bytes) -> list[PendingAppend]:
    items = leader.get(TOPIC, partition).prepare_append(data, "all", 30_000)
    leader.appender.append(TOPIC, items)
    return items


def answered(items: list[PendingAppend]) -> list[int]:
    for item in items:
        assert item.wait_done(WAIT_S), "the commit round did not answer"
        assert item.error is None, item.error
    return [i.base_offset for i in items]


def files_on_disk(table: TopicTable, partition: int) -> list[str]:
    """Segment files of ``partition`` in the table's directory, by base offset."""
    directory = os.path.join(table.root, f"partition={partition}")
    return sorted(f"partition={partition}/{name}" for name in os.listdir(directory) if name.endswith(".parquet"))


def base_offsets(files: list[str]) -> list[int]:
    return [int(os.path.basename(f).split("-")[0]) for f in files]


def committed_values(cluster: sparklog.Cluster, partition: int) -> list[tuple[int, bytes]]:
    rows = cluster.read(TOPIC, partition).sort_by("offset")
    return list(zip(rows.column("offset").to_pylist(), rows.column("value").to_pylist(), strict=True))


@dataclass
class HeldRounds:
    """Two rounds of partition 0 built behind a held committer: ``first`` (a1, a2) handed to
    it, ``second`` (b1) built after it; ``before``: the segment files until then."""

    table: TopicTable
    version: int
    before: list[str]
    first: list[PendingAppend]
    second: list[PendingAppend]


@contextmanager
def two_rounds_held(cluster: sparklog.Cluster, leader: LeaderPartitions) -> Iterator[HeldRounds]:
    table = cluster.replicas.replica_table(TOPIC, cluster.replicas.config.broker_id)
    appended(leader, 0, batch([b"first"]))
    version, before = table.snapshot().version(), files_on_disk(table, 0)
    with holding_the_committer(leader.appender, TOPIC):
        first = queued(leader, 0, batch([b"a1", b"a2"]))
        wait_until(lambda: len(files_on_disk(table, 0)) == len(before) + 1, "round 1's segment written")
        second = queued(leader, 0, batch([b"b1"]))
        wait_until(lambda: len(files_on_disk(table, 0)) == len(before) + 2, "round 2's segment written")
        yield HeldRounds(table, version, before, first, second)


def test_the_next_round_is_built_while_the_one_before_is_committed(
    cluster: sparklog.Cluster, leader: LeaderPartitions
) -> None:
    with two_rounds_held(cluster, leader) as held:
        # Round 2 is written from where round 1 will leave the log, before round 1 commits.
        new = [f for f in files_on_disk(held.table, 0) if f not in held.before]
        assert base_offsets(new) == [1, 3]
        assert held.table.snapshot().version() == held.version, "nothing is committed while the committer is held"
        assert not any(i.is_done for i in held.first + held.second)
    assert (answered(held.first), answered(held.second)) == ([1], [3])
    assert committed_values(cluster, 0) == [(0, b"first"), (1, b"a1"), (2, b"a2"), (3, b"b1")]
    assert held.table.snapshot().version() == held.version + 2


def test_rounds_built_on_a_log_that_moved_are_built_again_in_their_order(
    cluster: sparklog.Cluster, leader: LeaderPartitions
) -> None:
    with two_rounds_held(cluster, leader) as held:
        # A writer that ignores the lease commits at offset 1 under the broker's own epoch:
        # both rounds built behind it would land on offsets that are taken.
        table = held.table
        append(table, {0: table.fence_epoch(table.snapshot(), 0)}, {0: segment_batch([b"x"])})
    assert (answered(held.first), answered(held.second)) == ([2], [4])
    assert [i.rebuilds for i in held.first] == [1], "round 1 was refused by the committer and built again"
    assert committed_values(cluster, 0) == [(0, b"first"), (1, b"x"), (2, b"a1"), (3, b"a2"), (4, b"b1")]
    # The files written for the offsets that were taken are gone; the log's are what is left.
    assert files_on_disk(table, 0) == sorted(f.path for f in table.files(table.snapshot(), {0}))
