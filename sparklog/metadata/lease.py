"""The partition write lease: who may append to a partition, under which epoch.

Recipe (one znode per partition, ``.../partitions/<p>/writer``, JSON
:class:`~sparklog.metadata.zkdata.WriterLeaseRecord`):

* **unheld → held**: a writer takes the lease by compare-and-set when the record is
  missing, released, or expired; the epoch goes up by one on every change of holder.
* **held → held**: the holder renews (pushes ``expires_ms``) by compare-and-set; the
  same owner and epoch are kept, so no epoch marker is needed.
* **held → released**: the holder clears it after its last commit returned.
* **held → lost**: another writer took it after expiry (``epoch`` grew). The loser is
  fenced by the Delta transaction of the new epoch, not by this znode: a paused process
  can outlive its lease, so the lease only keeps honest writers from colliding.

A connection lost during a ZooKeeper failover leaves a write's outcome unknown. A later
``acquire`` recognises a grant of ours that did land (our owner at the epoch we tried, with
the ``takeover`` decided then), and a failed ``release`` keeps the grant, so the next
``acquire`` renews the lease instead of waiting for it to expire.

**Held leases** (a broker leading the partition): the holder keeps the lease between its
commits and re-grants it from memory while more than half of ``lease_ms`` is left (no
ZooKeeper round trip); a writer that has to wait for a held lease announces itself with an
ephemeral ``waiting-<owner>-`` child of the lease znode, and the holder, watching those
children (:meth:`WriterLease.wanted`), releases after its current commit — and, acquiring
with ``yield_to_waiters``, does not take the lease back while others still wait, so a
holder with a steady stream of commits cannot starve them. A lease held by a broker
(owner ``broker-<id>``) whose agent is no longer live is taken over at once (with an epoch
marker) instead of after its expiry, so a new leader does not wait out a dead one's lease.

Every grant that does not continue the one held (not a renewal) bumps
:attr:`WriterLease.grant_serial`: while it stays the same, nobody else wrote the partition
with the lease, so a leader may trust what it recorded of the log
(:mod:`sparklog.log.leader_log`).

``takeover`` on a grant means the previous holder did not release (it may be a zombie):
the new holder must commit an epoch marker before anything else. The lease record is not
ephemeral because a Spark job's lease spans several short-lived Python processes; expiry
(``writer.lease.ms``) frees the lease of a crashed holder. Expiry compares wall clocks.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError
from kazoo.protocol.states import ZnodeStat
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from sparklog import clock
from sparklog.errors import FencedError, LeaseTimeoutError, TopicNotFoundError, ZooKeeperUnavailableError
from sparklog.metadata import zkdata
from sparklog.metadata.session import ZkSession, zk_errors
from sparklog.metadata.zkdata import WriterLeaseRecord, encode

__all__ = ["LeaseGrant", "WriterLease", "broker_lease_owner"]

_POLITE_WAIT_S = 0.005


def broker_lease_owner(broker_id: int) -> str:
    """The owner name under which a broker holds the leases of the partitions it leads."""
    return f"broker-{broker_id}"


@dataclass(frozen=True)
class LeaseGrant:
    topic: str
    partition: int
    owner: str
    epoch: int
    takeover: bool  # previous holder did not release: commit an epoch marker first


class WriterLease:
    """The write lease of one partition for one owner. Not thread-safe; one per writer."""

    def __init__(self, zk: ZkSession, topic: str, partition: int, owner: str, lease_ms: int) -> None:
        self.zk = zk
        self.topic = topic
        self.partition = partition
        self.owner = owner
        self.lease_ms = lease_ms
        self.path = zkdata.writer_path(topic, partition)
        self.grant: LeaseGrant | None = None
        # The record this writer last wrote and the znode version it got: the next
        # acquire/release tries a compare-and-set on it before reading (one round trip
        # instead of two when nobody else touched the lease meanwhile).
        self._known: tuple[WriterLeaseRecord, int] | None = None
        # (epoch, takeover) of the grant last written: its reply may have been lost.
        self._attempt: tuple[int, bool] | None = None
        self._held_until_ms = 0  # expiry of our grant as last written
        # Bumped by every grant that does not continue the one held (a renewal keeps it): a
        # holder may trust what it recorded of the partition's log while it stays the same.
        self.grant_serial = 0
        self._wanted: threading.Event | None = None  # set while other writers wait (held leases)
        # The znode version our last write got, and the one a watch last saw (see undisturbed).
        self._written_version: int | None = None
        self._seen_version: int | None = None
        self._watching = False

    def _read(self) -> tuple[WriterLeaseRecord | None, int]:
        known, self._known = self._known, None
        if known is not None:
            return known
        try:
            data, stat = self.zk.client.get(self.path)
        except NoNodeError:
            return None, -1
        return WriterLeaseRecord.decode(data, self.path), stat.version

    def _set(self, record: WriterLeaseRecord, version: int) -> None:
        """Compare-and-set; remembers the outcome for the next call.

        A vanished znode (topic deleted, maybe re-created) counts as a lost race: the caller
        re-reads, like after ``BadVersionError``.
        """
        try:
            stat = self.zk.client.set(self.path, encode(record), version=version)
        except NoNodeError:
            raise BadVersionError() from None
        self._written_version = stat.version
        self._known = (record, stat.version)

    def acquire(
        self,
        timeout_ms: int,
        log_epoch: int | Callable[[], int] = 0,
        next_offset: int = -1,
        adopt: bool = False,
        yield_to_waiters: bool = False,
    ) -> LeaseGrant:
        """Take (or renew) the lease, waiting up to ``timeout_ms`` for a live holder to finish.

        ``adopt``: a lease held under our owner name by an earlier incarnation (a restarted
        job or broker with a stable owner id whose predecessor crashed) is taken over at once
        instead of after its expiry; the epoch grows and the grant says ``takeover``, so the
        epoch marker fences whatever the predecessor might still commit.

        ``log_epoch`` is the newest epoch already recorded in the log (or a function that
        reads it; called only when the znode is missing, since an existing znode's epoch is
        never below the log's). A new grant is always above it, so a lost or recreated znode
        never hands out an epoch the log has seen.

        ``yield_to_waiters``: a free lease is left to the writers announced as waiting (a
        holder that keeps leases between commits uses it).
        """
        if self.grant is not None and self.held_firmly():
            return self.grant
        deadline = time.monotonic() + timeout_ms / 1000.0
        waiting: list[str] = []  # our ``waiting-`` znode while we wait for a holder
        try:
            with zk_errors(f"acquiring write lease of {self.topic}-{self.partition}"):
                return self._acquire(timeout_ms, deadline, log_epoch, next_offset, adopt, yield_to_waiters, waiting)
        finally:
            for path in waiting:
                try:
                    self.zk.client.delete(path)
                except Exception:  # noqa: BLE001 - ephemeral: it goes with the session anyway
                    pass

    def _acquire(
        self,
        timeout_ms: int,
        deadline: float,
        log_epoch: int | Callable[[], int],
        next_offset: int,
        adopt: bool,
        yield_to_waiters: bool,
        waiting: list[str],
    ) -> LeaseGrant:
        client = self.zk.client
        while True:
            record, version = self._read()
            now = clock.now_ms()
            expires = now + self.lease_ms
            if record is None:
                if callable(log_epoch):
                    log_epoch = log_epoch()
                new = WriterLeaseRecord(self.owner, log_epoch + 1, expires, False, next_offset)
                self._attempt = (new.epoch, log_epoch > 0)
                try:
                    # No makepath: the partition znode exists for as long as the topic does,
                    # and re-creating it would resurrect a deleted topic as an empty ghost.
                    client.create(self.path, encode(new))
                    self._known = (new, 0)
                    self._written_version = 0
                except NodeExistsError:
                    continue
                except NoNodeError:
                    raise TopicNotFoundError(
                        f"Partition {self.topic}-{self.partition} does not exist (was the topic deleted?)"
                    ) from None
                # Someone wrote before the znode existed: they may still be around.
                return self._granted(new.epoch, takeover=log_epoch > 0, expires_ms=expires)
            ours = record.owner == self.owner and not record.released
            landed = self._attempt if ours and self._attempt and record.epoch == self._attempt[0] else None
            mine = landed is not None or (ours and self.grant is not None and record.epoch == self.grant.epoch)
            adopted = adopt and not mine and record.owner == self.owner
            free = record.released or record.expires_ms <= now or self._holder_is_dead(record)
            polite_wait = free and not mine and yield_to_waiters and self.wanted()
            if (mine or adopted or free) and not polite_wait:
                renewed = ours and self.grant is not None and record.epoch == self.grant.epoch
                floor = 0 if callable(log_epoch) else log_epoch
                epoch = record.epoch if mine else max(record.epoch, floor) + 1
                takeover = landed[1] if landed is not None else False if mine else not record.released
                new = WriterLeaseRecord(self.owner, epoch, expires, False, next_offset)
                self._attempt = (epoch, takeover)
                try:
                    self._set(new, version)
                except BadVersionError:
                    continue
                return self._granted(epoch, takeover=takeover, expires_ms=expires, renewed=renewed)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise LeaseTimeoutError(
                    f"Timed out after {timeout_ms} ms waiting for the write lease of partition "
                    f"{self.topic}-{self.partition}: held by {record.owner} (epoch {record.epoch}) "
                    f"until {record.expires_ms - now} ms from now. Retry later or raise max.block.ms.",
                    self.partition,
                )
            if polite_wait:
                time.sleep(min(remaining, _POLITE_WAIT_S))  # a waiter takes it, or gives up
                continue
            if not waiting:  # a holder keeping the lease between commits lets go for us
                waiting.append(client.create(f"{self.path}/{self._waiting_prefix}", ephemeral=True, sequence=True))
            changed = threading.Event()
            stat = client.exists(self.path, watch=lambda _event, changed=changed: changed.set())
            if stat is None or stat.version != version:
                continue  # changed (e.g. released) since we read it: the watch would never fire
            changed.wait(min(remaining, max(0.001, (record.expires_ms - now) / 1000.0 + 0.002)))

    @property
    def _waiting_prefix(self) -> str:
        return f"waiting-{self.owner}-"

    def _holder_is_dead(self, record: WriterLeaseRecord) -> bool:
        """A broker's lease whose agent is not registered (live) any more."""
        prefix, _, broker_id = record.owner.partition("-")
        if prefix != "broker" or not broker_id.isdigit():
            return False
        return self.zk.client.exists(zkdata.broker_ids_path(int(broker_id))) is None

    def held_firmly(self) -> bool:
        """Held and far from expiry: nobody else may have taken it, and :meth:`acquire`
        returns the grant without asking ZooKeeper."""
        return self.grant is not None and clock.now_ms() < self._held_until_ms - self.lease_ms // 2

    def drop(self) -> None:
        """Forget our grant without touching ZooKeeper: the log fenced it (a newer writer
        took the partition), so the next :meth:`acquire` must read the lease again."""
        self.grant = None
        self._held_until_ms = 0

    def wanted(self) -> bool:
        """Whether another writer waits for this lease (held leases: release it soon)."""
        if self._wanted is None:
            wanted = self._wanted = threading.Event()

            ours = self._waiting_prefix

            def on_children(children: list[str]) -> None:
                if any(c.startswith("waiting-") and not c.startswith(ours) for c in children):
                    wanted.set()
                else:
                    wanted.clear()

            try:
                ChildrenWatch(self.zk.client, self.path, on_children)
            except NoNodeError:
                wanted.set()  # the partition is gone: let go
        return self._wanted.is_set()

    def undisturbed(self) -> bool:
        """Held, and the lease znode is still as our last write left it: no other writer took
        the lease since, so nobody else appended to the partition. Answered from a ZooKeeper
        watch, without a request; False until the watch reported once (and after the znode
        went away, e.g. the topic deleted)."""
        if not self._watching:
            self._watching = True

            def on_data(_data: bytes | None, stat: ZnodeStat | None) -> None:
                self._seen_version = None if stat is None else int(stat.version)

            try:
                DataWatch(self.zk.client, self.path, on_data)
            except NoNodeError:
                self._seen_version = None
        return (
            self.grant is not None and self._written_version is not None and self._seen_version == self._written_version
        )

    def _granted(self, epoch: int, takeover: bool, expires_ms: int, renewed: bool = False) -> LeaseGrant:
        if not renewed:
            self.grant_serial += 1
        self.grant = LeaseGrant(self.topic, self.partition, self.owner, epoch, takeover)
        self._held_until_ms = expires_ms
        self._attempt = None
        return self.grant

    def renew(self) -> None:
        """Push the expiry forward; ``FencedError`` if the lease was lost."""
        grant = self._require_grant()
        with zk_errors(f"renewing write lease of {self.topic}-{self.partition}"):
            for _ in range(10):
                record, version = self._read()
                if record is None or record.owner != self.owner or record.epoch != grant.epoch or record.released:
                    raise FencedError(self._lost_message(record))
                new = WriterLeaseRecord(
                    self.owner, grant.epoch, clock.now_ms() + self.lease_ms, False, record.next_offset
                )
                try:
                    self._set(new, version)
                    self._held_until_ms = new.expires_ms
                    return
                except BadVersionError:
                    continue
        raise FencedError(f"Write lease of {self.topic}-{self.partition} kept changing under owner {self.owner}")

    def release(self, drop_reservations: bool = False) -> None:
        """Mark the lease released if still ours (a lost lease needs no release).

        ``drop_reservations`` also removes what the owner's Spark tasks recorded under the
        lease (:mod:`sparklog.metadata.task_order`).
        """
        grant = self.grant
        if grant is None:
            return
        self.grant = None
        try:
            with zk_errors(f"releasing write lease of {self.topic}-{self.partition}"):
                for _ in range(10):
                    record, version = self._read()
                    if record is None or record.owner != self.owner or record.epoch != grant.epoch:
                        return
                    new = WriterLeaseRecord(self.owner, grant.epoch, record.expires_ms, True, -1)
                    try:
                        self._set(new, version)
                        if drop_reservations:
                            self._drop_reservations()
                        return
                    except BadVersionError:
                        continue
        except ZooKeeperUnavailableError:
            self.grant = grant  # maybe still held: a retry, or our next acquire, settles it
            raise

    def _drop_reservations(self) -> None:
        try:
            self.zk.client.delete(f"{self.path}/{self.owner}", recursive=True)
        except (NoNodeError, NotEmptyError):
            pass  # a straggling task attempt added a node meanwhile: left for the owner's next release

    def _require_grant(self) -> LeaseGrant:
        if self.grant is None:
            raise FencedError(f"Write lease of {self.topic}-{self.partition} is not held by {self.owner}")
        return self.grant

    def _lost_message(self, record: WriterLeaseRecord | None) -> str:
        holder = "nobody" if record is None else f"{record.owner} (epoch {record.epoch})"
        epoch = self.grant.epoch if self.grant else "?"
        return (
            f"Write lease of partition {self.topic}-{self.partition} lost by {self.owner} (epoch {epoch}); "
            f"now held by {holder}. This writer is fenced."
        )
