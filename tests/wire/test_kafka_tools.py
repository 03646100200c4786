"""Apache Kafka's own command-line tools (4.3.1, run from its jars: Kafka's Java AdminClient,
producer and consumer underneath) against a sparklog broker, as a Kafka user runs them:
topics, console producer and consumer, consumer groups, and the performance tools."""

from __future__ import annotations

import re

import pytest

import sparklog
from sparklog.testing import BrokerAgents, KafkaTools

TOPIC = "tools"


@pytest.fixture(scope="module")
def tools() -> KafkaTools:
    return KafkaTools()


def test_topics_create_list_describe(tools: KafkaTools, group_broker: BrokerAgents, cluster: sparklog.Cluster) -> None:
    bootstrap = ("--bootstrap-server", group_broker.bootstrap_servers)
    tools.run(
        "kafka-topics", *bootstrap, "--create", "--topic", TOPIC, "--partitions", "3", "--replication-factor", "1"
    ).check()
    assert cluster.describe_topic(TOPIC).partitions[2].partition == 2
    assert TOPIC in tools.run("kafka-topics", *bootstrap, "--list").check().stdout.split()
    described = tools.run("kafka-topics", *bootstrap, "--describe", "--topic", TOPIC).check().stdout
    assert re.search(rf"Topic: {TOPIC}\s+TopicId: \S+\s+PartitionCount: 3\s+ReplicationFactor: 1", described), described
    for p in range(3):
        assert re.search(rf"Topic: {TOPIC}\s+Partition: {p}\s+Leader: 1\s+Replicas: 1\s+Isr: 1", described), described


def test_console_producer_and_consumer_in_a_group(tools: KafkaTools, group_broker: BrokerAgents) -> None:
    bootstrap = ("--bootstrap-server", group_broker.bootstrap_servers)
    tools.run("kafka-topics", *bootstrap, "--create", "--topic", TOPIC, "--partitions", "2").check()
    lines = [f"line-{i}" for i in range(20)]
    tools.run("kafka-console-producer", *bootstrap, "--topic", TOPIC, input="\n".join(lines) + "\n").check()
    consumed = tools.run(
        "kafka-console-consumer",
        *bootstrap,
        "--topic",
        TOPIC,
        "--group",
        "tools-group",
        "--from-beginning",
        "--max-messages",
        "20",
        "--timeout-ms",
        "30000",
    ).check()
    assert sorted(consumed.stdout.split()) == sorted(lines)
    assert "tools-group" in tools.run("kafka-consumer-groups", *bootstrap, "--list").check().stdout.split()
    described = tools.run("kafka-consumer-groups", *bootstrap, "--describe", "--group", "tools-group").check().stdout
    rows = [line.split() for line in described.splitlines() if line.startswith("tools-group")]
    # Records without keys go to one partition at a time (Kafka's sticky partitioner).
    assert sorted(r[2] for r in rows) == ["0", "1"], described
    assert all(r[1] == TOPIC and r[3] == r[4] and r[5] == "0" for r in rows), described
    assert sum(int(r[4]) for r in rows) == 20, described


def test_producer_and_consumer_performance(
    tools: KafkaTools, group_broker: BrokerAgents, cluster: sparklog.Cluster
) -> None:
    bootstrap = group_broker.bootstrap_servers
    tools.run(
        "kafka-topics", "--bootstrap-server", bootstrap, "--create", "--topic", TOPIC, "--partitions", "3"
    ).check()
    produced = tools.run(
        "kafka-producer-perf-test",
        "--topic",
        TOPIC,
        "--num-records",
        "20000",
        "--record-size",
        "100",
        "--throughput",
        "-1",
        "--producer-props",
        f"bootstrap.servers={bootstrap}",
        "acks=all",
    ).check()
    assert re.search(r"^20000 records sent", produced.stdout, re.M), produced.stdout
    assert sum(cluster.high_watermarks(TOPIC).values()) == 20000
    consumed = tools.run(
        "kafka-consumer-perf-test",
        "--bootstrap-server",
        bootstrap,
        "--topic",
        TOPIC,
        "--messages",
        "20000",
        "--timeout",
        "60000",
    ).check()
    header, row = ([c.strip() for c in line.split(",")] for line in consumed.stdout.strip().splitlines()[-2:])
    assert dict(zip(header, row, strict=True))["data.consumed.in.nMsg"] == "20000", consumed.stdout
