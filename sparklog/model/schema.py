"""Column layouts: the topic table (DESIGN §3), its Parquet files, and what readers see.

Readers get exactly the columns of Spark's Kafka source (``key, value, topic, partition,
offset, timestamp, timestampType``, plus ``headers`` when asked), so a job ported from
``format("kafka")`` sees the same DataFrame.
"""

from __future__ import annotations

import pyarrow as pa

__all__ = [
    "CONTROL_TIMESTAMP_TYPE",
    "FILE_SCHEMA",
    "HEADERS_TYPE",
    "READ_SCHEMA",
    "READ_SCHEMA_WITH_HEADERS",
    "SPARK_READ_DDL",
    "SPARK_READ_DDL_WITH_HEADERS",
    "TABLE_SCHEMA",
    "read_schema",
]

HEADERS_TYPE = pa.list_(pa.field("element", pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])))
TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")
# ``timestampType`` of a transaction marker row (Kafka's NO_TIMESTAMP_TYPE; never a data record's).
CONTROL_TIMESTAMP_TYPE = -1

# Delta table schema; ``partition`` is the Delta partition column (not stored in files).
TABLE_SCHEMA = pa.schema(
    [
        pa.field("partition", pa.int32(), nullable=False),
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("timestamp", TIMESTAMP_TYPE, nullable=False),
        pa.field("timestampType", pa.int32(), nullable=False),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("headers", HEADERS_TYPE),
    ]
)

FILE_SCHEMA = pa.schema([f for f in TABLE_SCHEMA if f.name != "partition"])

READ_SCHEMA = pa.schema(
    [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", TIMESTAMP_TYPE),
        pa.field("timestampType", pa.int32()),
    ]
)
READ_SCHEMA_WITH_HEADERS = READ_SCHEMA.append(pa.field("headers", HEADERS_TYPE))

SPARK_READ_DDL = (
    "key binary, value binary, topic string, partition int, offset bigint, timestamp timestamp, timestampType int"
)
SPARK_READ_DDL_WITH_HEADERS = SPARK_READ_DDL + ", headers array<struct<key: string, value: binary>>"


def read_schema(include_headers: bool) -> pa.Schema:
    return READ_SCHEMA_WITH_HEADERS if include_headers else READ_SCHEMA
