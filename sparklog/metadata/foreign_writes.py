"""Foreign writes: how a broker learns that another writer appended to a partition it leads.

Every append is made under the partition's write lease (:mod:`sparklog.metadata.lease`),
and every writer that does not keep its lease — a Spark job, the light producer, a
maintenance run — releases it once its commit has returned. So a broker watching the lease
znode sees each append by another writer as a change of that znode while someone other
than itself holds, takes or releases it: no writer writes anything more for it, and it is
the same path for every kind of writer. The broker's own appends are announced in process.

States of one followed partition: *not followed* → (:meth:`ForeignWrites.follow`)
*followed*, for the life of the session (a deleted topic's znode reappears with the topic).

Invariants:

* a partition is followed once, whatever the number of calls to :meth:`ForeignWrites.follow`;
  the watch is in place when the first call returns, so a commit made after that call
  returned is always announced: a reader that follows before it reads misses none;
* a change of the lease znode from or to a holder other than ``owner`` (taken, renewed,
  released, taken over, deleted) calls ``on_write`` of that partition — possibly
  spuriously (the holder may not have appended): the caller re-reads; a change between two
  of ``owner``'s own records calls nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from kazoo.recipe.watchers import DataWatch

from sparklog.errors import SparklogError
from sparklog.metadata import zkdata
from sparklog.metadata.session import ZkSession, zk_errors
from sparklog.metadata.zkdata import WriterLeaseRecord

__all__ = ["ForeignWrites"]


class ForeignWrites:
    """The write-lease watches of one broker (lease owner ``owner``). Thread-safe;
    ``on_write`` runs on ZooKeeper's event thread, so it only hands work on."""

    def __init__(self, zk: ZkSession, owner: str) -> None:
        self._zk = zk
        self._owner = owner
        self._lock = threading.Lock()
        self._followed: set[tuple[str, int]] = set()

    def follow(self, topic: str, partition: int, on_write: Callable[[], None]) -> None:
        """Call ``on_write`` after each write to ``topic``-``partition`` by another writer."""
        key = (topic, partition)
        # Held while the watch is set up: a second caller must not read before it is in place.
        with self._lock:
            if key not in self._followed:
                self._watch(topic, partition, on_write)
                self._followed.add(key)

    def _watch(self, topic: str, partition: int, on_write: Callable[[], None]) -> None:
        path = zkdata.writer_path(topic, partition)
        previous: str | None = None  # the holder at the last event (None: no record)
        first = True

        def on_change(data: bytes | None, _stat: object) -> None:
            nonlocal previous, first
            holder = None if data is None else _owner(data, path)
            was, previous = previous, holder
            if first:  # the lease as following began: the caller reads after this
                first = False
            elif was != self._owner or holder != self._owner:
                on_write()

        with zk_errors(f"watching the write lease of {topic}-{partition}"):
            DataWatch(self._zk.client, path, on_change)  # calls on_change once before returning


def _owner(data: bytes, path: str) -> str:
    try:
        return WriterLeaseRecord.decode(data, path).owner
    except (SparklogError, KeyError, TypeError, ValueError):
        return ""  # unreadable: somebody else's, so it may have written
