"""Config entries as Kafka's DescribeConfigs (and CreateTopics v5+) report them.

Pure: built from a topic's stored overrides or a broker's :class:`~sparklog.config.ClusterConfig`,
no I/O. What an entry says, for every topic config of :data:`sparklog.config.TOPIC_CONFIGS`:

* ``value`` is the effective value in the text ``Cluster.topic_config`` holds (booleans
  ``true``/``false``), so a Kafka client and sparklog's own API agree;
* ``source`` is TOPIC_CONFIG (Kafka's DYNAMIC_TOPIC_CONFIG, 1) for an override and
  DEFAULT_CONFIG (5) otherwise; topic configs are writable (``read_only`` false), none is
  sensitive;
* ``synonyms`` (when asked): the override, then the default under Kafka's broker-side name
  (``retention.ms`` → ``log.retention.ms``), as Kafka lists them, most specific first;
* ``config_type`` is Kafka's type of that config (LIST for ``cleanup.policy``, INT for
  ``max.message.bytes``...), ``documentation`` a one-line description.

Broker entries are the agent's own settings (the cluster keys of ``sparklog.config``): read
only, STATIC_BROKER_CONFIG (4) for a key set in the broker's properties file, its environment
or its command line (``ClusterConfig.given_keys``; even if the value equals the default, as
Kafka), DEFAULT_CONFIG for the rest, derived values included (``log.dirs`` under the home); plus the defaults new topics get, under their Kafka broker names. sparklog has no
dynamic broker configs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sparklog.config import CLUSTER_DEFAULTS, TOPIC_CONFIGS, ClusterConfig, validate_configs, with_defaults

__all__ = [
    "SOURCE_DEFAULT",
    "SOURCE_STATIC_BROKER",
    "SOURCE_TOPIC",
    "ConfigEntry",
    "broker_config_entries",
    "config_text",
    "topic_config_entries",
]

# Kafka's DescribeConfigsResponse.ConfigSource and ConfigType.
SOURCE_TOPIC = 1
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5
_BOOLEAN, _STRING, _INT, _SHORT, _LONG, _DOUBLE, _LIST = 1, 2, 3, 4, 5, 6, 7

# config -> (Kafka's type, Kafka's broker-side synonym, documentation)
_TOPIC_INFO: dict[str, tuple[int, str, str]] = {
    "cleanup.policy": (
        _LIST,
        "log.cleanup.policy",
        "delete: segments past retention.ms or retention.bytes are removed; compact: the newest "
        "record per key is kept; compact,delete: both.",
    ),
    "retention.ms": (
        _LONG,
        "log.retention.ms",
        "How long a segment is kept after its newest record before cleanup.policy=delete removes it; -1: forever.",
    ),
    "retention.bytes": (
        _LONG,
        "log.retention.bytes",
        "The size a partition may reach before its oldest segments are removed; -1: no limit.",
    ),
    "delete.retention.ms": (
        _LONG,
        "log.cleaner.delete.retention.ms",
        "How long a tombstone stays on a compacted topic, so consumers see the deletion.",
    ),
    "min.compaction.lag.ms": (
        _LONG,
        "log.cleaner.min.compaction.lag.ms",
        "The minimum time a record stays uncompacted.",
    ),
    "min.cleanable.dirty.ratio": (
        _DOUBLE,
        "log.cleaner.min.cleanable.ratio",
        "The share of a compacted partition that must be uncompacted before compaction rewrites it.",
    ),
    "min.insync.replicas": (
        _INT,
        "min.insync.replicas",
        "With acks=all, the fewest in-sync replicas a write needs; fewer fail it with NOT_ENOUGH_REPLICAS.",
    ),
    "unclean.leader.election.enable": (
        _BOOLEAN,
        "unclean.leader.election.enable",
        "Whether a replica outside the ISR may lead when no in-sync replica is live (loses records).",
    ),
    "max.message.bytes": (
        _INT,
        "message.max.bytes",
        "The largest record batch the topic accepts.",
    ),
    "message.timestamp.type": (
        _STRING,
        "log.message.timestamp.type",
        "CreateTime: the producer's timestamp; LogAppendTime: the time the leader appends the record.",
    ),
    "segment.bytes": (
        _INT,
        "log.segment.bytes",
        "The target size of a partition's segment files (Parquet).",
    ),
    "compression.type": (
        _STRING,
        "compression.type",
        "The codec of segment files: uncompressed, zstd, lz4, snappy, gzip, or producer (the producer's).",
    ),
    "file.delete.delay.ms": (
        _LONG,
        "log.segment.delete.delay.ms",
        "How long a segment file removed from the table stays on storage (readers in flight finish) before vacuum.",
    ),
    "history.retention.ms": (
        _LONG,
        "history.retention.ms",
        "sparklog's own: how long the Delta log keeps commit files (time travel by table version).",
    ),
}
assert set(_TOPIC_INFO) == set(TOPIC_CONFIGS), "every topic config needs its Kafka type and documentation"

_BROKER_TYPES = {
    "broker.id": _INT,
    "zookeeper.session.timeout.ms": _INT,
    "zookeeper.connection.timeout.ms": _INT,
    "writer.lease.ms": _LONG,
    "spark.writer.lease.ms": _LONG,
    "offsets.topic.num.partitions": _INT,
    "replica.hard.links.enable": _BOOLEAN,
    "socket.request.max.bytes": _INT,
    "num.io.threads": _INT,
    "metrics.port": _INT,
    "num.partitions": _INT,
    "default.replication.factor": _SHORT,
    "offsets.topic.replication.factor": _SHORT,
    "group.initial.rebalance.delay.ms": _INT,
    "group.min.session.timeout.ms": _INT,
    "group.max.session.timeout.ms": _INT,
    "group.consumer.heartbeat.interval.ms": _INT,
    "group.consumer.session.timeout.ms": _INT,
    "transaction.max.timeout.ms": _INT,
    "transactional.id.expiration.ms": _INT,
    "store.round.linger.ms": _INT,
    "store.round.max.bytes": _INT,
    "store.rounds.per.second": _INT,
    "listeners": _LIST,
    "advertised.listeners": _LIST,
}


@dataclass(frozen=True)
class ConfigEntry:
    name: str
    value: str | None
    source: int
    read_only: bool
    synonyms: tuple[tuple[str, str | None, int], ...]  # (name, value, source), most specific first
    config_type: int
    documentation: str | None


def config_text(value: Any) -> str:
    """A config value as Kafka's wire text (booleans lower case)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def topic_config_entries(overrides: Mapping[str, str]) -> list[ConfigEntry]:
    """Every topic config, from the topic's stored overrides."""
    effective = with_defaults(validate_configs(overrides, TOPIC_CONFIGS, "topic"), TOPIC_CONFIGS)
    entries = []
    for name, spec in TOPIC_CONFIGS.items():
        kind, broker_name, doc = _TOPIC_INFO[name]
        default = config_text(spec.default)
        synonyms: list[tuple[str, str | None, int]] = []
        if name in overrides:
            synonyms.append((name, config_text(effective[name]), SOURCE_TOPIC))
        synonyms.append((broker_name, default, SOURCE_DEFAULT))
        entries.append(
            ConfigEntry(
                name=name,
                value=config_text(effective[name]),
                source=SOURCE_TOPIC if name in overrides else SOURCE_DEFAULT,
                read_only=False,
                synonyms=tuple(synonyms),
                config_type=kind,
                documentation=doc,
            )
        )
    return entries


def broker_config_entries(config: ClusterConfig) -> list[ConfigEntry]:
    """A broker agent's settings (read only: no dynamic broker configs), then the topic
    defaults under their broker-side names."""
    options = config.to_options()
    options.setdefault("listeners", ",".join(map(str, config.listeners)))
    entries = []
    for name in CLUSTER_DEFAULTS:
        value = options.get(name)
        # Kafka's rule: set in the properties file (or given at start) is static, even when it
        # equals the default; derived ones (sparklog.home, log.dirs, advertised.listeners) are not.
        source = SOURCE_STATIC_BROKER if name in config.given_keys else SOURCE_DEFAULT
        entries.append(
            ConfigEntry(
                name=name,
                value=value,
                source=source,
                read_only=True,
                synonyms=((name, value, source),),
                config_type=_BROKER_TYPES.get(name, _STRING),
                documentation=None,
            )
        )
    for name, spec in TOPIC_CONFIGS.items():
        kind, broker_name, doc = _TOPIC_INFO[name]
        if broker_name in CLUSTER_DEFAULTS:
            continue
        default = config_text(spec.default)
        entries.append(
            ConfigEntry(
                name=broker_name,
                value=default,
                source=SOURCE_DEFAULT,
                read_only=True,
                synonyms=((broker_name, default, SOURCE_DEFAULT),),
                config_type=kind,
                documentation=f"The default of topic config {name}: {doc}",
            )
        )
    return entries
