"""What a broker asks of its store (DESIGN §16), counted by a proxy in front of moto: a
commit round costs one PUT per new segment and one conditional PUT of the commit, never a
LIST, GET or HEAD (the leader trusts its own record of the table while it holds the
partition's write lease); an idle broker makes no requests at all."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer

import sparklog
from sparklog.testing import BrokerAgents
from sparklog.testing.metrics import scrape
from sparklog.testing.object_stores import MotoS3
from sparklog.testing.store_proxy import StoreProxy
from tests.helpers import in_threads, wait_until
from tests.wire.conftest import create_led_topic, started_brokers

TOPIC = "counted"
IDLE_WINDOW_S = 5.0  # a measurement window, not a wait for a condition


@pytest.fixture
def proxy(moto_s3: MotoS3, tmp_path: Path) -> Iterator[StoreProxy]:
    with StoreProxy(tmp_path / "proxy", moto_s3) as running:
        yield running


@pytest.fixture
def counted_broker(
    zk_connect: str, sparklog_home: Path, tmp_path: Path, proxy: StoreProxy, monkeypatch: pytest.MonkeyPatch
) -> Iterator[BrokerAgents]:
    """One broker whose log dir is a bucket reached through :class:`StoreProxy`."""
    bucket = f"counted-{uuid.uuid4().hex[:10]}"
    proxy.upstream.create_bucket(bucket)
    for name, value in proxy.environ().items():
        monkeypatch.setenv(name, value)
    log_store = f"s3://{bucket}/cluster"
    with started_brokers(zk_connect, sparklog_home, tmp_path, (1,), log_store=log_store, shared_log_dir=True) as agents:
        yield agents


def send_one_at_a_time(bootstrap: str, count: int, partitions: int = 1) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    for i in range(count):
        producer.produce(TOPIC, value=b"v%d" % i, partition=i % partitions)
        assert producer.flush(30) == 0


def counted_by_broker(agents: BrokerAgents) -> dict[str, float]:
    """The broker's own ``sparklog_store_requests_total`` by kind."""
    series = scrape(agents.metrics_url(1)).series("sparklog_store_requests_total")
    return {dict(labels)["kind"]: value for labels, value in series.items()}


def test_a_commit_round_is_two_puts_and_no_list(
    cluster: sparklog.Cluster, counted_broker: BrokerAgents, proxy: StoreProxy
) -> None:
    create_led_topic(cluster, counted_broker, TOPIC, partitions=1)
    send_one_at_a_time(counted_broker.bootstrap_servers, 3)  # the table and the leader warmed up
    proxy.reset()
    before = counted_by_broker(counted_broker)
    rounds = 20
    send_one_at_a_time(counted_broker.bootstrap_servers, rounds)
    counts = proxy.counts()
    after = counted_by_broker(counted_broker)
    reported = {kind: int(after[kind] - before.get(kind, 0)) for kind in after if after[kind] > before.get(kind, 0)}
    assert reported == counts, f"the broker's metrics {reported} != the proxy's count {counts}"
    print(f"store requests for {rounds} one-record rounds: {counts}")
    assert counts.get("LIST", 0) == 0, counts
    assert counts.get("PUT", 0) == rounds, f"one segment PUT a round: {counts}"
    assert counts.get("PUT_IF_ABSENT", 0) == rounds, f"one conditional PUT of the commit a round: {counts}"
    assert counts.get("GET", 0) == 0, f"the leader knows its own commits: nothing read back {counts}"
    assert counts.keys() == {"PUT", "PUT_IF_ABSENT"}, f"nothing probed before a commit: {counts}"


def test_an_idle_broker_makes_no_store_requests(
    cluster: sparklog.Cluster, counted_broker: BrokerAgents, proxy: StoreProxy
) -> None:
    create_led_topic(cluster, counted_broker, TOPIC, partitions=2)
    send_one_at_a_time(counted_broker.bootstrap_servers, 5)
    proxy.reset()
    time.sleep(IDLE_WINDOW_S)
    assert proxy.counts() == {}, "requests while idle"


def test_concurrent_rounds_of_several_partitions_read_nothing_back(
    cluster: sparklog.Cluster, counted_broker: BrokerAgents, proxy: StoreProxy
) -> None:
    partitions = 4
    create_led_topic(cluster, counted_broker, TOPIC, partitions=partitions)
    send_one_at_a_time(counted_broker.bootstrap_servers, 2 * partitions, partitions)  # every lease taken
    proxy.reset()

    def produce(partition: int) -> None:
        producer = Producer({"bootstrap.servers": counted_broker.bootstrap_servers, "acks": "all", "linger.ms": 0})
        for i in range(10):
            producer.produce(TOPIC, value=b"v%d" % i, partition=partition)
            assert producer.flush(30) == 0

    in_threads(produce, partitions)
    counts = proxy.counts()
    print(f"store requests for 4 × 10 concurrent one-record sends: {counts}")
    assert counts.keys() == {"PUT", "PUT_IF_ABSENT"}, f"nothing read, probed or refused: {counts}"


def test_an_idle_consumer_makes_no_store_requests(
    cluster: sparklog.Cluster, counted_broker: BrokerAgents, proxy: StoreProxy
) -> None:
    """A consumer at the end of an idle topic keeps fetching (long polls the broker holds
    until an append wakes them): none of that reaches the store."""
    create_led_topic(cluster, counted_broker, TOPIC, partitions=2)
    send_one_at_a_time(counted_broker.bootstrap_servers, 4, partitions=2)
    consumer = Consumer(
        {
            "bootstrap.servers": counted_broker.bootstrap_servers,
            "group.id": "idle-reader",
            "enable.auto.commit": False,  # an idle consumer's commits would be writes of its own
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 100,
        }
    )
    try:
        consumer.subscribe([TOPIC])
        got: list[bytes] = []

        def all_four() -> bool:
            got.extend(m.value() or b"" for m in consumer.consume(10, 0.2))
            return len(got) >= 4

        wait_until(all_four, "the 4 records")
        consumer.commit(asynchronous=False)
        proxy.reset()
        deadline = time.monotonic() + IDLE_WINDOW_S
        while time.monotonic() < deadline:
            assert not consumer.consume(10, 0.2), "nothing was produced"
    finally:
        consumer.close()
    assert proxy.counts() == {}, "requests while the consumer idled"
