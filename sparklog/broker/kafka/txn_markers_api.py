"""WriteTxnMarkers (key 27, v1..v2): a transaction coordinator's markers to a partition leader.

Brokers send it to each other (docs/transactions.md): for every marker and partition this
broker leads, the marker is appended through the leader's group commit
(:func:`~sparklog.broker.transactions.markers.append_markers`) and answered once it is on
every in-sync replica; a partition led elsewhere gets NOT_LEADER_OR_FOLLOWER (the
coordinator looks the leader up again and resends), a marker from a coordinator older than
one already seen TRANSACTION_COORDINATOR_FENCED.
"""

from __future__ import annotations

from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from sparklog.broker.kafka.context import Api, ApiRequest, BrokerContext, build, response_module
from sparklog.broker.kafka.error_codes import error_code
from sparklog.broker.transactions.markers import WRITE_TXN_MARKERS_KEY, append_markers
from sparklog.errors import LeaderNotAvailableError
from sparklog.log.txn_log import ControlRecord

__all__ = ["APIS"]

_MARKER_TIMEOUT_MS = 10_000


class WritableTxnMarkerTopic(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def partition_indexes(self) -> tuple[int, ...]: ...


class WritableTxnMarker(Protocol):
    @property
    def producer_id(self) -> int: ...
    @property
    def producer_epoch(self) -> int: ...
    @property
    def transaction_result(self) -> bool: ...
    @property
    def topics(self) -> tuple[WritableTxnMarkerTopic, ...]: ...
    @property
    def coordinator_epoch(self) -> int: ...


class WriteTxnMarkersBody(Protocol):
    """What the handler reads of a WriteTxnMarkers request (kio's v1..v2 request classes)."""

    @property
    def markers(self) -> tuple[WritableTxnMarker, ...]: ...


def write_txn_markers(request: ApiRequest[WriteTxnMarkersBody], broker: BrokerContext) -> Any:
    module = response_module(WRITE_TXN_MARKERS_KEY, request.api_version)
    results = []
    for marker in request.body.markers:
        wanted = [(str(t.name), int(p)) for t in marker.topics for p in t.partition_indexes]
        control = ControlRecord(
            int(marker.producer_id),
            int(marker.producer_epoch),
            bool(marker.transaction_result),
            int(marker.coordinator_epoch),
        )
        if broker.partitions is None or broker.transactions is None:
            outcome: dict[tuple[str, int], BaseException | None] = dict.fromkeys(
                wanted, LeaderNotAvailableError("this listener does not lead partitions")
            )
        else:
            outcome = append_markers(
                broker.partitions.appender,
                broker.replicas,
                broker.broker_id,
                control,
                wanted,
                _MARKER_TIMEOUT_MS,
                broker.transactions.offsets_marker,
            )
        topics: dict[str, list[Any]] = {}
        for topic, partition in wanted:
            error = outcome.get((topic, partition))
            topics.setdefault(topic, []).append(
                build(
                    module.WritableTxnMarkerPartitionResult,
                    partition_index=partition,
                    error_code=ErrorCode.none if error is None else error_code(error),
                )
            )
        results.append(
            build(
                module.WritableTxnMarkerResult,
                producer_id=marker.producer_id,
                topics=tuple(
                    build(module.WritableTxnMarkerTopicResult, name=topic, partitions=tuple(parts))
                    for topic, parts in topics.items()
                ),
            )
        )
    return build(module.WriteTxnMarkersResponse, markers=tuple(results))


APIS = (Api(WRITE_TXN_MARKERS_KEY, 1, 2, write_txn_markers),)
