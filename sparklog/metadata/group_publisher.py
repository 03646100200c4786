"""The ZooKeeper face of the groups a broker coordinates through the Kafka protocol (DESIGN §8).

One group system: sparklog's tools (``sparklog groups list|describe``, ``reset-offsets``,
lag, standalone commits from Spark) read groups from ``/consumers/<g>``. A broker that
coordinates a group through the Kafka protocol writes the same records there — the state
record and one ephemeral member znode per member (under the broker's session, so they go
when the broker does) — marked with the broker id. States of a group's znodes::

    absent/Empty --claim--> CLAIMED (leader znode {"member_id": "coordinator-<broker>"})
    CLAIMED --publish--> state + members mirror the coordinator's memory
    CLAIMED --withdraw--> Empty state record, our members and leader znode deleted

Invariants:

* a group has one membership system: a broker refuses to claim a group whose leader znode
  or members belong to sparklog's ZooKeeper membership (light consumers without a broker),
  and :mod:`sparklog.metadata.group_member` refuses to join a group a coordinator claimed;
* a broker only deletes znodes it published, or those of a coordinator broker that is no
  longer live or no longer leads the group (its successor takes over).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence

from kazoo.exceptions import NodeExistsError, NoNodeError

from sparklog.errors import InconsistentGroupProtocolError
from sparklog.metadata import zkdata
from sparklog.metadata.group_registry import GroupRegistry
from sparklog.metadata.session import ZkSession, zk_errors
from sparklog.metadata.zkdata import GroupStateRecord, MemberRecord, encode

__all__ = ["COORDINATOR_PREFIX", "GroupPublisher", "coordinator_of", "refuse_if_coordinated"]

COORDINATOR_PREFIX = "coordinator-"


def coordinator_of(leader_data: bytes | None) -> int | None:
    """The broker id of a coordinator's leader znode; None for a member's (or none)."""
    if not leader_data:
        return None
    try:
        member = str(json.loads(leader_data).get("member_id", ""))
    except (ValueError, AttributeError):
        return None
    if not member.startswith(COORDINATOR_PREFIX):
        return None
    try:
        return int(member[len(COORDINATOR_PREFIX) :])
    except ValueError:
        return None


def refuse_if_coordinated(zk: ZkSession, group_id: str, known: int | None = None) -> None:
    """``InconsistentGroupProtocolError`` when a broker coordinates ``group_id`` through the
    Kafka protocol (a ZooKeeper member may not join it)."""
    with zk_errors(f"joining group {group_id}"):
        try:
            data, _ = zk.client.get(zkdata.group_leader_path(group_id))
        except NoNodeError:
            data = None
    broker = coordinator_of(data) if data is not None else known
    if broker is not None:
        raise InconsistentGroupProtocolError(
            f"Group {group_id} is coordinated by broker {broker} through the Kafka protocol (Kafka clients are its "
            "members); a consumer without bootstrap.servers cannot join it. Give this consumer bootstrap.servers, "
            "or use another group id"
        )


class GroupPublisher:
    """Writes one broker's protocol groups into ``/consumers``. Thread-safe per group."""

    def __init__(self, zk: ZkSession, broker_id: int) -> None:
        self.zk = zk
        self.broker_id = broker_id
        self.registry = GroupRegistry(zk)
        self._leader_data = json.dumps({"member_id": f"{COORDINATOR_PREFIX}{broker_id}"}).encode()

    def claim(self, group_id: str, live_brokers: Sequence[int]) -> None:
        """Make this broker the group's membership owner; ``InconsistentGroupProtocolError``
        when sparklog's ZooKeeper members hold it."""
        client = self.zk.client
        path = zkdata.group_leader_path(group_id)
        with zk_errors(f"claiming group {group_id}"):
            self.registry.ensure_group(group_id)
            for _ in range(10):
                try:
                    client.create(path, self._leader_data, ephemeral=True)
                except NodeExistsError:
                    pass
                try:
                    data, stat = client.get(path)
                except NoNodeError:
                    continue
                if stat.ephemeralOwner == self.zk.session_id:
                    break
                owner = coordinator_of(data)
                if owner is None:
                    raise InconsistentGroupProtocolError(
                        f"Group {group_id} has members using sparklog's ZooKeeper membership (light consumers "
                        "started without a broker); stop them or give them bootstrap.servers, then join again"
                    )
                # Another broker coordinated it before (we lead its offsets partition now).
                self._drop_members(group_id, owner)
                try:
                    client.delete(path, version=stat.version)
                except NoNodeError:
                    pass
            foreign = [m for m in self.registry.members(group_id).values() if m.coordinator < 0]
            if foreign:
                client.delete(path)
                raise InconsistentGroupProtocolError(
                    f"Group {group_id} has {len(foreign)} member(s) using sparklog's ZooKeeper membership "
                    f"(e.g. {foreign[0].member_id}, client {foreign[0].client_id}); stop them or give them "
                    "bootstrap.servers, then join again"
                )

    def publish(self, group_id: str, record: GroupStateRecord, members: Sequence[MemberRecord]) -> None:
        """Mirror the group: its state record and exactly ``members`` as our member znodes."""
        client = self.zk.client
        with zk_errors(f"publishing group {group_id}"):
            with contextlib.suppress(NodeExistsError):  # a withdraw raced a new claim: hold it again
                client.create(zkdata.group_leader_path(group_id), self._leader_data, ephemeral=True)
            client.set(zkdata.group_state_path(group_id), encode(record))
            wanted = {m.key: m for m in members}
            for key, current in self.registry.members(group_id).items():
                if key not in wanted and current.coordinator == self.broker_id:
                    self._delete(zkdata.group_member_path(group_id, key))
            for key, member in wanted.items():
                path = zkdata.group_member_path(group_id, key)
                try:
                    client.create(path, encode(member), ephemeral=True)
                except NodeExistsError:
                    client.set(path, encode(member))

    def withdraw(self, group_id: str, record: GroupStateRecord) -> None:
        """The group is empty (or no longer ours): leave an Empty record, drop our znodes."""
        with zk_errors(f"withdrawing group {group_id}"):
            self._drop_members(group_id, self.broker_id)
            try:
                _data, stat = self.zk.client.get(zkdata.group_leader_path(group_id))
                if stat.ephemeralOwner == self.zk.session_id:
                    self.zk.client.delete(zkdata.group_leader_path(group_id))
            except NoNodeError:
                pass
            if self.zk.client.exists(zkdata.group_path(group_id)) is not None:
                self.zk.client.set(zkdata.group_state_path(group_id), encode(record))

    def release(self, group_id: str) -> None:
        """This broker no longer coordinates the group: drop our znodes, leave the record to
        the new coordinator."""
        with zk_errors(f"releasing group {group_id}"):
            self._drop_members(group_id, self.broker_id)
            try:
                _data, stat = self.zk.client.get(zkdata.group_leader_path(group_id))
                if stat.ephemeralOwner == self.zk.session_id:
                    self.zk.client.delete(zkdata.group_leader_path(group_id))
            except NoNodeError:
                pass

    def _drop_members(self, group_id: str, broker_id: int) -> None:
        for key, member in self.registry.members(group_id).items():
            if member.coordinator == broker_id:
                self._delete(zkdata.group_member_path(group_id, key))

    def _delete(self, path: str) -> None:
        try:
            self.zk.client.delete(path)
        except NoNodeError:
            pass
