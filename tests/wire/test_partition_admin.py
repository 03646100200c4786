"""Elections, reassignments and log dirs on the wire (issue 20, part 7): Kafka's own tools
(``kafka-leader-election``, ``kafka-reassign-partitions``, ``kafka-log-dirs``, run from its
jars) and kafka-python's admin client against three local-disk broker agents. What they
change is checked through sparklog's own API: leaders, replicas, the records a moved replica
holds."""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import ElectionType
from confluent_kafka import TopicPartition as ConfluentPartition
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient, TopicPartition
from kafka import errors as kafka_errors
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i32, i32Timedelta

import sparklog
from sparklog.broker.kafka.apis import API_VERSIONS
from sparklog.broker.kafka.context import build
from sparklog.testing import BrokerAgents, KafkaTools
from tests.helpers import wait_until
from tests.wire import raw
from tests.wire.conftest import started_brokers

_TIMEOUT_S = 60.0


@pytest.fixture(scope="module")
def tools() -> KafkaTools:
    return KafkaTools()


@pytest.fixture
def agents(zk_connect: str, sparklog_home: Path, tmp_path: Path) -> Iterator[BrokerAgents]:
    with started_brokers(zk_connect, sparklog_home, tmp_path, (1, 2, 3), replica_lag_time_max_ms=2_000) as running:
        yield running


@pytest.fixture
def admin(agents: BrokerAgents) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=agents.bootstrap_servers, request_timeout_ms=int(_TIMEOUT_S * 1000))
    try:
        yield client
    finally:
        client.close()


def leader(cluster: sparklog.Cluster, topic: str, partition: int) -> int:
    return int(cluster.describe_topic(topic).partitions[partition].leader)


def replicas_of(cluster: sparklog.Cluster, topic: str, partition: int) -> list[int]:
    return list(cluster.describe_topic(topic).partitions[partition].replicas)


def produce(cluster: sparklog.Cluster, topic: str, count: int, partitions: int = 1) -> None:
    with cluster.producer(acks="all") as producer:
        for i in range(count):
            producer.send(topic, b"v%d" % i, partition=i % partitions)
        producer.flush()


def test_kafka_leader_election_moves_leadership_back_to_preferred_replicas(
    tools: KafkaTools, agents: BrokerAgents, cluster: sparklog.Cluster, admin: KafkaAdminClient
) -> None:
    cluster.create_topic("t", replica_assignment={0: [1, 2, 3], 1: [2, 3, 1]})
    wait_until(lambda: leader(cluster, "t", 0) == 1 and leader(cluster, "t", 1) == 2, "preferred leaders")
    agents.kill(1)
    wait_until(lambda: leader(cluster, "t", 0) not in (-1, 1), "t-0 led by another replica", timeout_s=_TIMEOUT_S)
    agents.start(1)
    wait_until(lambda: 1 in cluster.describe_topic("t").partitions[0].isr, "broker 1 back in t-0's ISR", _TIMEOUT_S)
    assert leader(cluster, "t", 0) != 1  # no automatic rebalance in these agents

    bootstrap = ("--bootstrap-server", agents.bootstrap_servers)
    run = tools.run("kafka-leader-election", *bootstrap, "--election-type", "PREFERRED", "--all-topic-partitions")
    assert run.check().stdout.strip() == "Successfully completed leader election (PREFERRED) for partitions t-0"
    assert leader(cluster, "t", 0) == 1

    # Named partitions: those already led by their preferred replica are "not needed".
    again = tools.run(
        "kafka-leader-election", *bootstrap, "--election-type", "PREFERRED", "--topic", "t", "--partition", "1"
    )
    assert again.check().stdout.strip() == "Valid replica already elected for partitions t-1"
    # confluent-kafka (librdkafka): t-1's preferred replica comes back and is elected.
    agents.kill(2)
    wait_until(lambda: leader(cluster, "t", 1) not in (-1, 2), "t-1 led by another replica", timeout_s=_TIMEOUT_S)
    agents.start(2)
    wait_until(lambda: 2 in cluster.describe_topic("t").partitions[1].isr, "broker 2 back in t-1's ISR", _TIMEOUT_S)
    confluent = AdminClient({"bootstrap.servers": agents.bootstrap_servers})
    elected = confluent.elect_leaders(ElectionType.PREFERRED, [ConfluentPartition("t", 1)]).result(timeout=_TIMEOUT_S)
    assert [(tp.topic, tp.partition, error) for tp, error in elected.items()] == [("t", 1, None)]
    assert leader(cluster, "t", 1) == 2
    response = admin.elect_leaders(0, {"t": [0], "missing": [0]}, raise_errors=False)
    codes = {
        (r.topic, p.partition_id): p.error_code for r in response.replica_election_results for p in r.partition_result
    }
    assert codes == {
        ("t", 0): kafka_errors.ElectionNotNeededError.errno,
        ("missing", 0): kafka_errors.UnknownTopicOrPartitionError.errno,
    }


def test_unclean_election_gives_an_offline_partition_its_live_out_of_sync_replica(
    agents: BrokerAgents, cluster: sparklog.Cluster, request: pytest.FixtureRequest
) -> None:
    cluster.create_topic("u", replica_assignment={0: [1, 2]})
    wait_until(lambda: leader(cluster, "u", 0) == 1, "u-0 led by broker 1")
    agents.kill(2)
    wait_until(lambda: list(cluster.describe_topic("u").partitions[0].isr) == [1], "u-0's ISR down to [1]", _TIMEOUT_S)
    agents.kill(1)
    wait_until(lambda: leader(cluster, "u", 0) == -1, "u-0 offline", timeout_s=_TIMEOUT_S)
    agents.start(2)
    agents.wait_controller()
    # A client that never knew the killed brokers (one may have been the controller).
    admin = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{agents.port(3)}", request_timeout_ms=30_000)
    request.addfinalizer(admin.close)
    response = admin.elect_leaders(0, {"u": [0]}, raise_errors=False)  # preferred: broker 1 is down
    assert response.replica_election_results[0].partition_result[0].error_code == (
        kafka_errors.PreferredLeaderNotAvailableError.errno
    )
    assert leader(cluster, "u", 0) == -1  # unclean.leader.election.enable is false: the controller waits
    response = admin.elect_leaders(1, {"u": [0]}, raise_errors=False)
    assert response.replica_election_results[0].partition_result[0].error_code == 0
    assert leader(cluster, "u", 0) == 2
    again = admin.elect_leaders(1, {"u": [0]}, raise_errors=False)
    assert again.replica_election_results[0].partition_result[0].error_code == (
        kafka_errors.ElectionNotNeededError.errno
    )


def test_kafka_reassign_partitions_moves_a_replica_between_brokers(
    tools: KafkaTools, agents: BrokerAgents, cluster: sparklog.Cluster, admin: KafkaAdminClient, tmp_path: Path
) -> None:
    cluster.create_topic("m", replica_assignment={0: [1], 1: [2]})
    wait_until(lambda: leader(cluster, "m", 0) == 1, "m-0 led by broker 1")
    produce(cluster, "m", 20, partitions=2)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": "m", "partition": 0, "replicas": [3]}]}))
    bootstrap = ("--bootstrap-server", agents.bootstrap_servers)
    executed = tools.run("kafka-reassign-partitions", *bootstrap, "--reassignment-json-file", str(plan), "--execute")
    assert "Successfully started partition reassignment for m-0" in executed.check().stdout

    def verified() -> bool:
        out = tools.run("kafka-reassign-partitions", *bootstrap, "--reassignment-json-file", str(plan), "--verify")
        return "Reassignment of partition m-0 is completed." in out.check().stdout

    wait_until(verified, "kafka-reassign-partitions --verify: m-0 completed", timeout_s=_TIMEOUT_S, interval_s=1.0)
    assert replicas_of(cluster, "m", 0) == [3] and leader(cluster, "m", 0) == 3
    assert admin.list_partition_reassignments() == {}
    assert sorted(cluster.read("m", partition=0).column("value").to_pylist()) == sorted(
        b"v%d" % i for i in range(0, 20, 2)
    )
    # A cancel of a partition that is not moving is refused, as by Kafka.
    assert admin.alter_partition_reassignments({TopicPartition("m", 1): None}) == {
        TopicPartition("m", 1): kafka_errors.NoReassignmentInProgressError
    }
    bad = admin.alter_partition_reassignments({TopicPartition("m", 1): [9], TopicPartition("m", 7): [1]})
    assert bad == {
        TopicPartition("m", 1): kafka_errors.InvalidReplicationAssignmentError,
        TopicPartition("m", 7): kafka_errors.UnknownTopicOrPartitionError,
    }


def test_a_cancelled_reassignment_returns_the_partition_to_its_replicas(
    agents: BrokerAgents, cluster: sparklog.Cluster, admin: KafkaAdminClient
) -> None:
    cluster.create_topic("c", replica_assignment={0: [1]})
    wait_until(lambda: leader(cluster, "c", 0) == 1, "c-0 led by broker 1")
    produce(cluster, "c", 10)
    controller = agents.wait_controller()
    target = next(b for b in (2, 3) if b != controller)
    # The admin client finds the controller (and connects to it) while every broker answers: a
    # lookup sent to the paused broker would time out instead.
    assert admin.list_partition_reassignments() == {}
    agents.pause(target)  # the new replica cannot catch up: the reassignment stays in progress
    try:
        assert admin.alter_partition_reassignments({TopicPartition("c", 0): [1, target]}) == {
            TopicPartition("c", 0): None
        }
        assert admin.list_partition_reassignments() == {
            TopicPartition("c", 0): {"replicas": [1, target], "adding_replicas": [target], "removing_replicas": []}
        }
        assert admin.alter_partition_reassignments({TopicPartition("c", 0): None}) == {TopicPartition("c", 0): None}
        assert admin.list_partition_reassignments() == {}
        wait_until(lambda: replicas_of(cluster, "c", 0) == [1], "c-0 back on broker 1 alone")
    finally:
        agents.resume(target)


def test_kafka_log_dirs_describe_and_alter_replica_log_dirs(
    tools: KafkaTools, agents: BrokerAgents, cluster: sparklog.Cluster, admin: KafkaAdminClient
) -> None:
    cluster.create_topic("d", replica_assignment={0: [1, 2], 1: [2, 3]})
    wait_until(lambda: {p.leader for p in cluster.describe_topic("d").partitions} == {1, 2}, "d led by 1 and 2")
    produce(cluster, "d", 40, partitions=2)
    wait_until(
        lambda: all(len(p.isr) == 2 for p in cluster.describe_topic("d").partitions), "every replica of d in sync"
    )
    bootstrap = ("--bootstrap-server", agents.bootstrap_servers)
    out = tools.run("kafka-log-dirs", *bootstrap, "--describe", "--topic-list", "d", "--broker-list", "1,2,3")
    described = json.loads(next(line for line in out.check().stdout.splitlines() if line.startswith("{")))
    by_broker = {b["broker"]: b["logDirs"] for b in described["brokers"]}
    assert sorted(by_broker) == [1, 2, 3]
    for broker_id, dirs in by_broker.items():
        (log_dir,) = dirs
        assert log_dir["logDir"] == agents.log_dir_uri(broker_id) and log_dir["error"] is None
        table = cluster.replicas.replica_table("d", broker_id)
        files = table.files(table.snapshot())
        hosted = {p: bs for p, bs in {0: [1, 2], 1: [2, 3]}.items() if broker_id in bs}
        assert {(r["partition"], r["size"], r["offsetLag"], r["isFuture"]) for r in log_dir["partitions"]} == {
            (f"d-{p}", sum(f.size_bytes for f in files if f.partition == p), 0, False) for p in hosted
        }
        assert all(size > 0 for size in (r["size"] for r in log_dir["partitions"]))

    moved = admin.alter_replica_log_dirs(
        {
            ("d", 0, 1): agents.log_dir_uri(1),  # where it is already
            ("d", 1, 1): agents.log_dir_uri(1),  # broker 1 holds no replica of d-1
            ("d", 0, 2): "/no/such/dir",
        }
    )
    assert {(r.topic, r.partition, r.broker_id): e for r, e in moved.items()} == {
        ("d", 0, 1): kafka_errors.NoError,
        ("d", 1, 1): kafka_errors.ReplicaNotAvailableError,
        ("d", 0, 2): kafka_errors.LogDirNotFoundError,
    }


def raw_request(api_key: int, version: int, type_name: str | None = None, /, **fields: Any) -> Any:
    """The request of ``api_key`` at ``version`` (or its nested type ``type_name``), the
    fields this version lacks dropped."""
    schema = load_request_schema(api_key, version)
    module = __import__(schema.__module__, fromlist=["_"])
    return build(schema if type_name is None else getattr(module, type_name), **fields)


def test_every_served_version_raw(agents: BrokerAgents, cluster: sparklog.Cluster) -> None:
    """Each version a client may pick of the five APIs encodes, decodes and answers as the newest."""
    cluster.create_topic("r", replica_assignment={0: [1, 2], 1: [2, 3]})
    wait_until(lambda: {p.leader for p in cluster.describe_topic("r").partitions} == {1, 2}, "r led by 1 and 2")
    produce(cluster, "r", 6, partitions=2)
    port = agents.port(1)
    timeout = i32Timedelta.parse(datetime.timedelta(seconds=30))
    for v in served(43):
        asked = (raw_request(43, v, "TopicPartitions", topic="r", partitions=(0,)),)
        response = raw.call(port, raw_request(43, v, election_type=i8(0), topic_partitions=asked, timeout=timeout))
        [[result]] = [r.partition_result for r in response.replica_election_results]
        assert (result.partition_id, result.error_code) == (0, ErrorCode.election_not_needed)
    if 1 in served(43):
        unknown_type = raw_request(43, 1, election_type=i8(7), topic_partitions=None, timeout=timeout)
        assert raw.call(port, unknown_type).error_code == ErrorCode.invalid_request
    for v in served(45):
        cancel = raw_request(45, v, "ReassignablePartition", partition_index=1, replicas=None)
        # v0: r-0 shrinks from [1, 2] to [1]; v1 (not allowing it) may not grow it back to two.
        target = (i32(1),) if v == 0 else (i32(1), i32(3))
        shrink = raw_request(45, v, "ReassignablePartition", partition_index=0, replicas=target)
        topics = (raw_request(45, v, "ReassignableTopic", name="r", partitions=(cancel, shrink)),)
        response = raw.call(
            port, raw_request(45, v, timeout=timeout, allow_replication_factor_change=False, topics=topics)
        )
        [codes] = [{p.partition_index: p.error_code for p in t.partitions} for t in response.responses]
        assert codes == {
            1: ErrorCode.no_reassignment_in_progress,
            0: ErrorCode.none if v == 0 else ErrorCode.invalid_replication_factor,
        }
        if v == 0:
            wait_until(lambda: replicas_of(cluster, "r", 0) == [1], "r-0 shrunk to broker 1", timeout_s=_TIMEOUT_S)
    for v in served(46):
        response = raw.call(port, raw_request(46, v, timeout=timeout, topics=None))
        assert (response.error_code, response.topics) == (ErrorCode.none, ())
    table = cluster.replicas.replica_table("r", 1)
    size = sum(f.size_bytes for f in table.files(table.snapshot(), {0}))
    for v in served(35):
        [result] = raw.call(port, raw_request(35, v, topics=None)).results
        assert (result.error_code, result.log_dir) == (ErrorCode.none, agents.log_dir_uri(1))
        assert [
            (t.name, [(p.partition_index, p.partition_size, p.offset_lag) for p in t.partitions]) for t in result.topics
        ] == [("r", [(0, size, 0)])]
    for v in served(34):
        moves = (
            raw_request(
                34,
                v,
                "AlterReplicaLogDir",
                path=agents.log_dir_uri(1),
                topics=(raw_request(34, v, "AlterReplicaLogDirTopic", name="r", partitions=(i32(0), i32(1))),),
            ),
        )
        [result] = raw.call(port, raw_request(34, v, dirs=moves)).results
        assert [(p.partition_index, p.error_code) for p in result.partitions] == [
            (0, ErrorCode.none),
            (1, ErrorCode.replica_not_available),
        ]


def served(api_key: int) -> range:
    low, high = API_VERSIONS[api_key]
    return range(low, high + 1)
