"""Idempotent producers' sequences in the partitions a broker leads (Kafka's producer state).

Per partition and producer id the leader knows the producer's epoch, its last sequence and
its last five batches (first and last sequence, base offset). A new batch of that producer:

* with an older epoch → :class:`~sparklog.errors.InvalidProducerEpochError` (a newer
  incarnation took over);
* equal to one of the last five batches → a duplicate: answered with the base offset it got
  the first time and not appended again (the client's retry after a lost response);
* continuing the last sequence (or starting at 0 under a new epoch, or from an unknown
  producer, as Kafka accepts since KIP-360) → appended;
* at or below the last sequence but not among the last five → DUPLICATE_SEQUENCE_NUMBER
  (stored, offsets unknown; clients count it as delivered);
* anything else → OUT_OF_ORDER_SEQUENCE_NUMBER, nothing appended.

A batch accepted behind one of its producer's batches that is still being appended
*follows* it (``Outcome.follows``, set by :meth:`ProducerStates.check`): if that one fails, this one is
refused with OUT_OF_ORDER_SEQUENCE_NUMBER when its round is built
(:func:`follows_a_failed_batch`), as Kafka's log refuses a batch whose predecessor it never
stored. Storing it would leave a gap in the producer's sequence, and the client, which
re-sends every batch behind a failed one under a new epoch, would store it twice.

A batch being appended is *pending*: the same batch arriving meanwhile (a client's retry
on a new connection while the original request is still being served on the old one) is
not appended but answered as the original ends — its offsets, or its error (the client then
sends it again and it is checked afresh) — so a retry racing its original is never stored
twice, and no request handler waits for another request.

Durability: every commit of an idempotent batch carries the app transaction
``sparklog.producer.kafka-<producer id>.<partition>`` = its last sequence (DESIGN §3), so a
new leader (after a failover or a restart) starts from the table: the last sequence is
known, and the last five batches are read back from the newest segments' metadata
(:mod:`sparklog.log.producer_batches`; the files travel to followers byte for byte), so a
retry after a failover is answered with its first offsets, as Kafka does. A batch older than
what those files hold gets DUPLICATE_SEQUENCE_NUMBER.
The state is dropped whenever the partition's leader epoch changes, and reloaded.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from sparklog.errors import DuplicateSequenceError, InvalidProducerEpochError, OutOfOrderSequenceError, StorageError
from sparklog.log.producer_batches import recent_kafka_batches
from sparklog.log.table import TopicTable
from sparklog.log.transactions import kafka_producer_id

__all__ = ["Outcome", "ProducerBatch", "ProducerStates", "follows_a_failed_batch"]

_RECENT_BATCHES = 5
_MAX_SEQUENCE = 2**31 - 1


@dataclass(frozen=True)
class ProducerBatch:
    producer_id: int
    producer_epoch: int
    first_sequence: int
    count: int

    @property
    def last_sequence(self) -> int:
        return (self.first_sequence + self.count - 1) % (_MAX_SEQUENCE + 1)


class Outcome(Protocol):
    """How a pending batch ends (a :class:`~sparklog.broker.pending_append.PendingAppend`)."""

    error: BaseException | None
    base_offset: int
    log_append_time_ms: int
    follows: Outcome | None  # set by ProducerStates.check: the pending batch this one continues

    def wait_done(self, timeout_s: float) -> bool: ...

    def on_done(self, callback: Callable[[], None]) -> None: ...


@dataclass
class _Producer:
    epoch: int
    last_sequence: int  # -1: nothing stored yet
    recent: deque[tuple[int, int, int]] = field(default_factory=lambda: deque(maxlen=_RECENT_BATCHES))
    pending: dict[tuple[int, int], Outcome] = field(default_factory=dict)


class ProducerStates:
    """The producer states of one broker's led partitions. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # (topic, partition) -> (leader epoch the state belongs to, producer id -> state)
        self._partitions: dict[tuple[str, int], tuple[int, dict[int, _Producer]]] = {}

    def check(
        self,
        table: TopicTable,
        partition: int,
        leader_epoch: int,
        batch: ProducerBatch,
        outcome: Outcome,
    ) -> int | Outcome | None:
        """None: append ``batch`` (registered as pending until ``outcome`` ends); an offset:
        ``batch`` is a duplicate stored at that base offset; an :class:`Outcome`: the same
        batch is still being appended (an earlier copy of it) — answer this copy as that one
        ends, without appending it. Raises the sequence errors of the module doc. An
        appended ``batch`` whose predecessor is not stored yet *follows* the pending batch it
        continues (``outcome.follows``)."""
        with self._lock:
            producer = self._producer(table, partition, leader_epoch, batch.producer_id)
            key = (batch.first_sequence, batch.last_sequence)
            if producer is not None and any(_unknown_outcome(o) for o in producer.pending.values()):
                # A batch of this producer failed where its commit may have landed all the same
                # (a store that lost an answer): what this broker remembers may miss it, so
                # the table, which has it if it landed, is asked again.
                unfinished = {k: o for k, o in producer.pending.items() if not o.wait_done(0)}
                del self._partitions[(table.topic, partition)][1][batch.producer_id]
                producer = self._producer(table, partition, leader_epoch, batch.producer_id)
                if unfinished:
                    producer = producer or self._new_producer(table.topic, partition, batch)
                    producer.pending.update(unfinished)
            original = producer.pending.get(key) if producer is not None else None
            if original is not None and original.wait_done(0) and original.error is not None:
                assert producer is not None
                del producer.pending[key]  # it failed: this copy is checked afresh
                original = None
            if original is not None:
                return original
            verdict = self._check(table, partition, batch, producer)
            if verdict is None and producer is not None:
                outcome.follows = _pending_before(producer, batch)
                producer.pending[key] = outcome
            elif verdict is None:
                self._new_producer(table.topic, partition, batch).pending[key] = outcome
            return verdict

    def _check(self, table: TopicTable, partition: int, batch: ProducerBatch, producer: _Producer | None) -> int | None:
        if producer is None:
            return None
        if producer.epoch < 0:  # loaded from the table, which does not keep epochs
            producer.epoch = batch.producer_epoch
        if batch.producer_epoch < producer.epoch:
            raise InvalidProducerEpochError(
                f"producer {batch.producer_id} epoch {batch.producer_epoch} is older than epoch {producer.epoch} "
                f"seen on {table.topic}-{partition}: a newer instance of this producer took over"
            )
        if batch.producer_epoch > producer.epoch:
            if batch.first_sequence != 0:
                raise OutOfOrderSequenceError(
                    f"producer {batch.producer_id} starts epoch {batch.producer_epoch} on {table.topic}-{partition} "
                    f"at sequence {batch.first_sequence}, not 0"
                )
            return None
        for first, last, base_offset in producer.recent:
            if first == batch.first_sequence and last == batch.last_sequence:
                return base_offset
        for failed in [k for k, o in producer.pending.items() if o.wait_done(0) and o.error is not None]:
            del producer.pending[failed]  # never stored: the sequence continues from before it
        newest = max([producer.last_sequence, *(k[1] for k in producer.pending)])
        expected = 0 if newest in (-1, _MAX_SEQUENCE) else newest + 1
        if batch.first_sequence == expected:
            return None
        if producer.last_sequence >= 0 and batch.last_sequence <= producer.last_sequence:
            raise DuplicateSequenceError(
                f"producer {batch.producer_id} batch {batch.first_sequence}..{batch.last_sequence} on "
                f"{table.topic}-{partition} was stored before (last sequence {producer.last_sequence})"
            )
        raise OutOfOrderSequenceError(
            f"producer {batch.producer_id} sent sequence {batch.first_sequence} to {table.topic}-{partition}; "
            f"expected {expected}"
        )

    def appended(self, topic: str, partition: int, leader_epoch: int, batch: ProducerBatch, base_offset: int) -> None:
        """Record a committed batch (called when its Delta commit returned)."""
        with self._lock:
            epoch, producers = self._partitions.setdefault((topic, partition), (leader_epoch, {}))
            if epoch != leader_epoch:
                return  # leadership moved meanwhile: the next check reloads from the table
            producer = producers.get(batch.producer_id)
            if producer is None or batch.producer_epoch > producer.epoch:
                producer = producers[batch.producer_id] = _Producer(batch.producer_epoch, -1)
            producer.last_sequence = batch.last_sequence
            producer.recent.append((batch.first_sequence, batch.last_sequence, base_offset))
            producer.pending.pop((batch.first_sequence, batch.last_sequence), None)

    def _new_producer(self, topic: str, partition: int, batch: ProducerBatch) -> _Producer:
        producers = self._partitions[(topic, partition)][1]
        producer = producers[batch.producer_id] = _Producer(batch.producer_epoch, -1)
        return producer

    def _producer(self, table: TopicTable, partition: int, leader_epoch: int, producer_id: int) -> _Producer | None:
        key = (table.topic, partition)
        epoch, producers = self._partitions.get(key, (None, {}))
        if epoch != leader_epoch:
            producers = {}
            self._partitions[key] = (leader_epoch, producers)
        producer = producers.get(producer_id)
        if producer is None:
            dt = table.snapshot()
            stored = table.producer_sequence(dt, kafka_producer_id(producer_id), partition)
            if stored is None:
                return None
            recent = recent_kafka_batches(table, dt, partition, producer_id, _RECENT_BATCHES)
            # Without a batch in the newest files the epoch is unknown: the next batch's is taken.
            producer = producers[producer_id] = _Producer(recent[-1][0] if recent else -1, stored)
            producer.recent.extend((first, last, base) for _epoch, first, last, base in recent)
        return producer


def _pending_before(producer: _Producer, batch: ProducerBatch) -> Outcome | None:
    """The pending batch ``batch`` continues, when its predecessor is not stored yet."""
    if batch.producer_epoch != producer.epoch or batch.first_sequence == 0:
        return None
    previous = batch.first_sequence - 1
    if producer.last_sequence == previous:
        return None
    return next((o for (_first, last), o in producer.pending.items() if last == previous), None)


def follows_a_failed_batch(
    follows: Outcome | None, partition: int, batch: ProducerBatch
) -> OutOfOrderSequenceError | None:
    """The error to refuse ``batch`` with when the batch it followed (``follows``) failed:
    it can no longer continue its producer's sequence (see the module doc)."""
    if follows is None or not follows.wait_done(0) or follows.error is None:
        return None
    return OutOfOrderSequenceError(
        f"producer {batch.producer_id} batch {batch.first_sequence}..{batch.last_sequence} to partition "
        f"{partition} follows a batch that failed ({follows.error}); send them again in order"
    )


def _unknown_outcome(outcome: Outcome) -> bool:
    """A batch that failed at the store: its commit may or may not have landed."""
    return outcome.wait_done(0) and isinstance(outcome.error, StorageError)
