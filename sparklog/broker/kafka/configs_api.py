"""DescribeConfigs (32, v1..v4), AlterConfigs (33, v0..v2), IncrementalAlterConfigs (44, v0..v1).

Resources: topics (type 2) and brokers (type 4); any other type gets INVALID_REQUEST naming it.
Each resource is answered on its own (one failing resource never fails the others) and
what a response says is what ZooKeeper holds: the same overrides ``Cluster.topic_config``
and ``Cluster.describe_topic`` read (entries: :mod:`~sparklog.broker.kafka.config_entries`).

* **Topics**: DescribeConfigs lists every topic config (or the ``configuration_keys`` asked,
  unknown ones left out; none asked means all, as Kafka), with synonyms and documentation when asked. Alters go
  through :mod:`sparklog.runtime.topics` (compare-and-set on the config znode): all the
  changes to one topic apply together or none does. A config name outside sparklog's
  topic configs (Kafka's names, exactly), a bad value, a null value, or APPEND/SUBTRACT on
  a non-list config is INVALID_CONFIG with a message naming the key and what is allowed,
  and nothing changes. ``validate_only`` makes the same checks and writes nothing.
  AlterConfigs replaces the topic's overrides (keys not given return to their defaults),
  as in Kafka; IncrementalAlterConfigs applies SET/DELETE/APPEND/SUBTRACT to them.
* **Brokers**: the name is this broker's id or ``""`` (Kafka's rule; another id is
  INVALID_REQUEST, clients send broker resources to that broker). DescribeConfigs answers
  with the agent's settings, read only. Altering a broker config is INVALID_REQUEST:
  sparklog has no dynamic broker configs (set them in the agent's properties and restart).
* The same resource twice in one alter request is INVALID_REQUEST for each, as is the same
  key twice in one IncrementalAlterConfigs resource.
* IncrementalAlterConfigs DELETE of one of Kafka's replication throttles (``*.replication.
  throttled.rate``/``.replicas``, ``replica.alter.log.dirs.io.max.bytes.per.second``) on a
  topic or a broker is accepted and changes nothing: sparklog has no throttles, and
  ``kafka-reassign-partitions --verify`` clears them after every reassignment.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any, Protocol

from kio.index import load_response_schema
from kio.schema.errors import ErrorCode

from sparklog.broker.kafka.config_entries import ConfigEntry, broker_config_entries, topic_config_entries
from sparklog.broker.kafka.context import NO_THROTTLE, Api, ApiRequest, BrokerContext, build, response_module
from sparklog.broker.kafka.error_codes import InvalidRequestError, error_code
from sparklog.config import TOPIC_CONFIGS
from sparklog.errors import ConfigError
from sparklog.model.topic import validate_topic_name
from sparklog.runtime.topics import ConfigOperation, incremental_alter_topic_config, replace_topic_config

__all__ = ["APIS", "RESOURCE_BROKER", "RESOURCE_TOPIC"]

DESCRIBE_CONFIGS_KEY = 32
ALTER_CONFIGS_KEY = 33
INCREMENTAL_ALTER_CONFIGS_KEY = 44
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
_OPERATIONS: dict[int, str] = {0: "set", 1: "delete", 2: "append", 3: "subtract"}
_DELETE = 1
# Kafka's replication throttles, which sparklog does not have (its replicas copy files at
# full speed): ``kafka-reassign-partitions --verify`` deletes them when a reassignment is
# done, so a DELETE of one is accepted and changes nothing; setting one stays refused.
_THROTTLES = frozenset(
    {
        "leader.replication.throttled.rate",
        "follower.replication.throttled.rate",
        "replica.alter.log.dirs.io.max.bytes.per.second",
        "leader.replication.throttled.replicas",
        "follower.replication.throttled.replicas",
    }
)


class DescribeConfigsResource(Protocol):
    @property
    def resource_type(self) -> int: ...
    @property
    def resource_name(self) -> str: ...
    @property
    def configuration_keys(self) -> tuple[str, ...] | None: ...


class DescribeConfigsBody(Protocol):
    """What the handler reads of a DescribeConfigs request (kio's v1..v4 request classes)."""

    @property
    def resources(self) -> tuple[DescribeConfigsResource, ...]: ...


class AlterableConfig(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def value(self) -> str | None: ...


class AlterConfigsResource(Protocol):
    @property
    def resource_type(self) -> int: ...
    @property
    def resource_name(self) -> str: ...
    @property
    def configs(self) -> tuple[AlterableConfig, ...]: ...


class AlterConfigsBody(Protocol):
    """What the handlers read of an AlterConfigs request (kio's v0..v2 request classes); an
    IncrementalAlterConfigs request has the same shape, with an operation per config."""

    @property
    def resources(self) -> tuple[AlterConfigsResource, ...]: ...
    @property
    def validate_only(self) -> bool: ...


class IncrementalAlterableConfig(AlterableConfig, Protocol):
    @property
    def config_operation(self) -> int: ...


class IncrementalAlterConfigsResource(AlterConfigsResource, Protocol):
    @property
    def configs(self) -> tuple[IncrementalAlterableConfig, ...]: ...


class IncrementalAlterConfigsBody(AlterConfigsBody, Protocol):
    """What the handler reads of an IncrementalAlterConfigs request (kio's v0..v1 request classes)."""

    @property
    def resources(self) -> tuple[IncrementalAlterConfigsResource, ...]: ...


# -- DescribeConfigs ----------------------------------------------------------------------
def describe_configs(request: ApiRequest[DescribeConfigsBody], broker: BrokerContext) -> Any:
    body = request.body
    module = response_module(DESCRIBE_CONFIGS_KEY, request.api_version)
    synonyms = bool(getattr(body, "include_synonyms", False))
    documentation = bool(getattr(body, "include_documentation", False))
    results = []
    for resource in body.resources:
        kind, name = int(resource.resource_type), resource.resource_name
        try:
            entries = _entries(broker, kind, name)
            if resource.configuration_keys:  # null or empty: every config, as Kafka
                wanted = set(resource.configuration_keys)
                entries = [e for e in entries if e.name in wanted]
            code, message, configs = (
                ErrorCode.none,
                None,
                tuple(_describe_entry(module, e, synonyms, documentation) for e in entries),
            )
        except Exception as exc:  # noqa: BLE001 - becomes this resource's error code
            code, message, configs = error_code(exc), str(exc), ()
        results.append(
            build(
                module.DescribeConfigsResult,
                error_code=code,
                error_message=message,
                resource_type=kind,
                resource_name=name,
                configs=configs,
            )
        )
    return build(module.DescribeConfigsResponse, throttle_time=NO_THROTTLE, results=tuple(results))


def _entries(broker: BrokerContext, kind: int, name: str) -> list[ConfigEntry]:
    if kind == RESOURCE_TOPIC:
        validate_topic_name(name)
        overrides, _ = broker.replicas.metadata.topic_config(name)
        return topic_config_entries(overrides)
    if kind == RESOURCE_BROKER:
        _check_broker_name(broker, name)
        return broker_config_entries(broker.replicas.config)
    raise InvalidRequestError(
        f"Unsupported resource type {kind}: sparklog serves configs of topics ({RESOURCE_TOPIC}) "
        f"and brokers ({RESOURCE_BROKER})"
    )


def _describe_entry(module: Any, entry: ConfigEntry, synonyms: bool, documentation: bool) -> Any:
    return build(
        module.DescribeConfigsResourceResult,
        name=entry.name,
        value=entry.value,
        read_only=entry.read_only,
        config_source=entry.source,
        is_sensitive=False,
        synonyms=tuple(build(module.DescribeConfigsSynonym, name=n, value=v, source=s) for n, v, s in entry.synonyms)
        if synonyms
        else (),
        config_type=entry.config_type,
        documentation=entry.documentation if documentation else None,
    )


def _check_broker_name(broker: BrokerContext, name: str) -> None:
    if name not in ("", str(broker.broker_id)):
        raise InvalidRequestError(
            f"Unexpected broker id, expected {broker.broker_id} or empty string, but received {name!r} "
            "(send a broker's config requests to that broker)"
        )


# -- AlterConfigs and IncrementalAlterConfigs ----------------------------------------------
def alter_configs(request: ApiRequest[AlterConfigsBody], broker: BrokerContext) -> Any:
    def alter(name: str, configs: tuple[AlterableConfig, ...], validate_only: bool) -> None:
        given = {}
        for config in configs:
            _check_name(config.name)
            if config.value is None:
                raise ConfigError(f"Null value not supported for topic config {config.name}")
            given[config.name] = config.value
        replace_topic_config(broker.replicas, name, given, validate_only)

    return _alter(request, broker, ALTER_CONFIGS_KEY, alter)


def incremental_alter_configs(request: ApiRequest[IncrementalAlterConfigsBody], broker: BrokerContext) -> Any:
    def alter(name: str, configs: tuple[IncrementalAlterableConfig, ...], validate_only: bool) -> None:
        duplicates = sorted(k for k, n in Counter(c.name for c in configs).items() if n > 1)
        if duplicates:
            raise InvalidRequestError(f"Error due to duplicate config keys: {', '.join(duplicates)}")
        operations: list[ConfigOperation] = []
        for config in _without_throttle_deletes(configs):
            op = _OPERATIONS.get(int(config.config_operation))
            if op is None:
                raise InvalidRequestError(
                    f"Unknown config operation {config.config_operation} for {config.name} "
                    "(0 SET, 1 DELETE, 2 APPEND, 3 SUBTRACT)"
                )
            _check_name(config.name)
            operations.append((op, config.name, config.value))  # type: ignore[arg-type]
        incremental_alter_topic_config(broker.replicas, name, operations, validate_only)

    return _alter(request, broker, INCREMENTAL_ALTER_CONFIGS_KEY, alter, _without_throttle_deletes)


def _without_throttle_deletes(configs: tuple[IncrementalAlterableConfig, ...]) -> list[IncrementalAlterableConfig]:
    return [c for c in configs if not (c.name in _THROTTLES and int(c.config_operation) == _DELETE)]


def _check_name(name: str) -> None:
    # Kafka's names exactly on the wire (sparklog's Python API also takes retention_ms).
    if name not in TOPIC_CONFIGS:
        raise ConfigError(f"Unknown topic config name: {name}. Allowed keys: {', '.join(sorted(TOPIC_CONFIGS))}")


def _alter(
    request: ApiRequest[AlterConfigsBody],
    broker: BrokerContext,
    api_key: int,
    alter_topic: Callable[..., None],
    broker_changes: Callable[[Any], list[Any]] = list,
) -> Any:
    body = request.body
    module = response_module(api_key, request.api_version)
    seen = Counter((int(r.resource_type), r.resource_name) for r in body.resources)
    responses = []
    for resource in body.resources:
        kind, name = int(resource.resource_type), resource.resource_name
        try:
            if seen[(kind, name)] > 1:
                raise InvalidRequestError(f"Duplicate resource: type {kind}, name {name!r} appears more than once")
            if kind == RESOURCE_TOPIC:
                alter_topic(name, resource.configs, bool(body.validate_only))
            elif kind == RESOURCE_BROKER:
                _check_broker_name(broker, name)
                changes = broker_changes(resource.configs)
                if changes:
                    names = ", ".join(sorted(c.name for c in changes))
                    raise InvalidRequestError(
                        f"Cannot update these configs dynamically: {names}. sparklog brokers read their settings "
                        "at start: set them in the broker's properties file and restart it"
                    )
            else:
                raise InvalidRequestError(
                    f"Altering configs is only supported for topics ({RESOURCE_TOPIC}) and brokers "
                    f"({RESOURCE_BROKER}), but resource type is {kind}"
                )
            code, message = ErrorCode.none, None
        except Exception as exc:  # noqa: BLE001 - becomes this resource's error code
            code, message = error_code(exc), str(exc)
        responses.append(
            build(
                module.AlterConfigsResourceResponse,
                error_code=code,
                error_message=message,
                resource_type=kind,
                resource_name=name,
            )
        )
    response_type = load_response_schema(api_key, request.api_version)
    return build(response_type, throttle_time=NO_THROTTLE, responses=tuple(responses))


APIS = (
    Api(DESCRIBE_CONFIGS_KEY, 1, 4, describe_configs),
    Api(ALTER_CONFIGS_KEY, 0, 2, alter_configs),
    Api(INCREMENTAL_ALTER_CONFIGS_KEY, 0, 1, incremental_alter_configs),
)
