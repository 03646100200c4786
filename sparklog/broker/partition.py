"""The leader side of a partition (Kafka's ``Partition``): everything a request handler asks
of a partition this broker leads, so the Produce and Fetch handlers only decode, call and
encode.

:meth:`LeaderPartitions.get` checks leadership and hands out a :class:`LeaderPartition`
bound to the leader epoch it was checked at. Invariants:

* a partition this broker does not lead (or that does not exist) is never read or queued
  to: UNKNOWN_TOPIC_OR_PARTITION / NOT_LEADER_OR_FOLLOWER, the client refreshes its
  metadata; what is queued is checked again by the commit round under the leader epoch its
  Delta commit is fenced by;
* produce — every batch checked per batch before anything of the partition is queued (magic,
  CRC and sizes by the codec, the topic's ``max.message.bytes``, a transactional batch's
  transaction, an idempotent batch's sequence); one bad batch fails the partition whole;
* fetch — never a record at or above the high watermark (the minimum log end over the ISR)
  nor below log-start, never at or above the last stable offset for ``read_committed``, never
  an aborted record for it; whole batches, the first one even when over the limits (KIP-74);
* the in-memory tail, the producers' sequences and the open transactions are kept per
  leader epoch, so a new leadership never answers from an earlier one's memory.

The round-level parts of a partition's leadership — the min-ISR check before a commit and
the high-watermark wait of acks=all after it — are made once per commit round for all its
partitions, by the :class:`~sparklog.broker.leader_appender.LeaderAppender`.
"""

from __future__ import annotations

import bisect
import functools
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa

from sparklog.broker.kafka.records import BATCH_OVERHEAD_BYTES, RecordBatch, TransactionalBatchError, check_batches
from sparklog.broker.kafka.records import encode_batches as encode_rows
from sparklog.broker.leader_appender import LeaderAppender
from sparklog.broker.log_tail import LogTails
from sparklog.broker.pending_append import PendingAppend
from sparklog.broker.producer_state import ProducerBatch, ProducerStates
from sparklog.broker.stage import Stage
from sparklog.broker.transactions.coordinator import TransactionCoordinator
from sparklog.config import Acks
from sparklog.errors import NotLeaderError, OffsetOutOfRangeError, RecordTooLargeError
from sparklog.log.leader_log import LeaderLog
from sparklog.log.reader import read_ranges
from sparklog.metadata.zkdata import PartitionState
from sparklog.model.sizes import record_sizes
from sparklog.runtime.replica_manager import METADATA_MAX_AGE_MS, LeaderSnapshot, ReplicaManager

__all__ = ["FetchedData", "LeaderPartition", "LeaderPartitions", "LogStartRefresher", "check_leader"]

log = logging.getLogger(__name__)

_MAX_RECORDS_PER_READ = 50_000  # bounds one partition's read from the segments


def check_leader(
    replicas: ReplicaManager, broker_id: int, topic: str, partition: int, max_age_ms: int = METADATA_MAX_AGE_MS
) -> PartitionState:
    """The state of ``topic``-``partition`` when ``broker_id`` leads it; else
    ``UnknownPartitionError`` / ``TopicNotFoundError`` / ``NotLeaderError``."""
    replicas.check_partition(topic, partition, max_age_ms=max_age_ms)
    state = replicas.states(topic, [partition])[partition]
    if state.leader != broker_id:
        raise NotLeaderError(
            f"broker {broker_id} does not lead {topic}-{partition} (leader {state.leader}, "
            f"epoch {state.leader_epoch}); refresh the metadata"
        )
    return state


@dataclass(frozen=True)
class FetchedData:
    """What a fetch gets from one partition."""

    high_watermark: int
    log_start: int
    records: bytes = b""
    last_stable_offset: int = -1
    # The leader has records past the high watermark (followers are copying them), so a
    # waiting fetch has something coming that no append announces.
    replicating: bool = False


class LeaderPartitions:
    """The partitions a broker leads, as its request handlers see them."""

    def __init__(
        self,
        replicas: ReplicaManager,
        broker_id: int,
        appender: LeaderAppender,
        producer_states: ProducerStates,
        transactions: TransactionCoordinator | None,
    ) -> None:
        self.replicas = replicas
        self.broker_id = broker_id
        self.appender = appender
        self.watchers = appender.watchers  # who waits for appends to these partitions
        self.producer_states = producer_states
        self.transactions = transactions
        self.log_starts = LogStartRefresher(replicas, appender.tails, appender.leader_log)

    def get(self, topic: str, partition: int) -> LeaderPartition:
        """``topic``-``partition`` when this broker leads it (see :func:`check_leader`)."""
        return LeaderPartition(self, topic, partition, check_leader(self.replicas, self.broker_id, topic, partition))


class LeaderPartition:
    """One led partition at the leader epoch it was checked at."""

    def __init__(self, leader: LeaderPartitions, topic: str, partition: int, state: PartitionState) -> None:
        self._leader = leader
        self.topic = topic
        self.partition = partition
        self.state = state

    # -- produce -----------------------------------------------------------------------------
    def prepare_append(self, data: bytes, acks: Acks, timeout_ms: int) -> list[PendingAppend]:
        """The request's batches for this partition, checked, as appends for the topic's next
        commit round (a duplicate of a stored batch comes back answered)."""
        leader = self._leader
        log_starts = leader.log_starts
        if leader.appender.tails.log_start_hint(self.topic, self.partition) is None:
            # Consumers of what this produces read from the tail, which needs the log-start:
            # read it now, off the request path, not in their first Fetch; unless this
            # append's commit will note it again.
            if not log_starts.held_by_own_commits(self.topic, self.partition):
                log_starts.refresh(self.topic, self.partition)
        txns = leader.appender.txns
        if not txns.is_loaded(self.topic, self.partition, self.state.leader_epoch):  # the tail's readers need it
            txns.preload(
                leader.replicas.replica_table(self.topic, leader.broker_id), self.partition, self.state.leader_epoch
            )
        batches = check_batches(data)  # the records are read with the rest of the commit round's
        config = leader.replicas.topic_config(self.topic, METADATA_MAX_AGE_MS)
        max_message_bytes = int(config["max.message.bytes"])
        for batch in batches:
            if batch.size_bytes > max_message_bytes:
                raise RecordTooLargeError(
                    f"a record batch of {batch.size_bytes} bytes to {self.topic}-{self.partition} exceeds the "
                    f"topic's max.message.bytes={max_message_bytes}; nothing of it was appended"
                )
            if batch.transactional:
                self._verify_transactional(batch)
        items = []
        for batch in batches:
            if not batch.count:
                continue
            item = PendingAppend(
                self.partition,
                None,
                acks,
                timeout_ms,
                batch.compression,
                batch=batch,
                wire=batch.raw,
                transactional=batch.transactional,
            )
            if batch.idempotent:
                self._check_sequence(batch, item)
            items.append(item)
        return items

    def _verify_transactional(self, batch: RecordBatch) -> None:
        """A transaction's first batch in this partition must belong to an ongoing transaction
        holding the partition; later ones continue the transaction the leader already tracks."""
        leader = self._leader
        if leader.transactions is None:
            raise TransactionalBatchError(f"this broker serves no transactions ({self.topic}-{self.partition})")
        if leader.appender.txns.is_open(self.topic, self.partition, self.state.leader_epoch, batch.producer_id):
            return
        leader.transactions.verify_batch(batch.producer_id, batch.producer_epoch, self.topic, self.partition)

    def _check_sequence(self, batch: RecordBatch, item: PendingAppend) -> None:
        """A duplicate is answered at once with its first offsets (or, while its original is
        still being appended, as that one ends); a new batch carries its sequence into the
        commit and records it when the commit returns."""
        leader, topic, partition, leader_epoch = self._leader, self.topic, self.partition, self.state.leader_epoch
        states = leader.producer_states
        sequenced = ProducerBatch(batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.count)
        table = leader.replicas.replica_table(topic, leader.broker_id)
        original = states.check(table, partition, leader_epoch, sequenced, item)
        if isinstance(original, int):
            item.finish(original)
            return
        if original is not None:
            item.duplicate_of = copied = original
            copied.on_done(lambda: item.finish(copied.base_offset, copied.log_append_time_ms, copied.error))
            return
        item.producer = sequenced

        def committed(base_offset: int) -> None:
            states.appended(topic, partition, leader_epoch, sequenced, base_offset)

        item.on_commit = committed

    # -- fetch -------------------------------------------------------------------------------
    def read(self, offset: int, max_bytes: int, first: bool, read_committed: bool) -> FetchedData:
        """Whole batches from ``offset`` within ``max_bytes`` (at least one batch when
        ``first``): from the in-memory tail when it holds them, else from the segments."""
        from_tail = self._read_tail(offset, max_bytes, first, read_committed)
        if from_tail is not None:
            return from_tail
        leader, topic, partition = self._leader, self.topic, self.partition
        at = leader.replicas.fetch_positions(topic, [partition])[partition]
        high_watermark = at.high_watermark
        log_start = leader.log_starts.note(topic, partition, at)
        stable = at.last_stable_offset
        if offset < log_start or offset > high_watermark:
            raise OffsetOutOfRangeError(
                f"offset {offset} of {topic}-{partition} is outside {log_start}..{high_watermark}"
            )
        stop = stable if read_committed else high_watermark
        if offset >= stop or (max_bytes <= 0 and not first):
            return FetchedData(high_watermark, log_start, b"", stable, replicating=at.log_end > high_watermark)
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
                max_bytes=max(max_bytes, 1),
            )
            if rows.num_rows or end >= stop:
                break
            start = end
        rows = _within(rows, max_bytes)
        return FetchedData(high_watermark, log_start, encode_rows(rows, leader_epoch=-1), stable)

    def _read_tail(self, offset: int, max_bytes: int, first: bool, read_committed: bool) -> FetchedData | None:
        """The answer from memory, or None when the tail cannot give it (then the table does)."""
        leader, topic, partition, state = self._leader, self.topic, self.partition, self.state
        appender = leader.appender
        tails = appender.tails
        settled = self._high_watermark_from_memory()
        # At the settled end, any log-start noted is at or below the offset (log-start never
        # passes the high watermark): one however old serves, and nothing is read, so a
        # consumer waiting at the end of an idle partition costs the store nothing.
        at_end = settled is not None and offset == settled
        hint = tails.log_start_hint(topic, partition)
        noted = tails.noted_log_start(topic, partition) if hint is None and at_end else None
        if hint is None and noted is None:
            return None
        log_start, fresh = hint if hint is not None else (min(offset, noted or 0), True)
        if not fresh and not at_end:
            # Re-reading it here would refresh this handler thread's snapshot of the table
            # and list its files: hundreds of ms under load, for a consumer at the tail.
            leader.log_starts.refresh(topic, partition)
        high_watermark = settled
        if high_watermark is None:
            high_watermark = leader.replicas.current_high_watermark(topic, partition, state)
        if not log_start <= offset <= high_watermark:
            return None  # the table's path gives the exact error with fresh offsets
        table = leader.replicas.replica_table(topic, leader.broker_id)
        stable = appender.txns.last_stable_offset(table, partition, state.leader_epoch, high_watermark)
        stop = stable if read_committed else high_watermark
        if offset >= stop:
            log_end = tails.log_end(topic, partition, state.leader_epoch)
            if log_end < 0:
                return None  # whether followers are still copying: the table knows
            return FetchedData(high_watermark, log_start, b"", stable, replicating=log_end > high_watermark)
        if max_bytes <= 0 and not first:
            return FetchedData(high_watermark, log_start, b"", stable)  # the response is full
        batches = tails.read(topic, partition, state.leader_epoch, offset, stop, max_bytes)
        if batches is None:
            if tails.is_publishing(topic, partition) and offset == tails.log_end(topic, partition, state.leader_epoch):
                # This leader's commit landed and its batches are on their way here: nothing
                # yet (a Fetch waits for the append's wake-up) rather than a table read.
                return FetchedData(high_watermark, log_start, b"", stable)
            return None
        if read_committed:
            aborted = appender.txns.aborted(table, partition, state.leader_epoch)
            if aborted:
                batches = [b for b in batches if not _inside(aborted, b.base_offset)]
                if not batches:
                    return None  # aborted batches only: the table's path steps over them
        return FetchedData(high_watermark, log_start, b"".join(b.data for b in batches), stable)

    def _high_watermark_from_memory(self) -> int | None:
        """Without a store request: the leader's recorded log end, when every in-sync replica
        is the leader's own table (shared storage, or no followers) — a consumer waiting at
        the end of an idle partition then costs nothing (DESIGN §16). None: ask the tables."""
        leader, state = self._leader, self.state
        replicas = leader.replicas
        if any(not replicas.shares_table(self.topic, leader.broker_id, b) for b in state.isr):
            return None
        return leader.appender.settled_log_end(self.topic, self.partition)


class LogStartRefresher:
    """Reads led partitions' log-start from the table on a stage of its own and notes it in
    the tails, one refresh per partition at a time: a Fetch served from the tail uses the
    value noted last instead of waiting for a snapshot refresh and a file listing.

    A refresh reads nothing when every commit since the version the log-start was read at
    is this leader's own append (``LeaderLog.only_own_commits_since``: what the leader
    recorded, and one look for a commit after its last): appends never move a log-start, and
    retention, DeleteRecords and compaction are commits of their own. On a store that saves
    a delta-rs refresh a second per partition read, which holds the GIL while it waits for
    the store. The leader's own commits note the log-starts of their partitions again
    (``LogTails.log_starts_held``), so a partition being produced to needs no refresh."""

    def __init__(
        self, replicas: ReplicaManager, tails: LogTails, leader_log: Callable[[str], LeaderLog | None]
    ) -> None:
        self._replicas = replicas
        self._tails = tails
        self._leader_log = leader_log
        self._wanted: set[tuple[str, int]] = set()
        self._lock = threading.Lock()
        self._stage: Stage | None = None

    def refresh(self, topic: str, partition: int) -> None:
        with self._lock:
            if (topic, partition) in self._wanted:
                return
            self._wanted.add((topic, partition))
            if self._stage is None:
                self._stage = Stage("log-start-refresher")
            stage = self._stage
        stage.submit(functools.partial(self._refresh, topic, partition))

    def held_by_own_commits(self, topic: str, partition: int) -> bool:
        """Whether only this leader's appends followed the version ``partition``'s log-start
        was noted at, as far as the leader knows (nothing is asked): its next commit notes
        the log-start again."""
        noted = self._tails.noted_log_start_at(topic, partition)
        leader_log = self._leader_log(topic)
        return noted is not None and leader_log is not None and leader_log.only_own_commits_since(noted[1], look=False)

    def note(self, topic: str, partition: int, at: LeaderSnapshot) -> int:
        """``at``'s log-start (at most its high watermark), noted for the tail's readers."""
        log_start = min(at.table.log_start(at.snapshot, partition), at.high_watermark)
        self._tails.note_log_start(topic, partition, log_start, at.snapshot.version())
        return log_start

    def _refresh(self, topic: str, partition: int) -> None:
        try:
            noted = self._tails.noted_log_start_at(topic, partition)
            leader_log = self._leader_log(topic)
            if noted is not None and leader_log is not None and leader_log.only_own_commits_since(noted[1]):
                self._tails.note_log_start(topic, partition, *noted)
                return
            self.note(topic, partition, self._replicas.fetch_positions(topic, [partition])[partition])
        except Exception as exc:  # noqa: BLE001 - the next fetch's table path reports it
            log.debug("refreshing the log-start of %s-%d failed: %s", topic, partition, exc)
        finally:
            with self._lock:
                self._wanted.discard((topic, partition))


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
