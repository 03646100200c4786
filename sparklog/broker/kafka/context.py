"""What every request handler receives: the parsed request and the broker it arrived at.

Handlers are plain functions ``(ApiRequest, BrokerContext) -> response entity``; each API
module declares the versions it serves as :class:`Api` rows, and ``apis`` dispatches on
them. Responses are kio entities built with :func:`build`, which drops the fields the
negotiated version lacks, so one handler answers every version of its API.
"""

from __future__ import annotations

import datetime
import functools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from kio.index import load_response_schema
from kio.static.primitive import i32Timedelta

from sparklog.broker.metrics import BrokerMetrics
from sparklog.errors import NotLeaderError
from sparklog.runtime.replica_manager import METADATA_MAX_AGE_MS

if TYPE_CHECKING:
    from sparklog.broker.groups.coordinator import BrokerGroups
    from sparklog.broker.partition import LeaderPartition, LeaderPartitions
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
    "DelayedResponse",
    "EncodedResponse",
    "build",
    "led_partition",
    "response_module",
    "wait_for_response",
]

NO_THROTTLE = i32Timedelta.parse(datetime.timedelta(0))


class _NoResponse:
    """What a handler returns when Kafka sends nothing back (Produce with acks=0)."""


NO_RESPONSE: Any = _NoResponse()


@dataclass(frozen=True)
class EncodedResponse:
    """A response a handler wrote itself (the frame payload: header and body), sent as is."""

    payload: bytes


def build(entity_type: type, **values: Any) -> Any:
    """An instance of a kio message type from ``values``, dropping the fields this version lacks."""
    names = _field_names(entity_type)
    return entity_type(**{k: v for k, v in values.items() if k in names})


@functools.cache
def _field_names(entity_type: type) -> frozenset[str]:
    return frozenset(f.name for f in fields(entity_type))


@functools.cache
def response_module(api_key: int, version: int) -> Any:
    """The kio module holding the response types of ``api_key`` at ``version``."""
    return __import__(load_response_schema(api_key, version).__module__, fromlist=["_"])


BodyT = TypeVar("BodyT", covariant=True)


@dataclass(frozen=True)
class ApiRequest(Generic[BodyT]):
    """A parsed request; ``BodyT`` is what its handler reads of the body (a protocol over
    the kio request classes of every version it serves; ``Any`` where nothing is declared)."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: BodyT
    peer: str = ""


@dataclass(frozen=True)
class BrokerContext:
    """The broker a listener belongs to: its id, replica manager, the listener's name, and the
    broker's leader-side components (None on a listener that only answers metadata), and its
    metrics (the agent's; a context built without them records into its own, unserved)."""

    replicas: ReplicaManager
    listener_name: str
    broker_id: int = -1
    partitions: LeaderPartitions | None = None  # the partitions it leads
    producer_ids: ProducerIdBlocks | None = None
    cluster_id: str | None = None
    groups: BrokerGroups | None = None
    transactions: TransactionCoordinator | None = None
    metrics: BrokerMetrics = field(default_factory=BrokerMetrics)


@dataclass(frozen=True)
class Deferred:
    """A request whose answer waits on something slow that has no wake-up of its own (a
    JoinGroup waiting for the group's other members): ``finish`` blocks until the response
    entity is ready. The request channel runs it on a thread of its own, so a long wait
    does not hold a request handler."""

    finish: Callable[[], Any]


class DelayedResponse(Protocol):
    """A request answered later without holding a thread meanwhile (Kafka's delayed
    operations: a produce waiting for its commit, a fetch waiting for data).

    The request channel calls :meth:`try_complete` (on a handler thread) until it returns a
    response entity; between tries it waits for the wake-up :meth:`on_progress` arranges,
    for ``recheck_s`` (when not None), or for ``deadline_s`` (monotonic), when it calls
    :meth:`expire` instead, once. None of these block. ``pipelined``: the connection's
    next request may be started meanwhile (requests that can share a commit round).
    ``completes_on_wake``: :meth:`try_complete` is cheap (no reads of storage), so the
    thread that wakes it may run it, instead of handing it to a handler thread."""

    deadline_s: float
    recheck_s: float | None
    pipelined: bool
    completes_on_wake: bool

    def try_complete(self) -> Any | None: ...

    def on_progress(self, wake: Callable[[], None]) -> None:
        """Call ``wake`` (once, from any thread, possibly at once) when :meth:`try_complete`
        may succeed where it last failed."""

    def expire(self) -> Any: ...


def wait_for_response(delayed: DelayedResponse) -> Any:
    """``delayed``'s response, blocking this thread (direct callers of a handler)."""
    while True:
        response = delayed.try_complete()
        if response is not None:
            return response
        remaining = delayed.deadline_s - time.monotonic()
        if remaining <= 0:
            return delayed.expire()
        woken = threading.Event()
        delayed.on_progress(woken.set)
        woken.wait(remaining if delayed.recheck_s is None else min(remaining, delayed.recheck_s))


def led_partition(broker: BrokerContext, topic: str, partition: int) -> LeaderPartition:
    """``topic``-``partition`` when this broker leads it; NOT_LEADER_OR_FOLLOWER also on a
    listener that serves no partitions."""
    if broker.partitions is None:
        raise NotLeaderError(f"this listener serves no partitions ({topic}-{partition})")
    return broker.partitions.get(topic, partition)


@dataclass(frozen=True)
class Api:
    """One served API: its key, the version range ApiVersions advertises, the handler.

    ``start`` (optional) splits the handler: it does the request's immediate part (checks,
    queueing) and returns what waits — a :class:`DelayedResponse` (woken, holds no thread)
    or a :class:`Deferred` (blocks a thread of its own); ``handle`` must answer as
    ``start`` followed by that wait."""

    key: int
    min_version: int
    max_version: int
    handle: Callable[[ApiRequest, BrokerContext], Any]
    start: Callable[[ApiRequest, BrokerContext], DelayedResponse | Deferred] | None = None
