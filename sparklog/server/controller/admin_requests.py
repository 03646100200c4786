"""Admin requests the controller executes: preferred-leader elections, the automatic leader
rebalance and partition reassignments (Kafka's ``kafka-leader-election`` and
``kafka-reassign-partitions``).

* ``/admin/preferred_replica_election`` ``{partitions: ["t/p", ...]}``: each partition whose
  preferred (first) replica is live, in sync and not leading gets it as leader (new epoch);
  the request is deleted when done.
* ``auto.leader.rebalance.enable``: every ``leader.imbalance.check.interval.seconds`` the
  same election for the partitions of brokers above ``leader.imbalance.per.broker.percentage``.
* ``/admin/reassign_partitions`` ``{partitions: {"t/p": [target replicas]}}``, per partition,
  one step per tick: (1) add the new replicas to the assignment (their tables are created;
  their fetchers start copying); (2) once every target replica is in the ISR, move the
  leader into the target if needed (new epoch), set the assignment and ISR to the target,
  drop it from the request (deleted when empty); (3) :data:`DROP_DELAY_S` later, empty the
  removed replicas' partition (a metadata-only Delta commit; vacuum deletes the files).
  ``--verify`` compares.

Callers: :meth:`sparklog.server.controller.controller.Controller.tick`.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from sparklog.server.controller.policy import preferred_leader_election, preferred_leader_imbalance, reassignment_leader
from sparklog.metadata.zkdata import TopicAssignment
from sparklog.errors import SparklogError

if TYPE_CHECKING:
    from sparklog.server.controller.controller import Controller

__all__ = ["run_admin_requests", "split_key", "drop_removed_replicas", "DROP_DELAY_S"]

DROP_DELAY_S = 5.0  # > the fetchers' assignment refresh (sparklog.server.replica_fetcher.ASSIGNMENT_REFRESH_S)

log = logging.getLogger(__name__)


def split_key(key: str) -> tuple[str, int]:
    topic, _, partition = key.rpartition("/")
    return topic, int(partition)


def run_admin_requests(controller: "Controller", live: set[int]) -> None:
    store = controller.cluster.metadata
    requested = store.preferred_election_request()
    if requested is not None:
        for key in requested:
            _elect_preferred(controller, *split_key(key), live)
        store.delete_preferred_election_request()
    settings = controller.settings
    if settings.auto_leader_rebalance_enable and time.monotonic() - controller.last_rebalance_check >= settings.leader_imbalance_check_interval_s:
        controller.last_rebalance_check = time.monotonic()
        _auto_rebalance(controller, live)
    drop_removed_replicas(controller)
    reassignments = store.reassignment_request()
    if reassignments:
        remaining = {key: target for key, target in reassignments.items() if not _reassign_step(controller, key, target, live)}
        store.set_reassignment_request(remaining)


def _elect_preferred(controller: "Controller", topic: str, partition: int, live: set[int]) -> None:
    try:
        assignment, _ = controller.cluster.metadata.assignment(topic)
        state = controller.cluster.replicas.states(topic, [partition])[partition]
    except SparklogError:
        return
    election = preferred_leader_election(assignment.replicas(partition), state.isr, live, state.leader)
    if election is not None:
        controller.elect(topic, partition, state, election)


def _auto_rebalance(controller: "Controller", live: set[int]) -> None:
    assignments, leaders = {}, {}
    for topic in controller.cluster.metadata.list_topics():
        try:
            assignment, _ = controller.cluster.metadata.assignment(topic)
            states = controller.cluster.replicas.states(topic, [int(p) for p in assignment.partitions])
        except SparklogError:
            continue
        for p, replicas in assignment.partitions.items():
            assignments[(topic, int(p))] = replicas
            leaders[(topic, int(p))] = states[int(p)].leader
    imbalance = preferred_leader_imbalance(assignments, leaders, controller.settings.leader_imbalance_per_broker_percentage)
    for broker, partitions in sorted(imbalance.items()):
        if broker in live:
            for topic, partition in partitions:
                _elect_preferred(controller, topic, partition, live)


def _reassign_step(controller: "Controller", key: str, target: list[int], live: set[int]) -> bool:
    """One step of one partition's reassignment; True when it is complete."""
    cluster = controller.cluster
    topic, partition = split_key(key)
    try:
        assignment, version = cluster.metadata.assignment(topic)
    except SparklogError:
        return True  # the topic is gone: nothing left to do
    current = assignment.replicas(partition)
    if current == target:
        return True
    missing = [b for b in target if b not in current]
    if missing:
        topic_id = assignment.topic_id
        for broker in missing:
            table = cluster.replica_table(topic, broker)
            if not table.exists():
                table.create(topic_id, int(cluster.topic_config(topic)["history.retention.ms"]))
        _set_replicas(cluster, topic, assignment, version, partition, current + missing)
        log.info("reassignment of %s-%d: copying to %s", topic, partition, missing)
        return False
    state = cluster.replicas.states(topic, [partition])[partition]
    if not set(target) <= set(state.isr):
        return False  # the new replicas are still catching up
    if state.leader not in target:
        election = reassignment_leader(target, state.isr, live, state.leader)
        if election is None or not controller.elect(topic, partition, state, election):
            return False
        state = cluster.replicas.states(topic, [partition])[partition]
    assignment, version = cluster.metadata.assignment(topic)
    _set_replicas(cluster, topic, assignment, version, partition, target)
    controller.write_state(topic, partition, type(state)(state.leader, state.leader_epoch, [b for b in state.isr if b in target], state.epochs))
    removed = [b for b in current if b not in target]
    if removed:
        # Emptied later: a fetcher acting on the assignment it read before this step could
        # otherwise copy the partition right back (fetchers re-read assignments every second).
        controller.pending_drops[(topic, partition)] = (removed, time.monotonic() + DROP_DELAY_S)
    log.info("reassignment of %s-%d complete: replicas %s", topic, partition, target)
    return True


def drop_removed_replicas(controller: "Controller") -> None:
    """Empty the partitions of replicas a reassignment removed, once their delay passed."""
    cluster = controller.cluster
    for (topic, partition), (brokers, due) in list(controller.pending_drops.items()):
        if time.monotonic() < due:
            continue
        del controller.pending_drops[(topic, partition)]
        try:
            replicas = cluster.metadata.assignment(topic)[0].replicas(partition)
        except SparklogError:
            continue  # the topic is gone
        for broker in brokers:
            if broker in replicas:
                continue  # assigned back meanwhile: keep it
            try:
                cluster.replica_table(topic, broker).drop_partition(partition)
            except SparklogError as exc:
                log.warning("reassignment of %s-%d: could not empty the old replica on broker %d: %s", topic, partition, broker, exc)


def _set_replicas(cluster: object, topic: str, assignment: TopicAssignment, version: int, partition: int, replicas: list[int]) -> None:
    partitions = dict(assignment.partitions)
    partitions[str(partition)] = list(replicas)
    if not cluster.metadata.set_assignment(topic, TopicAssignment(assignment.topic_id, partitions), version):  # type: ignore[attr-defined]
        raise SparklogError(f"the assignment of {topic} changed during the reassignment step; retrying next tick")
