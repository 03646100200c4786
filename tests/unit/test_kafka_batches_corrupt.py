"""Bad input to the native record-batch codec (DESIGN §14, invariant 10): every malformed
batch is refused with an error naming what is wrong, and nothing — random bytes, mutated
batches with a recomputed CRC — crashes it or reads outside the input."""

from __future__ import annotations

import os
import random
import struct

import pyarrow as pa
import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from sparklog.errors import PolicyError
from sparklog.model.kafka_batches import (
    CorruptBatchError,
    UnsupportedMagicError,
    crc32c,
    decode_records,
    encode_control_batch,
    encode_records,
    read_batches,
)
from sparklog.model.kafka_compression import deflate
from sparklog.model.schema import FILE_SCHEMA

T0 = 1_700_000_000_000
FUZZ_ROUNDS = int(os.environ.get("SPARKLOG_FUZZ_ROUNDS", "4000"))


def batch(
    values: list[bytes | None], codec: int = 0, headers: list[tuple[str, bytes | None]] | None = None
) -> bytearray:
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
        builder.append(i, timestamp=T0 + i, key=b"k", value=value, headers=headers or [])
    return builder.build()


def with_crc(data: bytearray) -> bytes:
    """``data`` with its CRC32C made right again (the record checks must catch what is wrong)."""
    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    return bytes(data)


def records_replaced(records: bytes, count: int, codec: int = 0) -> bytes:
    """A one-batch request whose payload is ``records`` (``count`` declared), CRC right."""
    data = batch([b"x"] * count)[:61]
    payload = bytes(deflate(codec, records)) if codec else records
    data += payload
    struct.pack_into(">i", data, 8, len(data) - 12)
    struct.pack_into(">h", data, 21, codec)
    return with_crc(data)


def varint(value: int) -> bytes:
    zigzag = (value << 1) ^ (value >> 63)
    out = bytearray()
    while zigzag >= 0x80:
        out.append((zigzag & 0x7F) | 0x80)
        zigzag >>= 7
    out.append(zigzag)
    return bytes(out)


def record(body: bytes) -> bytes:
    return varint(len(body)) + body


def body(
    key: bytes | None = b"k", value: bytes | None = b"v", headers: bytes = varint(0), offset_delta: int = 0
) -> bytes:
    key_part = varint(-1) if key is None else varint(len(key)) + key
    value_part = varint(-1) if value is None else varint(len(value)) + value
    return b"\x00" + varint(0) + varint(offset_delta) + key_part + value_part + headers


def flip_last_byte(data: bytearray) -> bytes:
    data[-1] ^= 0xFF
    return bytes(data)


def set_magic(data: bytearray, magic: int) -> bytes:
    data[16] = magic
    return bytes(data)


def set_int(data: bytearray, at: int, value: int, fmt: str = ">i") -> bytes:
    struct.pack_into(fmt, data, at, value)
    return with_crc(data)


CORRUPT: dict[str, tuple[bytes, str]] = {
    "bad crc": (flip_last_byte(batch([b"a", b"b"])), "CRC32C"),
    "truncated batch": (bytes(batch([b"a", b"b"])[:-7]), "does not fit"),
    "trailing bytes": (bytes(batch([b"a"])) + b"\x00" * 10, "shorter than a record batch header"),
    "length below a header": (set_int(batch([b"a"]), 8, 20), "does not fit"),
    "more records than bytes": (
        set_int(bytearray(set_int(batch([b"a", b"b"]), 57, 3)), 23, 2),
        "declares 3 records in 18 bytes",
    ),
    "count above last offset delta": (set_int(batch([b"a", b"b"]), 57, 3), "last offset delta 1 but holds 3"),
    "count and delta above the records": (
        set_int(bytearray(set_int(batch([b"a" * 20, b"b" * 20]), 57, 3)), 23, 2),
        "record 2 of the batch at byte 0: unreadable length",
    ),
    "records left over": (
        set_int(bytearray(set_int(batch([b"a", b"b"]), 57, 1)), 23, 0),
        "bytes after its 1 records",
    ),
    "negative count": (set_int(batch([b"a"]), 57, -1), "holds -1 records"),
    "unknown codec": (set_int(batch([b"a"]), 21, 6, ">h"), "codec 6"),
    "client control batch": (set_int(batch([b"a"]), 21, 0x30, ">h"), "control batches"),
    "bad varint": (records_replaced(b"\xff" * 12, 1), "unreadable length varint"),
    "record length past the batch": (records_replaced(varint(500) + body(), 1), "length 500 outside"),
    "oversized key length": (
        records_replaced(record(body(key=b"k")[:1] + b"\x00\x00" + varint(10_000) + b"k"), 1),
        "key length 10000",
    ),
    "negative value length": (
        records_replaced(record(b"\x00\x00\x00" + varint(1) + b"k" + varint(-5) + varint(0)), 1),
        "value length -5",
    ),
    "bytes left in a record": (records_replaced(record(body() + b"\x00\x00"), 1), "left over inside the record"),
    "header key not utf-8": (
        records_replaced(record(body(headers=varint(1) + varint(2) + b"\xc3\x28" + varint(-1))), 1),
        "not UTF-8",
    ),
    "null header key": (
        records_replaced(record(body(headers=varint(1) + varint(-1) + varint(-1))), 1),
        "header 0 key length -1",
    ),
    "negative header count": (records_replaced(record(body(headers=varint(-3))), 1), "-3 headers"),
    "producer offset deltas skip": (
        records_replaced(record(body()) + record(body(offset_delta=5)), 2),
        "offset delta 5",
    ),
    "compressed garbage": (set_int(bytearray(bytes(batch([b"a" * 100]))), 21, 1, ">h"), "does not decompress"),
    "compressed records cut short": (records_replaced(record(body())[:-2], 1, codec=4), "record 0"),
    "timestamp out of range": (set_int(batch([b"a"]), 27, 2**62, ">q"), "out of range"),
}


@pytest.mark.parametrize("case", sorted(CORRUPT))
def test_a_corrupt_batch_is_refused_naming_what_is_wrong(case: str) -> None:
    data, says = CORRUPT[case]
    with pytest.raises(CorruptBatchError, match=says):
        read_batches(data)


@pytest.mark.parametrize("magic", [0, 1, 3])
def test_other_message_formats_are_unsupported(magic: int) -> None:
    with pytest.raises(UnsupportedMagicError, match=f"magic {magic}"):
        read_batches(set_magic(batch([b"a"]), magic))


def test_a_bad_batch_after_good_ones_refuses_the_whole_request() -> None:
    good = bytes(batch([b"a"]))
    with pytest.raises(CorruptBatchError, match="at byte"):
        read_batches(good + good + flip_last_byte(batch([b"b"])))


def test_non_contiguous_deltas_are_a_producer_error_only() -> None:
    data = records_replaced(record(body()) + record(body(offset_delta=5)), 2)
    compacted = bytearray(data)
    struct.pack_into(">i", compacted, 23, 5)  # last offset delta 5, 2 records: a compacted batch
    read = read_batches(with_crc(compacted), from_producer=False)
    assert decode_records(read, with_offsets=True).column("offset").to_pylist() == [0, 5]
    with pytest.raises(CorruptBatchError, match="last offset delta 5 but holds 2"):
        read_batches(with_crc(compacted))


def test_control_batches_read_when_not_from_a_producer() -> None:
    data = encode_control_batch(3, T0, 1, 99, 2, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00")
    (control,) = read_batches(data, from_producer=False)
    assert control.control and control.transactional and control.producer_id == 99


def test_random_and_mutated_input_never_crashes() -> None:
    rng = random.Random(20_240_518)
    seeds = [
        bytes(batch([b"value", None, b""], headers=[("h", b"1"), ("é", None)])),
        bytes(batch([b"v" * 300] * 3, codec=1)),
        bytes(batch([b"w" * 300] * 3, codec=3)),
        bytes(batch([b"z" * 300] * 2, codec=4)),
    ]
    outcomes = {"read": 0, "refused": 0}
    for i in range(FUZZ_ROUNDS):
        if i % 10 == 0:
            data = rng.randbytes(rng.randrange(0, 200))
        else:
            mutated = bytearray(rng.choice(seeds))
            for _ in range(rng.randrange(1, 4)):
                at = rng.randrange(len(mutated))
                mutated[at] = rng.randrange(256) if rng.random() < 0.8 else mutated[at] ^ 0x80
            if rng.random() < 0.2:
                mutated = mutated[: rng.randrange(len(mutated) + 1)]
            if rng.random() < 0.9 and len(mutated) > 21:
                mutated = bytearray(with_crc(mutated))  # past the CRC: the record checks must hold
            data = bytes(mutated)
        try:
            batches = read_batches(data, from_producer=rng.random() < 0.5)
            table = decode_records(batches, with_offsets=True)
            assert table.num_rows == sum(b.count for b in batches)
            table.validate(full=True)
            outcomes["read"] += 1
        except (CorruptBatchError, UnsupportedMagicError):
            outcomes["refused"] += 1
    assert outcomes["read"] > 100 and outcomes["refused"] > 1000, outcomes


def test_rows_the_encoder_cannot_write_are_policy_errors() -> None:
    rows = pa.Table.from_pydict(
        {
            "offset": [5, 4],
            "timestamp": [T0 * 1000, T0 * 1000],
            "timestampType": [0, 0],
            "key": [None, None],
            "value": [b"a", b"b"],
        },
        schema=pa.schema([FILE_SCHEMA.field(c) for c in ("offset", "timestamp", "timestampType", "key", "value")]),
    )
    with pytest.raises(PolicyError, match="offset order"):
        encode_records(rows, leader_epoch=0)
    marker = rows.set_column(0, "offset", pa.array([1, 2], pa.int64())).set_column(
        2, "timestampType", pa.array([0, -1], pa.int32())
    )
    with pytest.raises(PolicyError, match="row 1 is a transaction marker"):
        encode_records(marker, leader_epoch=0)
    assert (
        read_batches(encode_records(marker, leader_epoch=0, control=lambda row: b""), from_producer=False)[0].count == 1
    )
