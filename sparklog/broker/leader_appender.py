"""Group commit for the partitions a broker leads (DESIGN §14).

Produce requests from every connection are queued per topic. One committer thread per topic
takes everything queued and appends it to this broker's replica table in ONE Delta commit
(every partition of the round, :func:`sparklog.runtime.produce_request.append_to_leader`);
what arrives while that commit is in flight waits for the next round. Latency is then about
one commit, throughput many requests per commit.

Invariants:

* a request is appended only while this broker leads its partition: the partition state
  (ZooKeeper) names this broker, and the commit carries the state's leader epoch, so a
  leadership change that raced the round fails it (``NotLeaderError``) instead of writing
  under a stale epoch (invariant 4);
* a request's records get contiguous offsets in their order; requests of one round are
  placed in arrival order, so one connection's requests keep their order;
* a request is answered only once its commit returned (acks 0/1) or every in-sync replica
  holds it (acks=all, :func:`~sparklog.runtime.produce_request.await_in_sync_replicas`);
  ``min.insync.replicas`` is checked before appending;
* one failing partition fails only the requests of that round's commit; nothing that was
  not committed is reported as appended.

Records: requests arrive checked but not read (:func:`~sparklog.broker.kafka.records.check_batches`);
a round reads the records of all its producers' batches in one native pass into one table,
ordered by partition, so each partition's rows are one slice of it
(:func:`~sparklog.model.kafka_batches.decode_records`).

Metrics: every round that appended is reported to the broker's metrics
(:meth:`~sparklog.broker.metrics.BrokerMetrics.commit_round`): its latency (from the round's
start to its acknowledgement, retries and the acks=all wait for the ISR included), its
records and wire bytes, and the time of :func:`~sparklog.runtime.produce_request.append_to_leader`
(segment files written and fsynced, the Delta commit); its producers' records and bytes are
Kafka's MessagesInPerSec / BytesInPerSec of the topic (:meth:`~sparklog.broker.metrics.BrokerMetrics.bytes_in`).

Write leases: the round takes the leases of its partitions (owner ``broker-<id>``) and
releases them after the commit, so Spark jobs and light producers writing the same topic
queue for the same leases and offsets stay unique and contiguous whoever writes.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import pyarrow as pa

from sparklog.broker.append_watchers import AppendWatchers
from sparklog.broker.log_tail import LogTails
from sparklog.broker.metrics import BrokerMetrics
from sparklog.broker.producer_state import Outcome, ProducerBatch
from sparklog.broker.transactions.partition_txns import PartitionTransactions
from sparklog.config import Acks
from sparklog.errors import LeaderNotAvailableError, NotLeaderError, RetriableError
from sparklog.log.append import KafkaProducerBatches
from sparklog.log.leader_log import LeaderLog
from sparklog.log.table import TopicTable
from sparklog.log.transactions import kafka_producer_id, producer_app_id
from sparklog.log.txn_log import ControlRecord
from sparklog.metadata.lease import WriterLease, broker_lease_owner
from sparklog.model.kafka_batches import RecordBatch, decode_records
from sparklog.runtime.produce_request import (
    RequestSettings,
    append_to_leader,
    await_in_sync_replicas,
    check_min_isr,
    release_lease,
    topic_write_settings,
)
from sparklog.runtime.replica_manager import METADATA_MAX_AGE_MS, ReplicaManager

__all__ = ["LeaderAppender", "PendingAppend"]

log = logging.getLogger(__name__)

_RETRY_BACKOFF_S = 0.05
_IDLE_CHECK_S = 0.1  # an idle committer lets go of leases other writers wait for this often
# Guards registering and running PendingAppend callbacks (held for a list operation only).
_DONE_LOCK = threading.Lock()


@dataclass(eq=False)
class PendingAppend:
    """Records for one partition from one produce request, waiting for a commit."""

    partition: int
    # None until the round reads them: the records of ``batch`` (:func:`read_round`).
    records: pa.Table | None
    acks: Acks
    timeout_ms: int
    compression: str = "none"  # the producer's codec (for compression.type=producer)
    # An idempotent producer's batch: its sequence is committed with the records.
    producer: ProducerBatch | None = None
    # A batch of a Kafka transaction (``producer`` says whose), or a transaction's marker
    # (one control row): planned by :class:`PartitionTransactions` before the commit.
    transactional: bool = False
    marker: ControlRecord | None = None
    # The batch as the producer sent it: kept in the partition's in-memory tail once stored.
    wire: bytes | None = None
    # Called with the base offset as soon as the commit returned (before any acks=all wait).
    on_commit: Callable[[int], None] | None = None
    # A producer's checked batch whose records are read with the round's others.
    batch: RecordBatch | None = None
    # A retry of an idempotent batch still being appended: answered as that one ends.
    duplicate_of: Outcome | None = None
    is_done: bool = False
    base_offset: int = -1
    log_append_time_ms: int = -1
    error: BaseException | None = None
    _on_done: list[Callable[[], None]] = field(default_factory=list)
    # Made only for a thread that blocks on the outcome (most never do: a threading.Event
    # costs more than the rest of a small request's bookkeeping).
    _done_event: threading.Event | None = None

    @property
    def rows(self) -> int:
        if self.records is not None:
            return self.records.num_rows
        return _batch_of(self).count

    def wait_done(self, timeout_s: float) -> bool:
        if self.is_done:
            return True
        if timeout_s <= 0:
            return False
        with _DONE_LOCK:
            if self.is_done:
                return True
            if self._done_event is None:
                self._done_event = threading.Event()
            event = self._done_event
        return event.wait(timeout_s)

    def on_done(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once this append is answered (at once if it is); it runs on the
        committer's thread, so it only hands work on."""
        with _DONE_LOCK:
            if not self.is_done:
                self._on_done.append(callback)
                return
        callback()

    def finish(self, base_offset: int = -1, log_append_time_ms: int = -1, error: BaseException | None = None) -> None:
        self.base_offset, self.log_append_time_ms, self.error = base_offset, log_append_time_ms, error
        with _DONE_LOCK:
            self.is_done = True
            callbacks, self._on_done = self._on_done, []
            event = self._done_event
        if event is not None:
            event.set()
        for callback in callbacks:
            callback()


class LeaderAppender:
    """Queues and group-commits produce requests for the partitions ``broker_id`` leads.

    ``watchers`` wakes the Fetch long polls of a round's partitions once the round is
    answered (data appended or not: a waiting fetch re-reads and answers errors too)."""

    def __init__(
        self,
        replicas: ReplicaManager,
        broker_id: int,
        writer_lease_ms: int,
        metrics: BrokerMetrics,
        watchers: AppendWatchers | None = None,
    ) -> None:
        self.replicas = replicas
        self.broker_id = broker_id
        self.writer_lease_ms = writer_lease_ms
        self.metrics = metrics
        self.watchers = watchers if watchers is not None else AppendWatchers()
        self._lock = threading.Condition()
        self._queues: dict[str, list[PendingAppend]] = {}
        self._threads: dict[str, threading.Thread] = {}
        self._leases: dict[tuple[str, int], WriterLease] = {}
        self.tails = LogTails()
        self.txns = PartitionTransactions()
        self._logs: dict[str, LeaderLog] = {}
        self._closed = False

    def append(self, topic: str, items: Sequence[PendingAppend]) -> None:
        """Queue ``items`` for ``topic``'s next commit; each item's ``done`` is set when it is
        answered (see :meth:`wait`)."""
        with self._lock:
            if self._closed:
                for item in items:
                    item.finish(error=LeaderNotAvailableError(f"broker {self.broker_id} is shutting down"))
                return
            self._queues.setdefault(topic, []).extend(items)
            if topic not in self._threads:
                thread = threading.Thread(target=self._run, args=(topic,), name=f"appender-{topic}", daemon=True)
                self._threads[topic] = thread
                thread.start()
            self._lock.notify_all()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._lock.notify_all()
        for thread in list(self._threads.values()):
            thread.join(5)

    # -- the committer -----------------------------------------------------------------------
    def _run(self, topic: str) -> None:
        while True:
            with self._lock:
                while not self._queues.get(topic) and not self._closed:
                    if not self._lock.wait(_IDLE_CHECK_S):
                        break
                items = self._queues.pop(topic, [])
                if self._closed:
                    for item in items:
                        item.finish(error=LeaderNotAvailableError(f"broker {self.broker_id} is shutting down"))
                    return
            if not items:
                self._release_wanted(topic)
                continue
            # acks=all rounds fsync and wait for the ISR: the others don't pay for that.
            for acks_all in (False, True):
                group = [i for i in items if (i.acks == "all") == acks_all]
                if group:
                    self._commit_round(topic, group)
            self.watchers.appended(topic, {i.partition for i in items})

    def _commit_round(self, topic: str, items: list[PendingAppend]) -> None:
        started_s = time.monotonic()
        deadline = started_s + max(i.timeout_ms for i in items) / 1000
        try:
            read = read_round(items)
        except Exception as exc:  # noqa: BLE001 - answered to the clients as Kafka error codes
            self._fail(items, exc)
            return
        while True:
            try:
                appended = self._try_round(topic, items, read)
                if appended is not None:
                    self.metrics.commit_round(
                        topic, time.monotonic() - started_s, appended.records, appended.wire_bytes, appended.append_s
                    )
                    # Kafka's BytesInPerSec / MessagesInPerSec: what producers got appended.
                    self.metrics.bytes_in(topic, appended.wire_bytes, appended.produced)
                return
            except RetriableError as exc:
                if time.monotonic() + _RETRY_BACKOFF_S > deadline:
                    self._fail(items, exc)
                    return
                time.sleep(_RETRY_BACKOFF_S)
            except Exception as exc:  # noqa: BLE001 - answered to the clients as Kafka error codes
                log.debug("produce round on %s failed: %s", topic, exc)
                self._fail(items, exc)
                return

    def _try_round(self, topic: str, items: list[PendingAppend], read: Mapping[int, RoundRows]) -> _Appended | None:
        """Append the round's items this broker leads; what was appended (None: nothing)."""
        replicas = self.replicas
        partitions = sorted({i.partition for i in items})
        states = replicas.states(topic, partitions)
        led = [p for p in partitions if states[p].leader == self.broker_id]
        for p in set(partitions) - set(led):
            error = NotLeaderError(
                f"broker {self.broker_id} does not lead {topic}-{p} (leader: {states[p].leader}, "
                f"epoch {states[p].leader_epoch}); refresh the metadata"
            )
            self._fail([i for i in items if i.partition == p and not i.is_done], error)
        items = [i for i in items if i.partition in led and not i.is_done]
        if not items:
            return None
        table = replicas.replica_table(topic, self.broker_id)
        plan = self.txns.plan(table, {p: states[p].leader_epoch for p in led}, items)
        items = plan.items
        if not items:
            return None
        acks: Acks = "all" if items[0].acks == "all" else "1"
        settings = topic_write_settings(replicas, topic, items[0].compression, METADATA_MAX_AGE_MS)
        if acks == "all":
            check_min_isr(topic, {p: states[p] for p in led}, settings.min_insync_replicas, after_append=False)
        merged = {}
        for p in led:
            kept = [i for i in items if i.partition == p]
            if kept:
                merged[p] = _partition_rows(kept, read.get(p))
        followers = sorted({b for p in merged for b in states[p].isr} - {self.broker_id})
        stage_roots = [replicas.replica_table(topic, b).root for b in followers] if acks == "all" else []
        request = RequestSettings(
            acks=acks,
            max_block_ms=max(i.timeout_ms for i in items),
            delivery_timeout_ms=max(i.timeout_ms for i in items),
            producer_id=None,
            sequence=None,
            compression_type=items[0].compression,
        )
        producers = _kafka_producers(items, plan.transactions)
        append_started_s = time.monotonic()
        result = append_to_leader(
            table,
            merged,
            {p: states[p].leader_epoch for p in merged},
            settings,
            request,
            self._lease_for(topic),
            first_try=True,
            stage_roots=stage_roots,
            hard_links=replicas.config.replica_hard_links_enable,
            kafka_producers=producers,
            views=self._leader_log(topic, table).view,
            keep_lease=lambda lease: not lease.wanted(),
            let_go=lambda: self._release_held(topic),
        )
        appended = _Appended(
            sum(i.rows for i in items),
            sum(len(i.wire) for i in items if i.wire is not None),
            time.monotonic() - append_started_s,
            sum(i.rows for i in items if i.marker is None),
        )
        plan.apply(result.base_offsets)
        next_offset = dict(result.base_offsets)
        bases = []
        for item in items:
            bases.append(next_offset[item.partition])
            next_offset[item.partition] += item.rows
            if item.on_commit is not None:
                item.on_commit(bases[-1])
            if item.wire is not None and not settings.log_append_time:
                self.tails.append(
                    topic,
                    item.partition,
                    states[item.partition].leader_epoch,
                    bases[-1],
                    item.rows,
                    item.wire,
                )
            else:
                self.tails.drop(topic, item.partition)
        if acks == "all":
            deadline = time.monotonic() + request.delivery_timeout_ms / 1000
            try:
                await_in_sync_replicas(replicas, topic, table, sorted(merged), states, settings, deadline)
            except Exception as exc:  # noqa: BLE001 - answered as its Kafka code
                # Stored but not acknowledged (e.g. NOT_ENOUGH_REPLICAS_AFTER_APPEND): the client
                # decides, as with Kafka. Retrying the round here would append the records again.
                self._fail(items, exc)
                return appended
        append_ms = result.log_append_time_ms if settings.log_append_time else -1
        for item, base in zip(items, bases, strict=True):
            item.finish(base, append_ms)
        return appended

    def _release_held(self, topic: str) -> None:
        """Release every lease of ``topic`` this broker keeps (before waiting for another)."""
        self._release_wanted(topic, everything=True)

    def _release_wanted(self, topic: str, everything: bool = False) -> None:
        """Release this topic's held leases that another writer waits for."""
        for (held_topic, _partition), lease in list(self._leases.items()):
            if held_topic == topic and lease.grant is not None and (everything or lease.wanted()):
                try:
                    release_lease(lease)
                except Exception as exc:  # noqa: BLE001 - the lease expires; the waiter gets it then
                    log.warning("releasing the lease of %s-%d failed: %s", topic, lease.partition, exc)

    def _leader_log(self, topic: str, table: TopicTable) -> LeaderLog:
        """The committer's view of its table (one per topic: only that topic's thread uses it)."""
        leader_log = self._logs.get(topic)
        if leader_log is None or leader_log.table is not table:
            leader_log = self._logs[topic] = LeaderLog(table)
        return leader_log

    def _lease_for(self, topic: str) -> Callable[[int], WriterLease]:
        def lease(partition: int) -> WriterLease:
            key = (topic, partition)
            if key not in self._leases:
                self._leases[key] = WriterLease(
                    self.replicas.zk, topic, partition, broker_lease_owner(self.broker_id), self.writer_lease_ms
                )
            return self._leases[key]

        return lease

    @staticmethod
    def _fail(items: Sequence[PendingAppend], error: BaseException) -> None:
        for item in items:
            if not item.is_done:
                item.finish(error=error)


class _Appended(NamedTuple):
    """What a round appended, for :meth:`BrokerMetrics.commit_round`."""

    records: int
    wire_bytes: int  # the producers' batches as sent (0 for markers)
    append_s: float  # append_to_leader: files written and fsynced, the Delta commit
    produced: int = 0  # records from producers (not transaction markers)


@dataclass(frozen=True)
class RoundRows:
    """A partition's rows read by :func:`read_round`: the items whose batches they are, in order."""

    items: list[PendingAppend]
    records: pa.Table


def read_round(items: Sequence[PendingAppend]) -> dict[int, RoundRows]:
    """Read the records of every producer batch among ``items`` in one pass, in partition
    order then arrival order: each item gets its slice, each partition its rows."""
    unread = sorted((i for i in items if i.records is None), key=lambda i: i.partition)
    if not unread:
        return {}
    table = decode_records([_batch_of(i) for i in unread])
    read: dict[int, RoundRows] = {}
    row = 0
    for partition, group in itertools.groupby(unread, key=lambda i: i.partition):
        kept = list(group)
        start = row
        for item in kept:
            item.records = table.slice(row, _batch_of(item).count)
            row += _batch_of(item).count
        read[partition] = RoundRows(kept, table.slice(start, row - start))
    return read


def _batch_of(item: PendingAppend) -> RecordBatch:
    assert item.batch is not None, "an append carries records or a batch"
    return item.batch


def _partition_rows(items: list[PendingAppend], read: RoundRows | None) -> pa.Table:
    """One partition's records of the round: the slice :func:`read_round` made when the
    round appends exactly those items (no copy), else the items' records concatenated."""
    if (
        read is not None
        and len(read.items) == len(items)
        and all(a is b for a, b in zip(read.items, items, strict=True))
    ):
        return read.records
    tables = [i.records for i in items if i.records is not None]
    return tables[0] if len(tables) == 1 else pa.concat_tables(tables).combine_chunks()


def _kafka_producers(
    items: Sequence[PendingAppend], transactions_for: Callable[[Mapping[int, int]], Mapping[str, int]]
) -> KafkaProducerBatches:
    """The idempotent batches among ``items`` (in commit order) for the append, and the
    round's transaction app ids."""
    rows: dict[int, int] = {}
    last_sequences: dict[str, int] = {}
    batches: dict[int, list[tuple[int, int, int, int, int]]] = {}
    for item in items:
        row = rows.get(item.partition, 0)
        rows[item.partition] = row + item.rows
        batch = item.producer
        if batch is None:
            continue
        last_sequences[producer_app_id(kafka_producer_id(batch.producer_id), item.partition)] = batch.last_sequence
        batches.setdefault(item.partition, []).append(
            (batch.producer_id, batch.producer_epoch, batch.first_sequence, batch.last_sequence, row)
        )
    return KafkaProducerBatches(last_sequences, batches, transactions_for)
