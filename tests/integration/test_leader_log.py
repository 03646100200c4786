"""A leader's appends without delta-rs snapshots (``sparklog/log/leader_log.py``,
``sparklog/log/delta_commit.py``): the commits it writes are Delta commits every reader
takes as its own, and the Delta conflict rule still holds against delta-rs writers."""

from __future__ import annotations

import pytest
from deltalake import DeltaTable

import sparklog
from sparklog.log.append import LogView, append
from sparklog.log.leader_log import LeaderLog
from sparklog.log.table import CommitConflict
from sparklog.log.transactions import end_app_id
from sparklog.log.txn_state import app_transactions
from tests.helpers import BOTH_STORES, assert_log_consistent, segment_batch

TOPIC = "leader-log"


@BOTH_STORES
def test_direct_commits_are_delta_commits(cluster: sparklog.Cluster) -> None:
    cluster.create_topic(TOPIC, partitions=2)
    table = cluster.replicas.leader_table(TOPIC)
    leader_log = LeaderLog(table)
    for i in range(5):
        batches = {0: segment_batch([b"a%d" % i]), 1: segment_batch([b"b%d" % i] * 2)}
        result = append(table, {0: 1, 1: 1}, batches, views=leader_log.view)
        assert result.base_offsets == {0: i, 1: 2 * i}
    # delta-rs reads the commits: files, stats, app transactions, history
    dt = DeltaTable(table.root, storage_options=table.storage.delta_options or None)
    assert dt.transaction_version(end_app_id(0)) == 5 and dt.transaction_version(end_app_id(1)) == 10
    # the app-transaction map the leader recorded for its own commits (not read back) is the log's
    view = leader_log.state_view()
    assert view is not None and view.version == dt.version()
    assert dict(view.state) == {app_id: dt.transaction_version(app_id) for app_id in view.state}
    assert len(dt.file_uris()) == 10
    assert dt.history(1)[0]["operation"] == "WRITE"
    # and so does every sparklog reader
    records = assert_log_consistent(cluster, TOPIC)
    assert len(records) == 15
    assert sorted(r.value or b"" for r in records if r.partition == 0) == [b"a%d" % i for i in range(5)]


def test_a_racing_delta_rs_commit_on_the_same_partition_conflicts(cluster: sparklog.Cluster) -> None:
    cluster.create_topic(TOPIC, partitions=2)
    table = cluster.replicas.leader_table(TOPIC)
    leader_log = LeaderLog(table)
    append(table, {0: 1}, {0: segment_batch([b"first"])}, views=leader_log.view)
    view = leader_log.view()
    assert view is not None and view.log_end(0) == 1
    # another writer (delta-rs) commits to partition 0 after the leader read the log
    append(table, {0: 1}, {0: segment_batch([b"other"])})
    with pytest.raises(CommitConflict):
        view.commit([], {end_app_id(0): 2}, {}, fsync=False)
    # a commit on another partition is no conflict: the leader's lands on the next version
    view = leader_log.state_view()
    assert view is not None
    append(table, {1: 1}, {1: segment_batch([b"elsewhere"])})
    before = view.version
    view.commit([], {end_app_id(0): 2}, {}, fsync=False)
    assert leader_log.known_version == before + 2
    state = app_transactions(table.storage, str(DeltaTable(table.root).metadata().id), before + 2)
    assert state is not None and state[end_app_id(0)] == 2


def test_the_append_retries_a_conflict_from_the_new_log_end(cluster: sparklog.Cluster) -> None:
    cluster.create_topic(TOPIC, partitions=1)
    table = cluster.replicas.leader_table(TOPIC)
    leader_log = LeaderLog(table)
    stale = leader_log.view

    def raced() -> LogView | None:
        view = stale()
        append(table, {0: 1}, {0: segment_batch([b"between"])})  # lands after the read, before the commit
        return view

    calls = iter([raced, stale, stale])
    result = append(table, {0: 1}, {0: segment_batch([b"mine"])}, views=lambda: next(calls)())
    assert result.base_offsets == {0: 1}
    assert [r.value for r in assert_log_consistent(cluster, TOPIC)] == [b"between", b"mine"]


@BOTH_STORES
def test_a_leader_knows_when_only_its_own_appends_followed_a_version(cluster: sparklog.Cluster) -> None:
    """What the broker's log-start refresher asks before it reads the table: appends never
    move a log-start, so while every commit since the version a log-start was read at is the
    leader's own append, the log-start stands; anyone else's commit (retention,
    DeleteRecords, compaction, a Spark job) means read again."""
    cluster.create_topic(TOPIC, partitions=2)
    table = cluster.replicas.leader_table(TOPIC)
    leader_log = LeaderLog(table)
    append(table, {0: 1}, {0: segment_batch([b"a"])}, views=leader_log.view)
    first = leader_log.known_version
    assert first is not None
    assert not leader_log.only_own_commits_since(first - 2), "before the version its first commit was built on"
    for i in range(3):
        append(table, {0: 1}, {0: segment_batch([b"b%d" % i])}, views=leader_log.view)
    assert leader_log.only_own_commits_since(first - 1) and leader_log.only_own_commits_since(first + 3)
    assert leader_log.own_commits() == (first - 1, first + 3), "what it recorded, nothing asked"
    append(table, {1: 1}, {1: segment_batch([b"other"])})  # another writer, after the leader's last
    assert not leader_log.only_own_commits_since(first + 3), "a commit after the leader's last is seen"
    assert leader_log.own_commits() == (first - 1, first + 3), "not seen until its next commit"
    assert leader_log.only_own_commits_since(first + 3, look=False), "without a look, what it recorded"
    append(table, {0: 1}, {0: segment_batch([b"c"])}, views=leader_log.view)  # steps over it
    assert leader_log.known_version == first + 5
    assert not leader_log.only_own_commits_since(first + 3), "the other writer's commit is in between"
    assert leader_log.only_own_commits_since(first + 4)
    assert leader_log.own_commits() == (first + 4, first + 5)
