"""Which options ``format("sparklog")`` reads for each use, and what is said of the others.

Spark's Kafka source ignores what it does not know; a sparklog job ported from it then reads
silently from somewhere else (``kafka.bootstrap.servers``) or without the limit the author
thought was set (``maxOffsetsPerTrigger`` on a batch, a misspelt ``startingOffset``). So every
option a use does not read gets one warning naming each such key — with a suggestion for a
near-miss, and for ``kafka.bootstrap.servers`` the cluster that is read instead. Values are
checked where they are read (a bad value is an error naming the option and what is allowed).

Pure: no Spark here, so the driver (``sparklog.spark.format_hooks``) and the workers share it.
"""

from __future__ import annotations

import difflib
import warnings
from collections.abc import Callable, Mapping
from typing import Literal

from sparklog.config import CLUSTER_KEYS
from sparklog.errors import ConfigError

__all__ = [
    "CHECKED_OPTION",
    "IgnoredOptionWarning",
    "SourceUse",
    "describe_cluster",
    "ignored_options",
    "positive_int_option",
    "warn_ignored",
    "warning_text",
]

SourceUse = Literal["batch read", "stream read", "batch write", "stream write"]

# Set by the driver once it has warned, so the planning worker does not warn again.
CHECKED_OPTION = "sparklog.options.checked"

_SELECTION = ("subscribe", "subscribePattern", "assign")
_ISOLATION = ("kafka.isolation.level", "isolation.level")
_STARTING = ("startingOffsets", "startingTimestamp", "startingOffsetsByTimestamp", "startingOffsetsByTimestampStrategy")
_ENDING = ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp")
_READ_COMMON = (*_SELECTION, *_ISOLATION, *_STARTING, "failOnDataLoss", "includeHeaders", "minPartitions")
_TRIGGER_LIMITS = ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay")
_WRITE_COMMON = ("topic", "kafka.compression.type", "compression.type", "path")
_READ: dict[SourceUse, tuple[str, ...]] = {
    "batch read": (*_READ_COMMON, *_ENDING),
    # A streaming query's end and trigger limits; the stream reader refuses the batch-only ones.
    "stream read": (*_READ_COMMON, *_ENDING, *_TRIGGER_LIMITS, "groupId", "kafka.group.id"),
    # sparklog.job.id: the job id `sparklog.spark.produce` gives the write (its commit info).
    "batch write": (*_WRITE_COMMON, "sparklog.job.id"),
    "stream write": (*_WRITE_COMMON, "checkpointLocation"),
}
# Kafka-source options that have a meaning in Kafka and none in this use: the reason is said.
_MEANINGLESS: dict[str, str] = {
    "kafka.group.id": "a batch read belongs to no consumer group (sparklog.spark.consume reads as a group)",
    "groupId": "a batch read belongs to no consumer group (sparklog.spark.consume reads as a group)",
    "maxOffsetsPerTrigger": "it limits streaming micro-batches only",
    "minOffsetsPerTrigger": "it applies to streaming queries only",
    "maxTriggerDelay": "it applies to streaming queries only",
}


class IgnoredOptionWarning(UserWarning):
    """An option of ``format("sparklog")`` that the read or write does not use."""


def describe_cluster(options: Mapping[str, str]) -> str:
    """The cluster ``options`` name, in words (for the note on ``kafka.bootstrap.servers``)."""
    from sparklog.spark.options import cluster_config_from_options

    config = cluster_config_from_options(options)
    if config.zookeeper_connect:
        return f"the sparklog cluster at ZooKeeper {config.zookeeper_connect} (option zookeeper.connect)"
    return f"the sparklog cluster of home {config.home} (its embedded ZooKeeper; option sparklog.home)"


def _cluster_option(key: str) -> bool:
    lowered = key.lower()
    return lowered in CLUSTER_KEYS or lowered.removeprefix("sparklog.") in CLUSTER_KEYS


def ignored_options(options: Mapping[str, object], use: SourceUse, cluster: Callable[[], str]) -> list[str]:
    """One line per option of ``options`` that ``use`` ignores, saying why (``cluster()``
    describes the cluster that is read or written instead of a Kafka bootstrap server)."""
    known = {name.lower(): name for name in _READ[use]}
    every = {name.lower(): name for names in _READ.values() for name in names}
    notes = []
    for key in sorted(options, key=str.lower):
        lowered = key.lower()
        if lowered in known or _cluster_option(key) or lowered == CHECKED_OPTION:
            continue
        spelled = every.get(lowered, key)
        if lowered == "kafka.bootstrap.servers":
            notes.append(f"{key}: sparklog does not connect to Kafka brokers here; it uses {cluster()}")
        elif spelled in _MEANINGLESS:
            notes.append(f"{key}: {_MEANINGLESS[spelled]}")
        elif lowered in every:
            notes.append(f"{key}: not used by a {use}")
        elif lowered.startswith("kafka."):
            notes.append(f"{key}: a Kafka client property, which sparklog's {use} does not use")
        else:
            near = difflib.get_close_matches(lowered, list(known), n=1, cutoff=0.75)
            hint = f" (did you mean {known[near[0]]}?)" if near else ""
            notes.append(f"{key}: unknown option{hint}")
    return notes


def warning_text(notes: list[str], use: SourceUse) -> str:
    return f'format("sparklog") {use} ignores {len(notes)} option(s): ' + "; ".join(notes)


def warn_ignored(options: Mapping[str, object], use: SourceUse, settings: Mapping[str, str], stacklevel: int) -> None:
    """One :class:`IgnoredOptionWarning` (in the driver: notebooks show it) naming every option of
    ``options`` that ``use`` ignores; ``settings`` say which cluster is used; ``stacklevel``
    counts from the caller (1: the caller's line)."""
    notes = ignored_options(options, use, lambda: describe_cluster(settings))
    if notes:
        warnings.warn(warning_text(notes, use), IgnoredOptionWarning, stacklevel=stacklevel + 1)


def positive_int_option(options: Mapping[str, object], key: str, what: str = "a positive integer") -> int | None:
    """The integer >= 1 that option ``key`` holds, None when unset; anything else is an error
    naming the option."""
    raw = options.get(key)
    if raw is None or str(raw).strip() == "":
        return None
    text = str(raw).strip()
    if not text.isdigit() or int(text) < 1:
        raise ConfigError(f"Option {key} must be {what}, got {raw!r}")
    return int(text)
