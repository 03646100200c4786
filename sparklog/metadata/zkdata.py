"""Every znode path sparklog uses, and the JSON stored in each (Kafka's ``ZkData``).

All paths are relative to the cluster's chroot (the client is chrooted). Each record
carries ``version`` so the encoding can evolve; decoders reject what they don't know
rather than guess. Topic names reaching here are already validated
(:func:`sparklog.model.topic.validate_topic_name`); this module re-checks, because a path is
the last place a bad name could do harm.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import quote

from sparklog.errors import CoordinationError
from sparklog.model.group_ids import validate_group_id, validate_instance_id
from sparklog.model.topic import validate_topic_name

__all__ = [
    "ADMIN_PREFERRED_ELECTION",
    "ADMIN_REASSIGN",
    "BROKER_IDS",
    "BROKER_REGISTRY",
    "CLUSTER_ID",
    "CONFIG_TOPICS",
    "CONSUMERS",
    "CONTROLLER",
    "CONTROLLER_EPOCH",
    "TOPICS",
    "TRANSACTIONS",
    "BrokerRecord",
    "ClusterIdRecord",
    "ControllerRecord",
    "ElectionRequestRecord",
    "GroupStateRecord",
    "MemberRecord",
    "PartitionState",
    "ReassignmentRecord",
    "StaticDepartureRecord",
    "TopicAssignment",
    "WriterLeaseRecord",
    "broker_ids_path",
    "broker_registry_path",
    "decode_json",
    "encode",
    "group_leader_path",
    "group_member_path",
    "group_members_path",
    "group_path",
    "group_state_path",
    "group_static_path",
    "partition_key",
    "partition_path",
    "partition_state_path",
    "partitions_path",
    "split_partition_key",
    "topic_config_path",
    "topic_path",
    "transaction_offsets_path",
    "transaction_producer_path",
    "transaction_state_path",
    "writer_path",
]

BROKER_IDS = "/brokers/ids"
# Persistent map broker id -> log dir, so replicas resolve to storage while a broker is down.
BROKER_REGISTRY = "/brokers/registry"
TOPICS = "/brokers/topics"
CONFIG_TOPICS = "/config/topics"
CLUSTER_ID = "/cluster/id"  # Kafka's: the id Kafka clients see (Metadata, DescribeCluster)
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
CONSUMERS = "/consumers"
ADMIN_REASSIGN = "/admin/reassign_partitions"
ADMIN_PREFERRED_ELECTION = "/admin/preferred_replica_election"
# Kafka's name: the last block of producer ids handed to a broker ({"block_end": <exclusive>}).
PRODUCER_ID_BLOCK = "/latest_producer_id_block"
# Kafka transactions' coordinator state (sparklog/metadata/transactions.py; Kafka keeps it in
# its __transaction_state topic).
TRANSACTIONS = "/transactions"


def topic_path(topic: str) -> str:
    return f"{TOPICS}/{validate_topic_name(topic)}"


def partitions_path(topic: str) -> str:
    return f"{topic_path(topic)}/partitions"


def partition_path(topic: str, partition: int) -> str:
    return f"{partitions_path(topic)}/{int(partition)}"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{partition_path(topic, partition)}/state"


def writer_path(topic: str, partition: int) -> str:
    return f"{partition_path(topic, partition)}/writer"


def topic_config_path(topic: str) -> str:
    return f"{CONFIG_TOPICS}/{validate_topic_name(topic)}"


def broker_registry_path(broker_id: int) -> str:
    return f"{BROKER_REGISTRY}/{int(broker_id)}"


def broker_ids_path(broker_id: int) -> str:
    """The ephemeral liveness znode of a broker's agent."""
    return f"{BROKER_IDS}/{int(broker_id)}"


def group_path(group_id: str) -> str:
    return f"{CONSUMERS}/{validate_group_id(group_id)}"


def group_members_path(group_id: str) -> str:
    return f"{group_path(group_id)}/members"


def group_member_path(group_id: str, member_key: str) -> str:
    # A member key is a member id (dynamic) or a group.instance.id (static): both path-safe.
    return f"{group_members_path(group_id)}/{validate_instance_id(member_key)}"


def group_state_path(group_id: str) -> str:
    return f"{group_path(group_id)}/state"


def group_leader_path(group_id: str) -> str:
    return f"{group_path(group_id)}/leader"


def group_static_path(group_id: str, instance_id: str) -> str:
    return f"{group_path(group_id)}/static/{validate_instance_id(instance_id)}"


def _name(value: str) -> str:
    """Any transactional or group id as one znode name (percent-encoded, never . or ..)."""
    return "id-" + quote(value, safe="")


def transaction_state_path(transactional_id: str) -> str:
    """The state of one transactional id (its producer id, epoch, partitions, state)."""
    return f"{TRANSACTIONS}/ids/{_name(transactional_id)}"


def transaction_producer_path(producer_id: int) -> str:
    """Which transactional id a producer id belongs to (partition leaders verify batches)."""
    return f"{TRANSACTIONS}/producers/{int(producer_id)}"


def transaction_offsets_path(producer_id: int, group_id: str | None = None) -> str:
    """A transaction's pending group offsets (TxnOffsetCommit), per producer id and group."""
    base = f"{TRANSACTIONS}/offsets/{int(producer_id)}"
    return base if group_id is None else f"{base}/{_name(group_id)}"


def encode(record: Any) -> bytes:
    payload = asdict(record) if hasattr(record, "__dataclass_fields__") else record
    return json.dumps(payload, sort_keys=True, separators=(",", ":")).encode("utf-8")


def decode_json(data: bytes, path: str) -> dict[str, Any]:
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CoordinationError(f"Corrupt JSON in znode {path}: {exc}") from exc
    if not isinstance(value, dict):
        raise CoordinationError(f"Corrupt znode {path}: expected a JSON object")
    return value


@dataclass(frozen=True)
class ClusterIdRecord:
    """``/cluster/id``: the cluster's id (Kafka's: a random UUID, base64url, unpadded),
    created once by whoever needs it first."""

    id: str
    version: int = 1

    @classmethod
    def decode(cls, data: bytes, path: str) -> ClusterIdRecord:
        raw = decode_json(data, path)
        if not isinstance(raw.get("id"), str):
            raise CoordinationError(f"Corrupt znode {path}: no cluster id")
        return cls(id=raw["id"])


@dataclass(frozen=True)
class TopicAssignment:
    """``/brokers/topics/<topic>``: replica lists per partition and the topic id."""

    topic_id: str
    partitions: dict[str, list[int]]
    version: int = 1

    @classmethod
    def decode(cls, data: bytes, path: str) -> TopicAssignment:
        raw = decode_json(data, path)
        return cls(topic_id=raw["topic_id"], partitions={str(k): list(v) for k, v in raw["partitions"].items()})

    def replicas(self, partition: int) -> list[int]:
        return self.partitions[str(partition)]


@dataclass(frozen=True)
class PartitionState:
    """``.../partitions/<p>/state``: leader (-1: offline), leader epoch, in-sync replicas and
    the leader-epoch history ``[[epoch, start_offset], ...]`` (ascending; the offset each
    epoch's leader started appending at), which followers reconcile against."""

    leader: int
    leader_epoch: int
    isr: list[int]
    epochs: list[list[int]] = field(default_factory=lambda: [[0, 0]])
    version: int = 1

    @classmethod
    def decode(cls, data: bytes, path: str) -> PartitionState:
        raw = decode_json(data, path)
        epochs = raw.get("epochs") or [[int(raw["leader_epoch"]), 0]]
        return cls(
            leader=int(raw["leader"]),
            leader_epoch=int(raw["leader_epoch"]),
            isr=[int(b) for b in raw["isr"]],
            epochs=[[int(e), int(o)] for e, o in epochs],
        )

    @property
    def epoch_history(self) -> tuple[tuple[int, int], ...]:
        """:attr:`epochs` as ``(epoch, start_offset)`` pairs, the form the epoch policies take."""
        return tuple((int(epoch), int(start)) for epoch, start in self.epochs)


@dataclass(frozen=True)
class WriterLeaseRecord:
    """``.../partitions/<p>/writer``: who may write the partition, until when, under which epoch.

    ``epoch`` only grows. ``released`` means the holder finished cleanly (no commit of its
    can still be in flight), so the next holder needs no epoch marker. ``next_offset`` was
    the offset counter of Spark tasks before they took their offsets in task order
    (:mod:`sparklog.metadata.task_order`); kept in the encoding, -1.
    """

    owner: str
    epoch: int
    expires_ms: int
    released: bool
    next_offset: int = -1
    version: int = 1

    @classmethod
    def decode(cls, data: bytes, path: str) -> WriterLeaseRecord:
        raw = decode_json(data, path)
        return cls(
            owner=str(raw["owner"]),
            epoch=int(raw["epoch"]),
            expires_ms=int(raw["expires_ms"]),
            released=bool(raw["released"]),
            next_offset=int(raw.get("next_offset", -1)),
        )


@dataclass(frozen=True)
class BrokerRecord:
    """``/brokers/registry/<id>`` (persistent) and ``/brokers/ids/<id>`` (ephemeral, live)."""

    log_dir: str
    rack: str | None = None
    host: str = ""
    # The advertised listeners, ``NAME://host:port`` (Kafka's ``endpoints``); ``port`` is the
    # first one's. Records written before the listener existed have neither: no endpoint.
    port: int = -1
    endpoints: list[str] = field(default_factory=list)
    # The agent's Prometheus endpoint (``metrics.port``), as Kafka's registration carries
    # ``jmx_port``; "" when it serves none (or predates it).
    metrics_url: str = ""
    version: int = 1

    @classmethod
    def decode(cls, data: bytes, path: str) -> BrokerRecord:
        raw = decode_json(data, path)
        return cls(
            log_dir=str(raw["log_dir"]),
            rack=raw.get("rack"),
            host=str(raw.get("host", "")),
            port=int(raw.get("port", -1)),
            endpoints=[str(e) for e in raw.get("endpoints", [])],
            metrics_url=str(raw.get("metrics_url", "")),
        )

    def endpoint(self, listener_name: str) -> tuple[str, int] | None:
        """``(host, port)`` advertised for ``listener_name``, or None."""
        for endpoint in self.endpoints:
            name, _, address = endpoint.partition("://")
            if name == listener_name:
                host, _, port = address.rpartition(":")
                return host.strip("[]"), int(port)
        return None


@dataclass(frozen=True)
class TopicConfigRecord:
    """``/config/topics/<topic>``: the topic's config overrides."""

    config: dict[str, str] = field(default_factory=dict)
    version: int = 1

    @classmethod
    def decode(cls, data: bytes, path: str) -> TopicConfigRecord:
        raw = decode_json(data, path)
        return cls(config={str(k): str(v) for k, v in raw.get("config", {}).items()})


@dataclass(frozen=True)
class MemberRecord:
    """``/consumers/<g>/members/<key>`` (ephemeral): one live member and what it wants.

    ``topics`` is an explicit subscription, ``pattern`` a regex one (the leader resolves it).
    ``acked_generation`` is the generation whose PreparingRebalance this member has
    acknowledged (it committed and stopped fetching its partitions).
    """

    member_id: str
    client_id: str
    host: str
    topics: list[str]
    pattern: str | None
    instance_id: str | None
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: list[str]
    acked_generation: int = -1
    coordinator: int = -1  # the broker publishing a Kafka-protocol member; -1: a ZooKeeper member
    version: int = 1

    @property
    def key(self) -> str:
        return self.instance_id or self.member_id

    @classmethod
    def decode(cls, data: bytes, path: str) -> MemberRecord:
        raw = decode_json(data, path)
        return cls(
            member_id=str(raw["member_id"]),
            client_id=str(raw.get("client_id", "")),
            host=str(raw.get("host", "")),
            topics=[str(t) for t in raw.get("topics", [])],
            pattern=raw.get("pattern"),
            instance_id=raw.get("instance_id"),
            session_timeout_ms=int(raw.get("session_timeout_ms", 45_000)),
            rebalance_timeout_ms=int(raw.get("rebalance_timeout_ms", 300_000)),
            protocols=[str(p) for p in raw.get("protocols", ["range"])],
            acked_generation=int(raw.get("acked_generation", -1)),
            coordinator=int(raw.get("coordinator", -1)),
        )


@dataclass(frozen=True)
class GroupStateRecord:
    """``/consumers/<g>/state``: Kafka's group state machine, as the leader last wrote it.

    ``members`` maps member key -> member id for the generation; ``assignment`` maps member
    key -> ``[[topic, partition], ...]``; ``signature`` fingerprints the membership,
    subscriptions and partition counts the assignment was computed from.
    """

    state: str  # Empty | PreparingRebalance | CompletingRebalance | Stable | Dead
    generation: int
    protocol: str = ""
    leader: str = ""
    members: dict[str, str] = field(default_factory=dict)
    assignment: dict[str, list[list[Any]]] = field(default_factory=dict)
    signature: str = ""
    rebalance_deadline_ms: int = 0
    version: int = 1

    @classmethod
    def decode(cls, data: bytes, path: str) -> GroupStateRecord:
        raw = decode_json(data, path)
        return cls(
            state=str(raw["state"]),
            generation=int(raw["generation"]),
            protocol=str(raw.get("protocol", "")),
            leader=str(raw.get("leader", "")),
            members={str(k): str(v) for k, v in raw.get("members", {}).items()},
            assignment={str(k): [list(tp) for tp in v] for k, v in raw.get("assignment", {}).items()},
            signature=str(raw.get("signature", "")),
            rebalance_deadline_ms=int(raw.get("rebalance_deadline_ms", 0)),
        )

    def partitions_of(self, member_key: str) -> list[tuple[str, int]]:
        return [(str(t), int(p)) for t, p in self.assignment.get(member_key, [])]


@dataclass(frozen=True)
class StaticDepartureRecord:
    """``/consumers/<g>/static/<instance>``: a static member closed cleanly at ``departed_ms``;
    it keeps its place (no rebalance) until ``departed_ms + session_timeout_ms``."""

    member_id: str
    departed_ms: int
    session_timeout_ms: int
    version: int = 1

    @classmethod
    def decode(cls, data: bytes, path: str) -> StaticDepartureRecord:
        raw = decode_json(data, path)
        return cls(str(raw["member_id"]), int(raw["departed_ms"]), int(raw["session_timeout_ms"]))


@dataclass(frozen=True)
class ControllerRecord:
    """``/controller`` (ephemeral): the broker whose agent is the controller, and its epoch
    (the value ``/controller_epoch`` had after it won)."""

    broker_id: int
    epoch: int
    version: int = 1

    @classmethod
    def decode(cls, data: bytes, path: str) -> ControllerRecord:
        raw = decode_json(data, path)
        return cls(broker_id=int(raw["broker_id"]), epoch=int(raw["epoch"]))


def partition_key(topic: str, partition: int) -> str:
    """``"<topic>/<partition>"``: how the ``/admin`` requests name a partition."""
    return f"{topic}/{partition}"


def split_partition_key(key: str) -> tuple[str, int]:
    """``(topic, partition)`` of a :func:`partition_key`."""
    topic, _, partition = key.rpartition("/")
    return topic, int(partition)


@dataclass(frozen=True)
class ReassignmentRecord:
    """``/admin/reassign_partitions``: target replicas per ``"<topic>/<partition>"``, and the
    replicas each had when its reassignment was requested (``original``: what a cancel
    returns to and what ListPartitionReassignments reports as removing; absent in records
    written before it was kept)."""

    partitions: dict[str, list[int]]
    version: int = 1
    original: dict[str, list[int]] = field(default_factory=dict)

    @classmethod
    def decode(cls, data: bytes, path: str) -> ReassignmentRecord:
        raw = decode_json(data, path)
        return cls(
            partitions={str(k): [int(b) for b in v] for k, v in dict(raw["partitions"]).items()},
            original={str(k): [int(b) for b in v] for k, v in dict(raw.get("original", {})).items()},
        )


@dataclass(frozen=True)
class ElectionRequestRecord:
    """``/admin/preferred_replica_election``: partitions ``"<topic>/<partition>"`` whose
    preferred (first) replica should lead again; with ``unclean`` (Kafka's UNCLEAN election
    type), partitions without a live leader that should get one, out of sync if need be."""

    partitions: list[str]
    version: int = 1
    unclean: bool = False

    @classmethod
    def decode(cls, data: bytes, path: str) -> ElectionRequestRecord:
        raw = decode_json(data, path)
        return cls(partitions=[str(k) for k in raw["partitions"]], unclean=bool(raw.get("unclean", False)))
