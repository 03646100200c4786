"""Light consumers with ``bootstrap.servers`` in the same groups as Kafka clients (DESIGN §8:
two ways to be a member, one group system).

Real broker agents, a real confluent-kafka consumer and sparklog's light consumer as a
protocol member: they split a topic's partitions and read every record once between them,
partitions move when one leaves, and sparklog's own tools show both members.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import KafkaError, KafkaException, TopicPartition

import sparklog
from sparklog.clients.consumer import Consumer as LightConsumer
from sparklog.errors import ConfigError, InconsistentGroupProtocolError
from sparklog.testing import BrokerAgents
from tests.helpers import consumed, wait_until
from tests.wire.conftest import create_led_topic
from tests.wire.test_consumer_groups import produce

TOPIC, PARTITIONS = "events", 6
Seen = dict[tuple[int, int], bytes]


def light_consumer(cluster: sparklog.Cluster, agents: BrokerAgents, group: str, **overrides: Any) -> LightConsumer:
    config: dict[str, Any] = {
        "bootstrap_servers": agents.bootstrap_servers,
        "auto_offset_reset": "earliest",
        "enable_auto_commit": True,  # commits on revocation, before the partitions move
        "session_timeout_ms": 6000,
        "heartbeat_interval_ms": 200,
        "client_id": "light",
    }
    config.update(overrides)
    return cluster.consumer(group, **config)


class KafkaMember:
    """A confluent-kafka group member that commits what it read before giving partitions up."""

    def __init__(self, agents: BrokerAgents, group: str, client_id: str) -> None:
        self.client = KafkaConsumer(
            {
                "bootstrap.servers": agents.bootstrap_servers,
                "group.id": group,
                "client.id": client_id,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 200,
            }
        )
        self.seen: Seen = {}
        self.duplicates: list[tuple[int, int]] = []
        self.client.subscribe([TOPIC], on_revoke=self._on_revoke)

    def _on_revoke(self, client: KafkaConsumer, partitions: list[TopicPartition]) -> None:
        if partitions:
            self.commit()

    def commit(self) -> None:
        try:
            self.client.commit(asynchronous=False)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError._NO_OFFSET:  # nothing read since the last commit
                raise

    def poll(self) -> None:
        message = self.client.poll(0.05)
        if message is None:
            return
        assert message.error() is None, message.error()
        partition, offset, value = consumed(message)
        if (partition, offset) in self.seen:
            self.duplicates.append((partition, offset))
        self.seen[(partition, offset)] = value

    def owned(self) -> set[int]:
        return {p.partition for p in self.client.assignment()}


class LightMember:
    def __init__(self, consumer: LightConsumer) -> None:
        self.consumer = consumer
        self.seen: Seen = {}
        self.duplicates: list[tuple[int, int]] = []
        consumer.subscribe([TOPIC])

    def poll(self) -> None:
        for record in self.consumer.poll(timeout_ms=50):
            key = (record.partition, record.offset)
            if key in self.seen:
                self.duplicates.append(key)
            self.seen[key] = record.value or b""

    def owned(self) -> set[int]:
        return {p for _t, p in self.consumer.assignment()}


Member = KafkaMember | LightMember


def poll_until(members: list[Member], condition: Any, what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            owned = [m.owned() for m in members]
            raise AssertionError(f"timed out waiting for {what} (owned: {owned})")
        for member in members:
            member.poll()


def split(members: list[Member]) -> bool:
    owned = [m.owned() for m in members]
    return all(owned) and sum(map(len, owned)) == PARTITIONS and set().union(*owned) == set(range(PARTITIONS))


def read_once(members: list[Member], count: int) -> bool:
    return sum(len(m.seen) for m in members) >= count


def assert_exactly_once(members: list[Member], count: int) -> None:
    """Every record 0..count-1 read by exactly one member, once."""
    assert [m.duplicates for m in members] == [[] for _ in members], "a member read a record twice"
    keys = [set(m.seen) for m in members]
    overlap = set.intersection(*keys) if len(keys) > 1 else set()
    assert not overlap, f"records read by more than one member: {sorted(overlap)[:5]}"
    values = sorted(v for m in members for v in m.seen.values())
    assert values == sorted(f"v{i}".encode() for i in range(count))


def test_light_and_kafka_consumers_split_a_group_and_tools_show_both(
    group_broker: BrokerAgents, cluster: sparklog.Cluster
) -> None:
    create_led_topic(cluster, group_broker, TOPIC, PARTITIONS)
    produce(group_broker, 300)
    light = LightMember(light_consumer(cluster, group_broker, "mixed", client_id="light-1"))
    kafka = KafkaMember(group_broker, "mixed", "kafka-1")
    members: list[Member] = [light, kafka]
    try:
        poll_until(members, lambda: split(members) and read_once(members, 300), "a split and every record")
        assert_exactly_once(members, 300)
        light.consumer.commit()
        kafka.commit()
        assert sum(cluster.committed_offsets("mixed").values()) == 300

        def shown() -> bool:
            description = cluster.describe_group("mixed")
            by_client = {m.client_id: {p for _t, p in m.partitions} for m in description.members}
            return description.state == "Stable" and by_client == {
                "light-1": light.owned(),
                "kafka-1": kafka.owned(),
            }

        wait_until(shown, "describe_group shows the light and the Kafka member with their partitions")
        description = cluster.describe_group("mixed")
        assert description.protocol == "range"
        assert all(row.lag == 0 and row.current_offset is not None for row in description.partitions)
        light_id = light.consumer.group_metadata().member_id
        assert light_id in {m.member_id for m in description.members}
        assert light.consumer.group_metadata().generation == description.generation
    finally:
        light.consumer.close()
        kafka.client.close()
    wait_until(lambda: cluster.describe_group("mixed").state == "Empty", "the group empties after both leave")


def test_light_consumer_leaves_and_the_kafka_client_takes_its_partitions(
    group_broker: BrokerAgents, cluster: sparklog.Cluster
) -> None:
    create_led_topic(cluster, group_broker, TOPIC, PARTITIONS)
    produce(group_broker, 120)
    kafka = KafkaMember(group_broker, "handover", "kafka-1")
    light = LightMember(light_consumer(cluster, group_broker, "handover", client_id="light-1"))
    members: list[Member] = [kafka, light]
    try:
        poll_until(members, lambda: split(members) and read_once(members, 120), "a split and every record")
        light.consumer.close()  # commits its positions (auto-commit) and sends LeaveGroup
        produce(group_broker, 120, start=120)
        poll_until([kafka], lambda: kafka.owned() == set(range(PARTITIONS)), "the leaver's partitions move")
        poll_until([kafka], lambda: read_once(members, 240), "the records after the leave")
        assert_exactly_once(members, 240)
        kafka.commit()
        assert sum(cluster.committed_offsets("handover").values()) == 240
        description = cluster.describe_group("handover")
        assert [m.client_id for m in description.members] == ["kafka-1"]
    finally:
        kafka.client.close()


def test_two_light_members_rebalance_with_sticky_and_commit_through_the_coordinator(
    group_broker: BrokerAgents, cluster: sparklog.Cluster
) -> None:
    """Two protocol members polled from one thread (joins run in the members' own threads);
    the leader assigns with sparklog's sticky assignor; a new member's positions come from
    the offsets the first one committed on revocation."""
    create_led_topic(cluster, group_broker, TOPIC, PARTITIONS)
    produce(group_broker, 90)
    sticky = {"partition_assignment_strategy": "sticky"}
    first = LightMember(light_consumer(cluster, group_broker, "lights", client_id="first", **sticky))
    poll_until([first], lambda: first.owned() == set(range(PARTITIONS)) and read_once([first], 90), "one member")
    generation = first.consumer.group_metadata().generation
    second = LightMember(light_consumer(cluster, group_broker, "lights", client_id="second", **sticky))
    members: list[Member] = [first, second]
    try:
        poll_until(members, lambda: split(members), "the second member gets half")
        assert len(first.owned()) == len(second.owned()) == PARTITIONS // 2
        assert first.consumer.group_metadata().generation > generation
        produce(group_broker, 90, start=90)
        poll_until(members, lambda: read_once(members, 180), "the new records")
        assert_exactly_once(members, 180)
        description = cluster.describe_group("lights")
        assert description.protocol == "sticky"
        assert sorted(m.client_id for m in description.members) == ["first", "second"]
    finally:
        first.consumer.close()
        second.consumer.close()
    assert sum(cluster.committed_offsets("lights").values()) == 180


def test_one_membership_system_per_group(group_broker: BrokerAgents, cluster: sparklog.Cluster) -> None:
    create_led_topic(cluster, group_broker, TOPIC, PARTITIONS)
    zookeeper_member = cluster.consumer("zk-group", session_timeout_ms=6000)
    zookeeper_member.subscribe([TOPIC])
    zookeeper_member.poll(timeout_ms=100)
    protocol_member = light_consumer(cluster, group_broker, "zk-group")
    try:
        protocol_member.subscribe([TOPIC])

        def polled() -> bool:
            protocol_member.poll(timeout_ms=50)
            return False

        with pytest.raises(InconsistentGroupProtocolError, match=r"ZooKeeper membership|INCONSISTENT_GROUP_PROTOCOL"):
            wait_until(polled, "poll() raises: the group belongs to ZooKeeper members")
    finally:
        protocol_member.close()
        zookeeper_member.close()


def test_bootstrap_servers_is_validated(cluster: sparklog.Cluster) -> None:
    for bad in ("", "localhost", "host:port", "host:70000", ",,"):
        with pytest.raises(ConfigError, match=r"bootstrap\.servers"):
            cluster.consumer("g", bootstrap_servers=bad)
    consumer = cluster.consumer("g", bootstrap_servers=" 127.0.0.1:9092 , [::1]:9093")
    assert consumer.configs["bootstrap.servers"] == "127.0.0.1:9092,[::1]:9093"
    consumer.close()
    with pytest.raises(ConfigError, match=r"heartbeat\.interval\.ms"):
        cluster.consumer("g", bootstrap_servers="127.0.0.1:9", heartbeat_interval_ms=6000, session_timeout_ms=6000)


def test_static_light_member_restarts_without_a_rebalance(
    group_broker: BrokerAgents, cluster: sparklog.Cluster
) -> None:
    create_led_topic(cluster, group_broker, TOPIC, PARTITIONS)
    produce(group_broker, 60)
    static = {"group_instance_id": "light-static", "session_timeout_ms": 10000}
    kafka = KafkaMember(group_broker, "static", "kafka-1")
    # The Kafka client joins first and leads: a static *leader* that restarts rebalances (DESIGN §8).
    poll_until([kafka], lambda: kafka.owned() == set(range(PARTITIONS)), "the Kafka client alone")
    light = LightMember(light_consumer(cluster, group_broker, "static", **static))
    poll_until([kafka, light], lambda: split([kafka, light]) and read_once([kafka, light], 60), "a split")
    before = kafka.owned(), light.owned()
    generation = cluster.describe_group("static").generation
    light.consumer.close()  # static: commits, sends no LeaveGroup, keeps its place
    again = LightMember(light_consumer(cluster, group_broker, "static", **static))
    try:
        poll_until([kafka, again], lambda: again.owned() == before[1], "the restarted member gets its partitions")
        assert kafka.owned() == before[0]
        description = cluster.describe_group("static")
        assert description.generation == generation and description.state == "Stable"
        assert sorted(m.instance_id or "" for m in description.members) == ["", "light-static"]
        produce(group_broker, 60, start=60)
        poll_until([kafka, again], lambda: read_once([kafka, light, again], 120), "records after the restart")
        assert_exactly_once([kafka, light, again], 120)
    finally:
        again.consumer.close()
        kafka.client.close()


def test_light_member_rejoins_after_its_coordinator_restarts(
    group_broker: BrokerAgents, cluster: sparklog.Cluster
) -> None:
    """Killed -9 and restarted: the member finds the coordinator again, is unknown to it
    (membership lives in the coordinator's memory), rejoins and carries on from its commits."""
    create_led_topic(cluster, group_broker, TOPIC, PARTITIONS)
    produce(group_broker, 60)
    light = LightMember(light_consumer(cluster, group_broker, "restart", client_id="survivor"))
    try:
        poll_until([light], lambda: light.owned() == set(range(PARTITIONS)) and read_once([light], 60), "all")
        light.consumer.commit()
        generation = light.consumer.group_metadata().generation
        group_broker.kill(1)
        group_broker.start(1)
        group_broker.wait_controller()
        wait_until(lambda: all(p.leader == 1 for p in cluster.describe_topic(TOPIC).partitions), "leaders again")
        # Until it hears UNKNOWN_MEMBER_ID from the new coordinator the member keeps its partitions
        # (as a Kafka consumer does): wait for the rejoin before producing more, so nothing read
        # in between is read again from the last commit.
        poll_until(
            [light],
            lambda: light.consumer.group_metadata().generation > generation and bool(light.owned()),
            "the member rejoined under the restarted coordinator",
            timeout_s=90,
        )
        produce(group_broker, 60, start=60)
        poll_until([light], lambda: read_once([light], 120), "the records after the restart", timeout_s=90)
        assert_exactly_once([light], 120)
        light.consumer.commit()
        assert sum(cluster.committed_offsets("restart").values()) == 120
        wait_until(
            lambda: [m.client_id for m in cluster.describe_group("restart").members] == ["survivor"],
            "the rejoined member shown by describe_group",
        )
    finally:
        light.consumer.close()


def test_a_light_member_that_stops_polling_leaves_and_rejoins_at_its_next_poll(
    group_broker: BrokerAgents, cluster: sparklog.Cluster
) -> None:
    create_led_topic(cluster, group_broker, TOPIC, PARTITIONS)
    produce(group_broker, 30)
    kafka = KafkaMember(group_broker, "idle-light", "kafka")
    light = LightMember(
        light_consumer(cluster, group_broker, "idle-light", session_timeout_ms=1000, max_poll_interval_ms=1500)
    )
    poll_until([kafka, light], lambda: split([kafka, light]), "a split")
    # The light consumer stops calling poll(): past max.poll.interval.ms it leaves the group.
    poll_until([kafka], lambda: kafka.owned() == set(range(PARTITIONS)), "its partitions move to the Kafka client")
    wait_until(lambda: len(cluster.describe_group("idle-light").members) == 1, "one member left")
    poll_until([kafka, light], lambda: split([kafka, light]), "it rejoins at its next poll()")
    light.consumer.close()
    kafka.client.close()
