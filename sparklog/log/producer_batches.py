"""Kafka producers' recent batches, read back from the segments a broker's group commit wrote.

A file written for idempotent Kafka producers carries their batches in its Parquet metadata
(:data:`~sparklog.log.segment.KAFKA_BATCHES_KEY`), and followers copy files byte for byte,
so a new leader finds the batches where the old one wrote them (Kafka keeps them in its
segments' batch headers too). Only the newest files of the partition are looked at: a
retry is of a batch sent moments before.
"""

from __future__ import annotations

import json

import pyarrow.parquet as pq
from deltalake import DeltaTable

from sparklog.log.segment import KAFKA_BATCHES_KEY
from sparklog.log.table import TopicTable

__all__ = ["recent_kafka_batches"]

FILES_SCANNED = 20


def recent_kafka_batches(
    table: TopicTable, dt: DeltaTable, partition: int, producer_id: int, limit: int = 5
) -> list[tuple[int, int, int, int]]:
    """``(epoch, first sequence, last sequence, base offset)`` of ``producer_id``'s newest
    batches in ``partition`` (at most ``limit``), oldest first."""
    found: dict[tuple[int, int], tuple[int, int, int, int]] = {}
    for entry in reversed(table.files(dt, {partition})[-FILES_SCANNED:]):
        try:
            metadata = pq.read_metadata(table.storage.source(entry.path)).metadata or {}
        except OSError:
            continue  # removed by retention meanwhile: older batches are not needed
        raw = metadata.get(KAFKA_BATCHES_KEY.encode())
        for batch in reversed(json.loads(raw) if raw else []):
            pid, epoch, first, last, base_offset = (int(v) for v in batch)
            if pid == producer_id:
                found.setdefault((first, last), (epoch, first, last, base_offset))
        if len(found) >= limit:
            break
    return sorted(found.values(), key=lambda b: b[3])[-limit:]
