"""Brokers as an admin client sees them (Kafka's ``describeCluster``): the registered brokers,
which of them are live (their agent holds ``/brokers/ids/<id>``), and the controller; and what
one broker's log dir holds (Kafka's ``describeLogDirs``): each replica assigned to it, its size
(the bytes of its live Delta files) and how far it is behind its leader's high watermark."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sparklog.errors import BrokerNotAvailableError, SparklogError
from sparklog.metadata.broker_registration import live_broker_ids
from sparklog.metadata.controller_election import current_controller
from sparklog.runtime.replica_manager import ReplicaManager

__all__ = [
    "BrokerDescription",
    "ReplicaInLogDir",
    "describe_brokers",
    "describe_log_dir",
    "live_brokers",
    "require_brokers",
    "require_fetch_selection",
]


@dataclass(frozen=True)
class BrokerDescription:
    broker_id: int
    host: str
    rack: str | None
    log_dir: str
    live: bool
    controller: bool


@dataclass(frozen=True)
class ReplicaInLogDir:
    topic: str
    partition: int
    size_bytes: int  # the live files of the partition in the broker's table
    offset_lag: int  # the leader's high watermark minus this replica's log end (0 on the leader; -1 unknown)


def describe_log_dir(
    replicas: ReplicaManager, broker_id: int, partitions: Iterable[tuple[str, int]] | None = None
) -> list[ReplicaInLogDir]:
    """The replicas assigned to ``broker_id`` (of ``partitions``, default all), in topic and
    partition order; a topic deleted meanwhile is left out."""
    wanted = None if partitions is None else set(partitions)
    topics = sorted({t for t, _ in wanted}) if wanted is not None else replicas.list_topics()
    found = []
    for topic in topics:
        try:
            assignment, _ = replicas.metadata.assignment(topic)
            hosted = sorted(
                int(p)
                for p, brokers in assignment.partitions.items()
                if broker_id in brokers and (wanted is None or (topic, int(p)) in wanted)
            )
            if not hosted:
                continue
            table = replicas.replica_table(topic, broker_id)
            snapshot = table.snapshot()
            sizes = {p: 0 for p in hosted}
            for entry in table.files(snapshot, set(hosted)):
                sizes[entry.partition] += entry.size_bytes
            states = replicas.states(topic, hosted)
        except SparklogError:
            continue  # deleted (or re-created) while we looked
        try:
            watermarks = replicas.high_watermarks(topic, [p for p in hosted if states[p].leader != broker_id])
        except SparklogError:
            watermarks = {}  # a partition without a live leader: its lag is unknown (Kafka's -1)
        for p in hosted:
            if states[p].leader == broker_id:
                lag = 0
            else:
                lag = max(watermarks[p] - table.log_end(snapshot, p), 0) if p in watermarks else -1
            found.append(ReplicaInLogDir(topic, p, sizes[p], lag))
    return found


def live_brokers(replicas: ReplicaManager) -> set[int]:
    """Ids of the brokers whose agent is running now (empty in the agentless default)."""
    return set(live_broker_ids(replicas.zk))


def describe_brokers(replicas: ReplicaManager) -> list[BrokerDescription]:
    """Every registered broker, live or not, in id order."""
    registry = replicas.metadata.brokers()
    live = live_brokers(replicas)
    controller = current_controller(replicas.zk)
    return [
        BrokerDescription(
            broker_id=b,
            host=r.host,
            rack=r.rack,
            log_dir=r.log_dir,
            live=b in live,
            controller=controller is not None and controller.broker_id == b,
        )
        for b, r in sorted(registry.items())
    ]


def require_brokers(replicas: ReplicaManager, broker_ids: Iterable[int]) -> None:
    """Refuse ids of brokers that are not registered, listing those that are."""
    registered = sorted(replicas.metadata.brokers())
    unknown = [b for b in dict.fromkeys(broker_ids) if b not in registered]
    if unknown:
        verb = "is not registered" if len(unknown) == 1 else "are not registered"
        listed = ", ".join(map(str, registered)) or "none"
        raise BrokerNotAvailableError(
            f"Broker{'s' if len(unknown) > 1 else ''} {', '.join(map(str, unknown))} {verb}; "
            f"registered brokers: {listed}"
        )


def require_fetch_selection(
    replicas: ReplicaManager, broker_ids: Iterable[int] | None, topics: Iterable[str] | None
) -> None:
    """Refuse a replica fetch's unregistered brokers and missing topics before any work: a
    misspelt name would otherwise copy nothing and look like a caught-up replica."""
    from sparklog.admin.topics import require_topics

    require_brokers(replicas, broker_ids or ())
    require_topics(replicas, topics or ())
