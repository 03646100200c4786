"""The light producer: Kafka's producer API for applications, with no Spark.

``send`` validates and queues a record and returns a future. One sender thread drains the
queues: per topic, everything ready (``batch.size`` reached, ``linger.ms`` elapsed, or a
flush) becomes one produce request = one Delta commit under the partitions' write leases
(:mod:`sparklog.log.append`). With ``enable.idempotence`` every request carries the
producer id and a per-topic sequence, so a retried request is stored once.

``acks``: ``0`` completes futures at once (offset -1) and commits in the background;
``1`` completes after the commit; ``all`` also fsyncs data and commit files first.
Records of one partition keep send order. Thread-safe.

Metadata, as Kafka's producer keeps it: a topic's partition count and ``max.message.bytes``
are cached and re-read once older than ``metadata.max.age.ms``, and at once after an error
that says they may be stale (unknown partition, leader moved, record too large, storage).
So new partitions get records (keyless round-robin, keyed by murmur2 over the new count)
within ``metadata.max.age.ms``. The cached limit only fails a record early; what binds is
the produce request, which reads the topic's configs when served
(:mod:`sparklog.runtime.produce_request`): a record over the current limit fails alone.
"""

from __future__ import annotations

import functools
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from sparklog import clock
from sparklog.config import PRODUCER_CONFIGS, parse_acks, with_defaults
from sparklog.errors import (
    FencedError,
    LeaderNotAvailableError,
    ProducerClosedError,
    RecordTooLargeError,
    RetriableError,
    SchemaMismatchError,
    StorageError,
    TopicNotFoundError,
    UnknownPartitionError,
)
from sparklog.log.append import AppendResult
from sparklog.metadata.lease import WriterLease
from sparklog.model.batches import normalise_input
from sparklog.model.records import RecordMetadata, partition_for_key, records_to_arrow, to_bytes
from sparklog.model.sizes import record_size
from sparklog.retries import retry_until
from sparklog.runtime.produce_request import RequestSettings, produce_request
from sparklog.runtime.replica_manager import ReplicaManager

__all__ = ["BatchMetadata", "Producer"]

HeadersArg = Iterable[tuple[str, bytes | str | None]] | Mapping[str, bytes | str | None] | None
_FENCED_RETRIES = 5
_METADATA_RETRY_S = 0.1  # Kafka's retry.backoff.ms, between tries of a failed metadata read
# Errors after which the cached metadata may be what is wrong (Kafka's producer requests a
# metadata update on UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER and the like).
_STALE_METADATA = (
    StorageError,
    TopicNotFoundError,
    UnknownPartitionError,
    FencedError,
    LeaderNotAvailableError,
    RecordTooLargeError,
)


def _normalise_headers(headers: HeadersArg) -> list[tuple[str, bytes | None]] | None:
    if headers is None:
        return None
    items = headers.items() if isinstance(headers, Mapping) else headers
    result = []
    for item in items:
        try:
            hkey, hvalue = item
        except (TypeError, ValueError):
            raise SchemaMismatchError(f"A header must be a (key, value) pair, got {item!r}") from None
        if not isinstance(hkey, str):
            raise SchemaMismatchError(f"Header keys must be str, got {type(hkey).__name__}")
        result.append((hkey, to_bytes(hvalue, "header value")))
    return result


@dataclass(frozen=True)
class BatchMetadata:
    """Where a ``send_arrow`` batch landed: partition -> (first offset, record count)."""

    topic: str
    offsets: dict[int, tuple[int, int]]


@dataclass
class _Pending:
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] | None
    timestamp_ms: int
    future: Future[RecordMetadata]
    size: int


@dataclass
class _TopicQueue:
    partitions: dict[int, list[_Pending]] = field(default_factory=dict)
    size: int = 0
    first_ms: float = 0.0


@dataclass(frozen=True)
class _TopicInfo:
    partitions: int
    max_message_bytes: int
    fetched_at: float  # time.monotonic() of the read


class Producer:
    """Create with :meth:`sparklog.Cluster.producer`."""

    def __init__(self, replicas: ReplicaManager, configs: Mapping[str, Any]) -> None:
        self._replicas = replicas
        self.config = with_defaults(configs, PRODUCER_CONFIGS)
        self.acks = parse_acks(self.config["acks"])
        self.producer_id = uuid.uuid4().hex
        self._sequences: dict[str, int] = {}
        self._queues: dict[str, _TopicQueue] = {}
        self._inflight: set[Future[Any]] = set()
        self._topics: dict[str, _TopicInfo] = {}
        self._round_robin: dict[str, int] = {}
        self._leases: dict[tuple[str, int], WriterLease] = {}
        self._cv = threading.Condition()
        self._produce_lock = threading.Lock()
        self._flushing = 0
        self._closed = False
        self._sender = threading.Thread(target=self._run, name=f"sparklog-producer-{self.producer_id[:8]}", daemon=True)
        self._sender.start()

    # -- public API ----------------------------------------------------------------------
    def send(
        self,
        topic: str,
        value: bytes | str | None,
        key: bytes | str | None = None,
        partition: int | None = None,
        headers: HeadersArg = None,
        timestamp_ms: int | None = None,
    ) -> Future[RecordMetadata]:
        """Queue one record; the future's result is its :class:`RecordMetadata`."""
        if self._closed:
            raise ProducerClosedError("Cannot send after the producer is closed")
        info = self._topic_info(topic)
        key_bytes, value_bytes = to_bytes(key, "key"), to_bytes(value, "value")
        header_list = _normalise_headers(headers)
        size = record_size(key_bytes, value_bytes, header_list)
        if size > self._record_limit(info):
            info = self._topic_info(topic, refresh=True)  # the topic's limit may have been raised
        limit = self._record_limit(info)
        if size > limit:
            raise RecordTooLargeError(
                f"The record to {topic} is {size} bytes, larger than the limit {limit} "
                f"(max.request.size={self.config['max.request.size']}, topic max.message.bytes="
                f"{info.max_message_bytes}); nothing was sent"
            )
        target = self._choose_partition(topic, info, key_bytes, partition)
        ts = clock.now_ms() if timestamp_ms is None else int(timestamp_ms)
        future: Future[RecordMetadata] = Future()
        pending = _Pending(key_bytes, value_bytes, header_list, ts, future, size)
        with self._cv:
            if self._closed:
                raise ProducerClosedError("Cannot send after the producer is closed")
            queue = self._queues.setdefault(topic, _TopicQueue())
            if not queue.partitions:
                queue.first_ms = time.monotonic() * 1000
            queue.partitions.setdefault(target, []).append(pending)
            queue.size += size
            # Tracked for every acks setting: flush() must wait until the record is committed.
            self._inflight.add(future)
            self._cv.notify_all()
        if self.acks == "0":
            # The caller gets no ack: a future completed at once, apart from the tracked one.
            unacked: Future[RecordMetadata] = Future()
            unacked.set_result(RecordMetadata(topic, target, -1, ts))
            return unacked
        return future

    def send_arrow(self, topic: str, records: pa.Table) -> BatchMetadata:
        """Produce a whole Arrow table as one request (columns as Spark's Kafka sink).

        ``value`` is required; ``key``, ``partition``, ``headers`` and ``timestamp``
        optional. Earlier ``send`` calls are flushed first, so order is kept. Blocks
        until the batch is committed (acknowledged per ``acks``).
        """
        info = self._topic_info(topic)
        try:
            table, partitions = normalise_input(records, info.partitions, topic, self._record_limit(info))
        except (RecordTooLargeError, UnknownPartitionError):
            # Maybe only our copy is stale (limit raised, partitions added): decide on a fresh one.
            info = self._topic_info(topic, refresh=True)
            table, partitions = normalise_input(records, info.partitions, topic, self._record_limit(info))
        self.flush()
        if table.num_rows == 0:
            return BatchMetadata(topic, {})  # nothing to produce (no empty commit, no sequence used)
        batches: dict[int, pa.Table] = {}
        if partitions is None:
            start = self._round_robin.get(topic, 0)
            self._round_robin[topic] = start + 1
            batches[start % info.partitions] = table
        else:
            for p in sorted(set(partitions.tolist())):
                batches[int(p)] = table.filter(pa.array(partitions == p))  # stable: keeps send order
        result = self._produce(topic, batches)
        return BatchMetadata(topic, {p: (result.base_offsets.get(p, -1), t.num_rows) for p, t in batches.items()})

    def flush(self, timeout_s: float | None = None) -> None:
        """Send everything queued and wait until it is acknowledged."""
        with self._cv:
            waiting = list(self._inflight)
            self._flushing += 1
            self._cv.notify_all()
        try:
            deadline = None if timeout_s is None else time.monotonic() + timeout_s
            for future in waiting:
                remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
                try:
                    future.exception(timeout=remaining)
                except TimeoutError:
                    raise
        finally:
            with self._cv:
                self._flushing -= 1

    def close(self, timeout_s: float | None = None) -> None:
        """Flush, stop the sender and give up the write leases."""
        if self._closed:
            return
        try:
            self.flush(timeout_s)
        finally:
            with self._cv:
                self._closed = True
                self._cv.notify_all()
            self._sender.join(timeout_s)
            for lease in self._leases.values():
                try:
                    lease.release()
                except Exception:  # noqa: BLE001 - best effort: an unreleased lease just expires
                    pass

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals -----------------------------------------------------------------------
    def _topic_info(self, topic: str, refresh: bool = False) -> _TopicInfo:
        """The topic's partition count and limit, re-read when ``refresh`` or older than
        ``metadata.max.age.ms``."""
        info = self._topics.get(topic)
        max_age_s = int(self.config["metadata.max.age.ms"]) / 1000
        if info is not None and not refresh and time.monotonic() - info.fetched_at < max_age_s:
            return info

        def read(_attempt: int = 0) -> _TopicInfo:
            fetched_at = time.monotonic()
            configs = self._replicas.topic_config(topic)
            partitions = len(self._replicas.partitions_of(topic))
            return _TopicInfo(partitions, int(configs["max.message.bytes"]), fetched_at)

        # As Kafka's producer: a failed refresh keeps the metadata it had; without any, send
        # blocks for it up to max.block.ms.
        if info is not None and not refresh:
            try:
                info = read()
            except RetriableError:
                return info
        else:
            info = retry_until(time.monotonic() + int(self.config["max.block.ms"]) / 1000, _METADATA_RETRY_S, read)
        self._topics[topic] = info
        return info

    def _record_limit(self, info: _TopicInfo) -> int:
        return min(int(self.config["max.request.size"]), info.max_message_bytes)

    def _choose_partition(self, topic: str, info: _TopicInfo, key: bytes | None, partition: int | None) -> int:
        if partition is not None:
            if isinstance(partition, bool) or not isinstance(partition, int) or not 0 <= partition < info.partitions:
                # The topic may have grown since we cached it.
                info = self._topic_info(topic, refresh=True)
                if (
                    isinstance(partition, bool)
                    or not isinstance(partition, int)
                    or not 0 <= partition < info.partitions
                ):
                    raise UnknownPartitionError(
                        f"Partition {partition!r} of topic {topic} does not exist (partitions 0..{info.partitions - 1})"
                    )
            return partition
        if key is not None:
            return partition_for_key(key, info.partitions)
        index = self._round_robin.get(topic, 0)
        self._round_robin[topic] = index + 1
        return index % info.partitions

    def _ready_topics(self) -> list[str]:
        now = time.monotonic() * 1000
        linger = int(self.config["linger.ms"])
        batch_size = int(self.config["batch.size"])
        return [
            topic
            for topic, queue in self._queues.items()
            if queue.partitions
            and (self._flushing or self._closed or queue.size >= batch_size or now - queue.first_ms >= linger)
        ]

    def _run(self) -> None:
        while True:
            with self._cv:
                while True:
                    ready = self._ready_topics()
                    if ready:
                        break
                    if self._closed and not any(q.partitions for q in self._queues.values()):
                        return
                    waits = [
                        int(self.config["linger.ms"]) - (time.monotonic() * 1000 - q.first_ms)
                        for q in self._queues.values()
                        if q.partitions
                    ]
                    self._cv.wait(max(0.0005, min(waits) / 1000.0) if waits else None)
                drained = {topic: self._take_request(topic) for topic in ready}
            for topic, queue in drained.items():
                self._send_queue(topic, queue)

    def _take_request(self, topic: str) -> _TopicQueue:
        """Up to ``max.request.size`` bytes of the topic's queue (at least one record), in
        send order per partition; the rest stays queued for the next request (as in Kafka)."""
        queue = self._queues.pop(topic)
        limit = int(self.config["max.request.size"])
        if queue.size <= limit:
            return queue
        taken, rest = _TopicQueue(first_ms=queue.first_ms), _TopicQueue(first_ms=queue.first_ms)
        for partition, records in queue.partitions.items():
            for i, record in enumerate(records):
                if taken.size and taken.size + record.size > limit:
                    rest.partitions[partition] = records[i:]
                    rest.size += sum(r.size for r in records[i:])
                    break
                taken.partitions.setdefault(partition, []).append(record)
                taken.size += record.size
        if rest.partitions:
            self._queues[topic] = rest
        return taken

    def _send_queue(self, topic: str, queue: _TopicQueue) -> None:
        futures = [rec.future for recs in queue.partitions.values() for rec in recs]
        try:
            partitions = queue.partitions
            while True:
                try:
                    result = self._produce(topic, {p: _to_arrow(recs) for p, recs in partitions.items()})
                    break
                except RecordTooLargeError as exc:
                    if not exc.records:
                        raise
                    partitions = _fail_records(partitions, exc)
                    if not partitions:
                        return
            # With acks=0 these are the internal futures flush() waits on; the caller's completed at send.
            for p, recs in partitions.items():
                base = result.base_offsets.get(p, -1)
                for i, rec in enumerate(recs):
                    # -1: a CreateTime topic (the request read the topic's current type).
                    ts = result.log_append_time_ms if result.log_append_time_ms >= 0 else rec.timestamp_ms
                    rec.future.set_result(RecordMetadata(topic, p, base + i if base >= 0 else -1, ts))
        except BaseException as exc:  # noqa: BLE001 - delivered through the futures
            for future in futures:
                if not future.done():
                    future.set_exception(exc)
        finally:
            with self._cv:
                self._inflight.difference_update(futures)

    def _lease(self, topic: str, partition: int) -> WriterLease:
        lease = self._leases.get((topic, partition))
        if lease is None:
            lease = WriterLease(
                self._replicas.zk, topic, partition, f"producer-{self.producer_id}", int(self.config["writer.lease.ms"])
            )
            self._leases[(topic, partition)] = lease
        return lease

    def _produce(self, topic: str, batches: Mapping[int, pa.Table]) -> AppendResult:
        """One produce request (:mod:`sparklog.runtime.produce_request`): leaders, leases, appends, acks."""
        with self._produce_lock:
            sequence = self._sequences.get(topic, 0) + 1
            self._sequences[topic] = sequence
            idempotent = bool(self.config["enable.idempotence"])
            request = RequestSettings(
                acks=self.acks,
                max_block_ms=int(self.config["max.block.ms"]),
                delivery_timeout_ms=int(self.config["delivery.timeout.ms"]),
                producer_id=self.producer_id if idempotent else None,
                sequence=sequence if idempotent else None,
                compression_type=str(self.config["compression.type"]),
            )
            try:
                return produce_request(self._replicas, topic, batches, request, functools.partial(self._lease, topic))
            except _STALE_METADATA as exc:
                self._topics.pop(topic, None)  # re-read on the next send
                if isinstance(exc, (StorageError, TopicNotFoundError)):
                    # Maybe deleted (and re-created): re-open the tables next time too.
                    self._replicas.forget_tables(topic)
                raise


def _fail_records(partitions: dict[int, list[_Pending]], exc: RecordTooLargeError) -> dict[int, list[_Pending]]:
    """Fail the records ``exc`` names; the others, in order, for the next request."""
    rest: dict[int, list[_Pending]] = {}
    for p, recs in partitions.items():
        rejected = set(exc.records.get(p, ()))
        for i, rec in enumerate(recs):
            if i in rejected:
                rec.future.set_exception(exc)
            else:
                rest.setdefault(p, []).append(rec)
    return rest


def _to_arrow(records: list[_Pending]) -> pa.Table:
    return records_to_arrow(
        [r.key for r in records],
        [r.value for r in records],
        [r.timestamp_ms for r in records],
        [r.headers for r in records],
    )
