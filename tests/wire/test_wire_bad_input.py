"""Bad produce input on the wire (DESIGN §14, invariant 10): each gets Kafka's error code for
that partition, nothing of it is appended, the rest of the same request still is, and the
broker keeps serving other clients.

Requests are built by hand (kio message types, kafka-python's batch builder) because no
client library sends a corrupt CRC or a wrong magic on purpose.
"""

from __future__ import annotations

import datetime
import socket
import struct
from collections.abc import Callable

import pytest
from confluent_kafka import Producer
from kafka.record.default_records import DefaultRecordBatchBuilder
from kio.schema.errors import ErrorCode
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.schema.types import TopicName
from kio.serial import entity_reader
from kio.static.primitive import i16, i32, i32Timedelta

import sparklog
from sparklog.model.kafka_batches import crc32c
from sparklog.testing import BrokerAgents
from tests.wire.conftest import create_led_topic
from tests.wire.raw import call, recv_frame, request_bytes

TOPIC = "wire-bad"


def batch(values: list[bytes], codec: int = 0) -> bytearray:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 30,
    )
    for i, value in enumerate(values):
        builder.append(i, timestamp=1_700_000_000_000, key=None, value=value, headers=[])
    return builder.build()


def corrupt_crc(data: bytearray) -> bytes:
    data[-1] ^= 0xFF  # a flipped bit in the last record: the CRC32C no longer matches
    return bytes(data)


def old_magic(data: bytearray) -> bytes:
    data[16] = 1
    return bytes(data)


def truncated(data: bytearray) -> bytes:
    return bytes(data[:-7])


def with_crc(data: bytearray) -> bytes:
    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    return bytes(data)


def bad_record(data: bytearray) -> bytes:
    data[61] = 0xFF  # the first record's length varint runs past the record: the CRC is made right
    return with_crc(data)


def control_attribute(data: bytearray) -> bytes:
    struct.pack_into(">h", data, 21, 0x30)  # transactional + control: only brokers write those
    return with_crc(data)


def produce_request(partitions: dict[int, bytes], acks: int = 1, topic: str = TOPIC) -> ProduceRequest:
    return ProduceRequest(
        transactional_id=None,
        acks=i16(acks),
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=10)),
        topic_data=(
            TopicProduceData(
                name=TopicName(topic),
                partition_data=tuple(
                    # kio declares its own record-batch type; these bytes are one, encoded
                    PartitionProduceData(index=i32(p), records=data)  # type: ignore[arg-type]
                    for p, data in partitions.items()
                ),
            ),
        ),
    )


CASES: dict[str, tuple[Callable[[], bytes], ErrorCode]] = {
    "corrupt crc": (lambda: corrupt_crc(batch([b"a", b"b"])), ErrorCode.corrupt_message),
    "truncated batch": (lambda: truncated(batch([b"a", b"b"])), ErrorCode.corrupt_message),
    "magic 1": (lambda: old_magic(batch([b"a"])), ErrorCode.unsupported_for_message_format),
    "bad record inside a good crc": (lambda: bad_record(batch([b"a", b"b"])), ErrorCode.corrupt_message),
    "control batch from a client": (lambda: control_attribute(batch([b"a"])), ErrorCode.corrupt_message),
    "batch over max.message.bytes": (lambda: bytes(batch([b"x" * 3000])), ErrorCode.message_too_large),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_bad_partition_is_refused_alone_and_the_broker_serves_on(
    cluster: sparklog.Cluster, one_broker: BrokerAgents, case: str
) -> None:
    create_led_topic(cluster, one_broker, TOPIC, partitions=2, **{"max.message.bytes": "2048"})
    make_bad, expected = CASES[case]
    response = call(one_broker.port(1), produce_request({0: make_bad(), 1: bytes(batch([b"good"]))}))
    by_partition = {p.index: p for p in response.responses[0].partition_responses}
    assert by_partition[0].error_code == expected
    assert by_partition[0].error_message  # says what was wrong
    assert by_partition[1].error_code == ErrorCode.none and by_partition[1].base_offset == 0
    stored = cluster.read(TOPIC).to_pylist()
    assert [(r["partition"], r["value"]) for r in stored] == [(1, b"good")]  # nothing of the bad one
    # another client is served as before
    producer = Producer({"bootstrap.servers": one_broker.bootstrap_servers})
    producer.produce(TOPIC, value=b"after", partition=0)
    assert producer.flush(30) == 0
    assert [r["value"] for r in cluster.read(TOPIC, partition=0).to_pylist()] == [b"after"]


def test_unknown_topic_partition_and_acks_get_their_codes(cluster: sparklog.Cluster, one_broker: BrokerAgents) -> None:
    create_led_topic(cluster, one_broker, TOPIC, partitions=1)
    good = bytes(batch([b"v"]))
    port = one_broker.port(1)
    missing = call(port, produce_request({0: good}, topic="no-such-topic")).responses[0].partition_responses[0]
    assert missing.error_code == ErrorCode.unknown_topic_or_partition
    beyond = call(port, produce_request({7: good})).responses[0].partition_responses[0]
    assert beyond.error_code == ErrorCode.unknown_topic_or_partition
    acks = call(port, produce_request({0: good}, acks=2)).responses[0].partition_responses[0]
    assert acks.error_code == ErrorCode.invalid_required_acks
    assert cluster.read(TOPIC).num_rows == 0
    assert "no-such-topic" not in cluster.list_topics()  # never auto-created


def test_a_batch_with_a_bad_length_field_is_refused(cluster: sparklog.Cluster, one_broker: BrokerAgents) -> None:
    create_led_topic(cluster, one_broker, TOPIC, partitions=1)
    data = batch([b"v"])
    struct.pack_into(">i", data, 8, 10_000)  # batchLength beyond the bytes sent
    response = call(one_broker.port(1), produce_request({0: bytes(data)}))
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.corrupt_message
    assert cluster.read(TOPIC).num_rows == 0


def test_pipelined_produces_before_an_unreadable_request_are_answered_before_the_close(
    cluster: sparklog.Cluster, one_broker: BrokerAgents
) -> None:
    """Produce requests may be pipelined, so an unreadable request behind them fails while
    they are still committing: their answers go out first, then the connection closes."""
    create_led_topic(cluster, one_broker, TOPIC, partitions=1)
    frames = [
        request_bytes(0, 9, correlation_id, produce_request({0: bytes(batch([b"v%d" % correlation_id]))}, acks=-1))
        for correlation_id in (31, 32, 33)
    ]
    frames.append(struct.pack(">hhi", 0, 9, 34) + b"\xff" * 40)  # an unreadable Produce request
    with socket.create_connection(("127.0.0.1", one_broker.port(1)), timeout=30) as sock:
        sock.sendall(b"".join(struct.pack(">i", len(frame)) + frame for frame in frames))
        answered = [entity_reader(ResponseHeaderV1)(recv_frame(sock), 0)[0].correlation_id for _ in range(3)]
        assert answered == [31, 32, 33]
        assert recv_eof(sock), "the connection stays open after the unreadable request"
    assert [r["value"] for r in cluster.read(TOPIC).to_pylist()] == [b"v31", b"v32", b"v33"]


def recv_eof(sock: socket.socket) -> bool:
    """The broker closed the connection (EOF or reset) rather than answering or waiting."""
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
