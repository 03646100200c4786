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
  store (URI and endpoint) and says what to do.
"""

from __future__ import annotations

import datetime
import os
import threading
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sparklog.errors import StorageError
from sparklog.model.storage_location import StorageLocation, StorageSettings, parse_location

if TYPE_CHECKING:
    from obstore.store import ObjectStore

__all__ = ["local_log_dir", "open_store", "prove_conditional_create"]

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
    """An object-store client rooted at ``location`` (its prefix is the client's root)."""
    from obstore.store import LocalStore, from_url

    if not location.is_object_store:
        os.makedirs(location.path, exist_ok=True)
        return LocalStore(location.path)
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
