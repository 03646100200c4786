"""The transaction coordinator in a broker (Kafka's TransactionCoordinator; docs/transactions.md).

A transactional id is coordinated by the leader of ``__consumer_offsets`` partition
``offsets_partition_for(id)`` (FindCoordinator key type 1); any other broker answers
NOT_COORDINATOR. Its state lives in ZooKeeper (:mod:`sparklog.metadata.transactions`), not in
the coordinator's memory, so a new coordinator takes over with nothing to load.

State machine (Kafka's): Empty → (AddPartitions/AddOffsets) Ongoing → (EndTxn, or the
coordinator itself after ``transaction.timeout.ms``) PrepareCommit | PrepareAbort →
(every partition's leader wrote the marker, pending group offsets applied or dropped)
CompleteCommit | CompleteAbort → (AddPartitions) Ongoing ...

Invariants:

* every transition is a compare-and-set of the znode (two coordinators never both move a
  transaction); a Prepare* decision is durable before the first marker, and whoever
  coordinates next (after a failover: the new leader of the offsets partition) completes
  it — :meth:`TransactionCoordinator.run` sweeps every second;
* InitProducerId gives a transactional id a new epoch (or a new producer id when the epoch
  is exhausted); a request of an older epoch is PRODUCER_FENCED (INVALID_PRODUCER_EPOCH for
  old request versions: the API layer maps it); an Ongoing transaction of the previous
  epoch is aborted first under a bumped epoch (the new instance gets CONCURRENT_TRANSACTIONS
  and retries until that is complete);
* a transaction open longer than its ``transaction.timeout.ms`` is aborted by the
  coordinator with the epoch bumped (so the producer's late batches and requests are
  fenced); that producer's own EndTxn(abort) of the old epoch is then answered as done, and
  its InitProducerId with its id and old epoch (KIP-360) recovers it;
* EndTxn is answered once its Prepare* decision is stored, as Kafka answers it; the markers
  are written afterwards by the :class:`~sparklog.broker.transactions.completer.TransactionCompleter`
  (a read_committed consumer sees a committed transaction once they land, shortly after
  ``commit_transaction`` returns). Until the transaction is Complete*, every other request
  of its id is answered CONCURRENT_TRANSACTIONS (clients retry), a retried EndTxn too
  (Kafka's answer in Prepare*; NONE once Complete*); no request handler waits for markers.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

from sparklog import clock
from sparklog.broker.groups.coordinator import BrokerGroups
from sparklog.broker.transactions.completer import TransactionCompleter
from sparklog.broker.transactions.markers import MarkerWriter
from sparklog.broker.transactions.txn_offsets import complete_group_offsets
from sparklog.errors import (
    ConcurrentTransactionsError,
    InvalidProducerEpochError,
    InvalidProducerIdMappingError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    ProducerFencedError,
    SparklogError,
    UnknownPartitionError,
)
from sparklog.log.txn_log import ControlRecord
from sparklog.metadata.producer_ids import ProducerIdBlocks
from sparklog.metadata.transactions import (
    COMPLETE_ABORT,
    COMPLETE_COMMIT,
    EMPTY,
    ONGOING,
    PREPARE_ABORT,
    PREPARE_COMMIT,
    TransactionRecord,
    TransactionStore,
)
from sparklog.model.topic import OFFSETS_TOPIC, TopicPartition

__all__ = ["SWEEP_INTERVAL_MS", "OperationNotAttempted", "TransactionCoordinator"]

log = logging.getLogger(__name__)

SWEEP_INTERVAL_MS = 1_000  # Kafka's transaction.abort.timed.out.transaction.cleanup.interval.ms is 10 s
MARKER_TIMEOUT_MS = 10_000  # one attempt at a transaction's markers
_MAX_EPOCH = 2**15 - 1


class TransactionCoordinator:
    """The transactional ids this broker coordinates. Thread-safe."""

    def __init__(
        self,
        groups: BrokerGroups,
        producer_ids: ProducerIdBlocks,
        markers: MarkerWriter,
        transaction_max_timeout_ms: int,
    ) -> None:
        self.groups = groups
        self.replicas = groups.replicas
        self.store = TransactionStore(self.replicas.zk)
        self.producer_ids = producer_ids
        self.markers = markers
        self.transaction_max_timeout_ms = transaction_max_timeout_ms
        self._locks: dict[str, threading.Lock] = {}
        self._locks_lock = threading.Lock()
        self._producers: dict[int, str] = {}  # producer id -> transactional id (never changes)
        self.completer = TransactionCompleter(self.complete)

    # -- requests --------------------------------------------------------------------------
    def init_producer_id(
        self, transactional_id: str, timeout_ms: int, producer_id: int = -1, producer_epoch: int = -1
    ) -> tuple[int, int]:
        """InitProducerId with a transactional id: ``(producer id, epoch)`` to use."""
        self._coordinator_epoch(transactional_id)
        if not 0 < timeout_ms <= self.transaction_max_timeout_ms:
            raise InvalidTransactionTimeoutError(
                f"transaction.timeout.ms={timeout_ms} of {transactional_id!r} is not within 1.."
                f"{self.transaction_max_timeout_ms} (the broker's transaction.max.timeout.ms)"
            )
        with self._lock(transactional_id):
            found = self.store.get(transactional_id)
            now_ms = clock.now_ms()
            if found is None:
                new_id = self.producer_ids.next_id()
                self.store.map_producer(new_id, transactional_id)
                self.store.create(TransactionRecord(transactional_id, new_id, 0, timeout_ms, updated_ms=now_ms))
                return new_id, 0
            record, version = found
            if producer_id >= 0 and (
                producer_id != record.producer_id
                or producer_epoch not in (record.producer_epoch, record.last_producer_epoch)
            ):
                raise ProducerFencedError(
                    f"producer {producer_id} epoch {producer_epoch} of {transactional_id!r} is not the current "
                    f"(producer {record.producer_id} epoch {record.producer_epoch}): a newer instance took over"
                )
            self.refuse_while_completing(record)
            if record.state == ONGOING:
                # Fence the previous instance: its transaction is aborted under a newer epoch.
                fenced = record.evolve(
                    producer_epoch=record.producer_epoch + 1,
                    last_producer_epoch=-1,
                    state=PREPARE_ABORT,
                    updated_ms=now_ms,
                )
                self.store.update(fenced, version)
                self.completer.submit(transactional_id)
                raise ConcurrentTransactionsError(
                    f"aborting the open transaction of the previous instance of {transactional_id!r}; retry"
                )
            new_id, epoch = record.producer_id, record.producer_epoch + 1
            if epoch >= _MAX_EPOCH:
                new_id, epoch = self.producer_ids.next_id(), 0
                self.store.map_producer(new_id, transactional_id)
            self.store.update(
                record.evolve(
                    producer_id=new_id,
                    producer_epoch=epoch,
                    last_producer_epoch=-1,
                    timeout_ms=timeout_ms,
                    state=EMPTY,
                    partitions=[],
                    groups=[],
                    started_ms=-1,
                    updated_ms=now_ms,
                ),
                version,
            )
            return new_id, epoch

    def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Sequence[TopicPartition],
        *,
        verify_only: bool = False,
        group_id: str | None = None,
    ) -> dict[TopicPartition, BaseException | None]:
        """AddPartitionsToTxn (and AddOffsetsToTxn: ``group_id`` with its offsets partition).
        Per partition None or its error; one unknown partition fails the rest with
        OPERATION_NOT_ATTEMPTED (``None`` key: the caller maps it) and changes nothing."""
        self._coordinator_epoch(transactional_id)
        with self._lock(transactional_id):
            record, version = self.current_record(transactional_id, producer_id, producer_epoch)
            self.refuse_while_completing(record)
            errors: dict[TopicPartition, BaseException | None] = {}
            for topic, partition in partitions:
                try:
                    self.replicas.check_partition(topic, partition, max_age_ms=1000)
                    errors[(topic, partition)] = None
                except SparklogError as exc:
                    errors[(topic, partition)] = exc
            if any(e is not None for e in errors.values()):
                return {tp: e if e is not None else OperationNotAttempted() for tp, e in errors.items()}
            if verify_only:
                present = set(record.topic_partitions) if record.state == ONGOING else set()
                return {
                    tp: None if tp in present else InvalidTxnStateError(f"{tp} is not in the transaction")
                    for tp in errors
                }
            ongoing = record.state == ONGOING
            known = record.topic_partitions if ongoing else []
            added = [tp for tp in partitions if tp not in known]
            groups = list(record.groups) if ongoing else []
            if group_id is not None and group_id not in groups:
                groups.append(group_id)
            if added or not ongoing or groups != record.groups:
                now_ms = clock.now_ms()
                self.store.update(
                    record.evolve(
                        state=ONGOING,
                        partitions=[[t, p] for t, p in [*known, *added]],
                        groups=groups,
                        started_ms=record.started_ms if ongoing else now_ms,
                        last_producer_epoch=-1,
                        updated_ms=now_ms,
                    ),
                    version,
                )
            return errors

    def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str) -> None:
        """AddOffsetsToTxn: the group's offsets partition joins the transaction."""
        partition = self.groups.partition_of(group_id)
        errors = self.add_partitions(
            transactional_id, producer_id, producer_epoch, [(OFFSETS_TOPIC, partition)], group_id=group_id
        )
        for error in errors.values():
            if error is not None:
                raise error

    def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool) -> None:
        """EndTxn: commit or abort the ongoing transaction (see the module doc)."""
        self._coordinator_epoch(transactional_id)
        with self._lock(transactional_id):
            found = self.store.get(transactional_id)
            if found is None or found[0].producer_id != producer_id:
                raise InvalidProducerIdMappingError(
                    f"producer {producer_id} is not the producer of {transactional_id!r}"
                )
            record, version = found
            wanted = PREPARE_COMMIT if commit else PREPARE_ABORT
            done = COMPLETE_COMMIT if commit else COMPLETE_ABORT
            if producer_epoch != record.producer_epoch:
                # The coordinator aborted this epoch's transaction itself (timeout): its abort is done.
                if producer_epoch == record.last_producer_epoch and not commit and record.state == COMPLETE_ABORT:
                    return
                if producer_epoch == record.last_producer_epoch and not commit:
                    self.refuse_while_completing(record)
                raise ProducerFencedError(
                    f"producer {producer_id} epoch {producer_epoch} of {transactional_id!r} is fenced by epoch "
                    f"{record.producer_epoch}"
                )
            if record.state == done:
                return  # a retry of a completed EndTxn
            if record.state == wanted:
                # A retry while the markers are written: Kafka answers CONCURRENT_TRANSACTIONS
                # here (NONE once complete), so the client learns when it may go on.
                self.refuse_while_completing(record)
            if record.state != ONGOING:
                raise InvalidTxnStateError(
                    f"EndTxn({'commit' if commit else 'abort'}) of {transactional_id!r} in state {record.state}: "
                    "there is no ongoing transaction to end"
                )
            self.store.update(record.evolve(state=wanted, updated_ms=clock.now_ms()), version)
        # The decision is durable: answer now, the markers follow.
        self.completer.submit(transactional_id)

    @staticmethod
    def refuse_while_completing(record: TransactionRecord) -> None:
        """CONCURRENT_TRANSACTIONS while ``record``'s transaction is decided but not complete
        (Kafka's answer; clients retry). Its completion is under way already: handed to the
        completer when it was decided, and again by the sweep while it stays Prepare*."""
        if record.state in (PREPARE_COMMIT, PREPARE_ABORT):
            raise ConcurrentTransactionsError(
                f"the last transaction of {record.transactional_id!r} is being completed ({record.state}); retry"
            )

    def verify_batch(self, producer_id: int, producer_epoch: int, topic: str, partition: int) -> None:
        """A partition leader's check of a transaction's first batch in a partition
        (Kafka's KIP-890 verification): the producer id belongs to a transactional id whose
        current epoch this is, with an ongoing transaction that holds the partition."""
        transactional_id = self._producers.get(producer_id) or self.store.transactional_id_of(producer_id)
        if transactional_id is None:
            raise InvalidTxnStateError(f"producer {producer_id} is not a transactional producer")
        self._producers[producer_id] = transactional_id
        found = self.store.get(transactional_id)
        if found is None or found[0].producer_id != producer_id or producer_epoch < found[0].producer_epoch:
            raise InvalidProducerEpochError(
                f"producer {producer_id} epoch {producer_epoch} of {transactional_id!r} was fenced by a newer epoch"
            )
        record = found[0]
        if record.state != ONGOING or (topic, partition) not in record.topic_partitions:
            raise InvalidTxnStateError(
                f"{topic}-{partition} is not in an ongoing transaction of {transactional_id!r} (state {record.state}); "
                "AddPartitionsToTxn first"
            )

    # -- completion ------------------------------------------------------------------------
    def complete(self, transactional_id: str, timeout_ms: int = MARKER_TIMEOUT_MS) -> bool:
        """Write the markers of a Prepare* transaction and mark it complete; False when some
        partition could not be reached yet (the sweep tries again). Called by the completer
        only, one thread per id at a time."""
        coordinator_epoch = self._coordinator_epoch(transactional_id)
        # Without the id's lock: nothing but a completion moves a Prepare* record (requests are
        # refused meanwhile), so the requests that are refused need not wait for the markers;
        # the final compare-and-set still loses to a successor coordinator that completed it.
        found = self.store.get(transactional_id)
        if found is None or found[0].state not in (PREPARE_COMMIT, PREPARE_ABORT):
            return True
        record, version = found
        commit = record.state == PREPARE_COMMIT
        marker = ControlRecord(record.producer_id, record.producer_epoch, commit, coordinator_epoch)
        outcome = self.markers.write(marker, record.topic_partitions, timeout_ms, self.offsets_marker)
        failed = {tp: e for tp, e in outcome.items() if e is not None}
        if failed:
            log.info("transaction %r: markers not written yet to %s", transactional_id, failed)
            return False
        final = COMPLETE_COMMIT if commit else COMPLETE_ABORT
        self.store.update(record.evolve(state=final, partitions=[], groups=[], updated_ms=clock.now_ms()), version)
        return True

    def offsets_marker(self, marker: ControlRecord, partition: int) -> None:
        """A marker reached ``__consumer_offsets`` partition ``partition``, which this broker
        leads: apply (commit) or drop (abort) the producer's pending offsets of its groups."""
        for group_id in self.store.pending_groups(marker.producer_id):
            if self.groups.partition_of(group_id) == partition:
                complete_group_offsets(self.store, self.groups.offsets, marker.producer_id, group_id, marker.commit)

    def run(self, stop: threading.Event) -> None:
        """The completer's threads, and every :data:`SWEEP_INTERVAL_MS`: abort transactions
        past their timeout and hand decided ones to the completer, for the ids this broker
        coordinates (also those a failed coordinator left half done, or a completion that
        failed)."""
        self.completer.start(stop)
        while not stop.wait(SWEEP_INTERVAL_MS / 1000):
            try:
                self.sweep()
            except Exception as exc:  # noqa: BLE001 - ZooKeeper or storage trouble: the next sweep retries
                log.warning("transaction sweep failed: %s", exc)
        self.completer.join(MARKER_TIMEOUT_MS / 1000)

    def sweep(self) -> None:
        for transactional_id in self.store.transactional_ids():
            try:
                self._coordinator_epoch(transactional_id)
            except SparklogError:
                continue  # another broker coordinates it
            try:
                self._sweep_one(transactional_id)
            except SparklogError as exc:
                log.info("transaction %r: sweep deferred: %s", transactional_id, exc)

    def _sweep_one(self, transactional_id: str) -> None:
        with self._lock(transactional_id):
            found = self.store.get(transactional_id)
            if found is None:
                return
            record, version = found
            if record.state == ONGOING and clock.now_ms() - record.started_ms > record.timeout_ms:
                log.info(
                    "transaction %r of producer %d epoch %d open longer than %d ms: aborting",
                    transactional_id,
                    record.producer_id,
                    record.producer_epoch,
                    record.timeout_ms,
                )
                timed_out = record.evolve(
                    state=PREPARE_ABORT,
                    producer_epoch=record.producer_epoch + 1,
                    last_producer_epoch=record.producer_epoch,
                    updated_ms=clock.now_ms(),
                )
                self.store.update(timed_out, version)
            elif record.state not in (PREPARE_COMMIT, PREPARE_ABORT):
                return
        self.completer.submit(transactional_id)

    # -- helpers ---------------------------------------------------------------------------
    def _coordinator_epoch(self, transactional_id: str) -> int:
        """The coordinator epoch (leader epoch of the id's offsets partition) when this broker
        coordinates ``transactional_id``; else ``NotCoordinatorError``."""
        partition = self.groups.check_coordinator(transactional_id)
        return int(self.replicas.states(OFFSETS_TOPIC, [partition])[partition].leader_epoch)

    def current_record(
        self, transactional_id: str, producer_id: int, producer_epoch: int
    ) -> tuple[TransactionRecord, int]:
        found = self.store.get(transactional_id)
        if found is None or found[0].producer_id != producer_id:
            raise InvalidProducerIdMappingError(
                f"producer {producer_id} is not the producer of transactional id {transactional_id!r}; "
                "call InitProducerId (init_transactions) first"
            )
        if producer_epoch != found[0].producer_epoch:
            raise ProducerFencedError(
                f"producer {producer_id} epoch {producer_epoch} of {transactional_id!r} is fenced by epoch "
                f"{found[0].producer_epoch}"
            )
        return found

    def _lock(self, transactional_id: str) -> threading.Lock:
        with self._locks_lock:
            lock = self._locks.get(transactional_id)
            if lock is None:
                lock = self._locks[transactional_id] = threading.Lock()
            return lock


class OperationNotAttempted(UnknownPartitionError):
    """Kafka's OPERATION_NOT_ATTEMPTED: another partition of the request was refused."""
