"""How a light consumer becomes a member of its group (DESIGN §8: two ways to be a member,
one group system).

* With ``bootstrap.servers``: a member of the brokers' group coordinator, through Kafka's
  protocol (:class:`sparklog.clients.protocol_member.ProtocolMember`), in the same groups as
  Kafka clients; offsets are committed and fetched through the coordinator.
* Without: a member of sparklog's ZooKeeper membership
  (:class:`sparklog.metadata.group_member.GroupMember`) on a ZooKeeper session of its own
  whose timeout is ``session.timeout.ms``; offsets go to ``__consumer_offsets`` directly. Such
  a member refuses a group a broker coordinates (and a coordinator refuses a group with such
  members: one membership system per group).

Both offer the consumer the same interface (``join``, ``sync``, ``ack``, ``leave``,
``update_subscription``, ``changed``, ``assignment``, ``member_id``, ``key``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from sparklog.errors import TopicNotFoundError
from sparklog.group.assignors import MemberSubscription, assign
from sparklog.group.coordinator import GroupCoordinator
from sparklog.model.group_ids import new_member_id
from sparklog.model.topic import TopicPartition, is_internal
from sparklog.runtime.replica_manager import ReplicaManager

if TYPE_CHECKING:
    from sparklog.clients.protocol_member import ProtocolMember
    from sparklog.metadata.group_member import GroupMember
    from sparklog.metadata.session import ZkSession

__all__ = ["protocol_member", "zookeeper_member"]


def protocol_member(
    replicas: ReplicaManager,
    group_id: str,
    configs: Mapping[str, Any],
    client_id: str,
    instance_id: str | None,
    topics: list[str],
    pattern: str | None,
) -> ProtocolMember:
    from sparklog.clients.protocol_member import ProtocolMember

    def resolve(subscribed: Sequence[str], regex: str | None) -> list[str]:
        wanted = set(subscribed)
        if regex is not None:
            compiled = re.compile(regex)
            wanted |= {t for t in replicas.list_topics() if compiled.fullmatch(t) and not is_internal(t)}
        return sorted(wanted)

    def partition_counts(wanted: Iterable[str]) -> dict[str, int]:
        counts = {}
        for topic in sorted(set(wanted)):
            try:
                counts[topic] = len(replicas.partitions_of(topic))
            except TopicNotFoundError:
                continue  # a subscribed topic that does not exist (yet) gets no partitions
        return counts

    return ProtocolMember(
        group_id,
        bootstrap_servers=str(configs["bootstrap.servers"]),
        client_id=client_id,
        topics=topics,
        pattern=pattern,
        instance_id=instance_id,
        session_timeout_ms=int(configs["session.timeout.ms"]),
        rebalance_timeout_ms=int(configs["max.poll.interval.ms"]),
        heartbeat_interval_ms=int(configs["heartbeat.interval.ms"]),
        protocols=str(configs["partition.assignment.strategy"]).split(","),
        resolve=resolve,
        partition_counts=partition_counts,
    )


def zookeeper_member(
    replicas: ReplicaManager,
    coordinator: GroupCoordinator,
    group_id: str,
    configs: Mapping[str, Any],
    client_id: str,
    instance_id: str | None,
    topics: list[str],
    pattern: str | None,
) -> tuple[GroupMember, ZkSession]:
    from sparklog.metadata.group_member import GroupMember
    from sparklog.metadata.session import ZkSession

    def run_assignor(
        protocol: str,
        members: Sequence[Any],
        subscriptions: Mapping[str, Sequence[str]],
        counts: Mapping[str, int],
        previous: Mapping[str, list[TopicPartition]],
    ) -> dict[str, list[TopicPartition]]:
        subs = [MemberSubscription(m.key, tuple(subscriptions[m.key]), m.instance_id) for m in members]
        return assign(protocol, subs, counts, previous)

    session_timeout_ms = int(configs["session.timeout.ms"])
    zk = ZkSession(
        replicas.zk.connect_string, session_timeout_ms, replicas.config.zookeeper_connection_timeout_ms
    ).start()
    member = GroupMember(
        zk,
        group_id,
        client_id=client_id,
        member_id=new_member_id(client_id),
        topics=topics,
        pattern=pattern,
        instance_id=instance_id,
        session_timeout_ms=session_timeout_ms,
        rebalance_timeout_ms=int(configs["max.poll.interval.ms"]),
        protocols=str(configs["partition.assignment.strategy"]).split(","),
        assign=run_assignor,
        on_generation=lambda generation: coordinator.mark_generation(group_id, generation),
        generation_floor=lambda: coordinator.generation(group_id),
    )
    return member, zk
