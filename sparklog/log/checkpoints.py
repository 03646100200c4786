"""Delta log checkpoints written behind the commits (DESIGN §16).

Every ``checkpoint_interval`` versions the writer that made the commit has delta-rs write a
checkpoint, as delta-rs's own commits would (``delta.checkpointInterval``): 100 versions on a
disk, 20 on a store, where a process's first read fetches every commit since the last
checkpoint, a round trip each, and a checkpoint costs about the same per commit whatever
the interval (delta-rs reads the commits since the last one again).

Invariants:

* at most one checkpoint per table is being written by a process at a time (overlapping
  ones on a fast table and a slow store multiply the reads); a skipped one is made good by
  the next;
* a checkpoint never holds up a commit: it runs on a thread of its own, and in a process
  that serves latency (a broker, :func:`checkpoint_in_a_child_process`) in a child process,
  since delta-rs holds the GIL while it waits for the store (measured: a broker's produce
  acknowledgements stalled for the length of each checkpoint);
* a checkpoint that fails only makes reads slower; maintenance writes the next.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import threading
import time
from concurrent.futures import ProcessPoolExecutor

from deltalake import DeltaTable

from sparklog.log.storage import TableStorage

__all__ = [
    "CHECKPOINT_INTERVAL",
    "STORE_CHECKPOINT_INTERVAL",
    "checkpoint_if_due",
    "checkpoint_in_a_child_process",
    "checkpoint_interval",
]

log = logging.getLogger(__name__)

CHECKPOINT_INTERVAL = 100  # the tables' delta.checkpointInterval on a disk
STORE_CHECKPOINT_INTERVAL = 20  # ... and on a store

_writing: set[str] = set()  # roots of tables with a checkpoint being written
_lock = threading.Lock()
_child: ProcessPoolExecutor | None = None


def checkpoint_interval(storage: TableStorage) -> int:
    """``delta.checkpointInterval`` of a table on ``storage``."""
    return STORE_CHECKPOINT_INTERVAL if storage.is_object_store else CHECKPOINT_INTERVAL


def checkpoint_in_a_child_process() -> None:
    """From now on, this process writes its checkpoints in one child process (started by
    spawn: deltalake panics in a forked child)."""
    global _child
    with _lock:
        if _child is None:
            spawn = multiprocessing.get_context("spawn")
            _child = ProcessPoolExecutor(1, mp_context=spawn, initializer=_exit_with, initargs=(os.getpid(),))


def _exit_with(parent_pid: int) -> None:
    """In the child: exit once the parent is gone (killed -9, it never says so)."""

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(1)
        os._exit(0)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def checkpoint_if_due(storage: TableStorage, version: int) -> None:
    """Start writing a checkpoint at ``version`` when one is due there and none of this
    table is being written."""
    if version % checkpoint_interval(storage) != 0:
        return
    with _lock:
        if storage.root in _writing:
            return
        _writing.add(storage.root)
    threading.Thread(target=_write, args=(storage, version), name="delta-checkpoint", daemon=True).start()


def _write(storage: TableStorage, version: int) -> None:
    options = storage.delta_options or None
    try:
        if _child is not None:
            _child.submit(write_checkpoint, storage.root, options, version).result()
        else:
            write_checkpoint(storage.root, options, version)
    except Exception as exc:  # noqa: BLE001 - a missed checkpoint only makes reads slower
        log.warning("checkpoint of %s at version %d failed: %s", storage.root, version, exc)
    finally:
        with _lock:
            _writing.discard(storage.root)


def write_checkpoint(root: str, storage_options: dict[str, str] | None, version: int) -> None:
    """delta-rs's checkpoint of the table at ``root`` as of ``version`` (run in the child)."""
    DeltaTable(root, version=version, storage_options=storage_options).create_checkpoint()
