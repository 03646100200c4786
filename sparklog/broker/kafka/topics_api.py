"""CreateTopics (19, v2..v7), DeleteTopics (20, v1..v6) and CreatePartitions (37, v0..v3).

Each topic of a request is answered on its own, with Kafka's error code and a message; one
failing topic never fails the others. The work is :mod:`sparklog.runtime.topics` (ZooKeeper
metadata in one multi-op, then the replica tables; undone on failure), so a topic made over
the wire is the topic ``Cluster.describe_topic`` shows, and any agent can serve these
requests (there is no separate controller channel: ZooKeeper orders concurrent changes).

* **CreateTopics**: ``num_partitions`` / ``replication_factor`` -1 take the broker's
  ``num.partitions`` / ``default.replication.factor``; explicit ``assignments`` place the
  replicas (then both must be -1, else INVALID_REQUEST). Checks in Kafka's order:
  TOPIC_ALREADY_EXISTS, INVALID_TOPIC_EXCEPTION, INVALID_CONFIG (unknown name — Kafka's
  names exactly —, bad or null value), INVALID_PARTITIONS, INVALID_REPLICATION_FACTOR (more
  than the live brokers), INVALID_REPLICA_ASSIGNMENT. ``validate_only`` runs every check and
  creates nothing. v5+ responses carry the partition count, replication factor and every
  config with its source; v7 the topic id.
* **DeleteTopics**: by name, or (v6) by topic id (UNKNOWN_TOPIC_ID if none has it);
  UNKNOWN_TOPIC_OR_PARTITION for a topic that does not exist.
* **CreatePartitions**: increases only (INVALID_PARTITIONS otherwise), new replicas placed
  as the topic's pattern continues or as ``assignments`` say (INVALID_REPLICA_ASSIGNMENT
  when they do not fit); ``validate_only`` honoured.
* A topic named twice in one request is INVALID_REQUEST. The internal ``__consumer_offsets``
  is sparklog's to create and to size: creating it, deleting it or adding partitions to it
  is POLICY_VIOLATION.

The requests' timeouts are not waited on: each change is complete (metadata and tables)
when its answer is sent.
"""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from sparklog.broker.kafka.config_entries import topic_config_entries
from sparklog.broker.kafka.context import NO_THROTTLE, Api, ApiRequest, BrokerContext, build, response_module
from sparklog.broker.kafka.error_codes import InvalidRequestError, PolicyViolationError, error_code
from sparklog.broker.kafka.metadata_api import topic_uuid
from sparklog.config import TOPIC_CONFIGS
from sparklog.errors import ConfigError, InvalidReplicaAssignmentError, TopicNotFoundError
from sparklog.metadata.zkdata import TopicAssignment
from sparklog.model.topic import is_internal, validate_topic_name
from sparklog.runtime.topics import create_partitions, create_topic, delete_topic, plan_topic

__all__ = ["APIS"]

CREATE_TOPICS_KEY = 19
DELETE_TOPICS_KEY = 20
CREATE_PARTITIONS_KEY = 37
_ZERO = uuid.UUID(int=0)


class CreatableReplicaAssignment(Protocol):
    @property
    def partition_index(self) -> int: ...
    @property
    def broker_ids(self) -> tuple[int, ...]: ...


class CreatableTopicConfig(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def value(self) -> str | None: ...


class CreatableTopic(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def num_partitions(self) -> int: ...
    @property
    def replication_factor(self) -> int: ...
    @property
    def assignments(self) -> tuple[CreatableReplicaAssignment, ...]: ...
    @property
    def configs(self) -> tuple[CreatableTopicConfig, ...]: ...


class CreateTopicsBody(Protocol):
    """What the handler reads of a CreateTopics request (kio's v2..v7 request classes)."""

    @property
    def topics(self) -> tuple[CreatableTopic, ...]: ...
    @property
    def validate_only(self) -> bool: ...


class DeleteTopicState(Protocol):
    @property
    def name(self) -> str | None: ...
    @property
    def topic_id(self) -> uuid.UUID | None: ...


class DeleteTopicsBody(Protocol):
    """What the handler reads of a DeleteTopics request (kio's v1..v6 request classes).

    ``topic_names`` exists up to v5 and ``topics`` (by name or id) from v6: each is read
    only in the versions that have it."""

    @property
    def topic_names(self) -> tuple[str, ...]: ...
    @property
    def topics(self) -> tuple[DeleteTopicState, ...]: ...


class CreatePartitionsAssignment(Protocol):
    @property
    def broker_ids(self) -> tuple[int, ...]: ...


class CreatePartitionsTopic(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def count(self) -> int: ...
    @property
    def assignments(self) -> tuple[CreatePartitionsAssignment, ...] | None: ...


class CreatePartitionsBody(Protocol):
    """What the handler reads of a CreatePartitions request (kio's v0..v3 request classes)."""

    @property
    def topics(self) -> tuple[CreatePartitionsTopic, ...]: ...
    @property
    def validate_only(self) -> bool: ...


def _check_not_internal(name: str, what: str) -> None:
    if is_internal(name):
        raise PolicyViolationError(
            f"Topic {name} is internal: sparklog creates and sizes it itself (offsets.topic.num.partitions); "
            f"{what} it is not allowed"
        )


def _duplicates(names: list[str | None]) -> set[str | None]:
    return {name for name, count in Counter(names).items() if count > 1}


# -- CreateTopics ---------------------------------------------------------------------------
def create_topics(request: ApiRequest[CreateTopicsBody], broker: BrokerContext) -> Any:
    body = request.body
    module = response_module(CREATE_TOPICS_KEY, request.api_version)
    duplicates = _duplicates([t.name for t in body.topics])
    results = []
    for topic in body.topics:
        try:
            if topic.name in duplicates:
                raise InvalidRequestError(f"Duplicate topic name: {topic.name} appears more than once in the request")
            results.append(_create(module, broker, topic, bool(body.validate_only)))
        except Exception as exc:  # noqa: BLE001 - becomes this topic's error code
            results.append(
                build(
                    module.CreatableTopicResult,
                    name=topic.name,
                    topic_id=_ZERO,
                    error_code=error_code(exc),
                    error_message=str(exc),
                    num_partitions=-1,
                    replication_factor=-1,
                    configs=None,
                )
            )
    return build(module.CreateTopicsResponse, throttle_time=NO_THROTTLE, topics=tuple(results))


def _create(module: Any, broker: BrokerContext, topic: CreatableTopic, validate_only: bool) -> Any:
    name = topic.name
    replicas = broker.replicas
    validate_topic_name(name)
    if not replicas.metadata.topic_exists(name):
        _check_not_internal(name, "creating")
    assignment: dict[int, list[int]] | None = None
    if topic.assignments:
        if topic.num_partitions != -1 or topic.replication_factor != -1:
            raise InvalidRequestError(
                "Both numPartitions or replicationFactor and replicasAssignments were set. "
                "Both cannot be used at the same time."
            )
        assignment = {}
        for item in topic.assignments:
            if item.partition_index in assignment:
                raise InvalidReplicaAssignmentError(
                    f"Partition {item.partition_index} appears more than once in the replica assignment of {name}"
                )
            assignment[int(item.partition_index)] = [int(b) for b in item.broker_ids]
    configs = _configs(topic.configs)
    partitions = replicas.config.num_partitions if topic.num_partitions == -1 else int(topic.num_partitions)
    factor = (
        replicas.config.default_replication_factor if topic.replication_factor == -1 else int(topic.replication_factor)
    )
    if validate_only:
        planned, overrides = plan_topic(replicas, name, partitions, factor, configs, assignment)
        topic_id = _ZERO
        count, factor = len(planned), len(planned[min(planned)])
    else:
        created = create_topic(replicas, name, partitions, factor, configs, assignment)
        overrides = created.configs
        topic_id = topic_uuid(created.topic_id)
        count, factor = len(created.partitions), len(created.partitions[0].replicas)
    return build(
        module.CreatableTopicResult,
        name=name,
        topic_id=topic_id,
        error_code=ErrorCode.none,
        error_message=None,
        num_partitions=count,
        replication_factor=factor,
        configs=tuple(
            build(
                module.CreatableTopicConfigs,
                name=entry.name,
                value=entry.value,
                read_only=entry.read_only,
                config_source=entry.source,
                is_sensitive=False,
            )
            for entry in topic_config_entries(overrides)
        )
        if hasattr(module, "CreatableTopicConfigs")
        else None,
    )


def _configs(configs: tuple[CreatableTopicConfig, ...]) -> dict[str, str]:
    result: dict[str, str] = {}
    for config in configs:
        if config.name not in TOPIC_CONFIGS:
            raise ConfigError(
                f"Unknown topic config name: {config.name}. Allowed keys: {', '.join(sorted(TOPIC_CONFIGS))}"
            )
        if config.value is None:
            raise ConfigError(f"Null value not supported for topic configs: {config.name}")
        result[config.name] = config.value
    return result


# -- DeleteTopics ---------------------------------------------------------------------------
def delete_topics(request: ApiRequest[DeleteTopicsBody], broker: BrokerContext) -> Any:
    body = request.body
    module = response_module(DELETE_TOPICS_KEY, request.api_version)
    if hasattr(body, "topics"):
        wanted = [(t.name, t.topic_id if t.topic_id != _ZERO else None) for t in body.topics]
    else:
        wanted = [(name, None) for name in body.topic_names]
    duplicates = _duplicates([name for name, _ in wanted if name is not None])
    results = []
    for name, topic_id in wanted:
        try:
            if name is not None and name in duplicates:
                raise InvalidRequestError(f"Duplicate topic name: {name} appears more than once in the request")
            name, topic_id = _delete(broker, name, topic_id)
            code, message = ErrorCode.none, None
        except Exception as exc:  # noqa: BLE001 - becomes this topic's error code
            code, message = error_code(exc), str(exc)
            if isinstance(exc, _UnknownTopicIdError):
                code = ErrorCode.unknown_topic_id
        results.append(
            build(
                module.DeletableTopicResult,
                name=name,
                topic_id=topic_id or _ZERO,
                error_code=code,
                error_message=message,
            )
        )
    return build(module.DeleteTopicsResponse, throttle_time=NO_THROTTLE, responses=tuple(results))


class _UnknownTopicIdError(TopicNotFoundError):
    """No topic has the id given (Kafka: UNKNOWN_TOPIC_ID)."""


def _delete(broker: BrokerContext, name: str | None, topic_id: uuid.UUID | None) -> tuple[str, uuid.UUID]:
    replicas = broker.replicas
    if name is not None and topic_id is not None:
        raise InvalidRequestError("You may not specify both topic name and topic id.")
    if name is None:
        if topic_id is None:
            raise InvalidRequestError("A topic to delete needs a name or a topic id")
        found = [
            t for t in replicas.list_topics() if topic_uuid(replicas.metadata.assignment(t)[0].topic_id) == topic_id
        ]
        if not found:
            raise _UnknownTopicIdError(f"No topic has the id {topic_id}")
        name = found[0]
    assignment = _existing(broker, name)
    _check_not_internal(name, "deleting")
    delete_topic(replicas, name)
    return name, topic_uuid(assignment.topic_id)


def _existing(broker: BrokerContext, name: str) -> TopicAssignment:
    """The topic's assignment; a name that cannot exist is an unknown topic (Kafka looks
    names up before anything else in DeleteTopics and CreatePartitions)."""
    try:
        validate_topic_name(name)
    except ValueError as exc:
        raise TopicNotFoundError(f"Topic {name!r} does not exist: {exc}") from exc
    return broker.replicas.metadata.assignment(name)[0]


# -- CreatePartitions ---------------------------------------------------------------------
def create_partitions_handler(request: ApiRequest[CreatePartitionsBody], broker: BrokerContext) -> Any:
    body = request.body
    module = response_module(CREATE_PARTITIONS_KEY, request.api_version)
    duplicates = _duplicates([t.name for t in body.topics])
    results = []
    for topic in body.topics:
        try:
            if topic.name in duplicates:
                raise InvalidRequestError(f"Duplicate topic in request: {topic.name}")
            _existing(broker, topic.name)  # UNKNOWN_TOPIC_OR_PARTITION first, as Kafka
            _check_not_internal(topic.name, "adding partitions to")
            assignment = None
            if topic.assignments is not None:
                assignment = [[int(b) for b in a.broker_ids] for a in topic.assignments]
            create_partitions(broker.replicas, topic.name, int(topic.count), assignment, bool(body.validate_only))
            code, message = ErrorCode.none, None
        except Exception as exc:  # noqa: BLE001 - becomes this topic's error code
            code, message = error_code(exc), str(exc)
        results.append(
            build(module.CreatePartitionsTopicResult, name=topic.name, error_code=code, error_message=message)
        )
    return build(module.CreatePartitionsResponse, throttle_time=NO_THROTTLE, results=tuple(results))


APIS = (
    Api(CREATE_TOPICS_KEY, 2, 7, create_topics),
    Api(DELETE_TOPICS_KEY, 1, 6, delete_topics),
    Api(CREATE_PARTITIONS_KEY, 0, 3, create_partitions_handler),
)
