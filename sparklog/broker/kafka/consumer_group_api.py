"""Kafka's consumer group protocol on the wire (KIP-848, DESIGN §8, §14): ConsumerGroupHeartbeat
(68) v0–v1 and ConsumerGroupDescribe (69) v0–v1.

Only the group's coordinator answers (NOT_COORDINATOR elsewhere); the protocol is
:mod:`sparklog.broker.groups.consumer_group`, the groups are
:class:`~sparklog.broker.groups.consumer_coordinator.ConsumerGroups`. Assignments name topics
by topic id, the UUID Metadata answers for a topic (``metadata_api.topic_uuid``); owned
partitions of a topic id no broker knows (a deleted topic) are dropped. A member id may be
given by the client (v1, Kafka 4's clients: a UUID of their own) or left empty (the broker
makes one). ConsumerGroupDescribe answers GROUP_ID_NOT_FOUND for a group that is not a
consumer-protocol group, as Kafka does (Kafka's admin client then describes it with
DescribeGroups).
"""

from __future__ import annotations

import datetime
import uuid
from typing import Any, Protocol

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32Timedelta

from sparklog.broker.groups.consumer_group import HeartbeatRequest, HeartbeatResult
from sparklog.broker.kafka.context import NO_THROTTLE, Api, ApiRequest, BrokerContext, build, response_module
from sparklog.broker.kafka.error_codes import error_code
from sparklog.broker.kafka.group_api import groups_of, host_of
from sparklog.broker.kafka.metadata_api import topic_uuid
from sparklog.errors import SparklogError
from sparklog.model.topic import TopicPartition

__all__ = ["APIS"]

CONSUMER_GROUP_HEARTBEAT_KEY, CONSUMER_GROUP_DESCRIBE_KEY = 68, 69
_NOT_REQUESTED = -(2**31)  # Kafka's "authorized operations not requested"
_TOPICS_MAX_AGE_MS = 1000
_MEMBER_TYPE_CONSUMER = 1


class OwnedTopic(Protocol):
    @property
    def topic_id(self) -> uuid.UUID | None: ...
    @property
    def partitions(self) -> tuple[int, ...]: ...


class ConsumerGroupHeartbeatBody(Protocol):
    """What the handler reads of a ConsumerGroupHeartbeat request (kio's v0..v1 request classes)."""

    @property
    def group_id(self) -> str: ...
    @property
    def member_id(self) -> str: ...
    @property
    def member_epoch(self) -> int: ...
    @property
    def instance_id(self) -> str | None: ...
    @property
    def rack_id(self) -> str | None: ...
    @property
    def rebalance_timeout(self) -> datetime.timedelta: ...
    @property
    def subscribed_topic_names(self) -> tuple[str, ...] | None: ...
    @property
    def subscribed_topic_regex(self) -> str | None: ...
    @property
    def server_assignor(self) -> str | None: ...
    @property
    def topic_partitions(self) -> tuple[OwnedTopic, ...] | None: ...


class ConsumerGroupDescribeBody(Protocol):
    """What the handler reads of a ConsumerGroupDescribe request (kio's v0..v1 request classes)."""

    @property
    def group_ids(self) -> tuple[str, ...]: ...


def _topics(broker: BrokerContext) -> tuple[dict[str, int], dict[str, uuid.UUID]]:
    """Partition count and topic id of every existing topic but Kafka's internal ones (a
    regex never matches those, as in Kafka)."""
    replicas = broker.replicas
    counts, ids = {}, {}
    for topic in replicas.list_topics():
        if topic.startswith("__"):
            continue
        try:
            counts[topic] = len(replicas.partitions_of(topic, max_age_ms=_TOPICS_MAX_AGE_MS))
            ids[topic] = topic_uuid(replicas.topic_id(topic, max_age_ms=_TOPICS_MAX_AGE_MS))
        except SparklogError:
            continue  # deleted meanwhile
    return counts, ids


def consumer_group_heartbeat(request: ApiRequest[ConsumerGroupHeartbeatBody], broker: BrokerContext) -> Any:
    module = response_module(CONSUMER_GROUP_HEARTBEAT_KEY, request.api_version)
    body = request.body
    ids: dict[str, uuid.UUID] = {}
    try:
        counts, ids = _topics(broker)
        names = {topic_id: name for name, topic_id in ids.items()}
        owned: frozenset[TopicPartition] | None = None
        if body.topic_partitions is not None:
            owned = frozenset(
                (names[t.topic_id], int(p)) for t in body.topic_partitions if t.topic_id in names for p in t.partitions
            )
        rebalance_ms = int(body.rebalance_timeout.total_seconds() * 1000)
        heartbeat = HeartbeatRequest(
            member_id=str(body.member_id),
            member_epoch=int(body.member_epoch),
            client_id=request.client_id or "",
            client_host=host_of(request.peer),
            instance_id=body.instance_id,
            rack_id=body.rack_id,
            rebalance_timeout_ms=rebalance_ms,
            subscribed_topic_names=tuple(map(str, body.subscribed_topic_names))
            if body.subscribed_topic_names is not None
            else None,
            subscribed_topic_regex=body.subscribed_topic_regex,
            server_assignor=body.server_assignor,
            owned=owned,
        )
        result = groups_of(broker).consumer.heartbeat(str(body.group_id), heartbeat, counts)
    except Exception as exc:  # noqa: BLE001 - answered as the request's error code
        result = HeartbeatResult(error_code(exc), message=str(exc))
    assignment = None
    if result.assignment is not None:
        assignment = build(
            module.Assignment, topic_partitions=_by_topic_id(module.TopicPartitions, result.assignment, ids)
        )
    interval_ms = broker.replicas.config.group_consumer_heartbeat_interval_ms
    return build(
        module.ConsumerGroupHeartbeatResponse,
        throttle_time=NO_THROTTLE,
        error_code=result.error,
        error_message=result.message if result.error is not ErrorCode.none else None,
        member_id=result.member_id,
        member_epoch=result.member_epoch,
        heartbeat_interval=i32Timedelta.parse(
            datetime.timedelta(milliseconds=interval_ms if result.error is ErrorCode.none else 0)
        ),
        assignment=assignment,
    )


def _by_topic_id(entity: type, partitions: frozenset[TopicPartition], ids: dict[str, uuid.UUID]) -> tuple[Any, ...]:
    """Kafka's topic id → partitions lists (a topic deleted since has no id: left out)."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        if topic in ids:
            by_topic.setdefault(topic, []).append(partition)
    return tuple(
        build(entity, topic_id=ids[topic], topic_name=topic, partitions=tuple(numbers))
        for topic, numbers in by_topic.items()
    )


def consumer_group_describe(request: ApiRequest[ConsumerGroupDescribeBody], broker: BrokerContext) -> Any:
    module = response_module(CONSUMER_GROUP_DESCRIBE_KEY, request.api_version)
    described = []
    _counts, ids = _topics(broker)
    for group_id in request.body.group_ids:
        try:
            groups = groups_of(broker)
            groups.check_coordinator(str(group_id))
            view = groups.consumer.view(str(group_id))
        except Exception as exc:  # noqa: BLE001 - answered as this group's error code
            described.append(_described(module, str(group_id), error_code(exc), str(exc)))
            continue
        if view is None:
            message = f"Group {group_id} is not a consumer group (or has no members)."
            described.append(_described(module, str(group_id), ErrorCode.group_id_not_found, message))
            continue

        def assignment(partitions: frozenset[TopicPartition]) -> Any:
            return build(module.Assignment, topic_partitions=_by_topic_id(module.TopicPartitions, partitions, ids))

        members = tuple(
            build(
                module.Member,
                member_id=m.member_id,
                instance_id=m.instance_id,
                rack_id=m.rack_id,
                member_epoch=m.member_epoch,
                client_id=m.client_id,
                client_host=m.client_host,
                subscribed_topic_names=m.topic_names,
                subscribed_topic_regex=m.topic_regex,
                assignment=assignment(m.assigned),
                target_assignment=assignment(m.target),
                member_type=_MEMBER_TYPE_CONSUMER,
            )
            for m in view.members
        )
        described.append(
            build(
                module.DescribedGroup,
                error_code=ErrorCode.none,
                error_message=None,
                group_id=group_id,
                group_state=view.state,
                group_epoch=view.group_epoch,
                assignment_epoch=view.assignment_epoch,
                assignor_name=view.assignor,
                members=members,
                authorized_operations=_NOT_REQUESTED,
            )
        )
    return build(module.ConsumerGroupDescribeResponse, throttle_time=NO_THROTTLE, groups=tuple(described))


def _described(module: Any, group_id: str, code: ErrorCode, message: str) -> Any:
    return build(
        module.DescribedGroup,
        error_code=code,
        error_message=message,
        group_id=group_id,
        group_state="Dead",
        group_epoch=-1,
        assignment_epoch=-1,
        assignor_name="",
        members=(),
        authorized_operations=_NOT_REQUESTED,
    )


APIS = (
    Api(CONSUMER_GROUP_HEARTBEAT_KEY, 0, 1, consumer_group_heartbeat),
    Api(CONSUMER_GROUP_DESCRIBE_KEY, 0, 1, consumer_group_describe),
)
