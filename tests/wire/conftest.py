"""Fixtures for tests that reach broker agents through the Kafka protocol with real clients."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

import sparklog
from sparklog.metadata.transactions import COMPLETE_ABORT, COMPLETE_COMMIT, TransactionStore
from sparklog.model.group_ids import offsets_partition_for
from sparklog.model.topic import OFFSETS_TOPIC
from sparklog.testing import BrokerAgents
from sparklog.testing.store_proxy import StoreProxy
from tests.helpers import wait_until

_TIMEOUT_S = 30.0
# Brokers for consumer-group tests: no initial rebalance delay (Kafka's 3 s would dominate every
# test; Kafka's own test configs use 0), short sessions allowed, a small offsets topic.
GROUP_PROPERTIES = {
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "500",
    "offsets.topic.num.partitions": "3",
}


@contextlib.contextmanager
def started_brokers(
    zk_connect: str, home: Path, tmp_path: Path, broker_ids: tuple[int, ...], **options: Any
) -> Iterator[BrokerAgents]:
    """Broker agents ``broker_ids`` started (``options``: :class:`BrokerAgents`'), with a controller."""
    with BrokerAgents(zk_connect, home, tmp_path / "brokers", **options) as agents:
        agents.start(*broker_ids)
        agents.wait_controller()
        yield agents


def replicated_offsets_brokers(
    zk_connect: str, home: Path, tmp_path: Path, properties: Mapping[str, str]
) -> contextlib.AbstractContextManager[BrokerAgents]:
    """Brokers 1, 2 and 3 with ``properties``, ``__consumer_offsets`` on all three (a group's
    coordinator can be killed and another take its groups over) and a short replica lag."""
    return started_brokers(
        zk_connect,
        home,
        tmp_path,
        (1, 2, 3),
        replica_lag_time_max_ms=3_000,
        properties={**properties, "offsets.topic.replication.factor": "3"},
    )


def shared_store_brokers(
    zk_connect: str, home: Path, tmp_path: Path, log_store: str, session_timeout_ms: int
) -> contextlib.AbstractContextManager[BrokerAgents]:
    """Brokers 1 and 2 serving ``log_store`` as one shared log dir (DESIGN §16)."""
    return started_brokers(
        zk_connect,
        home,
        tmp_path,
        (1, 2),
        session_timeout_ms=session_timeout_ms,
        log_store=log_store,
        shared_log_dir=True,
    )


@pytest.fixture
def one_broker(zk_connect: str, sparklog_home: Path, tmp_path: Path, log_store: str | None) -> Iterator[BrokerAgents]:
    """One real broker agent (id 1) with its Kafka listener."""
    with started_brokers(zk_connect, sparklog_home, tmp_path, (1,), log_store=log_store) as agents:
        yield agents


@pytest.fixture
def two_brokers(zk_connect: str, sparklog_home: Path, tmp_path: Path, log_store: str | None) -> Iterator[BrokerAgents]:
    """Two real broker agents (ids 1 and 2)."""
    with started_brokers(zk_connect, sparklog_home, tmp_path, (1, 2), log_store=log_store) as agents:
        yield agents


@pytest.fixture
def group_broker(zk_connect: str, sparklog_home: Path, tmp_path: Path, log_store: str | None) -> Iterator[BrokerAgents]:
    """One broker agent (id 1) set up for consumer-group tests (:data:`GROUP_PROPERTIES`)."""
    with started_brokers(
        zk_connect, sparklog_home, tmp_path, (1,), properties=GROUP_PROPERTIES, log_store=log_store
    ) as agents:
        yield agents


def create_led_topic(
    cluster: sparklog.Cluster, agents: BrokerAgents, topic: str, partitions: int = 3, **configs: Any
) -> None:
    """Create ``topic`` and wait until every partition has a live leader."""
    cluster.create_topic(topic, partitions=partitions, replication_factor=1, config=configs or None)

    def led() -> bool:
        description = cluster.describe_topic(topic)
        return all(p.leader in agents.live() for p in description.partitions)

    wait_until(led, f"{topic}: a live leader for every partition")


def produce_confirmed(bootstrap: str, topic: str, values: Iterable[str]) -> set[str]:
    """``values`` written to ``topic`` with acks=all, each its own key, every delivery report
    checked (``flush()`` alone does not count failed deliveries); -> the values."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    failed: list[str] = []
    written: set[str] = set()
    for value in values:
        written.add(value)
        producer.produce(
            topic,
            value=value.encode(),
            key=value.encode(),
            on_delivery=lambda error, _message: failed.append(str(error)) if error is not None else None,
        )
    assert producer.flush(60) == 0 and not failed, f"deliveries to {topic} failed: {failed[:3]}"
    return written


def wait_transactions_complete(cluster: sparklog.Cluster, *transactional_ids: str, timeout_s: float = 60.0) -> None:
    """Wait until the last transaction of each id is Complete*: every marker written. EndTxn is
    answered once the decision is durable (Kafka's order), so a just-ended transaction is seen
    by read_committed readers (and its group offsets are applied) only after this."""
    store = TransactionStore(cluster.replicas.zk)

    def state(transactional_id: str) -> str | None:
        found = store.get(transactional_id)
        return None if found is None else found[0].state

    wait_until(
        lambda: all(state(t) in (COMPLETE_COMMIT, COMPLETE_ABORT) for t in transactional_ids),
        f"the markers of {', '.join(transactional_ids)} written",
        timeout_s=timeout_s,
    )


def transaction_coordinator(cluster: sparklog.Cluster, transactional_id: str) -> int:
    """The broker coordinating ``transactional_id``: the leader of its ``__consumer_offsets`` partition."""
    partitions = len(cluster.replicas.partitions_of(OFFSETS_TOPIC))
    partition = offsets_partition_for(transactional_id, partitions)
    return int(cluster.replicas.states(OFFSETS_TOPIC, [partition])[partition].leader)


@pytest.fixture
def counted_brokers(
    zk_connect: str, sparklog_home: Path, tmp_path: Path, proxy: StoreProxy, monkeypatch: pytest.MonkeyPatch
) -> Callable[..., contextlib.AbstractContextManager[BrokerAgents]]:
    """Starts one broker whose log dir is a bucket reached through :class:`StoreProxy`,
    with the given broker properties."""
    for name, value in proxy.environ().items():
        monkeypatch.setenv(name, value)

    def start(properties: Mapping[str, str] | None = None) -> contextlib.AbstractContextManager[BrokerAgents]:
        bucket = f"counted-{uuid.uuid4().hex[:10]}"
        proxy.upstream.create_bucket(bucket)
        return started_brokers(
            zk_connect,
            sparklog_home,
            tmp_path,
            (1,),
            log_store=f"s3://{bucket}/cluster",
            shared_log_dir=True,
            properties=properties,
        )

    return start


@pytest.fixture
def counted_broker(
    counted_brokers: Callable[..., contextlib.AbstractContextManager[BrokerAgents]],
) -> Iterator[BrokerAgents]:
    """One broker with the default pacing of rounds."""
    with counted_brokers() as agents:
        yield agents
