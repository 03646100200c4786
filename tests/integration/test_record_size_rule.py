"""Every produce path enforces one record-size rule: a record whose headers push it over
``max.message.bytes`` is refused by ``send`` and by ``send_arrow`` alike, and nothing is
written."""

from __future__ import annotations

import pyarrow as pa
import pytest

import sparklog
from sparklog.errors import RecordTooLargeError
from sparklog.model.schema import HEADERS_TYPE
from sparklog.model.sizes import RECORD_OVERHEAD_BYTES

LIMIT = 1_000


def test_headers_count_on_every_produce_path(cluster: sparklog.Cluster) -> None:
    cluster.create_topic("sized", config={"max.message.bytes": str(LIMIT)})
    value = b"v" * (LIMIT - RECORD_OVERHEAD_BYTES - 100)  # fits alone
    headers = [("big", b"h" * 200)]  # ... but not with its headers
    with cluster.producer() as producer:
        producer.send("sized", value).result()  # the value alone fits
        with pytest.raises(RecordTooLargeError, match="sized"):
            producer.send("sized", value, headers=headers)
        batch = pa.table(
            {
                "value": pa.array([value], pa.binary()),
                "headers": pa.array([[{"key": k, "value": v} for k, v in headers]], HEADERS_TYPE),
            }
        )
        with pytest.raises(RecordTooLargeError, match="sized"):
            producer.send_arrow("sized", batch)
    assert cluster.high_watermarks("sized") == {0: 1}, "only the record that fits was written"
