"""DescribeLogDirs (35, v1..v5) and AlterReplicaLogDirs (34, v1..v2): a broker's log dir, as
Kafka's ``kafka-log-dirs`` and admin clients ask each broker for it.

A sparklog broker has one log dir (``log.dirs``: a local path or a store URI), so:

* **DescribeLogDirs** answers one result: the log dir as configured, and each replica
  assigned to this broker (of the topics and partitions asked; null: all) with its size —
  the bytes of the partition's live Delta files in this broker's table — and its offset lag
  (0 on the leader; on a follower, the leader's high watermark minus its log end, Kafka's
  ``max(HW - LEO, 0)``), never a future replica (no moves between dirs). ``total_bytes`` and
  ``usable_bytes`` (v4+) are the filesystem's for a local dir, -1 for an object store (no
  such notion). :func:`sparklog.admin.brokers.describe_log_dir` does the work.
* **AlterReplicaLogDirs** moves nothing and says, per partition, what Kafka's broker says
  about a move within its dirs: to this log dir, the replica is where it is asked to be
  (NONE) if this broker holds one, REPLICA_NOT_AVAILABLE if not (UNKNOWN_TOPIC_OR_PARTITION
  for a partition that does not exist); to any other path, LOG_DIR_NOT_FOUND (not a log dir
  of this broker).
"""

from __future__ import annotations

import os
import shutil
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from sparklog.admin.brokers import describe_log_dir
from sparklog.broker.kafka.context import NO_THROTTLE, Api, ApiRequest, BrokerContext, build, response_module
from sparklog.broker.kafka.error_codes import error_code
from sparklog.errors import SparklogError, TopicNotFoundError, UnknownPartitionError

__all__ = ["APIS"]

ALTER_REPLICA_LOG_DIRS_KEY = 34
DESCRIBE_LOG_DIRS_KEY = 35
_UNKNOWN_BYTES = -1


class DescribableTopic(Protocol):
    @property
    def topic(self) -> str: ...
    @property
    def partitions(self) -> tuple[int, ...]: ...


class DescribeLogDirsBody(Protocol):
    """What the handler reads of a DescribeLogDirs request (kio's v1..v5 request classes)."""

    @property
    def topics(self) -> tuple[DescribableTopic, ...] | None: ...


class LogDirTopic(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def partitions(self) -> tuple[int, ...]: ...


class LogDirMove(Protocol):
    @property
    def path(self) -> str: ...
    @property
    def topics(self) -> tuple[LogDirTopic, ...]: ...


class AlterReplicaLogDirsBody(Protocol):
    """What the handler reads of an AlterReplicaLogDirs request (kio's v1..v2 request classes)."""

    @property
    def dirs(self) -> tuple[LogDirMove, ...]: ...


def describe_log_dirs(request: ApiRequest[DescribeLogDirsBody], broker: BrokerContext) -> Any:
    module = response_module(DESCRIBE_LOG_DIRS_KEY, request.api_version)
    topics = request.body.topics
    wanted = None if topics is None else [(str(t.topic), int(p)) for t in topics for p in t.partitions]
    log_dir = broker.replicas.config.log_dir
    code, described = ErrorCode.none, []
    try:
        described = describe_log_dir(broker.replicas, broker.broker_id, wanted)
    except SparklogError as exc:
        code = error_code(exc)  # the dir's own error: Kafka's KAFKA_STORAGE_ERROR for an offline dir
    by_topic: dict[str, list[Any]] = {}
    for replica in described:
        by_topic.setdefault(replica.topic, []).append(
            build(
                module.DescribeLogDirsPartition,
                partition_index=replica.partition,
                partition_size=replica.size_bytes,
                offset_lag=replica.offset_lag,
                is_future_key=False,
            )
        )
    total, usable = _disk_bytes(log_dir)
    result = build(
        module.DescribeLogDirsResult,
        error_code=code,
        log_dir=log_dir,
        topics=tuple(build(module.DescribeLogDirsTopic, name=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
        total_bytes=total,
        usable_bytes=usable,
        is_cordoned=False,
    )
    return build(
        module.DescribeLogDirsResponse, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, results=(result,)
    )


def _disk_bytes(log_dir: str) -> tuple[int, int]:
    if not os.path.isdir(log_dir):  # an object store (or a dir not made yet): no capacity to tell
        return _UNKNOWN_BYTES, _UNKNOWN_BYTES
    usage = shutil.disk_usage(log_dir)
    return usage.total, usage.free


def alter_replica_log_dirs(request: ApiRequest[AlterReplicaLogDirsBody], broker: BrokerContext) -> Any:
    module = response_module(ALTER_REPLICA_LOG_DIRS_KEY, request.api_version)
    own = broker.replicas.config.log_dir
    results: dict[str, list[Any]] = {}
    for move in request.body.dirs:
        for topic in move.topics:
            for partition in topic.partitions:
                code = _move_code(broker, own, str(move.path), str(topic.name), int(partition))
                results.setdefault(str(topic.name), []).append(
                    build(module.AlterReplicaLogDirPartitionResult, partition_index=partition, error_code=code)
                )
    return build(
        module.AlterReplicaLogDirsResponse,
        throttle_time=NO_THROTTLE,
        results=tuple(
            build(module.AlterReplicaLogDirTopicResult, topic_name=t, partitions=tuple(ps)) for t, ps in results.items()
        ),
    )


def _move_code(broker: BrokerContext, own: str, path: str, topic: str, partition: int) -> ErrorCode:
    if os.path.normpath(path) != os.path.normpath(own):
        return ErrorCode.log_dir_not_found
    try:
        assignment, _ = broker.replicas.metadata.assignment(topic)
        if str(partition) not in assignment.partitions:
            raise UnknownPartitionError(f"Topic {topic} has no partition {partition}")
    except (TopicNotFoundError, UnknownPartitionError):
        return ErrorCode.unknown_topic_or_partition
    except SparklogError as exc:
        return error_code(exc)
    return ErrorCode.none if broker.broker_id in assignment.replicas(partition) else ErrorCode.replica_not_available


APIS = (
    Api(ALTER_REPLICA_LOG_DIRS_KEY, 1, 2, alter_replica_log_dirs),
    Api(DESCRIBE_LOG_DIRS_KEY, 1, 5, describe_log_dirs),
)
