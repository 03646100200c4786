"""The broker's Prometheus endpoint after a known workload (DESIGN §14 "Metrics"): real agent
processes, confluent-kafka clients, the endpoint scraped over HTTP."""

from __future__ import annotations

from confluent_kafka import Consumer, Producer, TopicPartition

import sparklog
from sparklog.testing import BrokerAgents
from sparklog.testing.metrics import Scrape, scrape
from tests.helpers import wait_until
from tests.wire.conftest import create_led_topic

TOPIC = "metered"
PARTITIONS = 3
RECORDS = 600
VALUE_BYTES = 100


def _produce(bootstrap: str) -> None:
    """:data:`RECORDS` records of :data:`VALUE_BYTES` bytes, spread over the partitions."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    failed: list[object] = []

    def delivered(err: object, _msg: object) -> None:
        if err is not None:
            failed.append(err)

    for i in range(RECORDS):
        producer.produce(TOPIC, value=bytes([i % 251]) * VALUE_BYTES, partition=i % PARTITIONS, on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(30) == 0, "records left undelivered"
    assert not failed, f"delivery errors: {failed[:5]}"


def _consume(bootstrap: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False})
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    received = 0
    try:
        while received < RECORDS:
            batch = consumer.consume(num_messages=1000, timeout=30)
            assert batch, f"no records within 30 s after {received}"
            for message in batch:
                assert message.error() is None, message.error()
                received += 1
    finally:
        consumer.close()
    return received


def _answered(metrics: Scrape, request: str) -> float:
    return metrics.total("kafka_network_requestmetrics_requests_total", request=request)


def test_names_and_values_after_a_known_workload(cluster: sparklog.Cluster, one_broker: BrokerAgents) -> None:
    create_led_topic(cluster, one_broker, TOPIC, partitions=PARTITIONS)
    url = one_broker.metrics_url(1)
    assert url.startswith("http://127.0.0.1:") and url.endswith("/metrics"), url
    bootstrap = one_broker.bootstrap_servers
    _produce(bootstrap)
    assert _consume(bootstrap) == RECORDS

    # A request is counted once its answer is written: the client may have read it just before.
    metrics = wait_until(
        lambda: (m := scrape(url)).get("kafka_server_brokertopicmetrics_bytesout_total", topic=TOPIC) and m,
        "bytes out counted",
    )
    for request in ("ApiVersions", "Metadata", "Produce", "Fetch"):
        assert _answered(metrics, request) >= 1, (
            f"{request}: {metrics.series('kafka_network_requestmetrics_requests_total')}"
        )

    # Per topic, and Kafka's all-topics series (no label): only this topic was produced to.
    for name in ("messagesin", "bytesin", "bytesout"):
        total = f"kafka_server_brokertopicmetrics_{name}_total"
        assert metrics.value(total, topic=TOPIC) == metrics.value(total), name
    assert metrics.value("kafka_server_brokertopicmetrics_messagesin_total", topic=TOPIC) == RECORDS
    bytes_in = metrics.value("kafka_server_brokertopicmetrics_bytesin_total", topic=TOPIC)
    assert bytes_in >= RECORDS * VALUE_BYTES
    assert metrics.value("kafka_server_brokertopicmetrics_bytesout_total", topic=TOPIC) >= RECORDS * VALUE_BYTES

    # Commit rounds: every record and every batch byte in some round.
    assert metrics.value("sparklog_commit_round_records_sum", topic=TOPIC) == RECORDS
    assert metrics.value("sparklog_commit_round_bytes_sum", topic=TOPIC) == bytes_in
    rounds = metrics.value("sparklog_commit_round_seconds_count", topic=TOPIC)
    assert 1 <= rounds <= RECORDS
    assert metrics.value("sparklog_commit_round_append_seconds_count", topic=TOPIC) == rounds
    for name in ("sparklog_commit_round_seconds", "sparklog_commit_round_append_seconds"):
        for quantile in ("0.5", "0.99"):
            assert metrics.value(name, topic=TOPIC, quantile=quantile) > 0, (name, quantile)
    assert metrics.value("sparklog_commit_round_append_seconds_sum", topic=TOPIC) <= metrics.value(
        "sparklog_commit_round_seconds_sum", topic=TOPIC
    )

    # Per request: TotalTimeMs (Kafka's percentile labels), queue time, CPU time.
    for request in ("Produce", "Fetch", "Metadata"):
        answered = _answered(metrics, request)
        for quantile in ("0.50", "0.99"):
            assert metrics.value("kafka_network_requestmetrics_totaltimems", request=request, quantile=quantile) > 0
            queued = metrics.value(
                "kafka_network_requestmetrics_requestqueuetimems", request=request, quantile=quantile
            )
            assert queued >= 0
        assert metrics.value("kafka_network_requestmetrics_totaltimems_count", request=request) == answered
        assert metrics.value("kafka_network_requestmetrics_requestqueuetimems_count", request=request) == answered
        assert metrics.value("sparklog_request_cpu_seconds_count", request=request) == answered
        cpu_p50 = metrics.value("sparklog_request_cpu_seconds", request=request, quantile="0.5")
        assert 0 < cpu_p50 < 1, f"{request}: {cpu_p50} s of CPU"
        # CPU time never exceeds the wall time the request took (one thread at a time works on it).
        cpu_sum = metrics.value("sparklog_request_cpu_seconds_sum", request=request)
        total_sum_s = metrics.value("kafka_network_requestmetrics_totaltimems_sum", request=request) / 1000
        assert 0 < cpu_sum <= total_sum_s, (request, cpu_sum, total_sum_s)

    assert metrics.value("kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert metrics.value("kafka_server_replicamanager_leadercount") >= PARTITIONS
    assert metrics.value("process_cpu_seconds_total") > 0


def test_under_replicated_partitions_when_a_follower_stops(
    cluster: sparklog.Cluster, two_brokers: BrokerAgents
) -> None:
    cluster.create_topic(TOPIC, partitions=2, replication_factor=2, replica_assignment={0: [1, 2], 1: [1, 2]})

    def in_sync() -> bool:
        return all(p.leader == 1 and sorted(p.isr) == [1, 2] for p in cluster.describe_topic(TOPIC).partitions)

    wait_until(in_sync, f"{TOPIC} led by broker 1 with both replicas in sync")
    url = two_brokers.metrics_url(1)
    gauge = "kafka_server_replicamanager_underreplicatedpartitions"
    wait_until(lambda: scrape(url).value(gauge) == 0, "no under-replicated partition")
    hosted = scrape(url).value("kafka_server_replicamanager_partitioncount")
    assert hosted >= 2 and scrape(two_brokers.metrics_url(2)).value("kafka_server_replicamanager_leadercount") == 0

    two_brokers.stop(2)
    wait_until(lambda: scrape(url).value(gauge) == 2, "both led partitions under-replicated", timeout_s=60)
    assert scrape(url).value("kafka_server_replicamanager_leadercount") >= 2
