"""A broker keeps the write leases of the partitions it leads between its commits; other
writers of the same partition (a light producer here, Spark jobs alike) get the lease as soon
as they ask: the broker lets go after its current commit instead of when the lease expires
(``writer.lease.ms``, set far above the clients' ``max.block.ms`` below), and takes it back
for its next commit. Offsets stay unique and contiguous across both."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Producer

import sparklog
from sparklog.metadata import zkdata
from sparklog.metadata.zkdata import WriterLeaseRecord
from sparklog.testing import BrokerAgents
from tests.helpers import assert_log_consistent
from tests.wire.conftest import create_led_topic

TOPIC = "wire-shared"


@pytest.fixture
def long_lease_broker(zk_connect: str, sparklog_home: Path, tmp_path: Path):  # type: ignore[no-untyped-def]
    with BrokerAgents(
        zk_connect, sparklog_home, tmp_path / "brokers", properties={"writer.lease.ms": "600000"}
    ) as running:
        running.start(1)
        running.wait_controller()
        yield running


def kafka_send(bootstrap: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for value in values:
        producer.produce(TOPIC, value=value, partition=0)
        producer.flush(30)  # one request each: the broker commits (and keeps the lease) every time
    assert len(producer) == 0


def test_the_broker_hands_its_held_lease_to_another_writer_at_once(
    cluster: sparklog.Cluster, long_lease_broker: BrokerAgents
) -> None:
    create_led_topic(cluster, long_lease_broker, TOPIC, partitions=1)
    bootstrap = long_lease_broker.bootstrap_servers
    kafka_send(bootstrap, [b"k0", b"k1"])
    path = zkdata.writer_path(TOPIC, 0)
    holder = WriterLeaseRecord.decode(cluster.replicas.zk.client.get(path)[0], path)
    assert (holder.owner, holder.released) == ("broker-1", False)  # kept between its commits
    with cluster.producer(acks="1", **{"max.block.ms": "5000", "delivery.timeout.ms": "10000"}) as light:
        light.send(TOPIC, b"light", partition=0).result(timeout=20)
    kafka_send(bootstrap, [b"k2"])
    with cluster.producer(acks="1", **{"max.block.ms": "5000", "delivery.timeout.ms": "10000"}) as light:
        light.send(TOPIC, b"light2", partition=0).result(timeout=20)
    records = assert_log_consistent(cluster, TOPIC)
    assert [r.value for r in records] == [b"k0", b"k1", b"light", b"k2", b"light2"]
