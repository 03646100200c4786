"""A raw Kafka-protocol client for tests that must send what no client library would:
frames and requests built by hand with kio's message types."""

from __future__ import annotations

import io
import socket
import struct
from typing import Any

from kio.index import load_response_schema
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32

TIMEOUT_S = 30.0


def send_frame(sock: socket.socket, payload: bytes) -> None:
    sock.sendall(struct.pack(">i", len(payload)) + payload)


def recv_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError(f"closed after {len(data)} of {size} bytes")
        data += chunk
    return data


def recv_frame(sock: socket.socket) -> bytes:
    (size,) = struct.unpack(">i", recv_exactly(sock, 4))
    return recv_exactly(sock, size)


def request_bytes(api_key: int, api_version: int, correlation_id: int, body: Any = None) -> bytes:
    """A request frame payload; the header version follows the body's (flexible → v2)."""
    buffer = io.BytesIO()
    flexible = body is None or getattr(type(body), "__flexible__", True)
    header_type = RequestHeaderV2 if flexible else RequestHeaderV1
    entity_writer(header_type)(
        buffer,
        header_type(
            request_api_key=i16(api_key),
            request_api_version=i16(api_version),
            correlation_id=i32(correlation_id),
            client_id="raw",
        ),
    )
    if body is not None:
        entity_writer(type(body))(buffer, body)
    return buffer.getvalue()


def call(port: int, body: Any, correlation_id: int = 1) -> Any:
    """Send ``body`` (a kio request entity) on a new connection; the decoded response body."""
    api_key, version = int(body.__api_key__), int(body.__version__)
    response_type = load_response_schema(api_key, version)
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S) as sock:
        send_frame(sock, request_bytes(api_key, version, correlation_id, body))
        payload = recv_frame(sock)
    header, size = entity_reader(response_type.__header_schema__)(payload, 0)
    assert header.correlation_id == correlation_id
    response, _ = entity_reader(response_type)(payload, size)
    return response


# -- Produce v3 frames built by hand: a client that pipelines without waiting ----------------
PRODUCE_V3 = (0, 3)


def one_record_batch(value: bytes) -> bytes:
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    builder.append(0, timestamp=None, key=None, value=value, headers=[])
    return bytes(builder.build())


def produce_frame(topic: str, correlation_id: int, value: bytes) -> bytes:
    """A whole Produce v3 frame (acks=all, 30 s timeout) of one one-record batch to partition 0."""
    name = topic.encode()
    batch = one_record_batch(value)
    body = (
        struct.pack(">hhi", -1, -1, 30_000)
        + struct.pack(">ih", 1, len(name))
        + name
        + struct.pack(">iii", 1, 0, len(batch))
        + batch
    )
    header = struct.pack(">hhih", *PRODUCE_V3, correlation_id, 3) + b"raw"
    return struct.pack(">i", len(header) + len(body)) + header + body


def produce_answer(frame: bytes) -> tuple[int, int, int]:
    """(correlation id, error code, base offset) of a one-partition Produce v3 response."""
    correlation_id, _topics, name_len = struct.unpack_from(">iih", frame)
    at = 10 + name_len
    _partitions, _partition, error_code, base_offset = struct.unpack_from(">iihq", frame, at)
    return correlation_id, error_code, base_offset
