"""DeleteRecords (21, v0..v2): move partitions' log-start forward, as Kafka's ``deleteRecords``.

Per partition, answered on its own with the new log-start as ``low_watermark``:

* the topic and partition exist (UNKNOWN_TOPIC_OR_PARTITION) and this broker leads the
  partition (NOT_LEADER_OR_FOLLOWER: clients send each partition to its leader and retry
  after refreshing metadata, as against Kafka);
* the topic's ``cleanup.policy`` includes ``delete`` (POLICY_VIOLATION on a compact-only
  topic, Kafka's rule: compaction, not deletion, decides what such a log keeps);
* the offset is -1 (Kafka's "up to the high watermark") or within ``0..high watermark``
  (OFFSET_OUT_OF_RANGE otherwise: nothing above the high watermark can be deleted).

The deletion itself is :func:`sparklog.runtime.log_access.delete_records` (the leader table's
log-start, files wholly below it removed from the table, metadata only; DESIGN §9), the same
call ``Cluster.delete_records`` makes, so both agree. It is complete on the leader when the
answer is sent; followers take the new log-start with their next fetch. The request's
timeout is not waited on.
"""

from __future__ import annotations

from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from sparklog.broker.kafka.context import (
    NO_THROTTLE,
    Api,
    ApiRequest,
    BrokerContext,
    build,
    response_module,
)
from sparklog.broker.kafka.error_codes import PolicyViolationError, error_code
from sparklog.broker.partition import check_leader
from sparklog.config import cleanup_policies
from sparklog.errors import OffsetOutOfRangeError
from sparklog.model.topic import validate_topic_name
from sparklog.runtime.log_access import delete_records as delete_records_below

__all__ = ["APIS"]

DELETE_RECORDS_KEY = 21
HIGH_WATERMARK = -1  # Kafka's DeleteRecordsRequest.HIGH_WATERMARK


class DeleteRecordsPartition(Protocol):
    @property
    def partition_index(self) -> int: ...
    @property
    def offset(self) -> int: ...


class DeleteRecordsTopic(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def partitions(self) -> tuple[DeleteRecordsPartition, ...]: ...


class DeleteRecordsBody(Protocol):
    """What the handler reads of a DeleteRecords request (kio's v0..v2 request classes)."""

    @property
    def topics(self) -> tuple[DeleteRecordsTopic, ...]: ...


def delete_records(request: ApiRequest[DeleteRecordsBody], broker: BrokerContext) -> Any:
    module = response_module(DELETE_RECORDS_KEY, request.api_version)
    topics = []
    for topic in request.body.topics:
        partitions = []
        for partition in topic.partitions:
            index = int(partition.partition_index)
            try:
                low, code = _delete(broker, topic.name, index, int(partition.offset)), ErrorCode.none
            except Exception as exc:  # noqa: BLE001 - becomes this partition's error code
                low, code = -1, error_code(exc)
            partitions.append(
                build(module.DeleteRecordsPartitionResult, partition_index=index, low_watermark=low, error_code=code)
            )
        topics.append(build(module.DeleteRecordsTopicResult, name=topic.name, partitions=tuple(partitions)))
    return build(module.DeleteRecordsResponse, throttle_time=NO_THROTTLE, topics=tuple(topics))


def _delete(broker: BrokerContext, topic: str, partition: int, offset: int) -> int:
    replicas = broker.replicas
    validate_topic_name(topic)
    check_leader(broker.replicas, broker.broker_id, topic, partition, max_age_ms=0)
    configs = replicas.topic_config(topic)
    if "delete" not in cleanup_policies(configs):  # compact alone or the empty list: Kafka refuses too
        raise PolicyViolationError(
            f"Records of partition {topic}-{partition} can not be deleted due to the configured policy "
            f"(cleanup.policy={configs['cleanup.policy']!r}); add delete to the topic's cleanup.policy first"
        )
    if offset == HIGH_WATERMARK:
        offset = replicas.high_watermarks(topic, [partition])[partition]
    elif offset < 0:
        raise OffsetOutOfRangeError(f"Cannot delete records of {topic}-{partition} below offset {offset}")
    low = delete_records_below(replicas, topic, {partition: offset})[partition]
    if broker.partitions is not None:  # the tail's readers check the new log-start at once
        broker.partitions.appender.tails.note_log_start(topic, partition, low)
    return low


APIS = (Api(DELETE_RECORDS_KEY, 0, 2, delete_records),)
