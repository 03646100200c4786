"""A stage: one daemon thread running the calls handed to it, in the order handed.

Used where work must leave a request's thread and keep its order: the commit rounds'
committer and ISR waiter per topic (:mod:`sparklog.broker.leader_appender`), the log-start
refreshes of the partitions a broker leads (:mod:`sparklog.broker.partition`) and the loads of
their transaction state (:mod:`sparklog.broker.transactions.partition_txns`). A call that
raises is logged and the stage goes on with the next.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

__all__ = ["Stage"]

log = logging.getLogger(__name__)


class Stage:
    """One daemon thread running the calls handed to it, in order, until :meth:`stop`."""

    def __init__(self, name: str) -> None:
        self._calls: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        threading.Thread(target=self._run, name=name, daemon=True).start()

    def submit(self, call: Callable[[], None]) -> None:
        self._calls.put(call)

    def stop(self) -> None:
        """The calls handed in before run; then the thread ends."""
        self._calls.put(None)

    def _run(self) -> None:
        while (call := self._calls.get()) is not None:
            try:
                call()
            except Exception:
                log.exception("stage %s failed", threading.current_thread().name)
