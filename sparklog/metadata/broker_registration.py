"""A broker agent's liveness in ZooKeeper: the ephemeral ``/brokers/ids/<id>``.

Recipe states: *unregistered* → (``register``) *registered* → (``deregister``, storage probe
failed) *unregistered* …; *closed* at the end. While the agent wants to be registered, a
session that expired and came back (kazoo reconnects with a new session, ephemerals of the
old one are gone) registers again, from the connection listener's worker thread. The
controller watches ``/brokers/ids``: a missing znode is a broker down.

Another live process registered under the same id (``NodeExistsError`` for a session that is
not ours) is an error: two agents must never claim one broker id.
"""

from __future__ import annotations

import threading

from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.protocol.states import KazooState

from sparklog.errors import ConfigError
from sparklog.metadata import zkdata
from sparklog.metadata.session import ZkSession, zk_errors
from sparklog.metadata.zkdata import BrokerRecord, encode

__all__ = ["BrokerRegistration", "live_broker_ids", "live_brokers"]


def live_broker_ids(zk: ZkSession) -> list[int]:
    """Ids of the brokers whose agents are registered (live) now."""
    with zk_errors("listing live brokers"):
        client = zk.client
        if not client.exists(zkdata.BROKER_IDS):
            return []
        return sorted(int(child) for child in client.get_children(zkdata.BROKER_IDS))


def live_brokers(zk: ZkSession) -> dict[int, BrokerRecord]:
    """The registrations of the live brokers, by id (a broker leaving meanwhile is left out)."""
    result: dict[int, BrokerRecord] = {}
    with zk_errors("reading live brokers"):
        client = zk.client
        children = client.get_children(zkdata.BROKER_IDS) if client.exists(zkdata.BROKER_IDS) else []
        for child in children:
            path = zkdata.broker_ids_path(int(child))
            try:
                data, _ = client.get(path)
            except NoNodeError:
                continue
            result[int(child)] = BrokerRecord.decode(data, path)
    return dict(sorted(result.items()))


class BrokerRegistration:
    """The ephemeral registration of one broker id by one agent. Thread-safe."""

    def __init__(self, zk: ZkSession, broker_id: int, record: BrokerRecord) -> None:
        self.zk = zk
        self.broker_id = broker_id
        self.record = record
        self.path = zkdata.broker_ids_path(broker_id)
        self._wanted = False
        self._lock = threading.Lock()
        zk.client.add_listener(self._on_state)

    @property
    def registered(self) -> bool:
        with zk_errors(f"checking the registration of broker {self.broker_id}"):
            stat = self.zk.client.exists(self.path)
        return stat is not None and stat.ephemeralOwner == self.zk.session_id

    def register(self) -> None:
        with self._lock:
            self._wanted = True
            self._create()

    def deregister(self) -> None:
        with self._lock:
            self._wanted = False
            self.zk.delete_own_ephemeral(self.path, f"deregistering broker {self.broker_id}")

    def close(self) -> None:
        self.zk.client.remove_listener(self._on_state)
        self.deregister()

    def _create(self) -> None:
        client = self.zk.client
        with zk_errors(f"registering broker {self.broker_id}"):
            client.ensure_path(zkdata.BROKER_IDS)
            try:
                client.create(self.path, encode(self.record), ephemeral=True)
            except NodeExistsError:
                stat = client.exists(self.path)
                if stat is not None and stat.ephemeralOwner != self.zk.session_id:
                    raise ConfigError(
                        f"Broker id {self.broker_id} is already registered by another live agent (ZooKeeper session "
                        f"{stat.ephemeralOwner:#x}); give this agent another --id"
                    ) from None

    def _on_state(self, state: str) -> None:
        if state == KazooState.CONNECTED:
            # Possibly a new session after expiry: our ephemeral is gone. Re-create off the
            # event thread (blocking calls are not allowed in a listener).
            self.zk.client.handler.spawn(self._reregister)

    def _reregister(self) -> None:
        with self._lock:
            if self._wanted:
                try:
                    self._create()
                except Exception:  # noqa: BLE001 - the agent's probe loop registers again
                    pass
