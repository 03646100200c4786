"""The Fetch API (key 1, v4..v12): consumers read record batches from the partition's leader.

Guarantees (invariants 5 and 8 on the wire):

* only the leader answers (NOT_LEADER_OR_FOLLOWER elsewhere), from its own table;
* never a record at or above the high watermark (minimum log end over the ISR) nor below
  log-start; a fetch offset outside ``[log_start, high_watermark]`` gets OFFSET_OUT_OF_RANGE
  with both in the response, so the client resets as ``auto.offset.reset`` says;
* whole record batches, the first one even when it is larger than ``partition_max_bytes``
  or ``max_bytes`` (KIP-74: a consumer always makes progress), the rest within the limits;
* long polling: with fewer than ``min_bytes`` available the request waits, up to
  ``max_wait_ms``, without holding a thread (:class:`DelayedFetch`), woken by every append
  to its partitions — this broker's, and every other writer's (Spark, the light producer)
  through the partitions' write leases (:mod:`sparklog.metadata.foreign_writes`); only
  while followers copy what the leader has past the high watermark does it re-read on its
  own, every ``_REPLICATION_POLL_S`` (followers write their own tables and announce nothing);
* ``read_committed`` (isolation level 1) never gets a record at or above the last stable
  offset (the first offset of the oldest open transaction) nor an aborted record: aborted
  runs are filtered here, on the broker, so ``aborted_transactions`` is always empty;
  ``read_uncommitted`` gets what Kafka's log holds below the high watermark, aborted and
  open transactions' records included. Both get the transactions' control batches (the
  commit/abort markers, one offset each), which clients skip as Kafka's.

Where the data comes from: a fetch inside the leader's in-memory tail
(:mod:`sparklog.broker.log_tail`: the batches it appended last, as the producers sent them)
is answered from memory, with the high watermark probed from the replicas' newest commits,
no snapshot refreshed and no segment read; anything else is read from the segments and
encoded (:func:`~sparklog.broker.kafka.records.encode_batches`, uncompressed, partition
leader epoch -1: a segment does not keep its batches' epochs).
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
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
from sparklog.broker.kafka.records import BATCH_OVERHEAD_BYTES, encode_batches
from sparklog.errors import OffsetOutOfRangeError
from sparklog.log.reader import read_ranges
from sparklog.metadata.zkdata import PartitionState
from sparklog.model.sizes import record_sizes

__all__ = ["APIS"]

FETCH_KEY = 1
_MAX_RECORDS_PER_READ = 50_000  # bounds one partition's read from the segments
_REPLICATION_POLL_S = 0.01  # how often a long poll re-reads while the high watermark lags the log end


@dataclass
class _PartitionRead:
    error: ErrorCode
    high_watermark: int = -1
    log_start: int = -1
    records: bytes = b""
    last_stable_offset: int = -1
    # The leader has records past the high watermark (or may have): followers are copying them.
    replicating: bool = False


def fetch(request: ApiRequest, broker: BrokerContext) -> Any:
    return wait_for_response(start_fetch(request, broker))


def start_fetch(request: ApiRequest, broker: BrokerContext) -> DelayedFetch:
    return DelayedFetch(request, broker)


class DelayedFetch:
    """A Fetch until it has ``min_bytes`` (or an error) or reaches ``max_wait``: woken by
    the appends to its partitions (:class:`~sparklog.broker.append_watchers.AppendWatchers`),
    re-read every ``recheck_s`` while one of them waits for followers (else None)."""

    pipelined = False

    def __init__(self, request: ApiRequest, broker: BrokerContext) -> None:
        body = request.body
        self.request = request
        self.broker = broker
        self.deadline_s = time.monotonic() + max(0.0, body.max_wait.total_seconds())
        self.recheck_s: float | None = None
        self._min_bytes = max(1, int(body.min_bytes))
        self._max_bytes = int(getattr(body, "max_bytes", 2**31 - 1))
        self._read_committed = int(getattr(body, "isolation_level", 0)) == 1
        self._keys = [(str(t.topic), int(p.partition)) for t in body.topics for p in t.partitions]
        self._seen: tuple[int, ...] = ()
        self._cancel: Callable[[], None] | None = None

    def try_complete(self) -> Any | None:
        reads, total = self._read()
        if total >= self._min_bytes or any(r.error != ErrorCode.none for r in reads.values()):
            return self._respond(reads)
        self.recheck_s = _REPLICATION_POLL_S if any(r.replicating for r in reads.values()) else None
        return None

    def on_progress(self, wake: Callable[[], None]) -> None:
        appender = self.broker.appender
        if appender is not None:
            self._stop_watching()
            self._cancel = appender.watchers.watch(self._keys, self._seen, wake)

    def expire(self) -> Any:
        return self._respond(self._read()[0])

    def _read(self) -> tuple[dict[tuple[str, int], _PartitionRead], int]:
        appender = self.broker.appender
        if appender is not None:
            self._seen = appender.watchers.versions(self._keys)
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
                sent_bytes += len(read.records)
                partitions.append(
                    build(
                        module.PartitionData,
                        partition_index=wanted.partition,
                        error_code=read.error,
                        high_watermark=read.high_watermark,
                        last_stable_offset=read.last_stable_offset,
                        log_start_offset=read.log_start,
                        aborted_transactions=() if self._read_committed else None,
                        preferred_read_replica=-1,
                        records=read.records,
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
    broker: BrokerContext, topics: Any, max_bytes: int, read_committed: bool
) -> tuple[dict[tuple[str, int], _PartitionRead], int]:
    reads: dict[tuple[str, int], _PartitionRead] = {}
    total = 0
    for topic in topics:
        for wanted in topic.partitions:
            budget = max(0, max_bytes - total)
            read = _read_partition(
                broker,
                topic.topic,
                int(wanted.partition),
                int(wanted.fetch_offset),
                int(wanted.partition_max_bytes),
                budget,
                first=total == 0,
                read_committed=read_committed,
            )
            reads[(topic.topic, int(wanted.partition))] = read
            total += len(read.records)
    return reads, total


def _read_partition(
    broker: BrokerContext,
    topic: str,
    partition: int,
    offset: int,
    partition_max_bytes: int,
    budget: int,
    first: bool,
    read_committed: bool,
) -> _PartitionRead:
    replicas = broker.replicas
    try:
        state = led_partition(broker, topic, partition)
        limit = partition_max_bytes if first else min(partition_max_bytes, budget)
        if broker.appender is not None:
            from_tail = _read_tail(broker, topic, partition, state, offset, limit, read_committed)
            if from_tail is not None:
                return from_tail
        at = replicas.fetch_positions(topic, [partition])[partition]
        high_watermark = at.high_watermark
        log_start = min(at.table.log_start(at.snapshot, partition), high_watermark)
        if broker.appender is not None:
            broker.appender.tails.note_log_start(topic, partition, log_start)
        stable = at.last_stable_offset
        if offset < log_start or offset > high_watermark:
            raise OffsetOutOfRangeError(
                f"offset {offset} of {topic}-{partition} is outside {log_start}..{high_watermark}"
            )
        stop = stable if read_committed else high_watermark
        if offset >= stop or (budget <= 0 and not first):
            return _PartitionRead(
                ErrorCode.none,
                high_watermark,
                log_start,
                last_stable_offset=stable,
                replicating=at.log_end > high_watermark,
            )
        start = offset
        while True:  # a window of aborted records only is stepped over (never answered empty)
            end = min(stop, start + _MAX_RECORDS_PER_READ)
            rows = read_ranges(
                at.table,
                at.snapshot,
                {partition: (start, end)},
                include_headers=True,
                read_committed=read_committed,
                keep_control=True,
            )
            if rows.num_rows or end >= stop:
                break
            start = end
        rows = _within(rows, limit)
        return _PartitionRead(ErrorCode.none, high_watermark, log_start, encode_batches(rows, leader_epoch=-1), stable)
    except Exception as exc:  # noqa: BLE001 - answered as this partition's error code
        return _PartitionRead(error_code(exc))


def _read_tail(
    broker: BrokerContext,
    topic: str,
    partition: int,
    state: PartitionState,
    offset: int,
    limit: int,
    read_committed: bool,
) -> _PartitionRead | None:
    """The answer from memory, or None when the tail cannot give it (then the table does)."""
    appender = broker.appender
    assert appender is not None
    tails = appender.tails
    log_start = tails.log_start_hint(topic, partition)
    if log_start is None:
        return None
    high_watermark = broker.replicas.current_high_watermark(topic, partition, state)
    if not log_start <= offset <= high_watermark:
        return None  # the slow path gives the exact error with fresh offsets
    table = broker.replicas.replica_table(topic, broker.broker_id)
    stable = appender.txns.last_stable_offset(table, partition, state.leader_epoch, high_watermark)
    stop = stable if read_committed else high_watermark
    if offset >= stop:
        log_end = tails.log_end(topic, partition, state.leader_epoch)
        if log_end < 0:
            return None  # whether followers are still copying: the table knows
        return _PartitionRead(
            ErrorCode.none, high_watermark, log_start, last_stable_offset=stable, replicating=log_end > high_watermark
        )
    batches = tails.read(topic, partition, state.leader_epoch, offset, stop, limit)
    if batches is None:
        return None
    if read_committed:
        aborted = appender.txns.aborted(table, partition, state.leader_epoch)
        if aborted:
            batches = [b for b in batches if not _inside(aborted, b.base_offset)]
            if not batches:
                return None  # aborted batches only: the table's path steps over them
    return _PartitionRead(ErrorCode.none, high_watermark, log_start, b"".join(b.data for b in batches), stable)


def _inside(runs: list[tuple[int, int]], offset: int) -> bool:
    """Whether ``offset`` lies in one of the sorted, disjoint ``runs``."""
    index = bisect.bisect_right(runs, (offset, 2**63)) - 1
    return index >= 0 and runs[index][0] <= offset < runs[index][1]


def _within(rows: pa.Table, limit_bytes: int) -> pa.Table:
    """The leading rows that fit ``limit_bytes`` (at least one: a consumer must progress)."""
    if rows.num_rows == 0:
        return rows
    sizes = record_sizes(*(rows.column(c).combine_chunks() for c in ("key", "value", "headers")))
    cumulative = sizes.cumsum() + BATCH_OVERHEAD_BYTES
    fitting = int((cumulative <= limit_bytes).sum())
    return rows.slice(0, max(1, fitting))


APIS = (Api(FETCH_KEY, 4, 12, fetch, start_fetch),)
