"""The open transactions of the partitions a broker leads (Kafka's producer state for
transactions; docs/transactions.md).

Per partition the leader knows, in memory, every producer id with an open transaction (its
first offset and the runs of offsets its batches took since), the newest producer epoch
and coordinator epoch its markers carried, and the partition's aborted runs. From that:

* the **last stable offset** = the first offset of the oldest open transaction, else the
  high watermark (Fetch and ListOffsets for read_committed);
* each group-commit round is planned here (:meth:`PartitionTransactions.plan`): a
  transactional batch of a producer without an open transaction opens one at its offset
  (app transaction ``sparklog.txnopen.<p>.<pid>`` = offset + 1 in the same commit); a
  marker closes it (``txnopen`` = 0) and, for an abort, records the aborted runs
  (``sparklog.aborted.<p>.<start>`` = end) — exactly the producer's own batches, never
  the other producers' batches interleaved in its span;
* a marker with no open transaction is not appended (nothing to close) but its epochs
  still count; a transactional batch of an epoch older than a marker's, or a marker of an
  older coordinator epoch than one seen, is refused (INVALID_PRODUCER_EPOCH,
  TRANSACTION_COORDINATOR_FENCED).

Durability: the app transactions are committed with the records and copied by followers,
so a new leader (another leader epoch) reloads open transactions and aborted runs from its
table; the runs of an open transaction appended under the previous leader are read back
from the segments' ``sparklog.kafka.batches`` metadata when it aborts
(:func:`sparklog.log.txn_log.producer_runs`). Epochs seen on markers are memory only (a
new leader relies on the coordinator's verification of a transaction's first batch).
Thread-safe; :meth:`plan` is called by a topic's committer thread only.
"""

from __future__ import annotations

import bisect
import functools
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from sparklog.broker.producer_state import ProducerBatch
from sparklog.broker.stage import Stage
from sparklog.errors import InvalidProducerEpochError, TransactionCoordinatorFencedError
from sparklog.log.table import TopicTable
from sparklog.log.transactions import aborted_app_id, open_txn_app_id
from sparklog.log.txn_log import ControlRecord, aborted_ranges, open_transactions, producer_runs

__all__ = ["PartitionTransactions", "PendingItem", "RoundPlan"]

Run = tuple[int, int]

log = logging.getLogger(__name__)


@dataclass
class _Open:
    first_offset: int
    runs: list[Run] = field(default_factory=list)
    # Offsets below this were appended under an earlier leader: their runs are read back
    # from the segments if the transaction aborts (-1: every run is in ``runs``).
    unknown_below: int = -1


@dataclass
class _Partition:
    leader_epoch: int
    open: dict[int, _Open]
    aborted: list[Run]
    producer_epochs: dict[int, int] = field(default_factory=dict)
    coordinator_epochs: dict[int, int] = field(default_factory=dict)


class PendingItem(Protocol):
    """What a round holds of a queued request (a :class:`~sparklog.broker.pending_append.PendingAppend`)."""

    partition: int
    producer: ProducerBatch | None
    transactional: bool
    marker: ControlRecord | None

    @property
    def rows(self) -> int:
        """How many records the item appends."""

    def finish(
        self, base_offset: int = -1, log_append_time_ms: int = -1, error: BaseException | None = None
    ) -> None: ...


Item = TypeVar("Item", bound=PendingItem)


@dataclass
class RoundPlan(Generic[Item]):
    """What one round changes: the kept items, and the app transactions of its commit."""

    items: list[Item]
    transactions: Callable[[Mapping[int, int]], dict[str, int]]
    apply: Callable[[Mapping[int, int]], None]


class PartitionTransactions:
    """The transaction state of every partition a broker leads. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._load_lock = threading.Lock()
        self._partitions: dict[tuple[str, int], _Partition] = {}
        self._preloading: set[tuple[str, int, int]] = set()  # (topic, partition, leader epoch)
        self._preloader: Stage | None = None

    def is_loaded(self, topic: str, partition: int, leader_epoch: int) -> bool:
        """Whether the partition's state for ``leader_epoch`` is in memory."""
        with self._lock:
            return self._loaded(topic, partition, leader_epoch) is not None

    def _loaded(self, topic: str, partition: int, leader_epoch: int) -> _Partition | None:
        """The partition's state for ``leader_epoch`` if in memory (under ``self._lock``)."""
        state = self._partitions.get((topic, partition))
        return state if state is not None and state.leader_epoch == leader_epoch else None

    def preload(self, table: TopicTable, partition: int, leader_epoch: int) -> None:
        """Load the partition's state for ``leader_epoch`` on a thread of its own, unless it
        is loaded or loading: a leader's first append calls this, so its consumers' first
        tail read (which needs the last stable offset) does not wait for the table to be read
        — on a store a delta-rs load, hundreds of ms, each partition's in turn."""
        key = (table.topic, partition, leader_epoch)
        with self._lock:
            if self._loaded(*key) is not None or key in self._preloading:
                return
            self._preloading.add(key)
            if self._preloader is None:
                self._preloader = Stage("transaction-state-loader")
            stage = self._preloader
        stage.submit(functools.partial(self._preload, table, partition, leader_epoch))

    def _preload(self, table: TopicTable, partition: int, leader_epoch: int) -> None:
        try:
            self._state(table, partition, leader_epoch)
        except Exception as exc:  # noqa: BLE001 - whoever needs the state loads it and reports
            log.debug("loading the transaction state of %s-%d failed: %s", table.topic, partition, exc)
        finally:
            with self._lock:
                self._preloading.discard((table.topic, partition, leader_epoch))

    # -- readers ---------------------------------------------------------------------------
    def last_stable_offset(self, table: TopicTable, partition: int, leader_epoch: int, high_watermark: int) -> int:
        """The first offset of the oldest open transaction, else ``high_watermark``."""
        state = self._state(table, partition, leader_epoch)
        with self._lock:
            return min([high_watermark, *(o.first_offset for o in state.open.values())])

    def aborted(self, table: TopicTable, partition: int, leader_epoch: int) -> list[Run]:
        """The partition's aborted runs, in offset order."""
        state = self._state(table, partition, leader_epoch)
        with self._lock:
            return list(state.aborted)

    def is_open(self, topic: str, partition: int, leader_epoch: int, producer_id: int) -> bool:
        """Whether this leader tracks an open transaction of ``producer_id`` (False when the
        partition's state is not loaded: the caller verifies with the coordinator's state)."""
        with self._lock:
            state = self._partitions.get((topic, partition))
            return state is not None and state.leader_epoch == leader_epoch and producer_id in state.open

    # -- the committer's side --------------------------------------------------------------
    def plan(self, table: TopicTable, leader_epochs: Mapping[int, int], items: Sequence[Item]) -> RoundPlan[Item]:
        """Decide the round's transactional items (see the module doc). Items refused or
        not appended are finished here; the returned plan keeps the rest in order."""
        kept: list[Item] = []
        rows: dict[int, int] = {}
        opened: dict[int, dict[int, _Open]] = {}  # partition -> pid -> (relative offsets)
        # partition -> (pid, commit, continues an earlier round's transaction, runs read back, runs this round)
        closed: dict[int, list[tuple[int, bool, bool, list[Run], list[Run]]]] = {}
        epochs: list[tuple[int, int, int, int]] = []  # (partition, pid, producer epoch, coordinator epoch)
        for item in items:
            partition = item.partition
            if item.marker is None and not item.transactional:
                kept.append(item)
                rows[partition] = rows.get(partition, 0) + item.rows
                continue
            state = self._state(table, partition, leader_epochs[partition])
            position = rows.get(partition, 0)
            if item.marker is not None:
                marker = item.marker
                pid = marker.producer_id
                if marker.coordinator_epoch < state.coordinator_epochs.get(pid, -1):
                    item.finish(error=TransactionCoordinatorFencedError(_fenced(table, partition, marker)))
                    continue
                epochs.append((partition, pid, marker.producer_epoch, marker.coordinator_epoch))
                fresh = opened.get(partition, {}).pop(pid, None)
                earlier = pid in state.open and not any(c[0] == pid for c in closed.get(partition, []))
                continues = fresh is None or fresh.first_offset < 0  # the transaction began in an earlier round
                if fresh is None and not earlier:
                    self._note_epochs(state, pid, marker.producer_epoch, marker.coordinator_epoch)
                    item.finish()  # nothing open: nothing to close
                    continue
                scanned: list[Run] = []
                if continues and not marker.commit:
                    scanned = self._known_runs(table, partition, pid, state.open[pid])
                relative = list(fresh.runs) if fresh is not None else []
                closed.setdefault(partition, []).append((pid, marker.commit, continues, scanned, relative))
                kept.append(item)
                rows[partition] = position + 1
                continue
            batch = item.producer
            assert batch is not None, "transactional batches are idempotent"
            newest = state.producer_epochs.get(batch.producer_id, -1)
            if batch.producer_epoch < newest:
                item.finish(
                    error=InvalidProducerEpochError(
                        f"producer {batch.producer_id} epoch {batch.producer_epoch} is older than epoch {newest} "
                        f"of a transaction marker in {table.topic}-{partition}: this producer was fenced"
                    )
                )
                continue
            run = (position, position + item.rows)
            pending = opened.setdefault(partition, {})
            if batch.producer_id in pending:
                _extend(pending[batch.producer_id].runs, run)
            elif batch.producer_id in state.open and not any(
                c[0] == batch.producer_id for c in closed.get(partition, [])
            ):
                pending[batch.producer_id] = _Open(-1, [run])  # continues a transaction opened before
            else:
                pending[batch.producer_id] = _Open(position, [run])
            kept.append(item)
            rows[partition] = run[1]

        def transactions(bases: Mapping[int, int]) -> dict[str, int]:
            versions: dict[str, int] = {}
            for partition, pids in opened.items():
                for pid, txn in pids.items():
                    if txn.first_offset >= 0:
                        versions[open_txn_app_id(partition, pid)] = bases[partition] + txn.first_offset + 1
            for partition, ends in closed.items():
                for pid, commit, continues, scanned, relative in ends:
                    versions[open_txn_app_id(partition, pid)] = 0
                    if not commit:
                        known = self._runs_of(table, partition, pid) if continues else []
                        for start, end in _aborted_runs(known, scanned, relative, bases[partition]):
                            versions[aborted_app_id(partition, start)] = end
            return versions

        def apply(bases: Mapping[int, int]) -> None:
            with self._lock:
                for partition, pid, producer_epoch, coordinator_epoch in epochs:
                    state = self._partitions[(table.topic, partition)]
                    self._note_epochs(state, pid, producer_epoch, coordinator_epoch)
                for partition, ends in closed.items():
                    state = self._partitions[(table.topic, partition)]
                    for pid, commit, continues, scanned, relative in ends:
                        before = state.open.pop(pid, None) if continues else None
                        if not commit:
                            runs = _aborted_runs(before.runs if before else [], scanned, relative, bases[partition])
                            for run in runs:
                                bisect.insort(state.aborted, run)
                for partition, pids in opened.items():
                    state = self._partitions[(table.topic, partition)]
                    base = bases[partition]
                    for pid, txn in pids.items():
                        runs = [(base + s, base + e) for s, e in txn.runs]
                        current = state.open.get(pid)
                        if current is None or txn.first_offset >= 0:
                            state.open[pid] = _Open(base + txn.first_offset, runs)
                        else:
                            for run in runs:
                                _extend(current.runs, run)

        return RoundPlan(kept, transactions, apply)

    def _runs_of(self, table: TopicTable, partition: int, pid: int) -> list[Run]:
        with self._lock:
            state = self._partitions.get((table.topic, partition))
            txn = state.open.get(pid) if state is not None else None
            return list(txn.runs) if txn is not None else []

    @staticmethod
    def _known_runs(table: TopicTable, partition: int, pid: int, txn: _Open) -> list[Run]:
        """Runs appended under an earlier leader, read back from the segments."""
        if txn.unknown_below < 0:
            return []
        return producer_runs(table, table.snapshot(), partition, pid, txn.first_offset, txn.unknown_below)

    @staticmethod
    def _note_epochs(state: _Partition, pid: int, producer_epoch: int, coordinator_epoch: int) -> None:
        state.producer_epochs[pid] = max(state.producer_epochs.get(pid, -1), producer_epoch)
        state.coordinator_epochs[pid] = max(state.coordinator_epochs.get(pid, -1), coordinator_epoch)

    def _state(self, table: TopicTable, partition: int, leader_epoch: int) -> _Partition:
        """The partition's state for ``leader_epoch``, loaded from the table once (under a
        lock of its own, so a fetch and the committer never load it twice)."""
        with self._lock:
            state = self._loaded(table.topic, partition, leader_epoch)
        if state is not None:
            return state
        with self._load_lock:
            with self._lock:
                state = self._loaded(table.topic, partition, leader_epoch)
            return state if state is not None else self._load(table, partition, leader_epoch)

    def _load(self, table: TopicTable, partition: int, leader_epoch: int) -> _Partition:
        key = (table.topic, partition)
        dt = table.snapshot()
        end = table.log_end(dt, partition)
        loaded = _Partition(
            leader_epoch,
            {pid: _Open(first, [], end) for pid, first in open_transactions(dt, partition).items()},
            aborted_ranges(dt, partition),
        )
        with self._lock:
            self._partitions[key] = loaded
        return loaded


def _extend(runs: list[Run], run: Run) -> None:
    if runs and runs[-1][1] == run[0]:
        runs[-1] = (runs[-1][0], run[1])
    else:
        runs.append(run)


def _aborted_runs(known: list[Run], scanned: list[Run], relative: list[Run], base: int) -> list[Run]:
    """Every run of an aborted transaction: read back, appended earlier, appended this round."""
    runs: list[Run] = []
    for run in sorted({*scanned, *known}) + [(base + s, base + e) for s, e in relative]:
        _extend(runs, run)
    return runs


def _fenced(table: TopicTable, partition: int, marker: object) -> str:
    return (
        f"a transaction marker for {table.topic}-{partition} comes from an older coordinator than one already "
        f"seen ({marker}); a newer coordinator completes this transaction"
    )
