"""The broker's log manager: time and size retention and the Delta log step, run by every
broker agent for the partitions it leads (DESIGN §9; Kafka's ``LogManager`` runs retention in
every broker the same way).

Every ``log.retention.check.interval.ms`` (default 5 minutes) a round goes over the topics,
one after the other. For a topic with partitions this broker leads, it applies, in this
broker's replica table (the leader table of those partitions):

* the **delete policy** (``retention.ms``, ``retention.bytes``) of topics whose
  ``cleanup.policy`` has ``delete``, through :func:`sparklog.log.retention.apply_delete_policy`,
  the function the maintenance job uses; internal topics are skipped, as the maintenance
  job skips them (``__consumer_offsets`` compacts itself on every commit);
* the **Delta log step** (:func:`sparklog.log.optimize.log_step`, also the maintenance
  job's): log properties synced with ``history.retention.ms``, checkpoint, expired log files
  deleted.

Compaction (Spark tasks), optimize and vacuum stay with the maintenance job
(``jobs/retention.py``); what this removes from the Delta log, vacuum deletes later.

Invariants:

* **Only led partitions.** A partition is touched only when its state (the replica
  manager's watched cache, read per topic) names this broker as leader, and only in this
  broker's own table; the log step runs on that table only when the broker leads a partition
  of the topic. Followers get the leader's log-start through replica fetch (DESIGN §10).
  A leadership change racing a round can let one retention commit land on the former
  leader's table: that removes only what the policy names there too, as Kafka's followers
  apply retention themselves.
* **A prefix only, and log-start only moves forward** (invariant 8): retention removes
  whole files from the oldest on and raises ``sparklog.start.<p>``, never lowers it; a
  commit that loses to a producer, a fetch or the maintenance job is re-planned on a fresh
  snapshot.
* **A failure in one topic is logged and the next topic goes on**: the error is logged as a
  warning naming the broker and the topic, and the next round tries the topic again.
* What it deleted is logged at INFO: topic, partition, files and records, the new log-start;
  and the number of expired Delta log files a checkpoint let go.

States: created → :meth:`LogManager.run` (until its stop event is set; the first round one
interval after the start) → returned. :meth:`LogManager.check_retention` runs one round.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field

from sparklog import clock
from sparklog.config import cleanup_policies
from sparklog.errors import ConfigError, SparklogError
from sparklog.log.optimize import LogCheckpoint, log_step
from sparklog.log.retention import RetentionResult, apply_delete_policy
from sparklog.model.topic import is_internal
from sparklog.runtime.replica_manager import ReplicaManager

__all__ = ["LogManager", "RetentionRound"]

log = logging.getLogger(__name__)


@dataclass
class RetentionRound:
    """What one round did: retention per led partition, the log step per table, the topics
    whose check failed (with the error)."""

    retention: list[RetentionResult] = field(default_factory=list)
    checkpoints: list[LogCheckpoint] = field(default_factory=list)
    failed: dict[str, Exception] = field(default_factory=dict)


class LogManager:
    """Runs retention and the Delta log step for the partitions ``broker_id`` leads, every
    ``check_interval_ms``; see the module docstring."""

    def __init__(self, replicas: ReplicaManager, broker_id: int, check_interval_ms: int) -> None:
        if check_interval_ms < 1:
            raise ConfigError(f"log.retention.check.interval.ms must be >= 1, got {check_interval_ms}")
        self.replicas = replicas
        self.broker_id = broker_id
        self.check_interval_ms = check_interval_ms

    def run(self, stop: threading.Event) -> None:
        """A round every ``check_interval_ms`` until ``stop`` is set (also between topics)."""
        while not stop.wait(self.check_interval_ms / 1000):
            self.check_retention(stop=stop)

    def check_retention(self, now_ms: int | None = None, stop: threading.Event | None = None) -> RetentionRound:
        """One round over every topic; ``now_ms`` is the time ``retention.ms`` counts from."""
        now = clock.now_ms() if now_ms is None else now_ms
        done = RetentionRound()
        try:
            topics = self.replicas.list_topics()
        except Exception as exc:  # noqa: BLE001 - ZooKeeper trouble: the next round tries again
            log.warning("broker %d: retention check could not list topics: %s", self.broker_id, exc)
            return done
        for topic in topics:
            if stop is not None and stop.is_set():
                break
            try:
                self._check_topic(topic, now, done)
            except Exception as exc:  # logged; the next topic goes on
                done.failed[topic] = exc
                log.warning(
                    "broker %d: retention check of topic %s failed: %s (the next topics go on; retried in %d ms)",
                    self.broker_id,
                    topic,
                    exc,
                    self.check_interval_ms,
                    exc_info=not isinstance(exc, SparklogError),
                )
        return done

    def _check_topic(self, topic: str, now_ms: int, done: RetentionRound) -> None:
        led = sorted(p for p, state in self.replicas.states(topic).items() if state.leader == self.broker_id)
        if not led:
            return
        configs = self.replicas.topic_config(topic)
        table = self.replicas.replica_table(topic, self.broker_id)
        if "delete" in cleanup_policies(configs) and not is_internal(topic):
            for result in apply_delete_policy(table, led, configs, now_ms):
                done.retention.append(result)
                if result.removed_files or result.new_log_start > result.old_log_start:
                    log.info(
                        "broker %d: retention removed %d files (%d records, %d bytes) of %s-%d; log-start %d -> %d",
                        self.broker_id,
                        result.removed_files,
                        result.removed_records,
                        result.removed_bytes,
                        topic,
                        result.partition,
                        result.old_log_start,
                        result.new_log_start,
                    )
        checkpoint = log_step(table, int(configs["history.retention.ms"]))
        done.checkpoints.append(checkpoint)
        if checkpoint.log_files_removed:
            log.info(
                "broker %d: checkpointed %s at version %d; %d expired Delta log files deleted",
                self.broker_id,
                topic,
                checkpoint.version,
                checkpoint.log_files_removed,
            )
