"""The object stores behind log dirs (DESIGN §16): opening a client for a
:class:`~sparklog.model.storage_location.StorageLocation`, and proving that a store honours
conditional create before anything commits to it.

S3 and S3-compatible stores are what the tests prove; the others go through the same library
(Rust's ``object_store``, which delta-rs uses too) untested here.

Invariants:

* nothing commits to a store before :func:`prove_conditional_create` passed for it in this
  process: a store that lets two writers create the same object would lose commits silently
  (delta-rs's commit is a create of ``_delta_log/<N>.json`` that must fail when it exists);
* every failure to reach a store is a :class:`~sparklog.errors.StorageError` that names the
  store (URI and endpoint) and says what to do;
* a table's objects are written whole or not at all (:class:`TableStorage`): a reader never
  sees part of a segment or of a commit, and :meth:`TableStorage.create` lands for exactly
  one of several writers creating one name (the Delta commit rule).
"""

from __future__ import annotations

import datetime
import os
import shutil
import threading
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from sparklog.errors import StorageError
from sparklog.model.storage_location import StorageLocation, StorageSettings, parse_location

if TYPE_CHECKING:
    from obstore.store import ObjectStore

__all__ = [
    "LocalTableStorage",
    "ObjectTableStorage",
    "TableStorage",
    "fsync_path",
    "local_log_dir",
    "open_store",
    "prove_conditional_create",
]

_PROBE_PREFIX = "_sparklog/probes"
# A store that cannot be reached should fail a command in seconds, not after object_store's
# default three minutes of retries.
_RETRY = {"max_retries": 2, "retry_timeout": datetime.timedelta(seconds=10)}
_FROM_ENVIRONMENT = StorageSettings()  # no storage.* settings: the AWS_* variables decide
_CLIENT = {"connect_timeout": datetime.timedelta(seconds=5), "timeout": datetime.timedelta(seconds=30)}

_OBSTORE_KEYS = {
    "AWS_ENDPOINT_URL": "endpoint",
    "AWS_REGION": "region",
    "AWS_ACCESS_KEY_ID": "access_key_id",
    "AWS_SECRET_ACCESS_KEY": "secret_access_key",
    "AWS_SESSION_TOKEN": "token",
}


def open_store(location: StorageLocation, settings: StorageSettings = _FROM_ENVIRONMENT) -> ObjectStore:
    """An object-store client rooted at ``location`` (its prefix is the client's root); local
    directories are written with the filesystem's own calls (:class:`LocalTableStorage`)."""
    from obstore.store import from_url

    if not location.is_object_store:
        raise StorageError(f"{location.uri} is a local directory, not an object store")
    variables = settings.variables()
    client: dict[str, Any] = dict(_CLIENT)
    if variables.get("AWS_ALLOW_HTTP", "").lower() in ("1", "true", "yes"):
        client["allow_http"] = True
    config: dict[str, Any] = {}
    if location.scheme == "s3":
        config = {_OBSTORE_KEYS[var]: value for var, value in variables.items() if var in _OBSTORE_KEYS}
    try:
        return from_url(location.uri, config=config, client_options=client, retry_config=_RETRY)  # type: ignore[call-overload]
    except Exception as exc:
        raise StorageError(f"Cannot open the store at {location.uri}: {exc}") from exc


def local_log_dir(log_dir: str) -> str:
    """``log_dir`` when it is a local directory. Topic tables on object stores are not served
    yet (the table layer still writes through the local filesystem): such a log dir is
    refused here, by name, rather than turned into a local path such as ``s3:/bucket``."""
    if "://" not in log_dir:
        return log_dir  # as given: callers resolved it already (ClusterConfig)
    location = parse_location(log_dir)
    if location.is_object_store:
        raise StorageError(
            f"log dir {location.uri}: topic tables on object stores are not supported by this version "
            "yet (only the store check is); use a local log dir"
        )
    return location.path


@dataclass
class _Proven:
    lock: threading.Lock = field(default_factory=threading.Lock)
    stores: set[tuple[str, str]] = field(default_factory=set)


_PROVEN = _Proven()


def prove_conditional_create(location: StorageLocation, settings: StorageSettings = _FROM_ENVIRONMENT) -> None:
    """Refuse a store that does not honour conditional create (``If-None-Match: *``).

    Two writers race to create one probe object under ``_sparklog/probes/``; exactly one may
    win, and a create of an object that exists must fail. Done once per store and process
    (local directories need no proof: sparklog commits there with a hard link, which the
    filesystem refuses when the name exists)."""
    if not location.is_object_store:
        return
    key = (location.uri, settings.endpoint())
    with _PROVEN.lock:
        if key in _PROVEN.stores:
            return
    store = open_store(location, settings)
    _race_creates(store, location, settings)
    with _PROVEN.lock:
        _PROVEN.stores.add(key)


def _race_creates(store: ObjectStore, location: StorageLocation, settings: StorageSettings) -> None:
    import obstore
    from obstore.exceptions import AlreadyExistsError, PreconditionError

    probe = f"{_PROBE_PREFIX}/{uuid.uuid4().hex}"
    barrier = threading.Barrier(2)
    outcomes: list[str | BaseException] = []
    outcomes_lock = threading.Lock()

    def create(writer: int) -> None:
        barrier.wait()
        try:
            obstore.put(store, probe, f"writer {writer}".encode(), mode="create", use_multipart=False)
            outcome: str | BaseException = "won"
        except (AlreadyExistsError, PreconditionError):
            outcome = "refused"
        except Exception as exc:  # noqa: BLE001 - reported below with the store's name
            outcome = exc
        with outcomes_lock:
            outcomes.append(outcome)

    writers = [threading.Thread(target=create, args=(i,), name=f"storage-probe-{i}") for i in range(2)]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join()
    try:
        errors = [o for o in outcomes if isinstance(o, BaseException)]
        if errors:
            raise _unreachable(location, settings, errors[0]) from errors[0]
        late = "refused"
        try:  # a create after both: the object exists now, whoever won
            obstore.put(store, probe, b"late writer", mode="create", use_multipart=False)
            late = "won"
        except (AlreadyExistsError, PreconditionError):
            pass
        if outcomes.count("won") != 1 or late != "refused":
            raise StorageError(
                f"The store at {location.uri} (endpoint {settings.endpoint()}) does not honour conditional "
                f"create (If-None-Match: *): racing creates of one object won {outcomes.count('won')} time(s) "
                f"of 2, a create of an existing object {late}. Writers racing to commit the same table "
                "version would both succeed and one commit would be lost. Use a store that supports "
                "conditional writes (AWS S3, or an S3-compatible server that implements If-None-Match), "
                "or a local log dir."
            )
    finally:
        try:
            obstore.delete(store, probe)
        except Exception:  # noqa: BLE001 - a leftover probe object is harmless
            pass


def _unreachable(location: StorageLocation, settings: StorageSettings, exc: BaseException) -> StorageError:
    from obstore.exceptions import NotFoundError, PermissionDeniedError, UnauthenticatedError

    where = f"the store at {location.uri} (endpoint {settings.endpoint()})"
    if isinstance(exc, NotFoundError | FileNotFoundError):  # a PUT's 404: no such bucket
        return StorageError(
            f"Cannot write to {where}: bucket {location.bucket!r} does not exist there; create it, "
            "or fix the URI in log.dirs"
        )
    if isinstance(exc, UnauthenticatedError | PermissionDeniedError):
        return StorageError(
            f"Cannot write to {where}: the credentials were refused ({type(exc).__name__}); check "
            "storage.access.key.id / storage.secret.access.key (or AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY)"
        )
    return StorageError(
        f"Cannot write to {where}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else exc!r}; "
        "check storage.endpoint (AWS_ENDPOINT_URL), the network and storage.allow.http for a plain-HTTP server"
    )


class TableStorage(Protocol):
    """The objects of one table, by path relative to its root (``_delta_log/…``,
    ``partition=3/….parquet``): what the log writes and reads besides delta-rs."""

    @property
    def root(self) -> str:
        """What delta-rs opens: a local directory or the store URI."""

    def create(self, relative: str, data: bytes, durable: bool) -> bool:
        """Create ``relative`` with ``data`` unless it exists (False then), atomically;
        ``durable``: on the disk (fsynced with its directory) when this returns."""

    def read(self, relative: str) -> bytes:
        """The whole object (``FileNotFoundError`` when there is none)."""

    def exists(self, relative: str) -> bool: ...

    def stamp(self, relative: str) -> tuple[object, ...] | None:
        """Which object ``relative`` is (None: there is none): an object deleted and written
        again under the same name (a topic re-created up to the same commit version) has
        another stamp."""

    def delete_all(self) -> None:
        """Delete the table's every object (a deleted topic); what is already gone is fine."""


@dataclass(frozen=True)
class LocalTableStorage:
    """A table in a local directory: a commit is written under a temporary name and linked to
    its final one (``link(2)`` fails when the name exists, and no reader sees a half-written
    file)."""

    root: str

    def create(self, relative: str, data: bytes, durable: bool) -> bool:
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
        except FileExistsError:
            return False
        finally:
            os.unlink(temporary)
        if durable:
            fsync_path(directory)
        return True

    def read(self, relative: str) -> bytes:
        with open(os.path.join(self.root, relative), "rb") as handle:
            return handle.read()

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

    def delete_all(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


class ObjectTableStorage:
    """A table under a store location: a create is one conditional PUT (``If-None-Match: *``,
    proven honoured by :func:`prove_conditional_create` before the first), single-part, so no
    reader sees a partial object; a PUT the store acknowledged is durable."""

    def __init__(self, location: StorageLocation, settings: StorageSettings = _FROM_ENVIRONMENT) -> None:
        self.location = location
        self.settings = settings
        self._store = open_store(location, settings)

    @property
    def root(self) -> str:
        return self.location.uri

    def create(self, relative: str, data: bytes, durable: bool) -> bool:
        import obstore
        from obstore.exceptions import AlreadyExistsError, PreconditionError

        prove_conditional_create(self.location, self.settings)
        try:
            obstore.put(self._store, relative, data, mode="create", use_multipart=False)
        except (AlreadyExistsError, PreconditionError):
            return False
        except Exception as exc:
            raise self._failed("create", relative, exc) from exc
        return True

    def read(self, relative: str) -> bytes:
        import obstore
        from obstore.exceptions import NotFoundError

        try:
            return bytes(obstore.get(self._store, relative).bytes())
        except (NotFoundError, FileNotFoundError) as exc:
            raise FileNotFoundError(f"{self.root}/{relative}") from exc
        except Exception as exc:
            raise self._failed("read", relative, exc) from exc

    def exists(self, relative: str) -> bool:
        return self.stamp(relative) is not None

    def stamp(self, relative: str) -> tuple[object, ...] | None:
        import obstore
        from obstore.exceptions import NotFoundError

        try:
            meta = obstore.head(self._store, relative)
        except (NotFoundError, FileNotFoundError):
            return None
        except Exception as exc:
            raise self._failed("look up", relative, exc) from exc
        return meta["e_tag"], meta["last_modified"]

    def delete_all(self) -> None:
        import obstore

        try:
            for batch in obstore.list(self._store, chunk_size=1000):
                paths = [meta["path"] for meta in batch]
                if paths:
                    obstore.delete(self._store, paths)
        except Exception as exc:
            raise self._failed("delete", "*", exc) from exc

    def _failed(self, verb: str, relative: str, exc: BaseException) -> StorageError:
        return StorageError(
            f"Cannot {verb} {self.root}/{relative} (endpoint {self.settings.endpoint()}): {type(exc).__name__}: {exc}"
        )


def fsync_path(path: str) -> None:
    """fsync a file or directory (delta-rs does not fsync on local disks)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
