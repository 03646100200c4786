"""Deleting a topic removes its committed offsets from every group also for Kafka clients: a
confluent-kafka group commits through the broker's group coordinator (which keeps the offsets
partition's newest records in memory), the topic is deleted — over the wire with
``AdminClient.delete_topics``, or through the CLI while the broker runs — and re-created:
OffsetFetch answers no offset, a new member of the group starts at the new topic's beginning,
a commit naming the deleted topic is refused, and offsets a transaction held pending for it
are never applied."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient
from kio.schema.errors import ErrorCode

import sparklog
from sparklog.testing import BrokerAgents
from tests.helpers import consumed, wait_until
from tests.integration.test_cli import Cli
from tests.integration.test_kafka_admin import raw_call
from tests.wire.conftest import create_led_topic, wait_transactions_complete
from tests.wire.test_offset_commit import COMMIT, _codes, _commit_request

TOPIC = "orders"
GROUP = "ck-app"
TIMEOUT_S = 30
NO_OFFSET = -1001  # librdkafka's OFFSET_INVALID: OffsetFetch answered -1


def group_consumer(bootstrap: str, group: str = GROUP) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
        }
    )


def produce(bootstrap: str, values: list[str], topic: str = TOPIC) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for value in values:
        producer.produce(topic, value=value.encode(), partition=0)
    assert producer.flush(TIMEOUT_S) == 0


def consume(consumer: Consumer, count: int) -> list[tuple[int, str]]:
    """(offset, value) of the next ``count`` records ``consumer`` (subscribed) receives."""
    got: list[tuple[int, str]] = []

    def enough() -> bool:
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            _partition, offset, value = consumed(message)
            got.append((offset, value.decode()))
        return len(got) >= count

    wait_until(enough, f"{count} records of {TOPIC}")
    return got


def fetched_offset(bootstrap: str, topic: str = TOPIC) -> int:
    """The group's committed offset of ``topic``-0 as the coordinator answers OffsetFetch."""
    probe = group_consumer(bootstrap)
    try:
        [answer] = probe.committed([CkTopicPartition(topic, 0)], timeout=TIMEOUT_S)
        return int(answer.offset)
    finally:
        probe.close()


@pytest.mark.parametrize("deleter", ["wire", "cli"])
def test_kafka_clients_offsets_go_with_the_topic_and_the_group_starts_over(
    cluster: sparklog.Cluster, group_broker: BrokerAgents, zk_connect: str, sparklog_home: Path, deleter: str
) -> None:
    bootstrap = group_broker.bootstrap_servers
    create_led_topic(cluster, group_broker, TOPIC, partitions=1)
    produce(bootstrap, [f"old{i}" for i in range(5)])
    consumer = group_consumer(bootstrap)
    try:
        consumer.subscribe([TOPIC])
        assert [o for o, _ in consume(consumer, 5)] == [0, 1, 2, 3, 4]
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    assert fetched_offset(bootstrap) == 5  # served by the coordinator, from its memory

    if deleter == "wire":
        admin = AdminClient({"bootstrap.servers": bootstrap})
        assert admin.delete_topics([TOPIC])[TOPIC].result(TIMEOUT_S) is None
    else:
        assert Cli(zk_connect, sparklog_home)("topics", "delete", "--topic", TOPIC).stdout == ""

    assert fetched_offset(bootstrap) == NO_OFFSET
    assert cluster.committed_offsets(GROUP) == {}
    late = raw_call(group_broker.port(1), COMMIT, 9, **_commit_request(9, GROUP, TOPIC, [(0, 5, "")]))
    assert _codes(late) == {(TOPIC, 0): ErrorCode.unknown_topic_or_partition}
    assert cluster.committed_offsets(GROUP) == {}

    create_led_topic(cluster, group_broker, TOPIC, partitions=1)
    produce(bootstrap, [f"new{i}" for i in range(10)])
    assert fetched_offset(bootstrap) == NO_OFFSET
    consumer = group_consumer(bootstrap)
    try:
        consumer.subscribe([TOPIC])
        assert consume(consumer, 10) == [(i, f"new{i}") for i in range(10)]
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    assert fetched_offset(bootstrap) == 10
    assert cluster.committed_offsets(GROUP) == {(TOPIC, 0): 10}


def test_offsets_a_transaction_holds_for_a_deleted_topic_are_not_applied(
    cluster: sparklog.Cluster, group_broker: BrokerAgents
) -> None:
    bootstrap = group_broker.bootstrap_servers
    create_led_topic(cluster, group_broker, TOPIC, partitions=1)
    create_led_topic(cluster, group_broker, "sink", partitions=1)
    produce(bootstrap, ["a", "b", "c"])
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "copier", "linger.ms": 0})
    producer.init_transactions(TIMEOUT_S)
    source = group_consumer(bootstrap)
    try:
        producer.begin_transaction()
        producer.produce("sink", value=b"copied", partition=0)
        producer.send_offsets_to_transaction(
            [CkTopicPartition(TOPIC, 0, 3), CkTopicPartition("sink", 0, 1)],
            source.consumer_group_metadata(),
            TIMEOUT_S,
        )
        cluster.delete_topic(TOPIC)
        producer.commit_transaction(TIMEOUT_S)
    finally:
        source.close()
    wait_transactions_complete(cluster, "copier")
    assert cluster.committed_offsets(GROUP) == {("sink", 0): 1}, "the other topic's offset is applied"
    create_led_topic(cluster, group_broker, TOPIC, partitions=1)
    assert fetched_offset(bootstrap) == NO_OFFSET
