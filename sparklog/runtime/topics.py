"""Topic management: create, describe, alter configs, add partitions, delete.

The one implementation under the broker's CreateTopics, CreatePartitions, DeleteTopics,
AlterConfigs and Metadata (auto-creation) handlers, the group coordinator (which creates
``__consumer_offsets``) and :mod:`sparklog.admin.topics` (the public facade the CLI and
``Cluster`` use): what Kafka's ``AdminZkClient`` is to its brokers and tools, over a
:class:`~sparklog.runtime.replica_manager.ReplicaManager`. Order of steps (DESIGN §4):
ZooKeeper metadata first (one multi-op), then one Delta table per replica; a failed table
creation removes the metadata again, so a failed create never leaves a half-made topic.
Config changes are compare-and-set on the config znode's version: concurrent alters never
lose an update. Every change can be *validated only* (``validate_only``: Kafka's flag of
CreateTopics, CreatePartitions and AlterConfigs): the same checks, nothing written.
"""

from __future__ import annotations

import base64
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

from sparklog.config import TOPIC_CONFIGS, validate_configs, with_defaults
from sparklog.errors import (
    ConfigError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    LeaseTimeoutError,
    TopicExistsError,
    TopicNotFoundError,
)
from sparklog.metadata.broker_registration import live_broker_ids
from sparklog.metadata.lease import WriterLease
from sparklog.model.topic import PartitionDescription, TopicDescription, is_internal, validate_topic_name
from sparklog.runtime.deleted_topics import remove_topic_offsets
from sparklog.runtime.placement import (
    assign_new_partitions,
    assign_replicas,
    parse_replica_assignment,
    validate_replica_assignment,
)
from sparklog.runtime.replica_manager import ReplicaManager

__all__ = [
    "ConfigOperation",
    "alter_topic_config",
    "create_partitions",
    "create_topic",
    "delete_topic",
    "describe_topic",
    "incremental_alter_topic_config",
    "parse_replica_assignment",
    "plan_topic",
    "replace_topic_config",
]

# Kafka's AlterConfigOp: set a value, remove the override, add to / remove from a list config.
ConfigOperation = tuple[Literal["set", "delete", "append", "subtract"], str, str | None]
# Configs whose value is a comma-separated list (APPEND and SUBTRACT apply to them only).
LIST_CONFIGS = frozenset({"cleanup.policy"})


def _new_topic_id() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")


def _stored_configs(configs: Mapping[str, Any]) -> dict[str, str]:
    def text(value: Any) -> str:
        return str(value).lower() if isinstance(value, bool) else str(value)

    return {key: text(value) for key, value in sorted(configs.items())}


def plan_topic(
    replicas: ReplicaManager,
    name: str,
    partitions: int = 1,
    replication_factor: int = 1,
    config: Mapping[str, Any] | None = None,
    replica_assignment: Mapping[int, Sequence[int]] | None = None,
) -> tuple[dict[int, list[int]], dict[str, str]]:
    """Every check of :func:`create_topic`, nothing written: the replica assignment (partition
    -> broker ids) and the config overrides (as stored) the topic would get.

    Raises ``InvalidTopicError``, ``TopicExistsError``, ``ConfigError``, ``InvalidPartitionsError``,
    ``InvalidReplicationFactorError`` or ``InvalidReplicaAssignmentError`` (in that order, as
    Kafka checks a new topic)."""
    validate_topic_name(name)
    if replicas.metadata.topic_exists(name):
        raise TopicExistsError(f"Topic '{name}' already exists.")
    configs = _stored_configs(validate_configs(config, TOPIC_CONFIGS, "topic"))
    racks = replicas.placement_brokers()
    if replica_assignment is not None:
        validate_replica_assignment(replica_assignment, set(racks))
        return {int(p): list(r) for p, r in sorted(replica_assignment.items())}, configs
    if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1:
        raise InvalidPartitionsError(f"Number of partitions must be larger than 0, got {partitions!r}")
    return assign_replicas(sorted(racks), partitions, replication_factor, broker_racks=racks), configs


def create_topic(
    replicas: ReplicaManager,
    name: str,
    partitions: int = 1,
    replication_factor: int = 1,
    config: Mapping[str, Any] | None = None,
    replica_assignment: Mapping[int, Sequence[int]] | None = None,
) -> TopicDescription:
    """Create a topic: ZooKeeper metadata in one multi-op, then one Delta table per replica.

    Replicas are placed by Kafka's rack-aware round robin over the live brokers, or as
    ``replica_assignment`` says (partition -> broker ids, first = preferred leader; then
    ``partitions`` and ``replication_factor`` are ignored). :func:`plan_topic` makes the
    same checks without creating anything."""
    assignment, configs = plan_topic(replicas, name, partitions, replication_factor, config, replica_assignment)
    racks = replicas.placement_brokers()
    own = replicas.config
    if own.broker_id in racks and not live_broker_ids(replicas.zk):
        # Offer this client's log dir as broker ``broker.id``: only writers of metadata do, so
        # a read-only client with other local settings never clashes with the registry.
        replicas.metadata.register_broker(own.broker_id, own.log_dir, own.broker_rack)
    topic_id = _new_topic_id()
    replicas.metadata.create_topic(name, topic_id, assignment, configs)
    try:
        history_retention_ms = int(with_defaults(configs, TOPIC_CONFIGS)["history.retention.ms"])
        # One table per log dir: brokers sharing a log dir (shared storage) share the table.
        log_dirs = sorted({replicas.log_dir_of(b) for bs in assignment.values() for b in bs})
        tables = [replicas.table_at(log_dir, name) for log_dir in log_dirs]
        # Debris of an earlier topic of this name whose delete was cut short, maybe before it
        # removed the groups' offsets: every incarnation before this one is deleted.
        if any(table.exists() for table in tables) and not is_internal(name):
            remove_topic_offsets(replicas, name, replicas.metadata.topic_incarnation(name) - 1)
        for table in tables:
            if table.exists():
                table.delete()
            table.create(topic_id, history_retention_ms)
    except BaseException:
        replicas.metadata.delete_topic(name)
        raise
    return describe_topic(replicas, name)


def describe_topic(replicas: ReplicaManager, name: str) -> TopicDescription:
    validate_topic_name(name)
    assignment, _ = replicas.metadata.assignment(name)
    partitions = sorted(int(p) for p in assignment.partitions)
    states = replicas.metadata.partition_states(name, partitions)
    configs, _ = replicas.metadata.topic_config(name)
    return TopicDescription(
        name=name,
        topic_id=assignment.topic_id,
        partitions=tuple(
            PartitionDescription(
                partition=p,
                leader=states[p].leader,
                leader_epoch=states[p].leader_epoch,
                replicas=tuple(assignment.replicas(p)),
                isr=tuple(states[p].isr),
            )
            for p in partitions
        ),
        configs=configs,
    )


def alter_topic_config(
    replicas: ReplicaManager,
    name: str,
    set: Mapping[str, Any] | None = None,
    delete: Iterable[str] | None = None,
    validate_only: bool = False,
) -> dict[str, str]:
    """Set and/or remove config overrides atomically; returns the new overrides."""
    validate_topic_name(name)
    updates = _stored_configs(validate_configs(set, TOPIC_CONFIGS, "topic"))
    removals = [key if key in TOPIC_CONFIGS else key.replace("_", ".") for key in (delete or [])]
    unknown = [key for key in removals if key not in TOPIC_CONFIGS]
    if unknown:
        raise ConfigError(f"Invalid config(s): {', '.join(unknown)}. Allowed keys: {', '.join(sorted(TOPIC_CONFIGS))}")

    def change(current: dict[str, str]) -> dict[str, str]:
        new = {k: v for k, v in current.items() if k not in removals}
        new.update(updates)
        return new

    return _update_config(replicas, name, change, validate_only)


def replace_topic_config(
    replicas: ReplicaManager, name: str, configs: Mapping[str, Any], validate_only: bool = False
) -> dict[str, str]:
    """Make ``configs`` the topic's only overrides (Kafka's non-incremental AlterConfigs: a
    key not given returns to its default); returns the new overrides."""
    validate_topic_name(name)
    updates = _stored_configs(validate_configs(configs, TOPIC_CONFIGS, "topic"))
    return _update_config(replicas, name, lambda _current: dict(updates), validate_only)


def incremental_alter_topic_config(
    replicas: ReplicaManager, name: str, operations: Sequence[ConfigOperation], validate_only: bool = False
) -> dict[str, str]:
    """Kafka's IncrementalAlterConfigs on one topic: each ``(op, key, value)`` in order —
    ``set`` a value, ``delete`` the override (back to the default), ``append`` to / ``subtract``
    from a list config (its current value: the override, else the default). All or nothing;
    returns the new overrides."""
    validate_topic_name(name)
    for op, key, value in operations:
        if key not in TOPIC_CONFIGS:
            raise ConfigError(f"Unknown topic config name: {key}. Allowed keys: {', '.join(sorted(TOPIC_CONFIGS))}")
        if op in ("append", "subtract") and key not in LIST_CONFIGS:
            raise ConfigError(
                f"Config value {op} is not allowed for config key: {key} (only list configs: "
                f"{', '.join(sorted(LIST_CONFIGS))}); use set"
            )
        if op != "delete" and value is None:
            raise ConfigError(f"Null value not supported for {op} of topic config {key}")
        if op == "set":
            validate_configs({key: value}, TOPIC_CONFIGS, "topic")

    def change(current: dict[str, str]) -> dict[str, str]:
        new = dict(current)
        for op, key, value in operations:
            if op == "delete":
                new.pop(key, None)
                continue
            assert value is not None
            if op == "set":
                new[key] = value
                continue
            items = [i.strip() for i in new.get(key, str(TOPIC_CONFIGS[key].default)).split(",") if i.strip()]
            given = [i.strip() for i in value.split(",") if i.strip()]
            if op == "append":
                items += [i for i in given if i not in items]
            else:
                items = [i for i in items if i not in given]
            new[key] = ",".join(items)
        return _stored_configs(validate_configs(new, TOPIC_CONFIGS, "topic"))

    return _update_config(replicas, name, change, validate_only)


def _update_config(
    replicas: ReplicaManager, name: str, change: Callable[[dict[str, str]], dict[str, str]], validate_only: bool
) -> dict[str, str]:
    """Compare-and-set ``change(current overrides)`` until no concurrent alter intervened."""
    validate_topic_name(name)
    while True:
        current, version = replicas.metadata.topic_config(name)
        new = dict(sorted(change(dict(current)).items()))
        if validate_only or replicas.metadata.set_topic_config(name, new, version):
            return new


def create_partitions(
    replicas: ReplicaManager,
    name: str,
    total: int,
    assignment: Sequence[Sequence[int]] | None = None,
    validate_only: bool = False,
) -> TopicDescription:
    """Raise the partition count to ``total`` (Kafka allows increases only).

    The new partitions continue the topic's placement pattern, or go where ``assignment``
    says (one broker list per new partition, first = preferred leader; every list as long as
    the topic's replication factor, live brokers only). Brokers that hold no replica of the
    topic yet get its table before the metadata names them. With ``validate_only`` nothing is
    written and the current description is returned."""
    validate_topic_name(name)
    while True:
        current_assignment, version = replicas.metadata.assignment(name)
        current = len(current_assignment.partitions)
        if isinstance(total, bool) or not isinstance(total, int) or total <= current:
            raise InvalidPartitionsError(
                f"Topic currently has {current} partitions, which is higher than or equal to the requested "
                f"{total}. Partitions can only be increased."
            )
        existing = {int(p): brokers for p, brokers in current_assignment.partitions.items()}
        racks = replicas.placement_brokers()
        if assignment is not None:
            if len(assignment) != total - current:
                raise InvalidReplicaAssignmentError(
                    f"Increasing the number of partitions by {total - current} but {len(assignment)} "
                    "assignments provided. Give one broker list per new partition."
                )
            new = {current + i: [int(b) for b in brokers] for i, brokers in enumerate(assignment)}
            validate_replica_assignment(
                new, set(racks), start_partition=current, replication_factor=len(existing.get(0, ()))
            )
        else:
            new = assign_new_partitions(sorted(racks), existing, total, broker_racks=racks)
        if validate_only:
            return describe_topic(replicas, name)
        holders = {b for brokers in existing.values() for b in brokers}
        for broker_id in sorted({b for brokers in new.values() for b in brokers} - holders):
            table = replicas.table_at(replicas.log_dir_of(broker_id), name)
            if not table.exists():
                table.create(current_assignment.topic_id, int(replicas.topic_config(name)["history.retention.ms"]))
        if replicas.metadata.add_partitions(name, current_assignment, version, new):
            return describe_topic(replicas, name)


def delete_topic(replicas: ReplicaManager, name: str) -> None:
    """Take the partitions' write leases from their leaders, delete the topic's metadata, then
    every group's committed offsets of it (Kafka removes them too: a topic re-created under
    the name starts without them), then its data on every replica."""
    validate_topic_name(name)
    assignment, _ = replicas.metadata.assignment(name)
    incarnation = replicas.metadata.topic_incarnation(name)
    log_dirs = {replicas.log_dir_of(b) for brokers in assignment.partitions.values() for b in brokers}
    _take_write_leases(replicas, name, [int(p) for p in assignment.partitions])
    replicas.metadata.delete_topic(name)
    replicas.drop_tables(name)
    remove_topic_offsets(replicas, name, incarnation)
    for log_dir in log_dirs:
        replicas.table_at(log_dir, name).delete()


def _take_write_leases(replicas: ReplicaManager, name: str, partitions: Iterable[int]) -> None:
    """Take every partition's write lease before anything of the topic is deleted: a leader
    trusts its own record of the table while it holds the lease
    (:mod:`sparklog.log.leader_log`), so it must finish its round in flight and let go, and
    its next round ask ZooKeeper, which will not know the topic any more. Leases still held
    after ``writer.lease.ms`` (a Spark job's) are left to expire: those writers read the
    table afresh for each commit."""
    owner = f"deleting-{uuid.uuid4().hex[:8]}"
    lease_ms = replicas.config.writer_lease_ms
    deadline = time.monotonic() + lease_ms / 1000
    for partition in sorted(partitions):
        lease = WriterLease(replicas.zk, name, partition, owner, lease_ms)
        try:
            lease.acquire(max(0, int((deadline - time.monotonic()) * 1000)))
        except (LeaseTimeoutError, TopicNotFoundError):
            pass
