"""A produce request's records for one partition, waiting for its leader's commit round.

:class:`PendingAppend` is what the produce handler, the transaction markers and the
leader's appender share: the request's batch (checked, not read), how it is to be
acknowledged, and its outcome once answered. A round reads the records of all its
producers' batches in one native pass into one table, ordered by partition, so each
partition's rows are one slice of it (:func:`read_round`).

Invariants: an append is answered once (:meth:`PendingAppend.finish`), and its callbacks run
after the answer is visible (``is_done``), each exactly once.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import pyarrow as pa

from sparklog.broker.producer_state import Outcome, ProducerBatch, follows_a_failed_batch
from sparklog.config import Acks
from sparklog.log.append import KafkaProducerBatches
from sparklog.log.transactions import kafka_producer_id, producer_app_id
from sparklog.log.txn_log import ControlRecord
from sparklog.model.kafka_batches import RecordBatch, decode_records

__all__ = ["PendingAppend", "RoundRows", "kafka_producers", "partition_rows", "read_round", "refuse_gaps"]

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
    # The producer's batch before this one, still being appended when this one was accepted:
    # if it fails, this one is refused (producer_state.follows_a_failed_batch).
    follows: Outcome | None = None
    # Times its round was built again because the log moved under it before its commit.
    rebuilds: int = 0
    is_done: bool = False
    base_offset: int = -1
    log_append_time_ms: int = -1
    error: BaseException | None = None
    _on_done: list[Callable[[], None]] = field(default_factory=list)
    # Made only for a thread that blocks on the outcome (most never do: a threading.Event
    # costs more than the rest of a small request's bookkeeping).
    _done_event: threading.Event | None = None

    @property
    def size_bytes(self) -> int:
        """The batch's bytes as sent (what bounds a round's size)."""
        if self.batch is not None:
            return len(self.batch.raw)
        if self.wire is not None:
            return len(self.wire)
        return self.records.nbytes if self.records is not None else 0

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


def partition_rows(items: list[PendingAppend], read: RoundRows | None) -> pa.Table:
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


def kafka_producers(
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


def refuse_gaps(items: Sequence[PendingAppend]) -> None:
    """Refuse each idempotent batch whose producer's batch before it failed after it was
    accepted (:func:`~sparklog.broker.producer_state.follows_a_failed_batch`): at a round's
    build, so it is never stored after the gap."""
    for item in items:
        if item.producer is not None and (gap := follows_a_failed_batch(item.follows, item.partition, item.producer)):
            item.finish(error=gap)
