"""Consumer groups in ZooKeeper, seen from outside a member: list, read, check, delete.

Layout (DESIGN §4, paths in :mod:`sparklog.metadata.zkdata`)::

    /consumers/<g>/members/<key>     ephemeral MemberRecord (key = member id, or instance id)
    /consumers/<g>/state             GroupStateRecord, written only by the group leader
    /consumers/<g>/leader            ephemeral {member_id}: who leads the group
    /consumers/<g>/static/<inst>     a static member that closed cleanly and keeps its place

Invariants: the *displayed* state of a group is derived from liveness, not only from the
recorded one: a group whose members are all gone is ``Empty`` even if its last leader died
before recording it. :meth:`GroupRegistry.check_commit` is the ZooKeeper half of an offset
commit's validation (generation, member id); the Delta half is the generation fence of
:mod:`sparklog.log.group_offsets`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from kazoo.exceptions import NodeExistsError, NoNodeError, NotEmptyError

from sparklog import clock
from sparklog.errors import (
    FencedInstanceIdError,
    GroupNotEmptyError,
    IllegalGenerationError,
    RebalanceInProgressError,
    UnknownMemberError,
)
from sparklog.metadata import zkdata
from sparklog.metadata.session import ZkSession, zk_errors
from sparklog.metadata.zkdata import GroupStateRecord, MemberRecord, encode

__all__ = ["COMPLETING", "DEAD", "EMPTY", "PREPARING", "STABLE", "GroupRegistry", "GroupSnapshot", "StaticDeparture"]

EMPTY = "Empty"
PREPARING = "PreparingRebalance"
COMPLETING = "CompletingRebalance"
STABLE = "Stable"
DEAD = "Dead"


@dataclass(frozen=True)
class StaticDeparture:
    member: MemberRecord
    departed_ms: int

    @property
    def expires_ms(self) -> int:
        return self.departed_ms + self.member.session_timeout_ms

    def encode(self) -> bytes:
        return json.dumps(
            {"member": json.loads(encode(self.member)), "departed_ms": self.departed_ms, "version": 1}, sort_keys=True
        ).encode()

    @classmethod
    def decode(cls, data: bytes, path: str) -> StaticDeparture:
        raw = zkdata.decode_json(data, path)
        return cls(MemberRecord.decode(json.dumps(raw["member"]).encode(), path), int(raw["departed_ms"]))


@dataclass(frozen=True)
class GroupSnapshot:
    """One read of a group: recorded state, live members and static members away."""

    group_id: str
    record: GroupStateRecord | None
    record_version: int
    members: dict[str, MemberRecord]  # live, by key
    departed: dict[str, StaticDeparture]  # static members closed within their session timeout

    @property
    def state(self) -> str:
        if not self.members and not self.departed:
            return EMPTY
        if self.record is None or self.record.state == EMPTY:
            return PREPARING  # members are here; the leader has not recorded the rebalance yet
        return self.record.state

    @property
    def active(self) -> bool:
        return bool(self.members or self.departed)


class GroupRegistry:
    """Reads and admin writes of consumer groups. Thread-safe (stateless over a session)."""

    def __init__(self, zk: ZkSession) -> None:
        self.zk = zk

    def list_groups(self) -> list[str]:
        with zk_errors("listing consumer groups"):
            try:
                return sorted(self.zk.client.get_children(zkdata.CONSUMERS))
            except NoNodeError:
                return []

    def exists(self, group_id: str) -> bool:
        with zk_errors(f"reading group {group_id}"):
            return self.zk.client.exists(zkdata.group_path(group_id)) is not None

    def ensure_group(self, group_id: str) -> None:
        client = self.zk.client
        with zk_errors(f"creating group {group_id}"):
            client.ensure_path(zkdata.group_members_path(group_id))
            client.ensure_path(zkdata.group_path(group_id) + "/static")
            try:
                client.create(zkdata.group_state_path(group_id), encode(GroupStateRecord(state=EMPTY, generation=0)))
            except NodeExistsError:
                pass

    def state_record(self, group_id: str, watch: object = None) -> tuple[GroupStateRecord | None, int]:
        path = zkdata.group_state_path(group_id)
        with zk_errors(f"reading the state of group {group_id}"):
            try:
                data, stat = self.zk.client.get(path, watch=watch)
            except NoNodeError:
                return None, -1
        return GroupStateRecord.decode(data, path), stat.version

    def members(self, group_id: str, watch: object = None, member_watch: object = None) -> dict[str, MemberRecord]:
        path = zkdata.group_members_path(group_id)
        result: dict[str, MemberRecord] = {}
        with zk_errors(f"reading the members of group {group_id}"):
            try:
                children = self.zk.client.get_children(path, watch=watch)
            except NoNodeError:
                return {}
            for child in children:
                try:
                    data, _ = self.zk.client.get(f"{path}/{child}", watch=member_watch)
                except NoNodeError:
                    continue
                result[child] = MemberRecord.decode(data, f"{path}/{child}")
        return result

    def departures(self, group_id: str, watch: object = None) -> dict[str, StaticDeparture]:
        path = zkdata.group_path(group_id) + "/static"
        result = {}
        with zk_errors(f"reading static members of group {group_id}"):
            try:
                children = self.zk.client.get_children(path, watch=watch)
            except NoNodeError:
                return {}
            for child in children:
                try:
                    data, _ = self.zk.client.get(f"{path}/{child}")
                except NoNodeError:
                    continue
                result[child] = StaticDeparture.decode(data, f"{path}/{child}")
        return result

    def snapshot(self, group_id: str) -> GroupSnapshot:
        record, version = self.state_record(group_id)
        now = clock.now_ms()
        departed = {k: d for k, d in self.departures(group_id).items() if d.expires_ms > now}
        members = self.members(group_id)
        return GroupSnapshot(
            group_id, record, version, members, {k: d for k, d in departed.items() if k not in members}
        )

    def check_commit(self, group_id: str, generation: int, member_id: str, member_key: str) -> GroupStateRecord:
        """Raise unless ``member_id`` may commit in ``generation`` now (Kafka's coordinator checks)."""
        record, _ = self.state_record(group_id)
        if record is None or record.members.get(member_key) is None:
            raise UnknownMemberError(
                f"Member {member_id} is not part of the current generation of group {group_id}; "
                "it must rejoin (poll) before committing"
            )
        if record.members[member_key] != member_id:
            error = FencedInstanceIdError if member_key != member_id else UnknownMemberError
            raise error(
                f"Member {member_id} of group {group_id} was replaced by {record.members[member_key]} "
                f"(group.instance.id {member_key}); this consumer is fenced"
            )
        # Liveness too, as Kafka's coordinator drops a member at session expiry: a member whose
        # znode is gone may not commit even while its generation is still the current one.
        path = zkdata.group_member_path(group_id, member_key)
        with zk_errors(f"checking member {member_id} of group {group_id}"):
            try:
                data, _ = self.zk.client.get(path)
            except NoNodeError:
                data = None
        if data is None or MemberRecord.decode(data, path).member_id != member_id:
            raise UnknownMemberError(
                f"Member {member_id} of group {group_id} is no longer live (its session expired or it left); "
                "it must rejoin (poll) before committing"
            )
        if record.generation != generation:
            raise IllegalGenerationError(
                f"Commit of group {group_id} carries generation {generation}, the group is at generation "
                f"{record.generation}; the member must rejoin (poll) and commit again"
            )
        if record.state == COMPLETING:
            raise RebalanceInProgressError(f"Group {group_id} is completing a rebalance; poll and commit again")
        return record

    def require_inactive(self, group_id: str, what: str) -> GroupStateRecord | None:
        """Refuse to touch an active group's offsets from outside it (Kafka's rule); returns
        the group's state record (None: the group has no znodes yet)."""
        snap = self.snapshot(group_id)
        if snap.active:
            raise GroupNotEmptyError(
                f"{what}: the group '{group_id}' must be inactive, but the current state is {snap.state} "
                f"with {len(snap.members) + len(snap.departed)} member(s); stop its consumers first."
            )
        return snap.record

    def delete_group(self, group_id: str) -> None:
        """Remove an inactive group's znodes (its committed offsets are the caller's business)."""
        self.require_inactive(group_id, f"Deleting group {group_id}")
        with zk_errors(f"deleting group {group_id}"):
            try:
                self.zk.client.delete(zkdata.group_path(group_id), recursive=True)
            except NoNodeError:
                pass
            except NotEmptyError as exc:
                raise GroupNotEmptyError(
                    f"Group '{group_id}' gained a member while it was being deleted; stop its consumers and retry"
                ) from exc
