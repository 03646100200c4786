"""The native record-batch codec (DESIGN §14) against kafka-python's, the reference decoder
and builder: what either writes, the other reads to the same records, for every codec."""

from __future__ import annotations

import struct
from typing import Any

import pyarrow as pa
import pytest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from sparklog.broker.kafka.records import control_batch, decode_batches, encode_batches
from sparklog.broker.pending_append import PendingAppend, read_round
from sparklog.log.txn_log import ControlRecord, control_record_rows
from sparklog.model.kafka_batches import (
    CODECS,
    RECORD_SCHEMA,
    crc32c,
    decode_records,
    encode_control_batch,
    encode_records,
    read_batches,
)
from sparklog.model.schema import FILE_SCHEMA

CODEC_NAMES = ["none", "gzip", "snappy", "lz4", "zstd"]
T0 = 1_700_000_000_000
Header = tuple[str, bytes | None]
Record = tuple[bytes | None, bytes | None, list[Header]]

RECORDS: list[Record] = [
    (b"key-0", b"value " * 20, []),
    (None, b"a null key", [("trace", b"t-1")]),
    (b"null value", None, [("h", None), ("", b"empty key")]),
    (b"", b"", []),  # empty, not null
    (b"large", bytes(range(256)) * 1200, [("x", b"y" * 5000)]),
    (b"many headers", b"v", [(f"h{i}-é", bytes([i]) * i) for i in range(40)]),
    ("clé".encode(), "valeur ✓".encode(), [("ключ", "значение".encode())]),
]


def kafka_python_batch(records: list[Record], codec: int = 0, base_offset: int = 0, **producer: Any) -> bytes:
    """A batch as kafka-python's producer builds it."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=producer.get("transactional", False),
        producer_id=producer.get("producer_id", -1),
        producer_epoch=producer.get("producer_epoch", -1),
        base_sequence=producer.get("base_sequence", -1),
        batch_size=1 << 30,
    )
    for i, (key, value, headers) in enumerate(records):
        builder.append(i, timestamp=T0 + 7 * i, key=key, value=value, headers=headers)
    data = builder.build()
    struct.pack_into(">q", data, 0, base_offset)
    return bytes(data)


def reference(data: bytes) -> list[dict[str, Any]]:
    """Every record of ``data`` as kafka-python's decoder reads it, in the table's terms."""
    rows, position = [], 0
    while position < len(data):
        length = struct.unpack_from(">i", data, position + 8)[0] + 12
        batch = DefaultRecordBatch(data[position : position + length])
        for r in batch:
            rows.append(
                {
                    "offset": r.offset,
                    "timestamp_ms": r.timestamp,
                    "timestampType": r.timestamp_type,
                    "key": r.key,
                    "value": r.value,
                    "headers": [{"key": k, "value": v} for k, v in r.headers] or None,
                }
            )
        position += length
    return rows


def ours(table: pa.Table) -> list[dict[str, Any]]:
    rows = table.to_pylist()
    for row in rows:
        row["timestamp_ms"] = int(row.pop("timestamp").timestamp() * 1000)
    return rows


def table_of(records: list[Record], offsets: list[int], kinds: list[int] | None = None) -> pa.Table:
    kinds = kinds or [0] * len(records)
    return pa.Table.from_pydict(
        {
            "offset": offsets,
            "timestamp": [(T0 + 7 * i) * 1000 for i in range(len(records))],
            "timestampType": kinds,
            "key": [r[0] for r in records],
            "value": [r[1] for r in records],
            "headers": [[{"key": k, "value": v} for k, v in r[2]] or None for r in records],
        },
        schema=FILE_SCHEMA,
    )


@pytest.mark.parametrize("codec", CODEC_NAMES)
def test_a_producers_batch_reads_as_kafka_python_reads_it(codec: str) -> None:
    data = kafka_python_batch(RECORDS, CODECS[codec], producer_id=42, producer_epoch=3, base_sequence=17)
    (batch,) = read_batches(data)
    assert (batch.compression, batch.count, batch.size_bytes) == (codec, len(RECORDS), len(data))
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (42, 3, 17)
    assert not batch.transactional and not batch.control and batch.idempotent
    table = decode_records([batch], with_offsets=True)
    assert table.schema == FILE_SCHEMA
    assert ours(table) == reference(data)
    assert decode_records([batch]).schema == RECORD_SCHEMA


def test_many_requests_read_in_one_pass_equal_each_read_alone() -> None:
    requests = [
        kafka_python_batch(RECORDS[:3], CODECS["lz4"]),
        kafka_python_batch(RECORDS[3:], 0) + kafka_python_batch(RECORDS[:2], CODECS["zstd"]),
        kafka_python_batch([(b"k", None, [])], CODECS["gzip"]),
    ]
    batches = [b for data in requests for b in read_batches(data)]
    together = decode_records(batches)
    alone = pa.concat_tables([decode_records(read_batches(data)) for data in requests])
    assert together.num_rows == sum(b.count for b in batches) == alone.num_rows
    assert together.equals(alone)
    wire = [b for data in requests for b in decode_batches(data)]
    assert [b.records.num_rows for b in wire] == [b.count for b in batches]
    assert pa.concat_tables([b.records for b in wire]).equals(together)


def test_one_batch_that_is_the_whole_request_is_not_copied() -> None:
    data = kafka_python_batch(RECORDS[:2])
    assert read_batches(data)[0].raw is data
    assert [b.raw for b in read_batches(data + data)] == [data, data]


@pytest.mark.parametrize("codec", CODEC_NAMES)
def test_encoded_rows_read_the_same_with_kafka_python_and_ours(codec: str) -> None:
    offsets = [10, 11, 12, 15, 40, 41, 1000]  # compaction gaps
    table = table_of(RECORDS, offsets)
    data = encode_records(table, leader_epoch=7, compression=codec)
    expected = ours(table)
    assert reference(data) == expected
    batches = read_batches(data, from_producer=False)
    assert {(b.compression, b.partition_leader_epoch, b.producer_id) for b in batches} == {(codec, 7, -1)}
    assert batches[0].base_offset == 10
    assert ours(decode_records(batches, with_offsets=True)) == expected


def test_lz4_frames_have_independent_blocks_as_kafkas_java_client_requires() -> None:
    table = table_of([(None, b"lz4 " * 50_000, [])], [0])
    data = encode_records(table, leader_epoch=0, compression="lz4")
    frame = data[61:]
    assert frame[:4] == b"\x04\x22\x4d\x18" and frame[4] & 0x20, "FLG: block independence"
    assert reference(data)[0]["value"] == b"lz4 " * 50_000


def test_empty_header_lists_and_null_headers_are_both_none_on_the_wire() -> None:
    table = table_of([(b"a", b"1", []), (b"b", b"2", [])], [0, 1])
    table = table.set_column(5, "headers", pa.array([[], None], FILE_SCHEMA.field("headers").type))
    back = decode_records(read_batches(encode_records(table, leader_epoch=0), from_producer=False))
    assert back.column("headers").to_pylist() == [None, None]


def test_log_append_time_rows_make_log_append_time_batches_one_time_each() -> None:
    table = table_of(RECORDS[:4], [0, 1, 2, 3], kinds=[1, 1, 1, 0])
    times = [5_000_000, 5_000_000, 6_000_000, 7_000_000]
    table = table.set_column(1, "timestamp", pa.array(times, FILE_SCHEMA.field("timestamp").type))
    data = encode_records(table, leader_epoch=0)
    batches = read_batches(data, from_producer=False)
    assert [(b.timestamp_type, b.count, b.max_timestamp_ms) for b in batches] == [
        (1, 2, 5000),
        (1, 1, 6000),
        (0, 1, 7000),
    ]
    assert ours(decode_records(batches, with_offsets=True)) == reference(data) == ours(table)


def test_a_log_append_time_batch_from_a_client_reads_its_max_timestamp() -> None:
    data = bytearray(kafka_python_batch(RECORDS[:3]))
    struct.pack_into(">h", data, 21, struct.unpack_from(">h", data, 21)[0] | 0x08)
    struct.pack_into(">q", data, 35, T0 + 999)
    struct.pack_into(">I", data, 17, crc32c(data[21:]))
    table = decode_records(read_batches(bytes(data)), with_offsets=True)
    assert ours(table) == reference(bytes(data))
    assert set(table.column("timestampType").to_pylist()) == {1}


def test_batches_are_cut_by_count_size_type_and_offset_range() -> None:
    records: list[Record] = [(None, bytes([i]) * 100, []) for i in range(10)]
    by_count = read_batches(
        encode_records(table_of(records, list(range(10))), leader_epoch=0, max_records_per_batch=4), from_producer=False
    )
    assert [b.count for b in by_count] == [4, 4, 2]
    by_size = read_batches(
        encode_records(table_of(records, list(range(10))), leader_epoch=0, max_batch_bytes=250), from_producer=False
    )
    assert [b.count for b in by_size] == [2, 2, 2, 2, 2]
    huge = read_batches(
        encode_records(table_of(records[:1], [0]), leader_epoch=0, max_batch_bytes=10), from_producer=False
    )
    assert [b.count for b in huge] == [1], "a record larger than the limit gets a batch of its own"
    far = [0, 1, 2**31 - 1, 2**31 + 5, 2**40]
    apart = read_batches(encode_records(table_of(records[:5], far), leader_epoch=0), from_producer=False)
    assert [b.base_offset for b in apart] == [0, 2**31 + 5, 2**40]
    assert [r["offset"] for r in reference(b"".join(b.raw for b in apart))] == far


def test_sliced_and_chunked_tables_encode_only_their_rows() -> None:
    table = table_of(RECORDS, list(range(len(RECORDS))))
    part = table.slice(2, 4)
    assert reference(encode_records(part, leader_epoch=0)) == ours(part)
    chunked = pa.concat_tables([table.slice(0, 3), table.slice(3)])
    assert chunked.column("value").num_chunks == 2
    assert reference(encode_records(chunked, leader_epoch=0)) == ours(table)
    no_headers = table.drop_columns(["headers"])
    assert [r["headers"] for r in reference(encode_records(no_headers, leader_epoch=0))] == [None] * len(RECORDS)


def test_control_rows_become_control_batches_between_data_batches() -> None:
    marker = ControlRecord(producer_id=9, producer_epoch=2, commit=True, coordinator_epoch=4)
    data = table_of(RECORDS[:2], [0, 1])
    control = control_record_rows(marker, T0).add_column(0, "offset", pa.array([2], pa.int64()))
    after = table_of(RECORDS[2:4], [3, 4])
    rows = pa.concat_tables([data, control.cast(FILE_SCHEMA), after])
    encoded = encode_batches(rows, leader_epoch=5)
    batches = read_batches(encoded, from_producer=False)
    assert [(b.base_offset, b.count, b.control, b.transactional) for b in batches] == [
        (0, 2, False, False),
        (2, 1, True, True),
        (3, 2, False, False),
    ]
    marker_batch = DefaultRecordBatch(batches[1].raw)
    assert marker_batch.is_control_batch and (marker_batch.producer_id, marker_batch.producer_epoch) == (9, 2)
    (record,) = list(marker_batch)
    assert record.commit and (record.key, record.value) == (marker.key, marker.value)
    assert control_batch(marker, 2, T0, 5) == batches[1].raw
    with pytest.raises(Exception, match="control batches"):
        read_batches(batches[1].raw)


def test_the_control_batch_encoder_writes_what_kafka_python_reads() -> None:
    data = encode_control_batch(77, T0, 3, 1234, 5, b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x01")
    batch = DefaultRecordBatch(data)
    assert batch.validate_crc() and batch.is_control_batch and batch.is_transactional
    assert (batch.base_offset, batch.leader_epoch, batch.producer_id, batch.producer_epoch) == (77, 3, 1234, 5)
    (record,) = list(batch)
    assert record.abort and record.timestamp == T0


def test_crc32c_is_castagnolis() -> None:
    assert crc32c(b"123456789") == 0xE3069283  # the check value of CRC-32C
    assert crc32c(b"") == 0
    long = bytes(range(256)) * 1000
    assert crc32c(memoryview(long)[3:]) == crc32c(long[3:])


def test_empty_input_reads_and_writes_nothing() -> None:
    assert read_batches(b"") == []
    assert decode_records([]).num_rows == 0
    assert encode_records(table_of([], []), leader_epoch=0) == b""


def test_a_commit_round_reads_its_batches_at_once_one_slice_per_partition() -> None:
    def pending(partition: int, records: list[Record]) -> PendingAppend:
        (batch,) = read_batches(kafka_python_batch(records, CODECS["zstd"]))
        return PendingAppend(partition, None, "1", 1000, batch=batch, wire=batch.raw)

    items = [pending(1, RECORDS[:2]), pending(0, RECORDS[2:3]), pending(1, RECORDS[3:6]), pending(0, RECORDS[6:])]
    read = read_round(items)
    assert {p: [i.rows for i in r.items] for p, r in read.items()} == {0: [1, 1], 1: [2, 3]}
    for partition, rows in read.items():
        mine = [i for i in items if i.partition == partition]
        assert rows.items == mine
        assert rows.records.equals(pa.concat_tables([i.records for i in mine if i.records is not None]))
    assert [r["value"] for r in read[1].records.to_pylist()] == [r[1] for r in RECORDS[:2] + RECORDS[3:6]]
