"""The broker agent's Kafka-protocol listener, seen by real Kafka clients (confluent-kafka
/ librdkafka and kafka-python) and by a raw socket sending bad input.

Three real agents (:class:`sparklog.testing.BrokerAgents`), each on its own port; a topic with
replication factor 3. What the clients see must be what ``Cluster.describe_topic`` reports.
"""

from __future__ import annotations

import socket
import struct
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient, KafkaConsumer
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.metadata.v12.response import MetadataResponse
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.schema.types import TopicName
from kio.serial import entity_reader

import sparklog
from sparklog.broker.kafka.apis import API_VERSIONS
from sparklog.broker.kafka.metadata_api import topic_uuid
from sparklog.model.topic import TopicDescription
from sparklog.testing import BrokerAgents
from tests.helpers import wait_until
from tests.wire.raw import recv_frame, request_bytes, send_frame

TOPIC = "orders"
BROKERS = (1, 2, 3)
_TIMEOUT_S = 30.0


@pytest.fixture
def agents(zk_connect: str, sparklog_home: Path, tmp_path: Path) -> Iterator[BrokerAgents]:
    with BrokerAgents(zk_connect, sparklog_home, tmp_path / "brokers") as running:
        running.start(*BROKERS)
        yield running


def settled_topic(cluster: sparklog.Cluster, agents: BrokerAgents) -> TopicDescription:
    """The topic once every partition has a leader and a full ISR (and a controller exists)."""
    agents.wait_controller()

    def settled() -> TopicDescription | None:
        description = cluster.describe_topic(TOPIC)
        ok = all(p.leader >= 0 and sorted(p.isr) == sorted(p.replicas) for p in description.partitions)
        return description if ok else None

    return wait_until(settled, f"{TOPIC}: leaders and full ISRs")


# -- raw protocol ---------------------------------------------------------------------------
def raw_metadata(port: int, topics: list[str] | None = None, correlation_id: int = 7) -> MetadataResponse:
    body = MetadataRequest(
        topics=None
        if topics is None
        else tuple(MetadataRequestTopic(topic_id=None, name=TopicName(t)) for t in topics),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    with socket.create_connection(("127.0.0.1", port), timeout=_TIMEOUT_S) as sock:
        send_frame(sock, request_bytes(3, 12, correlation_id, body))
        payload = recv_frame(sock)
    header, size = entity_reader(ResponseHeaderV1)(payload, 0)
    assert header.correlation_id == correlation_id
    response, _ = entity_reader(MetadataResponse)(payload, size)
    return response


def assert_closed_by_broker(sock: socket.socket) -> None:
    """The broker closes the connection (EOF or reset) instead of answering."""
    sock.settimeout(_TIMEOUT_S)
    try:
        data = sock.recv(4096)
    except ConnectionResetError:
        return
    assert data == b"", f"expected the broker to close the connection, got {data!r}"


# -- tests ----------------------------------------------------------------------------------
def test_confluent_kafka_sees_what_describe_topic_reports(cluster: sparklog.Cluster, agents: BrokerAgents) -> None:
    cluster.create_topic(TOPIC, partitions=3, replication_factor=3)
    described = settled_topic(cluster, agents)
    admin = AdminClient({"bootstrap.servers": agents.bootstrap_servers})
    listing = admin.list_topics(timeout=_TIMEOUT_S)
    assert {b.id: (str(b.host), b.port) for b in listing.brokers.values()} == {
        b: ("127.0.0.1", agents.port(b)) for b in BROKERS
    }
    assert listing.controller_id == agents.controller()
    assert TOPIC in listing.topics and listing.topics[TOPIC].error is None
    seen = {
        p.id: (p.leader, sorted(p.replicas), sorted(p.isrs), p.error) for p in listing.topics[TOPIC].partitions.values()
    }
    assert seen == {p.partition: (p.leader, sorted(p.replicas), sorted(p.isr), None) for p in described.partitions}
    # A client that does not allow auto-creation gets UNKNOWN_TOPIC_OR_PARTITION (tests/wire/test_auto_create.py:
    # one that allows it creates the topic, auto.create.topics.enable being on by default, as in Kafka).
    strict = AdminClient({"bootstrap.servers": agents.bootstrap_servers, "allow.auto.create.topics": False})
    unknown = strict.list_topics(topic="no-such-topic", timeout=_TIMEOUT_S).topics["no-such-topic"]
    assert unknown.error is not None and unknown.error.code() == ErrorCode.unknown_topic_or_partition.value


def test_kafka_python_agrees(cluster: sparklog.Cluster, agents: BrokerAgents) -> None:
    cluster.create_topic(TOPIC, partitions=2, replication_factor=3)
    settled_topic(cluster, agents)
    admin = KafkaAdminClient(bootstrap_servers=agents.bootstrap_servers, request_timeout_ms=int(_TIMEOUT_S * 1000))
    try:
        described_cluster = admin.describe_cluster()
    finally:
        admin.close()
    assert sorted((b["broker_id"], b["host"], b["port"]) for b in described_cluster["brokers"]) == [
        (b, "127.0.0.1", agents.port(b)) for b in BROKERS
    ]
    assert described_cluster["controller_id"] == agents.controller()
    consumer = KafkaConsumer(bootstrap_servers=agents.bootstrap_servers, request_timeout_ms=int(_TIMEOUT_S * 1000))
    try:
        assert TOPIC in consumer.topics()
        assert consumer.partitions_for_topic(TOPIC) == set(cluster.partitions_of(TOPIC))
    finally:
        consumer.close()


def test_raw_metadata_topic_ids_and_topic_errors(cluster: sparklog.Cluster, agents: BrokerAgents) -> None:
    cluster.create_topic(TOPIC, partitions=1, replication_factor=3)
    described = settled_topic(cluster, agents)
    response = raw_metadata(agents.port(2), [TOPIC, "missing", "bad/name"])
    by_name = {str(t.name): t for t in response.topics}
    assert by_name[TOPIC].error_code == ErrorCode.none
    assert by_name[TOPIC].topic_id == topic_uuid(described.topic_id) != uuid.UUID(int=0)
    [partition] = by_name[TOPIC].partitions
    assert (partition.leader_id, partition.leader_epoch) == (
        described.partitions[0].leader,
        described.partitions[0].leader_epoch,
    )
    assert by_name["missing"].error_code == ErrorCode.unknown_topic_or_partition
    assert by_name["bad/name"].error_code == ErrorCode.invalid_topic_exception


def test_unsupported_api_versions_version_gets_a_v0_error_response(agents: BrokerAgents) -> None:
    with socket.create_connection(("127.0.0.1", agents.port(1)), timeout=_TIMEOUT_S) as sock:
        send_frame(sock, request_bytes(18, 99, 41))
        payload = recv_frame(sock)
    header, size = entity_reader(ResponseHeaderV0)(payload, 0)
    response, _ = entity_reader(ApiVersionsResponseV0)(payload, size)
    assert header.correlation_id == 41
    assert response.error_code == ErrorCode.unsupported_version
    advertised = {int(v.api_key): (int(v.min_version), int(v.max_version)) for v in response.api_keys}
    assert advertised == API_VERSIONS  # exactly what the broker serves
    assert advertised[18] == (0, 4) and advertised[3] == (0, 12)


def truncated_frame(sock: socket.socket) -> None:
    sock.sendall(struct.pack(">i", 100) + b"y" * 10)
    sock.shutdown(socket.SHUT_WR)


BAD_INPUTS: dict[str, Callable[[socket.socket], None]] = {
    "oversized frame": lambda sock: sock.sendall(struct.pack(">i", 104857600 + 1) + b"x" * 64),
    "truncated frame": truncated_frame,
    "unknown api key": lambda sock: send_frame(sock, request_bytes(9999, 0, 1)),
    "unserved metadata version": lambda sock: send_frame(sock, request_bytes(3, 99, 1)),
    "garbage body": lambda sock: send_frame(sock, struct.pack(">hhi", 3, 12, 1) + b"\xff" * 40),
    "http request": lambda sock: sock.sendall(b"GET / HTTP/1.1\r\nHost: broker\r\n\r\n"),
}


@pytest.mark.parametrize("bad_input", sorted(BAD_INPUTS))
def test_bad_input_closes_only_that_connection(cluster: sparklog.Cluster, agents: BrokerAgents, bad_input: str) -> None:
    cluster.create_topic(TOPIC, partitions=1, replication_factor=3)
    port = agents.port(3)
    with socket.create_connection(("127.0.0.1", port), timeout=_TIMEOUT_S) as bystander:
        with socket.create_connection(("127.0.0.1", port), timeout=_TIMEOUT_S) as offender:
            BAD_INPUTS[bad_input](offender)
            assert_closed_by_broker(offender)
        # An open connection made before the bad input still gets answers, in order.
        for correlation_id in (11, 12):
            send_frame(
                bystander,
                request_bytes(
                    3,
                    12,
                    correlation_id,
                    MetadataRequest(
                        topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
                    ),
                ),
            )
        for correlation_id in (11, 12):
            header, _ = entity_reader(ResponseHeaderV1)(recv_frame(bystander), 0)
            assert header.correlation_id == correlation_id
    assert agents.running(3)
    assert [t.name for t in raw_metadata(port).topics] == [TOPIC]


def test_requests_before_a_bad_one_are_answered_before_the_close(
    cluster: sparklog.Cluster, agents: BrokerAgents
) -> None:
    """Answers and the failure of one connection reach its network thread together; the
    answers of the requests before the bad one still go out, in order, then the close."""
    cluster.create_topic(TOPIC, partitions=1, replication_factor=3)
    metadata = MetadataRequest(topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    with socket.create_connection(("127.0.0.1", agents.port(3)), timeout=_TIMEOUT_S) as sock:
        frames = [request_bytes(3, 12, correlation_id, metadata) for correlation_id in (21, 22, 23)]
        frames.append(struct.pack(">hhi", 3, 12, 24) + b"\xff" * 40)  # an unreadable Metadata request
        sock.sendall(b"".join(struct.pack(">i", len(frame)) + frame for frame in frames))
        answered = [entity_reader(ResponseHeaderV1)(recv_frame(sock), 0)[0].correlation_id for _ in range(3)]
        assert answered == [21, 22, 23]
        assert_closed_by_broker(sock)
