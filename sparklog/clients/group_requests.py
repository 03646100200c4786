"""The group protocol's requests as the light consumer sends them (fixed versions: JoinGroup
v9, SyncGroup v5, Heartbeat v4, LeaveGroup v5, OffsetCommit v8, OffsetFetch v7,
FindCoordinator v3), built from kio's message types, and what their answers mean."""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32Timedelta

from sparklog import errors
from sparklog.clients.kafka_wire import KafkaConnection, nested, raise_for, request
from sparklog.group.consumer_protocol import CONSUMER, encode_assignment
from sparklog.group.coordinator import OffsetCommit
from sparklog.model.topic import TopicPartition, partitions_by_topic

__all__ = [
    "COORDINATOR_ERRORS",
    "commit_codes",
    "fetch_codes",
    "fetched_offsets",
    "find_coordinator",
    "heartbeat",
    "join_group",
    "leave_group",
    "offset_commit",
    "offset_fetch",
    "sync_group",
]

COORDINATOR_ERRORS = (
    ErrorCode.not_coordinator,
    ErrorCode.coordinator_not_available,
    ErrorCode.coordinator_load_in_progress,
)


def _ms(value: int) -> Any:
    return i32Timedelta.parse(datetime.timedelta(milliseconds=value))


def find_coordinator(
    bootstrap: Sequence[tuple[str, int]], group_id: str, client_id: str, timeout_s: float
) -> tuple[int, str, int]:
    """``(node id, host, port)`` of ``group_id``'s coordinator, asking each bootstrap server in
    turn; ``CoordinatorNotAvailableError`` naming every server's answer when none knows it."""
    failures = []
    for host, port in bootstrap:
        conn = KafkaConnection(f"bootstrap {host}:{port}", host, port, client_id, timeout_s)
        try:
            response = conn.call(request("find_coordinator", 3, key=group_id, key_type=0))
        except errors.BrokerNotAvailableError as exc:
            failures.append(str(exc))
            continue
        finally:
            conn.close()
        code = ErrorCode(int(response.error_code))
        if code == ErrorCode.none:
            return int(response.node_id), str(response.host), int(response.port)
        failures.append(f"{host}:{port} answered {code.name.upper()} ({response.error_message})")
        if code not in COORDINATOR_ERRORS:
            raise_for(code, f"FindCoordinator for group {group_id}")
    raise errors.CoordinatorNotAvailableError(
        f"No coordinator found for group {group_id} through bootstrap.servers: " + "; ".join(failures)
    )


def join_group(
    group_id: str,
    member_id: str,
    instance_id: str | None,
    session_timeout_ms: int,
    rebalance_timeout_ms: int,
    protocols: Sequence[str],
    metadata: bytes,
) -> Any:
    return request(
        "join_group",
        9,
        group_id=group_id,
        session_timeout=_ms(session_timeout_ms),
        rebalance_timeout=_ms(rebalance_timeout_ms),
        member_id=member_id,
        group_instance_id=instance_id,
        protocol_type=CONSUMER,
        protocols=tuple(
            nested("join_group", 9, "JoinGroupRequestProtocol", name=name, metadata=metadata) for name in protocols
        ),
        reason=None,
    )


def sync_group(
    group_id: str,
    generation: int,
    member_id: str,
    instance_id: str | None,
    protocol: str,
    assignments: Mapping[str, list[TopicPartition]],
) -> Any:
    return request(
        "sync_group",
        5,
        group_id=group_id,
        generation_id=generation,
        member_id=member_id,
        group_instance_id=instance_id,
        protocol_type=CONSUMER,
        protocol_name=protocol,
        assignments=tuple(
            nested("sync_group", 5, "SyncGroupRequestAssignment", member_id=m, assignment=encode_assignment(ps))
            for m, ps in sorted(assignments.items())
        ),
    )


def heartbeat(group_id: str, generation: int, member_id: str, instance_id: str | None) -> Any:
    return request(
        "heartbeat",
        4,
        group_id=group_id,
        generation_id=generation,
        member_id=member_id,
        group_instance_id=instance_id,
    )


def leave_group(group_id: str, member_id: str) -> Any:
    identity = nested("leave_group", 5, "MemberIdentity", member_id=member_id, group_instance_id=None)
    return request("leave_group", 5, group_id=group_id, members=(identity,))


def offset_commit(
    group_id: str,
    generation: int,
    member_id: str,
    instance_id: str | None,
    commits: Mapping[TopicPartition, OffsetCommit],
) -> Any:
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition), commit in sorted(commits.items()):
        by_topic.setdefault(topic, []).append(
            nested(
                "offset_commit",
                8,
                "OffsetCommitRequestPartition",
                partition_index=partition,
                committed_offset=commit.offset,
                committed_leader_epoch=-1,
                committed_metadata=commit.metadata,
            )
        )
    return request(
        "offset_commit",
        8,
        group_id=group_id,
        generation_id_or_member_epoch=generation,
        member_id=member_id,
        group_instance_id=instance_id,
        topics=tuple(
            nested("offset_commit", 8, "OffsetCommitRequestTopic", name=t, partitions=tuple(ps))
            for t, ps in by_topic.items()
        ),
    )


def offset_fetch(group_id: str, partitions: Iterable[TopicPartition]) -> Any:
    by_topic = partitions_by_topic(sorted(set(partitions)))
    return request(
        "offset_fetch",
        7,
        group_id=group_id,
        topics=tuple(
            nested("offset_fetch", 7, "OffsetFetchRequestTopic", name=t, partition_indexes=tuple(ps))
            for t, ps in by_topic.items()
        ),
        require_stable=False,
    )


def commit_codes(response: Any) -> list[ErrorCode]:
    """The per-partition codes of an OffsetCommit answer."""
    return [ErrorCode(int(p.error_code)) for t in response.topics for p in t.partitions]


def fetch_codes(response: Any) -> list[ErrorCode]:
    """The group's and the partitions' codes of an OffsetFetch answer."""
    return [ErrorCode(int(response.error_code)), *commit_codes(response)]


def fetched_offsets(response: Any) -> dict[TopicPartition, int]:
    """Committed offsets of an OffsetFetch answer (-1, no offset, left out)."""
    return {
        (str(t.name), int(p.partition_index)): int(p.committed_offset)
        for t in response.topics
        for p in t.partitions
        if int(p.committed_offset) >= 0
    }
