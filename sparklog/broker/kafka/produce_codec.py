"""The Produce request and response on the wire (v3..v9), read and written by hand.

Produce is the one request a broker gets by the hundred thousand: kio's generic reader and
writer (one dataclass per struct, a type check per field) cost a small request more than
everything else the broker does for it, so this module reads the request into plain tuples
and writes the response straight from the outcomes. Everything else stays on kio.
``tests/unit/test_produce_codec.py`` holds both directions to kio's encoding, byte for byte,
for every version served, and feeds them truncated and malformed input.

Layouts (Kafka's ProduceRequest.json / ProduceResponse.json): v3..v8 are classic (int16
string lengths, int32 array counts, nullable as -1); v9 is flexible (unsigned varint
lengths plus one, 0 for null, and a tagged-field section after every struct). The response
adds ``log_start_offset`` from v5 and ``record_errors`` and ``error_message`` from v8.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import NamedTuple

__all__ = [
    "FIRST_FLEXIBLE_VERSION",
    "PartitionProduceData",
    "ProduceRequestBody",
    "TopicProduceData",
    "encode_produce_response",
    "read_produce_request",
]

FIRST_FLEXIBLE_VERSION = 9

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_ACKS_TIMEOUT = struct.Struct(">hi")
_PARTITION_HEAD = struct.Struct(">ihq")  # index, error code, base offset
_I64 = struct.Struct(">q")


class PartitionProduceData:
    __slots__ = ("index", "records")

    def __init__(self, index: int, records: bytes | None) -> None:
        self.index = index
        self.records = records

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PartitionProduceData) and (self.index, self.records) == (other.index, other.records)

    def __hash__(self) -> int:
        return hash((self.index, self.records))

    def __repr__(self) -> str:
        return f"PartitionProduceData(index={self.index}, records={self.records!r})"


class TopicProduceData(NamedTuple):
    name: str
    partition_data: tuple[PartitionProduceData, ...]


class ProduceRequestBody(NamedTuple):
    transactional_id: str | None
    acks: int
    timeout_ms: int
    topic_data: tuple[TopicProduceData, ...]


class _Reader:
    """A cursor over one request's bytes; every read checks the bounds."""

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes, pos: int) -> None:
        self.data = data
        self.pos = pos

    def take(self, size: int) -> bytes:
        end = self.pos + size
        if size < 0 or end > len(self.data):
            raise ValueError(f"a field of {size} bytes at byte {self.pos} runs past the request's {len(self.data)}")
        value = self.data[self.pos : end]
        self.pos = end
        return value

    def unpack(self, layout: struct.Struct) -> tuple[int, ...]:
        values = layout.unpack_from(self.data, self.pos)  # struct.error when short
        self.pos += layout.size
        return values

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            if self.pos >= len(self.data):
                raise ValueError("a varint runs past the end of the request")
            byte = self.data[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise ValueError("a varint longer than 5 bytes")

    def skip_tagged_fields(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()  # the tag: none of Produce's are read
            self.take(self.uvarint())

    # Classic and flexible forms of the same fields.
    def string(self, flexible: bool, nullable: bool) -> str | None:
        size = self.uvarint() - 1 if flexible else self.unpack(_I16)[0]
        if size < 0:
            if not nullable:
                raise ValueError(f"a null string at byte {self.pos} where one is required")
            return None
        return self.take(size).decode("utf-8")

    def count(self, flexible: bool) -> int:
        size = self.uvarint() - 1 if flexible else self.unpack(_I32)[0]
        if size < 0:
            raise ValueError(f"a null array at byte {self.pos} where one is required")
        return size

    def nullable_bytes(self, flexible: bool) -> bytes | None:
        size = self.uvarint() - 1 if flexible else self.unpack(_I32)[0]
        return None if size < 0 else self.take(size)


def read_produce_request(data: bytes, pos: int, version: int) -> tuple[ProduceRequestBody, int]:
    """The Produce request body of ``version`` at ``data[pos:]`` and where it ended; a
    ``ValueError`` or ``struct.error`` on anything malformed or truncated."""
    flexible = version >= FIRST_FLEXIBLE_VERSION
    reader = _Reader(data, pos)
    transactional_id = reader.string(flexible, nullable=True)
    acks, timeout_ms = reader.unpack(_ACKS_TIMEOUT)
    topics = []
    for _ in range(reader.count(flexible)):
        name = reader.string(flexible, nullable=False)
        assert name is not None
        partitions = []
        for _ in range(reader.count(flexible)):
            (index,) = reader.unpack(_I32)
            partitions.append(PartitionProduceData(index, reader.nullable_bytes(flexible)))
            if flexible:
                reader.skip_tagged_fields()
        topics.append(TopicProduceData(name, tuple(partitions)))
        if flexible:
            reader.skip_tagged_fields()
    if flexible:
        reader.skip_tagged_fields()
    return ProduceRequestBody(transactional_id, acks, timeout_ms, tuple(topics)), reader.pos


# (index, error code, base offset, log append time ms or -1, error message or None)
PartitionOutcome = tuple[int, int, int, int, str | None]


def encode_produce_response(
    version: int, correlation_id: int, topics: Iterable[tuple[str, Iterable[PartitionOutcome]]]
) -> bytes:
    """The response frame payload (header and body) of a Produce request of ``version``;
    ``log_start_offset`` is -1, ``record_errors`` empty and throttling 0, as sparklog answers."""
    flexible = version >= FIRST_FLEXIBLE_VERSION
    out = [_I32.pack(correlation_id), b"\x00" if flexible else b""]  # response header v1 / v0
    topic_list = list(topics)
    out.append(_count(len(topic_list), flexible))
    for name, partitions in topic_list:
        out.append(_string(name, flexible))
        partition_list = list(partitions)
        out.append(_count(len(partition_list), flexible))
        for index, error_code, base_offset, append_ms, message in partition_list:
            out.append(_PARTITION_HEAD.pack(index, error_code, base_offset))
            out.append(_I64.pack(append_ms))
            if version >= 5:
                out.append(_I64.pack(-1))  # log_start_offset: not reported
            if version >= 8:
                out.append(_count(0, flexible))  # record_errors
                out.append(_nullable_string(message, flexible))
            if flexible:
                out.append(b"\x00")
        if flexible:
            out.append(b"\x00")
    out.append(_I32.pack(0))  # throttle_time_ms
    if flexible:
        out.append(b"\x00")
    return b"".join(out)


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _count(size: int, flexible: bool) -> bytes:
    return _uvarint(size + 1) if flexible else _I32.pack(size)


def _string(value: str, flexible: bool) -> bytes:
    data = value.encode("utf-8")
    return (_uvarint(len(data) + 1) if flexible else _I16.pack(len(data))) + data


def _nullable_string(value: str | None, flexible: bool) -> bytes:
    if value is None:
        return b"\x00" if flexible else _I16.pack(-1)
    return _string(value, flexible)
