"""A store that fails, as a Kafka client hears it (DESIGN §14, §16): a produce whose round
the store failed is answered KAFKA_STORAGE_ERROR, which clients retry, never
UNKNOWN_SERVER_ERROR, which librdkafka takes as permanent: it then fails the batch and bumps
an idempotent producer's epoch, and sends its other partitions' batches that may have been
stored again under the new epoch, where no sequence check can recognise them."""

from __future__ import annotations

import logging
import socket

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from kio.schema.errors import ErrorCode

import sparklog
from sparklog.testing import BrokerAgents
from sparklog.testing.store_proxy import FaultPlan, StoreProxy
from tests.helpers import wait_until
from tests.wire.conftest import create_led_topic
from tests.wire.raw import produce_answer, produce_frame, recv_frame

TOPIC = "failing"
STORE_DOWN = FaultPlan(internal_error=1.0)  # every request answered 500, none reaches the store
# librdkafka's text for KAFKA_STORAGE_ERROR, in its debug line for a failed batch.
STORAGE_ERROR_TEXT = "Disk error when trying to access log file"


def stored_values(bootstrap: str, partition: int = 0) -> list[bytes]:
    """Every value of ``TOPIC``'s ``partition``, read from offset 0 to the high watermark."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False})
    try:
        high = int(consumer.get_watermark_offsets(TopicPartition(TOPIC, partition), timeout=30)[1])
        consumer.assign([TopicPartition(TOPIC, partition, 0)])
        values: list[bytes] = []
        while len(values) < high:
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                values.append(message.value() or b"")
        return values
    finally:
        consumer.close()


def test_a_produce_the_store_failed_is_answered_kafka_storage_error_and_stores_nothing(
    cluster: sparklog.Cluster, counted_broker: BrokerAgents, proxy: StoreProxy
) -> None:
    create_led_topic(cluster, counted_broker, TOPIC, partitions=1)
    proxy.inject(STORE_DOWN)
    try:
        with socket.create_connection(("127.0.0.1", counted_broker.port(1)), timeout=60) as sock:
            sock.sendall(produce_frame(TOPIC, 7, b"refused"))
            correlation_id, code, base_offset = produce_answer(recv_frame(sock))
    finally:
        proxy.inject(FaultPlan())
    assert (correlation_id, ErrorCode(code), base_offset) == (7, ErrorCode.kafka_storage_error, -1)
    with socket.create_connection(("127.0.0.1", counted_broker.port(1)), timeout=60) as sock:
        sock.sendall(produce_frame(TOPIC, 8, b"stored"))
        assert produce_answer(recv_frame(sock)) == (8, 0, 0), "the store back: the next produce is stored at 0"
    assert stored_values(counted_broker.bootstrap_servers) == [b"stored"]


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_an_idempotent_producer_retries_a_batch_the_store_failed_under_its_sequence(
    cluster: sparklog.Cluster, counted_broker: BrokerAgents, proxy: StoreProxy
) -> None:
    """The batch is delivered once the store is back, stored once, and the producer's epoch
    did not change; with UNKNOWN_SERVER_ERROR librdkafka failed it for good."""
    lines = _Lines()
    logger = logging.getLogger("rdkafka-store-errors")
    logger.addHandler(lines)
    logger.setLevel(logging.DEBUG)
    agents = counted_broker
    try:
        create_led_topic(cluster, agents, TOPIC, partitions=1)
        producer = Producer(
            {
                "bootstrap.servers": agents.bootstrap_servers,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 0,
                "debug": "msg,eos",
                "log_level": 7,
            },
            logger=logger,
        )
        producer.produce(TOPIC, value=b"before", partition=0)
        assert producer.flush(30) == 0
        reports: list[KafkaError | None] = []

        def report(error: KafkaError | None, _message: Message) -> None:
            reports.append(error)

        proxy.inject(STORE_DOWN)
        try:
            producer.produce(TOPIC, value=b"through a failure", partition=0, on_delivery=report)
            wait_until(
                lambda: producer.poll(0.05) >= 0 and any(STORAGE_ERROR_TEXT in line for line in lines.lines),
                "the producer answered KAFKA_STORAGE_ERROR",
            )
        finally:
            proxy.inject(FaultPlan())
        assert producer.flush(60) == 0
        assert reports == [None], f"delivered after the store came back: {reports}"
        assert not [line for line in lines.lines if "epoch bump" in line or "PID mismatch" in line], (
            "a retriable error keeps the producer's epoch"
        )
        assert stored_values(agents.bootstrap_servers) == [b"before", b"through a failure"]
    finally:
        logger.removeHandler(lines)
