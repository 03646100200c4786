"""Object stores behind log dirs (DESIGN §16): a client for a
:class:`~sparklog.model.storage_location.StorageLocation`, the proof that a store honours
conditional create, and a table's objects on a store (:class:`ObjectTableStorage`).

S3 and S3-compatible stores are what the tests prove; the others go through the same library
(Rust's ``object_store``, which delta-rs uses too) untested here.

Invariants:

* nothing is created on a store before :func:`prove_conditional_create` passed for it in this
  process: a store that lets two writers create the same object would lose commits silently
  (a Delta commit is a create of ``_delta_log/<N>.json`` that must fail when it exists);
* every failure to reach a store is a :class:`~sparklog.errors.StorageError` that names the
  store (URI and endpoint) and says what to do;
* objects are written whole, in one single-part PUT: a reader never sees part of a segment
  or of a commit;
* the segment cache holds only data files, whose names are never reused (a new uuid each),
  so a cached segment is never stale;
* every request this module makes is counted by kind (:func:`store_requests`: ``PUT``,
  ``PUT_IF_ABSENT``, ``PUT_IF_ABSENT_REFUSED`` of those, ``GET``, ``HEAD``, ``LIST`` a page,
  ``DELETE`` a batch), failed ones too; delta-rs's own requests (table loads, checkpoints,
  log clean-up) are not seen here.
"""

from __future__ import annotations

import datetime
import threading
import uuid
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from sparklog.errors import StorageError
from sparklog.model.storage_location import StorageLocation, StorageSettings

if TYPE_CHECKING:
    from obstore.store import ObjectStore

__all__ = ["ObjectTableStorage", "SegmentCache", "open_store", "prove_conditional_create", "store_requests"]

_PROBE_PREFIX = "_sparklog/probes"
# A store that cannot be reached should fail a command in seconds, not after object_store's
# default three minutes of retries.
_RETRY = {"max_retries": 2, "retry_timeout": datetime.timedelta(seconds=10)}
_FROM_ENVIRONMENT = StorageSettings()  # no storage.* settings: the AWS_* variables decide
_CLIENT = {"connect_timeout": datetime.timedelta(seconds=5), "timeout": datetime.timedelta(seconds=30)}

_requests: Counter[str] = Counter()
_requests_lock = threading.Lock()


def _count(kind: str, amount: int = 1) -> None:
    with _requests_lock:
        _requests[kind] += amount


def store_requests() -> dict[str, int]:
    """Requests this process made to object stores, by kind, since it started."""
    with _requests_lock:
        return dict(_requests)


_OBSTORE_KEYS = {
    "AWS_ENDPOINT_URL": "endpoint",
    "AWS_REGION": "region",
    "AWS_ACCESS_KEY_ID": "access_key_id",
    "AWS_SECRET_ACCESS_KEY": "secret_access_key",
    "AWS_SESSION_TOKEN": "token",
}


def open_store(location: StorageLocation, settings: StorageSettings = _FROM_ENVIRONMENT) -> ObjectStore:
    """An object-store client rooted at ``location`` (its prefix is the client's root); local
    directories are written with the filesystem's own calls
    (:class:`~sparklog.log.storage.LocalTableStorage`)."""
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


@dataclass
class _Proven:
    lock: threading.Lock = field(default_factory=threading.Lock)
    stores: set[tuple[str, str]] = field(default_factory=set)


_PROVEN = _Proven()


def prove_conditional_create(location: StorageLocation, settings: StorageSettings = _FROM_ENVIRONMENT) -> None:
    """Refuse a store that does not honour conditional create (``If-None-Match: *``).

    Two writers race to create one probe object under ``_sparklog/probes/`` of ``location``;
    exactly one may win, and a create of an object that exists must fail. Done once per
    bucket, endpoint and process: conditional create is the server's, not a prefix's (local
    directories need no proof: sparklog commits there with a hard link, which the filesystem
    refuses when the name exists)."""
    if not location.is_object_store:
        return
    key = (f"{location.scheme}://{location.bucket}", settings.endpoint())
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
            _count("PUT_IF_ABSENT")
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
            _count("PUT_IF_ABSENT")
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
            _count("DELETE")
            obstore.delete(store, probe)
        except Exception:  # noqa: BLE001 - a leftover probe object is harmless
            pass


def _unreachable(
    location: StorageLocation, settings: StorageSettings, exc: BaseException, what: str = "write to", path: str = ""
) -> StorageError:
    """An error of a request ``what`` (``"write to"``, ``"read"``...) on ``path`` under
    ``location`` that says what to check; a missing object is for the caller to handle."""
    from obstore.exceptions import NotFoundError, PermissionDeniedError, UnauthenticatedError

    where = f"the store at {location.uri} (endpoint {settings.endpoint()})"
    if path:
        where = f"{location.uri}/{path} (endpoint {settings.endpoint()})"
    if isinstance(exc, NotFoundError | FileNotFoundError):  # a PUT's 404: no such bucket
        return StorageError(
            f"Cannot {what} {where}: bucket {location.bucket!r} does not exist there; create it, "
            "or fix the URI in log.dirs"
        )
    if isinstance(exc, UnauthenticatedError | PermissionDeniedError):
        return StorageError(
            f"Cannot {what} {where}: the credentials were refused ({type(exc).__name__}); check "
            "storage.access.key.id / storage.secret.access.key (or AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY)"
        )
    first_line = str(exc).splitlines()[0] if str(exc) else repr(exc)  # obstore appends a long debug dump
    return StorageError(
        f"Cannot {what} {where}: {type(exc).__name__}: {first_line}; check storage.endpoint "
        "(AWS_ENDPOINT_URL), the network and storage.allow.http for a plain-HTTP server"
    )


class SegmentCache:
    """The bytes of recently written or read data files, least recently used dropped first
    once ``max_bytes`` is exceeded: a Fetch of the tail, a follower's or a Spark task's read
    of a fresh segment is served without a GET. Thread-safe."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[str, bytes] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: str) -> bytes | None:
        with self._lock:
            data = self._entries.get(key)
            if data is not None:
                self._entries.move_to_end(key)
            return data

    def put(self, key: str, data: bytes) -> None:
        if len(data) > self.max_bytes // 4:
            return  # one huge segment would flush everything else
        with self._lock:
            old = self._entries.pop(key, None)
            self._bytes += len(data) - (len(old) if old is not None else 0)
            self._entries[key] = data
            while self._bytes > self.max_bytes:
                _, dropped = self._entries.popitem(last=False)
                self._bytes -= len(dropped)

    def discard(self, key: str) -> None:
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= len(old)


SEGMENT_CACHE = SegmentCache(256 << 20)  # per process, every table on every store


def _is_segment(relative: str) -> bool:
    return relative.endswith(".parquet") and not relative.startswith("_delta_log/")


class ObjectTableStorage:
    """A table under a store location: a create is one conditional PUT (``If-None-Match: *``,
    proven honoured by :func:`prove_conditional_create` before the first), every write
    single-part, so no reader sees a partial object; a PUT the store acknowledged is durable."""

    is_object_store = True

    def __init__(self, location: StorageLocation, settings: StorageSettings = _FROM_ENVIRONMENT) -> None:
        self.location = location
        self.settings = settings
        self._store = open_store(location, settings)

    @property
    def root(self) -> str:
        return self.location.uri

    @property
    def delta_options(self) -> dict[str, str]:
        return self.settings.variables()

    def local_path(self, relative: str) -> str | None:
        return None

    def prove(self) -> None:
        prove_conditional_create(self.location, self.settings)

    def create(self, relative: str, data: bytes, durable: bool) -> tuple[object, ...] | None:
        return self._put(relative, data, create=True)

    def write(self, relative: str, data: bytes | pa.Buffer, durable: bool) -> tuple[object, ...] | None:
        return self._put(relative, data, create=False)

    def _put(self, relative: str, data: bytes | pa.Buffer, create: bool) -> tuple[object, ...] | None:
        import obstore
        from obstore.exceptions import AlreadyExistsError, PreconditionError

        if create or not relative.startswith("_delta_log/"):
            self.prove()  # before the first commit or data file; a checkpoint only restates commits
        payload = data if isinstance(data, bytes) else data.to_pybytes()  # obstore takes bytes, not Arrow buffers
        _count("PUT_IF_ABSENT" if create else "PUT")
        try:
            if create:
                result = obstore.put(self._store, relative, payload, mode="create", use_multipart=False)
            else:
                result = obstore.put(self._store, relative, payload, mode="overwrite", use_multipart=False)
        except (AlreadyExistsError, PreconditionError):
            if create:
                _count("PUT_IF_ABSENT_REFUSED")
                return None
            raise
        except Exception as exc:
            raise self._failed("write", relative, exc) from exc
        if _is_segment(relative):
            SEGMENT_CACHE.put(self._key(relative), payload)
        return (result["e_tag"],)

    def read(self, relative: str) -> bytes:
        import obstore
        from obstore.exceptions import NotFoundError

        cacheable = _is_segment(relative)
        if cacheable and (cached := SEGMENT_CACHE.get(self._key(relative))) is not None:
            return cached
        _count("GET")
        try:
            data = bytes(obstore.get(self._store, relative).bytes())
        except (NotFoundError, FileNotFoundError) as exc:
            raise FileNotFoundError(f"{self.root}/{relative}") from exc
        except Exception as exc:
            raise self._failed("read", relative, exc) from exc
        if cacheable:
            SEGMENT_CACHE.put(self._key(relative), data)
        return data

    def source(self, relative: str) -> str | pa.NativeFile:
        return pa.BufferReader(self.read(relative))

    def exists(self, relative: str) -> bool:
        return self.stamp(relative) is not None

    def stamp(self, relative: str) -> tuple[object, ...] | None:
        import obstore
        from obstore.exceptions import NotFoundError

        _count("HEAD")
        try:
            meta = obstore.head(self._store, relative)
        except (NotFoundError, FileNotFoundError):
            return None
        except Exception as exc:
            raise self._failed("look up", relative, exc) from exc
        # The entity tag alone: a PUT answers it too (no HEAD after a create), and an object
        # written again under the name (a re-created table's commit) has other bytes.
        return (meta["e_tag"],)

    def listing(self, prefix: str = "") -> dict[str, tuple[int, int]]:
        import obstore

        found: dict[str, tuple[int, int]] = {}
        base = len(self.location.prefix) + 1 if self.location.prefix else 0
        pages = 0
        try:
            for batch in obstore.list(self._store, prefix=prefix or None, chunk_size=1000):
                pages += 1
                for meta in batch:
                    # Paths come back relative to the store's root prefix already, or with it
                    # (versions differ): strip it when present.
                    path = str(meta["path"])
                    if self.location.prefix and path.startswith(self.location.prefix + "/"):
                        path = path[base:]
                    modified = meta["last_modified"]
                    found[path] = (int(modified.timestamp() * 1000), int(meta["size"]))
        except Exception as exc:
            raise self._failed("list", prefix or "*", exc) from exc
        finally:
            _count("LIST", max(1, pages))  # a page a request; an empty listing is one too
        return found

    def delete(self, relative: str) -> bool:
        import obstore
        from obstore.exceptions import NotFoundError

        SEGMENT_CACHE.discard(self._key(relative))
        _count("DELETE")
        try:
            obstore.delete(self._store, relative)  # S3 answers 204 whether or not it existed
        except (NotFoundError, FileNotFoundError):
            return False
        except Exception as exc:
            raise self._failed("delete", relative, exc) from exc
        return True

    def delete_all(self) -> None:
        import obstore

        try:
            for batch in obstore.list(self._store, chunk_size=1000):
                _count("LIST")
                paths = [meta["path"] for meta in batch]
                for path in paths:
                    SEGMENT_CACHE.discard(self._key(str(path)))
                if paths:
                    _count("DELETE")
                    obstore.delete(self._store, paths)
        except Exception as exc:
            raise self._failed("delete", "*", exc) from exc

    def _key(self, relative: str) -> str:
        return f"{self.root}/{relative}"

    def _failed(self, verb: str, relative: str, exc: BaseException) -> StorageError:
        return _unreachable(self.location, self.settings, exc, verb, relative)
