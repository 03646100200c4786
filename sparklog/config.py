"""Configuration: cluster settings, topic configs and client configs, all in Kafka's names.

Cluster settings resolve in one fixed precedence order (highest first):

1. explicit arguments to :func:`sparklog.connect` (or data-source options / ``spark.sparklog.*``),
2. the environment (``SPARKLOG_HOME``, ``SPARKLOG_ZOOKEEPER``, ``SPARKLOG_LOG_DIRS``: e.g.
   ``SPARKLOG_LOG_DIRS=s3://bucket/prefix make demo`` puts the demo's topics on a store),
3. a properties file (``SPARKLOG_CONF``, else the nearest enclosing ``conf/sparklog.properties``),
4. the defaults below; the home's default is found by :mod:`sparklog.discovery` (the nearest
   enclosing ``.sparklog``, the project's, else ``~/.sparklog``).

Topic and client configs are validated against typed specs: an unknown key or a bad value
raises :class:`~sparklog.errors.ConfigError` naming the key and what is allowed. Everything
here is pure (no ZooKeeper, no Delta, no Spark) so any layer may import it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from sparklog.discovery import discover
from sparklog.errors import ConfigError
from sparklog.model.endpoints import Endpoint, parse_bootstrap_servers, parse_listeners
from sparklog.model.properties import load_properties
from sparklog.model.storage_location import STORAGE_SETTINGS, StorageSettings, parse_location

__all__ = [
    "CONSUMER_CONFIGS",
    "PRODUCER_CONFIGS",
    "TOPIC_CONFIGS",
    "Acks",
    "ClusterConfig",
    "ConfigSpec",
    "Endpoint",
    "cleanup_policies",
    "load_properties",
    "normalise_key",
    "parse_acks",
    "parse_bootstrap_servers",
    "parse_listeners",
    "resolve_cluster_config",
    "validate_configs",
]

Acks = Literal["0", "1", "all"]


def parse_acks(value: object) -> Acks:
    """A validated ``acks`` setting in its canonical spelling (-1 is all, as in Kafka)."""
    text = str(value)
    if text in ("all", "-1"):
        return "all"
    if text == "0":
        return "0"
    if text == "1":
        return "1"
    raise ConfigError(f"Invalid value {value!r} for configuration acks: allowed values are 0, 1, all or -1")


UNLIMITED = -1


def normalise_key(key: str) -> str:
    """``retention_ms`` and ``retention.ms`` name the same setting (Python kwargs can't hold dots)."""
    return key.replace("_", ".")


@dataclass(frozen=True)
class ConfigSpec:
    """One config key: its default, how a raw value is parsed, and what is allowed."""

    name: str
    default: Any
    parse: Callable[[str], Any]
    allowed: str  # human-readable, used in error messages
    check: Callable[[Any], bool] = lambda _v: True

    def coerce(self, raw: Any) -> Any:
        try:
            value = raw if not isinstance(raw, str) else self.parse(raw)
            if isinstance(value, bool) and self.parse is not _parse_bool:
                raise ValueError("boolean given")
            if self.parse is int and not isinstance(value, int):
                raise ValueError("not an integer")
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"Invalid value {raw!r} for configuration {self.name}: allowed {self.allowed}") from exc
        if not self.check(value):
            raise ConfigError(f"Invalid value {raw!r} for configuration {self.name}: allowed {self.allowed}")
        return value


def _parse_bool(raw: str) -> bool:
    lowered = str(raw).strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise ValueError(raw)


def _long(name: str, default: int, minimum: int, allowed: str | None = None) -> ConfigSpec:
    return ConfigSpec(
        name, default, int, allowed or f"an integer >= {minimum}", lambda v: isinstance(v, int) and v >= minimum
    )


ISOLATION_LEVELS = ("read_committed", "read_uncommitted")


def read_committed(isolation_level: object) -> bool:
    """Whether ``isolation.level`` (Kafka's values) is read_committed; anything else fails."""
    value = str(isolation_level).strip().lower()
    if value not in ISOLATION_LEVELS:
        raise ConfigError(
            f"Invalid isolation.level {isolation_level!r}: allowed values are read_committed, read_uncommitted"
        )
    return value == "read_committed"


def _choice(name: str, default: str, choices: tuple[str, ...]) -> ConfigSpec:
    return ConfigSpec(name, default, str, "one of " + ", ".join(choices), lambda v: v in choices)


def _strategies(raw: str) -> str:
    names = [part.strip().lower() for part in str(raw).split(",") if part.strip()]
    # Kafka's class names are accepted for ported configs.
    aliases = {"rangeassignor": "range", "roundrobinassignor": "roundrobin", "stickyassignor": "sticky"}
    names = [aliases.get(n.rsplit(".", 1)[-1], n) for n in names]
    if not names or any(n not in ("range", "roundrobin", "sticky") for n in names):
        raise ValueError(raw)
    return ",".join(names)


def _bootstrap(raw: str) -> str:
    return ",".join(f"{h}:{p}" if ":" not in h else f"[{h}]:{p}" for h, p in parse_bootstrap_servers(raw))


def _cleanup_policy(raw: str) -> str:
    # An empty list is Kafka's too (KIP-1161): neither delete nor compact, records kept forever.
    parts = sorted(p.strip() for p in str(raw).split(",") if p.strip())
    if any(p not in ("delete", "compact") for p in parts) or len(set(parts)) != len(parts):
        raise ValueError(raw)
    return ",".join(sorted(parts, key=("compact", "delete").index))


def cleanup_policies(configs: Mapping[str, Any]) -> set[str]:
    """The policies (``delete``, ``compact``) of an effective ``cleanup.policy`` (none for ``""``)."""
    return {p for p in str(configs["cleanup.policy"]).split(",") if p}


_COMPRESSION = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")

TOPIC_CONFIGS: dict[str, ConfigSpec] = {
    spec.name: spec
    for spec in (
        ConfigSpec("cleanup.policy", "delete", _cleanup_policy, "delete, compact, compact,delete or empty (neither)"),
        _long("retention.ms", 604_800_000, UNLIMITED, "an integer >= -1 (-1 = unlimited)"),
        _long("retention.bytes", UNLIMITED, UNLIMITED, "an integer >= -1 (-1 = unlimited)"),
        _long("delete.retention.ms", 86_400_000, 0),
        _long("min.compaction.lag.ms", 0, 0),
        ConfigSpec("min.cleanable.dirty.ratio", 0.5, float, "a number between 0 and 1", lambda v: 0.0 <= v <= 1.0),
        _long("min.insync.replicas", 1, 1),
        ConfigSpec(
            "unclean.leader.election.enable", False, _parse_bool, "true or false", lambda v: isinstance(v, bool)
        ),
        _long("max.message.bytes", 1_048_588, 0),
        _choice("message.timestamp.type", "CreateTime", ("CreateTime", "LogAppendTime")),
        _long("segment.bytes", 1_073_741_824, 14),
        _choice("compression.type", "producer", _COMPRESSION),
        _long("file.delete.delay.ms", 60_000, 0),
        # How long the Delta log keeps commit files (time travel by version, `sparklog
        # history`): every snapshot refresh lists them, so commit latency grows with it.
        _long("history.retention.ms", 600_000, 0),
    )
}

PRODUCER_CONFIGS: dict[str, ConfigSpec] = {
    spec.name: spec
    for spec in (
        # Kafka clients take acks as a number too (acks=1); compare the spelling, not the type.
        ConfigSpec(
            "acks",
            "all",
            str,
            "0, 1, all or -1",
            lambda v: isinstance(v, (str, int)) and not isinstance(v, bool) and str(v) in ("0", "1", "all", "-1"),
        ),
        _long("linger.ms", 5, 0),
        _long("batch.size", 16_384, 0),
        ConfigSpec("enable.idempotence", True, _parse_bool, "true or false", lambda v: isinstance(v, bool)),
        _long("max.request.size", 1_048_576, 1),
        _long("max.block.ms", 60_000, 0),
        _long("delivery.timeout.ms", 120_000, 0),
        _long("retries", 2_147_483_647, 0),
        _choice("compression.type", "none", ("none", "gzip", "snappy", "lz4", "zstd")),
        ConfigSpec("client.id", "", str, "a string"),
        _long("writer.lease.ms", 10_000, 100),
        # Kafka's: how old the producer's copy of a topic's partition count and configs may get.
        _long("metadata.max.age.ms", 300_000, 0),
    )
}

CONSUMER_CONFIGS: dict[str, ConfigSpec] = {
    spec.name: spec
    for spec in (
        _choice("auto.offset.reset", "latest", ("earliest", "latest", "none")),
        _long("max.poll.records", 500, 1),
        # Kafka transactions: read_committed (librdkafka's default, and sparklog's: aborted
        # and open transactions' records are never shown) or read_uncommitted.
        _choice("isolation.level", "read_committed", ISOLATION_LEVELS),
        ConfigSpec("client.id", "", str, "a string"),
        ConfigSpec("enable.auto.commit", True, _parse_bool, "true or false", lambda v: isinstance(v, bool)),
        _long("auto.commit.interval.ms", 5_000, 0),
        # ZooKeeper bounds session timeouts (embedded server: 500 ms .. 60 s).
        _long("session.timeout.ms", 45_000, 500),
        _long("max.poll.interval.ms", 300_000, 1),
        ConfigSpec("group.instance.id", None, str, "a string"),
        ConfigSpec(
            "partition.assignment.strategy",
            "range",
            _strategies,
            "a comma-separated list of range, roundrobin, sticky",
        ),
        # Kafka's: with it the consumer is a member of the brokers' group coordinator (Kafka's
        # protocol, sparklog/clients/protocol_member.py); without it, of the ZooKeeper membership.
        ConfigSpec("bootstrap.servers", None, _bootstrap, "a comma-separated list of host:port"),
        _long("heartbeat.interval.ms", 3_000, 1),
    )
}

CLUSTER_DEFAULTS: dict[str, str | None] = {
    "zookeeper.connect": None,
    "zookeeper.session.timeout.ms": "18000",
    "zookeeper.connection.timeout.ms": "30000",
    "sparklog.home": None,  # default: found by sparklog.discovery
    "log.dirs": None,  # default: <sparklog.home>/data; a local path or a store URI (s3://bucket/prefix)
    # How to reach an object store (sparklog/model/storage_location.py): each stands for the
    # AWS_* variable delta-rs and pyarrow read, and wins over it.
    **dict.fromkeys(STORAGE_SETTINGS),
    "broker.id": "0",
    "broker.rack": None,
    "writer.lease.ms": "10000",
    "spark.writer.lease.ms": "120000",
    "offsets.topic.num.partitions": "50",
    # Replicas' copies of a segment on one filesystem: hard links (see docs/replication.md)
    "replica.hard.links.enable": "true",
    # Kafka's: a Metadata request allowing it creates an unknown topic with the defaults below.
    "auto.create.topics.enable": "true",
    # The broker agent's Kafka-protocol listener (sparklog/broker/kafka/), Kafka's names and defaults.
    "listeners": "PLAINTEXT://127.0.0.1:9092",
    "advertised.listeners": None,  # default: listeners (port 0 → the port actually bound)
    "socket.request.max.bytes": "104857600",
    # Request handler threads (sparklog/broker/kafka/request_channel.py): one network thread
    # reads every connection, these parse, handle and encode.
    "num.io.threads": "8",
    # The broker agent's Prometheus endpoint, http://<metrics.host>:<metrics.port>/metrics
    # (sparklog/broker/metrics.py): port 0 = the OS picks one (the agent reports it and
    # registers it in /brokers/ids/<id>), -1 = none. Host default: the first listener's host.
    "metrics.port": "0",
    "metrics.host": None,
    # How often a broker agent applies retention and the Delta log step to the partitions it
    # leads (sparklog/broker/log_manager.py); Kafka's name and default (5 minutes).
    "log.retention.check.interval.ms": "300000",
    # What a Kafka client's CreateTopics gets for num_partitions / replication_factor -1.
    "num.partitions": "1",
    "default.replication.factor": "1",
    # Group and transaction coordinators in the brokers (sparklog/broker/groups/), Kafka's names
    # and defaults; the offsets topic is created with min(this, live brokers) replicas.
    "offsets.topic.replication.factor": "3",
    "group.initial.rebalance.delay.ms": "3000",
    "group.min.session.timeout.ms": "6000",
    "group.max.session.timeout.ms": "1800000",
    # Kafka's consumer group protocol (KIP-848): what the coordinator tells members.
    "group.consumer.heartbeat.interval.ms": "5000",
    "group.consumer.session.timeout.ms": "45000",
    "transaction.max.timeout.ms": "900000",
    "transactional.id.expiration.ms": "604800000",
    # How a broker paces its commit rounds when its log dir is an object store
    # (sparklog/broker/round_pacing.py): each is a bound on requests, and so on cost.
    "store.round.linger.ms": "5",
    "store.round.max.bytes": "33554432",
    "store.rounds.per.second": "50",
}

_METRICS_PORT = ConfigSpec(
    "metrics.port", 0, int, "a port 0..65535 (0: the OS picks one) or -1 (no endpoint)", lambda v: -1 <= v <= 65535
)


def validate_configs(configs: Mapping[str, Any] | None, specs: Mapping[str, ConfigSpec], kind: str) -> dict[str, Any]:
    """Parse ``configs`` against ``specs``; unknown keys and bad values raise ``ConfigError``."""
    result: dict[str, Any] = {}
    for raw_key, raw_value in (configs or {}).items():
        key = raw_key if raw_key in specs else normalise_key(raw_key)
        spec = specs.get(key)
        if spec is None:
            raise ConfigError(f"Unknown {kind} configuration {raw_key!r}. Allowed keys: {', '.join(sorted(specs))}")
        result[key] = spec.coerce(raw_value)
    return result


def with_defaults(configs: Mapping[str, Any], specs: Mapping[str, ConfigSpec]) -> dict[str, Any]:
    """The effective configs: every key of ``specs``, overridden by ``configs``."""
    return {name: configs.get(name, spec.default) for name, spec in specs.items()}


@dataclass(frozen=True)
class ClusterConfig:
    """Resolved cluster settings. Paths are absolute so Spark workers in other dirs agree."""

    home: str
    zookeeper_connect: str | None  # None: the embedded server under ``home``
    log_dir: str
    broker_id: int
    broker_rack: str | None
    zookeeper_session_timeout_ms: int
    zookeeper_connection_timeout_ms: int
    writer_lease_ms: int
    spark_writer_lease_ms: int
    offsets_topic_num_partitions: int = 50
    replica_hard_links_enable: bool = True
    auto_create_topics_enable: bool = True
    listeners: tuple[Endpoint, ...] = ()
    advertised_listeners: tuple[Endpoint, ...] = ()
    socket_request_max_bytes: int = 104_857_600
    num_io_threads: int = 8
    metrics_port: int = 0  # -1: no metrics endpoint
    metrics_host: str | None = None  # None: the first listener's host
    log_retention_check_interval_ms: int = 300_000
    num_partitions: int = 1
    default_replication_factor: int = 1
    offsets_topic_replication_factor: int = 3
    group_initial_rebalance_delay_ms: int = 3000
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1_800_000
    group_consumer_heartbeat_interval_ms: int = 5000
    group_consumer_session_timeout_ms: int = 45_000
    transaction_max_timeout_ms: int = 900_000
    transactional_id_expiration_ms: int = 604_800_000
    storage: tuple[tuple[str, str], ...] = ()  # the storage.* settings given (StorageSettings.values)
    store_round_linger_ms: int = 5
    store_round_max_bytes: int = 32 * 1024 * 1024
    store_rounds_per_second: int = 50  # 0: no budget
    # Keys set (file, environment, caller), not defaulted: a broker's STATIC_BROKER_CONFIG.
    # Provenance only: equal values are equal configs however they were given.
    given_keys: frozenset[str] = field(default=frozenset(), compare=False)

    def to_options(self) -> dict[str, str]:
        """The settings as string options, e.g. to ship to Spark tasks or data-source options."""
        options = {
            "sparklog.home": self.home,
            "log.dirs": self.log_dir,
            "broker.id": str(self.broker_id),
            "zookeeper.session.timeout.ms": str(self.zookeeper_session_timeout_ms),
            "zookeeper.connection.timeout.ms": str(self.zookeeper_connection_timeout_ms),
            "writer.lease.ms": str(self.writer_lease_ms),
            "spark.writer.lease.ms": str(self.spark_writer_lease_ms),
            "offsets.topic.num.partitions": str(self.offsets_topic_num_partitions),
            "replica.hard.links.enable": str(self.replica_hard_links_enable).lower(),
            "auto.create.topics.enable": str(self.auto_create_topics_enable).lower(),
            "socket.request.max.bytes": str(self.socket_request_max_bytes),
            "num.io.threads": str(self.num_io_threads),
            "metrics.port": str(self.metrics_port),
            "log.retention.check.interval.ms": str(self.log_retention_check_interval_ms),
            "num.partitions": str(self.num_partitions),
            "default.replication.factor": str(self.default_replication_factor),
            "offsets.topic.replication.factor": str(self.offsets_topic_replication_factor),
            "group.initial.rebalance.delay.ms": str(self.group_initial_rebalance_delay_ms),
            "group.min.session.timeout.ms": str(self.group_min_session_timeout_ms),
            "group.max.session.timeout.ms": str(self.group_max_session_timeout_ms),
            "group.consumer.heartbeat.interval.ms": str(self.group_consumer_heartbeat_interval_ms),
            "group.consumer.session.timeout.ms": str(self.group_consumer_session_timeout_ms),
            "transaction.max.timeout.ms": str(self.transaction_max_timeout_ms),
            "transactional.id.expiration.ms": str(self.transactional_id_expiration_ms),
            "store.round.linger.ms": str(self.store_round_linger_ms),
            "store.round.max.bytes": str(self.store_round_max_bytes),
            "store.rounds.per.second": str(self.store_rounds_per_second),
        }
        if self.listeners:
            options["listeners"] = ",".join(map(str, self.listeners))
        if self.advertised_listeners:
            options["advertised.listeners"] = ",".join(map(str, self.advertised_listeners))
        if self.zookeeper_connect:
            options["zookeeper.connect"] = self.zookeeper_connect
        if self.broker_rack:
            options["broker.rack"] = self.broker_rack
        if self.metrics_host is not None:
            options["metrics.host"] = self.metrics_host
        options.update(self.storage)
        return options


CLUSTER_KEYS = frozenset(CLUSTER_DEFAULTS)
# Settings that are paths: relative values in a properties file are relative to the file.
_PATH_KEYS = frozenset({"sparklog.home", "log.dirs"})


def resolve_cluster_config(
    config: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    **overrides: Any,
) -> ClusterConfig:
    """Merge explicit settings, the environment, the properties file and defaults."""
    env = os.environ if environ is None else environ
    explicit: dict[str, Any] = {}
    for source in (config or {}, overrides):
        for key, value in source.items():
            if value is None:
                continue
            name = key if key in CLUSTER_KEYS else normalise_key(key)
            if name not in CLUSTER_KEYS:
                raise ConfigError(
                    f"Unknown sparklog configuration {key!r}. Allowed keys: {', '.join(sorted(CLUSTER_KEYS))}"
                )
            explicit[name] = value
    from_env: dict[str, str] = {}
    if env.get("SPARKLOG_HOME"):
        from_env["sparklog.home"] = env["SPARKLOG_HOME"]
    if env.get("SPARKLOG_ZOOKEEPER"):
        from_env["zookeeper.connect"] = env["SPARKLOG_ZOOKEEPER"]
    if env.get("SPARKLOG_LOG_DIRS"):
        from_env["log.dirs"] = env["SPARKLOG_LOG_DIRS"]
    found = discover(Path.cwd().resolve(), env)
    from_file: dict[str, str] = {}
    if found.properties_file is not None:
        conf_path = found.properties_file
        for key, value in load_properties(conf_path).items():
            if key not in CLUSTER_KEYS:
                raise ConfigError(
                    f"Unknown sparklog configuration {key!r} in {conf_path}. Allowed keys: {', '.join(sorted(CLUSTER_KEYS))}"
                )
            if value != "":
                # Relative to the file, so a project's file means the same from any directory.
                local = key in _PATH_KEYS and "://" not in value
                from_file[key] = str(conf_path.parent / Path(value).expanduser()) if local else value
    merged: dict[str, Any] = {**CLUSTER_DEFAULTS, **from_file, **from_env, **explicit}
    home = Path(str(merged["sparklog.home"] or found.default_home)).expanduser().resolve()
    log_dir = parse_location(str(merged["log.dirs"])).uri if merged["log.dirs"] else str(home / "data")

    def as_int(key: str, minimum: int) -> int:
        return _long(key, 0, minimum).coerce(str(merged[key]))

    def as_bool(key: str) -> bool:
        try:
            return _parse_bool(str(merged[key]))
        except ValueError:
            raise ConfigError(f"Invalid value {merged[key]!r} for configuration {key}: allowed true or false") from None

    return ClusterConfig(
        home=str(home),
        zookeeper_connect=str(merged["zookeeper.connect"]) if merged["zookeeper.connect"] else None,
        log_dir=log_dir,
        broker_id=as_int("broker.id", 0),
        broker_rack=str(merged["broker.rack"]) if merged["broker.rack"] else None,
        zookeeper_session_timeout_ms=as_int("zookeeper.session.timeout.ms", 500),
        zookeeper_connection_timeout_ms=as_int("zookeeper.connection.timeout.ms", 100),
        writer_lease_ms=as_int("writer.lease.ms", 100),
        spark_writer_lease_ms=as_int("spark.writer.lease.ms", 1000),
        offsets_topic_num_partitions=as_int("offsets.topic.num.partitions", 1),
        replica_hard_links_enable=as_bool("replica.hard.links.enable"),
        auto_create_topics_enable=as_bool("auto.create.topics.enable"),
        listeners=parse_listeners("listeners", str(merged["listeners"])),
        advertised_listeners=parse_listeners("advertised.listeners", str(merged["advertised.listeners"] or ""))
        or parse_listeners("listeners", str(merged["listeners"])),
        socket_request_max_bytes=as_int("socket.request.max.bytes", 1024),
        num_io_threads=as_int("num.io.threads", 1),
        metrics_port=_METRICS_PORT.coerce(str(merged["metrics.port"])),
        metrics_host=str(merged["metrics.host"]) if merged["metrics.host"] is not None else None,
        log_retention_check_interval_ms=as_int("log.retention.check.interval.ms", 1),
        num_partitions=as_int("num.partitions", 1),
        default_replication_factor=as_int("default.replication.factor", 1),
        offsets_topic_replication_factor=as_int("offsets.topic.replication.factor", 1),
        group_initial_rebalance_delay_ms=as_int("group.initial.rebalance.delay.ms", 0),
        group_min_session_timeout_ms=as_int("group.min.session.timeout.ms", 1),
        group_max_session_timeout_ms=as_int("group.max.session.timeout.ms", 1),
        group_consumer_heartbeat_interval_ms=as_int("group.consumer.heartbeat.interval.ms", 1),
        group_consumer_session_timeout_ms=as_int("group.consumer.session.timeout.ms", 1),
        transaction_max_timeout_ms=as_int("transaction.max.timeout.ms", 1),
        transactional_id_expiration_ms=as_int("transactional.id.expiration.ms", 1),
        storage=StorageSettings.from_config(merged).values,
        store_round_linger_ms=as_int("store.round.linger.ms", 0),
        store_round_max_bytes=as_int("store.round.max.bytes", 1),
        store_rounds_per_second=as_int("store.rounds.per.second", 0),
        given_keys=frozenset(from_file) | frozenset(from_env) | frozenset(explicit),
    )
