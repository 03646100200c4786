"""One produce request of the light producer: leaders, write leases, appends, acknowledgement.

A request carries records for some partitions of one topic. Its partitions are grouped by
their leader replica's table (:class:`~sparklog.runtime.replica_manager.ReplicaManager`); per table: take the partitions' write
leases, append under both the lease epochs and the leader epochs (one Delta commit per
table, :func:`sparklog.log.append.append`), release the leases. Then, by ``acks``:

* ``all``: before appending, every partition needs ``len(isr) >= min.insync.replicas``, else
  :class:`~sparklog.errors.NotEnoughReplicasError` and nothing is appended; after the
  commit, wait until the high watermark (minimum log end over the ISR) reaches the leader's
  log end, i.e. every in-sync replica has the batch. An ISR that shrinks below
  ``min.insync.replicas`` meanwhile fails the wait with
  :class:`~sparklog.errors.NotEnoughReplicasAfterAppendError`.
* ``1`` and ``0``: done once the leader commit returned.

The topic's configs are read when the request is served, not taken from the producer: as
Kafka's broker applies the log's current config to every append, a producer started before
``alter_topic_config`` cannot bypass a lowered ``max.message.bytes`` (records over it fail
with :class:`~sparklog.errors.RecordTooLargeError` naming them, nothing is appended) nor
miss ``message.timestamp.type=LogAppendTime`` (the result's ``log_append_time_ms`` is the
commit's time then, -1 for CreateTime topics, as in Kafka's produce response).

Retriable errors (a leader moved: ``NotLeaderError``/``FencedError``; no leader yet;
not enough replicas; ZooKeeper unreachable, e.g. while its ensemble elects a new leader) are
retried until ``delivery.timeout.ms``, as Kafka's producer does; partitions already appended
are not sent again, and with idempotence a retried partition that did land is recognised by
its sequence (per partition), so nothing is stored twice. Releasing the write leases after
the commit cannot fail the request: a lease left held is renewed by this producer's next
acquire or expires after ``writer.lease.ms``.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import pyarrow as pa

from sparklog.config import Acks
from sparklog.errors import (
    FencedError,
    LeaseTimeoutError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderError,
    RecordTooLargeError,
    ZooKeeperUnavailableError,
)
from sparklog.log.append import AppendResult, append
from sparklog.log.segment import parquet_compression
from sparklog.log.table import TopicTable
from sparklog.metadata.lease import LeaseGrant, WriterLease
from sparklog.metadata.zkdata import PartitionState
from sparklog.model.sizes import record_sizes
from sparklog.retries import retry_until
from sparklog.runtime.replica_manager import ReplicaManager

__all__ = [
    "RequestSettings",
    "TopicWriteSettings",
    "append_to_leader",
    "await_in_sync_replicas",
    "check_min_isr",
    "hold_leases",
    "produce_request",
    "release_lease",
    "topic_write_settings",
]

log = logging.getLogger("sparklog.runtime.produce_request")

_RETRY_BACKOFF_S = 0.1  # Kafka's retry.backoff.ms
_ISR_POLL_S = 0.002
_RELEASE_ATTEMPTS = 3  # kazoo holds a request back until it reconnects: one retry usually does


@dataclass(frozen=True)
class TopicWriteSettings:
    """What a topic's configs say about writing it."""

    log_append_time: bool
    compression: str
    segment_bytes: int
    min_insync_replicas: int
    max_message_bytes: int


def topic_write_settings(
    replicas: ReplicaManager, topic: str, producer_compression: str, max_age_ms: int = 0
) -> TopicWriteSettings:
    """The topic's current configs (ZooKeeper; ``max_age_ms``: see
    :meth:`~sparklog.runtime.replica_manager.ReplicaManager.topic_config`), with
    ``compression.type=producer`` resolved to the producer's ``compression.type``."""
    configs = replicas.topic_config(topic, max_age_ms)
    return TopicWriteSettings(
        log_append_time=configs["message.timestamp.type"] == "LogAppendTime",
        compression=parquet_compression(str(configs["compression.type"]), producer_compression),
        segment_bytes=int(configs["segment.bytes"]),
        min_insync_replicas=int(configs["min.insync.replicas"]),
        max_message_bytes=int(configs["max.message.bytes"]),
    )


@dataclass(frozen=True)
class RequestSettings:
    """The producer's side: acks, timeouts, idempotence."""

    acks: Acks
    max_block_ms: int
    delivery_timeout_ms: int
    producer_id: str | None  # None: not idempotent
    sequence: int | None
    compression_type: str = "none"  # the producer's compression.type


def produce_request(
    replicas: ReplicaManager,
    topic: str,
    batches: Mapping[int, pa.Table],
    request: RequestSettings,
    lease_for: Callable[[int], WriterLease],
) -> AppendResult:
    """Append ``batches`` (partition -> records) and wait as ``acks`` says; see the module doc."""
    deadline = time.monotonic() + request.delivery_timeout_ms / 1000
    # Read once per request, so its retries append under the settings its size check used.
    topic_settings = retry_until(
        deadline, _RETRY_BACKOFF_S, lambda _attempt: topic_write_settings(replicas, topic, request.compression_type)
    )
    _check_record_sizes(topic, batches, topic_settings.max_message_bytes)
    remaining = dict(batches)
    offsets: dict[int, int] = {}
    append_ms = 0
    duplicate = False

    def attempt_remaining(attempt: int) -> AppendResult:
        nonlocal append_ms, duplicate
        states = replicas.states(topic, remaining)
        if request.acks == "all":
            check_min_isr(topic, states, topic_settings.min_insync_replicas, after_append=False)
        for table, partitions in replicas.leader_tables(topic, remaining):
            # acks=all: write the new files into the in-sync followers' directories too, so
            # their fetch only has to commit them (one encoding, no copy after the commit).
            followers = sorted({b for p in partitions for b in states[p].isr} - {states[partitions[0]].leader})
            stage_roots = [replicas.replica_table(topic, b).root for b in followers] if request.acks == "all" else []
            result = append_to_leader(
                table,
                {p: remaining[p] for p in partitions},
                {p: states[p].leader_epoch for p in partitions},
                topic_settings,
                request,
                lease_for,
                first_try=attempt == 0,
                stage_roots=stage_roots,
                hard_links=replicas.config.replica_hard_links_enable,
            )
            if request.acks == "all":
                await_in_sync_replicas(replicas, topic, table, partitions, states, topic_settings, deadline)
            offsets.update(result.base_offsets)
            append_ms = max(append_ms, result.log_append_time_ms)
            duplicate = duplicate or result.duplicate
            for p in partitions:
                del remaining[p]
        return AppendResult(offsets, append_ms if topic_settings.log_append_time else -1, duplicate)

    return retry_until(deadline, _RETRY_BACKOFF_S, attempt_remaining)


def _check_record_sizes(topic: str, batches: Mapping[int, pa.Table], max_message_bytes: int) -> None:
    oversized: dict[int, list[int]] = {}
    largest = 0
    for p, records in sorted(batches.items()):
        sizes = record_sizes(*(records.column(c).combine_chunks() for c in ("key", "value", "headers")))
        rows = [int(i) for i in (sizes > max_message_bytes).nonzero()[0]]
        if rows:
            oversized[p] = rows
            largest = max(largest, int(sizes.max()))
    if oversized:
        where = "; ".join(f"{topic}-{p} record(s) {rows}" for p, rows in oversized.items())
        raise RecordTooLargeError(
            f"Produce request to {topic}: {where} (largest {largest} bytes: key, value and headers) exceed the topic's "
            f"max.message.bytes={max_message_bytes}; nothing was appended. Raise the topic's max.message.bytes or "
            "send smaller records",
            records=oversized,
        )


def append_to_leader(
    table: TopicTable,
    batches: Mapping[int, pa.Table],
    leader_epochs: Mapping[int, int],
    topic_settings: TopicWriteSettings,
    request: RequestSettings,
    lease_for: Callable[[int], WriterLease],
    first_try: bool,
    stage_roots: list[str],
    hard_links: bool,
) -> AppendResult:
    """Take the partitions' write leases, append (:func:`sparklog.log.append.append`) and
    release them again."""
    leases = [lease_for(p) for p in sorted(batches)]
    try:
        epochs = {}
        for lease in leases:
            grant = lease.acquire(request.max_block_ms, functools.partial(_log_epoch, table, lease.partition))
            if grant.takeover:
                table.commit_epoch_marker(lease.partition, grant.epoch)
            epochs[lease.partition] = grant.epoch
        return append(
            table,
            epochs,
            batches,
            leader_epochs=leader_epochs,
            producer_id=request.producer_id,
            sequence=request.sequence,
            # A sequence never tried before can't be stored yet: skip the lookup.
            check_duplicate=not first_try,
            log_append_time=topic_settings.log_append_time,
            compression=topic_settings.compression,
            segment_bytes=topic_settings.segment_bytes,
            fsync=request.acks == "all",
            stage_roots=stage_roots,
            hard_links=hard_links,
        )
    except FencedError:
        for lease in leases:
            lease.drop()  # a newer writer's epoch is in the log: read the lease again next time
        raise
    finally:
        for lease in leases:
            release_lease(lease)


def hold_leases(
    table: TopicTable, leases: list[WriterLease], timeout_ms: int, let_go: Callable[[], None]
) -> dict[int, int]:
    """partition -> lease epoch, for a holder that keeps its leases between appends (a broker
    leading the partitions): it also adopts a lease its own earlier incarnation held (the
    epoch marker of a takeover is committed here), and before it waits for a lease another
    writer holds it calls ``let_go`` to release every lease it keeps (two writers each
    holding a lease the other waits for would wait until a timeout)."""
    grants = _acquire_holding_nothing_while_waiting(table, leases, timeout_ms, let_go)
    for grant in grants:
        if grant.takeover:
            table.commit_epoch_marker(grant.partition, grant.epoch)
    return {grant.partition: grant.epoch for grant in grants}


def _acquire_holding_nothing_while_waiting(
    table: TopicTable, leases: list[WriterLease], timeout_ms: int, let_go: Callable[[], None]
) -> list[LeaseGrant]:
    """Every lease of ``leases`` for a holder that keeps leases: taken at once when free;
    when one is held by another writer, ``let_go`` of everything first, wait for that one
    alone, then try the set again (no two writers each wait for what the other holds)."""
    deadline = time.monotonic() + timeout_ms / 1000
    while True:
        try:
            return [
                lease.acquire(
                    0, functools.partial(_log_epoch, table, lease.partition), adopt=True, yield_to_waiters=True
                )
                for lease in leases
            ]
        except LeaseTimeoutError as exc:
            blocked = next(lease for lease in leases if lease.partition == exc.partition)
            let_go()
            remaining_ms = int((deadline - time.monotonic()) * 1000)
            if remaining_ms <= 0:
                raise
            blocked.acquire(
                remaining_ms,
                functools.partial(_log_epoch, table, blocked.partition),
                adopt=True,
                yield_to_waiters=True,
            )


def release_lease(lease: WriterLease) -> None:
    """Release ``lease``; a ZooKeeper outage must not turn a stored batch into a failed send
    (whose retry by the application would store it twice), so it is retried, then left held."""
    for attempt in range(_RELEASE_ATTEMPTS):
        try:
            lease.release()
            return
        except ZooKeeperUnavailableError as exc:
            if attempt + 1 == _RELEASE_ATTEMPTS:
                log.warning("write lease of %s-%d left held (it expires): %s", lease.topic, lease.partition, exc)
            else:
                time.sleep(_RETRY_BACKOFF_S)


def _log_epoch(table: TopicTable, partition: int) -> int:
    return table.fence_epoch(table.snapshot(), partition)


def check_min_isr(topic: str, states: Mapping[int, PartitionState], min_isr: int, after_append: bool) -> None:
    short = {p: list(s.isr) for p, s in states.items() if len(s.isr) < min_isr}
    if not short:
        return
    where = ", ".join(f"{topic}-{p} has ISR {isr}" for p, isr in sorted(short.items()))
    if after_append:
        raise NotEnoughReplicasAfterAppendError(
            f"{where}, fewer than min.insync.replicas={min_isr} while waiting for acks=all: the batch is not "
            "acknowledged (a retry is deduplicated); it is retried until delivery.timeout.ms"
        )
    raise NotEnoughReplicasError(
        f"{where}, fewer than min.insync.replicas={min_isr}: nothing was appended. Bring the replicas' brokers "
        "back (`sparklog brokers list`), or produce with acks=1"
    )


def await_in_sync_replicas(
    replicas: ReplicaManager,
    topic: str,
    table: TopicTable,
    partitions: list[int],
    appended: Mapping[int, PartitionState],
    topic_settings: TopicWriteSettings,
    deadline: float,
    targets: Mapping[int, int] | None = None,
) -> None:
    """Block until every in-sync replica of ``partitions`` holds what the leader has now, or
    up to ``targets`` (partition -> offset) when given."""
    while True:
        states = replicas.states(topic, partitions)
        waiting_on = [p for p in partitions if set(states[p].isr) - {states[p].leader}]
        if not waiting_on:
            return  # the leader alone is the ISR: its commit is the acknowledgement
        if targets is None:
            dt = table.snapshot()
            targets = {p: table.log_end(dt, p) for p in partitions}
        for p in partitions:
            if states[p].leader_epoch != appended[p].leader_epoch:
                raise NotLeaderError(
                    f"Leadership of {topic}-{p} moved (epoch {appended[p].leader_epoch} -> "
                    f"{states[p].leader_epoch}) before the in-sync replicas had the batch; retrying"
                )
        check_min_isr(topic, {p: states[p] for p in partitions}, topic_settings.min_insync_replicas, after_append=True)
        hws = replicas.high_watermarks(topic, waiting_on)
        if all(hws[p] >= targets[p] for p in waiting_on):
            return
        if time.monotonic() > deadline:
            lagging = {p: (hws[p], targets[p]) for p in waiting_on if hws[p] < targets[p]}
            raise NotEnoughReplicasAfterAppendError(
                f"Timed out (delivery.timeout.ms) waiting for the in-sync replicas of {topic} to copy the batch: "
                f"partition -> (high watermark, leader log end) {lagging}. Are the followers' brokers running?"
            )
        time.sleep(_ISR_POLL_S)
