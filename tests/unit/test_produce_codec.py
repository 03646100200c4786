"""The hand-written Produce codec (sparklog/broker/kafka/produce_codec.py) against kio's,
byte for byte, for every version the brokers serve; and malformed requests refused."""

from __future__ import annotations

import datetime
import io
import struct
from typing import Any, Literal

import pytest
from kio.index import load_payload_module
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer
from kio.static.constants import EntityType

from sparklog.broker.kafka.produce_codec import (
    PartitionProduceData,
    ProduceRequestBody,
    TopicProduceData,
    encode_produce_response,
    read_produce_request,
)

VERSIONS = range(3, 10)
BATCH = bytes(range(256)) * 3


def _module(version: int, kind: Literal[EntityType.request, EntityType.response]) -> Any:
    return load_payload_module(0, version, kind)


def kio_request(
    version: int, transactional_id: str | None, topics: list[tuple[str, list[tuple[int, bytes | None]]]]
) -> bytes:
    m = _module(version, EntityType.request)
    body = m.ProduceRequest(
        transactional_id=transactional_id,
        acks=-1,
        timeout=datetime.timedelta(milliseconds=30_000),
        topic_data=tuple(
            m.TopicProduceData(
                name=name,
                partition_data=tuple(m.PartitionProduceData(index=i, records=r) for i, r in partitions),
            )
            for name, partitions in topics
        ),
    )
    buffer = io.BytesIO()
    entity_writer(m.ProduceRequest)(buffer, body)
    return buffer.getvalue()


TOPICS: list[tuple[str, list[tuple[int, bytes | None]]]] = [
    ("orders", [(0, BATCH), (5, b"")]),
    ("é-topic", [(2, None)]),
    ("big" * 50, [(i, BATCH[:i]) for i in range(200)]),  # lengths past one varint byte
]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("transactional_id", [None, "txn-1"])
def test_a_request_reads_as_kio_writes_it(version: int, transactional_id: str | None) -> None:
    data = b"prefix" + kio_request(version, transactional_id, TOPICS)
    body, end = read_produce_request(data, len(b"prefix"), version)
    assert end == len(data)
    assert body == ProduceRequestBody(
        transactional_id,
        -1,
        30_000,
        tuple(TopicProduceData(n, tuple(PartitionProduceData(i, r) for i, r in ps)) for n, ps in TOPICS),
    )


def kio_response(
    version: int, correlation_id: int, topics: list[tuple[str, list[tuple[int, int, int, int, str | None]]]]
) -> bytes:
    m = _module(version, EntityType.response)
    fields = {f for f in m.PartitionProduceResponse.__dataclass_fields__}
    partitions_of = []
    for name, partitions in topics:
        built = []
        for index, code, base, append_ms, message in partitions:
            values: dict[str, Any] = {
                "index": index,
                "error_code": ErrorCode(code),
                "base_offset": base,
                "log_append_time": None
                if append_ms < 0
                else datetime.datetime.fromtimestamp(append_ms / 1000, datetime.UTC),
                "log_start_offset": -1,
                "record_errors": (),
                "error_message": message,
            }
            built.append(m.PartitionProduceResponse(**{k: v for k, v in values.items() if k in fields}))
        partitions_of.append(m.TopicProduceResponse(name=name, partition_responses=tuple(built)))
    response = m.ProduceResponse(responses=tuple(partitions_of), throttle_time=datetime.timedelta(0))
    buffer = io.BytesIO()
    header_type = response.__header_schema__
    entity_writer(header_type)(buffer, header_type(correlation_id=correlation_id))
    entity_writer(m.ProduceResponse)(buffer, response)
    return buffer.getvalue()


RESULTS: list[tuple[str, list[tuple[int, int, int, int, str | None]]]] = [
    ("orders", [(0, 0, 41, -1, None), (5, 0, 7, 1_700_000_000_123, None)]),
    ("é-topic", [(2, ErrorCode.not_leader_or_follower, -1, -1, "broker 1 does not lead é-topic-2 ✓")]),
    ("many", [(i, 0, i * 1000, -1, None) for i in range(150)]),
]


@pytest.mark.parametrize("version", VERSIONS)
def test_a_response_is_written_as_kio_writes_it(version: int) -> None:
    ours = encode_produce_response(version, 123_456, RESULTS)
    assert ours == kio_response(version, 123_456, RESULTS)


@pytest.mark.parametrize("version", [3, 9])
def test_a_truncated_request_is_refused_wherever_it_stops(version: int) -> None:
    data = kio_request(version, "t", TOPICS[:1])
    for cut in range(len(data)):
        with pytest.raises((ValueError, struct.error)):
            read_produce_request(data[:cut], 0, version)


@pytest.mark.parametrize(
    ("version", "data", "message"),
    [
        (3, struct.pack(">hhi", -1, -1, 100) + struct.pack(">i", 1) + struct.pack(">h", -1), "null string"),
        (3, struct.pack(">hhi", -1, -1, 100) + struct.pack(">i", -1), "null array"),
        (3, struct.pack(">hhi", -1, -1, 100) + struct.pack(">i", 1) + struct.pack(">h", 2) + b"\xff\xfe", "utf-8"),
        (9, b"\x00" + struct.pack(">hi", -1, 100) + b"\xff\xff\xff\xff\xff\xff", "varint"),
        (3, struct.pack(">hhi", -1, -1, 100) + struct.pack(">i", 1) + struct.pack(">h", 100) + b"x", "runs past"),
    ],
)
def test_malformed_requests_say_what_is_wrong(version: int, data: bytes, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        read_produce_request(data, 0, version)
