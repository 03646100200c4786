"""OffsetForLeaderEpoch (key 23, v2..v4): where a leader epoch ends, as a Kafka consumer asks
after the leader of a partition it reads has changed (KIP-320), to learn whether the log it
was reading was truncated under it.

Per partition, answered by its leader only (NOT_LEADER_OR_FOLLOWER elsewhere), from the
partition's leader-epoch history (``PartitionState.epochs``: each epoch with the offset its
leader started appending at, kept by the controller as Kafka's leader-epoch cache):

* ``current_leader_epoch`` (the epoch the client's metadata names; -1: unchecked) older than
  the partition's → FENCED_LEADER_EPOCH, newer → UNKNOWN_LEADER_EPOCH (this broker's view is
  behind: the client retries), as Kafka fences them;
* the answer is :func:`~sparklog.runtime.policy.epoch_end_offset` — the largest epoch at or
  below the one asked and the offset it ends at: the leader's log end for the current epoch,
  the next epoch's start offset for an older one; an epoch newer than the current one has no
  end (-1, -1: Kafka's UNDEFINED).

Invariant: the answer never ends an epoch above what the leader holds, so a consumer whose
position is past it was reading records this lineage does not have (an unclean election), and
a consumer of a clean failover never is (a new leader's log holds everything below the old
high watermark, which bounds every consumer's position).
"""

from __future__ import annotations

from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from sparklog.broker.kafka.context import NO_THROTTLE, Api, ApiRequest, BrokerContext, build, response_module
from sparklog.broker.kafka.error_codes import error_code
from sparklog.broker.partition import check_leader
from sparklog.runtime.policy import epoch_end_offset

__all__ = ["APIS"]

OFFSET_FOR_LEADER_EPOCH_KEY = 23
_UNDEFINED = -1


class EpochPartition(Protocol):
    @property
    def partition(self) -> int: ...
    @property
    def current_leader_epoch(self) -> int: ...
    @property
    def leader_epoch(self) -> int: ...


class EpochTopic(Protocol):
    @property
    def topic(self) -> str: ...
    @property
    def partitions(self) -> tuple[EpochPartition, ...]: ...


class OffsetForLeaderEpochBody(Protocol):
    """What the handler reads of an OffsetForLeaderEpoch request (kio's v2..v4 request classes)."""

    @property
    def topics(self) -> tuple[EpochTopic, ...]: ...


def offset_for_leader_epoch(request: ApiRequest[OffsetForLeaderEpochBody], broker: BrokerContext) -> Any:
    module = response_module(OFFSET_FOR_LEADER_EPOCH_KEY, request.api_version)
    topics = []
    for topic in request.body.topics:
        partitions = []
        for wanted in topic.partitions:
            try:
                code, epoch, end = _end_of_epoch(broker, topic.topic, wanted)
            except Exception as exc:  # noqa: BLE001 - answered as this partition's error code
                code, epoch, end = error_code(exc), _UNDEFINED, _UNDEFINED
            partitions.append(
                build(
                    module.EpochEndOffset,
                    error_code=code,
                    partition=wanted.partition,
                    leader_epoch=epoch,
                    end_offset=end,
                )
            )
        topics.append(build(module.OffsetForLeaderTopicResult, topic=topic.topic, partitions=tuple(partitions)))
    return build(module.OffsetForLeaderEpochResponse, throttle_time=NO_THROTTLE, topics=tuple(topics))


def _end_of_epoch(broker: BrokerContext, topic: str, wanted: EpochPartition) -> tuple[ErrorCode, int, int]:
    partition = int(wanted.partition)
    state = check_leader(broker.replicas, broker.broker_id, topic, partition)
    current = int(wanted.current_leader_epoch)
    if 0 <= current < state.leader_epoch:
        return ErrorCode.fenced_leader_epoch, _UNDEFINED, _UNDEFINED
    if current > state.leader_epoch:
        return ErrorCode.unknown_leader_epoch, _UNDEFINED, _UNDEFINED
    at = broker.replicas.fetch_positions(topic, [partition])[partition]
    answer = epoch_end_offset(state.epoch_history, int(wanted.leader_epoch), at.log_end)
    if answer is None:
        return ErrorCode.none, _UNDEFINED, _UNDEFINED
    return ErrorCode.none, answer[0], answer[1]


APIS = (Api(OFFSET_FOR_LEADER_EPOCH_KEY, 2, 4, offset_for_leader_epoch),)
