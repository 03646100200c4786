"""An acks=all round waits for its in-sync followers off the commit path
(sparklog/broker/leader_appender.py): while a follower hangs (SIGSTOP), the leader keeps
committing and answering the partition's other rounds. Two real broker agents,
confluent-kafka producers."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import KafkaError, Message, Producer

import sparklog
from sparklog.testing import BrokerAgents
from tests.helpers import wait_until
from tests.wire.conftest import started_brokers

TIMEOUT_S = 60.0
# The hung follower stays in the ISR for the whole test: the acks=all record waits for it.
LAG_TIME_MAX_MS = 120_000


def producer(bootstrap: str, acks: str) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 0, "enable.idempotence": False})


def test_a_round_waiting_for_a_hung_follower_holds_up_no_later_round(
    cluster: sparklog.Cluster, zk_connect: str, sparklog_home: Path, tmp_path: Path
) -> None:
    with started_brokers(
        zk_connect, sparklog_home, tmp_path, (1, 2), replica_lag_time_max_ms=LAG_TIME_MAX_MS
    ) as two_brokers:
        hung_follower_round(cluster, two_brokers)


def hung_follower_round(cluster: sparklog.Cluster, two_brokers: BrokerAgents) -> None:
    topic = "acks-all-pipeline"
    cluster.create_topic(topic, partitions=1, replication_factor=2)
    partition = wait_until(
        lambda: (
            (p := cluster.describe_topic(topic).partitions[0]).leader in two_brokers.live() and len(p.isr) == 2 and p
        ),
        f"{topic}-0: a live leader with both replicas in sync",
        timeout_s=TIMEOUT_S,
    )
    leader = partition.leader
    [follower] = [b for b in partition.replicas if b != leader]
    bootstrap = f"127.0.0.1:{two_brokers.port(leader)}"
    leader_table = cluster.replicas.replica_table(topic, leader)
    outcomes: dict[str, KafkaError | None] = {}

    def delivered(err: KafkaError | None, msg: Message) -> None:
        value = msg.value()
        assert value is not None
        outcomes[value.decode()] = err

    waiting, quick = producer(bootstrap, "all"), producer(bootstrap, "1")
    for client in (waiting, quick):
        assert not client.list_topics(topic, timeout=TIMEOUT_S).topics[topic].error
    two_brokers.pause(follower)
    try:
        waiting.produce(topic, value=b"all", partition=0, on_delivery=delivered)
        waiting.poll(0)
        wait_until(lambda: leader_table.current_log_end(0) == 1, "the acks=all record committed by the leader")
        quick.produce(topic, value=b"one", partition=0, on_delivery=delivered)
        assert quick.flush(TIMEOUT_S) == 0, "the acks=1 record behind the waiting round was not answered"
        waiting.poll(0)
        # Before the pipeline the acks=1 round waited behind the ISR wait: both were answered together.
        assert outcomes == {"one": None}, f"{outcomes}: the acks=1 record was answered only with the acks=all one"
        assert leader_table.current_log_end(0) == 2
    finally:
        two_brokers.resume(follower)
    assert waiting.flush(TIMEOUT_S) == 0
    assert outcomes == {"one": None, "all": None}
