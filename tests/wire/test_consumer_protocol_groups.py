"""Kafka's consumer group protocol (KIP-848: ConsumerGroupHeartbeat, ConsumerGroupDescribe) on a
sparklog broker, with Kafka 4's own Java consumer (``group.protocol=consumer``,
``tests/jvm/ConsumerGroupMember.java``), librdkafka's, and Kafka's ``kafka-consumer-groups``.

Members join and share a topic's partitions, a member killed -9 has its partitions moved after
the session timeout, and across every move a partition is owned by one member at a time (the
broker hands a partition over only once its owner revoked it), committed offsets carry on, and
no record is lost. One group is one group: a group id in use under one protocol refuses the
other's members."""

from __future__ import annotations

import collections
import datetime
import itertools
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from kio.schema.consumer_group_describe.v1.request import ConsumerGroupDescribeRequest
from kio.schema.consumer_group_heartbeat.v1.request import ConsumerGroupHeartbeatRequest
from kio.schema.errors import ErrorCode
from kio.schema.join_group.v9.request import JoinGroupRequest, JoinGroupRequestProtocol
from kio.schema.offset_commit.v9.request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from kio.schema.offset_fetch.v9.request import OffsetFetchRequest, OffsetFetchRequestGroup, OffsetFetchRequestTopics
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i32, i32Timedelta, i64

import sparklog
from sparklog.broker.kafka.metadata_api import topic_uuid
from sparklog.testing import BrokerAgents, KafkaTools
from tests.helpers import wait_until
from tests.wire.conftest import GROUP_PROPERTIES, create_led_topic, produce_confirmed, started_brokers
from tests.wire.raw import call

TOPIC, GROUP = "kip848-events", "kip848-group"
PARTITIONS = 6
SESSION_MS = 6000
TEN_S = datetime.timedelta(seconds=10)
# Short heartbeats and sessions (Kafka's defaults are 5 s and 45 s) keep the moves quick.
PROPERTIES = {
    **GROUP_PROPERTIES,
    "group.consumer.heartbeat.interval.ms": "500",
    "group.consumer.session.timeout.ms": str(SESSION_MS),
}


@pytest.fixture
def kip848_broker(
    zk_connect: str, sparklog_home: Path, tmp_path: Path, log_store: str | None
) -> Iterator[BrokerAgents]:
    with started_brokers(
        zk_connect, sparklog_home, tmp_path, (1,), properties=PROPERTIES, log_store=log_store
    ) as agents:
        yield agents


@dataclass
class Ownership:
    """One member's hold on a partition: from its ASSIGNED to its REVOKED/LOST (or its death)."""

    start_ms: int
    end_ms: int | None = None


@dataclass
class Member:
    """A ``ConsumerGroupMember.java`` process and what it printed."""

    name: str
    log: Path
    process: subprocess.Popen[bytes]
    killed_ms: int | None = None
    records: list[tuple[str, int, str]] = field(default_factory=list)  # partition, offset, value

    def lines(self) -> list[list[str]]:
        # The member's own lines start with a millisecond count (the client's log lines do not).
        rows = [line.split() for line in self.log.read_text().splitlines()]
        return [words for words in rows if len(words) >= 2 and words[0].isdigit()]

    def owned(self) -> dict[str, list[Ownership]]:
        held: dict[str, list[Ownership]] = collections.defaultdict(list)
        for words in self.lines():
            ms, what = int(words[0]), words[1]
            if what == "ASSIGNED":
                held[words[2]].append(Ownership(ms))
            elif what in ("REVOKED", "LOST") and held[words[2]] and held[words[2]][-1].end_ms is None:
                held[words[2]][-1].end_ms = ms
        if self.killed_ms is not None:
            for spans in held.values():
                if spans and spans[-1].end_ms is None:
                    spans[-1].end_ms = self.killed_ms
        return held

    def current(self) -> set[str]:
        return {p for p, spans in self.owned().items() if spans and spans[-1].end_ms is None}

    def consumed(self, since_ms: int = 0) -> list[tuple[str, int, str]]:
        return [(w[2], int(w[3]), w[4]) for w in self.lines() if w[1] == "RECORD" and int(w[0]) >= since_ms]

    def committed_partitions(self) -> set[str]:
        """Partitions of which a record was printed before some COMMITTED line."""
        done: set[str] = set()
        seen: set[str] = set()
        for words in self.lines():
            if words[1] == "RECORD":
                seen.add(words[2])
            elif words[1] == "COMMITTED":
                done |= seen
        return done


@pytest.fixture
def members(kip848_broker: BrokerAgents, tmp_path: Path) -> Iterator[list[Member]]:
    started: list[Member] = []
    yield started
    for member in started:
        if member.process.poll() is None:
            member.process.kill()
            member.process.wait(30)


def start_member(
    members: list[Member], bootstrap: str, name: str, tmp_path: Path, group: str = GROUP, protocol: str = "consumer"
) -> Member:
    log = tmp_path / f"{name}.log"
    command = KafkaTools().command("ConsumerGroupMember", bootstrap, group, TOPIC, name, protocol)
    with log.open("w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    member = Member(name, log, process)
    members.append(member)
    return member


def produce(bootstrap: str, first: int, count: int) -> set[str]:
    """Values ``first``.. ``first + count - 1`` written to ``TOPIC``, each delivery confirmed."""
    return produce_confirmed(bootstrap, TOPIC, (str(i) for i in range(first, first + count)))


def kill(member: Member) -> None:
    member.process.send_signal(signal.SIGKILL)
    member.process.wait(30)
    # Its ownership ends when it died: nothing it printed comes later.
    member.killed_ms = max([int(w[0]) for w in member.lines()], default=0) + 1


def assert_one_owner_at_a_time(members: list[Member]) -> None:
    spans = [(p, o, m.name) for m in members for p, owned in m.owned().items() for o in owned]
    for partition in {p for p, _, _ in spans}:
        held = sorted((o.start_ms, o.end_ms, name) for p, o, name in spans if p == partition)
        for (start, end, name), (next_start, _, next_name) in itertools.pairwise(held):
            assert end is not None and end <= next_start, (
                f"{partition}: {name} held it from {start} to {end}, {next_name} got it at {next_start}"
            )


def test_java_consumers_share_partitions_across_joins_and_a_kill(
    cluster: sparklog.Cluster, kip848_broker: BrokerAgents, members: list[Member], tmp_path: Path
) -> None:
    bootstrap = kip848_broker.bootstrap_servers
    create_led_topic(cluster, kip848_broker, TOPIC, partitions=PARTITIONS)
    sent = produce(bootstrap, 0, 300)
    first = start_member(members, bootstrap, "member-a", tmp_path)
    wait_until(lambda: len(first.current()) == PARTITIONS, "member-a owns every partition", timeout_s=90)
    wait_until(lambda: len(first.consumed()) >= 100, "member-a consumes", timeout_s=60)
    second = start_member(members, bootstrap, "member-b", tmp_path)
    third = start_member(members, bootstrap, "member-c", tmp_path)

    def balanced() -> bool:
        held = [m.current() for m in (first, second, third)]
        return all(len(h) == 2 for h in held) and len(set().union(*held)) == PARTITIONS

    wait_until(balanced, "the partitions spread over three members", timeout_s=90)
    assert_one_owner_at_a_time(members)
    sent |= produce(bootstrap, 300, 300)
    wait_until(lambda: second.committed_partitions() == second.current(), "member-b commits", timeout_s=60)
    moved = second.current()
    kill(second)
    # After the session timeout the broker takes member-b's partitions to the others.
    wait_until(
        lambda: first.current() | third.current() == {f"{TOPIC}-{p}" for p in range(PARTITIONS)},
        "member-b's partitions moved to the others",
        timeout_s=SESSION_MS / 1000 + 60,
    )
    sent |= produce(bootstrap, 600, 300)
    seen = lambda: {v for m in members for _, _, v in m.consumed()}  # noqa: E731
    wait_until(lambda: sent <= seen(), "every record consumed", timeout_s=90)
    assert_one_owner_at_a_time(members)
    # member-b's committed offsets carried on: its successors resumed where it had committed
    # (not from the start, and without a gap after what it had read).
    assert second.killed_ms is not None
    for partition in moved:
        before = [o for p, o, _ in second.consumed() if p == partition]
        after = [o for m in (first, third) for p, o, _ in m.consumed(second.killed_ms) if p == partition]
        assert after and 0 < min(after) <= max(before) + 1, f"{partition}: read {before[-3:]}, then {after[:3]}"
    tools = KafkaTools()

    def described() -> str | None:
        args = ("--bootstrap-server", bootstrap, "--describe", "--group", GROUP, "--members")
        out = tools.run("kafka-consumer-groups", *args).stdout
        return out if "member-a" in out and "member-c" in out and "member-b" not in out else None

    shown = wait_until(
        described, "kafka-consumer-groups --describe --members shows member-a and member-c", timeout_s=60
    )
    assert GROUP in shown
    # sparklog's own tools (``sparklog groups --list/--describe``) see the group and its members.
    assert GROUP in {g.group_id for g in cluster.list_groups()}

    def published() -> bool:
        description = cluster.describe_group(GROUP)
        owners = {m.client_id: {f"{t}-{p}" for t, p in m.partitions} for m in description.members}
        expected = {"member-a": first.current(), "member-c": third.current()}
        return description.state == "Stable" and description.protocol == "uniform" and owners == expected

    wait_until(published, "sparklog's describe_group shows member-a and member-c with their partitions")


def test_groups_of_both_protocols_are_listed_and_kept_apart(
    cluster: sparklog.Cluster, kip848_broker: BrokerAgents, members: list[Member], tmp_path: Path
) -> None:
    bootstrap = kip848_broker.bootstrap_servers
    create_led_topic(cluster, kip848_broker, TOPIC, partitions=2)
    produce(bootstrap, 0, 20)
    member = start_member(members, bootstrap, "member-a", tmp_path)
    wait_until(lambda: len(member.consumed()) == 20, "the consumer-protocol member consumes", timeout_s=90)
    classic = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "kip848-classic",
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
        }
    )
    classic.subscribe([TOPIC])
    got: list[object] = []

    def classic_consumed() -> bool:
        got.extend(classic.consume(20, timeout=0.5))
        return len(got) >= 20

    wait_until(classic_consumed, "the classic member consumes")
    classic.commit(asynchronous=False)
    port = int(bootstrap.rsplit(":", 1)[1])
    # One group is one group: each protocol's members are refused by a group of the other.
    join = JoinGroupRequest(
        group_id=GroupId(GROUP),
        session_timeout=i32Timedelta.parse(TEN_S),
        rebalance_timeout=i32Timedelta.parse(TEN_S),
        member_id="",
        group_instance_id=None,
        protocol_type="consumer",
        protocols=(JoinGroupRequestProtocol(name="range", metadata=b""),),
        reason=None,
    )
    assert call(port, join).error_code is ErrorCode.inconsistent_group_protocol
    heartbeat = ConsumerGroupHeartbeatRequest(
        group_id=GroupId("kip848-classic"),
        member_id="raw-member",
        member_epoch=i32(0),
        rebalance_timeout=i32Timedelta.parse(TEN_S),
        subscribed_topic_names=(TopicName(TOPIC),),
        topic_partitions=(),
    )
    assert call(port, heartbeat).error_code is ErrorCode.group_id_not_found
    tools = KafkaTools()
    listed = tools.run("kafka-consumer-groups", "--bootstrap-server", bootstrap, "--list", "--type").check().stdout
    rows = {line.split()[0]: line.split() for line in listed.splitlines()[1:] if line.strip()}
    assert rows[GROUP][1].lower() == "consumer" and rows["kip848-classic"][1].lower() == "classic", listed
    classic.close()


def commit_at(port: int, group: str, member_id: str, epoch: int, offset: int) -> ErrorCode:
    """One OffsetCommit v9 of ``TOPIC``-0 by ``member_id`` at ``epoch``; its error code."""
    request = OffsetCommitRequest(
        group_id=GroupId(group),
        generation_id_or_member_epoch=i32(epoch),
        member_id=member_id,
        group_instance_id=None,
        topics=(
            OffsetCommitRequestTopic(
                name=TopicName(TOPIC),
                partitions=(
                    OffsetCommitRequestPartition(
                        partition_index=i32(0),
                        committed_offset=i64(offset),
                        committed_leader_epoch=i32(-1),
                        committed_metadata=None,
                    ),
                ),
            ),
        ),
    )
    return call(port, request).topics[0].partitions[0].error_code


def fetch_at(port: int, group: str, member_id: str, epoch: int) -> tuple[ErrorCode, int]:
    """One OffsetFetch v9 of ``TOPIC``-0 by ``member_id`` at ``epoch``: (group error, offset)."""
    request = OffsetFetchRequest(
        groups=(
            OffsetFetchRequestGroup(
                group_id=GroupId(group),
                member_id=member_id,
                member_epoch=i32(epoch),
                topics=(OffsetFetchRequestTopics(name=TopicName(TOPIC), partition_indexes=(i32(0),)),),
            ),
        ),
    )
    answer = call(port, request).groups[0]
    offset = answer.topics[0].partitions[0].committed_offset if answer.topics else -1
    return answer.error_code, int(offset)


def test_offsets_and_describe_follow_member_epochs(cluster: sparklog.Cluster, kip848_broker: BrokerAgents) -> None:
    """OffsetCommit/OffsetFetch v9 with member ids and epochs, and ConsumerGroupDescribe, for a
    member that speaks the protocol by hand (raw requests)."""
    port = int(kip848_broker.bootstrap_servers.rsplit(":", 1)[1])
    create_led_topic(cluster, kip848_broker, TOPIC, partitions=2)
    group = "kip848-raw"
    join = ConsumerGroupHeartbeatRequest(
        group_id=GroupId(group),
        member_id="raw-member",
        member_epoch=i32(0),
        rebalance_timeout=i32Timedelta.parse(TEN_S),
        subscribed_topic_names=(TopicName(TOPIC),),
        server_assignor="range",
        topic_partitions=(),
    )
    joined = call(port, join)
    assert joined.error_code is ErrorCode.none, joined
    epoch = int(joined.member_epoch)
    assert epoch > 0 and joined.heartbeat_interval.total_seconds() == 0.5
    topic_id = cluster.replicas.topic_id(TOPIC)
    assert [(str(t.topic_id), sorted(t.partitions)) for t in joined.assignment.topic_partitions] == [
        (str(topic_uuid(topic_id)), [0, 1])
    ]
    assert commit_at(port, group, "raw-member", epoch, 7) is ErrorCode.none
    assert commit_at(port, group, "raw-member", epoch + 1, 8) is ErrorCode.stale_member_epoch
    assert commit_at(port, group, "someone-else", epoch, 9) is ErrorCode.unknown_member_id
    assert fetch_at(port, group, "raw-member", epoch) == (ErrorCode.none, 7)
    assert fetch_at(port, group, "raw-member", epoch + 1)[0] is ErrorCode.stale_member_epoch
    described = call(
        port, ConsumerGroupDescribeRequest(group_ids=(GroupId(group),), include_authorized_operations=False)
    )
    (view,) = described.groups
    assert view.error_code is ErrorCode.none and view.group_state == "Stable" and view.assignor_name == "range"
    (member,) = view.members
    assert member.member_id == "raw-member" and member.member_epoch == epoch
    assert [(t.topic_name, sorted(t.partitions)) for t in member.assignment.topic_partitions] == [(TOPIC, [0, 1])]
    left = call(port, replace(join, member_epoch=i32(-1), topic_partitions=None))
    assert left.error_code is ErrorCode.none and left.member_epoch == -1
    after = call(port, ConsumerGroupDescribeRequest(group_ids=(GroupId(group),), include_authorized_operations=False))
    assert after.groups[0].error_code is ErrorCode.group_id_not_found
    assert commit_at(port, group, "", -1, 10) is ErrorCode.none  # a standalone commit: the group is empty


def test_librdkafka_consumers_with_the_consumer_protocol(
    cluster: sparklog.Cluster, kip848_broker: BrokerAgents
) -> None:
    """librdkafka (confluent-kafka) with ``group.protocol=consumer``: two members split the
    partitions, every record is consumed once, and the commits are fetched back."""
    bootstrap = kip848_broker.bootstrap_servers
    create_led_topic(cluster, kip848_broker, TOPIC, partitions=4)
    sent = produce(bootstrap, 0, 200)
    group = "kip848-librdkafka"
    settings = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer"}
    consumers = [Consumer({**settings, "auto.offset.reset": "earliest", "enable.auto.commit": False}) for _ in "ab"]
    for consumer in consumers:
        consumer.subscribe([TOPIC])
    seen: list[tuple[int, str]] = []  # consumer index, value

    def split_and_done() -> bool:
        for index, consumer in enumerate(consumers):
            for message in consumer.consume(50, timeout=0.2):
                assert message.error() is None, message.error()
                value = message.value()
                assert value is not None
                seen.append((index, value.decode()))
                consumer.commit(message=message, asynchronous=False)
        owned = [{tp.partition for tp in c.assignment()} for c in consumers]
        return len(seen) >= len(sent) and all(owned) and not owned[0] & owned[1]

    wait_until(split_and_done, "two librdkafka members share the partitions and consume everything", timeout_s=90)
    assert sorted(v for _, v in seen) == sorted(sent), "each record consumed exactly once"
    for consumer in consumers:
        consumer.close()
    checker = Consumer({**settings, "group.protocol": "classic"})
    committed = checker.committed([TopicPartition(TOPIC, p) for p in range(4)], timeout=30)
    assert sum(tp.offset for tp in committed) == len(sent)
    checker.close()
