"""Topic names and topic descriptions (pure values, no I/O).

Invariant: a topic name is validated here before it ever becomes a path or a znode, so
no caller may build ``<log_dir>/topics/<name>`` or ``/brokers/topics/<name>`` from an
unvalidated string.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from sparklog.errors import InvalidTopicError

__all__ = [
    "MAX_TOPIC_NAME_LENGTH",
    "OFFSETS_TOPIC",
    "PartitionDescription",
    "TopicDescription",
    "TopicPartition",
    "is_internal",
    "partitions_by_topic",
    "validate_topic_name",
]

MAX_TOPIC_NAME_LENGTH = 249
_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")
TopicPartition = tuple[str, int]  # (topic, partition): the one spelling of a partition's name
OFFSETS_TOPIC = "__consumer_offsets"  # Kafka's internal topic of committed group offsets
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC})
# Names found legal: a broker checks a request's topic several times (a tenth of its request
# handling under one-record produce requests, py-spy). Bounded; a full set just stops growing.
_KNOWN_LEGAL: set[str] = set()
_KNOWN_LEGAL_MAX = 100_000


def validate_topic_name(name: object) -> str:
    """Return ``name`` if it is a legal Kafka topic name, else raise ``InvalidTopicError``."""
    if type(name) is str and name in _KNOWN_LEGAL:
        return name
    if not isinstance(name, str):
        raise InvalidTopicError(f"Topic name must be a string, got {type(name).__name__}")
    if name == "":
        raise InvalidTopicError("Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise InvalidTopicError(f"Topic name cannot be {name!r}")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicError(
            f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} characters, "
            f"topic name: {name[:40]}... ({len(name)} characters)"
        )
    if not _LEGAL.fullmatch(name):
        raise InvalidTopicError(
            f"Topic name {name!r} is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'"
        )
    if len(_KNOWN_LEGAL) < _KNOWN_LEGAL_MAX:
        _KNOWN_LEGAL.add(name)
    return name


def is_internal(name: str) -> bool:
    return name in INTERNAL_TOPICS


@dataclass(frozen=True)
class PartitionDescription:
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True)
class TopicDescription:
    name: str
    topic_id: str
    partitions: tuple[PartitionDescription, ...]
    configs: dict[str, str] = field(default_factory=dict)  # overrides only, as stored

    @property
    def partition_count(self) -> int:
        return len(self.partitions)

    @property
    def replication_factor(self) -> int:
        return len(self.partitions[0].replicas) if self.partitions else 0


def partitions_by_topic(partitions: Iterable[tuple[str, int]]) -> dict[str, list[int]]:
    """``(topic, partition)`` pairs grouped by topic, both in the order given (Kafka's
    requests and responses nest partitions under their topic)."""
    grouped: dict[str, list[int]] = {}
    for topic, partition in partitions:
        grouped.setdefault(topic, []).append(partition)
    return grouped
