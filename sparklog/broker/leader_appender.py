"""Group commit for the partitions a broker leads, pipelined (DESIGN §14, §15).

Produce requests from every connection are queued per topic. Each topic has three stages,
a thread each:

1. the **builder** takes everything queued, reads the records of all its producers' batches
   in one native pass (:func:`~sparklog.broker.pending_append.read_round`), plans the
   round's transactions, takes the write leases and writes the round's segment files
   (:func:`sparklog.log.append.prepare_append`) for every partition of the round;
2. the **committer** makes a built round durable (its files fsynced when acks=all) and
   commits it, one Delta commit for every partition of the round, then answers it;
3. the **ISR waiter** answers acks=all rounds once every in-sync replica holds them
   (:func:`~sparklog.runtime.produce_request.await_in_sync_replicas`), so a follower that
   lags holds up those acknowledgements only, never the next commits.

While round N is fsynced and committed, round N+1 is built: it continues the log where N
will leave it (a :class:`~sparklog.log.append.ProjectedView` of the log plus N's commit).
One round at most is in flight behind the builder. What arrives meanwhile waits for the next
round, so latency is about one commit and throughput many requests per commit; on a store
rounds are paced too (:mod:`sparklog.broker.round_pacing`).

Invariants:

* a request is appended only while this broker leads its partition: the partition state
  (ZooKeeper) names this broker, and the commit carries the state's leader epoch, so a
  leadership change that raced the round fails it (``NotLeaderError``) instead of writing
  under a stale epoch (invariant 4);
* a request's records get contiguous offsets in their order; requests of one round are
  placed in arrival order, and rounds commit in the order they were built, so one
  connection's requests keep their order;
* a round is committed only onto the log it was built for
  (:meth:`~sparklog.log.append.PreparedAppend.check`): when the round before it failed, or
  another writer committed in between, its files are discarded and it is built again after
  the round before it (order kept);
* a round of a Kafka transaction (transactional batches, markers) is planned only once the
  round before it is settled and settled before the next is planned (a plan depends on the
  transactions' state after the previous commit); a write lease is waited for, taken over or
  released only while no round built under it is in flight;
* a request is answered only once its commit returned (acks 0/1) or every in-sync replica
  holds it (acks=all); ``min.insync.replicas`` is checked before appending;
* one failing round fails only its own requests; nothing that was not committed is
  reported as appended.

Metrics (:meth:`~sparklog.broker.metrics.BrokerMetrics.commit_round`): each round's latency
(build to acknowledgement), records, wire bytes and append time; its producers' records and
bytes are the topic's MessagesInPerSec / BytesInPerSec (``BrokerMetrics.bytes_in``).

Write leases: a round takes the leases of its partitions (owner ``broker-<id>``), kept
between rounds; one another writer waits for is released once no round built under it is in
flight, so all writers of a topic queue for the same leases and offsets stay contiguous.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from collections.abc import Mapping, Sequence

from sparklog.broker.append_watchers import AppendWatchers
from sparklog.broker.commit_round import CommitRound, Settled
from sparklog.broker.held_leases import HeldLeases
from sparklog.broker.log_tail import LogTails
from sparklog.broker.metrics import BrokerMetrics
from sparklog.broker.pending_append import (
    PendingAppend,
    RoundRows,
    kafka_producers,
    partition_rows,
    read_round,
    refuse_gaps,
)
from sparklog.broker.round_pacing import RoundBounds, RoundBudget, RoundQueues
from sparklog.broker.stage import Stage
from sparklog.broker.transactions.partition_txns import PartitionTransactions
from sparklog.config import Acks
from sparklog.errors import FencedError, LeaderNotAvailableError, NotLeaderError, StorageError
from sparklog.log.append import (
    MAX_COMMIT_ATTEMPTS,
    AppendResult,
    LogView,
    ProjectedView,
    SnapshotView,
    WriteOptions,
    prepare_append,
)
from sparklog.log.leader_log import LeaderLog, LeaseSerials
from sparklog.log.table import CommitConflict, TopicTable
from sparklog.retries import retry_until
from sparklog.runtime.produce_request import (
    await_in_sync_replicas,
    check_min_isr,
    hold_leases,
    topic_write_settings,
)
from sparklog.runtime.replica_manager import METADATA_MAX_AGE_MS, ReplicaManager

__all__ = ["LeaderAppender"]

log = logging.getLogger(__name__)

_RETRY_BACKOFF_S = 0.05
_IDLE_CHECK_S = 0.1  # an idle builder lets go of leases other writers wait for this often


class LeaderAppender:
    """Queues and group-commits produce requests for the partitions ``broker_id`` leads.

    ``watchers`` wakes the Fetch long polls of a round's partitions once the round is
    committed or failed (a waiting fetch re-reads and answers errors too)."""

    def __init__(
        self,
        replicas: ReplicaManager,
        broker_id: int,
        writer_lease_ms: int,
        metrics: BrokerMetrics,
        watchers: AppendWatchers | None = None,
        round_bounds: RoundBounds | None = None,
    ) -> None:
        self.replicas = replicas
        self.broker_id = broker_id
        self.leases = HeldLeases(replicas.zk, broker_id, writer_lease_ms)
        self.metrics = metrics
        self.watchers = watchers if watchers is not None else AppendWatchers()
        self.tails = LogTails()
        self.txns = PartitionTransactions()
        self._lock = threading.Condition()
        # Rounds on an object store are paced (round_bounds None on a disk): linger and size
        # per topic, one budget of round starts for every topic.
        self._queues: RoundQueues[PendingAppend] = RoundQueues(round_bounds)
        self._budget = RoundBudget(round_bounds.rounds_per_second if round_bounds else 0)
        self._threads: dict[str, threading.Thread] = {}
        self._committers: dict[str, Stage] = {}
        self._isr_waiters: dict[str, Stage] = {}
        self._closed = False
        self._closing = threading.Event()
        # Used by a topic's builder thread only:
        self._in_flight: dict[str, CommitRound] = {}  # the round its committer has
        # A topic's builder and committer share its LeaderLog (under self._lock):
        self._logs: dict[str, LeaderLog] = {}

    def append(self, topic: str, items: Sequence[PendingAppend]) -> None:
        """Queue ``items`` for ``topic``'s next round; each is finished when answered."""
        with self._lock:
            if self._closed:
                for item in items:
                    item.finish(error=self._shutting_down())
                return
            self._queues.put(topic, items)
            if topic not in self._threads:
                self._committers[topic] = Stage(f"committer-{topic}")
                self._isr_waiters[topic] = Stage(f"isr-waiter-{topic}")
                thread = threading.Thread(target=self._run, args=(topic,), name=f"appender-{topic}", daemon=True)
                self._threads[topic] = thread
                thread.start()
            self._lock.notify_all()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._closing.set()
            self._lock.notify_all()
        for thread in list(self._threads.values()):
            thread.join(5)
        for stage in [*self._committers.values(), *self._isr_waiters.values()]:
            stage.stop()

    def _shutting_down(self) -> LeaderNotAvailableError:
        return LeaderNotAvailableError(f"broker {self.broker_id} is shutting down")

    # -- the builder -------------------------------------------------------------------------
    def _run(self, topic: str) -> None:
        todo: list[list[PendingAppend]] = []  # rounds to build, in order
        while True:
            if not todo:
                with self._lock:
                    while not self._closed:
                        if topic in self._queues:
                            linger_s = self._queues.linger_left_s(topic)
                            if linger_s <= 0:
                                break
                            self._lock.wait(linger_s)
                            continue
                        in_flight = self._in_flight.get(topic)
                        if in_flight is not None and in_flight.settled.done():
                            break
                        if not self._lock.wait(_IDLE_CHECK_S) and in_flight is None:
                            break
                    items = self._queues.take(topic)
                    closed = self._closed
                if closed:
                    self._stop(topic, [items])
                    return
                if not items:
                    # Nothing to build: settle the round in flight, let go of wanted leases.
                    todo = self._settle(topic)
                    if not todo:
                        self.leases.release_wanted(topic)
                    continue
                # acks=all rounds fsync and wait for the ISR: the others don't pay for that.
                todo = [g for acks_all in (False, True) if (g := [i for i in items if (i.acks == "all") == acks_all])]
            elif self._closed:
                self._stop(topic, todo)
                return
            group = todo.pop(0)
            self._closing.wait(self._budget.reserve())  # the round's start in the broker's budget
            todo[:0] = self._build_round(topic, group)

    def _stop(self, topic: str, todo: list[list[PendingAppend]]) -> None:
        for items in [*self._settle(topic), *todo]:
            self._fail(items, self._shutting_down())

    def _settle(self, topic: str) -> list[list[PendingAppend]]:
        """Wait until the topic's round in flight is settled: [its items] when they must be
        built again, else nothing."""
        round_ = self._in_flight.pop(topic, None)
        if round_ is None or round_.settled.result() != "rebuild":
            return []
        return [[i for i in round_.items if not i.is_done]]

    def _build_round(self, topic: str, items: list[PendingAppend]) -> list[list[PendingAppend]]:
        """Build ``items`` into a round and hand it to the committer; the rounds to build
        before anything else (a round in flight to build again, then this one) if the log
        moved under it."""
        started_s = time.monotonic()
        deadline = started_s + max(i.timeout_ms for i in items) / 1000
        try:
            read = read_round(items)
        except Exception as exc:  # noqa: BLE001 - answered to the clients as Kafka error codes
            self._fail(items, exc)
            return []
        try:
            return retry_until(deadline, _RETRY_BACKOFF_S, lambda _: self._try_build(topic, items, read, started_s))
        except Exception as exc:  # noqa: BLE001 - answered to the clients as Kafka error codes
            log.debug("produce round on %s failed: %s", topic, exc)
            self._fail(items, exc)
            return []

    def _try_build(
        self, topic: str, items: list[PendingAppend], read: Mapping[int, RoundRows], started_s: float
    ) -> list[list[PendingAppend]]:
        replicas = self.replicas
        partitions = sorted({i.partition for i in items})
        states = replicas.states(topic, partitions)
        led = [p for p in partitions if states[p].leader == self.broker_id]
        for p in set(partitions) - set(led):
            error = NotLeaderError(
                f"broker {self.broker_id} does not lead {topic}-{p} (leader: {states[p].leader}, "
                f"epoch {states[p].leader_epoch}); refresh the metadata"
            )
            self._fail([i for i in items if i.partition == p], error)
        refuse_gaps(items)  # batches behind one of their producer's that failed
        items = [i for i in items if i.partition in led and not i.is_done]
        if not items:
            return []
        leases = [self.leases.lease(topic, p) for p in sorted({i.partition for i in items})]
        transactional = any(i.transactional or i.marker is not None for i in items)
        if transactional or not all(lease.held_firmly() for lease in leases) or self.leases.wanted(topic):
            redo = self._settle(topic)
            if redo:
                return [*redo, items]
            self.leases.release_wanted(topic)
        table = replicas.replica_table(topic, self.broker_id)
        leader_epochs = {p: states[p].leader_epoch for p in led}
        plan = self.txns.plan(table, leader_epochs, items)
        items = plan.items
        if not items:
            return []
        acks: Acks = "all" if items[0].acks == "all" else "1"
        settings = topic_write_settings(replicas, topic, items[0].compression, METADATA_MAX_AGE_MS)
        if acks == "all":
            check_min_isr(topic, {p: states[p] for p in led}, settings.min_insync_replicas, after_append=False)
        merged = {}
        for p in led:
            kept = [i for i in items if i.partition == p]
            if kept:
                merged[p] = partition_rows(kept, read.get(p))
        followers = sorted({b for p in merged for b in states[p].isr} - {self.broker_id})
        timeout_ms = max(i.timeout_ms for i in items)
        build_started_s = time.monotonic()
        leases = [self.leases.lease(topic, p) for p in sorted(merged)]
        try:
            epochs = hold_leases(table, leases, timeout_ms, lambda: self.leases.release_wanted(topic, everything=True))
            before = self._in_flight.get(topic)
            serials = {lease.partition: lease.grant_serial for lease in leases}
            view: LogView = self._leader_view(topic, table, serials)
            if before is not None:
                view = ProjectedView(view, before.prepared.transactions)
            options = WriteOptions(
                leader_epochs={p: leader_epochs[p] for p in merged},
                log_append_time=settings.log_append_time,
                compression=settings.compression,
                segment_bytes=settings.segment_bytes,
                # acks=all: write the files into the in-sync followers' directories too, so
                # their fetch only has to commit them (one encoding, no copy after the commit).
                stage_roots=[replicas.replica_table(topic, b).root for b in followers] if acks == "all" else [],
                hard_links=replicas.config.replica_hard_links_enable,
                kafka_producers=kafka_producers(items, plan.transactions),
            )
            prepared = prepare_append(table, view, epochs, merged, options)
        except FencedError:
            for lease in leases:
                lease.drop()  # a newer writer's epoch is in the log: read the lease again next time
            raise
        round_ = CommitRound(
            topic,
            table,
            items,
            plan,
            prepared,
            settings,
            {p: states[p] for p in merged},
            acks,
            bool(followers),
            started_s,
            timeout_ms,
            time.monotonic() - build_started_s,
            serials,
        )
        redo = self._settle(topic)
        if before is not None and (redo or before.settled.result() != "committed"):
            prepared.discard()  # it continues a log the round before did not leave
            return [*redo, items]
        self._in_flight[topic] = round_
        self._committers[topic].submit(functools.partial(self._commit, round_))
        return self._settle(topic) if transactional else []

    def settled_log_end(self, topic: str, partition: int) -> int | None:
        """The log end of a partition this broker appends to, from memory: what its last
        commit recorded, while the partition's write lease has stayed ours and untouched
        since (a ZooKeeper watch: nobody else appended). None: ask the table."""
        serial = self.leases.undisturbed_serial(topic, partition)
        leader_log = self._logs.get(topic)
        if serial is None or leader_log is None:
            return None
        return leader_log.recorded_log_end(partition, serial)

    def leader_log(self, topic: str) -> LeaderLog | None:
        """``topic``'s :class:`LeaderLog`, once a round was built for it."""
        return self._logs.get(topic)

    def _leader_view(self, topic: str, table: TopicTable, serials: LeaseSerials) -> LogView:
        """The log of ``table`` as the topic's :class:`LeaderLog` knows it, for a round under
        the write leases ``serials``."""
        with self._lock:
            leader_log = self._logs.get(topic)
            if leader_log is None or leader_log.table is not table:
                leader_log = self._logs[topic] = LeaderLog(table)
        view = leader_log.view(serials)
        return view if view is not None else SnapshotView(table, table.snapshot())

    # -- the committer -----------------------------------------------------------------------
    def _commit(self, round_: CommitRound) -> None:
        settled: Settled = "failed"
        try:
            settled = self._try_commit(round_)
        except Exception as exc:  # noqa: BLE001 - answered to the clients as Kafka error codes
            self._answer_failed(round_, exc)
        finally:
            round_.settled.set_result(settled)
            with self._lock:
                self._lock.notify_all()  # an idle builder settles it

    def _try_commit(self, round_: CommitRound) -> Settled:
        with contextlib.ExitStack() as publishing:
            outcome = self._commit_round(round_, publishing)
            if isinstance(outcome, str):
                return outcome
            round_.plan.apply(outcome.base_offsets)
            bases = self._placed(round_, outcome)
            leader_log = self._logs.get(round_.topic)
            if leader_log is not None and (own := leader_log.own_commits()) is not None:
                self.tails.log_starts_held(round_.topic, outcome.base_offsets, own)
        if round_.acks == "all" and round_.followers:
            deadline = time.monotonic() + round_.timeout_ms / 1000
            self._isr_waiters[round_.topic].submit(functools.partial(self._await_isr, round_, bases, outcome, deadline))
        else:
            self._answer(round_, bases, outcome)
        return "committed"

    def _commit_round(self, round_: CommitRound, publishing: contextlib.ExitStack) -> AppendResult | Settled:
        """Make the round durable and commit it: its result, or how it settled otherwise.
        From the commit on, the tails know its batches are on their way (``publishing``)."""
        prepared, fsync = round_.prepared, round_.acks == "all"
        started_s = time.monotonic()
        committing = False
        try:
            if fsync:
                prepared.make_durable()
            view = self._leader_view(round_.topic, round_.table, round_.lease_serials)
            prepared.check(view)
            publishing.enter_context(self.tails.publishing(round_.topic, prepared.base_offsets))
            committing = True
            result = prepared.commit(view, fsync)
        except (CommitConflict, FencedError, NotLeaderError) as exc:
            prepared.discard()
            log.debug("round on %s built again: %s", round_.topic, exc)
            if any(i.rebuilds >= MAX_COMMIT_ATTEMPTS for i in round_.items):
                error = StorageError(
                    f"Append to {round_.topic} partitions {sorted(prepared.base_offsets)} gave up after "
                    f"{MAX_COMMIT_ATTEMPTS} attempts: the log kept moving under it ({exc}); is another writer "
                    "ignoring the write lease?"
                )
                self._answer_failed(round_, error)
                return "failed"
            for item in round_.items:
                item.rebuilds += 1
            return "rebuild"
        except Exception as exc:  # noqa: BLE001 - answered to the clients as Kafka error codes
            failure: Exception = prepared.storage_error(exc) if isinstance(exc, OSError) else exc
            if committing and isinstance(failure, StorageError):
                # No answer, not even read back: the commit may have landed, so its files stay
                # (vacuum removes them if not); producers' states are read again (ProducerStates).
                log.warning("a commit round on %s has an unknown outcome: %s", round_.topic, failure)
            else:
                prepared.discard()
            self._answer_failed(round_, failure)
            return "failed"
        round_.append_s += time.monotonic() - started_s
        return result

    def _placed(self, round_: CommitRound, result: AppendResult) -> list[int]:
        """Each item's base offset; tells the items and the partitions' tails where they went."""
        next_offset = dict(result.base_offsets)
        bases = []
        for item in round_.items:
            bases.append(next_offset[item.partition])
            next_offset[item.partition] += item.rows
            if item.on_commit is not None:
                item.on_commit(bases[-1])
            if item.wire is not None and not round_.settings.log_append_time:
                epoch = round_.states[item.partition].leader_epoch
                self.tails.append(round_.topic, item.partition, epoch, bases[-1], item.rows, item.wire)
            else:
                self.tails.drop(round_.topic, item.partition)
        return bases

    def _await_isr(self, round_: CommitRound, bases: list[int], result: AppendResult, deadline: float) -> None:
        prepared = round_.prepared
        try:
            await_in_sync_replicas(
                self.replicas,
                round_.topic,
                round_.table,
                sorted(prepared.base_offsets),
                round_.states,
                round_.settings,
                deadline,
                targets=prepared.log_ends,
            )
        except Exception as exc:  # noqa: BLE001 - answered as its Kafka code
            # Stored but not acknowledged (e.g. NOT_ENOUGH_REPLICAS_AFTER_APPEND): the client
            # decides, as with Kafka. Building the round again would append the records twice.
            self._answer_failed(round_, exc)
            return
        self._answer(round_, bases, result)

    def _answer(self, round_: CommitRound, bases: list[int], result: AppendResult) -> None:
        items = round_.items
        wire_bytes = sum(len(i.wire) for i in items if i.wire is not None)
        latency_s = time.monotonic() - round_.started_s
        self.metrics.commit_round(round_.topic, latency_s, sum(i.rows for i in items), wire_bytes, round_.append_s)
        # Kafka's BytesInPerSec / MessagesInPerSec: what producers got appended.
        self.metrics.bytes_in(round_.topic, wire_bytes, sum(i.rows for i in items if i.marker is None))
        append_ms = result.log_append_time_ms if round_.settings.log_append_time else -1
        for item, base in zip(items, bases, strict=True):
            item.finish(base, append_ms)
        self.watchers.appended(round_.topic, {i.partition for i in items})

    def _answer_failed(self, round_: CommitRound, error: BaseException) -> None:
        self._fail(round_.items, error)
        self.watchers.appended(round_.topic, {i.partition for i in round_.items})

    @staticmethod
    def _fail(items: Sequence[PendingAppend], error: BaseException) -> None:
        for item in items:
            if not item.is_done:
                item.finish(error=error)
