"""Kafka transactions on the wire (docs/transactions.md): confluent-kafka transactional
producers against a real broker agent; what read_committed and read_uncommitted readers
(confluent-kafka, the light consumer, Cluster.read, Spark) see; fencing; bad input."""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, IsolationLevel, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec
from kio.schema.add_partitions_to_txn.v3 import request as add_partitions_v3
from kio.schema.end_txn.v3 import request as end_txn_v3
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v4 import request as find_coordinator_v4
from kio.schema.init_producer_id.v4 import request as init_producer_id_v4
from kio.schema.types import ProducerId, TopicName, TransactionalId
from kio.static.primitive import i16, i32, i32Timedelta
from pyspark.sql import SparkSession

import sparklog
from sparklog.log.txn_log import CONTROL_TIMESTAMP_TYPE
from sparklog.metadata.transactions import COMPLETE_COMMIT, EMPTY, PREPARE_COMMIT, TransactionStore
from sparklog.testing import BrokerAgents
from tests.helpers import BOTH_STORES, consumed, wait_until
from tests.wire import raw
from tests.wire.conftest import (
    create_led_topic,
    started_brokers,
    transaction_coordinator,
    wait_transactions_complete,
)

TOPIC = "txn-orders"
PARTITIONS = 3
TIMEOUT_S = 30


def transactional(bootstrap: str, transactional_id: str, **config: Any) -> Producer:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": transactional_id, "linger.ms": 5, **config}
    )
    producer.init_transactions(TIMEOUT_S)
    return producer


def send(producer: Producer, values: Iterable[str], topic: str = TOPIC) -> None:
    for i, value in enumerate(values):
        producer.produce(topic, value=value.encode(), key=value.encode(), partition=i % PARTITIONS)
    assert producer.flush(TIMEOUT_S) == 0


def kafka_read(
    bootstrap: str, level: str, topic: str = TOPIC, expected: int | None = None, partitions: int = PARTITIONS
) -> list[tuple[int, int, str]]:
    """Every record a confluent-kafka consumer at ``level`` gets, (partition, offset, value):
    until ``expected`` records came (or :data:`TIMEOUT_S` passed), else until 1.5 s bring
    nothing (a first Fetch of a topic on a store loads its table: seconds, not an end)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{level}",
            "isolation.level": level,
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got: list[tuple[int, int, str]] = []
    idle = 0
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while idle < 3 if expected is None else len(got) < expected and time.monotonic() < deadline:
            batch = consumer.consume(500, 0.5)
            idle = 0 if batch else idle + 1
            for msg in batch:
                assert msg.error() is None, msg.error()
                partition, offset, value = consumed(msg)
                got.append((partition, offset, value.decode()))
    finally:
        consumer.close()
    return sorted(got)


def values(rows: Iterable[tuple[int, int, str]]) -> list[str]:
    return sorted(r[2] for r in rows)


def light_read(cluster: sparklog.Cluster, level: str) -> list[str]:
    consumer = cluster.consumer(auto_offset_reset="earliest", isolation_level=level)
    consumer.assign([(TOPIC, p) for p in range(PARTITIONS)])
    got: list[str] = []
    try:
        while batch := consumer.poll(timeout_ms=500):
            got += [(r.value or b"").decode() for r in batch]
    finally:
        consumer.close()
    return sorted(got)


def test_commit_and_abort_interleaved_across_partitions(
    cluster: sparklog.Cluster, one_broker: BrokerAgents, spark: SparkSession, cluster_options: dict[str, str]
) -> None:
    create_led_topic(cluster, one_broker, TOPIC, partitions=PARTITIONS)
    bootstrap = one_broker.bootstrap_servers
    first, second = transactional(bootstrap, "txn-first"), transactional(bootstrap, "txn-second")
    plain = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    committed: list[str] = []
    aborted: list[str] = []
    for round_ in range(3):
        first.begin_transaction()
        second.begin_transaction()
        # Interleaved in every partition: first's, second's and plain records alternate.
        for i in range(6):
            send(first, [f"first-{round_}-{i}-{p}" for p in range(PARTITIONS)])
            send(second, [f"second-{round_}-{i}-{p}" for p in range(PARTITIONS)])
            send(plain, [f"plain-{round_}-{i}-{p}" for p in range(PARTITIONS)])
        committed += [f"plain-{round_}-{i}-{p}" for i in range(6) for p in range(PARTITIONS)]
        mine = {
            name: [f"{name}-{round_}-{i}-{p}" for i in range(6) for p in range(PARTITIONS)]
            for name in ("first", "second")
        }
        if round_ % 2 == 0:
            first.commit_transaction(TIMEOUT_S)
            second.abort_transaction(TIMEOUT_S)
            committed += mine["first"]
            aborted += mine["second"]
        else:
            second.commit_transaction(TIMEOUT_S)
            first.abort_transaction(TIMEOUT_S)
            committed += mine["second"]
            aborted += mine["first"]
    everything = sorted(committed + aborted)
    wait_transactions_complete(cluster, "txn-first", "txn-second")

    # Kafka clients: read_committed never sees an aborted record; read_uncommitted sees what
    # Kafka's log holds (aborted included), and neither ever gets a marker as a record.
    assert values(kafka_read(bootstrap, "read_committed", expected=len(committed))) == sorted(committed)
    uncommitted = kafka_read(bootstrap, "read_uncommitted", expected=len(everything))
    assert values(uncommitted) == everything
    # Offsets are contiguous in the table: each marker took one (6 per round: 2 per partition).
    stored = cluster.read(TOPIC, isolation_level="read_uncommitted")
    assert stored.num_rows == len(everything)
    assert CONTROL_TIMESTAMP_TYPE not in stored.column("timestampType").to_pylist()
    ends = cluster.list_offsets(TOPIC, "latest")
    assert sum(ends.values()) == len(everything) + 3 * 2 * PARTITIONS

    # sparklog's own readers: read_committed by default.
    assert sorted(v.decode() for v in cluster.read(TOPIC).column("value").to_pylist()) == sorted(committed)
    assert light_read(cluster, "read_committed") == sorted(committed)
    assert light_read(cluster, "read_uncommitted") == everything
    source = spark.read.format("sparklog").options(subscribe=TOPIC, **cluster_options)
    assert sorted((r.value or b"").decode() for r in source.load().collect()) == sorted(committed)
    loose = source.option("kafka.isolation.level", "read_uncommitted").load()
    assert sorted((r.value or b"").decode() for r in loose.collect()) == everything
    from sparklog.spark import read, register_topics

    assert sorted((r.value or b"").decode() for r in read(spark, TOPIC, **cluster_options).collect()) == sorted(
        committed
    )
    native_loose = read(spark, TOPIC, **{"isolation.level": "read_uncommitted"}, **cluster_options)
    assert sorted((r.value or b"").decode() for r in native_loose.collect()) == everything
    assert TOPIC in register_topics(spark, native=True, **cluster_options)
    assert spark.sql(f"SELECT count(*) AS n FROM `{TOPIC}`").collect()[0].n == len(committed)
    for producer in (first, second, plain):
        producer.flush(TIMEOUT_S)


@BOTH_STORES
def test_open_transaction_holds_read_committed_readers_at_its_first_offset(
    cluster: sparklog.Cluster, one_broker: BrokerAgents
) -> None:
    create_led_topic(cluster, one_broker, TOPIC, partitions=PARTITIONS)
    bootstrap = one_broker.bootstrap_servers
    plain = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    send(plain, ["before-0", "before-1", "before-2"])
    producer = transactional(bootstrap, "txn-open")
    producer.begin_transaction()
    send(producer, ["open-0", "open-1", "open-2"])
    send(plain, ["after-0", "after-1", "after-2"])  # committed, but behind the open transaction
    admin = AdminClient({"bootstrap.servers": bootstrap})
    partitions = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]

    def latest(level: IsolationLevel) -> dict[int, int]:
        futures = admin.list_offsets({tp: OffsetSpec.latest() for tp in partitions}, isolation_level=level)
        return {tp.partition: f.result().offset for tp, f in futures.items()}

    # The last stable offset is the open transaction's first offset (1 in each partition).
    assert latest(IsolationLevel.READ_COMMITTED) == dict.fromkeys(range(PARTITIONS), 1)
    assert latest(IsolationLevel.READ_UNCOMMITTED) == dict.fromkeys(range(PARTITIONS), 3)
    assert values(kafka_read(bootstrap, "read_committed")) == ["before-0", "before-1", "before-2"]
    assert light_read(cluster, "read_committed") == ["before-0", "before-1", "before-2"]
    assert cluster.read(TOPIC).num_rows == 3
    producer.commit_transaction(TIMEOUT_S)
    wait_transactions_complete(cluster, "txn-open")
    everything = sorted(f"{w}-{p}" for w in ("before", "open", "after") for p in range(PARTITIONS))
    assert values(kafka_read(bootstrap, "read_committed", expected=9)) == everything
    assert latest(IsolationLevel.READ_COMMITTED) == dict.fromkeys(range(PARTITIONS), 4)


@BOTH_STORES
def test_a_zombie_with_an_old_epoch_is_fenced(cluster: sparklog.Cluster, one_broker: BrokerAgents) -> None:
    create_led_topic(cluster, one_broker, TOPIC, partitions=PARTITIONS)
    bootstrap = one_broker.bootstrap_servers
    zombie = transactional(bootstrap, "txn-zombie")
    zombie.begin_transaction()
    send(zombie, ["zombie-0", "zombie-1", "zombie-2"])
    # A new instance of the same transactional id: the zombie's open transaction is aborted.
    successor = transactional(bootstrap, "txn-zombie")
    successor.begin_transaction()
    send(successor, ["successor-0", "successor-1", "successor-2"])
    successor.commit_transaction(TIMEOUT_S)
    wait_transactions_complete(cluster, "txn-zombie")
    with pytest.raises(KafkaException) as raised:
        zombie.commit_transaction(TIMEOUT_S)
    assert raised.value.args[0].fatal(), raised.value.args[0]
    assert raised.value.args[0].code() in (
        ErrorCode.producer_fenced.value,
        ErrorCode.invalid_producer_epoch.value,
        -144,  # librdkafka's _FENCED
    ), raised.value.args[0]
    assert values(kafka_read(bootstrap, "read_committed", expected=3)) == ["successor-0", "successor-1", "successor-2"]
    assert values(kafka_read(bootstrap, "read_uncommitted", expected=6)) == sorted(
        ["successor-0", "successor-1", "successor-2", "zombie-0", "zombie-1", "zombie-2"]
    )


def _coordinator_port(agents: BrokerAgents, transactional_id: str) -> int:
    def found() -> Any:
        answer = raw.call(
            agents.port(1),
            find_coordinator_v4.FindCoordinatorRequest(key_type=1, coordinator_keys=(transactional_id,)),  # type: ignore[arg-type]
        )
        coordinator = answer.coordinators[0]
        return coordinator.port if coordinator.error_code == ErrorCode.none else None

    return int(wait_until(found, f"a coordinator for {transactional_id}"))


def end_txn(port: int, transactional_id: str, producer_id: int, epoch: int, committed: bool) -> ErrorCode:
    """EndTxn (v3) sent as is; the coordinator's error code."""
    answer = raw.call(
        port,
        end_txn_v3.EndTxnRequest(
            transactional_id=TransactionalId(transactional_id),
            producer_id=ProducerId(producer_id),
            producer_epoch=i16(epoch),
            committed=committed,
        ),
    )
    return ErrorCode(answer.error_code)


def init_producer_id(port: int, transactional_id: str, timeout_ms: int) -> Any:
    """InitProducerId (v4) of a new instance of ``transactional_id``; the whole answer."""
    return raw.call(
        port,
        init_producer_id_v4.InitProducerIdRequest(
            transactional_id=TransactionalId(transactional_id),
            transaction_timeout=i32Timedelta.parse(datetime.timedelta(milliseconds=timeout_ms)),
            producer_id=ProducerId(-1),
            producer_epoch=i16(-1),
        ),
    )


def add_partitions(
    port: int, transactional_id: str, producer_id: int, epoch: int, partitions: dict[str, list[int]]
) -> dict[tuple[str, int], ErrorCode]:
    """AddPartitionsToTxn (v3) sent as is; the error code per partition."""
    answer = raw.call(
        port,
        add_partitions_v3.AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=TransactionalId(transactional_id),
            v3_and_below_producer_id=ProducerId(producer_id),
            v3_and_below_producer_epoch=i16(epoch),
            v3_and_below_topics=tuple(
                add_partitions_v3.AddPartitionsToTxnTopic(name=TopicName(t), partitions=tuple(i32(p) for p in ps))
                for t, ps in partitions.items()
            ),
        ),
    )
    return {
        (str(t.name), int(p.partition_index)): ErrorCode(p.partition_error_code)
        for t in answer.results_by_topic_v3_and_below
        for p in t.results_by_partition
    }


def test_bad_input_gets_kafkas_error_and_changes_nothing(cluster: sparklog.Cluster, one_broker: BrokerAgents) -> None:
    create_led_topic(cluster, one_broker, TOPIC, partitions=PARTITIONS)
    port = _coordinator_port(one_broker, "txn-bad")
    store = TransactionStore(cluster.replicas.zk)

    # A timeout above transaction.max.timeout.ms (900000): refused, no transactional id created.
    answer = init_producer_id(port, "txn-bad", 900_001)
    assert answer.error_code == ErrorCode.invalid_transaction_timeout
    assert store.get("txn-bad") is None
    answer = init_producer_id(port, "txn-bad", 60_000)
    assert answer.error_code == ErrorCode.none
    producer_id, epoch = int(answer.producer_id), int(answer.producer_epoch)
    before = store.get("txn-bad")
    assert before is not None and before[0].state == EMPTY

    # EndTxn without a transaction.
    assert end_txn(port, "txn-bad", producer_id, epoch, committed=True) == ErrorCode.invalid_txn_state
    assert store.get("txn-bad") == before

    # AddPartitions naming an unknown topic: that one UNKNOWN_TOPIC_OR_PARTITION, the others not attempted.
    codes = add_partitions(port, "txn-bad", producer_id, epoch, {"no-such-topic": [0], TOPIC: [0, 1]})
    assert codes == {
        ("no-such-topic", 0): ErrorCode.unknown_topic_or_partition,
        (TOPIC, 0): ErrorCode.operation_not_attempted,
        (TOPIC, 1): ErrorCode.operation_not_attempted,
    }
    assert store.get("txn-bad") == before

    # A producer id that is not the transactional id's, and an old epoch.
    for pid, old_epoch, code in (
        (producer_id + 999, epoch, ErrorCode.invalid_producer_id_mapping),
        (producer_id, epoch - 1, ErrorCode.producer_fenced),
    ):
        assert end_txn(port, "txn-bad", pid, old_epoch, committed=False) == code
    assert store.get("txn-bad") == before
    assert cluster.list_offsets(TOPIC, "latest") == dict.fromkeys(range(PARTITIONS), 0)

    # A confluent-kafka producer asking for a timeout above the maximum fails init_transactions.
    with pytest.raises(KafkaException) as raised:
        transactional(one_broker.bootstrap_servers, "txn-too-long", **{"transaction.timeout.ms": 1_000_000})
    assert raised.value.args[0].code() == ErrorCode.invalid_transaction_timeout.value
    assert store.get("txn-too-long") is None


def test_compaction_drops_aborted_records_first_and_keeps_markers_apart(
    cluster: sparklog.Cluster, one_broker: BrokerAgents, spark: SparkSession
) -> None:
    from sparklog.maintenance.runner import run_compaction

    topic = "txn-compacted"
    cluster.create_topic(topic, 1, config={"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01"})
    wait_until(lambda: cluster.describe_topic(topic).partitions[0].leader == 1, f"{topic} led by broker 1")
    producer = transactional(one_broker.bootstrap_servers, "compactor")
    looks_like_a_commit_marker = b"\x00\x00\x00\x01"  # Kafka's control key of a commit marker

    def transaction(records: list[tuple[bytes, bytes]], commit: bool) -> None:
        producer.begin_transaction()
        for key, value in records:
            producer.produce(topic, key=key, value=value, partition=0)
        assert producer.flush(TIMEOUT_S) == 0
        (producer.commit_transaction if commit else producer.abort_transaction)(TIMEOUT_S)

    transaction([(b"k", b"v1"), (looks_like_a_commit_marker, b"data")], commit=True)
    transaction([(b"k", b"v2")], commit=False)  # newest value of k, but aborted
    transaction([(b"other", b"x")], commit=True)  # later files: the earlier ones are not the head
    wait_transactions_complete(cluster, "compactor")
    before = cluster.read(topic)
    [result] = run_compaction(cluster.replicas, spark, [topic])
    assert result.status == "compacted", result
    after = cluster.read(topic)
    assert (
        sorted(after.column("value").to_pylist())
        == sorted(before.column("value").to_pylist())
        == [b"data", b"v1", b"x"]
    )
    uncommitted = cluster.read(topic, isolation_level="read_uncommitted")
    assert b"v2" not in uncommitted.column("value").to_pylist(), "the aborted record was compacted away"
    assert values(kafka_read(one_broker.bootstrap_servers, "read_committed", topic, partitions=1)) == [
        "data",
        "v1",
        "x",
    ]


def test_end_txn_is_answered_once_the_decision_is_durable_and_the_markers_follow(
    cluster: sparklog.Cluster, zk_connect: str, sparklog_home: Path, tmp_path: Path
) -> None:
    """Kafka's order: EndTxn is answered once PrepareCommit is stored, the markers follow. A
    partition leader that hangs (SIGSTOP) cannot take its marker, yet commit_transaction
    returns at once (a coordinator that wrote the markers first would hold EndTxn for the
    marker's whole timeout, 15 s); the id's requests are answered CONCURRENT_TRANSACTIONS until
    the marker is written, which the coordinator's sweep does once that broker is back."""
    topic, transactional_id = "txn-durable", "txn-durable"
    properties = {"offsets.topic.num.partitions": "3"}
    with started_brokers(zk_connect, sparklog_home, tmp_path, (1, 2), properties=properties) as agents:
        cluster.create_topic(topic, partitions=2, replication_factor=1)
        wait_until(
            lambda: {p.leader for p in cluster.describe_topic(topic).partitions} == {1, 2},
            f"{topic}: one partition led by each broker",
            timeout_s=60,
        )
        producer = transactional(agents.bootstrap_servers, transactional_id)
        coordinator = transaction_coordinator(cluster, transactional_id)
        hung = 2 if coordinator == 1 else 1
        [stuck] = [p.partition for p in cluster.describe_topic(topic).partitions if p.leader == hung]
        sent = {p: [f"committed-{p}-{i}" for i in range(3)] for p in (0, 1)}
        producer.begin_transaction()
        for p, records in sent.items():
            for value in records:
                producer.produce(topic, value=value.encode(), partition=p)
        assert producer.flush(TIMEOUT_S) == 0
        store = TransactionStore(cluster.replicas.zk)
        port = agents.port(coordinator)

        def stuck_values(level: str) -> list[str]:
            rows = cluster.read(topic, stuck, isolation_level=level).column("value").to_pylist()
            return sorted(v.decode() for v in rows)

        agents.pause(hung)
        try:
            started = time.monotonic()
            producer.commit_transaction(TIMEOUT_S)
            answered_s = time.monotonic() - started
            found = store.get(transactional_id)
            assert found is not None
            record = found[0]
            assert record.state == PREPARE_COMMIT, f"{record.state}: the marker to broker {hung} cannot be written yet"
            assert answered_s < 8, f"commit_transaction took {answered_s:.1f} s: EndTxn waited for the markers"
            # Stored, not yet visible: read_committed stops at the transaction's first offset.
            assert stuck_values("read_uncommitted") == sent[stuck]
            assert stuck_values("read_committed") == []
            # Meanwhile the id's requests are retriable refusals; a retried EndTxn too (Kafka's
            # answer in PrepareCommit), and nothing changes.
            producer_id, epoch = record.producer_id, record.producer_epoch
            assert end_txn(port, transactional_id, producer_id, epoch, committed=True) == (
                ErrorCode.concurrent_transactions
            )
            assert add_partitions(port, transactional_id, producer_id, epoch, {topic: [0, 1]}) == {
                (topic, 0): ErrorCode.concurrent_transactions,
                (topic, 1): ErrorCode.concurrent_transactions,
            }
            assert init_producer_id(port, transactional_id, 60_000).error_code == ErrorCode.concurrent_transactions
            assert store.get(transactional_id) == found
        finally:
            # Killed while hung: the marker sent to it is never answered.
            agents.kill(hung)
        agents.start(hung)
        completed = wait_until(
            lambda: (f := store.get(transactional_id)) is not None and f[0].state == COMPLETE_COMMIT and f[0],
            f"the coordinator's sweep writing the marker once broker {hung} is back",
            timeout_s=120,
        )
        assert completed.producer_epoch == epoch
        assert stuck_values("read_committed") == sent[stuck]
        everything = sorted(v for records in sent.values() for v in records)
        assert values(kafka_read(agents.bootstrap_servers, "read_committed", topic, len(everything), 2)) == everything
        # A retried EndTxn of a completed transaction is answered as done (Kafka's NONE).
        assert end_txn(port, transactional_id, producer_id, epoch, committed=True) == ErrorCode.none
