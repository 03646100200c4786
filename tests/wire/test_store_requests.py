"""What a broker asks of its store (DESIGN §16), counted by a proxy in front of moto: a
commit round costs one PUT per new segment and one conditional PUT of the commit, never a
LIST and no GET (the leader knows its own commits); an idle broker makes no requests at
all. (HEADs probing for newer commits remain: counted and printed, not yet budgeted.)"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

import sparklog
from sparklog.testing import BrokerAgents
from sparklog.testing.object_stores import MotoS3
from sparklog.testing.store_proxy import CountingProxy
from tests.wire.conftest import create_led_topic, started_brokers

TOPIC = "counted"
IDLE_WINDOW_S = 5.0  # a measurement window, not a wait for a condition


@pytest.fixture
def proxy(moto_s3: MotoS3, tmp_path: Path) -> Iterator[CountingProxy]:
    with CountingProxy(tmp_path / "proxy", moto_s3) as running:
        yield running


@pytest.fixture
def counted_broker(
    zk_connect: str, sparklog_home: Path, tmp_path: Path, proxy: CountingProxy, monkeypatch: pytest.MonkeyPatch
) -> Iterator[BrokerAgents]:
    """One broker whose log dir is a bucket reached through :class:`CountingProxy`."""
    bucket = f"counted-{uuid.uuid4().hex[:10]}"
    proxy.upstream.create_bucket(bucket)
    for name, value in proxy.environ().items():
        monkeypatch.setenv(name, value)
    log_store = f"s3://{bucket}/cluster"
    with started_brokers(zk_connect, sparklog_home, tmp_path, (1,), log_store=log_store, shared_log_dir=True) as agents:
        yield agents


def send_one_at_a_time(bootstrap: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    for i in range(count):
        producer.produce(TOPIC, value=b"v%d" % i, partition=0)
        assert producer.flush(30) == 0


def test_a_commit_round_is_two_puts_and_no_list(
    cluster: sparklog.Cluster, counted_broker: BrokerAgents, proxy: CountingProxy
) -> None:
    create_led_topic(cluster, counted_broker, TOPIC, partitions=1)
    send_one_at_a_time(counted_broker.bootstrap_servers, 3)  # the table and the leader warmed up
    proxy.reset()
    rounds = 20
    send_one_at_a_time(counted_broker.bootstrap_servers, rounds)
    counts = proxy.counts()
    print(f"store requests for {rounds} one-record rounds: {counts}")
    assert counts.get("LIST", 0) == 0, counts
    assert counts.get("PUT", 0) == rounds, f"one segment PUT a round: {counts}"
    assert counts.get("PUT_IF_ABSENT", 0) == rounds, f"one conditional PUT of the commit a round: {counts}"
    assert counts.get("GET", 0) == 0, f"the leader knows its own commits: nothing read back {counts}"


def test_an_idle_broker_makes_no_store_requests(
    cluster: sparklog.Cluster, counted_broker: BrokerAgents, proxy: CountingProxy
) -> None:
    create_led_topic(cluster, counted_broker, TOPIC, partitions=2)
    send_one_at_a_time(counted_broker.bootstrap_servers, 5)
    proxy.reset()
    time.sleep(IDLE_WINDOW_S)
    assert proxy.counts() == {}, "requests while idle"
