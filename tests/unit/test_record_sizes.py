"""The one record-size rule (key, value and headers, as Kafka counts): the per-record and
the per-batch forms agree, and the check names the first record above the limit."""

from __future__ import annotations

import pyarrow as pa
import pytest

from sparklog.errors import RecordTooLargeError
from sparklog.model.schema import HEADERS_TYPE
from sparklog.model.sizes import RECORD_OVERHEAD_BYTES, check_record_sizes, record_size, record_sizes

RECORDS = [
    (b"k", b"v" * 10, [("h1", b"x" * 5), ("hé", None)]),
    (None, b"", None),
    (b"key", None, []),
    (None, b"v" * 100, [("trace", b"t" * 30)]),
]


def test_batch_sizes_equal_record_sizes_headers_included() -> None:
    key = pa.array([r[0] for r in RECORDS], pa.binary())
    value = pa.array([r[1] for r in RECORDS], pa.binary())
    headers = pa.array(
        [None if r[2] is None else [{"key": k, "value": v} for k, v in r[2]] for r in RECORDS], HEADERS_TYPE
    )
    expected = [record_size(k, v, h) for k, v, h in RECORDS]
    assert list(record_sizes(key, value, headers)) == expected
    assert expected[0] == RECORD_OVERHEAD_BYTES + 1 + 10 + 2 + 5 + len("hé".encode()), "headers count, keys as UTF-8"


def test_check_names_the_first_record_over_the_limit() -> None:
    sizes = record_sizes(
        pa.array([None, None], pa.binary()), pa.array([b"a", b"b" * 50], pa.binary()), pa.nulls(2, HEADERS_TYPE)
    )
    check_record_sizes(sizes, "t", RECORD_OVERHEAD_BYTES + 50)
    with pytest.raises(RecordTooLargeError, match=r"Record 1 of the batch to t is 71 bytes"):
        check_record_sizes(sizes, "t", RECORD_OVERHEAD_BYTES + 49)
