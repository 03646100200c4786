"""The in-memory tail of a led partition: the record batches this broker appended last, as
the producers sent them (DESIGN §14).

A consumer at the end of the log is served from here without re-listing the Delta log or
reading a segment. Invariants:

* the tail is one contiguous run of offsets ``[start, end)``, each batch exactly the records
  the commit stored at those offsets (the client's bytes with the base offset and partition
  leader epoch written in: both lie outside the batch CRC, as in Kafka's log);
* a round that does not continue the tail (another writer — a Spark job, a light producer —
  appended in between) starts it anew, so the tail never holds a gap or someone else's
  offsets; LogAppendTime topics are not tailed (their batches would need re-encoding);
* it holds at most ``max_bytes`` per partition (oldest batches dropped) and is dropped when
  the partition's leader epoch changes;
* a commit of this leader is visible in the table before its batches are here; while they
  are on their way (:meth:`LogTails.publishing`) a reader at the tail's end waits for them;
* it knows nothing of the high watermark; readers check it and log-start (Fetch does),
  log-start against :meth:`LogTails.log_start_hint`, the value last read from the table
  (refreshed in the background once it is older than ``LOG_START_HINT_MS``, the older value
  used meanwhile; DeleteRecords answered by this broker notes the new one at once).
"""

from __future__ import annotations

import contextlib
import struct
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

__all__ = ["LogTails", "TailBatch"]

DEFAULT_MAX_BYTES = 8 << 20
LOG_START_HINT_MS = 1_000
LOG_START_HINT_MAX_MS = 30_000  # older than this (refreshes failing), the table is read


@dataclass(frozen=True)
class TailBatch:
    base_offset: int
    count: int
    data: bytes

    @property
    def end(self) -> int:
        return self.base_offset + self.count


@dataclass
class _Tail:
    leader_epoch: int
    batches: deque[TailBatch] = field(default_factory=deque)
    size_bytes: int = 0

    @property
    def end(self) -> int:
        return self.batches[-1].end if self.batches else -1


class LogTails:
    """The tails of every partition a broker leads. Thread-safe."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._tails: dict[tuple[str, int], _Tail] = {}
        # (log-start, when noted, the table version it was read at, None: not known)
        self._log_starts: dict[tuple[str, int], tuple[int, float, int | None]] = {}
        self._publishing: dict[tuple[str, int], int] = {}

    @contextlib.contextmanager
    def publishing(self, topic: str, partitions: Iterable[int]) -> Iterator[None]:
        """Around a commit of this leader and the appends of its batches to the tails: its
        records are visible in the table (the high watermark may count them) before they
        are here, and a reader at the tail's end then waits for them instead of reading the
        table (:meth:`is_publishing`)."""
        keys = [(topic, p) for p in set(partitions)]
        with self._lock:
            for key in keys:
                self._publishing[key] = self._publishing.get(key, 0) + 1
        try:
            yield
        finally:
            with self._lock:
                for key in keys:
                    left = self._publishing[key] - 1
                    if left:
                        self._publishing[key] = left
                    else:
                        del self._publishing[key]

    def is_publishing(self, topic: str, partition: int) -> bool:
        with self._lock:
            return (topic, partition) in self._publishing

    def log_start_hint(self, topic: str, partition: int) -> tuple[int, bool] | None:
        """The log-start last noted for ``partition`` and whether it is younger than
        ``LOG_START_HINT_MS``; None when unknown."""
        noted = self._noted(topic, partition)
        if noted is None:
            return None
        age_s = time.monotonic() - noted[1]
        if age_s > LOG_START_HINT_MAX_MS / 1000:
            return None  # every background refresh since has failed
        return noted[0], age_s <= LOG_START_HINT_MS / 1000

    def noted_log_start(self, topic: str, partition: int) -> int | None:
        """The log-start last noted for ``partition``, however old; None when unknown."""
        noted = self._noted(topic, partition)
        return None if noted is None else noted[0]

    def noted_log_start_at(self, topic: str, partition: int) -> tuple[int, int] | None:
        """The log-start last noted for ``partition`` and the table version it was read at;
        None when unknown, or read at no known version."""
        noted = self._noted(topic, partition)
        return None if noted is None or noted[2] is None else (noted[0], noted[2])

    def _noted(self, topic: str, partition: int) -> tuple[int, float, int | None] | None:
        """(log-start, when noted, version read at) of ``partition``."""
        with self._lock:
            return self._log_starts.get((topic, partition))

    def note_log_start(self, topic: str, partition: int, log_start: int, version: int | None = None) -> None:
        """``partition``'s log-start as of now, read at table ``version`` (None: not known)."""
        with self._lock:
            self._log_starts[(topic, partition)] = (log_start, time.monotonic(), version)

    def log_starts_held(self, topic: str, partitions: Iterable[int], own: tuple[int, int]) -> None:
        """The log-starts of ``partitions`` noted at a version after ``own[0]`` still hold at
        ``own[1]``, the leader's newest commit (only its appends came between, and appends
        never move a log-start): noted again as of now, so a producing partition's hint
        stays fresh without a look at the store."""
        since, version = own
        now = time.monotonic()
        with self._lock:
            for partition in partitions:
                noted = self._log_starts.get((topic, partition))
                if noted is not None and noted[2] is not None and since <= noted[2] <= version:
                    self._log_starts[(topic, partition)] = (noted[0], now, version)

    def append(self, topic: str, partition: int, leader_epoch: int, base_offset: int, count: int, wire: bytes) -> None:
        """Add a committed batch (``wire``: the producer's bytes) stored at ``base_offset``."""
        data = bytearray(wire)
        struct.pack_into(">q", data, 0, base_offset)
        struct.pack_into(">i", data, 12, leader_epoch)
        batch = TailBatch(base_offset, count, bytes(data))
        with self._lock:
            tail = self._tails.get((topic, partition))
            if tail is None or tail.leader_epoch != leader_epoch or tail.end != base_offset:
                tail = self._tails[(topic, partition)] = _Tail(leader_epoch)
            tail.batches.append(batch)
            tail.size_bytes += len(batch.data)
            while tail.size_bytes > self.max_bytes and len(tail.batches) > 1:
                tail.size_bytes -= len(tail.batches.popleft().data)

    def log_end(self, topic: str, partition: int, leader_epoch: int) -> int:
        """The end of what this leader appended to ``partition`` in ``leader_epoch``, -1
        when the tail does not know it."""
        with self._lock:
            tail = self._tails.get((topic, partition))
            return tail.end if tail is not None and tail.leader_epoch == leader_epoch else -1

    def drop(self, topic: str, partition: int) -> None:
        """Forget ``partition``'s tail (a round that cannot be tailed, a lost leadership)."""
        with self._lock:
            self._tails.pop((topic, partition), None)

    def read(
        self, topic: str, partition: int, leader_epoch: int, offset: int, below: int, max_bytes: int
    ) -> list[TailBatch] | None:
        """The batches from the one holding ``offset`` on, ending at or below ``below`` (the
        high watermark), within ``max_bytes`` but at least one; None when the tail does not
        hold ``offset`` (the caller reads the table)."""
        with self._lock:
            tail = self._tails.get((topic, partition))
            if tail is None or tail.leader_epoch != leader_epoch or not tail.batches:
                return None
            if not tail.batches[0].base_offset <= offset < tail.end:
                return None
            batches = list(tail.batches)
        chosen: list[TailBatch] = []
        size = 0
        for batch in batches:
            if batch.end <= offset:
                continue
            if batch.end > below or (chosen and size + len(batch.data) > max_bytes):
                break
            chosen.append(batch)
            size += len(batch.data)
        return chosen
