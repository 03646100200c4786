"""Whether a group has live members in sparklog's ZooKeeper membership, answered from a
watched cache (DESIGN §8, §14).

A group coordinator checks this on every standalone offset commit (generation -1: refused
while the group has live members, Kafka's rule). Reading the group (state record, members,
static members away) costs three ZooKeeper round trips, most of a commit's time; here a
group's answer is read once with watches on its member and static-member children and its
state record, and kept until one of them fires.

Invariants: an answer is dropped when any watched znode of the group changes, when the
session's connection state changes (watches may have been lost), when a static member's
grace period (its departure's expiry) ends, and at the latest after :data:`MAX_AGE_MS`; a
member that registers is seen by the next check once ZooKeeper delivered its watch event
(the same ordering a Kafka coordinator gives a JoinGroup racing a commit). Thread-safe.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from sparklog import clock
from sparklog.metadata import zkdata
from sparklog.metadata.group_registry import GroupRegistry
from sparklog.metadata.session import ZkSession, zk_errors

__all__ = ["MAX_AGE_MS", "GroupActivity", "GroupPresence"]

MAX_AGE_MS = 10_000  # a safety net: watches normally drop an answer first


@dataclass(frozen=True)
class GroupPresence:
    active: bool  # live members, or static members within their session timeout
    recorded: bool  # the group's state znode exists (it is listed by `groups list`)
    members: int


@dataclass(frozen=True)
class _Entry:
    presence: GroupPresence
    valid_until_ms: int


class GroupActivity:
    """Cached, watched answers to "is this group active?" for one ZooKeeper session."""

    def __init__(self, zk: ZkSession) -> None:
        self.zk = zk
        self.registry = GroupRegistry(zk)
        self._lock = threading.Lock()
        self._entries: dict[str, _Entry] = {}
        self._generations: dict[str, int] = {}  # bumped by every watch event of the group
        zk.client.add_listener(self._on_state)

    def presence(self, group_id: str) -> GroupPresence:
        now = clock.now_ms()
        with self._lock:
            entry = self._entries.get(group_id)
            if entry is not None and now < entry.valid_until_ms:
                return entry.presence
            generation = self._generations.get(group_id, 0)
        watch = self._invalidator(group_id)
        record, _ = self.registry.state_record(group_id, watch=watch)
        if record is None:  # a group being created: its znodes' creation must drop the answer too
            for path in (
                zkdata.group_state_path(group_id),
                zkdata.group_members_path(group_id),
                zkdata.group_path(group_id) + "/static",
            ):
                with zk_errors(f"watching group {group_id}"):
                    self.zk.client.exists(path, watch=watch)
        members = self.registry.members(group_id, watch=watch)
        departed = {
            key: d
            for key, d in self.registry.departures(group_id, watch=watch).items()
            if d.expires_ms > now and key not in members
        }
        presence = GroupPresence(bool(members or departed), record is not None, len(members) + len(departed))
        expiry = min([now + MAX_AGE_MS, *(d.expires_ms for d in departed.values())])
        with self._lock:
            if self._generations.get(group_id, 0) == generation:  # no event fired while we read
                self._entries[group_id] = _Entry(presence, expiry)
        return presence

    def forget(self, group_id: str) -> None:
        """Drop the cached answer (after this process changed the group itself)."""
        with self._lock:
            self._entries.pop(group_id, None)
            self._generations[group_id] = self._generations.get(group_id, 0) + 1

    def _invalidator(self, group_id: str) -> Any:
        def invalidate(_event: object) -> None:
            self.forget(group_id)

        return invalidate

    def _on_state(self, _state: object) -> None:
        with self._lock:
            self._entries.clear()
            for group_id in list(self._generations):
                self._generations[group_id] += 1
