"""What the light consumer hands out: records, and who it is in its group."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

__all__ = ["ConsumerRecord", "GroupMetadata", "to_records"]


@dataclass(frozen=True)
class ConsumerRecord:
    topic: str
    partition: int
    offset: int
    timestamp: int  # ms since the epoch
    timestamp_type: int  # 0 CreateTime, 1 LogAppendTime
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


@dataclass(frozen=True)
class GroupMetadata:
    """Kafka's ``ConsumerGroupMetadata``: who this consumer is in its group right now."""

    group_id: str | None
    generation: int  # -1 when not (yet) in a generation
    member_id: str
    instance_id: str | None


def to_records(table: pa.Table) -> list[ConsumerRecord]:
    """The rows of a read (the Kafka source's schema, with headers) as records."""
    cols = {
        name: table.column(name).to_pylist()
        for name in ("topic", "partition", "offset", "timestampType", "key", "value", "headers")
    }
    stamps = table.column("timestamp").cast(pa.int64()).to_pylist()
    return [
        ConsumerRecord(
            topic=cols["topic"][i],
            partition=cols["partition"][i],
            offset=cols["offset"][i],
            timestamp=stamps[i] // 1000,
            timestamp_type=cols["timestampType"][i],
            key=cols["key"][i],
            value=cols["value"][i],
            headers=tuple((h["key"], h["value"]) for h in cols["headers"][i] or ()),
        )
        for i in range(table.num_rows)
    ]
