"""Controller election: exactly one agent holds the ephemeral ``/controller``, epoch-fenced.

Recipe: a candidate reads ``/controller_epoch`` (value ``e``, znode version ``v``) and, in one
multi-op, creates the ephemeral ``/controller`` ``{broker_id, epoch: e + 1}`` and sets
``/controller_epoch`` to ``e + 1`` at version ``v``. Winning gives the *controller epoch
version* ``v + 1``: every state write of this controller is a multi-op that also checks it
(:meth:`sparklog.metadata.store.MetadataStore.set_partition_state`), so a deposed
controller (a paused process whose session expired) can write nothing once a successor won.

States: *candidate* (watching ``/controller``; tries again whenever it disappears) →
*controller* (``on_elected(epoch, epoch_version)`` was called) → *resigned* (``resign``;
``/controller`` deleted) or *lost* (session expired: ``on_lost()`` is called, then it is a
candidate again). Callbacks run on a worker thread of their own, never on kazoo's event
thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.protocol.states import KazooState

from sparklog.metadata import zkdata
from sparklog.metadata.session import ZkSession, zk_errors
from sparklog.metadata.zkdata import ControllerRecord, encode

__all__ = ["ControllerElection", "current_controller"]


def current_controller(zk: ZkSession) -> ControllerRecord | None:
    with zk_errors("reading /controller"):
        try:
            data, _ = zk.client.get(zkdata.CONTROLLER)
        except NoNodeError:
            return None
    return ControllerRecord.decode(data, zkdata.CONTROLLER)


class ControllerElection:
    """One broker agent's candidacy. Thread-safe."""

    def __init__(
        self,
        zk: ZkSession,
        broker_id: int,
        on_elected: Callable[[int, int], None],
        on_lost: Callable[[], None],
    ) -> None:
        self.zk = zk
        self.broker_id = broker_id
        self._on_elected = on_elected
        self._on_lost = on_lost
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._epoch: int | None = None  # set while we are the controller
        self._thread = threading.Thread(target=self._run, name=f"controller-election-{broker_id}", daemon=True)

    @property
    def is_controller(self) -> bool:
        return self._epoch is not None

    def start(self) -> None:
        self.zk.client.add_listener(self._on_state)
        self._thread.start()

    def resign(self) -> None:
        """Stop competing; give the role up if held (another candidate takes over)."""
        self._stop.set()
        self._wake.set()
        if self._thread.ident is not None:  # resigning before start() is only not competing
            self._thread.join(10)
        self.zk.client.remove_listener(self._on_state)
        with self._lock:
            held, self._epoch = self._epoch, None
        if held is not None:
            self.zk.delete_own_ephemeral(zkdata.CONTROLLER, "resigning as controller")

    # -- internals ---------------------------------------------------------------------------
    def _on_state(self, state: str) -> None:
        if state == KazooState.LOST:
            with self._lock:
                lost = self._epoch is not None
                self._epoch = None
            if lost:
                self.zk.client.handler.spawn(self._on_lost)
        self._wake.set()

    def _watch(self, _event: object) -> None:
        self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            try:
                if self._epoch is None:
                    self._try_once()
                # Wake when /controller changes (deleted: our turn may have come).
                self.zk.client.exists(zkdata.CONTROLLER, watch=self._watch)
            except Exception:  # noqa: BLE001 - ZooKeeper unreachable: try again shortly
                self._wake.wait(0.5)
                continue
            self._wake.wait(5.0)

    def _try_once(self) -> None:
        client = self.zk.client
        client.ensure_path("/")
        try:
            data, stat = client.get(zkdata.CONTROLLER_EPOCH)
            epoch = int(data.decode() or 0)
        except NoNodeError:
            try:
                client.create(zkdata.CONTROLLER_EPOCH, b"0")
            except NodeExistsError:
                pass
            return self._try_once()
        if client.exists(zkdata.CONTROLLER) is not None:
            return
        txn = client.transaction()
        txn.create(
            zkdata.CONTROLLER, encode(ControllerRecord(broker_id=self.broker_id, epoch=epoch + 1)), ephemeral=True
        )
        txn.set_data(zkdata.CONTROLLER_EPOCH, str(epoch + 1).encode(), version=stat.version)
        results = txn.commit()
        if any(isinstance(r, Exception) for r in results):
            return  # someone else won this round
        with self._lock:
            self._epoch = epoch + 1
        self._on_elected(epoch + 1, stat.version + 1)
