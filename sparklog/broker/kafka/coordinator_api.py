"""The FindCoordinator API (key 10, v0..v6): which broker coordinates a group or a transaction.

As in Kafka, the coordinator of group ``g`` is the leader of partition
``abs(javaHash(g)) % offsets.topic.num.partitions`` of ``__consumer_offsets``; a transactional
id is placed the same way on the same topic (Kafka keeps transactions in a second internal
topic, ``__transaction_state``; sparklog keeps transaction state in ZooKeeper and needs only
the placement, so one internal topic serves both: DESIGN §14). Any broker answers; the
offsets topic is created on first use with ``offsets.topic.replication.factor`` replicas
(capped at the live brokers). No leader, or a leader without an endpoint on this listener:
COORDINATOR_NOT_AVAILABLE (retriable). v4+ batches keys (``coordinator_keys``).
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from sparklog.broker.kafka.context import NO_THROTTLE, Api, ApiRequest, BrokerContext, build, response_module
from sparklog.errors import SparklogError
from sparklog.metadata.broker_registration import live_brokers
from sparklog.model.group_ids import validate_group_id
from sparklog.model.topic import OFFSETS_TOPIC

__all__ = ["APIS", "GROUP_KEY", "TRANSACTION_KEY", "coordinator_partition"]

FIND_COORDINATOR_KEY = 10
GROUP_KEY, TRANSACTION_KEY = 0, 1

log = logging.getLogger(__name__)


class FindCoordinatorBody(Protocol):
    """What the handler reads of a FindCoordinator request (kio's v0..v6 request classes).

    ``key`` exists up to v3 and ``coordinator_keys`` from v4 (the batched form): each is read
    only in the versions that have it."""

    @property
    def key(self) -> str: ...
    @property
    def coordinator_keys(self) -> tuple[str, ...]: ...


def coordinator_partition(broker: BrokerContext, key: str) -> int:
    """The ``__consumer_offsets`` partition whose leader coordinates group or transactional id
    ``key`` (the topic is created when missing)."""
    if broker.groups is None:
        raise SparklogError("this listener has no group coordinator")
    return broker.groups.partition_of(key)


def find_coordinator(request: ApiRequest[FindCoordinatorBody], broker: BrokerContext) -> Any:
    module = response_module(FIND_COORDINATOR_KEY, request.api_version)
    body = request.body
    key_type = int(getattr(body, "key_type", GROUP_KEY))
    keys = list(body.coordinator_keys) if request.api_version >= 4 else [body.key]
    answers = [_locate(broker, key_type, str(key)) for key in keys]
    if request.api_version >= 4:
        return build(
            module.FindCoordinatorResponse,
            throttle_time=NO_THROTTLE,
            coordinators=tuple(
                build(
                    module.Coordinator,
                    key=key,
                    node_id=node,
                    host=host,
                    port=port,
                    error_code=code,
                    error_message=message,
                )
                for key, (code, message, node, host, port) in zip(keys, answers, strict=True)
            ),
        )
    code, message, node, host, port = answers[0]
    return build(
        module.FindCoordinatorResponse,
        throttle_time=NO_THROTTLE,
        error_code=code,
        error_message=message,
        node_id=node,
        host=host,
        port=port,
    )


def _locate(broker: BrokerContext, key_type: int, key: str) -> tuple[ErrorCode, str | None, int, str, int]:
    if key_type not in (GROUP_KEY, TRANSACTION_KEY):
        return ErrorCode.invalid_request, f"Unknown coordinator key type {key_type}", -1, "", -1
    try:
        validate_group_id(key)
    except SparklogError as exc:
        code = ErrorCode.invalid_group_id if key_type == GROUP_KEY else ErrorCode.invalid_request
        return code, str(exc), -1, "", -1
    try:
        partition = coordinator_partition(broker, key)
        state = broker.replicas.states(OFFSETS_TOPIC, [partition])[partition]
    except SparklogError as exc:
        log.info("no coordinator for %r yet: %s", key, exc)
        return ErrorCode.coordinator_not_available, str(exc), -1, "", -1
    record = live_brokers(broker.replicas.zk).get(state.leader) if state.leader is not None else None
    endpoint = record.endpoint(broker.listener_name) if record is not None else None
    if endpoint is None:
        message = f"{OFFSETS_TOPIC}-{partition} has no live leader on listener {broker.listener_name} yet"
        return ErrorCode.coordinator_not_available, message, -1, "", -1
    return ErrorCode.none, None, int(state.leader), endpoint[0], endpoint[1]


APIS = (Api(FIND_COORDINATOR_KEY, 0, 6, find_coordinator),)
