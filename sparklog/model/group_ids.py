"""Group ids, static instance ids and member ids (pure values, no I/O).

Invariant: a group id or instance id is validated here before it becomes a znode name or
an application-transaction id. sparklog applies Kafka's topic-name alphabet to them
(``[a-zA-Z0-9._-]``, 1..249 chars), stricter than Kafka, because they are path segments.
"""

from __future__ import annotations

import re
import uuid

from sparklog.errors import InvalidGroupIdError

__all__ = ["MAX_GROUP_ID_LENGTH", "new_member_id", "validate_group_id", "validate_instance_id"]

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
