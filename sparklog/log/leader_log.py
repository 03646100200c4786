"""A leader's view of its own replica table: appends without a delta-rs snapshot (DESIGN §14).

A broker's committer appends to the same table round after round. Refreshing a delta-rs
snapshot before each round and committing through delta-rs are most of a round's time, so
the leader instead:

* knows the version it last saw, finds the newest by probing the next commit files
  (:meth:`~sparklog.log.table.TopicTable.newest_version`), and reads the app transactions of
  that version from ``_delta_log`` (:mod:`sparklog.log.txn_state`: one commit file per new
  version) — fence epochs, leader epochs and log ends are all app transactions;
* commits by the Delta protocol's rule (:mod:`sparklog.log.delta_commit`): the next commit
  file created if absent, failing on a commit that touched its app ids.

So the append protocol of :func:`sparklog.log.append.append` is unchanged (fences checked,
log end read, one commit whose app transactions make racing writers conflict); only where
it reads and how it commits differ. Whenever the map cannot be read from ``_delta_log``
(a log cleaned up under it, a re-created table), :meth:`view`
returns None and the append takes a delta-rs snapshot as every other writer does.
One :class:`LeaderLog` per table and thread (the topic's committer).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sparklog import clock
from sparklog.log.append import LogView
from sparklog.log.delta_commit import commit_actions, put_commit, touched_app_ids
from sparklog.log.plans import SegmentLike
from sparklog.log.segment import SegmentFile
from sparklog.log.table import CommitConflict, TopicTable
from sparklog.log.transactions import end_app_id, fence_app_id, leader_app_id, leader_fence_app_id
from sparklog.log.txn_state import app_transactions, record_commit

__all__ = ["LeaderLog", "StateView"]


class StateView:
    def __init__(self, owner: LeaderLog, root: str, version: int, state: Mapping[str, int]) -> None:
        self.owner, self.root, self.version, self.state = owner, root, version, state

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
        storage = self.owner.storage
        while (stamp := put_commit(storage, version, data, fsync)) is None:
            # Taken: a commit that touched one of our app ids invalidates what we read.
            clash = touched_app_ids(storage, version) & ours
            if clash:
                self.owner.saw(version)
                raise CommitConflict(f"commit {version} of {self.root} touched {sorted(clash)} first")
            version += 1
        if version == self.version + 1:
            # Nobody committed in between: the map as of our commit is ours on top of what we read.
            self.owner.committed(version, stamp, {**self.state, **transactions})
        else:
            self.owner.saw(version, stamp)


class LeaderLog:
    """Reads and commits of one leader table without delta-rs snapshots; see the module doc."""

    def __init__(self, table: TopicTable) -> None:
        self.table = table
        self.root = table.root
        self.storage = table.storage
        self.known_version: int | None = None
        self._known_stamp: tuple[object, ...] | None = None  # TopicTable.commit_stamp of known_version
        self._table_id: str | None = None

    def view(self) -> LogView | None:
        """The log as of its newest commit, or None (then take a snapshot)."""
        return self.state_view()

    def state_view(self) -> StateView | None:
        """:meth:`view` with its version and whole app-transaction map exposed."""
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
        self.saw(newest, self._known_stamp if newest == self.known_version else None)
        return StateView(self, self.root, newest, state)

    def saw(self, version: int, stamp: tuple[object, ...] | None = None) -> None:
        """``version`` is the newest commit known (which file it is, too: a table re-created
        up to the same version is told apart); ``stamp``: its stamp when known (else asked)."""
        self.known_version = version
        self._known_stamp = stamp if stamp is not None else self.table.commit_stamp(version)

    def committed(self, version: int, stamp: tuple[object, ...], state: Mapping[str, int]) -> None:
        """This leader's own commit landed as ``version`` right after the version it read:
        ``state`` is the table's whole app-transaction map now (recorded, not read back)."""
        self.saw(version, stamp)
        if self._table_id is not None:
            record_commit(self.storage, self._table_id, version, state)
