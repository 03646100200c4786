"""A table's objects, wherever its log dir is (DESIGN §16): :class:`TableStorage` and the
local-disk kind; the object-store kind is :mod:`sparklog.log.object_store`.

Every byte of a topic table that sparklog writes or reads itself (segments, direct commits,
the ``_delta_log`` reads of :mod:`sparklog.log.txn_state`, vacuum's listings) goes through a
table's storage; delta-rs opens the same root with :attr:`TableStorage.delta_options`.

Invariants:

* a table's objects are written whole or not at all: a reader never sees part of a segment
  or of a commit;
* :meth:`TableStorage.create` lands for exactly one of several writers creating one name
  (the Delta commit rule), on a disk (``link(2)``) and on a store (a conditional PUT);
* ``durable=True``: the object survives a crash of the machine once the call returns (on a
  disk fsynced with its directory; a store's acknowledged PUT is durable).
"""

from __future__ import annotations

import functools
import os
import shutil
import threading
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol, TypeVar
from urllib.parse import unquote, urlparse

import pyarrow as pa

from sparklog.log.object_store import ObjectTableStorage
from sparklog.model.storage_location import StorageSettings, parse_location

__all__ = [
    "LocalTableStorage",
    "ObjectTableStorage",
    "TableStorage",
    "fsync_path",
    "in_parallel",
    "read_all",
    "storage_of",
    "table_storage",
]

_FROM_ENVIRONMENT = StorageSettings()


class TableStorage(Protocol):
    """The objects of one table, by path relative to its root (``_delta_log/…``,
    ``partition=3/….parquet``): what the log writes and reads besides delta-rs."""

    @property
    def root(self) -> str:
        """What delta-rs opens: a local directory or the store URI."""

    @property
    def delta_options(self) -> dict[str, str]:
        """delta-rs's ``storage_options`` for :attr:`root` (empty on a local disk)."""

    @property
    def is_object_store(self) -> bool:
        """On a store (each request a billed round trip), not a local disk."""

    def local_path(self, relative: str) -> str | None:
        """The file's path on a local disk; None on a store."""

    def prove(self) -> None:
        """Refuse (``StorageError``) a store that would lose commits, before anything commits
        to it (:func:`~sparklog.log.object_store.prove_conditional_create`; once per process)."""

    def create(self, relative: str, data: bytes, durable: bool) -> tuple[object, ...] | None:
        """Create ``relative`` with ``data`` unless it exists (None then), atomically; the
        new object's :meth:`stamp` (so its creator need not ask for it)."""

    def write(self, relative: str, data: bytes | pa.Buffer, durable: bool) -> tuple[object, ...] | None:
        """Write ``relative`` whole (a name nobody else writes: a segment's is new each time);
        the written object's :meth:`stamp` when the write answers it (a store's PUT does), else
        None (ask :meth:`stamp`)."""

    def read(self, relative: str) -> bytes:
        """The whole object (``FileNotFoundError`` when there is none)."""

    def source(self, relative: str) -> str | pa.NativeFile:
        """What pyarrow reads the object from: a path on a disk, the bytes of a store's object."""

    def exists(self, relative: str) -> bool: ...

    def stamp(self, relative: str) -> tuple[object, ...] | None:
        """Which object ``relative`` is (None: there is none): an object deleted and written
        again under the same name (a topic re-created up to the same commit version) has
        another stamp."""

    def listing(self, prefix: str = "") -> dict[str, tuple[int, int]]:
        """Every object under ``prefix`` (relative, ``/``-separated): (modified ms, size)."""

    def delete(self, relative: str) -> bool:
        """Delete one object; one already gone is fine. False: it was gone (a store may not
        tell, and answers True)."""

    def delete_all(self) -> None:
        """Delete the table's every object (a deleted topic); what is already gone is fine."""


@dataclass(frozen=True)
class LocalTableStorage:
    """A table in a local directory: a commit is written under a temporary name and linked to
    its final one (``link(2)`` fails when the name exists, and no reader sees a half-written
    file)."""

    root: str
    is_object_store = False

    @property
    def delta_options(self) -> dict[str, str]:
        return {}

    def local_path(self, relative: str) -> str:
        return os.path.join(self.root, relative)

    def prove(self) -> None:
        """Nothing to prove: a commit's ``link(2)`` fails when the name exists."""

    def create(self, relative: str, data: bytes, durable: bool) -> tuple[object, ...] | None:
        final = os.path.join(self.root, relative)
        directory = os.path.dirname(final)
        temporary = os.path.join(directory, f".{os.path.basename(final)}.{uuid.uuid4().hex}.tmp")
        with open(temporary, "wb") as handle:
            handle.write(data)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        try:
            os.link(temporary, final)
            stamp = self.stamp(relative)
        except FileExistsError:
            return None
        finally:
            os.unlink(temporary)
        if durable:
            fsync_path(directory)
        return stamp

    def write(self, relative: str, data: bytes | pa.Buffer, durable: bool) -> tuple[object, ...] | None:
        path = os.path.join(self.root, relative)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
        except FileNotFoundError:  # the first file of its directory (a partition's)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
        try:
            # One system call for a small segment: pyarrow writes a file piece by piece
            # (about 18 writes and 11 seeks for a 3-record file), each letting go of the GIL.
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        if durable:
            fsync_path(os.path.dirname(path))
        return None  # a stat is as cheap as what the write could answer

    def read(self, relative: str) -> bytes:
        with open(os.path.join(self.root, relative), "rb") as handle:
            return handle.read()

    def source(self, relative: str) -> str:
        return os.path.join(self.root, relative)

    def exists(self, relative: str) -> bool:
        return os.path.exists(os.path.join(self.root, relative))

    def stamp(self, relative: str) -> tuple[object, ...] | None:
        try:
            stat = os.stat(os.path.join(self.root, relative))
        except OSError:
            return None
        # The size too: a file deleted and written again within the clock's granularity
        # may get the same inode and modification time.
        return stat.st_ino, stat.st_mtime_ns, stat.st_size

    def listing(self, prefix: str = "") -> dict[str, tuple[int, int]]:
        found: dict[str, tuple[int, int]] = {}
        top = os.path.join(self.root, prefix) if prefix else self.root
        for directory, _subdirs, names in os.walk(top):
            for name in names:
                full = os.path.join(directory, name)
                try:
                    stat = os.stat(full)
                except FileNotFoundError:
                    continue  # deleted meanwhile
                found[os.path.relpath(full, self.root).replace(os.sep, "/")] = (int(stat.st_mtime * 1000), stat.st_size)
        return found

    def delete(self, relative: str) -> bool:
        try:
            os.remove(os.path.join(self.root, relative))
        except FileNotFoundError:
            return False
        return True

    def delete_all(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


_opened: dict[tuple[str, StorageSettings], TableStorage] = {}
_by_root: dict[str, TableStorage] = {}  # the storage last opened for a root, whatever its settings
_opened_lock = threading.Lock()


def table_storage(root: str, settings: StorageSettings = _FROM_ENVIRONMENT) -> TableStorage:
    """The storage of the table at ``root`` (a local directory or a store URI). A store's
    client is opened once per root and settings in a process (Spark tasks call this per file)."""
    if "://" not in root:
        return LocalTableStorage(root)
    location = parse_location(root)
    if not location.is_object_store:
        return LocalTableStorage(location.path)
    key = (location.uri, settings)
    with _opened_lock:
        storage = _opened.get(key)
        if storage is None:
            if len(_opened) > 4096:
                _opened.clear()
                _by_root.clear()
            storage = _opened[key] = ObjectTableStorage(location, settings)
        _by_root[location.uri] = storage
    return storage


def storage_of(table_uri: str) -> TableStorage:
    """The storage of a table delta-rs opened, by its ``table_uri`` (``file:///dir/``,
    ``s3://bucket/prefix/``): the one this process opened for that root (with its settings),
    else one from the environment."""
    uri = table_uri.rstrip("/")
    if uri.startswith("file://"):
        return LocalTableStorage(unquote(urlparse(uri).path))
    if "://" not in uri:
        return LocalTableStorage(uri)
    with _opened_lock:
        storage = _by_root.get(parse_location(uri).uri)
    return storage if storage is not None else table_storage(uri)


def fsync_path(path: str) -> None:
    """fsync a file or directory (delta-rs does not fsync on local disks)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


MAX_PARALLEL_READS = 16  # objects one caller reads (or writes) at once on a store
_workers: tuple[int, ThreadPoolExecutor] | None = None  # (the pid that started it, the pool)
_workers_lock = threading.Lock()


_T = TypeVar("_T")


def in_parallel(calls: Sequence[Callable[[], _T]]) -> list[_T | Exception]:
    """Run ``calls`` at once (up to :data:`MAX_PARALLEL_READS` at a time): each one's result
    or the exception it raised, in order. For requests to a store, where each is a round trip
    and the waits overlap (the store clients release the GIL while they wait)."""

    def outcome(call: Callable[[], _T]) -> _T | Exception:
        try:
            return call()
        except Exception as exc:  # noqa: BLE001 - handed to the caller, who decides
            return exc

    if len(calls) <= 1:
        return [outcome(c) for c in calls]
    global _workers
    with _workers_lock:
        # A forked child (Spark's Python workers) inherits the pool but not its threads.
        if _workers is None or _workers[0] != os.getpid():
            _workers = (os.getpid(), ThreadPoolExecutor(MAX_PARALLEL_READS, thread_name_prefix="object-io"))
        pool = _workers[1]
    return list(pool.map(outcome, calls))


def read_all(storage: TableStorage, relatives: Sequence[str]) -> list[bytes | None]:
    """The objects ``relatives`` of ``storage`` (None for a missing one), read at once: on a
    store one round trip for all of them instead of one each (up to
    :data:`MAX_PARALLEL_READS` at a time)."""

    def read(relative: str) -> bytes | None:
        try:
            return storage.read(relative)
        except FileNotFoundError:
            return None

    results = in_parallel([functools.partial(read, r) for r in relatives])
    for result in results:
        if isinstance(result, Exception):
            raise result
    return [r for r in results if not isinstance(r, Exception)]
