"""ElectLeaders (43, v0..v2), AlterPartitionReassignments (45, v0..v1) and
ListPartitionReassignments (46, v0): Kafka's ``kafka-leader-election``,
``kafka-reassign-partitions`` and every admin client electing and reassigning.

The handlers translate; :mod:`sparklog.admin.partitions` does the work, the calls ``sparklog
partitions elect|reassign`` make: they write the controller's admin znodes, which the
controller executes (:mod:`sparklog.broker.controller.admin_requests`). So any broker
answers: Kafka 4 clients send these to the controller Metadata names (the controller broker,
``metadata_api``), but another broker writes the same znodes.

* **ElectLeaders**: election type 0 (PREFERRED) or 1 (UNCLEAN: a partition without a live
  leader gets a live replica, out of sync if need be); another type is INVALID_REQUEST for
  the whole request, as Kafka's controller answers. Per partition: NONE (elected),
  ELECTION_NOT_NEEDED (its preferred replica / a live replica leads already; left out when
  all partitions were asked, null topics, as Kafka), PREFERRED_LEADER_NOT_AVAILABLE or
  ELIGIBLE_LEADERS_NOT_AVAILABLE (why, in the message), UNKNOWN_TOPIC_OR_PARTITION. The
  answer waits (a thread of its own) until the controller took the request, at most the
  request's timeout.
* **AlterPartitionReassignments**: each partition on its own — a target (distinct live
  brokers; INVALID_REPLICA_ASSIGNMENT otherwise) replaces its pending one; null replicas
  cancel (NO_REASSIGNMENT_IN_PROGRESS when none is pending), moving it back to the replicas
  it had. Answered once the request is stored; the controller moves the replicas.
* **ListPartitionReassignments**: the partitions asked (null: all) still moving, with their
  replicas, adding and removing replicas.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from sparklog.admin.partitions import alter_reassignments, elect_leaders, ongoing_reassignments
from sparklog.broker.kafka.context import NO_THROTTLE, Api, ApiRequest, BrokerContext, Deferred, build, response_module
from sparklog.broker.kafka.error_codes import error_code
from sparklog.errors import InvalidTopicError, SparklogError, TopicNotFoundError, UnknownPartitionError
from sparklog.model.topic import TopicPartition

__all__ = ["APIS"]

ELECT_LEADERS_KEY = 43
ALTER_PARTITION_REASSIGNMENTS_KEY = 45
LIST_PARTITION_REASSIGNMENTS_KEY = 46
_PREFERRED, _UNCLEAN = 0, 1
_TIMEOUT_MS = 60_000


class TimeoutField(Protocol):
    @property
    def timeout(self) -> Any: ...


class ElectionTopic(Protocol):
    @property
    def topic(self) -> str: ...
    @property
    def partitions(self) -> tuple[int, ...]: ...


class ElectLeadersBody(TimeoutField, Protocol):
    """What the handler reads of an ElectLeaders request (kio's v0..v2 request classes; v0 has
    no election type: preferred)."""

    @property
    def topic_partitions(self) -> tuple[ElectionTopic, ...] | None: ...


class ReassignablePartition(Protocol):
    @property
    def partition_index(self) -> int: ...
    @property
    def replicas(self) -> tuple[int, ...] | None: ...


class ReassignableTopic(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def partitions(self) -> tuple[ReassignablePartition, ...]: ...


class AlterReassignmentsBody(TimeoutField, Protocol):
    @property
    def topics(self) -> tuple[ReassignableTopic, ...]: ...


class ListedTopic(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def partition_indexes(self) -> tuple[int, ...]: ...


class ListReassignmentsBody(TimeoutField, Protocol):
    @property
    def topics(self) -> tuple[ListedTopic, ...] | None: ...


def _timeout_s(body: TimeoutField) -> float:
    timeout = getattr(body, "timeout", None)
    millis = _TIMEOUT_MS if timeout is None else int(timeout.total_seconds() * 1000)
    return max(millis, 1_000) / 1000


def _grouped(results: Iterable[tuple[TopicPartition, Any]]) -> dict[str, list[tuple[int, Any]]]:
    topics: dict[str, list[tuple[int, Any]]] = {}
    for (topic, partition), result in sorted(results, key=lambda item: item[0]):
        topics.setdefault(topic, []).append((partition, result))
    return topics


# -- ElectLeaders -------------------------------------------------------------------------
def start_elect_leaders(request: ApiRequest[ElectLeadersBody], broker: BrokerContext) -> Deferred:
    body = request.body
    module = response_module(ELECT_LEADERS_KEY, request.api_version)
    election_type = int(getattr(body, "election_type", _PREFERRED))

    def answer(code: ErrorCode, results: dict[TopicPartition, tuple[ErrorCode, str | None]]) -> Any:
        topics = tuple(
            build(
                module.ReplicaElectionResult,
                topic=topic,
                partition_result=tuple(
                    build(module.PartitionResult, partition_id=p, error_code=c, error_message=m)
                    for p, (c, m) in partitions
                ),
            )
            for topic, partitions in _grouped(results.items()).items()
        )
        return build(
            module.ElectLeadersResponse, throttle_time=NO_THROTTLE, error_code=code, replica_election_results=topics
        )

    if election_type not in (_PREFERRED, _UNCLEAN):
        return Deferred(lambda: answer(ErrorCode.invalid_request, {}))
    asked = (
        None
        if body.topic_partitions is None
        else [(str(t.topic), int(p)) for t in body.topic_partitions for p in t.partitions]
    )
    return Deferred(lambda: answer(ErrorCode.none, _elect(broker, asked, election_type == _UNCLEAN, _timeout_s(body))))


def _elect(
    broker: BrokerContext, asked: list[TopicPartition] | None, unclean: bool, timeout_s: float
) -> dict[TopicPartition, tuple[ErrorCode, str | None]]:
    results: dict[TopicPartition, tuple[ErrorCode, str | None]] = {}
    known = []
    for topic, partition in asked or ():
        try:
            if partition not in broker.replicas.partitions_of(topic):
                raise UnknownPartitionError(f"No such partition as {topic}-{partition}")
            known.append((topic, partition))
        except (TopicNotFoundError, UnknownPartitionError, InvalidTopicError) as exc:  # Kafka: no such topic
            results[(topic, partition)] = (ErrorCode.unknown_topic_or_partition, str(exc))
    if asked is not None and not known:
        return results
    unavailable = ErrorCode.eligible_leaders_not_available if unclean else ErrorCode.preferred_leader_not_available
    try:
        outcome = elect_leaders(broker.replicas, known if asked is not None else None, timeout_s, unclean=unclean)
    except SparklogError as exc:
        code = error_code(exc)
        return results | {tp: (code, str(exc)) for tp in known}
    for tp, result in outcome.items():
        if result == "elected":
            results[tp] = (ErrorCode.none, None)
        elif result != "already":
            results[tp] = (unavailable, f"{tp[0]}-{tp[1]}: {result}")
        elif asked is not None:  # all partitions asked: those needing no election are left out
            results[tp] = (ErrorCode.election_not_needed, None)
    return results


# -- AlterPartitionReassignments ----------------------------------------------------------
def alter_partition_reassignments(request: ApiRequest[AlterReassignmentsBody], broker: BrokerContext) -> Any:
    module = response_module(ALTER_PARTITION_REASSIGNMENTS_KEY, request.api_version)
    changes = {
        (str(t.name), int(p.partition_index)): None if p.replicas is None else [int(b) for b in p.replicas]
        for t in request.body.topics
        for p in t.partitions
    }
    allow = bool(getattr(request.body, "allow_replication_factor_change", True))  # v1+
    try:
        refused = alter_reassignments(broker.replicas, changes, allow_replication_factor_change=allow)
    except SparklogError as exc:  # no controller, ZooKeeper: every partition gets it
        refused = dict.fromkeys(changes, exc)
    topics = tuple(
        build(
            module.ReassignableTopicResponse,
            name=topic,
            partitions=tuple(_partition_response(module, p, e) for p, e in partitions),
        )
        for topic, partitions in _grouped(refused.items()).items()
    )
    return build(
        module.AlterPartitionReassignmentsResponse,
        throttle_time=NO_THROTTLE,
        allow_replication_factor_change=allow,
        error_code=ErrorCode.none,
        error_message=None,
        responses=topics,
    )


def _partition_response(module: Any, partition: int, exc: SparklogError | None) -> Any:
    return build(
        module.ReassignablePartitionResponse,
        partition_index=partition,
        error_code=ErrorCode.none if exc is None else error_code(exc),
        error_message=None if exc is None else str(exc),
    )


# -- ListPartitionReassignments -----------------------------------------------------------
def list_partition_reassignments(request: ApiRequest[ListReassignmentsBody], broker: BrokerContext) -> Any:
    module = response_module(LIST_PARTITION_REASSIGNMENTS_KEY, request.api_version)
    topics = request.body.topics
    wanted = None if topics is None else [(str(t.name), int(p)) for t in topics for p in t.partition_indexes]
    code, message, ongoing = ErrorCode.none, None, {}
    try:
        ongoing = ongoing_reassignments(broker.replicas, wanted)
    except SparklogError as exc:
        code, message = error_code(exc), str(exc)
    listed = tuple(
        build(
            module.OngoingTopicReassignment,
            name=topic,
            partitions=tuple(
                build(
                    module.OngoingPartitionReassignment,
                    partition_index=p,
                    replicas=tuple(replicas),
                    adding_replicas=tuple(adding),
                    removing_replicas=tuple(removing),
                )
                for p, (replicas, adding, removing) in partitions
            ),
        )
        for topic, partitions in _grouped(ongoing.items()).items()
    )
    return build(
        module.ListPartitionReassignmentsResponse,
        throttle_time=NO_THROTTLE,
        error_code=code,
        error_message=message,
        topics=listed,
    )


def _deferred_elect(request: ApiRequest[ElectLeadersBody], broker: BrokerContext) -> Any:
    return start_elect_leaders(request, broker).finish()


APIS = (
    Api(ELECT_LEADERS_KEY, 0, 2, _deferred_elect, start_elect_leaders),
    Api(ALTER_PARTITION_REASSIGNMENTS_KEY, 0, 1, alter_partition_reassignments),
    Api(LIST_PARTITION_REASSIGNMENTS_KEY, 0, 0, list_partition_reassignments),
)
