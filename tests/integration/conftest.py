"""Fixtures shared by the integration tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import sparklog
from sparklog.broker.leader_appender import LeaderAppender
from sparklog.broker.metrics import BrokerMetrics
from sparklog.broker.partition import LeaderPartitions
from sparklog.broker.producer_state import ProducerStates
from tests.integration.test_cli import Cli

LEADER_TOPIC = "orders"


@pytest.fixture
def cli(zk_connect: str, sparklog_home: Path) -> Cli:
    """Runs ``sparklog`` against this test's cluster (its chroot and home)."""
    return Cli(zk_connect, sparklog_home)


@pytest.fixture
def leader(cluster: sparklog.Cluster) -> Iterator[LeaderPartitions]:
    """This process as the leader of every partition of :data:`LEADER_TOPIC` (a cluster
    without broker agents: its own broker id leads), with its own appender."""
    replicas = cluster.replicas
    broker_id = replicas.config.broker_id
    cluster.create_topic(LEADER_TOPIC, partitions=2)
    appender = LeaderAppender(replicas, broker_id, 10_000, BrokerMetrics())
    try:
        yield LeaderPartitions(replicas, broker_id, appender, ProducerStates(), None)
    finally:
        appender.close()
