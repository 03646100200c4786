"""Kafka's ``auto.create.topics.enable``: a producer's Metadata request for an unknown topic
creates it with the broker defaults (``num.partitions``, ``default.replication.factor``),
unless the broker's config says false."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer

import sparklog
from sparklog.testing import BrokerAgents

TOPIC = "wire-auto"


def agents_with(zk_connect: str, home: Path, base: Path, **properties: str) -> BrokerAgents:
    return BrokerAgents(zk_connect, home, base, properties=properties)


@pytest.fixture
def auto_create_broker(zk_connect: str, sparklog_home: Path, tmp_path: Path) -> Iterator[BrokerAgents]:
    with agents_with(zk_connect, sparklog_home, tmp_path / "b", **{"num.partitions": "3"}) as running:
        running.start(1)
        running.wait_controller()
        yield running


@pytest.fixture
def no_auto_create_broker(zk_connect: str, sparklog_home: Path, tmp_path: Path) -> Iterator[BrokerAgents]:
    with agents_with(zk_connect, sparklog_home, tmp_path / "b", **{"auto.create.topics.enable": "false"}) as running:
        running.start(1)
        running.wait_controller()
        yield running


def test_a_producer_creates_an_unknown_topic_with_the_broker_defaults(
    cluster: sparklog.Cluster, auto_create_broker: BrokerAgents
) -> None:
    producer = Producer({"bootstrap.servers": auto_create_broker.bootstrap_servers})
    reports: list[object] = []
    producer.produce(TOPIC, value=b"first", on_delivery=lambda err, msg: reports.append(err or msg.offset()))
    assert producer.flush(60) == 0
    assert reports == [0]
    assert len(cluster.describe_topic(TOPIC).partitions) == 3
    assert [r["value"] for r in cluster.read(TOPIC).to_pylist()] == [b"first"]


def test_with_auto_creation_off_the_topic_stays_unknown(
    cluster: sparklog.Cluster, no_auto_create_broker: BrokerAgents
) -> None:
    producer = Producer({"bootstrap.servers": no_auto_create_broker.bootstrap_servers, "message.timeout.ms": 3000})
    errors: list[KafkaError | None] = []
    producer.produce(TOPIC, value=b"lost", on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(30)
    assert len(errors) == 1 and errors[0] is not None
    assert errors[0].code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._MSG_TIMED_OUT)
    assert TOPIC not in cluster.list_topics()
