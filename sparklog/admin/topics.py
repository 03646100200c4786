"""Topic administration as a library: Kafka's ``kafka-topics`` and ``kafka-configs
--entity-type topics``.

The public facade over :mod:`sparklog.runtime.topics` (the topic management the brokers'
handlers run too), plus what only tools and jobs ask: :func:`require_topics` (refuse
misspelt names before any work) and :func:`topic_history` (the table's commits).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sparklog.errors import TopicNotFoundError
from sparklog.log.history import HISTORY_COLUMNS
from sparklog.log.history import topic_history as table_history
from sparklog.model.topic import is_internal
from sparklog.runtime.replica_manager import ReplicaManager
from sparklog.runtime.topics import (
    ConfigOperation,
    alter_topic_config,
    create_partitions,
    create_topic,
    delete_topic,
    describe_topic,
    incremental_alter_topic_config,
    parse_replica_assignment,
    plan_topic,
    replace_topic_config,
)

__all__ = [
    "HISTORY_COLUMNS",
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
    "require_topics",
    "topic_history",
]


def require_topics(replicas: ReplicaManager, names: Iterable[str]) -> None:
    """Refuse names of topics that do not exist, listing those that do: a job given a
    misspelt topic must fail, not report that it found nothing to do."""
    existing = replicas.list_topics()
    missing = [name for name in dict.fromkeys(names) if name not in existing]
    if missing:
        named = ", ".join(f"'{name}'" for name in missing)
        verb = "does not exist" if len(missing) == 1 else "do not exist"
        topics = ", ".join(t for t in existing if not is_internal(t)) or "none"
        raise TopicNotFoundError(f"Topic{'s' if len(missing) > 1 else ''} {named} {verb} (topics: {topics})")


def topic_history(replicas: ReplicaManager, name: str, limit: int | None = None) -> list[dict[str, Any]]:
    """The newest ``limit`` commits of the topic's table (partition 0's leader replica) in the
    columns of Delta's ``DESCRIBE HISTORY``, newest first."""
    replicas.partitions_of(name)  # TopicNotFoundError for an unknown topic
    return table_history(replicas.leader_table(name), limit)
