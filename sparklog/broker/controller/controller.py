"""The controller: leaders, leader epochs and ISR of every partition (DESIGN §10).

Runs inside the broker agent that won the controller election
(:class:`~sparklog.metadata.controller_election.ControllerElection`), on one thread,
in ticks. Each tick:

1. **broker liveness** (``/brokers/ids``): a partition whose leader is not live gets a new
   leader from its live ISR (:func:`~sparklog.runtime.policy.elect_leader`; an unclean
   election only with the topic's ``unclean.leader.election.enable``, logged as data loss);
   dead brokers leave the ISR of partitions whose leader lives;
2. **ISR upkeep** (every ``replica_lag_time_max_ms / 4``): followers that have not reached
   the leader's log end within ``replica.lag.time.max.ms`` leave the ISR
   (:func:`~sparklog.runtime.policy.shrink_isr`); live followers whose log end reached
   the high watermark rejoin (:func:`~sparklog.runtime.policy.expand_isr`); replicas that
   share the leader's table (shared storage, DESIGN §16) are in sync while live;
3. **admin requests**: preferred-leader elections and reassignments under ``/admin``
   (:mod:`sparklog.broker.controller.admin_requests`), and the automatic preferred-leader rebalance.

Every new leader gets a new leader epoch and an entry ``(epoch, its log end)`` in the
partition's epoch history. States are written by compare-and-set in a multi-op that checks
the controller epoch (a deposed controller writes nothing). An election reserves the epoch
in ZooKeeper with no leader, commits it to the replicas' Delta logs
(:meth:`TopicTable.commit_leader_epoch`: a fence on every other replica, the old leader
included, then the lineage on the new leader) and only then publishes the new leader, so
at no instant do two replicas accept writes for one partition (:meth:`Controller.elect`).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, replace

from sparklog import clock
from sparklog.broker.controller.admin_requests import AdminRequests, RebalanceSettings
from sparklog.errors import SparklogError
from sparklog.metadata.broker_registration import live_broker_ids
from sparklog.metadata.zkdata import PartitionState, TopicAssignment
from sparklog.runtime.policy import (
    LeaderElection,
    append_epoch,
    elect_leader,
    expand_isr,
    high_watermark,
    replace_down_replicas,
    shrink_isr,
)
from sparklog.runtime.replica_manager import ReplicaManager

__all__ = ["Controller", "ControllerSettings"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ControllerSettings:
    replica_lag_time_max_ms: int = 10_000
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_s: float = 300.0
    leader_imbalance_per_broker_percentage: int = 10
    tick_s: float = 0.1


class Controller:
    """The controller's duties while this agent holds ``/controller``. States: *inactive* →
    (:meth:`activate`) *active* → (:meth:`deactivate`) *inactive*."""

    def __init__(self, replicas: ReplicaManager, broker_id: int, settings: ControllerSettings) -> None:
        self.replicas = replicas
        self.broker_id = broker_id
        self.settings = settings
        self.epoch_version: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._caught_up_ms: dict[tuple[str, int, int], int] = {}
        self._leader_ends: dict[tuple[str, int], int] = {}
        self._last_isr_check = 0.0
        rebalance = RebalanceSettings(
            settings.auto_leader_rebalance_enable,
            settings.leader_imbalance_check_interval_s,
            settings.leader_imbalance_per_broker_percentage,
        )
        self.admin_requests = AdminRequests(replicas, rebalance, self.elect, self.write_state)

    # -- life cycle ------------------------------------------------------------------------
    def activate(self, epoch: int, epoch_version: int) -> None:
        self.deactivate()
        log.info("broker %d is the controller (epoch %d)", self.broker_id, epoch)
        self.epoch_version = epoch_version
        self._caught_up_ms.clear()
        self._leader_ends.clear()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, args=(self._stop,), name="controller", daemon=True)
        self._thread.start()

    def deactivate(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(10)
        self._thread = None
        self.epoch_version = None

    @property
    def active(self) -> bool:
        return self._thread is not None and not self._stop.is_set()

    def _loop(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.tick()
            except SparklogError as exc:
                log.warning("controller tick failed: %s", exc)
            except Exception:
                log.exception("controller tick failed unexpectedly; continuing")
            stop.wait(self.settings.tick_s)

    # -- one tick --------------------------------------------------------------------------
    def tick(self) -> None:
        live = set(live_broker_ids(self.replicas.zk))
        now = time.monotonic()
        check_isr = now - self._last_isr_check >= self.settings.replica_lag_time_max_ms / 4000
        for topic in self.replicas.metadata.list_topics():
            try:
                assignment, _ = self.replicas.metadata.assignment(topic)
                configs = self.replicas.topic_config(topic)
            except SparklogError:
                continue  # deleted meanwhile
            unclean = bool(configs["unclean.leader.election.enable"])
            for key, replicas in sorted(assignment.partitions.items(), key=lambda kv: int(kv[0])):
                self._partition(topic, int(key), list(replicas), live, unclean, check_isr)
        if check_isr:
            self._last_isr_check = now
        self.admin_requests.run(live)

    def _partition(
        self, topic: str, partition: int, replicas: list[int], live: set[int], unclean: bool, check_isr: bool
    ) -> None:
        state = self.replicas.states(topic, [partition])[partition]
        if state.leader not in live:
            election = elect_leader(replicas, state.isr, live, unclean=unclean)
            if election is None and self._move_to_live_brokers(topic, partition, replicas, state, live):
                return
            if election is None:
                if state.leader != -1:
                    self.write_state(topic, partition, replace(state, leader=-1))
                    log.error("%s-%d is offline: no live in-sync replica among %s", topic, partition, state.isr)
                return
            self.elect(topic, partition, state, election)
            return
        live_isr = [b for b in state.isr if b in live]
        if live_isr != list(state.isr):
            self.write_state(topic, partition, replace(state, isr=live_isr))
            return
        if check_isr and len(replicas) > 1:
            self._maintain_isr(topic, partition, replicas, state, live)

    def _maintain_isr(
        self, topic: str, partition: int, replicas: list[int], state: PartitionState, live: set[int]
    ) -> None:
        if all(self.replicas.shares_table(topic, b, state.leader) for b in replicas):
            # Shared storage: every replica is the leader's table, so every live one is in
            # sync, told without reading the table (an idle cluster makes no store requests).
            isr = [state.leader, *(b for b in replicas if b in live and b != state.leader)]
            if sorted(isr) != sorted(state.isr):
                log.info("%s-%d: ISR %s -> %s (one shared table)", topic, partition, state.isr, isr)
                self.write_state(topic, partition, replace(state, isr=isr))
            return
        ends = {}
        for broker in replicas:
            table = self.replicas.replica_table(topic, broker)
            try:
                ends[broker] = table.current_log_end(partition)
            except SparklogError:
                continue  # storage of that replica unreadable: it cannot be caught up
        now_ms = clock.now_ms()
        leader_end = ends.get(state.leader)
        if leader_end is None:
            return
        # Kafka: caught up = reached the leader's log end as of the follower's previous fetch.
        # Here: as of the previous check, so a follower trailing a busy leader by what arrived
        # since then is still in sync.
        previous_end = self._leader_ends.get((topic, partition), leader_end)
        self._leader_ends[(topic, partition)] = leader_end
        for broker in {*replicas, *state.isr}:
            key = (topic, partition, broker)
            end = ends.get(broker)
            if key not in self._caught_up_ms or (end is not None and end >= min(leader_end, previous_end)):
                self._caught_up_ms[key] = now_ms  # a new controller gives everyone a full lag window
        caught_up = {
            b: self._caught_up_ms[(topic, partition, b)]
            for b in state.isr
            if (topic, partition, b) in self._caught_up_ms
        }
        isr = list(
            shrink_isr(
                state.leader,
                state.isr,
                caught_up,
                now_ms,
                self.settings.replica_lag_time_max_ms,
                log_end_offsets=ends,
            )
        )
        hw = high_watermark(isr, {b: ends.get(b, 0) for b in isr})
        isr = list(
            expand_isr(
                state.leader,
                isr,
                replicas,
                live,
                ends,
                hw,
                leader_epoch_start_offset=state.epochs[-1][1],
            )
        )
        if isr != list(state.isr):
            log.info("%s-%d: ISR %s -> %s (log ends %s)", topic, partition, state.isr, isr, ends)
            self.write_state(topic, partition, replace(state, isr=isr))

    def _move_to_live_brokers(
        self, topic: str, partition: int, replicas: list[int], state: PartitionState, live: set[int]
    ) -> bool:
        """Shared storage: a partition whose every replica is down is given to live brokers
        serving the same table (:func:`~sparklog.runtime.policy.replace_down_replicas`), its
        assignment rewritten (metadata only) and the first of them elected. False: its replicas
        have tables of their own (a disk each), or no such broker is live."""
        if not replicas or not all(self.replicas.shares_table(topic, b, replicas[0]) for b in replicas[1:]):
            return False
        candidates = [b for b in sorted(live) if self.replicas.shares_table(topic, b, replicas[0])]
        if not candidates:
            return False
        moved = replace_down_replicas(replicas, live, candidates, self._leaders_per_broker())
        if moved is None:
            return False
        assignment, version = self.replicas.metadata.assignment(topic)
        partitions = {**assignment.partitions, str(partition): moved}
        if not self.replicas.metadata.set_assignment(topic, TopicAssignment(assignment.topic_id, partitions), version):
            return False  # changed meanwhile: the next tick looks again
        log.warning("%s-%d: every replica %s down; moved to %s on the shared table", topic, partition, replicas, moved)
        in_sync = tuple(b for b in moved if b in live)
        return self.elect(topic, partition, state, LeaderElection(in_sync[0], in_sync))

    def _leaders_per_broker(self) -> dict[int, int]:
        counts: dict[int, int] = {}
        for topic in self.replicas.metadata.list_topics():
            try:
                assignment, _ = self.replicas.metadata.assignment(topic)
                states = self.replicas.states(topic, [int(p) for p in assignment.partitions])
            except SparklogError:
                continue  # deleted meanwhile
            for state in states.values():
                counts[state.leader] = counts.get(state.leader, 0) + 1
        return counts

    # -- writes ----------------------------------------------------------------------------
    def elect(self, topic: str, partition: int, state: PartitionState, election: LeaderElection) -> bool:
        """Make ``election.leader`` the leader under a new epoch ``E``, never letting two replicas
        accept writes for the partition at one instant:

        1. reserve ``E`` in ZooKeeper with no leader (-1): no writer can learn of a leader of
           ``E`` yet, and the old leader's writers see the leadership move;
        2. fence every other replica at ``E``, the old leader included: writers of older epochs
           are refused there from now on;
        3. commit ``E``'s lineage on the new leader: its fetcher, following the old leader under
           an older epoch, is refused from now on, so its log end, ``E``'s start offset, holds still;
        4. publish the new leader with ``E`` and its history entry.

        Cut short after 1 (a deposed controller, a ZooKeeper or storage error), the partition is
        offline under ``E`` and the next tick elects again under ``E + 1``: an epoch is never
        issued twice, so markers a cut-short election left behind name an epoch no leader has.
        """
        epoch = state.leader_epoch + 1
        if not self.write_state(topic, partition, replace(state, leader=-1, leader_epoch=epoch)):
            return False
        assignment, _ = self.replicas.metadata.assignment(topic)
        others = [
            b for b in dict.fromkeys([*assignment.replicas(partition), state.leader]) if b not in (-1, election.leader)
        ]
        for broker in others:
            if self.replicas.shares_table(topic, broker, election.leader):
                continue  # one table: the new leader's lineage commit below fences it too
            try:
                self.replicas.replica_table(topic, broker).commit_leader_epoch(partition, epoch, lineage=False)
            except SparklogError as exc:
                # Every process reaches a log dir the same way: storage refusing this marker
                # refuses producers too. Its fetcher reconciles when it returns.
                log.warning(
                    "%s-%d: could not fence replica on broker %d at epoch %d: %s", topic, partition, broker, epoch, exc
                )
        table = self.replicas.replica_table(topic, election.leader)
        try:
            table.commit_leader_epoch(partition, epoch, lineage=True)
            start = table.log_end(table.snapshot(), partition)
        except SparklogError as exc:
            log.error(
                "%s-%d: leader election of broker %d at epoch %d failed on its replica, partition offline until "
                "the next attempt: %s",
                topic,
                partition,
                election.leader,
                epoch,
                exc,
            )
            return False
        history = append_epoch(state.epoch_history, epoch, start)
        new = PartitionState(
            leader=election.leader, leader_epoch=epoch, isr=list(election.isr), epochs=[list(h) for h in history]
        )
        if not self.write_state(topic, partition, new):
            return False
        if election.unclean:
            log.error(
                "%s-%d: UNCLEAN leader election: broker %d was not in sync (ISR %s); records above its log end %d "
                "that the old leader %d had are lost",
                topic,
                partition,
                election.leader,
                state.isr,
                start,
                state.leader,
            )
        else:
            log.warning(
                "%s-%d: leader %d -> %d at epoch %d (start offset %d)",
                topic,
                partition,
                state.leader,
                election.leader,
                epoch,
                start,
            )
        return True

    def write_state(self, topic: str, partition: int, new: PartitionState) -> bool:
        current, version = self.replicas.metadata.partition_state(topic, partition)
        if current == new:
            return True
        done = self.replicas.metadata.set_partition_state(topic, partition, new, version, self.epoch_version)
        if done:
            self._await_cache(topic, partition, new)
        return done

    def _await_cache(self, topic: str, partition: int, new: PartitionState) -> None:
        """Let the watched cache catch up, so the next tick decides on what was written."""
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            if self.replicas.states(topic, [partition])[partition] == new:
                return
            time.sleep(0.005)
