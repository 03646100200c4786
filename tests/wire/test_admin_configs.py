"""Config requests as Kafka's admin clients send them (issue 20, part 7): where a broker's
config values come from, and a topic's ``cleanup.policy`` set to the empty list."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)
from kio.schema.errors import ErrorCode

import sparklog
from sparklog.testing import BrokerAgents
from tests.wire.conftest import create_led_topic, started_brokers

_TIMEOUT_S = 30.0


def test_broker_configs_report_defaults_as_default_config(
    cluster: sparklog.Cluster, zk_connect: str, sparklog_home: Path, tmp_path: Path
) -> None:
    # num.io.threads is written in the properties file with its default value: Kafka calls it static.
    properties = {"num.partitions": "2", "num.io.threads": "8"}
    with started_brokers(zk_connect, sparklog_home, tmp_path, (1,), properties=properties) as agents:
        admin = AdminClient({"bootstrap.servers": agents.bootstrap_servers})
        broker = ConfigResource(ResourceType.BROKER, "1")
        entries = admin.describe_configs([broker])[broker].result(timeout=_TIMEOUT_S)
    static = ConfigSource.STATIC_BROKER_CONFIG.value
    for name in ("num.partitions", "num.io.threads", "zookeeper.session.timeout.ms", "broker.id", "listeners"):
        assert entries[name].source == static and not entries[name].is_default, name
    # Never set: defaults, including the one derived from another setting.
    for name in (
        "advertised.listeners",
        "socket.request.max.bytes",
        "transaction.max.timeout.ms",
        "log.cleanup.policy",
    ):
        assert entries[name].source == ConfigSource.DEFAULT_CONFIG.value and entries[name].is_default, name
    assert entries["advertised.listeners"].value == f"PLAINTEXT://127.0.0.1:{agents.port(1)}"
    assert entries["num.io.threads"].value == "8" and entries["num.partitions"].value == "2"


def test_cleanup_policy_set_to_the_empty_list_keeps_every_record(
    cluster: sparklog.Cluster, one_broker: BrokerAgents
) -> None:
    create_led_topic(cluster, one_broker, "kept", partitions=1, **{"retention.ms": 1})
    with cluster.producer() as producer:
        for i in range(5):
            producer.send("kept", b"v%d" % i, partition=0)
        producer.flush()
    admin = AdminClient({"bootstrap.servers": one_broker.bootstrap_servers})
    empty = ConfigResource(
        ResourceType.TOPIC,
        "kept",
        incremental_configs=[ConfigEntry("cleanup.policy", "", incremental_operation=AlterConfigOpType.SET)],
    )
    assert admin.incremental_alter_configs([empty])[empty].result(timeout=_TIMEOUT_S) is None
    assert cluster.describe_topic("kept").configs == {"cleanup.policy": "", "retention.ms": "1"}
    topic = ConfigResource(ResourceType.TOPIC, "kept")
    entry = admin.describe_configs([topic])[topic].result(timeout=_TIMEOUT_S)["cleanup.policy"]
    assert entry.value == "" and entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    # Neither delete nor compact: retention.ms=1 removes nothing, DeleteRecords is refused (Kafka's rule).
    assert cluster.run_retention(["kept"], now_ms=2**62) == []
    assert cluster.partition_offsets("kept")[0].log_start == 0
    (deleted,) = admin.delete_records([TopicPartition("kept", 0, 3)]).values()
    with pytest.raises(KafkaException) as refused:
        deleted.result(timeout=_TIMEOUT_S)
    assert refused.value.args[0].code() == ErrorCode.policy_violation.value
    # APPEND to the empty list gives exactly the policy appended.
    append = ConfigResource(
        ResourceType.TOPIC,
        "kept",
        incremental_configs=[ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND)],
    )
    assert admin.incremental_alter_configs([append])[append].result(timeout=_TIMEOUT_S) is None
    assert cluster.describe_topic("kept").configs["cleanup.policy"] == "compact"
