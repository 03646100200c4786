"""Group ids, static instance ids and member ids (pure values, no I/O), and which
``__consumer_offsets`` partition coordinates a group or transactional id (Kafka's placement,
shared by the clients' coordinator and the brokers').

Invariant: a group id or instance id is validated here before it becomes a znode name or
an application-transaction id. sparklog applies Kafka's topic-name alphabet to them
(``[a-zA-Z0-9._-]``, 1..249 chars), stricter than Kafka, because they are path segments.
"""

from __future__ import annotations

import re
import uuid

from sparklog.errors import InvalidGroupIdError

__all__ = [
    "MAX_GROUP_ID_LENGTH",
    "java_string_hash",
    "new_member_id",
    "offsets_partition_for",
    "validate_group_id",
    "validate_instance_id",
]

MAX_GROUP_ID_LENGTH = 249
_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")


def _validate(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise InvalidGroupIdError(f"{what} must be a string, got {type(value).__name__}")
    if value in ("", ".", ".."):
        raise InvalidGroupIdError(f"{what} {value!r} is illegal: it must not be empty, '.' or '..'")
    if len(value) > MAX_GROUP_ID_LENGTH:
        raise InvalidGroupIdError(f"{what} is longer than {MAX_GROUP_ID_LENGTH} characters: {value[:40]}...")
    if not _LEGAL.fullmatch(value):
        raise InvalidGroupIdError(f"{what} {value!r} is illegal: use only ASCII alphanumerics, '.', '_' and '-'")
    return value


def validate_group_id(group_id: object) -> str:
    return _validate(group_id, "Group id")


def validate_instance_id(instance_id: object) -> str:
    return _validate(instance_id, "group.instance.id")


def new_member_id(client_id: str) -> str:
    """Kafka's shape: ``<client.id>-<uuid>`` (the client id part made path-safe)."""
    prefix = re.sub(r"[^a-zA-Z0-9._-]", "_", client_id or "consumer")[:100]
    return f"{prefix}-{uuid.uuid4()}"


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (UTF-16 code units), as Kafka uses to place a group."""
    data = text.encode("utf-16-be")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def offsets_partition_for(group_id: str, num_partitions: int) -> int:
    """Kafka's ``Utils.abs(groupId.hashCode) % offsets.topic.num.partitions``."""
    h = java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions
