"""The ListOffsets API (key 2, v1..v7): offsets by time, as consumers resolve their positions.

Per partition, answered by its leader only (NOT_LEADER_OR_FOLLOWER elsewhere), from the
same offsets every sparklog reader uses (:class:`~sparklog.runtime.replica_manager.ReplicaManager`):

* ``-2`` earliest → log-start; ``-1`` latest → the high watermark, or for ``read_committed``
  (isolation level 1, v2+) the last stable offset (first offset of the oldest open
  transaction), as Kafka answers it;
* ``-3`` max timestamp (v7) → the offset and timestamp of the record with the largest
  timestamp below the high watermark (the first such record on ties, as Kafka);
* a timestamp ≥ 0 → the first offset whose timestamp is at least it, with that record's
  timestamp; none → offset -1 and timestamp -1 (Kafka's "no such offset").
"""

from __future__ import annotations

from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc
from kio.schema.errors import ErrorCode

from sparklog.broker.kafka.context import (
    NO_THROTTLE,
    Api,
    ApiRequest,
    BrokerContext,
    build,
    response_module,
)
from sparklog.broker.kafka.error_codes import error_code
from sparklog.broker.partition import check_leader
from sparklog.log.reader import offset_for_timestamp, read_ranges
from sparklog.runtime.replica_manager import LeaderSnapshot

__all__ = ["APIS"]

LIST_OFFSETS_KEY = 2
EARLIEST, LATEST, MAX_TIMESTAMP = -2, -1, -3


class ListOffsetsPartition(Protocol):
    @property
    def partition_index(self) -> int: ...
    @property
    def timestamp(self) -> int: ...


class ListOffsetsTopic(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def partitions(self) -> tuple[ListOffsetsPartition, ...]: ...


class ListOffsetsBody(Protocol):
    """What the handler reads of a ListOffsets request (kio's v1..v7 request classes)."""

    @property
    def topics(self) -> tuple[ListOffsetsTopic, ...]: ...


def list_offsets(request: ApiRequest[ListOffsetsBody], broker: BrokerContext) -> Any:
    module = response_module(LIST_OFFSETS_KEY, request.api_version)
    read_committed = int(getattr(request.body, "isolation_level", 0)) == 1
    topics = []
    for topic in request.body.topics:
        partitions = []
        for wanted in topic.partitions:
            try:
                offset, timestamp_ms = _resolve(
                    broker, topic.name, int(wanted.partition_index), int(wanted.timestamp), read_committed
                )
                code = ErrorCode.none
            except Exception as exc:  # noqa: BLE001 - answered as this partition's error code
                offset, timestamp_ms, code = -1, -1, error_code(exc)
            partitions.append(
                build(
                    module.ListOffsetsPartitionResponse,
                    partition_index=wanted.partition_index,
                    error_code=code,
                    timestamp=timestamp_ms,
                    offset=offset,
                    leader_epoch=-1,
                )
            )
        topics.append(build(module.ListOffsetsTopicResponse, name=topic.name, partitions=tuple(partitions)))
    return build(module.ListOffsetsResponse, throttle_time=NO_THROTTLE, topics=tuple(topics))


def _resolve(
    broker: BrokerContext, topic: str, partition: int, timestamp: int, read_committed: bool
) -> tuple[int, int]:
    replicas = broker.replicas
    check_leader(broker.replicas, broker.broker_id, topic, partition)
    at = replicas.fetch_positions(topic, [partition])[partition]
    high_watermark = at.high_watermark
    log_start = min(at.table.log_start(at.snapshot, partition), high_watermark)
    if timestamp == LATEST:
        return at.end_for(read_committed), -1
    if timestamp == EARLIEST:
        return log_start, -1
    if timestamp == MAX_TIMESTAMP:
        return _max_timestamp(at, partition, log_start, high_watermark)
    found = offset_for_timestamp(at.table, at.snapshot, partition, timestamp)
    if found is None or found >= high_watermark:
        return -1, -1
    row = read_ranges(at.table, at.snapshot, {partition: (found, found + 1)}, include_headers=False)
    return found, int(row.column("timestamp").cast(pa.int64())[0].as_py()) // 1000 if row.num_rows else -1


def _max_timestamp(at: LeaderSnapshot, partition: int, log_start: int, high_watermark: int) -> tuple[int, int]:
    if log_start >= high_watermark:
        return -1, -1
    rows = read_ranges(at.table, at.snapshot, {partition: (log_start, high_watermark)}, include_headers=False)
    if rows.num_rows == 0:
        return -1, -1
    micros = rows.column("timestamp").cast(pa.int64())
    index = int(pc.index(micros, pc.max(micros)).as_py())
    return int(rows.column("offset")[index].as_py()), int(micros[index].as_py()) // 1000


APIS = (Api(LIST_OFFSETS_KEY, 1, 7, list_offsets),)
