"""A leader's view of its own replica table: appends without a delta-rs snapshot (DESIGN §14, §16).

A broker's committer appends to the same table round after round. Refreshing a delta-rs
snapshot before each round and committing through delta-rs are most of a round's time, so
the leader instead:

* knows the version it last saw, finds the newest by probing the next commit files
  (:meth:`~sparklog.log.table.TopicTable.newest_version`), and reads the app transactions of
  that version from ``_delta_log`` (:mod:`sparklog.log.txn_state`: one commit file per new
  version) — fence epochs, leader epochs and log ends are all app transactions;
* commits by the Delta protocol's rule (:mod:`sparklog.log.delta_commit`): the next commit
  file created if absent; when it is taken, the winner's commit is read (only it) and ours
  fails if it touched our app ids, else goes to the next version.

**Trusting its own record** (no request at all before a commit): after a commit of its own
lands, the leader knows the table's whole app-transaction map at that version (what it read,
the winners' commits it stepped over, and its own). A later round of partitions whose write
leases it held, under the same grants (:attr:`~sparklog.metadata.lease.WriterLease.grant_serial`),
when that record was made is built and committed on the record without asking the store: no
honest writer commits those partitions without taking their leases first, and a commit of
anyone else (other partitions' leaders, maintenance, a zombie) makes our create of the next
version fail, which reads the winner. Under new grants the record is used after one look
that its commit is still the table's (its stamp). A topic is deleted only after its leases
were taken from their holders (:func:`sparklog.runtime.topics.delete_topic`), so a
re-created table never meets a trusted record.

**Stepping over others' commits**: every commit between the version read and ours is read
(the Delta conflict rule needs each: one that touched our app ids fails our round). Refused
once, the leader tries right after the winner; refused again, it is behind and reads ahead,
a window doubling up to 16 commits read at once, so it catches up even while other leaders
of the topic commit faster than one read a time (measured: read one by one, a leader behind
others committing 40 times a second never caught up). A round that lost reads on to the
newest commit before it is built again, so it is built once more, not once per commit.

So the append protocol of :func:`sparklog.log.append.append` is unchanged (fences checked,
log end read, one commit whose app transactions make racing writers conflict); only where
it reads and how it commits differ. Whenever the map cannot be read from ``_delta_log``
(a log cleaned up under it, a re-created table), :meth:`LeaderLog.view`
returns None and the append takes a delta-rs snapshot as every other writer does.
One :class:`LeaderLog` per table, shared by a topic's builder and committer threads.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sparklog import clock
from sparklog.log.append import LogView
from sparklog.log.delta_commit import commit_actions, commit_name, put_commit
from sparklog.log.plans import SegmentLike
from sparklog.log.segment import SegmentFile
from sparklog.log.storage import MAX_PARALLEL_READS, read_all
from sparklog.log.table import CommitConflict, TopicTable
from sparklog.log.transactions import end_app_id, fence_app_id, leader_app_id, leader_fence_app_id
from sparklog.log.txn_state import app_transactions, commit_transactions, record_commit

__all__ = ["LeaderLog", "LeaseSerials", "StateView"]

LeaseSerials = Mapping[int, int]  # partition -> grant serial of the write lease held


@dataclass(frozen=True)
class _Record:
    """The table's whole app-transaction map at ``version``, known exactly (our commit there,
    or every commit up to it read); ``stamp``: which object that commit is, when known."""

    version: int
    state: Mapping[str, int]
    serials: LeaseSerials  # the lease grants under which nobody else writes those partitions
    stamp: tuple[object, ...] | None

    def covers(self, serials: LeaseSerials) -> bool:
        return bool(serials) and all(self.serials.get(p) == serial for p, serial in serials.items())


class StateView:
    def __init__(
        self, owner: LeaderLog, version: int, state: Mapping[str, int], serials: LeaseSerials | None = None
    ) -> None:
        self.owner, self.root, self.version, self.state, self.serials = owner, owner.root, version, state, serials

    def fence_epoch(self, partition: int) -> int:
        return self.state.get(fence_app_id(partition), 0)

    def fenced_leader_epoch(self, partition: int) -> int:
        return max(self.state.get(leader_app_id(partition), 0), self.state.get(leader_fence_app_id(partition), 0))

    def log_end(self, partition: int) -> int:
        return self.state.get(end_app_id(partition), 0)

    def commit(
        self,
        segments: list[SegmentFile],
        transactions: dict[str, int],
        metadata: dict[str, str],
        fsync: bool,
        removes: Sequence[SegmentLike] = (),
    ) -> None:
        data = commit_actions(segments, transactions, metadata, self.version, clock.now_ms(), removes)
        version = self.version + 1
        ours = set(transactions)
        state = dict(self.state)
        refused = 0
        while (stamp := put_commit(self.owner.storage, version, data, fsync)) is None:
            refused += 1
            # One winner is the common case (another leader of the topic): create right after
            # it. Refused again, this leader is behind: read ahead to the newest commit first.
            after = self._step_over(version, data, ours, state, read_ahead=refused > 1)
            if after is None:
                stamp = ()  # the version holds our own commit: a create retried after it landed
                break
            version = after
        state.update(transactions)
        self.owner.committed(version, stamp, state, self.serials, base=self.version)

    def _step_over(
        self, version: int, mine: bytes, ours: set[str], state: dict[str, int], read_ahead: bool
    ) -> int | None:
        """Others' commits from ``version`` (taken) on join ``state``: the next version to try
        (None: ``version`` holds ``mine``, our own commit).
        A commit that touched one of our app ids invalidates what we read: then every commit
        up to the newest is read (the round is built again on the newest map) and
        ``CommitConflict`` raised. Reading ahead, the window doubles (1, 2, 4, … 16 at once),
        so a leader behind catches up with others committing faster than one read a time."""
        first, window, clash = version, 1, set[str]()
        while True:
            names = [commit_name(v) for v in range(version, version + window)]
            for data in read_all(self.owner.storage, names):
                if data is None:
                    if version == first:  # taken, yet gone: cleaned up under us; read the log again
                        self.owner.distrust(version - 1)
                        raise CommitConflict(f"commit {version} of {self.root} vanished after it was taken")
                    if clash:
                        self.owner.caught_up(version - 1, state)
                        raise CommitConflict(f"a commit of {self.root} up to {version - 1} touched {sorted(clash)}")
                    return version
                if version == first and data == mine:
                    return None
                theirs = commit_transactions(data)
                clash |= ours & set(theirs)
                state.update(theirs)
                version += 1
            if not (read_ahead or clash):
                return version
            window = min(2 * window, MAX_PARALLEL_READS)


class LeaderLog:
    """Reads and commits of one leader table without delta-rs snapshots; see the module doc."""

    def __init__(self, table: TopicTable) -> None:
        self.table = table
        self.root = table.root
        self.storage = table.storage
        self.known_version: int | None = None
        self._known_stamp: tuple[object, ...] | None = None  # TopicTable.commit_stamp of known_version
        self._table_id: str | None = None
        self._record: _Record | None = None
        # Every commit after _own_since up to _last_own is ours (None: not known).
        self._own_since: int | None = None
        self._last_own: int | None = None
        self._lock = threading.Lock()  # the builder and the committer probe through one log

    def view(self, serials: LeaseSerials | None = None) -> LogView | None:
        """The log as of its newest commit, or None (then take a snapshot). ``serials``: the
        write leases held for the partitions to be appended (see the module doc)."""
        return self.state_view(serials)

    def state_view(self, serials: LeaseSerials | None = None) -> StateView | None:
        """:meth:`view` with its version and whole app-transaction map exposed. With
        ``serials``: the map recorded, unasked under the same lease grants; under new ones
        after one look that its commit is still the table's (a re-created table's is not);
        what others committed since, the commit steps over."""
        record = self._record
        if serials is not None and record is not None:
            if record.covers(serials):
                return StateView(self, record.version, record.state, serials)
            if record.stamp is not None and self.table.commit_stamp(record.version) == record.stamp:
                return StateView(self, record.version, record.state, serials)
        with self._lock:
            return self._probed_view(serials)

    def recorded_log_end(self, partition: int, serial: int) -> int | None:
        """``partition``'s log end as this leader's record has it, if the record was made
        under the lease grant ``serial`` (so nobody else appended since); else None."""
        record = self._record
        if record is None or record.serials.get(partition) != serial:
            return None
        return record.state.get(end_app_id(partition), 0)

    def _probed_view(self, serials: LeaseSerials | None) -> StateView | None:
        newest = None
        if self.known_version is not None:
            newest = self.table.newest_version(self.known_version, self._known_stamp)
        if newest is None or self._table_id is None:
            dt = self.table.snapshot()
            newest, self._table_id = dt.version(), str(dt.metadata().id)
        state = app_transactions(self.storage, self._table_id, newest)
        if state is None:
            self.known_version = None
            return None
        # Nothing new since the version known: its stamp was just checked, not asked again.
        self._saw(newest, self._known_stamp if newest == self.known_version else None)
        return StateView(self, newest, state, serials)

    def _saw(self, version: int, stamp: tuple[object, ...] | None) -> None:
        """``version`` is the newest commit known (which file it is, too: a table re-created
        up to the same version is told apart); ``stamp``: its stamp when known (else asked)."""
        self.known_version = version
        self._known_stamp = stamp if stamp is not None else self.table.commit_stamp(version)

    def own_commits(self) -> tuple[int, int] | None:
        """``(since, last)``: every commit after ``since`` up to ``last``, the newest this
        leader knows of, is its own; None when not known. Nothing is asked of the store."""
        with self._lock:
            own_since, last_own = self._own_since, self._last_own
            if own_since is None or last_own is None or self.known_version != last_own:
                return None
            return own_since, last_own

    def only_own_commits_since(self, version: int, look: bool = True) -> bool:
        """Whether every commit of the table after ``version`` is one of this leader's (its
        appends: they never move a log-start), asked with one look for the commit after its
        last; ``look`` False: as far as the leader knows, nothing asked. False when not known."""
        own = self.own_commits()
        if own is None or version < own[0]:
            return False
        return not look or not self.storage.exists(commit_name(own[1] + 1))

    def distrust(self, version: int) -> None:
        """What we recorded is in doubt from commit ``version`` on: probe from it next time."""
        with self._lock:
            self._own_since = None
            self._record = None
            self.known_version, self._known_stamp = version, None

    def caught_up(self, version: int, state: Mapping[str, int]) -> None:
        """Every commit up to ``version`` was read into ``state`` (a round that lost to one of
        them is built again on it)."""
        with self._lock:
            self._own_since = None
            held = self._record.serials if self._record is not None else {}
            self._record = _Record(version, state, held, None)
            self.known_version, self._known_stamp = version, None
            if self._table_id is not None:
                record_commit(self.storage, self._table_id, version, state)

    def committed(
        self,
        version: int,
        stamp: tuple[object, ...],
        state: Mapping[str, int],
        serials: LeaseSerials | None,
        base: int,
    ) -> None:
        """Our commit landed as ``version`` and ``state`` is the table's whole app-transaction
        map there (recorded, not read back); ``serials``: the leases it was made under;
        ``base``: the version the round was built on."""
        with self._lock:
            if self._own_since is None or base != self._last_own or version != base + 1:
                self._own_since = version - 1  # others' commits up to it were read, or may be
            self._last_own = version
            self.known_version, self._known_stamp = version, stamp
            held = self._record.serials if self._record is not None else {}
            self._record = _Record(version, state, {**held, **serials}, stamp) if serials else None
            if self._table_id is not None:
                record_commit(self.storage, self._table_id, version, state)
