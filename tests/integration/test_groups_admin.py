"""Consumer-group administration through the Python API, against a real ZooKeeper and real
Delta tables: every reset scenario (dry run, then execute), describe/list/lag of live and
empty groups, deletes, refusals while a group is active, bad input that changes nothing,
and the ``consumer_lag`` Spark view.

The reset scenarios share one module-scoped cluster (its own chroot and home) and use a
fresh group each, so they stay fast; tests that compare the whole cluster state use the
per-test ``cluster`` fixture.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import sparklog
from sparklog.admin.groups import consumer_lag, delete_groups
from sparklog.clients.consumer import Consumer
from sparklog.errors import (
    GroupIdNotFoundError,
    GroupNotEmptyError,
    InvalidGroupIdError,
    InvalidOffsetSpecError,
    TopicNotFoundError,
    UnknownPartitionError,
)
from sparklog.group.reset import ResetKind
from tests.helpers import assert_unchanged, wait_for

T0 = 1_704_067_200_000  # 2024-01-01T00:00:00Z
HOUR_MS = 3_600_000


def fill(cluster: sparklog.Cluster, topic: str = "orders", records: int = 10) -> None:
    """Two partitions of ``records`` each: partition 0 stamped T0 + i s, partition 1 stamped
    now - (records - i) h (for by-duration)."""
    cluster.create_topic(topic, 2)
    now = int(time.time() * 1000)
    with cluster.producer(linger_ms=0) as producer:
        for i in range(records):
            producer.send(topic, f"a{i}", partition=0, timestamp_ms=T0 + i * 1000)
            producer.send(topic, f"b{i}", partition=1, timestamp_ms=now - (records - i) * HOUR_MS)


def new_group() -> str:
    return f"g-{uuid.uuid4().hex[:8]}"


@contextmanager
def live_member(cluster: sparklog.Cluster, group: str, topic: str = "orders", **configs: Any) -> Iterator[Consumer]:
    """A subscribed light consumer that has received its assignment (the group is Stable)."""
    consumer = cluster.consumer(group, **{"enable.auto.commit": False, **configs})
    try:
        consumer.subscribe([topic])
        wait_for(
            lambda: consumer.poll(50, max_records=1) is not None and bool(consumer.assignment()),
            30,
            f"an assignment in group {group}",
        )
        yield consumer
    finally:
        consumer.close()


@pytest.fixture(scope="module")
def shared(zk_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[sparklog.Cluster]:
    home = tmp_path_factory.mktemp("groups-admin")
    cluster = sparklog.connect(
        {"zookeeper.connect": f"{zk_server}/groups-{uuid.uuid4().hex[:8]}", "sparklog.home": str(home)}
    )
    try:
        fill(cluster)
        yield cluster
    finally:
        cluster.close()


COMMITTED = {("orders", 0): 4, ("orders", 1): 7}
RESETS = [
    ("to-earliest", None, {"all_topics": True}, {0: 0, 1: 0}),
    ("to-latest", None, {"topics": ["orders"]}, {0: 10, 1: 10}),
    ("to-current", None, {"all_topics": True}, {0: 4, 1: 7}),
    ("to-offset", 6, {"topics": ["orders"]}, {0: 6, 1: 6}),
    ("to-offset", 99, {"partitions": [("orders", 1)]}, {1: 10}),  # clamped to the log end
    ("to-offset", -3, {"partitions": [("orders", 0)]}, {0: 0}),  # clamped to the log start
    ("shift-by", -2, {"all_topics": True}, {0: 2, 1: 5}),
    ("shift-by", 5, {"all_topics": True}, {0: 9, 1: 10}),
    ("to-datetime", "2024-01-01T00:00:05.000Z", {"partitions": [("orders", 0)]}, {0: 5}),
    ("to-datetime", "2024-01-01T01:00:05.000+01:00", {"partitions": [("orders", 0)]}, {0: 5}),
    ("to-datetime", "2024-01-01T00:00:04.500", {"partitions": [("orders", 0)]}, {0: 5}),  # no zone: UTC
    ("to-datetime", "2999-01-01T00:00:00.000", {"partitions": [("orders", 0)]}, {0: 10}),  # none that late: end
    ("by-duration", "PT5H30M", {"partitions": [("orders", 1)]}, {1: 5}),
    ("from-file", "orders,0,3\norders,1,42\n", {}, {0: 3, 1: 10}),
]


@pytest.mark.parametrize(("scenario", "value", "scope", "expected"), RESETS, ids=lambda v: str(v)[:30])
def test_reset_scenario_dry_run_then_execute(
    shared: sparklog.Cluster,
    tmp_path: Path,
    scenario: ResetKind,
    value: Any,
    scope: dict[str, Any],
    expected: dict[int, int],
) -> None:
    group = new_group()
    shared.commit_offsets(group, COMMITTED)
    if scenario == "from-file":
        (tmp_path / "plan.csv").write_text(value)
        value = str(tmp_path / "plan.csv")
    plan = [("orders", p, o) for p, o in sorted(expected.items())]
    assert shared.reset_group_offsets(group, scenario, value, **scope) == plan
    assert shared.committed_offsets(group) == COMMITTED, "a dry run must not change offsets"
    assert shared.reset_group_offsets(group, scenario, value, execute=True, **scope) == plan
    assert shared.committed_offsets(group) == {**COMMITTED, **{("orders", p): o for p, o in expected.items()}}


def test_reset_creates_a_group_that_never_committed(shared: sparklog.Cluster) -> None:
    group = new_group()
    assert shared.reset_group_offsets(group, "to-offset", 3, topics=["orders"], execute=True) == [
        ("orders", 0, 3),
        ("orders", 1, 3),
    ]
    assert shared.describe_group(group).state == "Empty"
    assert (group, "Empty") in {(g.group_id, g.state) for g in shared.list_groups()}


def test_live_group_describe_lag_and_refusals(shared: sparklog.Cluster) -> None:
    group = new_group()
    with live_member(shared, group, client_id="app-1") as consumer:
        consumer.commit({("orders", 0): 6, ("orders", 1): 10})
        described = shared.describe_group(group)
        [member] = described.members
        assert (described.state, described.protocol, described.leader) == ("Stable", "range", member.member_id)
        assert described.generation >= 1 and described.coordinator == 0
        assert (member.client_id, member.partitions) == ("app-1", (("orders", 0), ("orders", 1)))
        rows = [
            (r.topic, r.partition, r.current_offset, r.log_end_offset, r.lag, r.consumer_id, r.client_id)
            for r in described.partitions
        ]
        assert rows == [
            ("orders", 0, 6, 10, 4, member.member_id, "app-1"),
            ("orders", 1, 10, 10, 0, member.member_id, "app-1"),
        ]
        assert (group, "Stable") in {(g.group_id, g.state) for g in shared.list_groups()}
        lag = consumer_lag(shared.groups).to_pylist()
        assert {(r["partition"], r["lag"], r["state"]) for r in lag if r["group"] == group} == {
            (0, 4, "Stable"),
            (1, 0, "Stable"),
        }

        before = shared.committed_offsets(group)
        with pytest.raises(
            GroupNotEmptyError,
            match=f"Assignments can only be reset if the group '{group}' is inactive, but the current state is Stable.",
        ):
            shared.reset_group_offsets(group, "to-earliest", all_topics=True, execute=True)
        with pytest.raises(
            GroupNotEmptyError,
            match=f"Deletion of some consumer groups failed: \\* Group '{group}' "
            "could not be deleted due to: NON_EMPTY_GROUP",
        ):
            shared.delete_group(group)
        with pytest.raises(GroupNotEmptyError, match="GROUP_SUBSCRIBED_TO_TOPIC"):
            shared.delete_group_offsets(group, "orders")
        assert shared.committed_offsets(group) == before

    described = shared.describe_group(group)
    assert (described.state, described.members, described.protocol) == ("Empty", (), "")
    assert [(r.partition, r.lag, r.consumer_id, r.host) for r in described.partitions] == [
        (0, 4, None, None),
        (1, 0, None, None),
    ]


def test_delete_offsets_then_the_group(shared: sparklog.Cluster) -> None:
    group = new_group()
    shared.commit_offsets(group, COMMITTED)
    assert shared.delete_group_offsets(group, "orders", [1]) == [("orders", 1)]
    assert shared.committed_offsets(group) == {("orders", 0): 4}
    assert [(r.partition, r.current_offset) for r in shared.describe_group(group).partitions] == [(0, 4)]
    other = new_group()
    shared.commit_offsets(other, COMMITTED)
    assert delete_groups(shared.groups, [group, other]) == [group, other]
    for deleted in (group, other):
        assert shared.committed_offsets(deleted) == {}
        assert deleted not in {g.group_id for g in shared.list_groups()}
        with pytest.raises(GroupIdNotFoundError, match=f"Consumer group '{deleted}' does not exist."):
            shared.describe_group(deleted)


def test_a_deleted_group_can_be_used_again(shared: sparklog.Cluster) -> None:
    group = new_group()
    for _generation in (1, 2):
        with live_member(shared, group):
            pass
    shared.commit_offsets(group, COMMITTED)
    shared.delete_group(group)
    with live_member(shared, group) as consumer:
        consumer.commit({("orders", 0): 1})
    assert shared.committed_offsets(group) == {("orders", 0): 1}


def test_delete_groups_deletes_what_it_can(shared: sparklog.Cluster) -> None:
    gone, missing = new_group(), new_group()
    shared.commit_offsets(gone, COMMITTED)
    with pytest.raises(GroupIdNotFoundError) as info:
        delete_groups(shared.groups, [missing, gone])
    assert str(info.value) == (
        f"Deletion of some consumer groups failed: * Group '{missing}' could not be deleted due to: "
        f"GROUP_ID_NOT_FOUND (the group does not exist). These consumer groups were deleted successfully: '{gone}'."
    )
    assert shared.committed_offsets(gone) == {}


def test_unknown_group_and_bad_input_change_nothing(
    cluster: sparklog.Cluster, sparklog_home: Path, tmp_path: Path
) -> None:
    fill(cluster, records=3)
    cluster.commit_offsets("g", {("orders", 0): 1})
    bad_csv = tmp_path / "bad.csv"
    bad_csv.write_text("orders,0,1\norders,zero,2\n")
    attempts = [
        (GroupIdNotFoundError, "Consumer group 'nope' does not exist.", lambda: cluster.describe_group("nope")),
        (GroupIdNotFoundError, "GROUP_ID_NOT_FOUND", lambda: cluster.delete_group("nope")),
        (InvalidGroupIdError, "Group id 'bad group' is illegal", lambda: cluster.describe_group("bad group")),
        (
            InvalidGroupIdError,
            "is illegal",
            lambda: cluster.reset_group_offsets("bad/group", "to-earliest", all_topics=True),
        ),
        (
            TopicNotFoundError,
            "Topic 'ghost' does not exist",
            lambda: cluster.reset_group_offsets("g", "to-earliest", topics=["ghost"], execute=True),
        ),
        (
            UnknownPartitionError,
            'The partitions "orders-7" do not exist',
            lambda: cluster.reset_group_offsets("g", "to-earliest", partitions=[("orders", 7)], execute=True),
        ),
        (
            InvalidOffsetSpecError,
            "Reset plan line 2 'orders,zero,2'",
            lambda: cluster.reset_group_offsets("g", "from-file", str(bad_csv), execute=True),
        ),
        (
            InvalidOffsetSpecError,
            "Invalid datetime '2024-01-01 10:00'",
            lambda: cluster.reset_group_offsets("g", "to-datetime", "2024-01-01 10:00", all_topics=True, execute=True),
        ),
        (
            InvalidOffsetSpecError,
            "Invalid duration '30m'",
            lambda: cluster.reset_group_offsets("g", "by-duration", "30m", all_topics=True, execute=True),
        ),
        (
            InvalidOffsetSpecError,
            "Cannot shift offset for partition orders-1 of group 'g'",
            lambda: cluster.reset_group_offsets("g", "shift-by", 1, topics=["orders"], execute=True),
        ),
        (
            InvalidOffsetSpecError,
            "One of the reset scopes should be defined",
            lambda: cluster.reset_group_offsets("g", "to-latest", execute=True),
        ),
        (TopicNotFoundError, "Topic 'ghost' does not exist", lambda: cluster.delete_group_offsets("g", "ghost")),
    ]
    with assert_unchanged(cluster, sparklog_home):
        for error, fragment, attempt in attempts:
            with pytest.raises(error) as info:
                attempt()
            assert fragment in str(info.value)
    assert cluster.committed_offsets("g") == {("orders", 0): 1}


def test_consumer_lag_view(spark: Any, cluster: sparklog.Cluster, cluster_options: dict[str, str]) -> None:
    from sparklog.spark import consumer_lag as lag_frame
    from sparklog.spark import register_topics

    fill(cluster, records=3)
    cluster.commit_offsets("reporting", {("orders", 0): 1, ("orders", 1): 3})
    assert register_topics(spark, native=True, **cluster_options) == ["orders"]
    rows = spark.sql(
        "SELECT topic, partition, current_offset, log_end_offset, lag, consumer_id, state FROM consumer_lag "
        "WHERE `group` = 'reporting' ORDER BY partition"
    ).collect()
    assert [tuple(r) for r in rows] == [("orders", 0, 1, 3, 2, None, "Empty"), ("orders", 1, 3, 3, 0, None, "Empty")]
    cluster.commit_offsets("reporting", {("orders", 0): 3})
    assert spark.sql("SELECT sum(lag) FROM consumer_lag").first()[0] == 2, (
        "a view is the snapshot taken at registration"
    )
    fresh = lag_frame(spark, **cluster_options)
    assert fresh.columns == [
        "group",
        "topic",
        "partition",
        "current_offset",
        "log_end_offset",
        "lag",
        "consumer_id",
        "host",
        "client_id",
        "state",
    ]
    assert fresh.groupBy().sum("lag").collect()[0][0] == 0
