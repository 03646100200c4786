"""Kafka's consumer protocol payloads: what JoinGroup metadata and SyncGroup assignments carry
for ``protocol_type="consumer"`` (subscriptions and assigned partitions), decoded so sparklog's
tools (``sparklog groups describe``, lag) show Kafka clients' groups. The coordinator never
needs them to coordinate: the clients' leader assigns. Undecodable payloads (another protocol
type, a newer version) are shown as nothing rather than failing the group. Shared by the
brokers' group coordinator and the light consumer, which speaks the protocol to them.
"""

from __future__ import annotations

import importlib
import io
import struct
from typing import Any

from kio.serial import entity_reader, entity_writer

from sparklog.model.topic import TopicPartition, partitions_by_topic

__all__ = ["CONSUMER", "decode_assignment", "decode_subscription", "encode_assignment", "encode_subscription"]

CONSUMER = "consumer"
_VERSIONS = {"subscription": 3, "assignment": 3}


def _type(kind: str, version: int) -> Any:
    module = importlib.import_module(f"kio.schema.consumer_protocol_{kind}.v{version}.data")
    return getattr(module, f"ConsumerProtocol{kind.capitalize()}")


def _decode(kind: str, data: bytes | None) -> Any | None:
    if not data or len(data) < 2:
        return None
    (version,) = struct.unpack_from(">h", data)
    try:
        entity, _ = entity_reader(_type(kind, min(version, _VERSIONS[kind])))(data, 2)
    except Exception:  # noqa: BLE001 - a payload we cannot read is shown as nothing
        return None
    return entity


def decode_subscription(data: bytes | None) -> tuple[list[str], list[TopicPartition]]:
    """``(topics, owned partitions)`` of a consumer's JoinGroup metadata."""
    entity = _decode("subscription", data)
    if entity is None:
        return [], []
    owned = [(str(tp.topic), int(p)) for tp in getattr(entity, "owned_partitions", ()) for p in tp.partitions]
    return [str(t) for t in entity.topics], owned


def decode_assignment(data: bytes | None) -> list[TopicPartition]:
    """The partitions of a consumer's SyncGroup assignment."""
    entity = _decode("assignment", data)
    if entity is None:
        return []
    return [(str(tp.topic), int(p)) for tp in entity.assigned_partitions for p in tp.partitions]


def _encode(kind: str, version: int, **values: Any) -> bytes:
    entity_type = _type(kind, version)
    buffer = io.BytesIO()
    buffer.write(struct.pack(">h", version))
    entity_writer(entity_type)(buffer, entity_type(**values))
    return buffer.getvalue()


def encode_subscription(topics: list[str], owned: list[TopicPartition] | None = None) -> bytes:
    """JoinGroup metadata (v1: topics + owned partitions) for sparklog's own protocol members."""
    module = importlib.import_module("kio.schema.consumer_protocol_subscription.v1.data")
    return _encode(
        "subscription",
        1,
        topics=tuple(topics),
        owned_partitions=_partitions(module.TopicPartition, owned or []),
    )


def encode_assignment(partitions: list[TopicPartition]) -> bytes:
    """A SyncGroup assignment (v0)."""
    module = importlib.import_module("kio.schema.consumer_protocol_assignment.v0.data")
    return _encode("assignment", 0, assigned_partitions=_partitions(module.TopicPartition, partitions))


def _partitions(entity_type: Any, partitions: list[TopicPartition]) -> tuple[Any, ...]:
    grouped = partitions_by_topic(sorted(partitions))
    return tuple(entity_type(topic=t, partitions=tuple(ps)) for t, ps in grouped.items())
