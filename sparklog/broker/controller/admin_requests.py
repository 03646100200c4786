"""Admin requests the controller executes: preferred-leader elections, the automatic leader
rebalance and partition reassignments (Kafka's ``kafka-leader-election`` and
``kafka-reassign-partitions``).

* ``/admin/preferred_replica_election`` ``{partitions: ["t/p", ...]}``: each partition whose
  preferred (first) replica is live, in sync and not leading gets it as leader (new epoch);
  the request is deleted when done. With ``unclean: true`` (Kafka's UNCLEAN election type,
  ElectLeaders on the wire): each partition without a live leader gets its first live
  in-sync replica, else its first live replica, whatever ``unclean.leader.election.enable``.
* ``auto.leader.rebalance.enable``: every ``leader.imbalance.check.interval.seconds`` the
  same election for the partitions of brokers above ``leader.imbalance.per.broker.percentage``.
* ``/admin/reassign_partitions`` ``{partitions: {"t/p": [target replicas]}}``, per partition,
  one step per tick: (1) add the new replicas to the assignment (their tables are created;
  their fetchers start copying); (2) once every target replica is in the ISR, move the
  leader into the target if needed (new epoch), set the assignment and ISR to the target,
  drop it from the request (deleted when empty); (3) :data:`DROP_DELAY_S` later, empty the
  removed replicas' partition (a metadata-only Delta commit; vacuum deletes the files).
  ``--verify`` compares.

:class:`AdminRequests` receives what it needs from the controller (the replica manager, the
settings, and the controller's ``elect`` and ``write_state`` steps, which fence by the
controller epoch) and keeps the state of requests across ticks.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from sparklog.errors import SparklogError
from sparklog.metadata.zkdata import PartitionState, ReassignmentRecord, TopicAssignment, split_partition_key
from sparklog.runtime.policy import (
    LeaderElection,
    elect_leader,
    preferred_leader_election,
    preferred_leader_imbalance,
    reassignment_leader,
)
from sparklog.runtime.replica_manager import ReplicaManager

__all__ = ["DROP_DELAY_S", "AdminRequests", "RebalanceSettings"]

DROP_DELAY_S = 5.0  # > the fetchers' assignment refresh (sparklog.runtime.replica_fetcher.ASSIGNMENT_REFRESH_S)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RebalanceSettings:
    auto_leader_rebalance_enable: bool
    leader_imbalance_check_interval_s: float
    leader_imbalance_per_broker_percentage: int


Elect = Callable[[str, int, PartitionState, LeaderElection], bool]
WriteState = Callable[[str, int, PartitionState], bool]


def _without(current: ReassignmentRecord | None, done: dict[str, list[int]]) -> ReassignmentRecord:
    """``current`` less the partitions whose reassignment to the same target is done (one
    changed meanwhile by an admin client — a new target, a cancel — stays)."""
    if current is None:
        return ReassignmentRecord(partitions={})
    kept = {key: target for key, target in current.partitions.items() if done.get(key) != target}
    return ReassignmentRecord(partitions=kept, original={k: v for k, v in current.original.items() if k in kept})


class AdminRequests:
    """The admin requests of one active controller. States of a removed replica: *pending*
    (in :attr:`pending_drops` until its delay passed) → *emptied*."""

    def __init__(
        self, replicas: ReplicaManager, settings: RebalanceSettings, elect: Elect, write_state: WriteState
    ) -> None:
        self.replicas = replicas
        self.settings = settings
        self.elect = elect
        self.write_state = write_state
        self.pending_drops: dict[tuple[str, int], tuple[list[int], float]] = {}  # replicas to empty, when
        self.last_rebalance_check = time.monotonic()

    def run(self, live: set[int]) -> None:
        store = self.replicas.metadata
        requested = store.preferred_election_request()
        if requested is not None:
            for key in requested.partitions:
                if requested.unclean:
                    self._elect_unclean(*split_partition_key(key), live)
                else:
                    self._elect_preferred(*split_partition_key(key), live)
            store.delete_preferred_election_request()
        settings = self.settings
        due = time.monotonic() - self.last_rebalance_check >= settings.leader_imbalance_check_interval_s
        if settings.auto_leader_rebalance_enable and due:
            self.last_rebalance_check = time.monotonic()
            self._auto_rebalance(live)
        self.drop_removed_replicas()
        reassignments = store.reassignment_request()
        if reassignments:
            done = {key: target for key, target in reassignments.items() if self._reassign_step(key, target, live)}
            if done:
                store.update_reassignment_request(lambda current: _without(current, done))

    def _elect_preferred(self, topic: str, partition: int, live: set[int]) -> None:
        try:
            assignment, _ = self.replicas.metadata.assignment(topic)
            state = self.replicas.states(topic, [partition])[partition]
        except SparklogError:
            return
        election = preferred_leader_election(assignment.replicas(partition), state.isr, live, state.leader)
        if election is not None:
            self.elect(topic, partition, state, election)

    def _elect_unclean(self, topic: str, partition: int, live: set[int]) -> None:
        """Kafka's UNCLEAN election asked by an admin: a partition without a live leader gets
        its first live in-sync replica, else its first live replica (whatever the topic's
        ``unclean.leader.election.enable``: the operator accepts the loss)."""
        try:
            assignment, _ = self.replicas.metadata.assignment(topic)
            state = self.replicas.states(topic, [partition])[partition]
        except SparklogError:
            return
        if state.leader in live:
            return
        election = elect_leader(assignment.replicas(partition), state.isr, live, unclean=True)
        if election is not None:
            log.warning("unclean election of %s-%d asked by an admin: %s", topic, partition, election)
            self.elect(topic, partition, state, election)

    def _auto_rebalance(self, live: set[int]) -> None:
        assignments, leaders = {}, {}
        for topic in self.replicas.metadata.list_topics():
            try:
                assignment, _ = self.replicas.metadata.assignment(topic)
                states = self.replicas.states(topic, [int(p) for p in assignment.partitions])
            except SparklogError:
                continue
            for p, replicas in assignment.partitions.items():
                assignments[(topic, int(p))] = replicas
                leaders[(topic, int(p))] = states[int(p)].leader
        imbalance = preferred_leader_imbalance(
            assignments, leaders, self.settings.leader_imbalance_per_broker_percentage
        )
        for broker, partitions in sorted(imbalance.items()):
            if broker in live:
                for topic, partition in partitions:
                    self._elect_preferred(topic, partition, live)

    def _reassign_step(self, key: str, target: list[int], live: set[int]) -> bool:
        """One step of one partition's reassignment; True when it is complete."""
        topic, partition = split_partition_key(key)
        try:
            assignment, version = self.replicas.metadata.assignment(topic)
        except SparklogError:
            return True  # the topic is gone: nothing left to do
        current = assignment.replicas(partition)
        if current == target:
            return True
        missing = [b for b in target if b not in current]
        if missing:
            topic_id = assignment.topic_id
            for broker in missing:
                table = self.replicas.replica_table(topic, broker)
                if not table.exists():
                    table.create(topic_id, int(self.replicas.topic_config(topic)["history.retention.ms"]))
            self._set_replicas(topic, assignment, version, partition, current + missing)
            log.info("reassignment of %s-%d: copying to %s", topic, partition, missing)
            return False
        state = self.replicas.states(topic, [partition])[partition]
        if not set(target) <= set(state.isr):
            return False  # the new replicas are still catching up
        if state.leader not in target:
            election = reassignment_leader(target, state.isr, live, state.leader)
            if election is None or not self.elect(topic, partition, state, election):
                return False
            state = self.replicas.states(topic, [partition])[partition]
        assignment, version = self.replicas.metadata.assignment(topic)
        self._set_replicas(topic, assignment, version, partition, target)
        self.write_state(
            topic,
            partition,
            type(state)(state.leader, state.leader_epoch, [b for b in state.isr if b in target], state.epochs),
        )
        removed = [b for b in current if b not in target]
        if removed:
            # Emptied later: a fetcher acting on the assignment it read before this step could
            # otherwise copy the partition right back (fetchers re-read assignments every second).
            self.pending_drops[(topic, partition)] = (removed, time.monotonic() + DROP_DELAY_S)
        log.info("reassignment of %s-%d complete: replicas %s", topic, partition, target)
        return True

    def drop_removed_replicas(self) -> None:
        """Empty the partitions of replicas a reassignment removed, once their delay passed."""
        for (topic, partition), (brokers, due) in list(self.pending_drops.items()):
            if time.monotonic() < due:
                continue
            del self.pending_drops[(topic, partition)]
            try:
                replicas = self.replicas.metadata.assignment(topic)[0].replicas(partition)
            except SparklogError:
                continue  # the topic is gone
            for broker in brokers:
                if broker in replicas:
                    continue  # assigned back meanwhile: keep it
                if any(self.replicas.shares_table(topic, broker, kept) for kept in replicas):
                    continue  # shared storage: the old replica's table is the one the new replicas serve
                try:
                    self.replicas.replica_table(topic, broker).drop_partition(partition)
                except SparklogError as exc:
                    log.warning(
                        "reassignment of %s-%d: could not empty the old replica on broker %d: %s",
                        topic,
                        partition,
                        broker,
                        exc,
                    )

    def _set_replicas(
        self, topic: str, assignment: TopicAssignment, version: int, partition: int, replicas: list[int]
    ) -> None:
        partitions = dict(assignment.partitions)
        partitions[str(partition)] = list(replicas)
        if not self.replicas.metadata.set_assignment(topic, TopicAssignment(assignment.topic_id, partitions), version):
            raise SparklogError(f"the assignment of {topic} changed during the reassignment step; retrying next tick")
