"""The light consumer and the group protocol against a real ZooKeeper and real Delta tables.

Consumers of one test live in this process but each has its own ZooKeeper session, as
separate processes would; the multi-process crash tests are in tests/fault/.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pyarrow as pa
import pytest

import sparklog
from sparklog.clients.consumer import Consumer, ConsumerRecord
from sparklog.errors import (
    FencedInstanceIdError,
    GroupError,
    GroupNotEmptyError,
    IllegalGenerationError,
    InvalidGroupIdError,
    InvalidOffsetSpecError,
    OffsetCommitError,
    OffsetOutOfRangeError,
    UnknownMemberError,
)
from sparklog.model.schema import READ_SCHEMA_WITH_HEADERS
from tests.helpers import BOTH_STORES, group_state

FAST = {"session_timeout_ms": 2000, "auto_commit_interval_ms": 100}


def produce(cluster: sparklog.Cluster, topic: str, n: int, prefix: str = "v", batches: int = 1) -> None:
    with cluster.producer(linger_ms=0) as producer:
        per = n // batches
        for b in range(batches):
            for i in range(b * per, n if b == batches - 1 else (b + 1) * per):
                producer.send(topic, value=f"{prefix}{i}".encode(), key=f"k{i}".encode())
            producer.flush()


@pytest.fixture
def consumers(cluster: sparklog.Cluster) -> Iterator[Callable[..., Consumer]]:
    made: list[Consumer] = []

    def make(group_id: str | None = "g", **config: object) -> Consumer:
        consumer = cluster.consumer(group_id, **{**FAST, **config})
        made.append(consumer)
        return consumer

    yield make
    for consumer in made:
        try:
            consumer.close()
        except Exception:
            pass


def poll_until(
    consumers: list[Consumer], done: Callable[[], bool], timeout_s: float = 20
) -> list[tuple[str, int, int, bytes | None]]:
    """Poll every consumer in turn until ``done()``; return (topic, partition, offset, value) seen."""
    seen: list[tuple[str, int, int, bytes | None]] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for consumer in consumers:
            seen.extend((r.topic, r.partition, r.offset, r.value) for r in consumer.poll(20))
        if done():
            return seen
    raise AssertionError(
        f"condition not reached in {timeout_s}s; assignments: {[sorted(c.assignment()) for c in consumers]}"
    )


def wait_assigned(consumers: list[Consumer], total: int, timeout_s: float = 20) -> None:
    poll_until(
        consumers,
        lambda: sum(len(c.assignment()) for c in consumers) == total and all(c.assignment() for c in consumers),
        timeout_s,
    )


# -- manual assignment -------------------------------------------------------------------
@BOTH_STORES
def test_assign_polls_every_record_in_order_up_to_the_high_watermark(
    cluster: sparklog.Cluster, consumers: Callable[..., Consumer]
) -> None:
    cluster.create_topic("t", 2)
    produce(cluster, "t", 40, batches=4)
    consumer = consumers(None, auto_offset_reset="earliest")
    consumer.assign([("t", 0), ("t", 1)])
    records: list[ConsumerRecord] = []
    while len(records) < 40:
        batch = consumer.poll(500, max_records=7)
        assert 0 < len(batch) <= 7
        records.extend(batch)
    assert consumer.poll(100) == []
    hw = cluster.high_watermarks("t")
    for p in (0, 1):
        offsets = [r.offset for r in records if r.partition == p]
        assert offsets == list(range(hw[p])), f"partition {p}: {offsets}"
        assert consumer.position(("t", p)) == hw[p]
    produce(cluster, "t", 4, prefix="late")
    assert sorted(r.value or b"" for r in consumer.poll(2000, max_records=100)) == [
        b"late0",
        b"late1",
        b"late2",
        b"late3",
    ]


def test_poll_arrow_has_the_kafka_source_schema(cluster: sparklog.Cluster, consumers: Callable[..., Consumer]) -> None:
    cluster.create_topic("t", 1)
    produce(cluster, "t", 5)
    consumer = consumers(None, auto_offset_reset="earliest")
    consumer.assign([("t", 0)])
    table = consumer.poll_arrow(1000)
    assert table.schema == READ_SCHEMA_WITH_HEADERS
    assert table.column("value").to_pylist() == [f"v{i}".encode() for i in range(5)]


@BOTH_STORES
def test_seek_position_and_offsets_for_times(cluster: sparklog.Cluster, consumers: Callable[..., Consumer]) -> None:
    cluster.create_topic("t", 1)
    produce(cluster, "t", 10)
    consumer = consumers(None, auto_offset_reset="latest")
    consumer.assign([("t", 0)])
    assert consumer.position(("t", 0)) == 10
    consumer.seek(("t", 0), 3)
    assert [r.offset for r in consumer.poll(500)] == list(range(3, 10))
    consumer.seek_to_beginning()
    assert consumer.position(("t", 0)) == 0
    consumer.seek_to_end([("t", 0)])
    assert consumer.position(("t", 0)) == 10
    first = cluster.read("t").column("timestamp").cast(pa.int64()).to_pylist()[4] // 1000
    found = consumer.offsets_for_times({("t", 0): first})
    assert found[("t", 0)] is not None and found[("t", 0)] <= 4
    assert consumer.offsets_for_times({("t", 0): int(time.time() * 1000) + 3_600_000}) == {("t", 0): None}
    with pytest.raises(GroupError, match="not assigned"):
        consumer.seek(("t", 1), 0)


@pytest.mark.parametrize("policy", ["earliest", "latest", "none"])
def test_out_of_range_positions_follow_auto_offset_reset(
    cluster: sparklog.Cluster, consumers: Callable[..., Consumer], policy: str
) -> None:
    cluster.create_topic("t", 1)
    produce(cluster, "t", 30, batches=3)
    assert cluster.delete_records("t", {0: 15}) == {0: 15}
    expected = {"earliest": 15, "latest": 30}.get(policy)
    consumer = consumers(None, auto_offset_reset=policy)
    consumer.assign([("t", 0)])

    def first_offset_after(seek_to: int | None) -> int | None:
        if seek_to is not None:
            consumer.seek(("t", 0), seek_to)
        records = consumer.poll(300, max_records=1)
        return records[0].offset if records else consumer.position(("t", 0))

    # no position yet, below log-start, above log-end: each goes where the policy says
    for seek_to in (None, 3, 31, 10_000):
        if policy == "none":
            with pytest.raises(OffsetOutOfRangeError, match=r"auto.offset.reset"):
                first_offset_after(seek_to)
            consumer.seek(("t", 0), 20)  # a valid position keeps the consumer usable
        else:
            assert first_offset_after(seek_to) == expected, f"seek to {seek_to} with {policy}"
    for bad in (-1, -5):
        with pytest.raises(InvalidOffsetSpecError, match="negative"):
            consumer.seek(("t", 0), bad)
    consumer.seek(("t", 0), 30)  # == log end: in range, nothing to read
    assert consumer.poll(100) == [] and consumer.position(("t", 0)) == 30


# -- groups --------------------------------------------------------------------------------
@BOTH_STORES
def test_members_split_the_partitions_and_commit(cluster: sparklog.Cluster, consumers: Callable[..., Consumer]) -> None:
    cluster.create_topic("t", 4)
    produce(cluster, "t", 100)
    members = [consumers("g", auto_offset_reset="earliest", client_id=f"c{i}") for i in range(2)]
    for m in members:
        m.subscribe(["t"])
    seen = poll_until(
        members,
        lambda: (
            sum(c.position(tp) for c in members for tp in c.assignment()) == 100
            and all(c.assignment() for c in members)
        ),
    )
    assert len(seen) == len({(p, o) for _t, p, o, _v in seen}) == 100
    owned = [c.assignment() for c in members]
    assert owned[0].isdisjoint(owned[1]) and owned[0] | owned[1] == {("t", p) for p in range(4)}
    for m in members:
        m.commit()
    assert cluster.committed_offsets("g", ["t"]) == {("t", p): o for p, o in cluster.high_watermarks("t").items()}


def test_rebalance_on_join_leave_and_partition_increase(
    cluster: sparklog.Cluster, consumers: Callable[..., Consumer]
) -> None:
    cluster.create_topic("t", 3)
    a = consumers("g", client_id="a")
    a.subscribe(["t"])
    wait_assigned([a], 3)
    b = consumers("g", client_id="b")
    b.subscribe(["t"])
    wait_assigned([a, b], 3)
    cluster.create_partitions("t", 4)
    wait_assigned([a, b], 4)
    assert len(a.assignment()) == len(b.assignment()) == 2
    b.close()
    wait_assigned([a], 4)


def test_pattern_subscription_picks_up_new_topics(
    cluster: sparklog.Cluster, consumers: Callable[..., Consumer]
) -> None:
    cluster.create_topic("events.a", 1)
    cluster.create_topic("other", 1)
    consumer = consumers("g")
    consumer.subscribe(pattern=r"events\..*")
    wait_assigned([consumer], 1)
    cluster.create_topic("events.b", 2)
    wait_assigned([consumer], 3)
    assert consumer.assignment() == {("events.a", 0), ("events.b", 0), ("events.b", 1)}


def test_commit_from_an_older_generation_is_rejected(
    cluster: sparklog.Cluster, consumers: Callable[..., Consumer]
) -> None:
    cluster.create_topic("t", 2)
    produce(cluster, "t", 10)
    a = consumers("g", auto_offset_reset="earliest", enable_auto_commit=False)
    a.subscribe(["t"])
    wait_assigned([a], 2)
    member = a._member
    assert member is not None and member.assignment is not None
    old_generation, old_member = member.assignment.generation, member.member_id
    b = consumers("g", enable_auto_commit=False)
    b.subscribe(["t"])
    wait_assigned([a, b], 2)
    with pytest.raises(IllegalGenerationError, match="generation"):
        cluster.groups.commit("g", {("t", 0): 5}, generation=old_generation, member_id=old_member)
    with pytest.raises(UnknownMemberError):
        cluster.groups.commit("g", {("t", 0): 5}, generation=old_generation + 1, member_id="nobody")
    with pytest.raises(GroupNotEmptyError, match="inactive"):
        cluster.commit_offsets("g", {("t", 0): 5})  # standalone commit while members are live
    assert cluster.committed_offsets("g", ["t"]) == {}


def test_standalone_commit_stores_any_offset_like_kafka(cluster: sparklog.Cluster) -> None:
    """Kafka's coordinator stores whatever offset passes the membership checks, lower ones too."""
    cluster.create_topic("t", 1)
    produce(cluster, "t", 20)
    cluster.commit_offsets("g", {("t", 0): 10})
    cluster.commit_offsets("g", {("t", 0): 5})
    assert cluster.committed_offsets("g", ["t"]) == {("t", 0): 5}
    with pytest.raises(OffsetCommitError, match="negative"):
        cluster.commit_offsets("g", {("t", 0): -1})
    assert cluster.committed_offsets("g", ["t"]) == {("t", 0): 5}
    cluster.groups.reset("g", {("t", 0): 2})
    assert cluster.committed_offsets("g", ["t"]) == {("t", 0): 2}


def test_member_seeks_back_and_commits_and_the_next_member_resumes_there(
    cluster: sparklog.Cluster, consumers: Callable[..., Consumer]
) -> None:
    cluster.create_topic("t", 1)
    produce(cluster, "t", 10)
    a = consumers("g", auto_offset_reset="earliest", enable_auto_commit=False)
    a.subscribe(["t"])
    seen = poll_until([a], lambda: a.position(("t", 0)) == 10 if a.assignment() else False)
    assert [offset for _t, _p, offset, _v in seen] == list(range(10))
    a.commit()
    assert a.committed([("t", 0)]) == {("t", 0): 10}
    a.seek(("t", 0), 2)
    a.commit()  # a member's explicit commit of a lower position: stored, as Kafka does
    assert a.committed([("t", 0)]) == {("t", 0): 2}
    assert cluster.committed_offsets("g", ["t"]) == {("t", 0): 2}
    a.close()
    b = consumers("g", auto_offset_reset="latest", enable_auto_commit=False)
    b.subscribe(["t"])
    again = poll_until([b], lambda: b.position(("t", 0)) == 10 if b.assignment() else False)
    assert [offset for _t, _p, offset, _v in again] == list(range(2, 10)), "the new member resumes at 2"


def test_static_member_restart_keeps_its_assignment_and_duplicates_are_fenced(
    cluster: sparklog.Cluster, consumers: Callable[..., Consumer]
) -> None:
    cluster.create_topic("t", 4)
    a = consumers("g", group_instance_id="node-a", session_timeout_ms=20_000)
    b = consumers("g", group_instance_id="node-b", session_timeout_ms=20_000)
    a.subscribe(["t"])
    b.subscribe(["t"])
    wait_assigned([a, b], 4)
    before = group_state(cluster, "g")
    owned = a.assignment()
    a.close()  # a static member keeps its place for session.timeout.ms
    a2 = consumers("g", group_instance_id="node-a", session_timeout_ms=20_000)
    a2.subscribe(["t"])
    wait_assigned([a2, b], 4)
    after = group_state(cluster, "g")
    assert a2.assignment() == owned
    assert after.generation == before.generation, "a static restart must not rebalance"
    # A second live process with the same instance id fences the first.
    a3 = consumers("g", group_instance_id="node-a", session_timeout_ms=20_000)
    a3.subscribe(["t"])
    wait_assigned([a3, b], 4)
    with pytest.raises(FencedInstanceIdError):
        for _ in range(100):
            a2.poll(20)
    with pytest.raises(FencedInstanceIdError):
        a2.commit({("t", sorted(owned)[0][1]): 0})
    assert group_state(cluster, "g").generation == before.generation


def test_bad_group_input_fails_clearly(cluster: sparklog.Cluster, consumers: Callable[..., Consumer]) -> None:
    cluster.create_topic("t", 1)
    with pytest.raises(InvalidGroupIdError):
        cluster.consumer("bad/group")
    with pytest.raises(InvalidGroupIdError):
        cluster.consumer("g", group_instance_id="no spaces")
    with pytest.raises(
        sparklog.ConfigError if hasattr(sparklog, "ConfigError") else Exception,
        match=r"partition.assignment.strategy|Unknown",
    ):
        cluster.consumer("g", partition_assignment_strategy="fancy")
    with pytest.raises(GroupError, match="group id"):
        consumers(None).subscribe(["t"])
    consumer = consumers("g")
    consumer.assign([("t", 0)])
    with pytest.raises(GroupError, match="mutually exclusive"):
        consumer.subscribe(["t"])


def test_subscription_change_rebalances(cluster: sparklog.Cluster, consumers: Callable[..., Consumer]) -> None:
    cluster.create_topic("t1", 2)
    cluster.create_topic("t2", 2)
    a = consumers("g", partition_assignment_strategy="roundrobin")
    b = consumers("g", partition_assignment_strategy="roundrobin")
    a.subscribe(["t1"])
    b.subscribe(["t1"])
    wait_assigned([a, b], 2)
    before_generation = group_state(cluster, "g").generation
    a.subscribe(["t1", "t2"])
    wait_assigned([a, b], 4)
    assert {tp for tp in a.assignment() if tp[0] == "t2"} == {("t2", 0), ("t2", 1)}
    record = group_state(cluster, "g")
    assert record.generation > before_generation and record.protocol == "roundrobin" and record.state == "Stable"


def test_offsets_topic_is_compacted_as_it_is_written(cluster: sparklog.Cluster) -> None:
    import json

    cluster.create_topic("t", 3)
    for i in range(1, 31):
        cluster.commit_offsets("g", {("t", i % 3): i})
    offsets_table = cluster.replicas.leader_table("__consumer_offsets")
    partition = cluster.groups.log_partition("g")
    files = offsets_table.files(offsets_table.snapshot(), {partition})
    assert len(files) == 1, f"expected one live file in __consumer_offsets-{partition}, found {len(files)}"
    records = cluster.read("__consumer_offsets", partition)
    keys = [json.loads(k) for k in records.column("key").to_pylist()]
    offsets = records.column("offset").to_pylist()
    assert offsets == sorted(set(offsets)), "offsets must stay unique and ordered (gaps allowed)"
    assert sorted((k["topic"], k["partition"]) for k in keys) == [("t", 0), ("t", 1), ("t", 2)]
    latest = {
        k["partition"]: json.loads(v)["offset"] for k, v in zip(keys, records.column("value").to_pylist(), strict=False)
    }
    assert latest == {0: 30, 1: 28, 2: 29} == {p: o for (_t, p), o in cluster.committed_offsets("g", ["t"]).items()}
    assert offsets[-1] == 29, "the log end counts every record ever committed"
