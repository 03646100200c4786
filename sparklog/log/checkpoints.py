"""Delta log checkpoints written behind the commits (DESIGN §16).

Every ``checkpoint_interval`` versions the writer that made the commit has delta-rs write a
checkpoint, as delta-rs's own commits would (``delta.checkpointInterval``): 100 versions on a
disk, 20 on a store, where a process's first read fetches every commit since the last
checkpoint, a round trip each.

On a store, delta-rs's own checkpoint reads every commit since the last checkpoint twice or
more (measured: ~80 GETs for 20 commits, on the store the produce path waits on). So the
checkpoint is made on a local copy of the table's log instead (:class:`_LogMirror`): the
copy keeps the last checkpoint it made, fetches each newer commit once by its name (no
LIST), delta-rs checkpoints the copy on the local disk, and the checkpoint and
``_last_checkpoint`` are uploaded (two PUTs). The add actions name files relative to the
table, so the checkpoint is the table's. The copy is used only while the store's
``_last_checkpoint`` is still the one it uploaded (a HEAD): a table deleted and created again
under the root starts its versions over, and an old copy would make its checkpoint from the
old table's commits.

Invariants:

* at most one checkpoint per table is being written by a process at a time (overlapping
  ones on a fast table and a slow store multiply the reads); a skipped one is made good by
  the next;
* a checkpoint never holds up a commit: it runs on a thread of its own, and in a process
  that serves latency (a broker, :func:`checkpoint_in_a_child_process`) in a child process,
  since delta-rs holds the GIL while it waits for the store (measured: a broker's produce
  acknowledgements stalled for the length of each checkpoint);
* the checkpoint file is uploaded before ``_last_checkpoint`` names it, as delta-rs orders
  them: a reader never follows ``_last_checkpoint`` to a missing file;
* a checkpoint that fails only makes reads slower; maintenance writes the next.
"""

from __future__ import annotations

import atexit
import json
import logging
import multiprocessing
import os
import shutil
import tempfile
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from deltalake import DeltaTable

from sparklog.errors import StorageError
from sparklog.log.storage import TableStorage, table_storage
from sparklog.model.storage_location import StorageSettings

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
_mirrors: dict[str, _LogMirror] = {}  # store tables' log mirrors, by root
_mirrors_root: Path | None = None
_LAST_CHECKPOINT = "_last_checkpoint"
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
        if _mirrors_root is not None:
            shutil.rmtree(_mirrors_root, ignore_errors=True)
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
    """delta-rs's checkpoint of the table at ``root`` as of ``version`` (run in the child);
    on a store, made on the table's log mirror."""
    storage = table_storage(root, StorageSettings.from_variables(storage_options or {}))
    if not storage.is_object_store:
        DeltaTable(root, version=version, storage_options=storage_options).create_checkpoint()
        return
    with _lock:
        mirror = _mirrors.get(root)
        if mirror is None:
            mirror = _mirrors[root] = _LogMirror(storage, _mirrors_dir() / f"{len(_mirrors)}")
    mirror.checkpoint(version)


class _LogMirror:
    """A local copy of a store table's ``_delta_log``: the newest checkpoint this process made
    (or read) and the commits after it. States: *empty* (nothing copied yet: the first
    checkpoint starts from the store's ``_last_checkpoint``, or from version 0), *based* on a
    checkpoint version. Not thread-safe: one checkpoint of a table at a time (module doc)."""

    def __init__(self, storage: TableStorage, directory: Path) -> None:
        self.storage = storage
        self.log = directory / "_delta_log"
        self.log.mkdir(parents=True, exist_ok=True)
        self.stamp: tuple[object, ...] | None = None  # of the _last_checkpoint this copy uploaded

    def checkpoint(self, version: int) -> None:
        base = self._base()
        for v in range(base + 1, version + 1):
            self._copy(f"{v:020}.json")
        DeltaTable(str(self.log.parent), version=version).create_checkpoint()
        last = json.loads((self.log / _LAST_CHECKPOINT).read_bytes())
        if int(last["version"]) != version:
            raise StorageError(
                f"checkpoint of {self.storage.root} at version {version} wrote version {last['version']}"
            )
        for name in _checkpoint_files(version, last):
            self.storage.write(f"_delta_log/{name}", (self.log / name).read_bytes(), durable=True)
        last_checkpoint = f"_delta_log/{_LAST_CHECKPOINT}"
        written = self.storage.write(last_checkpoint, (self.log / _LAST_CHECKPOINT).read_bytes(), durable=True)
        # The PUT answers the stamp: asking for it after the upload would cost a HEAD.
        self.stamp = written if written is not None else self.storage.stamp(last_checkpoint)
        self._remove_all_but({_LAST_CHECKPOINT, *_checkpoint_files(version, last)})

    def _base(self) -> int:
        """The checkpoint version the copy holds (-1: none, the commits from version 0)."""
        local = self.log / _LAST_CHECKPOINT
        if local.exists():
            if self.storage.stamp(f"_delta_log/{_LAST_CHECKPOINT}") == self.stamp:
                return int(json.loads(local.read_bytes())["version"])
            # Another checkpoint replaced ours, or the table was deleted and created again
            # (its versions start over): what the copy holds may not be this table's.
            self._remove_all_but(set())
        try:
            raw = self.storage.read(f"_delta_log/{_LAST_CHECKPOINT}")
        except FileNotFoundError:
            return -1
        last = json.loads(raw)
        version = int(last["version"])
        for name in _checkpoint_files(version, last):
            self._copy(name)
        local.write_bytes(raw)
        return version

    def _remove_all_but(self, keep: set[str]) -> None:
        for path in self.log.iterdir():
            if path.name not in keep:
                path.unlink()

    def _copy(self, name: str) -> None:
        path = self.log / name
        if not path.exists():
            data = self.storage.read(f"_delta_log/{name}")
            partial = path.with_name(f".{name}.partial")
            partial.write_bytes(data)
            partial.rename(path)


def _checkpoint_files(version: int, last: dict[str, object]) -> list[str]:
    """The files of the checkpoint ``_last_checkpoint`` (``last``) names (Delta's naming)."""
    parts = last.get("parts")
    if not parts:
        return [f"{version:020}.checkpoint.parquet"]
    count = int(str(parts))
    return [f"{version:020}.checkpoint.{i:010}.{count:010}.parquet" for i in range(1, count + 1)]


def _mirrors_dir() -> Path:
    """This process's directory of log mirrors, removed when it exits."""
    global _mirrors_root
    if _mirrors_root is None:
        _mirrors_root = Path(tempfile.mkdtemp(prefix="sparklog-checkpoints-"))
        atexit.register(shutil.rmtree, _mirrors_root, True)
    return _mirrors_root
