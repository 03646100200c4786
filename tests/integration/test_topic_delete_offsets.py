"""Deleting a topic removes its committed offsets from every group, as Kafka does: whoever
committed them (the library, the light consumer, Spark), whoever deletes (``Cluster``, the CLI),
against a real ZooKeeper, real Delta tables and a real Spark session. A re-created topic of the
same name is then read from its beginning, lag tools show nothing for it, and a commit that
still names the deleted topic is refused (Kafka: UNKNOWN_TOPIC_OR_PARTITION)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import sparklog
from sparklog.errors import TopicNotFoundError
from sparklog.log import group_offsets
from sparklog.log.delta_sink import DeltaSink, input_app_id
from sparklog.log.group_offsets import OffsetCommit
from sparklog.spark import consume, consume_into, consumer_lag
from tests.helpers import wait_until
from tests.integration.test_cli import Cli
from tests.integration.test_streaming import run_available_now, stream, values_of

TOPIC = "orders"


def produce(cluster: sparklog.Cluster, topic: str, values: list[str]) -> None:
    with cluster.producer(linger_ms=0) as producer:
        for value in values:
            producer.send(topic, value.encode(), partition=0)
        producer.flush()


def consume_all(cluster: sparklog.Cluster, group: str, topic: str, count: int) -> list[tuple[int, str]]:
    """(offset, value) of the first ``count`` records a new member of ``group`` polls,
    starting where the group's committed offset says (earliest without one)."""
    polled: list[tuple[int, str]] = []
    with cluster.consumer(group, auto_offset_reset="earliest", enable_auto_commit=False) as consumer:
        consumer.subscribe([topic])

        def enough() -> bool:
            polled.extend((r.offset, (r.value or b"").decode()) for r in consumer.poll(50) if r.value is not None)
            return len(polled) >= count

        wait_until(enough, f"{count} records of {topic} in group {group}")
        consumer.commit()
    return polled


def describe_rows(cli: Cli) -> list[dict[str, object]]:
    """Every group's partition rows of ``groups describe --all-groups`` (JSON), with the group."""
    described = json.loads(cli("groups", "describe", "--all-groups", "--output", "json").stdout)
    return [{"group": g["group_id"], **row} for g in described for row in g["partitions"]]


def test_deleted_topic_offsets_are_gone_and_the_recreated_topic_is_read_from_its_start(
    cli: Cli, cluster: sparklog.Cluster, spark: Any, cluster_options: dict[str, str]
) -> None:
    cluster.create_topic(TOPIC)
    cluster.create_topic("audit")
    produce(cluster, TOPIC, [f"old{i}" for i in range(5)])
    produce(cluster, "audit", ["a0", "a1"])
    assert [o for o, _ in consume_all(cluster, "app", TOPIC, 5)] == [0, 1, 2, 3, 4]
    cluster.commit_offsets("standalone", {(TOPIC, 0): 3, ("audit", 0): 1})
    assert cluster.committed_offsets("app") == {(TOPIC, 0): 5}

    cluster.delete_topic(TOPIC)

    assert cluster.committed_offsets("app") == {}
    assert cluster.committed_offsets("standalone") == {("audit", 0): 1}, "other topics' offsets stay"
    cluster.create_topic(TOPIC)
    produce(cluster, TOPIC, [f"new{i}" for i in range(10)])
    assert cluster.committed_offsets("app", [TOPIC]) == {}
    rows = describe_rows(cli)
    assert [r for r in rows if r["topic"] == TOPIC] == [], "no group read the new topic"
    assert all(r["lag"] is None or int(str(r["lag"])) >= 0 for r in rows), rows
    lag = consumer_lag(spark, **cluster_options).collect()
    assert [(r.group, r.topic) for r in lag] == [("standalone", "audit")]

    polled = consume_all(cluster, "app", TOPIC, 10)
    assert polled == [(i, f"new{i}") for i in range(10)], "the group starts over at offset 0"
    assert cluster.committed_offsets("app") == {(TOPIC, 0): 10}


def test_delete_through_the_cli_removes_a_live_members_offsets_and_its_later_commit_is_refused(
    cli: Cli, cluster: sparklog.Cluster
) -> None:
    cluster.create_topic(TOPIC)
    produce(cluster, TOPIC, ["a", "b", "c"])
    consumer = cluster.consumer("live", auto_offset_reset="earliest", enable_auto_commit=False)
    try:
        consumer.subscribe([TOPIC])
        wait_until(lambda: consumer.poll(50, max_records=3), "records for the live member")
        consumer.commit({(TOPIC, 0): 3})
        assert cluster.committed_offsets("live") == {(TOPIC, 0): 3}

        assert cli("topics", "delete", "--topic", TOPIC).stdout == ""

        assert cluster.committed_offsets("live") == {}
        with pytest.raises(TopicNotFoundError, match=f"{TOPIC}-0"):
            cluster.commit_offsets("other", {(TOPIC, 0): 3})
        assert cluster.committed_offsets("other") == {}
    finally:
        consumer.close()  # its auto-commit is off: nothing to commit for the deleted topic
    assert cluster.committed_offsets("live") == {}


def test_a_commit_checked_against_the_deleted_topic_is_refused_after_the_deletion(cluster: sparklog.Cluster) -> None:
    """The race: a committer looked the topic up before the deletion and commits after it
    (stale metadata). Its commit names the incarnation it saw; the deletion left a marker in
    ``__consumer_offsets`` that refuses exactly that incarnation, and nothing is stored."""
    cluster.create_topic(TOPIC)
    cluster.commit_offsets("early", {(TOPIC, 0): 0})  # __consumer_offsets exists
    deleted = cluster.replicas.topic_incarnation(TOPIC)
    cluster.delete_topic(TOPIC)
    table = cluster.groups.offsets_table("late")
    partition = cluster.groups.log_partition("late")
    refused = group_offsets.commit_offsets(
        table, partition, "late", {(TOPIC, 0): OffsetCommit(4)}, incarnations={TOPIC: deleted}
    )
    assert refused == {(TOPIC, 0)}
    assert cluster.committed_offsets("late") == {}
    cluster.create_topic(TOPIC)
    current = cluster.replicas.topic_incarnation(TOPIC)
    assert current > deleted
    stored = group_offsets.commit_offsets(
        table, partition, "late", {(TOPIC, 0): OffsetCommit(0)}, incarnations={TOPIC: current}
    )
    assert stored == set()
    assert cluster.committed_offsets("late") == {(TOPIC, 0): 0}


def test_spark_committed_offsets_are_removed_and_consume_into_starts_over(
    spark: Any, cluster: sparklog.Cluster, cluster_options: dict[str, str], tmp_path: Path
) -> None:
    cluster.create_topic(TOPIC, partitions=2)
    produce(cluster, TOPIC, [f"old{i}" for i in range(6)])
    batch = consume(spark, "readers", TOPIC, **cluster_options)
    assert batch.records == 6
    batch.commit()
    path = str(tmp_path / "lake" / "copy")
    first = consume_into(spark, "etl", TOPIC, output_path=path, **cluster_options)
    assert first.records == 6
    assert cluster.committed_offsets("readers") == {(TOPIC, 0): 6, (TOPIC, 1): 0}
    assert cluster.committed_offsets("etl") == {(TOPIC, 0): 6, (TOPIC, 1): 0}

    cluster.delete_topic(TOPIC)

    assert cluster.committed_offsets("readers") == {}
    assert cluster.committed_offsets("etl") == {}
    cluster.create_topic(TOPIC, partitions=2)
    produce(cluster, TOPIC, [f"new{i}" for i in range(4)])
    again = consume(spark, "readers", TOPIC, **cluster_options)
    assert again.ranges[(TOPIC, 0)] == (0, 4)
    # The output still stores the old topic's input offset (6); it belongs to the deleted topic.
    assert DeltaSink(path).app_versions([input_app_id("etl", TOPIC, 0)]) == {input_app_id("etl", TOPIC, 0): 6}
    rerun = consume_into(spark, "etl", TOPIC, output_path=path, **cluster_options)
    assert rerun.input_ranges[(TOPIC, 0)] == (0, 4), "the new topic is processed from its start"
    assert cluster.committed_offsets("etl") == {(TOPIC, 0): 4, (TOPIC, 1): 0}


def test_a_streaming_query_of_the_group_carries_on_after_one_of_its_topics_is_deleted(
    spark: Any, cluster: sparklog.Cluster, cluster_options: dict[str, str], tmp_path: Path
) -> None:
    for topic in ("tracked-a", "tracked-b"):
        cluster.create_topic(topic)
        produce(cluster, topic, [f"{topic}-{i}" for i in range(3)])
    query = stream(
        spark, cluster_options, subscribePattern="tracked-.*", startingOffsets="earliest", **{"kafka.group.id": "q"}
    )
    assert len(values_of(run_available_now(query, tmp_path / "ckpt"))) == 6
    assert cluster.committed_offsets("q") == {("tracked-a", 0): 3, ("tracked-b", 0): 3}

    cluster.delete_topic("tracked-a")

    assert cluster.committed_offsets("q") == {("tracked-b", 0): 3}
    produce(cluster, "tracked-b", ["late"])
    # The restarted query still holds tracked-a in its checkpoint; committing that is refused.
    assert values_of(run_available_now(query, tmp_path / "ckpt")) == ["late"]
    assert cluster.committed_offsets("q") == {("tracked-b", 0): 4}
