"""Consumer groups through the brokers' group coordinator, with confluent-kafka and kafka-python.

Real broker agents, real clients: joining, splitting partitions, members joining and leaving,
static membership, cooperative-sticky incremental rebalances, and what sparklog's own tools
(``Cluster.describe_group``) show of the group at each step.
"""

from __future__ import annotations

import functools
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

import sparklog
from sparklog.testing import BrokerAgents
from tests.helpers import BOTH_STORES, consumed, wait_until
from tests.integration.test_cli import Cli
from tests.wire.conftest import create_led_topic

TOPIC, PARTITIONS = "events", 6


@pytest.fixture
def cli(zk_connect: str, sparklog_home: Path) -> Cli:
    return Cli(zk_connect, sparklog_home)


def produce(agents: BrokerAgents, count: int, start: int = 0, topic: str = TOPIC) -> None:
    producer = Producer({"bootstrap.servers": agents.bootstrap_servers, "linger.ms": 5})
    for i in range(start, start + count):
        producer.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode())
    assert producer.flush(30) == 0


def consumer(agents: BrokerAgents, group: str, **overrides: Any) -> Consumer:
    config: dict[str, Any] = {
        "bootstrap.servers": agents.bootstrap_servers,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 200,
        "client.id": "cg-test",
    }
    config.update(overrides)
    return Consumer(config)


class Tracked:
    """A subscribed consumer with the records it got and the assignment callbacks it saw."""

    def __init__(self, client: Consumer, topic: str = TOPIC, cooperative: bool = False) -> None:
        self.client = client
        self.seen: dict[tuple[int, int], bytes] = {}
        self.assigned: list[list[int]] = []
        self.revoked: list[list[int]] = []
        self.cooperative = cooperative
        client.subscribe([topic], on_assign=self._on_assign, on_revoke=self._on_revoke)

    def _on_assign(self, client: Consumer, partitions: list[TopicPartition]) -> None:
        self.assigned.append(sorted(p.partition for p in partitions))

    def _on_revoke(self, client: Consumer, partitions: list[TopicPartition]) -> None:
        self.revoked.append(sorted(p.partition for p in partitions))
        if any(tp[0] == p.partition for p in partitions for tp in self.seen) and not self.cooperative:
            try:
                client.commit(asynchronous=False)
            except KafkaException as exc:  # nothing consumed since the last commit, or fenced meanwhile
                if exc.args[0].code() not in (KafkaError._NO_OFFSET, KafkaError._ASSIGNMENT_LOST):
                    raise

    def poll(self, timeout_s: float = 0.1) -> None:
        message = self.client.poll(timeout_s)
        if message is None:
            return
        assert message.error() is None, message.error()
        partition, offset, value = consumed(message)
        self.seen[(partition, offset)] = value

    def owned(self) -> set[int]:
        return {p.partition for p in self.client.assignment()}


def poll_until(members: list[Tracked], condition: Any, what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        for member in members:
            member.poll(0.05)


def split_evenly(members: list[Tracked]) -> bool:
    owned = [m.owned() for m in members]
    union = set().union(*owned)
    return union == set(range(PARTITIONS)) and sum(len(o) for o in owned) == PARTITIONS and all(owned)


@BOTH_STORES
def test_confluent_consumers_split_partitions_and_tools_show_the_group(
    group_broker: BrokerAgents, cluster: sparklog.Cluster
) -> None:
    create_led_topic(cluster, group_broker, TOPIC, PARTITIONS)
    produce(group_broker, 300)
    members = [Tracked(consumer(group_broker, "split", **{"client.id": f"reader-{i}"})) for i in range(2)]
    try:
        poll_until(members, lambda: split_evenly(members) and sum(len(m.seen) for m in members) >= 300, "a split")
        values = [v for m in members for v in m.seen.values()]
        assert sorted(values) == sorted(f"v{i}".encode() for i in range(300))
        for m in members:
            m.client.commit(asynchronous=False)
        description = cluster.describe_group("split")
        assert description.state == "Stable" and description.protocol == "range"
        assert sorted(m.client_id for m in description.members) == ["reader-0", "reader-1"]
        assert all(m.host.startswith("/127.0.0.1") for m in description.members)
        shown = {m.client_id: set(p for _t, p in m.partitions) for m in description.members}
        assert shown == {f"reader-{i}": members[i].owned() for i in range(2)}
        committed = cluster.committed_offsets("split")
        assert sum(committed.values()) == 300
        assert all(row.lag == 0 and row.consumer_id for row in description.partitions)
    finally:
        for m in members:
            m.client.close()
    wait_until(lambda: cluster.describe_group("split").state == "Empty", "the group empties after both leave")


def test_members_join_and_leave_and_every_record_is_consumed(
    group_broker: BrokerAgents, cluster: sparklog.Cluster
) -> None:
    create_led_topic(cluster, group_broker, TOPIC, PARTITIONS)
    produce(group_broker, 100)
    first = Tracked(consumer(group_broker, "churn"))
    poll_until([first], lambda: first.owned() == set(range(PARTITIONS)) and len(first.seen) >= 100, "one member")
    second = Tracked(consumer(group_broker, "churn"))
    members = [first, second]
    poll_until(members, lambda: split_evenly(members), "the second member gets partitions")
    produce(group_broker, 100, start=100)
    poll_until(members, lambda: len({**first.seen, **second.seen}) >= 200, "records after the join")
    second.client.commit(asynchronous=False)
    second.client.close()
    produce(group_broker, 100, start=200)
    poll_until([first], lambda: first.owned() == set(range(PARTITIONS)), "the leaver's partitions move back")
    poll_until([first], lambda: len({**first.seen, **second.seen}) >= 300, "records after the leave")
    values = {v for m in members for v in m.seen.values()}
    assert values == {f"v{i}".encode() for i in range(300)}
    first.client.commit(asynchronous=False)
    assert sum(cluster.committed_offsets("churn").values()) == 300
    first.client.close()


def test_static_member_restarts_without_a_rebalance(group_broker: BrokerAgents, cluster: sparklog.Cluster) -> None:
    create_led_topic(cluster, group_broker, TOPIC, PARTITIONS)
    produce(group_broker, 60)
    static = {"session.timeout.ms": 10000}
    stays = Tracked(consumer(group_broker, "static", **{"group.instance.id": "stays"}, **static))
    leaves = Tracked(consumer(group_broker, "static", **{"group.instance.id": "restarts"}, **static))
    poll_until([stays, leaves], lambda: split_evenly([stays, leaves]), "two static members")
    generation = cluster.describe_group("static").generation
    before = stays.owned(), leaves.owned()
    assigns = len(stays.assigned)
    leaves.client.close()  # a static member sends no LeaveGroup: its place is kept for the session
    again = Tracked(consumer(group_broker, "static", **{"group.instance.id": "restarts"}, **static))
    poll_until([stays, again], lambda: bool(again.owned()), "the restarted member gets its partitions back")
    assert (stays.owned(), again.owned()) == before
    assert len(stays.assigned) == assigns and stays.revoked == [], "the other member saw a rebalance"
    description = cluster.describe_group("static")
    assert description.generation == generation and description.state == "Stable"
    assert sorted(m.instance_id or "" for m in description.members) == ["restarts", "stays"]
    for m in (stays, again):
        m.client.close()


def test_cooperative_sticky_moves_only_what_it_must(group_broker: BrokerAgents, cluster: sparklog.Cluster) -> None:
    create_led_topic(cluster, group_broker, TOPIC, PARTITIONS)
    produce(group_broker, 60)
    sticky = {"partition.assignment.strategy": "cooperative-sticky"}
    first = Tracked(consumer(group_broker, "coop", **sticky), cooperative=True)
    poll_until([first], lambda: first.owned() == set(range(PARTITIONS)), "all partitions on the first member")
    second = Tracked(consumer(group_broker, "coop", **sticky), cooperative=True)
    poll_until([first, second], lambda: split_evenly([first, second]), "an incremental split")
    # Incremental: the first member only ever gave partitions up, it never lost all of them.
    assert first.revoked and all(len(r) < PARTITIONS for r in first.revoked)
    kept = first.owned()
    assert len(kept) == PARTITIONS // 2 and kept | second.owned() == set(range(PARTITIONS))
    assert cluster.describe_group("coop").protocol == "cooperative-sticky"
    for m in (first, second):
        m.client.close()


def test_kafka_python_group_joins_splits_and_commits(group_broker: BrokerAgents, cluster: sparklog.Cluster) -> None:
    from kafka import KafkaConsumer

    create_led_topic(cluster, group_broker, TOPIC, PARTITIONS)
    produce(group_broker, 120)
    clients = [
        KafkaConsumer(
            bootstrap_servers=group_broker.bootstrap_servers,
            group_id="kp",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            client_id=f"kp-{i}",
            session_timeout_ms=6000,
            heartbeat_interval_ms=200,
        )
        for i in range(2)
    ]
    # Each client knows the topic's partitions before it joins: kafka-python's leader assigns
    # from the metadata it has, and one that joined before its first metadata response
    # assigns nothing until its next refresh (a client-side race, not what is tested here).
    for client in clients:
        knows_partitions = functools.partial(client.partitions_for_topic, TOPIC)
        wait_until(knows_partitions, f"kafka-python sees {TOPIC}'s partitions")
        client.subscribe([TOPIC])
    seen: dict[tuple[int, int], bytes] = {}

    def both_own_partitions() -> bool:
        for client in clients:
            for records in client.poll(timeout_ms=50).values():
                seen.update({(r.partition, r.offset): r.value for r in records})
        owned = [{tp.partition for tp in c.assignment()} for c in clients]
        return all(owned) and set().union(*owned) == set(range(PARTITIONS)) and len(seen) >= 120

    try:
        wait_until(both_own_partitions, "kafka-python members split the partitions and read everything")
        assert sorted(seen.values()) == sorted(f"v{i}".encode() for i in range(120))
        for client in clients:
            client.commit()
        assert sum(cluster.committed_offsets("kp").values()) == 120
        assert sorted(m.client_id for m in cluster.describe_group("kp").members) == ["kp-0", "kp-1"]
    finally:
        for client in clients:
            client.close()


def test_cli_describes_refuses_and_resets_a_kafka_client_group(
    group_broker: BrokerAgents, cluster: sparklog.Cluster, cli: Cli
) -> None:
    create_led_topic(cluster, group_broker, TOPIC, 2)
    produce(group_broker, 40)
    member = Tracked(consumer(group_broker, "ops", **{"client.id": "ops-reader"}))
    poll_until([member], lambda: len(member.seen) >= 40, "the member reads everything")
    member.client.commit(asynchronous=False)
    wait_until(lambda: cluster.describe_group("ops").state == "Stable", "the group is published")
    described = cli("groups", "describe", "--group", "ops", forbid_pyspark=True).stdout.splitlines()
    assert described[1].split() == [
        "GROUP",
        "TOPIC",
        "PARTITION",
        "CURRENT-OFFSET",
        "LOG-END-OFFSET",
        "LAG",
        "CONSUMER-ID",
        "HOST",
        "CLIENT-ID",
    ]
    rows = sorted(line.split() for line in described[2:])
    member_id = cluster.describe_group("ops").members[0].member_id
    assert [r[1:3] + r[5:] for r in rows] == [
        [TOPIC, str(p), "0", member_id, "/127.0.0.1", "ops-reader"] for p in range(2)
    ]
    refused = cli("groups", "reset-offsets", "--group", "ops", "--all-topics", "--to-earliest", "--execute", expect=1)
    assert (
        "is inactive, but the current state is Stable" in refused.stderr
        and sum(cluster.committed_offsets("ops").values()) == 40
    )
    member.client.close()
    wait_until(lambda: cluster.describe_group("ops").state == "Empty", "the group empties")
    cli("groups", "reset-offsets", "--group", "ops", "--all-topics", "--to-earliest", "--execute")
    assert cluster.committed_offsets("ops") == {(TOPIC, 0): 0, (TOPIC, 1): 0}
    again = Tracked(consumer(group_broker, "ops", **{"auto.offset.reset": "latest"}))
    poll_until([again], lambda: len(again.seen) >= 40, "a new member starts where the reset put the group")
    assert sorted(again.seen.values()) == sorted(f"v{i}".encode() for i in range(40))
    again.client.close()


def test_a_member_that_stops_polling_leaves_and_its_partitions_move(
    group_broker: BrokerAgents, cluster: sparklog.Cluster
) -> None:
    create_led_topic(cluster, group_broker, TOPIC, PARTITIONS)
    produce(group_broker, 60)
    short = {"session.timeout.ms": 1000, "max.poll.interval.ms": 1500}
    idle = Tracked(consumer(group_broker, "poll-interval", **short))
    busy = Tracked(consumer(group_broker, "poll-interval", **short))
    poll_until([idle, busy], lambda: split_evenly([idle, busy]), "two members")
    # idle stops calling poll(): past max.poll.interval.ms its client leaves the group.
    poll_until([busy], lambda: busy.owned() == set(range(PARTITIONS)), "the idle member's partitions move")
    wait_until(lambda: len(cluster.describe_group("poll-interval").members) == 1, "one member published")
    idle.client.close()
    busy.client.close()


def test_one_membership_system_per_group(group_broker: BrokerAgents, cluster: sparklog.Cluster) -> None:
    create_led_topic(cluster, group_broker, TOPIC, 2)
    produce(group_broker, 10)
    zk_member = cluster.consumer("zk-only", **{"enable.auto.commit": False})
    zk_member.subscribe([TOPIC])
    wait_until(lambda: zk_member.poll(50, max_records=1) is not None and bool(zk_member.assignment()), "joined")
    kafka_member = Tracked(consumer(group_broker, "zk-only"))
    deadline = time.monotonic() + 30
    refused = None
    while refused is None and time.monotonic() < deadline:
        message = kafka_member.client.poll(0.1)
        if message is not None and message.error() is not None:
            refused = message.error()
    assert refused is not None and refused.code() == KafkaError.INCONSISTENT_GROUP_PROTOCOL
    assert not kafka_member.owned() and len(cluster.describe_group("zk-only").members) == 1
    kafka_member.client.close()
    zk_member.close()

    wire = Tracked(consumer(group_broker, "wire-only"))
    poll_until([wire], lambda: bool(wire.owned()), "a Kafka client group")
    wait_until(lambda: cluster.describe_group("wire-only").state == "Stable", "published")
    light = cluster.consumer("wire-only", **{"enable.auto.commit": False})
    with pytest.raises(sparklog.errors.InconsistentGroupProtocolError, match="coordinated by broker 1"):
        light.subscribe([TOPIC])
        light.poll(100)
    light.close()
    assert wire.owned() == {0, 1}
    wire.client.close()
