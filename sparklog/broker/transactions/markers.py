"""Transaction markers reach the partitions' leaders (docs/transactions.md, DESIGN §14).

A coordinator completing a transaction sends each partition's leader a marker, as Kafka's
coordinator does: a partition this broker leads gets it through its own appender
(:func:`append_markers`), any other over the wire with Kafka's WriteTxnMarkers (key 27,
v1) to the leader named by the partition state, whose handler calls the same function. A
``__consumer_offsets`` partition gets no control row: its leader (the group coordinator)
applies or drops the transaction's pending group offsets instead
(:mod:`sparklog.broker.transactions.txn_offsets`), as Kafka's group coordinator does.
Markers go through the leader's group commit, never around it: the leader is the only
writer of a partition's transaction state (open transactions, aborted runs, its fetch
tail), so nothing it keeps in memory can go stale.

Invariants: a marker is acknowledged only when its commit is on every in-sync replica
(acks=all, like Kafka's markers), so a leader failover cannot lose an acknowledged marker;
a partition that fails (leader moved, timeout) is reported failed and the coordinator
sends it again (a second marker for a closed transaction is a no-op at the leader).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.write_txn_markers.v1 import request as markers_v1

from sparklog import clock
from sparklog.broker.kafka.records import control_batch
from sparklog.broker.leader_appender import LeaderAppender
from sparklog.broker.pending_append import PendingAppend
from sparklog.clients.kafka_wire import KafkaConnection
from sparklog.errors import LeaderNotAvailableError, NotLeaderError, SparklogError
from sparklog.log.txn_log import ControlRecord, control_record_rows
from sparklog.metadata.broker_registration import live_brokers
from sparklog.model.topic import OFFSETS_TOPIC, TopicPartition, partitions_by_topic
from sparklog.runtime.replica_manager import ReplicaManager

__all__ = ["WRITE_TXN_MARKERS_KEY", "MarkerWriter", "OffsetsMarker", "append_markers"]

log = logging.getLogger(__name__)

WRITE_TXN_MARKERS_KEY = 27
_VERSION = 1
OffsetsMarker = Callable[[ControlRecord, int], None]


class MarkerError(SparklogError):
    """A partition leader answered a marker with a Kafka error code."""

    def __init__(self, code: ErrorCode, where: str) -> None:
        super().__init__(f"marker for {where} refused: {code.name}")
        self.code = code


def append_markers(
    appender: LeaderAppender,
    replicas: ReplicaManager,
    broker_id: int,
    marker: ControlRecord,
    partitions: Sequence[TopicPartition],
    timeout_ms: int,
    offsets_marker: OffsetsMarker,
) -> dict[TopicPartition, BaseException | None]:
    """Append ``marker`` to each of ``partitions`` this broker leads (one control row each,
    through the group commit) and wait for the commits; per partition None or the error.
    ``offsets_marker(marker, partition)`` completes a ``__consumer_offsets`` partition's
    pending group offsets instead."""
    outcome: dict[TopicPartition, BaseException | None] = {}
    queued: dict[TopicPartition, PendingAppend] = {}
    now_ms = clock.now_ms()
    for topic, partition in partitions:
        try:
            replicas.check_partition(topic, partition, max_age_ms=1000)
            state = replicas.states(topic, [partition])[partition]
            if state.leader != broker_id:
                raise NotLeaderError(f"broker {broker_id} does not lead {topic}-{partition} (leader {state.leader})")
            if topic == OFFSETS_TOPIC:
                offsets_marker(marker, partition)
                outcome[(topic, partition)] = None
                continue
        except SparklogError as exc:
            outcome[(topic, partition)] = exc
            continue
        queued[(topic, partition)] = PendingAppend(
            partition,
            control_record_rows(marker, now_ms),
            "all",
            timeout_ms,
            wire=control_batch(marker, 0, now_ms, -1),
            marker=marker,
        )
    by_topic: dict[str, list[PendingAppend]] = {}
    for (topic, _partition), item in queued.items():
        by_topic.setdefault(topic, []).append(item)
    for topic, items in by_topic.items():
        appender.append(topic, items)
    for key, item in queued.items():
        if not item.wait_done(timeout_ms / 1000 + 1):
            outcome[key] = TimeoutError(f"marker for {key[0]}-{key[1]} not committed within {timeout_ms} ms")
        else:
            outcome[key] = item.error
    return outcome


class MarkerWriter:
    """Sends a transaction's markers to the leaders of its partitions (the coordinator's side)."""

    def __init__(self, replicas: ReplicaManager, broker_id: int, appender: LeaderAppender, listener_name: str) -> None:
        self.replicas = replicas
        self.broker_id = broker_id
        self.appender = appender
        self.listener_name = listener_name

    def write(
        self,
        marker: ControlRecord,
        partitions: Sequence[TopicPartition],
        timeout_ms: int,
        offsets_marker: OffsetsMarker,
    ) -> dict[TopicPartition, BaseException | None]:
        """One attempt for every partition; per partition None (written) or why not."""
        by_leader: dict[int, list[TopicPartition]] = {}
        outcome: dict[TopicPartition, BaseException | None] = {}
        for topic, partition in partitions:
            try:
                leader = self.replicas.states(topic, [partition])[partition].leader
            except SparklogError as exc:
                outcome[(topic, partition)] = exc
                continue
            if leader is None or leader < 0:
                outcome[(topic, partition)] = LeaderNotAvailableError(f"{topic}-{partition} has no leader")
                continue
            by_leader.setdefault(leader, []).append((topic, partition))
        for leader, owned in by_leader.items():
            if leader == self.broker_id:
                outcome.update(
                    append_markers(
                        self.appender, self.replicas, self.broker_id, marker, owned, timeout_ms, offsets_marker
                    )
                )
                continue
            try:
                outcome.update(self._send(leader, marker, owned, timeout_ms))
            except (OSError, SparklogError) as exc:
                log.info("markers to broker %d failed: %s", leader, exc)
                outcome.update({tp: exc for tp in owned})
        return outcome

    def _send(
        self, leader: int, marker: ControlRecord, partitions: Sequence[TopicPartition], timeout_ms: int
    ) -> dict[TopicPartition, BaseException | None]:
        record = live_brokers(self.replicas.zk).get(leader)
        endpoint = record.endpoint(self.listener_name) if record is not None else None
        if endpoint is None:
            raise LeaderNotAvailableError(f"broker {leader} is not live on listener {self.listener_name}")
        topics = partitions_by_topic(partitions)
        request = markers_v1.WriteTxnMarkersRequest(
            markers=(
                markers_v1.WritableTxnMarker(
                    producer_id=marker.producer_id,  # type: ignore[arg-type]
                    producer_epoch=marker.producer_epoch,  # type: ignore[arg-type]
                    transaction_result=marker.commit,
                    topics=tuple(
                        markers_v1.WritableTxnMarkerTopic(name=t, partition_indexes=tuple(ps))  # type: ignore[arg-type]
                        for t, ps in topics.items()
                    ),
                    coordinator_epoch=marker.coordinator_epoch,  # type: ignore[arg-type]
                ),
            )
        )
        response = _call(endpoint[0], endpoint[1], request, timeout_ms / 1000 + 5)
        outcome: dict[TopicPartition, BaseException | None] = {}
        for result in response.markers:
            for topic_result in result.topics:
                for partition_result in topic_result.partitions:
                    key = (str(topic_result.name), int(partition_result.partition_index))
                    code = partition_result.error_code
                    outcome[key] = None if code == ErrorCode.none else MarkerError(code, f"{key[0]}-{key[1]}")
        for key in partitions:
            outcome.setdefault(key, MarkerError(ErrorCode.unknown_server_error, f"{key[0]}-{key[1]} (no answer)"))
        return outcome


def _call(host: str, port: int, body: Any, timeout_s: float) -> Any:
    """One request on a new connection to another broker; the decoded response body."""
    connection = KafkaConnection("leader", host, port, "sparklog-txn-coordinator", timeout_s)
    try:
        return connection.call(body)
    finally:
        connection.close()
