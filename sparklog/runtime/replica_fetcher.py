"""The replica fetcher: keep one broker's follower replicas in step with their leaders.

For every partition assigned to broker ``b`` whose leader is another live broker, one round
(:meth:`ReplicaFetcher.run_once`) does what docs/replication.md describes:

1. **reconcile** when the follower has not yet followed the current leader epoch: truncate
   to :func:`sparklog.runtime.policy.truncation_offset` of its log end and last epoch
   over the partition's epoch history (from ZooKeeper);
2. **copy** what it lacks from the leader's table
   (:func:`sparklog.log.replica_fetch.copy_from_leader`).

States: *idle* (constructed) → *running* (:meth:`run` loop in the broker agent, or single
rounds from ``jobs/replica_fetch.py``) → *stopped* (``stop`` event set). Errors on one partition
(a leader's storage failing, a conflicting commit) are logged and retried next round, never
fatal to the loop.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from sparklog.errors import SparklogError
from sparklog.log.replica_fetch import CopyResult, copy_from_leader, follower_position, truncate
from sparklog.runtime.policy import truncation_offset
from sparklog.runtime.replica_manager import ReplicaManager

__all__ = ["FetchRound", "ReplicaFetcher"]

log = logging.getLogger(__name__)

BUSY_WAIT_S = 0.001  # between rounds soon after a copy (acks=all producers wait on this)
IDLE_WAIT_S = 0.005  # between rounds once nothing was copied for a while
ASSIGNMENT_REFRESH_S = 1.0  # how often topics and assignments are re-read from ZooKeeper


@dataclass(frozen=True)
class FetchRound:
    copied: list[tuple[str, CopyResult]]
    truncated: list[tuple[str, int, int]]  # (topic, partition, offset)
    errors: list[tuple[str, int, str]]

    @property
    def records(self) -> int:
        return sum(r.records for _t, r in self.copied)


class ReplicaFetcher:
    """Copies from leaders into broker ``broker_id``'s replicas. One thread at a time."""

    def __init__(
        self, replicas: ReplicaManager, broker_id: int, *, fsync: bool = False, topics: list[str] | None = None
    ) -> None:
        self.replicas = replicas
        self.broker_id = broker_id
        self.fsync = fsync
        self.topics = topics  # None: every topic
        self._followed: list[tuple[str, int]] = []
        self._in_step: dict[tuple[str, int], tuple[int, int, int, int]] = {}
        self._refreshed_at = float("-inf")

    def followed_partitions(self) -> list[tuple[str, int]]:
        """``(topic, partition)`` assigned to this broker (cached for :data:`ASSIGNMENT_REFRESH_S`)."""
        if time.monotonic() - self._refreshed_at >= ASSIGNMENT_REFRESH_S:
            followed = []
            for topic in self.replicas.metadata.list_topics() if self.topics is None else self.topics:
                try:
                    assignment, _ = self.replicas.metadata.assignment(topic)
                except SparklogError:
                    continue  # deleted meanwhile
                followed += [
                    (topic, int(p)) for p, replicas in assignment.partitions.items() if self.broker_id in replicas
                ]
            self._followed, self._refreshed_at = sorted(followed), time.monotonic()
        return self._followed

    def run_once(self) -> FetchRound:
        copied: list[tuple[str, CopyResult]] = []
        truncated: list[tuple[str, int, int]] = []
        errors: list[tuple[str, int, str]] = []
        versions: dict[tuple[str, int], int] = {}  # (topic, broker) -> table version, this round

        def version(topic: str, broker: int) -> int:
            if (topic, broker) not in versions:
                versions[(topic, broker)] = self.replicas.replica_table(topic, broker).snapshot().version()
            return versions[(topic, broker)]

        for topic, partition in self.followed_partitions():
            try:
                [state] = self.replicas.states(topic, [partition]).values()
                if state.leader < 0 or state.leader == self.broker_id:
                    continue
                if self.replicas.shares_table(topic, self.broker_id, state.leader):
                    continue  # one table on shared storage: nothing to copy, nothing to truncate
                # Neither table changed since this partition was last in step: nothing to do
                # (an idle round costs two file stats per table, however many partitions).
                seen = (state.leader, state.leader_epoch, version(topic, state.leader), version(topic, self.broker_id))
                if self._in_step.get((topic, partition)) == seen:
                    continue
                follower = self.replicas.replica_table(topic, self.broker_id)
                position = follower_position(follower, partition)
                if position.leader_epoch < state.leader_epoch:
                    offset = truncation_offset(position.log_end, position.leader_epoch, state.epoch_history)
                    truncate(follower, partition, offset, state.leader_epoch)
                    if offset < position.log_end:
                        truncated.append((topic, partition, offset))
                        log.warning(
                            "%s-%d on broker %d: truncated to offset %d (log end was %d) to follow leader %d at epoch %d",
                            topic,
                            partition,
                            self.broker_id,
                            offset,
                            position.log_end,
                            state.leader,
                            state.leader_epoch,
                        )
                leader = self.replicas.replica_table(topic, state.leader)
                result = copy_from_leader(
                    leader,
                    follower,
                    partition,
                    state.leader_epoch,
                    fsync=self.fsync,
                    hard_links=self.replicas.config.replica_hard_links_enable,
                )
                if result.files:
                    copied.append((topic, result))
                else:  # in step as of these versions (a copy changed the follower's version)
                    self._in_step[(topic, partition)] = seen
            except (SparklogError, OSError, ValueError) as exc:
                errors.append((topic, partition, str(exc)))
                log.debug("fetch of %s-%d on broker %d failed: %s", topic, partition, self.broker_id, exc)
        return FetchRound(copied, truncated, errors)

    def run(self, stop: threading.Event) -> None:
        """Fetch until ``stop`` is set: rounds back to back while there is work, then polling
        every :data:`BUSY_WAIT_S`, backing off to :data:`IDLE_WAIT_S` as the quiet lasts (an
        idle round is two file stats per table)."""
        wait = BUSY_WAIT_S
        while not stop.is_set():
            try:
                done = self.run_once()
            except SparklogError as exc:  # ZooKeeper unreachable: keep trying
                log.warning("replica fetcher of broker %d: %s", self.broker_id, exc)
                stop.wait(1.0)
                continue
            except Exception:
                log.exception("replica fetcher of broker %d failed unexpectedly; continuing", self.broker_id)
                stop.wait(1.0)
                continue
            if done.copied:
                wait = BUSY_WAIT_S
            else:
                stop.wait(wait)
                wait = min(IDLE_WAIT_S, wait * 1.5)
