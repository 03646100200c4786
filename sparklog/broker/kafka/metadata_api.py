"""The Metadata API (key 3, v0..v12): what a Kafka client bootstraps from; and DescribeCluster
(key 60, v0..v2): the same brokers and controller, with the cluster id.

Brokers are the *live* ones (``/brokers/ids``) with the advertised endpoint of the listener
the request arrived on (by listener name, as Kafka; a broker registered without endpoints is
left out, since a client could not reach it); topics, partitions, leaders, leader epochs,
replicas and ISR are read fresh from ZooKeeper for each request, so they agree with
``Cluster.describe_topic``, except a leader the response names no node of: a broker gone
(killed, not yet replaced by the controller) or without this listener is answered as Kafka
answers it, leader -1 with LEADER_NOT_AVAILABLE or LISTENER_NOT_FOUND (so clients refresh
soon), and replicas on brokers that are gone are listed offline. An unknown topic is created
(Kafka's ``auto.create.topics.enable``, default true: ``num.partitions``,
``default.replication.factor``) when the request allows it
(v4+; always before v4, as Kafka) and answered LEADER_NOT_AVAILABLE until its leaders are
known; otherwise, or for an invalid or internal name, UNKNOWN_TOPIC_OR_PARTITION. The cluster id is
``/cluster/id`` (created by the first broker that is asked, as Kafka does). DescribeCluster
answers for broker endpoints only (a request for controller endpoints gets
MISMATCHED_ENDPOINT_TYPE: the controller is one of the brokers, not a quorum of its own);
no broker is ever fenced; with no authorizer, the cluster's authorized operations are all of
Kafka's cluster operations.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from sparklog.broker.kafka.context import NO_THROTTLE, Api, ApiRequest, BrokerContext, build, response_module
from sparklog.errors import InvalidTopicError, TopicExistsError, TopicNotFoundError
from sparklog.metadata.broker_registration import live_brokers
from sparklog.metadata.controller_election import current_controller
from sparklog.metadata.zkdata import BrokerRecord
from sparklog.model.topic import is_internal, validate_topic_name
from sparklog.runtime.replica_manager import ReplicaManager
from sparklog.runtime.topics import create_topic

__all__ = ["APIS", "topic_uuid"]

METADATA_KEY = 3
DESCRIBE_CLUSTER_KEY = 60
_BROKER_ENDPOINTS = 1
_CONTROLLER_ENDPOINTS = 2
_OPERATIONS_NOT_ASKED = -(2**31)
# Kafka's AclOperation codes a CLUSTER resource supports: CREATE, ALTER, DESCRIBE,
# CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE.
_CLUSTER_OPERATIONS = sum(1 << op for op in (5, 7, 8, 9, 10, 11, 12))


class MetadataTopic(Protocol):
    @property
    def name(self) -> str | None: ...


class MetadataBody(Protocol):
    """What the handler reads of a Metadata request (kio's v0..v12 request classes)."""

    @property
    def topics(self) -> tuple[MetadataTopic, ...] | None: ...


class DescribeClusterBody(Protocol):
    """What the handler reads of a DescribeCluster request (kio's v0..v2 request classes)."""

    @property
    def include_cluster_authorized_operations(self) -> bool: ...


def topic_uuid(topic_id: str) -> uuid.UUID:
    """sparklog's topic id (base64url of 16 bytes, unpadded, as Kafka prints them) as a UUID."""
    return uuid.UUID(bytes=base64.urlsafe_b64decode(topic_id + "=" * (-len(topic_id) % 4)))


def metadata_response(request: ApiRequest[MetadataBody], cluster: BrokerContext) -> Any:
    version = request.api_version
    module = response_module(METADATA_KEY, version)
    response_type = module.MetadataResponse
    replicas = cluster.replicas
    zk = replicas.zk
    registered = live_brokers(zk)
    live = _brokers(cluster, registered)
    brokers = [
        build(module.MetadataResponseBroker, node_id=broker_id, host=host, port=port, rack=rack)
        for broker_id, host, port, rack in live
    ]
    nodes = _Nodes(frozenset(registered), frozenset(broker_id for broker_id, _host, _port, _rack in live))
    controller = current_controller(zk)
    existing = replicas.list_topics()
    names: list[tuple[str | None, uuid.UUID | None]]
    wanted = request.body.topics
    if wanted is None or (version == 0 and not wanted):
        names = [(name, None) for name in existing]
    else:
        names = [(t.name, getattr(t, "topic_id", None)) for t in wanted]
    auto_create = replicas.config.auto_create_topics_enable and bool(
        getattr(request.body, "allow_auto_topic_creation", True)
    )
    topics = [_topic(module, replicas, nodes, existing, name, wanted_id, auto_create) for name, wanted_id in names]
    return build(
        response_type,
        throttle_time=NO_THROTTLE,
        brokers=tuple(brokers),
        cluster_id=cluster.cluster_id or replicas.metadata.cluster_id(),
        controller_id=-1 if controller is None else controller.broker_id,
        topics=tuple(topics),
        error_code=ErrorCode.none,
    )


@dataclass(frozen=True)
class _Nodes:
    """The brokers a response can name: registered (live) ones, and those of them with an
    endpoint for the request's listener (the response's nodes)."""

    live: frozenset[int]
    listed: frozenset[int]

    def leader(self, broker_id: int) -> tuple[int, ErrorCode]:
        """The leader id to answer and the partition's error, as Kafka's metadata cache:
        no leader, or one that is gone (killed, not yet replaced by the controller), is
        LEADER_NOT_AVAILABLE; a live one without this listener LISTENER_NOT_FOUND; either way
        leader -1, so the client refreshes its metadata soon (a node id it cannot resolve
        would leave it waiting for metadata.max.age.ms)."""
        if broker_id in self.listed:
            return broker_id, ErrorCode.none
        return -1, ErrorCode.listener_not_found if broker_id in self.live else ErrorCode.leader_not_available


def _brokers(cluster: BrokerContext, registered: Mapping[int, BrokerRecord]) -> list[tuple[int, str, int, str | None]]:
    """``(id, host, port, rack)`` of the ``registered`` (live) brokers with an endpoint for this listener."""
    result = []
    for broker_id, record in registered.items():
        endpoint = record.endpoint(cluster.listener_name)
        if endpoint is not None:
            result.append((broker_id, endpoint[0], endpoint[1], record.rack))
    return result


def describe_cluster(request: ApiRequest[DescribeClusterBody], cluster: BrokerContext) -> Any:
    body = request.body
    module = response_module(DESCRIBE_CLUSTER_KEY, request.api_version)
    endpoint_type = int(getattr(body, "endpoint_type", _BROKER_ENDPOINTS))
    code, message = ErrorCode.none, None
    if endpoint_type == _CONTROLLER_ENDPOINTS:
        code = ErrorCode.mismatched_endpoint_type
        message = "The request was sent to a broker endpoint; sparklog has no separate controller endpoints"
    elif endpoint_type != _BROKER_ENDPOINTS:
        code, message = ErrorCode.unsupported_endpoint_type, f"Endpoint type {endpoint_type} is not supported"
    brokers = ()
    controller_id = -1
    if code == ErrorCode.none:
        brokers = tuple(
            build(module.DescribeClusterBroker, broker_id=b, host=host, port=port, rack=rack, is_fenced=False)
            for b, host, port, rack in _brokers(cluster, live_brokers(cluster.replicas.zk))
        )
        controller = current_controller(cluster.replicas.zk)
        controller_id = -1 if controller is None else controller.broker_id
    return build(
        module.DescribeClusterResponse,
        throttle_time=NO_THROTTLE,
        error_code=code,
        error_message=message,
        endpoint_type=endpoint_type,
        cluster_id=cluster.cluster_id or cluster.replicas.metadata.cluster_id(),
        controller_id=controller_id,
        brokers=brokers,
        cluster_authorized_operations=_CLUSTER_OPERATIONS
        if body.include_cluster_authorized_operations
        else _OPERATIONS_NOT_ASKED,
    )


def _topic(
    module: Any,
    replicas: ReplicaManager,
    nodes: _Nodes,
    existing: list[str],
    name: str | None,
    wanted_id: uuid.UUID | None,
    auto_create: bool,
) -> Any:
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
    if name not in existing and auto_create and not is_internal(name):
        try:
            create_topic(replicas, name, replicas.config.num_partitions, replicas.config.default_replication_factor)
        except TopicExistsError:
            pass  # created meanwhile by another broker or client
        return build(topic_type, error_code=ErrorCode.leader_not_available, name=name, topic_id=zero, partitions=())
    if name not in existing:
        return build(
            topic_type, error_code=ErrorCode.unknown_topic_or_partition, name=name, topic_id=zero, partitions=()
        )
    assignment, _ = replicas.metadata.assignment(name)
    partitions = sorted(int(p) for p in assignment.partitions)
    try:
        # The watched cache (no ZooKeeper round trip per partition: a group leader's Metadata
        # request sits on every rebalance); a topic still being created is read directly.
        states = replicas.states(name, partitions)
    except TopicNotFoundError:
        states = replicas.metadata.partition_states(name, partitions)
    rows = []
    for p in partitions:
        state = states[p]
        leader, code = nodes.leader(state.leader)
        replica_ids = assignment.replicas(p)
        rows.append(
            build(
                module.MetadataResponsePartition,
                error_code=code,
                partition_index=p,
                leader_id=leader,
                leader_epoch=state.leader_epoch,
                replica_nodes=tuple(replica_ids),
                isr_nodes=tuple(state.isr),
                offline_replicas=tuple(b for b in replica_ids if b not in nodes.live),
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


APIS = (Api(METADATA_KEY, 0, 12, metadata_response), Api(DESCRIBE_CLUSTER_KEY, 0, 2, describe_cluster))
