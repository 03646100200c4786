"""The Fetch API (key 1, v4..v12): consumers read record batches from the partition's leader.

The handler decodes, asks each partition (:class:`~sparklog.broker.partition.LeaderPartition`,
which keeps invariants 5 and 8: only the leader answers, nothing at or above the high
watermark or the last stable offset for ``read_committed``, nothing below log-start, whole
batches with the first one even over the limits) and encodes; a partition's failure is its
error code (OFFSET_OUT_OF_RANGE with both offsets, so the client resets as
``auto.offset.reset`` says; NOT_LEADER_OR_FOLLOWER ...), the others are answered.

Long polling: with fewer than ``min_bytes`` available the request waits, up to
``max_wait_ms``, without holding a thread (:class:`DelayedFetch`), woken by every append to
its partitions — this broker's, and every other writer's (Spark, the light producer) through
the partitions' write leases (:mod:`sparklog.metadata.foreign_writes`); only while followers
copy what the leader has past the high watermark does it re-read on its own, every
``_REPLICATION_POLL_S`` (followers write their own tables and announce nothing).

``read_committed`` (isolation level 1): aborted runs are filtered on the broker, so
``aborted_transactions`` is always empty; both isolation levels get the transactions'
control batches (the commit/abort markers, one offset each), which clients skip as Kafka's.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from sparklog.broker.kafka.context import (
    NO_THROTTLE,
    Api,
    ApiRequest,
    BrokerContext,
    build,
    led_partition,
    response_module,
    wait_for_response,
)
from sparklog.broker.kafka.error_codes import error_code
from sparklog.broker.partition import FetchedData

__all__ = ["APIS"]

FETCH_KEY = 1
_REPLICATION_POLL_S = 0.01  # how often a long poll re-reads while the high watermark lags the log end


_NOTHING = FetchedData(high_watermark=-1, log_start=-1)


@dataclass(frozen=True)
class _PartitionRead:
    error: ErrorCode
    data: FetchedData = _NOTHING


class FetchPartition(Protocol):
    @property
    def partition(self) -> int: ...
    @property
    def fetch_offset(self) -> int: ...
    @property
    def partition_max_bytes(self) -> int: ...


class FetchTopic(Protocol):
    @property
    def topic(self) -> str: ...
    @property
    def partitions(self) -> tuple[FetchPartition, ...]: ...


class FetchBody(Protocol):
    """What the handler reads of a Fetch request (kio's v4..v12 request classes)."""

    @property
    def max_wait(self) -> datetime.timedelta: ...
    @property
    def min_bytes(self) -> int: ...
    @property
    def max_bytes(self) -> int: ...
    @property
    def isolation_level(self) -> int: ...
    @property
    def topics(self) -> tuple[FetchTopic, ...]: ...


def fetch(request: ApiRequest[FetchBody], broker: BrokerContext) -> Any:
    return wait_for_response(start_fetch(request, broker))


def start_fetch(request: ApiRequest[FetchBody], broker: BrokerContext) -> DelayedFetch:
    return DelayedFetch(request, broker)


class DelayedFetch:
    """A Fetch until it has ``min_bytes`` (or an error) or reaches ``max_wait``: woken by
    the appends to its partitions (:class:`~sparklog.broker.append_watchers.AppendWatchers`),
    re-read every ``recheck_s`` while one of them waits for followers (else None)."""

    pipelined = False

    def __init__(self, request: ApiRequest[FetchBody], broker: BrokerContext) -> None:
        body = request.body
        self.request = request
        self.broker = broker
        self.deadline_s = time.monotonic() + max(0.0, body.max_wait.total_seconds())
        self.recheck_s: float | None = None
        self.completes_on_wake = False  # a try reads the log
        self._min_bytes = max(1, int(body.min_bytes))
        self._max_bytes = int(body.max_bytes)
        self._read_committed = int(body.isolation_level) == 1
        self._keys = [(str(t.topic), int(p.partition)) for t in body.topics for p in t.partitions]
        self._seen: tuple[int, ...] = ()
        self._cancel: Callable[[], None] | None = None

    def try_complete(self) -> Any | None:
        reads, total = self._read()
        if total >= self._min_bytes or any(r.error != ErrorCode.none for r in reads.values()):
            return self._respond(reads)
        self.recheck_s = _REPLICATION_POLL_S if any(r.data.replicating for r in reads.values()) else None
        return None

    def on_progress(self, wake: Callable[[], None]) -> None:
        partitions = self.broker.partitions
        if partitions is not None:
            self._stop_watching()
            self._cancel = partitions.watchers.watch(self._keys, self._seen, wake)

    def expire(self) -> Any:
        return self._respond(self._read()[0])

    def _read(self) -> tuple[dict[tuple[str, int], _PartitionRead], int]:
        partitions = self.broker.partitions
        if partitions is not None:
            self._seen = partitions.watchers.versions(self._keys)
        return _read_all(self.broker, self.request.body.topics, self._max_bytes, self._read_committed)

    def _stop_watching(self) -> None:
        if self._cancel is not None:
            self._cancel()
            self._cancel = None

    def _respond(self, reads: dict[tuple[str, int], _PartitionRead]) -> Any:
        self._stop_watching()
        request = self.request
        module = response_module(FETCH_KEY, request.api_version)
        topics = []
        for topic in request.body.topics:
            partitions = []
            sent_bytes = 0
            for wanted in topic.partitions:
                read = reads[(topic.topic, int(wanted.partition))]
                data = read.data
                sent_bytes += len(data.records)
                partitions.append(
                    build(
                        module.PartitionData,
                        partition_index=wanted.partition,
                        error_code=read.error,
                        high_watermark=data.high_watermark,
                        last_stable_offset=data.last_stable_offset,
                        log_start_offset=data.log_start,
                        aborted_transactions=() if self._read_committed else None,
                        preferred_read_replica=-1,
                        records=data.records,
                    )
                )
            topics.append(build(module.FetchableTopicResponse, topic=topic.topic, partitions=tuple(partitions)))
            if sent_bytes:
                self.broker.metrics.bytes_out(topic.topic, sent_bytes)  # Kafka's BytesOutPerSec
        return build(
            module.FetchResponse,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.none,
            session_id=0,
            responses=tuple(topics),
        )


def _read_all(
    broker: BrokerContext, topics: tuple[FetchTopic, ...], max_bytes: int, read_committed: bool
) -> tuple[dict[tuple[str, int], _PartitionRead], int]:
    reads: dict[tuple[str, int], _PartitionRead] = {}
    total = 0
    for topic in topics:
        for wanted in topic.partitions:
            partition = int(wanted.partition)
            limit = int(wanted.partition_max_bytes)
            if total:  # only the first partition's first batch may exceed the limits (KIP-74)
                limit = min(limit, max(0, max_bytes - total))
            try:
                data = led_partition(broker, topic.topic, partition).read(
                    int(wanted.fetch_offset), limit, first=total == 0, read_committed=read_committed
                )
                read = _PartitionRead(ErrorCode.none, data)
            except Exception as exc:  # noqa: BLE001 - answered as this partition's error code
                read = _PartitionRead(error_code(exc))
            reads[(topic.topic, partition)] = read
            total += len(read.data.records)
    return reads, total


APIS = (Api(FETCH_KEY, 4, 12, fetch, start_fetch),)
