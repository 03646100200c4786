"""What every request handler receives: the parsed request and the broker it arrived at.

Handlers are plain functions ``(ApiRequest, BrokerContext) -> response entity``; each API
module declares the versions it serves as :class:`Api` rows, and ``apis`` dispatches on
them. Responses are kio entities built with :func:`build`, which drops the fields the
negotiated version lacks, so one handler answers every version of its API.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from kio.index import load_response_schema
from kio.static.primitive import i32Timedelta

from sparklog.broker.metrics import BrokerMetrics
from sparklog.errors import NotLeaderError
from sparklog.metadata.zkdata import PartitionState
from sparklog.runtime.replica_manager import METADATA_MAX_AGE_MS

if TYPE_CHECKING:
    from sparklog.broker.groups.coordinator import BrokerGroups
    from sparklog.broker.leader_appender import LeaderAppender
    from sparklog.broker.producer_state import ProducerStates
    from sparklog.broker.transactions.coordinator import TransactionCoordinator
    from sparklog.metadata.producer_ids import ProducerIdBlocks
    from sparklog.runtime.replica_manager import ReplicaManager

__all__ = [
    "METADATA_MAX_AGE_MS",
    "NO_RESPONSE",
    "NO_THROTTLE",
    "Api",
    "ApiRequest",
    "BrokerContext",
    "Deferred",
    "Partitions",
    "build",
    "led_partition",
    "response_module",
]

NO_THROTTLE = i32Timedelta.parse(datetime.timedelta(0))


class _NoResponse:
    """What a handler returns when Kafka sends nothing back (Produce with acks=0)."""


NO_RESPONSE: Any = _NoResponse()


def build(entity_type: type, **values: Any) -> Any:
    """An instance of a kio message type from ``values``, dropping the fields this version lacks."""
    names = {f.name for f in fields(entity_type)}
    return entity_type(**{k: v for k, v in values.items() if k in names})


def response_module(api_key: int, version: int) -> Any:
    """The kio module holding the response types of ``api_key`` at ``version``."""
    return __import__(load_response_schema(api_key, version).__module__, fromlist=["_"])


@dataclass(frozen=True)
class ApiRequest:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any
    peer: str = ""


@dataclass(frozen=True)
class BrokerContext:
    """The broker a listener belongs to: its id, replica manager, the listener's name, and the
    broker's leader-side components (None on a listener that only answers metadata), and its
    metrics (the agent's; a context built without them records into its own, unserved)."""

    replicas: ReplicaManager
    listener_name: str
    broker_id: int = -1
    appender: LeaderAppender | None = None
    producer_states: ProducerStates | None = None
    producer_ids: ProducerIdBlocks | None = None
    cluster_id: str | None = None
    groups: BrokerGroups | None = None
    transactions: TransactionCoordinator | None = None
    metrics: BrokerMetrics = field(default_factory=BrokerMetrics)


Partitions = frozenset[tuple[str, int]]


@dataclass(frozen=True)
class Deferred:
    """A request that was started and is answered later: ``finish`` blocks until the response
    entity is ready (a produce waiting for its commit). The listener reads and starts the
    connection's next requests meanwhile, except a request touching one of the ``ordered``
    partitions: that one is started only once this one is answered (its idempotent batches'
    sequences depend on the outcome of these)."""

    finish: Callable[[], Any]
    ordered: Partitions = frozenset()


def led_partition(
    broker: BrokerContext, topic: str, partition: int, max_age_ms: int = METADATA_MAX_AGE_MS
) -> PartitionState:
    """The state of ``topic``-``partition`` when this broker leads it; else
    ``UnknownPartitionError`` / ``TopicNotFoundError`` / ``NotLeaderError`` (Kafka's
    UNKNOWN_TOPIC_OR_PARTITION / NOT_LEADER_OR_FOLLOWER: the client refreshes its metadata)."""
    replicas = broker.replicas
    replicas.check_partition(topic, partition, max_age_ms=max_age_ms)
    state = replicas.states(topic, [partition])[partition]
    if state.leader != broker.broker_id:
        raise NotLeaderError(
            f"broker {broker.broker_id} does not lead {topic}-{partition} (leader {state.leader}, "
            f"epoch {state.leader_epoch}); refresh the metadata"
        )
    return state


@dataclass(frozen=True)
class Api:
    """One served API: its key, the version range ApiVersions advertises, the handler.

    ``start`` (optional) splits the handler: it does the request's in-order part (checks,
    queueing) and returns a :class:`Deferred` for the part that waits, so the listener can
    pipeline a connection's requests (``handle`` must equal ``start(...).finish()``)."""

    key: int
    min_version: int
    max_version: int
    handle: Callable[[ApiRequest, BrokerContext], Any]
    start: Callable[[ApiRequest, BrokerContext], Deferred] | None = None
    # The partitions a request touches, known before it starts (see Deferred.ordered).
    partitions: Callable[[ApiRequest], Partitions] | None = None
