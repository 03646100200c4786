"""OffsetForLeaderEpoch (KIP-320) after a failover: where each leader epoch ends, as the
partition's leader answers it from the controller's epoch history, every served version raw,
and librdkafka's consumer validating its position with it against the new leader (no
truncation reported, nothing skipped or read twice)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32

import sparklog
from sparklog.metadata.broker_registration import BrokerRegistration
from sparklog.metadata.zkdata import BrokerRecord
from sparklog.testing import BrokerAgents
from sparklog.testing.metrics import scrape
from tests.helpers import wait_until
from tests.wire import raw
from tests.wire.conftest import produce_confirmed, started_brokers
from tests.wire.test_partition_admin import leader, raw_request, served

TOPIC = "epochs"
_TIMEOUT_S = 60.0


@pytest.fixture
def agents(zk_connect: str, sparklog_home: Path, tmp_path: Path) -> Iterator[BrokerAgents]:
    with started_brokers(zk_connect, sparklog_home, tmp_path, (1, 2, 3), replica_lag_time_max_ms=2_000) as running:
        yield running


def end_of_epoch(port: int, version: int, leader_epoch: int, current_leader_epoch: int = -1) -> tuple[int, int, int]:
    """(error code, epoch, end offset) that the broker at ``port`` answers for partition 0."""
    asked = raw_request(
        23,
        version,
        "OffsetForLeaderPartition",
        partition=i32(0),
        current_leader_epoch=i32(current_leader_epoch),
        leader_epoch=i32(leader_epoch),
    )
    topics = (raw_request(23, version, "OffsetForLeaderTopic", topic=TOPIC, partitions=(asked,)),)
    [result] = raw.call(port, raw_request(23, version, replica_id=i32(-1), topics=topics)).topics
    [answer] = result.partitions
    assert (result.topic, answer.partition) == (TOPIC, 0)
    return int(answer.error_code), int(answer.leader_epoch), int(answer.end_offset)


def consume(consumer: Consumer, count: int) -> list[str]:
    values: list[str] = []

    def received() -> bool:
        batch = consumer.consume(count - len(values), 0.5)
        values.extend((m.value() or b"").decode() for m in batch if not m.error())
        return len(values) >= count

    wait_until(received, f"{count} records consumed", timeout_s=_TIMEOUT_S)
    return values


def test_each_epoch_ends_where_the_next_began_and_a_consumer_validates_across_a_failover(
    agents: BrokerAgents, cluster: sparklog.Cluster
) -> None:
    cluster.create_topic(TOPIC, replica_assignment={0: [1, 2]})
    wait_until(lambda: leader(cluster, TOPIC, 0) == 1, "broker 1 leads")
    produce_confirmed(agents.bootstrap_servers, TOPIC, [f"a{i}" for i in range(5)])
    first = cluster.replicas.states(TOPIC, [0])[0].leader_epoch
    for v in served(23):
        assert end_of_epoch(agents.port(1), v, first, first) == (ErrorCode.none, first, 5)
        assert end_of_epoch(agents.port(1), v, first + 1) == (ErrorCode.none, -1, -1), "no such epoch yet"
        assert end_of_epoch(agents.port(2), v, first)[0] == ErrorCode.not_leader_or_follower

    consumer = Consumer(
        {"bootstrap.servers": agents.bootstrap_servers, "group.id": "validating", "enable.auto.commit": False}
    )
    try:
        consumer.assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)])
        assert consume(consumer, 5) == [f"a{i}" for i in range(5)]  # from the leader's tail: epoch-stamped
        agents.kill(1)
        wait_until(lambda: leader(cluster, TOPIC, 0) == 2, "broker 2 leads", timeout_s=_TIMEOUT_S)
        state = cluster.replicas.states(TOPIC, [0])[0]
        second = state.leader_epoch
        assert second > first and state.epochs[-1] == [second, 5], state
        produce_confirmed(agents.bootstrap_servers, TOPIC, [f"b{i}" for i in range(3)])
        for v in served(23):
            assert end_of_epoch(agents.port(2), v, first) == (ErrorCode.none, first, 5), "epoch 0 ended at 5"
            assert end_of_epoch(agents.port(2), v, second, second) == (ErrorCode.none, second, 8)
            assert end_of_epoch(agents.port(2), v, first, first)[0] == ErrorCode.fenced_leader_epoch
            assert end_of_epoch(agents.port(2), v, second, second + 1)[0] == ErrorCode.unknown_leader_epoch
        # librdkafka validates its position (epoch `first`) with the new leader before fetching.
        assert consume(consumer, 3) == [f"b{i}" for i in range(3)]
    finally:
        consumer.close()
    asked = scrape(agents.metrics_url(2)).total(
        "kafka_network_requestmetrics_requests_total", request="OffsetForLeaderEpoch"
    )
    raw_calls = 4 * len(served(23))
    assert asked > raw_calls, f"the consumer asked broker 2 for its epoch's end ({asked} requests, {raw_calls} raw)"


def test_a_leader_no_node_answers_for_is_no_leader(
    zk_connect: str, sparklog_home: Path, tmp_path: Path, cluster: sparklog.Cluster
) -> None:
    """Metadata never names a leader it lists no node for (a client cannot reach it and, as
    Kafka's Java consumer does, may wait out metadata.max.age.ms before asking again): as
    Kafka's metadata cache answers, a leader without this listener is LISTENER_NOT_FOUND and one
    that is gone LEADER_NOT_AVAILABLE, leader -1 both, a gone broker's replica listed offline."""
    with started_brokers(zk_connect, sparklog_home, tmp_path, (1,)) as agents:
        log_dir = str(tmp_path / "broker-7")
        cluster.replicas.metadata.register_broker(7, log_dir, None)
        seven = BrokerRegistration(cluster.replicas.zk, 7, BrokerRecord(log_dir=log_dir))  # live, no listener
        seven.register()
        try:
            cluster.create_topic("nodeless", replica_assignment={0: [7], 1: [1]})
            for v in (1, 9, 12):
                assert metadata(agents.port(1), v, "nodeless") == {
                    0: (ErrorCode.listener_not_found, -1, (7,), ()),
                    1: (ErrorCode.none, 1, (1,), ()),
                }, f"Metadata v{v}"
        finally:
            seven.close()
        gone = {0: (ErrorCode.leader_not_available, -1, (7,), (7,)), 1: (ErrorCode.none, 1, (1,), ())}
        wait_until(lambda: metadata(agents.port(1), 12, "nodeless") == gone, "broker 7 gone")


def metadata(port: int, version: int, topic: str) -> dict[int, tuple[int, int, tuple[int, ...], tuple[int, ...]]]:
    """Per partition of ``topic``: (error code, leader, replicas, offline replicas) as answered."""
    asked = (raw_request(3, version, "MetadataRequestTopic", name=topic, topic_id=None),)
    response = raw.call(
        port,
        raw_request(
            3,
            version,
            topics=asked,
            allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        ),
    )
    [answer] = response.topics
    return {
        p.partition_index: (
            int(p.error_code),
            p.leader_id,
            tuple(p.replica_nodes),
            tuple(getattr(p, "offline_replicas", ())),
        )  # v5+
        for p in answer.partitions
    }
