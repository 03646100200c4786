"""Where a Spark job's sparklog settings come from.

Precedence (highest first): data-source options (``zookeeper.connect``, ``sparklog.home``
…, also accepted with a ``sparklog.`` prefix), then ``spark.sparklog.*`` session conf
(copied into the options by sparklog's own helpers, which run where the session is), then
the environment, the properties file and the defaults of :mod:`sparklog.config`.

Data-source code runs in Python workers that cannot see the SparkSession, which is why
session conf reaches them only through options or ``spark.executorEnv.SPARKLOG_*``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sparklog.config import CLUSTER_KEYS, ClusterConfig, read_committed, resolve_cluster_config

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from sparklog.runtime.replica_manager import ReplicaManager
from sparklog.errors import ConfigError

__all__ = [
    "SESSION_CONF_PREFIX",
    "cluster_config_from_options",
    "cluster_options_from_conf",
    "connect_replicas",
    "option_flag",
    "option_read_committed",
    "session_options",
]

SESSION_CONF_PREFIX = "spark.sparklog."


def _cluster_key(key: str) -> str | None:
    lowered = key.lower()
    for candidate in (lowered, lowered.removeprefix("sparklog.") if lowered != "sparklog.home" else lowered):
        if candidate in CLUSTER_KEYS:
            return candidate
    return None


def cluster_config_from_options(options: Mapping[str, str]) -> ClusterConfig:
    explicit = {}
    for key, value in options.items():
        name = _cluster_key(key)
        if name is not None:
            explicit[name] = value
    return resolve_cluster_config(explicit)


def cluster_options_from_conf(conf: Mapping[str, str]) -> dict[str, str]:
    """``spark.sparklog.zookeeper.connect`` → ``zookeeper.connect`` (unknown keys rejected)."""
    result = {}
    for key, value in conf.items():
        if not key.startswith(SESSION_CONF_PREFIX):
            continue
        name = key[len(SESSION_CONF_PREFIX) :]
        name = "sparklog.home" if name == "home" else name
        if name not in CLUSTER_KEYS:
            raise ConfigError(
                f"Unknown session conf {key!r}: allowed {', '.join(SESSION_CONF_PREFIX + k for k in sorted(CLUSTER_KEYS))}"
            )
        result[name] = value
    return result


def option_flag(options: Mapping[str, Any], key: str, default: bool) -> bool:
    raw = options.get(key)
    if raw is None:
        return default
    lowered = str(raw).strip().lower()
    if lowered not in ("true", "false"):
        raise ConfigError(f"Option {key} must be true or false, got {raw!r}")
    return lowered == "true"


def option_read_committed(options: Mapping[str, Any]) -> bool:
    """The ``kafka.isolation.level`` (Spark's Kafka source name) or ``isolation.level`` option:
    True for read_committed, sparklog's default (docs/transactions.md: views and reads never
    show aborted or open transactions' records; Spark's Kafka source defaults to
    read_uncommitted, which is accepted too)."""
    given = [options.get(k) for k in ("kafka.isolation.level", "isolation.level") if options.get(k) is not None]
    if len({str(v).strip().lower() for v in given}) > 1:
        raise ConfigError(f"kafka.isolation.level and isolation.level disagree: {given}")
    return read_committed(given[0]) if given else True


def connect_replicas(options: Mapping[str, str]) -> ReplicaManager:
    """A replica manager for the cluster ``options`` name (close it, or use ``with``)."""
    from sparklog.runtime.replica_manager import ReplicaManager

    return ReplicaManager.connect(cluster_config_from_options(options))


def session_options(spark: SparkSession, **options: Any) -> dict[str, str]:
    """``spark.sparklog.*`` session conf overlaid with explicit options (explicit wins)."""
    conf = {k: v for k, v in spark.conf.getAll.items()} if hasattr(spark.conf, "getAll") else {}
    merged = cluster_options_from_conf(conf)
    merged.update({_option_name(k): str(v) for k, v in options.items() if v is not None})
    return merged


def _option_name(key: str) -> str:
    # Python kwargs can't hold dots: zookeeper_connect -> zookeeper.connect; Kafka-source
    # options (startingOffsets, failOnDataLoss) and dotted keys pass through unchanged.
    return key if "." in key or not key.islower() else key.replace("_", ".")
