"""Where a Spark task's records go in each partition: after those of every lower task.

A Spark produce job (one plan: the write leases of every partition of a topic under one
owner) gives each partition's records offsets in the DataFrame's order: by task index, then
row order. So a time-ordered DataFrame gives time-ordered partitions, and the same input
gets the same offsets however long each task takes. A task's first offset in partition
``p`` is the log end at planning plus the records every lower task has for ``p``; tasks
learn those counts from each other here, under the job's directory
``<writer lease of its first partition>/<owner>/order.<epoch>`` (dropped with the leases):

* ``<task>`` (persistent, JSON :class:`TaskPlacement`): created once per task index, by the
  first attempt that knows its counts; a retried or speculative attempt reuses it, so it
  writes the same offsets (different counts: the input is not deterministic, the job fails).
  ``placed`` false marks a *provisional* task: its bases were guessed, the commit moves it.
* ``run.<task>`` (ephemeral): an attempt of the task is running.

A task waits for the record of the nearest lower task (ZooKeeper watches, no polling) while
that task runs. A lower task that is neither recorded nor running (not scheduled yet, or
retried after a failure) is waited for ``unstarted_wait_s`` only: a waiting task holds a
Spark slot, and the missing task may need it (all slots held by waiters would deadlock). The
task then goes provisional. Offsets are decided by the driver-side commit in any case
(:func:`sparklog.spark.writer.commit_produce` rewrites the files of tasks whose bases differ
from the task-order ones), so correctness never depends on this protocol; it only makes the
rewrites rare (none when Spark starts tasks in index order, as it does without locality).
Recording a task also renews the leases of the partitions it writes and fails fast when one
was lost; waiting tasks renew them too, so a long-running lower task keeps the job's leases.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType

from kazoo.client import TransactionRequest
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from sparklog import clock
from sparklog.errors import FencedError
from sparklog.metadata import zkdata
from sparklog.metadata.lease import LeaseGrant
from sparklog.metadata.session import ZkSession, zk_errors
from sparklog.metadata.zkdata import WriterLeaseRecord, decode_json, encode

__all__ = ["TaskOrder", "TaskPlacement"]


@dataclass(frozen=True)
class TaskPlacement:
    """A task's first offset per partition (every partition of the job) and its record counts."""

    bases: dict[int, int]
    counts: dict[int, int]  # partitions with records only
    placed: bool  # False: provisional bases, the commit moves the task's files

    def encode(self) -> bytes:
        return json.dumps(
            {
                "bases": {str(p): b for p, b in self.bases.items()},
                "counts": {str(p): n for p, n in self.counts.items()},
                "placed": self.placed,
            }
        ).encode()

    @classmethod
    def decode(cls, data: bytes, path: str) -> TaskPlacement:
        raw = decode_json(data, path)
        return cls(
            {int(p): int(b) for p, b in raw["bases"].items()},
            {int(p): int(n) for p, n in raw["counts"].items()},
            bool(raw["placed"]),
        )


class TaskOrder:
    """One task attempt's part in the job's ordering; a context manager marking it running."""

    def __init__(self, zk: ZkSession, grants: Sequence[LeaseGrant], task: int, lease_ms: int) -> None:
        if not grants:
            raise ValueError("a produce plan holds at least one lease")
        self.zk = zk
        self.grants = {g.partition: g for g in grants}
        first = min(grants, key=lambda g: g.partition)
        self.topic, self.owner = first.topic, first.owner
        self.task, self.lease_ms = task, lease_ms
        # Keyed by the first lease's epoch: a run adopting a killed run's leases under the
        # same owner (consume_into) must not take that run's placements.
        self.owner_path = f"{zkdata.writer_path(first.topic, first.partition)}/{first.owner}"
        self.path = f"{self.owner_path}/order.{first.epoch}"
        self._marker = f"{self.path}/run.{task}"
        self._marked = False  # a speculative twin may hold the marker: only its creator deletes it

    def __enter__(self) -> TaskOrder:
        client = self.zk.client
        with zk_errors(f"registering Spark task {self.task} of {self.owner} on {self.topic}"):
            for path in (self.owner_path, self.path):
                try:
                    client.create(path)  # never ensure_path: it would re-create a deleted topic's znodes
                except NodeExistsError:
                    pass
                except NoNodeError:
                    raise FencedError(
                        f"Write lease of topic {self.topic} is gone (was the topic deleted?); the Spark job of "
                        f"{self.owner} is fenced"
                    ) from None
            try:
                client.create(self._marker, ephemeral=True)
                self._marked = True
            except NodeExistsError:
                pass
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._marked:
            try:
                self.zk.client.delete(self._marker)
            except Exception:  # noqa: BLE001 - the ephemeral node goes with the session anyway
                pass

    def place(
        self, counts: Mapping[int, int], start_offsets: Mapping[int, int], unstarted_wait_s: float
    ) -> TaskPlacement:
        """This task's bases: after every lower task's records (``placed``), or provisional
        ones when a lower task is neither recorded nor running for ``unstarted_wait_s``."""
        counts = {p: n for p, n in counts.items() if n}
        with zk_errors(f"placing Spark task {self.task} of {self.owner} on {self.topic}"):
            existing = self._read(self.task)
            if existing is not None:
                return self._reuse(existing, counts)
            lower: dict[int, TaskPlacement] = {}
            unstarted_since: dict[int, float] = {}
            renewed = time.monotonic()
            while True:
                changed = threading.Event()
                decided, wait_s = self._walk(lower, unstarted_since, start_offsets, unstarted_wait_s, changed)
                if decided is not None:
                    return self._record(TaskPlacement(decided[0], counts, decided[1]))
                if time.monotonic() - renewed >= self.lease_ms / 3000.0:
                    self._renew_leases(counts)
                    renewed = time.monotonic()
                changed.wait(min(wait_s, self.lease_ms / 3000.0))

    def _walk(
        self,
        lower: dict[int, TaskPlacement],
        unstarted_since: dict[int, float],
        start_offsets: Mapping[int, int],
        unstarted_wait_s: float,
        changed: threading.Event,
    ) -> tuple[tuple[dict[int, int], bool] | None, float]:
        """``((bases, placed), _)`` once decided, else ``(None, how long to wait at most)``
        with watches set that fire ``changed``: down from the task below, sum the counts
        until a placed task (or task 0's start)."""
        client = self.zk.client
        below: dict[int, int] = {}
        for task in range(self.task - 1, -1, -1):
            record = lower.get(task)
            if record is None and client.exists(f"{self.path}/{task}", watch=lambda _event: changed.set()):
                record = self._read(task)
                if record is None:  # dropped meanwhile (the job ended): look again
                    return None, 0.0
                lower[task] = record
            if record is None:
                if client.exists(f"{self.path}/run.{task}", watch=lambda _event: changed.set()):
                    unstarted_since.pop(task, None)
                    return None, unstarted_wait_s
                waited = time.monotonic() - unstarted_since.setdefault(task, time.monotonic())
                if waited >= unstarted_wait_s:
                    return (dict(start_offsets), False), 0.0
                return None, unstarted_wait_s - waited
            for partition, count in record.counts.items():
                below[partition] = below.get(partition, 0) + count
            if record.placed:
                return ({p: b + below.get(p, 0) for p, b in record.bases.items()}, True), 0.0
        return ({p: start + below.get(p, 0) for p, start in start_offsets.items()}, True), 0.0

    def _read(self, task: int) -> TaskPlacement | None:
        path = f"{self.path}/{task}"
        try:
            data, _stat = self.zk.client.get(path)
        except NoNodeError:
            return None
        return TaskPlacement.decode(data, path)

    def _reuse(self, existing: TaskPlacement, counts: dict[int, int]) -> TaskPlacement:
        if existing.counts != counts:
            raise FencedError(
                f"Spark task {self.task} of {self.owner} re-ran with record counts {counts} per partition of "
                f"{self.topic} but an earlier attempt had {existing.counts}: the input is not deterministic; "
                "cache or checkpoint the DataFrame before writing"
            )
        return existing

    def _record(self, placement: TaskPlacement) -> TaskPlacement:
        """Create this task's record, renewing (and checking) the leases it writes under in
        the same multi-op; an attempt that recorded first wins."""
        client = self.zk.client
        while True:
            txn = client.transaction()
            self._lease_ops(txn, placement.counts)
            txn.create(f"{self.path}/{self.task}", placement.encode())
            results = txn.commit()
            if not any(isinstance(r, Exception) for r in results):
                return placement
            if any(isinstance(r, NodeExistsError) for r in results):
                return self._reuse(self._read(self.task) or placement, placement.counts)
            if not any(isinstance(r, BadVersionError) for r in results):
                failed = next(r for r in results if isinstance(r, Exception))
                raise FencedError(
                    f"Spark task {self.task} of {self.owner} could not record its place on {self.topic}: "
                    f"{type(failed).__name__} (the job was aborted or the topic deleted meanwhile); the task is fenced"
                )

    def _renew_leases(self, counts: Mapping[int, int]) -> None:
        while True:
            txn = self.zk.client.transaction()
            if not self._lease_ops(txn, counts):
                return
            if not any(isinstance(r, Exception) for r in txn.commit()):
                return

    def _lease_ops(self, txn: TransactionRequest, partitions: Mapping[int, int]) -> int:
        """Add a compare-and-set pushing each lease's expiry to ``txn``; FencedError for a lost lease."""
        for partition in sorted(partitions):
            grant = self.grants[partition]
            path = zkdata.writer_path(self.topic, partition)
            data, stat = self.zk.client.get(path)
            record = WriterLeaseRecord.decode(data, path)
            if record.owner != grant.owner or record.epoch != grant.epoch or record.released:
                raise FencedError(
                    f"Write lease of partition {self.topic}-{partition} was lost by {grant.owner} (epoch "
                    f"{grant.epoch}); now {record.owner} (epoch {record.epoch}). The job is fenced."
                )
            expires = max(record.expires_ms, clock.now_ms() + self.lease_ms)
            renewed = WriterLeaseRecord(record.owner, record.epoch, expires, False, record.next_offset)
            txn.set_data(path, encode(renewed), version=stat.version)
        return len(partitions)
