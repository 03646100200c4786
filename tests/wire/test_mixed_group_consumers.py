"""Issue 12's mixed test: one group, three kinds of consumers, one after another (DESIGN §8,
§14: a group is one group whoever its members are).

A Kafka client (confluent-kafka) consumes part of a topic through the brokers' coordinator
and commits; Spark (``sparklog.spark.consume``) continues exactly where it committed and
commits; a Kafka client continues where Spark committed (the ``consumer_lag`` view shows it);
the light consumer with ``bootstrap.servers`` continues from there. At each step
``Cluster.describe_group`` shows the truth (state, members, committed offsets, lag), and
every record is consumed exactly once across them.
"""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import TopicPartition

import sparklog
from sparklog.admin.groups import GroupDescription
from sparklog.spark import consume, consumer_lag
from sparklog.testing import BrokerAgents
from tests.helpers import consumed, wait_until
from tests.wire.conftest import create_led_topic
from tests.wire.test_consumer_groups import produce

TOPIC, PARTITIONS, GROUP = "orders", 3, "pipeline"
KAFKA_CONFIG = {
    "group.id": GROUP,
    "client.id": "kafka-reader",
    "auto.offset.reset": "earliest",
    "enable.auto.commit": False,
    "session.timeout.ms": 6000,
    "heartbeat.interval.ms": 200,
}


def assert_truth(
    cluster: sparklog.Cluster, committed: dict[tuple[str, int], int], state: str, clients: list[str]
) -> GroupDescription:
    """``describe_group`` shows ``state``, members with ``clients`` ids, ``committed`` and the lag."""
    high = cluster.high_watermarks(TOPIC)

    def shown() -> GroupDescription | None:
        description = cluster.describe_group(GROUP)
        members = sorted(m.client_id for m in description.members)
        return description if description.state == state and members == clients else None

    description = wait_until(shown, f"group {GROUP} {state} with members {clients}")
    assert cluster.committed_offsets(GROUP) == committed
    rows = {(row.topic, row.partition): row for row in description.partitions}
    for tp, offset in committed.items():
        row = rows[tp]
        assert (row.current_offset, row.log_end_offset, row.lag) == (offset, high[tp[1]], high[tp[1]] - offset), row
    return description


def test_kafka_client_then_spark_then_light_consumer_share_one_group(
    group_broker: BrokerAgents, cluster: sparklog.Cluster, cluster_options: dict[str, str], spark: Any
) -> None:
    create_led_topic(cluster, group_broker, TOPIC, PARTITIONS)
    produce(group_broker, 150, topic=TOPIC)
    seen: dict[str, list[bytes]] = {"kafka": [], "spark": [], "kafka again": [], "light": []}

    # 1. A Kafka client reads part of the topic and commits exactly what it read.
    kafka = KafkaConsumer({**KAFKA_CONFIG, "bootstrap.servers": group_broker.bootstrap_servers})
    kafka.subscribe([TOPIC])
    positions: dict[int, int] = {}
    deadline = time.monotonic() + 60
    while len(seen["kafka"]) < 50:
        assert time.monotonic() < deadline, f"the Kafka client read only {len(seen['kafka'])} records"
        message = kafka.poll(0.1)
        if message is None:
            continue
        assert message.error() is None, message.error()
        partition, offset, value = consumed(message)
        seen["kafka"].append(value)
        positions[partition] = offset + 1
    kafka.commit(offsets=[TopicPartition(TOPIC, p, o) for p, o in positions.items()], asynchronous=False)
    assert_truth(cluster, {(TOPIC, p): o for p, o in positions.items()}, "Stable", ["kafka-reader"])
    kafka.close()
    after_kafka = assert_truth(cluster, {(TOPIC, p): o for p, o in positions.items()}, "Empty", [])
    assert after_kafka.members == ()

    # 2. Spark continues exactly where the Kafka client committed, reads part, commits.
    batch = consume(spark, GROUP, TOPIC, maxOffsetsPerTrigger=60, **cluster_options)
    for (topic, p), (start, _end) in batch.ranges.items():
        assert start == positions.get(p, 0), f"Spark started {topic}-{p} at {start}"
    rows = batch.df.select("partition", "offset", "value").collect()
    assert len(rows) == batch.records == 60
    seen["spark"] = [bytes(r.value) for r in rows]
    batch.commit()
    after_spark = {tp: end for tp, (_start, end) in batch.ranges.items()}
    assert_truth(cluster, after_spark, "Empty", [])

    # 3. A Kafka client again: it continues exactly where Spark committed, reads 20, commits;
    # the consumer_lag SQL view shows it as a member while it is one.
    again = KafkaConsumer({**KAFKA_CONFIG, "bootstrap.servers": group_broker.bootstrap_servers})
    again.subscribe([TOPIC])
    resumed: dict[int, int] = {}
    moved: dict[int, int] = {}
    deadline = time.monotonic() + 60
    while len(seen["kafka again"]) < 20:
        assert time.monotonic() < deadline, f"the Kafka client read only {len(seen['kafka again'])} records"
        message = again.poll(0.1)
        if message is None:
            continue
        assert message.error() is None, message.error()
        partition, offset, value = consumed(message)
        resumed.setdefault(partition, offset)
        seen["kafka again"].append(value)
        moved[partition] = offset + 1
    assert all(resumed[p] == after_spark[(TOPIC, p)] for p in resumed), (resumed, after_spark)
    again.commit(offsets=[TopicPartition(TOPIC, p, o) for p, o in moved.items()], asynchronous=False)
    after_again = {**after_spark, **{(TOPIC, p): o for p, o in moved.items()}}
    assert_truth(cluster, after_again, "Stable", ["kafka-reader"])
    lag = consumer_lag(spark, **cluster_options).where(f"`group` = '{GROUP}'").collect()
    assert {(r.partition, r.current_offset, r.client_id, r.state) for r in lag} == {
        (p, after_again[(TOPIC, p)], "kafka-reader", "Stable") for p in range(PARTITIONS)
    }
    again.close()
    after_spark = after_again

    # 4. The light consumer, a member through the coordinator, continues where they committed.
    produce(group_broker, 50, start=150, topic=TOPIC)
    light = cluster.consumer(
        GROUP,
        bootstrap_servers=group_broker.bootstrap_servers,
        client_id="light-reader",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=6000,
        heartbeat_interval_ms=200,
    )
    try:
        light.subscribe([TOPIC])
        starts: dict[int, int] = {}
        deadline = time.monotonic() + 60
        while len(seen["light"]) < 200 - 50 - 60 - 20:
            assert time.monotonic() < deadline, f"the light consumer read only {len(seen['light'])} records"
            for record in light.poll(timeout_ms=100):
                starts.setdefault(record.partition, record.offset)
                seen["light"].append(record.value or b"")
        assert all(starts[p] == after_spark[(TOPIC, p)] for p in starts), (starts, after_spark)
        light.commit()
        final = {(TOPIC, p): hw for p, hw in cluster.high_watermarks(TOPIC).items()}
        during = assert_truth(cluster, final, "Stable", ["light-reader"])
        assert [m.partitions for m in during.members] == [tuple((TOPIC, p) for p in range(PARTITIONS))]
        assert all(row.consumer_id == light.group_metadata().member_id for row in during.partitions)
    finally:
        light.close()
    assert_truth(cluster, final, "Empty", [])

    everything = [v for values in seen.values() for v in values]
    assert sorted(everything) == sorted(f"v{i}".encode() for i in range(200)), "a record was lost or read twice"
    assert [len(seen[k]) for k in ("kafka", "spark", "kafka again", "light")] == [50, 60, 20, 70]
