"""Kafka's admin APIs on the wire, driven by real Kafka admin clients: confluent-kafka's
``AdminClient`` (librdkafka) and kafka-python's ``KafkaAdminClient``.

Three real broker agents (:class:`sparklog.testing.BrokerAgents`) with ``num.partitions=2``
and ``default.replication.factor=2`` (what CreateTopics' -1 means). Every change a client
makes is checked through sparklog's own API (``Cluster.describe_topic``, ``topic_config``,
``list_offsets``...), and every refused request is checked to have changed nothing.
"""

from __future__ import annotations

import datetime
import io
import socket
import warnings
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    ResourceType,
)
from kafka import KafkaAdminClient
from kafka import errors as kafka_errors
from kafka.admin import AlterConfigOp, ConfigResourceType
from kafka.admin import ConfigResource as KpConfigResource
from kafka.structs import TopicPartition as KpTopicPartition
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32, i32Timedelta

import sparklog
from sparklog.broker.kafka.apis import API_VERSIONS
from sparklog.broker.kafka.context import build
from sparklog.broker.kafka.metadata_api import topic_uuid
from sparklog.testing import BrokerAgents
from tests.helpers import wait_until
from tests.integration.test_kafka_listener import recv_frame, send_frame

BROKERS = (1, 2, 3)
DEFAULT_PARTITIONS = 2
DEFAULT_REPLICATION_FACTOR = 2
_TIMEOUT_S = 30.0


@pytest.fixture
def agents(zk_connect: str, sparklog_home: Path, tmp_path: Path) -> Iterator[BrokerAgents]:
    properties = {
        "num.partitions": str(DEFAULT_PARTITIONS),
        "default.replication.factor": str(DEFAULT_REPLICATION_FACTOR),
    }
    with BrokerAgents(zk_connect, sparklog_home, tmp_path / "brokers", properties=properties) as running:
        running.start(*BROKERS)
        running.wait_controller()
        yield running


@pytest.fixture
def admin(agents: BrokerAgents) -> AdminClient:
    return AdminClient({"bootstrap.servers": agents.bootstrap_servers})


@pytest.fixture
def kp_admin(agents: BrokerAgents) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=agents.bootstrap_servers, request_timeout_ms=int(_TIMEOUT_S * 1000))
    try:
        yield client
    finally:
        client.close()


def result(future: Future[Any]) -> Any:
    return future.result(timeout=_TIMEOUT_S)


def failure(future: Future[Any]) -> tuple[int, str]:
    """The Kafka error code and message a confluent-kafka future failed with."""
    with pytest.raises(KafkaException) as raised:
        future.result(timeout=_TIMEOUT_S)
    error = raised.value.args[0]
    return error.code(), error.str()


def text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def effective(cluster: sparklog.Cluster, topic: str) -> dict[str, str]:
    """``Cluster.topic_config`` as the wire's text."""
    return {k: text(v) for k, v in cluster.topic_config(topic).items()}


def produce(cluster: sparklog.Cluster, topic: str, partition: int, count: int) -> None:
    with cluster.producer() as producer:
        for i in range(count):
            producer.send(topic, b"v%d" % i, partition=partition)
        producer.flush()


# -- confluent-kafka (librdkafka) -------------------------------------------------------------
def test_confluent_create_topics(cluster: sparklog.Cluster, admin: AdminClient, agents: BrokerAgents) -> None:
    created = admin.create_topics(
        [
            NewTopic("orders", 3, 3, config={"retention.ms": "3600000", "cleanup.policy": "compact,delete"}),
            NewTopic("defaults"),  # -1 / -1: the brokers' num.partitions and default.replication.factor
            NewTopic("placed", 2, replica_assignment=[[3, 1], [2, 3]]),
        ]
    )
    for future in created.values():
        assert result(future) is None
    orders = cluster.describe_topic("orders")
    assert len(orders.partitions) == 3 and all(sorted(p.replicas) == list(BROKERS) for p in orders.partitions)
    assert orders.configs == {"cleanup.policy": "compact,delete", "retention.ms": "3600000"}
    defaults = cluster.describe_topic("defaults")
    assert len(defaults.partitions) == DEFAULT_PARTITIONS
    assert {len(p.replicas) for p in defaults.partitions} == {DEFAULT_REPLICATION_FACTOR}
    placed = cluster.describe_topic("placed")
    assert [list(p.replicas) for p in placed.partitions] == [[3, 1], [2, 3]]
    assert [p.leader for p in placed.partitions] == [3, 2]
    # The topic is usable: sparklog's producer writes a partition whose replicas a client placed.
    produce(cluster, "placed", 1, 3)
    wait_until(lambda: cluster.high_watermarks("placed") == {0: 0, 1: 3}, "3 records in placed-1")

    # validate_only checks everything and creates nothing.
    assert result(admin.create_topics([NewTopic("dry", 4, 2)], validate_only=True)["dry"]) is None
    code, _ = failure(admin.create_topics([NewTopic("dry", 1, 4)], validate_only=True)["dry"])
    assert code == ErrorCode.invalid_replication_factor.value
    assert "dry" not in cluster.list_topics()

    # Errors, each changing nothing.
    code, message = failure(admin.create_topics([NewTopic("orders", 1, 1)])["orders"])
    assert (code, message) == (ErrorCode.topic_already_exists.value, "Topic 'orders' already exists.")
    assert len(cluster.describe_topic("orders").partitions) == 3
    code, message = failure(admin.create_topics([NewTopic("bad/name", 1, 1)])["bad/name"])
    assert code == ErrorCode.invalid_topic_exception.value and "illegal" in message
    code, message = failure(
        admin.create_topics([NewTopic("t-unknown-key", 1, 1, config={"retention.mss": "1"})])["t-unknown-key"]
    )
    assert code == ErrorCode.invalid_config.value and "retention.mss" in message
    code, message = failure(
        admin.create_topics([NewTopic("t-bad-value", 1, 1, config={"retention.ms": "soon"})])["t-bad-value"]
    )
    assert code == ErrorCode.invalid_config.value and "retention.ms" in message and "'soon'" in message
    code, message = failure(admin.create_topics([NewTopic("t-rf", 1, 4)])["t-rf"])
    assert code == ErrorCode.invalid_replication_factor.value and "larger than available brokers: 3" in message
    code, _ = failure(admin.create_topics([NewTopic("t-assign", 1, replica_assignment=[[1, 9]])])["t-assign"])
    assert code == ErrorCode.invalid_replica_assignment.value
    code, _ = failure(admin.create_topics([NewTopic("__consumer_offsets", 1, 1)])["__consumer_offsets"])
    assert code == ErrorCode.policy_violation.value
    assert sorted(cluster.list_topics()) == ["defaults", "orders", "placed"]

    # What librdkafka's own metadata says agrees.
    listing = admin.list_topics(timeout=_TIMEOUT_S)
    assert {p.id: p.replicas for p in listing.topics["placed"].partitions.values()} == {0: [3, 1], 1: [2, 3]}


def test_confluent_delete_topics(cluster: sparklog.Cluster, admin: AdminClient, sparklog_home: Path) -> None:
    cluster.create_topic("doomed", partitions=2, replication_factor=3)
    cluster.create_topic("kept", partitions=1, replication_factor=1)
    produce(cluster, "doomed", 0, 2)
    assert result(admin.delete_topics(["doomed"])["doomed"]) is None
    assert cluster.list_topics() == ["kept"]
    code, _ = failure(admin.delete_topics(["doomed"])["doomed"])
    assert code == ErrorCode.unknown_topic_or_partition.value
    code, _ = failure(admin.delete_topics(["never-was"])["never-was"])
    assert code == ErrorCode.unknown_topic_or_partition.value
    assert cluster.list_topics() == ["kept"]
    # Re-created under the same name, the topic starts empty.
    assert result(admin.create_topics([NewTopic("doomed", 1, 3)])["doomed"]) is None
    assert cluster.high_watermarks("doomed") == {0: 0}


def test_confluent_create_partitions(cluster: sparklog.Cluster, admin: AdminClient) -> None:
    cluster.create_topic("grow", partitions=1, replication_factor=1, replica_assignment={0: [1]})
    assert result(admin.create_partitions([NewPartitions("grow", 3)])["grow"]) is None
    grown = cluster.describe_topic("grow")
    assert len(grown.partitions) == 3
    # New replicas on brokers that held none of the topic can be written at once.
    for p in grown.partitions:
        produce(cluster, "grow", p.partition, 1)
    assert cluster.high_watermarks("grow") == {0: 1, 1: 1, 2: 1}

    assert result(admin.create_partitions([NewPartitions("grow", 5, [[3], [2]])])["grow"]) is None
    assert [list(p.replicas) for p in cluster.describe_topic("grow").partitions][3:] == [[3], [2]]

    assert result(admin.create_partitions([NewPartitions("grow", 8)], validate_only=True)["grow"]) is None
    assert len(cluster.describe_topic("grow").partitions) == 5
    for total in (5, 2):
        code, message = failure(admin.create_partitions([NewPartitions("grow", total)])["grow"])
        assert code == ErrorCode.invalid_partitions.value and "currently has 5 partitions" in message
    code, _ = failure(admin.create_partitions([NewPartitions("grow", 7, [[1, 2], [3, 1]])])["grow"])
    assert code == ErrorCode.invalid_replica_assignment.value  # 2 replicas on a topic of 1
    code, _ = failure(admin.create_partitions([NewPartitions("nope", 2)])["nope"])
    assert code == ErrorCode.unknown_topic_or_partition.value
    assert len(cluster.describe_topic("grow").partitions) == 5


def test_confluent_describe_configs(cluster: sparklog.Cluster, admin: AdminClient, agents: BrokerAgents) -> None:
    cluster.create_topic(
        "conf", partitions=1, replication_factor=3, config={"retention.ms": 1000, "max.message.bytes": 2048}
    )
    topic = ConfigResource(ResourceType.TOPIC, "conf")
    entries = result(admin.describe_configs([topic])[topic])  # librdkafka always asks for synonyms
    assert {name: e.value for name, e in entries.items()} == effective(cluster, "conf")
    overrides = cluster.describe_topic("conf").configs
    for name, entry in entries.items():
        assert (
            entry.source
            == (ConfigSource.DYNAMIC_TOPIC_CONFIG if name in overrides else ConfigSource.DEFAULT_CONFIG).value
        )
        assert not entry.is_read_only and not entry.is_sensitive
    assert [(s.name, s.value) for s in entries["retention.ms"].synonyms.values()] == [
        ("retention.ms", "1000"),
        ("log.retention.ms", "604800000"),
    ]
    # A broker's own settings, read only.
    broker = ConfigResource(ResourceType.BROKER, "2")
    settings = result(admin.describe_configs([broker])[broker])
    assert settings["broker.id"].value == "2" and settings["broker.id"].is_read_only
    assert settings["num.partitions"].value == str(DEFAULT_PARTITIONS)
    assert settings["listeners"].value == f"PLAINTEXT://127.0.0.1:{agents.port(2)}"
    missing = ConfigResource(ResourceType.TOPIC, "missing")
    code, _ = failure(admin.describe_configs([missing])[missing])
    assert code == ErrorCode.unknown_topic_or_partition.value


def test_confluent_alter_configs(cluster: sparklog.Cluster, admin: AdminClient) -> None:
    cluster.create_topic("conf", partitions=1, replication_factor=2, config={"retention.ms": 1000})
    # Non-incremental AlterConfigs replaces the overrides: retention.ms returns to its default.
    legacy = ConfigResource(ResourceType.TOPIC, "conf", set_config={"cleanup.policy": "compact"})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        assert result(admin.alter_configs([legacy])[legacy]) is None
        assert cluster.describe_topic("conf").configs == {"cleanup.policy": "compact"}
        dry = ConfigResource(ResourceType.TOPIC, "conf", set_config={"retention.bytes": "10"})
        assert result(admin.alter_configs([dry], validate_only=True)[dry]) is None
        bad = ConfigResource(ResourceType.TOPIC, "conf", set_config={"retention.bytes": "lots"})
        code, message = failure(admin.alter_configs([bad])[bad])
    assert code == ErrorCode.invalid_config.value and "retention.bytes" in message
    assert cluster.describe_topic("conf").configs == {"cleanup.policy": "compact"}

    def incremental(*ops: tuple[str, str | None, AlterConfigOpType]) -> ConfigResource:
        return ConfigResource(
            ResourceType.TOPIC,
            "conf",
            incremental_configs=[ConfigEntry(name, value, incremental_operation=op) for name, value, op in ops],
        )

    change = incremental(
        ("retention.ms", "5000", AlterConfigOpType.SET),
        ("cleanup.policy", "delete", AlterConfigOpType.APPEND),
    )
    assert result(admin.incremental_alter_configs([change])[change]) is None
    assert cluster.describe_topic("conf").configs == {"cleanup.policy": "compact,delete", "retention.ms": "5000"}
    assert cluster.topic_config("conf")["retention.ms"] == 5000
    change = incremental(("cleanup.policy", None, AlterConfigOpType.DELETE))
    assert result(admin.incremental_alter_configs([change])[change]) is None
    assert cluster.describe_topic("conf").configs == {"retention.ms": "5000"}

    # A bad operation fails the whole resource: the valid SET next to it is not applied.
    for ops, key in (
        (
            (("retention.ms", "1", AlterConfigOpType.SET), ("no.such.config", "1", AlterConfigOpType.SET)),
            "no.such.config",
        ),
        (
            (("retention.ms", "1", AlterConfigOpType.SET), ("retention.bytes", "x", AlterConfigOpType.SET)),
            "retention.bytes",
        ),
        ((("retention.ms", "1", AlterConfigOpType.APPEND),), "retention.ms"),
    ):
        bad = incremental(*ops)
        code, message = failure(admin.incremental_alter_configs([bad])[bad])
        assert code == ErrorCode.invalid_config.value and key in message
    dry = incremental(("retention.ms", "1", AlterConfigOpType.SET))
    assert result(admin.incremental_alter_configs([dry], validate_only=True)[dry]) is None
    assert cluster.describe_topic("conf").configs == {"retention.ms": "5000"}

    broker = ConfigResource(
        ResourceType.BROKER,
        "1",
        incremental_configs=[ConfigEntry("num.partitions", "3", incremental_operation=AlterConfigOpType.SET)],
    )
    code, message = failure(admin.incremental_alter_configs([broker])[broker])
    assert code == ErrorCode.invalid_request.value and "num.partitions" in message


def test_confluent_delete_records(cluster: sparklog.Cluster, admin: AdminClient) -> None:
    cluster.create_topic("events", partitions=2, replication_factor=3)
    produce(cluster, "events", 0, 10)
    produce(cluster, "events", 1, 4)
    wait_until(lambda: cluster.high_watermarks("events") == {0: 10, 1: 4}, "14 records replicated")
    done = admin.delete_records([TopicPartition("events", 0, 6), TopicPartition("events", 1, -1)])
    lows = {tp.partition: result(f).low_watermark for tp, f in done.items()}
    assert lows == {0: 6, 1: 4}
    assert cluster.list_offsets("events", "earliest") == {0: 6, 1: 4}
    assert cluster.read("events", 0).column("offset").to_pylist() == [6, 7, 8, 9]

    (beyond,) = admin.delete_records([TopicPartition("events", 0, 11)]).values()
    assert failure(beyond)[0] == ErrorCode.offset_out_of_range.value
    assert cluster.list_offsets("events", "earliest") == {0: 6, 1: 4}

    cluster.create_topic("compacted", partitions=1, replication_factor=1, config={"cleanup.policy": "compact"})
    produce(cluster, "compacted", 0, 3)
    (compacted,) = admin.delete_records([TopicPartition("compacted", 0, 2)]).values()
    assert failure(compacted)[0] == ErrorCode.policy_violation.value
    assert cluster.list_offsets("compacted", "earliest") == {0: 0}


def test_a_fetch_right_after_delete_records_starts_at_the_new_log_start(
    cluster: sparklog.Cluster, admin: AdminClient, agents: BrokerAgents
) -> None:
    cluster.create_topic("trimmed", partitions=1, replication_factor=1)
    producer = Producer({"bootstrap.servers": agents.bootstrap_servers, "linger.ms": 0})
    for i in range(10):
        producer.produce("trimmed", b"v%d" % i, partition=0)
        producer.flush(_TIMEOUT_S)  # one batch each, all in the leader's in-memory tail
    assert first_offset_read(agents, 0) == 0  # the leader notes the log-start, 0
    (done,) = admin.delete_records([TopicPartition("trimmed", 0, 6)]).values()
    assert result(done).low_watermark == 6
    # At once, not after the noted log-start goes stale: offset 2 is out of range now.
    assert first_offset_read(agents, 2) == 6


def first_offset_read(agents: BrokerAgents, offset: int) -> int:
    """The offset of the first record a consumer assigned at ``offset`` of trimmed-0 reads
    (``auto.offset.reset=earliest`` when that offset is out of range)."""
    consumer = Consumer(
        {"bootstrap.servers": agents.bootstrap_servers, "group.id": "trim-check", "auto.offset.reset": "earliest"}
    )
    try:
        consumer.assign([TopicPartition("trimmed", 0, offset)])
        while True:
            message = consumer.poll(_TIMEOUT_S)
            assert message is not None, f"nothing read from trimmed-0 at {offset} within {_TIMEOUT_S} s"
            read = message.offset()
            if message.error() is None and read is not None:
                return read
    finally:
        consumer.close()


def test_confluent_describe_cluster(cluster: sparklog.Cluster, admin: AdminClient, agents: BrokerAgents) -> None:
    described = result(admin.describe_cluster(include_authorized_operations=True))
    assert {n.id: (n.host, n.port) for n in described.nodes} == {b: ("127.0.0.1", agents.port(b)) for b in BROKERS}
    assert described.controller.id == agents.controller()
    assert described.cluster_id == cluster.replicas.metadata.cluster_id()


# -- kafka-python ---------------------------------------------------------------------------
def test_kafka_python_topics(cluster: sparklog.Cluster, kp_admin: KafkaAdminClient) -> None:
    # kafka-python infers the broker's Kafka version from the APIs served; until Produce and
    # Fetch are served it guesses 1.0 and itself refuses -1 (broker defaults, and with replica
    # assignments): explicit counts here, the rest is covered with confluent-kafka.
    response = kp_admin.create_topics(
        {
            "kp": {"num_partitions": 2, "replication_factor": 3, "configs": {"segment.bytes": "1048576"}},
            "kp-small": {"num_partitions": 1, "replication_factor": 1},
        }
    )
    assert [(t["name"], t["error_code"]) for t in response["topics"]] == [("kp", 0), ("kp-small", 0)]
    kp = cluster.describe_topic("kp")
    assert len(kp.partitions) == 2 and kp.configs == {"segment.bytes": "1048576"}
    assert response["topics"][0]["topic_id"] == str(topic_uuid(kp.topic_id))
    assert (response["topics"][0]["num_partitions"], response["topics"][0]["replication_factor"]) == (2, 3)
    assert response["topics"][0]["configs"]["segment.bytes"]["value"] == "1048576"
    assert len(cluster.describe_topic("kp-small").partitions[0].replicas) == 1

    response = kp_admin.create_topics({"kp-dry": {"num_partitions": 3, "replication_factor": 1}}, validate_only=True)
    assert response["topics"][0]["error_code"] == 0 and response["topics"][0]["num_partitions"] == 3
    assert "kp-dry" not in cluster.list_topics()
    with pytest.raises(kafka_errors.TopicAlreadyExistsError):
        kp_admin.create_topics({"kp": {"num_partitions": 1, "replication_factor": 1}})
    with pytest.raises(kafka_errors.InvalidTopicError):
        kp_admin.create_topics({"..": {"num_partitions": 1, "replication_factor": 1}})
    response = kp_admin.create_topics(
        {"kp-bad": {"num_partitions": 1, "replication_factor": 1, "configs": {"message.timestamp.type": "WallClock"}}},
        raise_errors=False,
    )
    (bad,) = response["topics"]
    assert bad["error_code"] == ErrorCode.invalid_config.value and "message.timestamp.type" in bad["error_message"]
    assert "kp-bad" not in cluster.list_topics()

    kp_admin.create_partitions({"kp": 4})
    assert len(cluster.describe_topic("kp").partitions) == 4
    with pytest.raises(kafka_errors.InvalidPartitionsError):
        kp_admin.create_partitions({"kp": 3})
    kp_admin.create_partitions({"kp": 6}, validate_only=True)
    assert len(cluster.describe_topic("kp").partitions) == 4

    kp_admin.delete_topics(["kp-small"])
    assert cluster.list_topics() == ["kp"]
    with pytest.raises(kafka_errors.UnknownTopicOrPartitionError):
        kp_admin.delete_topics(["kp-small"])


def test_kafka_python_configs(cluster: sparklog.Cluster, kp_admin: KafkaAdminClient) -> None:
    cluster.create_topic("kpc", partitions=1, replication_factor=2, config={"min.insync.replicas": 2})
    (described,) = kp_admin.describe_configs(
        [KpConfigResource(ConfigResourceType.TOPIC, "kpc")], include_synonyms=True, config_filter="all"
    )["topic"].values()
    assert {name: c["value"] for name, c in described.items()} == effective(cluster, "kpc")
    assert described["min.insync.replicas"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    assert described["retention.ms"]["config_source"] == "DEFAULT_CONFIG"
    assert described["min.insync.replicas"]["config_type"] == "INT"  # as Kafka types it
    assert described["cleanup.policy"]["documentation"] is None  # not asked for

    def alter(configs: dict[str, Any], **options: Any) -> str:
        resource = KpConfigResource(ConfigResourceType.TOPIC, "kpc", configs=configs)
        return str(kp_admin.alter_configs([resource], raise_on_unknown=False, **options)["topic"]["kpc"])

    assert (
        alter({"retention.ms": "60000", "min.insync.replicas": (AlterConfigOp.DELETE, None)}, incremental=True) == "OK"
    )
    assert cluster.describe_topic("kpc").configs == {"retention.ms": "60000"}
    assert alter({"retention.ms": "1", "retention_ms": "2"}, incremental=True).startswith(
        "[Error 40] InvalidConfigurationError"
    )
    assert alter({"compression.type": "brotli"}, incremental=False).startswith("[Error 40] InvalidConfigurationError")
    assert alter({"compression.type": "zstd"}, incremental=True, validate_only=True) == "OK"
    assert cluster.describe_topic("kpc").configs == {"retention.ms": "60000"}
    # Non-incremental: kafka-python re-sends the other overrides so none is lost.
    assert alter({"compression.type": "zstd"}, incremental=False) == "OK"
    assert cluster.describe_topic("kpc").configs == {"compression.type": "zstd", "retention.ms": "60000"}
    assert cluster.topic_config("kpc")["compression.type"] == "zstd"

    (broker,) = kp_admin.describe_configs([KpConfigResource(ConfigResourceType.BROKER, "3")], config_filter="all")[
        "broker"
    ].values()
    assert broker["broker.id"]["value"] == "3" and broker["default.replication.factor"]["value"] == "2"
    # kafka-python drops a resource's error code: an unknown topic comes back without configs.
    assert kp_admin.describe_configs([KpConfigResource(ConfigResourceType.TOPIC, "nope")]) == {"topic": {"nope": {}}}


def test_kafka_python_delete_records_and_describe_cluster(
    cluster: sparklog.Cluster, kp_admin: KafkaAdminClient, agents: BrokerAgents
) -> None:
    cluster.create_topic("kpr", partitions=1, replication_factor=3)
    produce(cluster, "kpr", 0, 5)
    wait_until(lambda: cluster.high_watermarks("kpr") == {0: 5}, "5 records replicated")
    deleted = kp_admin.delete_records({KpTopicPartition("kpr", 0): 3})
    assert deleted[KpTopicPartition("kpr", 0)]["low_watermark"] == 3
    assert cluster.list_offsets("kpr", "earliest") == {0: 3}
    with pytest.raises(kafka_errors.OffsetOutOfRangeError):
        kp_admin.delete_records({KpTopicPartition("kpr", 0): 6})
    assert cluster.list_offsets("kpr", "earliest") == {0: 3}
    # Sent to a broker that does not lead the partition, the request is refused.
    follower = next(b for b in BROKERS if b != cluster.describe_topic("kpr").partitions[0].leader)
    with pytest.raises(kafka_errors.NotLeaderForPartitionError):
        kp_admin.delete_records({KpTopicPartition("kpr", 0): 4}, partition_leader_id=follower)
    with pytest.raises(kafka_errors.UnknownTopicOrPartitionError):
        kp_admin.delete_records({KpTopicPartition("kpr", 7): 1}, partition_leader_id=follower)
    assert cluster.list_offsets("kpr", "earliest") == {0: 3}

    described = kp_admin.describe_cluster()
    assert described["controller_id"] == agents.controller()
    assert described["cluster_id"] == cluster.replicas.metadata.cluster_id()
    assert {b["broker_id"]: (b["host"], b["port"]) for b in described["brokers"]} == {
        b: ("127.0.0.1", agents.port(b)) for b in BROKERS
    }
    assert kp_admin.list_topics() == ["kpr"]


# -- every served version, raw ----------------------------------------------------------------
def raw_call(port: int, api_key: int, version: int, **fields: Any) -> Any:
    """Send one request of ``api_key`` at ``version`` (fields the version lacks are dropped)
    and decode the response with the same version's schema."""
    request_type = load_request_schema(api_key, version)
    header_type = RequestHeaderV2 if request_type.__flexible__ else RequestHeaderV1
    buffer = io.BytesIO()
    entity_writer(header_type)(
        buffer,
        header_type(
            request_api_key=i16(api_key), request_api_version=i16(version), correlation_id=i32(version), client_id="raw"
        ),
    )
    entity_writer(request_type)(buffer, build(request_type, **fields))
    with socket.create_connection(("127.0.0.1", port), timeout=_TIMEOUT_S) as sock:
        send_frame(sock, buffer.getvalue())
        payload = recv_frame(sock)
    response_type = load_response_schema(api_key, version)
    header, size = entity_reader(response_type.__header_schema__)(payload, 0)
    assert header.correlation_id == version
    response, _ = entity_reader(response_type)(payload, size)
    return response


def nested(api_key: int, version: int, type_name: str, /, **fields: Any) -> Any:
    """An instance of the request's nested type ``type_name`` at ``version``."""
    module = __import__(load_request_schema(api_key, version).__module__, fromlist=["_"])
    return build(getattr(module, type_name), **fields)


def served(api_key: int) -> range:
    low, high = API_VERSIONS[api_key]
    return range(low, high + 1)


def test_every_served_version_of_every_admin_api(cluster: sparklog.Cluster, agents: BrokerAgents) -> None:
    """Each version a client may pick encodes and decodes, and does what it says."""
    port = agents.port(1)
    timeout = i32Timedelta.parse(datetime.timedelta(seconds=30))
    for v in served(19):
        topic = nested(
            19, v, "CreatableTopic", name=f"raw-{v}", num_partitions=1, replication_factor=3, assignments=(), configs=()
        )
        response = raw_call(port, 19, v, topics=(topic,), timeout=timeout, validate_only=False)
        assert [(t.name, t.error_code) for t in response.topics] == [(f"raw-{v}", ErrorCode.none)]
        assert len(cluster.describe_topic(f"raw-{v}").partitions[0].replicas) == 3
    for v in served(20):
        name = f"raw-{2 + v - min(served(20))}"
        topics = (nested(20, v, "DeleteTopicState", name=name, topic_id=None),) if v >= 6 else ()
        response = raw_call(port, 20, v, topics=topics, topic_names=(name,), timeout=timeout)
        assert [(t.name, t.error_code) for t in response.responses] == [(name, ErrorCode.none)]
        assert name not in cluster.list_topics()
    cluster.create_topic("kept", partitions=1, replication_factor=3)
    leader = cluster.describe_topic("kept").partitions[0].leader
    produce(cluster, "kept", 0, 5)
    wait_until(lambda: cluster.high_watermarks("kept") == {0: 5}, "5 records replicated")
    for v in served(21):
        partition = nested(21, v, "DeleteRecordsPartition", partition_index=0, offset=v + 1)
        response = raw_call(
            agents.port(leader),
            21,
            v,
            topics=(nested(21, v, "DeleteRecordsTopic", name="kept", partitions=(partition,)),),
            timeout=timeout,
        )
        [[result]] = [t.partitions for t in response.topics]
        assert (result.error_code, result.low_watermark) == (ErrorCode.none, v + 1)
        assert cluster.list_offsets("kept", "earliest") == {0: v + 1}
    for v in served(37):
        topic = nested(37, v, "CreatePartitionsTopic", name="kept", count=v + 2, assignments=None)
        response = raw_call(port, 37, v, topics=(topic,), timeout=timeout, validate_only=False)
        assert [(t.name, t.error_code) for t in response.results] == [("kept", ErrorCode.none)]
        assert len(cluster.partitions_of("kept")) == v + 2
    for v in served(33):
        config = nested(33, v, "AlterableConfig", name="retention.ms", value=str(1000 + v))
        resource = nested(33, v, "AlterConfigsResource", resource_type=2, resource_name="kept", configs=(config,))
        response = raw_call(port, 33, v, resources=(resource,), validate_only=False)
        assert [r.error_code for r in response.responses] == [ErrorCode.none]
        assert cluster.describe_topic("kept").configs == {"retention.ms": str(1000 + v)}
    for v in served(44):
        config = nested(44, v, "AlterableConfig", name="retention.bytes", config_operation=0, value=str(v + 1))
        resource = nested(44, v, "AlterConfigsResource", resource_type=2, resource_name="kept", configs=(config,))
        response = raw_call(port, 44, v, resources=(resource,), validate_only=False)
        assert [r.error_code for r in response.responses] == [ErrorCode.none]
        assert cluster.topic_config("kept")["retention.bytes"] == v + 1
    for v in served(32):
        resource = nested(
            32,
            v,
            "DescribeConfigsResource",
            resource_type=2,
            resource_name="kept",
            configuration_keys=("retention.bytes",),
        )
        response = raw_call(port, 32, v, resources=(resource,), include_synonyms=True, include_documentation=True)
        [result] = response.results
        assert result.error_code == ErrorCode.none
        assert [(c.name, c.value, c.config_source) for c in result.configs] == [("retention.bytes", "2", 1)]
        if v >= 3:
            assert result.configs[0].documentation and result.configs[0].config_type == 5  # LONG
    for v in served(60):
        response = raw_call(
            port, 60, v, include_cluster_authorized_operations=False, endpoint_type=1, include_fenced_brokers=True
        )
        assert response.error_code == ErrorCode.none
        assert response.cluster_id == cluster.replicas.metadata.cluster_id()
        assert sorted(b.broker_id for b in response.brokers) == list(BROKERS)
        assert response.controller_id == agents.controller()
    response = raw_call(
        port, 60, 1, include_cluster_authorized_operations=False, endpoint_type=2, include_fenced_brokers=False
    )
    assert response.error_code == ErrorCode.mismatched_endpoint_type
