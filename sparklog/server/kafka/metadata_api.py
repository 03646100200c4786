"""The Metadata API (key 3): what a Kafka client bootstraps from.

Brokers are the *live* ones (``/brokers/ids``) with the advertised endpoint of the listener
the request arrived on (by listener name, as Kafka; a broker registered without endpoints is
left out, since a client could not reach it); topics, partitions, leaders, leader epochs,
replicas and ISR are read fresh from ZooKeeper for each request, so they agree with
``Cluster.describe_topic``. Topics are never auto-created: ``allow_auto_topic_creation`` is
ignored and an unknown topic gets UNKNOWN_TOPIC_OR_PARTITION.
"""

from __future__ import annotations

import base64
import datetime
import uuid
from dataclasses import dataclass, fields
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32Timedelta

from sparklog.errors import InvalidTopicError
from sparklog.metadata.broker_registration import live_brokers
from sparklog.metadata.controller_election import current_controller
from sparklog.model.topic import validate_topic_name
from sparklog.server.replica_manager import ReplicaManager

__all__ = ["NO_THROTTLE", "ClusterView", "build", "metadata_response", "topic_uuid"]

NO_THROTTLE = i32Timedelta.parse(datetime.timedelta(0))


def build(entity_type: type, **values: Any) -> Any:
    """An instance of a kio message type from ``values``, dropping the fields this version lacks."""
    names = {f.name for f in fields(entity_type)}
    return entity_type(**{k: v for k, v in values.items() if k in names})


def topic_uuid(topic_id: str) -> uuid.UUID:
    """sparklog's topic id (base64url of 16 bytes, unpadded, as Kafka prints them) as a UUID."""
    return uuid.UUID(bytes=base64.urlsafe_b64decode(topic_id + "=" * (-len(topic_id) % 4)))


@dataclass(frozen=True)
class ClusterView:
    """What one listener answers from: the broker's replica manager and the listener's name."""

    replicas: ReplicaManager
    listener_name: str
    cluster_id: str | None = None


def metadata_response(response_type: type, version: int, request: Any, cluster: ClusterView) -> Any:
    module = __import__(response_type.__module__, fromlist=["_"])
    replicas = cluster.replicas
    zk = replicas.zk
    brokers = []
    for broker_id, record in live_brokers(zk).items():
        endpoint = record.endpoint(cluster.listener_name)
        if endpoint is not None:
            host, port = endpoint
            brokers.append(
                build(module.MetadataResponseBroker, node_id=broker_id, host=host, port=port, rack=record.rack)
            )
    controller = current_controller(zk)
    existing = replicas.list_topics()
    names: list[tuple[str | None, uuid.UUID | None]]
    if request.topics is None or (version == 0 and not request.topics):
        names = [(name, None) for name in existing]
    else:
        names = [(t.name, getattr(t, "topic_id", None)) for t in request.topics]
    topics = [_topic(module, replicas, existing, name, wanted_id) for name, wanted_id in names]
    return build(
        response_type,
        throttle_time=NO_THROTTLE,
        brokers=tuple(brokers),
        cluster_id=cluster.cluster_id,
        controller_id=-1 if controller is None else controller.broker_id,
        topics=tuple(topics),
        error_code=ErrorCode.none,
    )


def _topic(module: Any, replicas: ReplicaManager, existing: list[str], name: str | None, wanted_id: Any) -> Any:
    topic_type = module.MetadataResponseTopic
    if not name and wanted_id is not None and wanted_id != uuid.UUID(int=0):
        name = next((t for t in existing if topic_uuid(replicas.metadata.assignment(t)[0].topic_id) == wanted_id), None)
        if name is None:
            return build(
                topic_type, error_code=ErrorCode.unknown_topic_id, name=None, topic_id=wanted_id, partitions=()
            )
    zero = uuid.UUID(int=0)
    try:
        validate_topic_name(name or "")
    except InvalidTopicError:
        return build(topic_type, error_code=ErrorCode.invalid_topic_exception, name=name, topic_id=zero, partitions=())
    assert name is not None
    if name not in existing:
        return build(
            topic_type, error_code=ErrorCode.unknown_topic_or_partition, name=name, topic_id=zero, partitions=()
        )
    assignment, _ = replicas.metadata.assignment(name)
    partitions = sorted(int(p) for p in assignment.partitions)
    states = replicas.metadata.partition_states(name, partitions)
    rows = []
    for p in partitions:
        state = states[p]
        rows.append(
            build(
                module.MetadataResponsePartition,
                error_code=ErrorCode.none if state.leader >= 0 else ErrorCode.leader_not_available,
                partition_index=p,
                leader_id=state.leader,
                leader_epoch=state.leader_epoch,
                replica_nodes=tuple(assignment.replicas(p)),
                isr_nodes=tuple(state.isr),
                offline_replicas=(),
            )
        )
    return build(
        topic_type,
        error_code=ErrorCode.none,
        name=name,
        topic_id=topic_uuid(assignment.topic_id),
        is_internal=False,
        partitions=tuple(rows),
    )
