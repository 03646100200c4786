"""A watched cache of partition states (leader, leader epoch, ISR, epoch history).

Recipe: the first request for a partition reads its state znode and leaves a kazoo
``DataWatch`` on it; every change the controller makes replaces the cached state, so a
client polling leaders and high watermarks costs no ZooKeeper round trip. States of a
partition: *unwatched* → *watched* (cached, kept current) → *gone* (znode deleted: the
entry is dropped and the watch ends; a later request starts over, e.g. after the topic was
re-created).

Staleness is bounded by ZooKeeper's notification delay. That is safe for the callers:
writers are fenced by the leader epoch in the Delta log (a stale leader is refused at
commit), and readers clamp to a high watermark computed over the (possibly stale) ISR, whose
every member held those records.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from kazoo.recipe.watchers import DataWatch

from sparklog.errors import TopicNotFoundError
from sparklog.metadata import zkdata
from sparklog.metadata.session import ZkSession, zk_errors
from sparklog.metadata.zkdata import PartitionState

__all__ = ["PartitionStateCache"]


class PartitionStateCache:
    """Partition states of any topic, kept current by watches. Thread-safe."""

    def __init__(self, zk: ZkSession) -> None:
        self._zk = zk
        self._lock = threading.Lock()
        self._states: dict[tuple[str, int], PartitionState | None] = {}

    def states(self, topic: str, partitions: Iterable[int]) -> dict[int, PartitionState]:
        """The current state of each partition; ``TopicNotFoundError`` when one has none."""
        result: dict[int, PartitionState] = {}
        for partition in partitions:
            key = (topic, int(partition))
            with self._lock:
                known = key in self._states
                state = self._states.get(key)
            if not known:
                state = self._watch(topic, int(partition))
            if state is None:
                raise TopicNotFoundError(f"Topic '{topic}' partition {partition} has no state in ZooKeeper")
            result[int(partition)] = state
        return result

    def forget(self, topic: str) -> None:
        """Drop cached states of ``topic`` (deleted topics; their watches end on their own)."""
        with self._lock:
            for key in [k for k in self._states if k[0] == topic]:
                del self._states[key]

    def _watch(self, topic: str, partition: int) -> PartitionState | None:
        path = zkdata.partition_state_path(topic, partition)
        key = (topic, partition)

        def on_change(data: bytes | None, _stat: object) -> bool | None:
            if data is None:  # no such znode (yet, or any more)
                with self._lock:
                    self._states.pop(key, None)
                return False  # stop watching: a later request re-reads
            state = PartitionState.decode(data, path)
            with self._lock:
                self._states[key] = state
            return None

        with zk_errors(f"watching the state of {topic}-{partition}"):
            DataWatch(self._zk.client, path, on_change)  # calls on_change once before returning
        with self._lock:
            return self._states.get(key)
