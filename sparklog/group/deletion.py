"""Deleting consumer groups (Kafka's DeleteGroups and ``kafka-consumer-groups --delete``): the
one implementation under the brokers' DeleteGroups handler and :mod:`sparklog.admin.groups`.

A group is deleted only while inactive (no live members, no static member away within its
session timeout): its committed offsets are tombstoned through the coordinator (which checks
again right before its commit), then its znodes go. What may not be deleted is named in one
error, raised after the deletable groups are gone, as Kafka reports a partial deletion.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sparklog.errors import GroupIdNotFoundError, GroupNotEmptyError
from sparklog.group.coordinator import GroupCoordinator
from sparklog.metadata.group_registry import GroupSnapshot
from sparklog.metadata.zkdata import MemberRecord
from sparklog.model.group_ids import validate_group_id
from sparklog.model.topic import TopicPartition

__all__ = ["active_members", "committed_offsets", "delete_group", "delete_groups", "group_exists"]


def committed_offsets(groups: GroupCoordinator, group_id: str) -> dict[TopicPartition, int]:
    """The group's live committed offsets (deleted ones left out)."""
    return {tp: c.offset for tp, c in groups.committed_all(group_id).items() if c.offset is not None}


def group_exists(groups: GroupCoordinator, group_id: str, committed: Mapping[TopicPartition, int]) -> bool:
    """A group exists while it has committed offsets or registry state (Kafka lists both)."""
    return bool(committed) or groups.registry.exists(group_id)


def active_members(snap: GroupSnapshot) -> list[MemberRecord]:
    """Live members and static members away within their session timeout (they keep their place)."""
    return [*snap.members.values(), *(d.member for d in snap.departed.values())]


def delete_groups(groups: GroupCoordinator, group_ids: Sequence[str]) -> list[str]:
    """Delete inactive groups (offsets, then znodes); the others fail as in Kafka, all named in
    one error raised after the deletable ones are gone. Returns the groups deleted."""
    registry, deleted, failures = groups.registry, [], []
    for group_id in [validate_group_id(g) for g in group_ids]:
        snap = registry.snapshot(group_id)
        committed = committed_offsets(groups, group_id)
        if snap.active:
            why = f"it is {snap.state} with {len(active_members(snap))} active member(s); stop its consumers and retry"
            failures.append((group_id, "NON_EMPTY_GROUP", why))
        elif not group_exists(groups, group_id, committed):
            failures.append((group_id, "GROUP_ID_NOT_FOUND", "the group does not exist"))
        else:
            if committed:
                groups.reset(group_id, dict.fromkeys(committed))  # tombstones
            registry.delete_group(group_id)
            deleted.append(group_id)
    if failures:
        message = "Deletion of some consumer groups failed: " + " ".join(
            f"* Group '{g}' could not be deleted due to: {code} ({why})." for g, code, why in failures
        )
        if deleted:  # Kafka deletes what it can
            message += " These consumer groups were deleted successfully: " + ", ".join(f"'{g}'" for g in deleted) + "."
        error = (
            GroupNotEmptyError if any(code == "NON_EMPTY_GROUP" for _g, code, _w in failures) else GroupIdNotFoundError
        )
        raise error(message)
    return deleted


def delete_group(groups: GroupCoordinator, group_id: str) -> None:
    delete_groups(groups, [group_id])  # one group: its failure is the error
