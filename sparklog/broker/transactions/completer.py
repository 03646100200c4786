"""The coordinator's completers: decided transactions completed off the request path (the
role of Kafka's TransactionMarkerChannelManager; docs/transactions.md).

EndTxn is answered once the PrepareCommit/PrepareAbort decision is stored in ZooKeeper; the
transactional id is then handed to a :class:`TransactionCompleter`, whose few long-lived
threads write the markers and move the transaction to Complete*. Meanwhile every request of
that id but a retried EndTxn is answered CONCURRENT_TRANSACTIONS, which clients retry.

Invariants:

* at most one thread completes a given transactional id at a time (its markers are never
  written twice at once); an id handed over while it is being completed is completed again
  right after, so a transaction decided in the meantime is never left to the sweep;
* a completion that fails (a leader unreachable, a timeout) is not retried here: the
  coordinator's sweep hands Prepare* ids over again every second;
* no request handler thread ever waits for a marker.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

from sparklog import clock

__all__ = ["COMPLETER_THREADS", "TransactionCompleter"]

log = logging.getLogger(__name__)

# A few, not one: each completion waits for its leaders' commit rounds, and markers of
# different transactions that are written at the same time share those rounds.
COMPLETER_THREADS = 4
_IDLE_CHECK_S = 0.2  # how soon an idle thread notices the broker stopping


class TransactionCompleter:
    """Completes handed-over transactional ids with ``complete(id) -> bool`` (False: some
    marker is not written yet). Thread-safe."""

    def __init__(self, complete: Callable[[str], bool], threads: int = COMPLETER_THREADS) -> None:
        self._complete = complete
        self._threads = threads
        self._queue: queue.SimpleQueue[str] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._waiting: set[str] = set()  # handed over, not yet taken by a thread
        self._running: set[str] = set()  # being completed by a thread
        self._workers: list[threading.Thread] = []

    def submit(self, transactional_id: str) -> None:
        """Complete ``transactional_id`` soon (a no-op if it is already waiting)."""
        with self._lock:
            if transactional_id in self._waiting:
                return
            self._waiting.add(transactional_id)
            if transactional_id in self._running:
                return  # its thread queues it again when done
        self._queue.put(transactional_id)

    def start(self, stop: threading.Event, name: str = "txn-complete") -> None:
        """Start the threads; they end once ``stop`` is set (after the completion in hand)."""
        self._workers = [
            threading.Thread(target=self._work, args=(stop,), name=f"{name}-{i}", daemon=True)
            for i in range(self._threads)
        ]
        for worker in self._workers:
            worker.start()

    def join(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` in all for the threads (after ``stop``)."""
        deadline = clock.monotonic_s() + timeout_s
        for worker in self._workers:
            worker.join(max(0.0, deadline - clock.monotonic_s()))

    def _work(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                transactional_id = self._queue.get(timeout=_IDLE_CHECK_S)
            except queue.Empty:
                continue
            with self._lock:
                self._waiting.discard(transactional_id)
                self._running.add(transactional_id)
            try:
                self._complete(transactional_id)  # False (not every marker written): the sweep retries
            except Exception as exc:  # noqa: BLE001 - ZooKeeper or storage trouble: the sweep retries
                log.info("completing transaction %r failed: %s", transactional_id, exc)
            finally:
                with self._lock:
                    self._running.discard(transactional_id)
                    again = transactional_id in self._waiting
                if again:
                    self._queue.put(transactional_id)
