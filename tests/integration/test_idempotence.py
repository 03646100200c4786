"""Invariant 3 (idempotent produce): a retried batch, same producer id and sequence, is stored once."""

from __future__ import annotations

import uuid

import pytest

import sparklog
from sparklog.log.append import append
from sparklog.log.table import TopicTable
from tests.fault.workers import idempotent_appends
from tests.helpers import assert_log_consistent, assert_values_unique, reaping, segment_batch, spawn_context, values_at


@pytest.fixture
def table(cluster: sparklog.Cluster) -> TopicTable:
    cluster.create_topic("idem", partitions=2)
    return cluster.replicas.leader_table("idem")


def test_same_sequence_is_stored_once(cluster: sparklog.Cluster, table: TopicTable) -> None:
    pid = uuid.uuid4().hex
    first_batch = segment_batch([b"a0", b"a1", b"a2"])
    first = append(table, {0: 1, 1: 1}, {0: first_batch, 1: segment_batch([b"b0"])}, producer_id=pid, sequence=1)
    assert not first.duplicate and first.base_offsets == {0: 0, 1: 0}
    version = table.snapshot().version()
    retry = append(table, {0: 1, 1: 1}, {0: first_batch, 1: segment_batch([b"b0"])}, producer_id=pid, sequence=1)
    assert retry.duplicate
    assert retry.base_offsets == first.base_offsets
    assert table.snapshot().version() == version, "a duplicate must not commit anything"
    records = assert_log_consistent(cluster, "idem")
    assert values_at(records, 0) == [b"a0", b"a1", b"a2"] and values_at(records, 1) == [b"b0"]


def test_higher_sequence_is_stored_and_older_is_a_duplicate(cluster: sparklog.Cluster, table: TopicTable) -> None:
    pid = uuid.uuid4().hex
    append(table, {0: 1}, {0: segment_batch([b"s1"])}, producer_id=pid, sequence=1)
    second = append(table, {0: 1}, {0: segment_batch([b"s2-0", b"s2-1"])}, producer_id=pid, sequence=2)
    assert not second.duplicate and second.base_offsets == {0: 1}
    third = append(table, {0: 1}, {0: segment_batch([b"s3"])}, producer_id=pid, sequence=3)
    assert third.base_offsets == {0: 3}
    old = append(table, {0: 1}, {0: segment_batch([b"s2-0", b"s2-1"])}, producer_id=pid, sequence=2)
    assert old.duplicate and old.base_offsets == {0: 1}
    records = assert_log_consistent(cluster, "idem")
    assert values_at(records, 0) == [b"s1", b"s2-0", b"s2-1", b"s3"]


def test_producers_do_not_share_sequences(cluster: sparklog.Cluster, table: TopicTable) -> None:
    batch = segment_batch([b"same"])
    a = append(table, {0: 1}, {0: batch}, producer_id="producer-a", sequence=1)
    b = append(table, {0: 1}, {0: batch}, producer_id="producer-b", sequence=1)
    plain = append(table, {0: 1}, {0: batch})  # no producer id: never deduplicated
    assert (a.duplicate, b.duplicate, plain.duplicate) == (False, False, False)
    assert [r.value for r in assert_log_consistent(cluster, "idem")] == [b"same"] * 3


def test_racing_processes_with_same_sequence_store_once(
    cluster: sparklog.Cluster, table: TopicTable, cluster_options: dict[str, str]
) -> None:
    ctx = spawn_context()
    rounds = 6
    barrier = ctx.Barrier(2)
    results = ctx.Queue()
    pid = uuid.uuid4().hex
    children = [
        ctx.Process(target=idempotent_appends, args=(cluster_options, "idem", pid, rounds, barrier, results))
        for _ in range(2)
    ]
    with reaping(children):
        for child in children:
            child.start()
        reports = [results.get(timeout=120) for _ in range(2 * rounds)]
        for child in children:
            child.join(30)
    errors = [r[1] for r in reports if r[0] == "error"]
    assert not errors, errors[0]
    for r in range(1, rounds + 1):
        outcomes = [(dup, offsets) for rnd, dup, offsets in reports if rnd == r]
        assert sorted(dup for dup, _ in outcomes) == [False, True], f"round {r}: {outcomes}"
        assert outcomes[0][1] == outcomes[1][1] == {0: 3 * (r - 1), 1: 3 * (r - 1)}, f"round {r}: {outcomes}"
    records = assert_log_consistent(cluster, "idem")
    assert len(records) == 2 * 3 * rounds
    assert_values_unique([rec for rec in records if rec.partition == 0])
    assert values_at(records, 0) == [b"r%d-%d" % (r, i) for r in range(1, rounds + 1) for i in range(3)]


def test_producer_retry_after_commit_is_deduplicated(cluster: sparklog.Cluster, table: TopicTable) -> None:
    """The light producer tags requests with its id and sequence: re-sending its last
    request (as a retry after a lost response would) stores nothing new."""
    producer = cluster.producer()
    producer.send("idem", b"once", partition=0).result()
    sequence = producer._sequences["idem"]  # white box: the sequence its last request used
    retry = append(table, {0: 99}, {0: segment_batch([b"once"])}, producer_id=producer.producer_id, sequence=sequence)
    assert retry.duplicate and retry.base_offsets == {0: 0}
    producer.close()
    assert [r.value for r in assert_log_consistent(cluster, "idem")] == [b"once"]
