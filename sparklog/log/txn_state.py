"""Every application transaction of a Delta table at a version, read from its ``_delta_log``.

Why not ``DeltaTable.transaction_version``: with deltalake 1.6.6 each call replays the log's
``txn`` actions again (measured 3–4 ms a call on a topic table of a few hundred commits, and
growing with the log), and the hot paths (follower fetch rounds, acks=all high-watermark
waits, appends) ask several ids of every new version. Here the whole ``appId -> version``
map of a table is built once and then advanced commit by commit: a new version costs
reading its one commit file (a few KB), a lookup is a dict access.

Reading follows the Delta protocol: the newest checkpoint named by ``_last_checkpoint``
(single or multi-part Parquet, its ``txn`` column holds the reconciled set), then the JSON
commits after it in order; a later ``txn`` action of an app id replaces an earlier one.
sparklog never sets ``delta.setTransactionRetentionDuration``, so no ``txn`` expires.

The files are read through the table's storage (a local disk or an object store).
Falls back (returns None, the caller asks delta-rs) for a version below the newest
checkpoint and every version kept, or when log files needed were cleaned up under us. Maps are kept per table root and Delta table id
(a re-created topic gets a new id), for the newest few versions. Thread-safe.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

import pyarrow.parquet as pq

from sparklog.log.storage import MAX_PARALLEL_READS, TableStorage, read_all

__all__ = ["app_transactions", "commit_transactions", "record_commit"]

_LOG = "_delta_log"
_VERSIONS_KEPT = 16  # per table: snapshots a little behind the newest still find theirs
_MAX_TABLES = 4096  # roots remembered; a process touching more re-reads (never wrong, only slower)


@dataclass
class _State:
    table_id: str
    by_version: dict[int, dict[str, int]] = field(default_factory=dict)  # the newest few versions


_states: dict[str, _State] = {}
_lock = threading.Lock()


def app_transactions(storage: TableStorage, table_id: str, version: int) -> Mapping[str, int] | None:
    """``appId -> version`` of every application transaction of the table in ``storage``
    (Delta table id ``table_id``) as of ``version``; None when this module can't tell (see above)."""
    root = storage.root
    with _lock:
        state = _states.get(root)
        if state is None or state.table_id != table_id:
            state = None
        elif version in state.by_version:
            return state.by_version[version]
        older = [v for v in state.by_version if v < version] if state is not None else []
        if state is not None and older:
            base = max(older)
            start, versions = base + 1, dict(state.by_version[base])
        else:  # first sight of this table, or older than every version kept (an old snapshot)
            start, versions = -1, {}
    if start < 0:
        built = _from_checkpoint(storage, version)
        if built is None:
            return None
        start, versions = built
    names = [f"{_LOG}/{v:020d}.json" for v in range(start, version + 1)]
    for first in range(0, len(names), MAX_PARALLEL_READS):
        for data in read_all(storage, names[first : first + MAX_PARALLEL_READS]):
            if data is None:
                return None  # cleaned up meanwhile (or not a version of this table): delta-rs answers
            versions.update(commit_transactions(data))
    with _lock:
        state = _states.get(root)
        if state is None or state.table_id != table_id:
            if len(_states) >= _MAX_TABLES:
                _states.clear()
            state = _states[root] = _State(table_id)
        state.by_version[version] = versions
        while len(state.by_version) > _VERSIONS_KEPT:
            del state.by_version[min(state.by_version)]
    return versions


def record_commit(storage: TableStorage, table_id: str, version: int, state: Mapping[str, int]) -> None:
    """``state`` is the whole map as of ``version``: a writer that just committed ``version``
    on top of a map it read knows it without reading its own commit back (on a store, a GET
    a round saved)."""
    with _lock:
        current = _states.get(storage.root)
        if current is None or current.table_id != table_id:
            if len(_states) >= _MAX_TABLES:
                _states.clear()
            current = _states[storage.root] = _State(table_id)
        current.by_version[version] = dict(state)
        while len(current.by_version) > _VERSIONS_KEPT:
            del current.by_version[min(current.by_version)]


def _from_checkpoint(storage: TableStorage, version: int) -> tuple[int, dict[str, int]] | None:
    """The state at the newest checkpoint (if at or below ``version``): (next version, map)."""
    try:
        last = json.loads(storage.read(f"{_LOG}/_last_checkpoint"))
    except FileNotFoundError:
        return 0, {}  # no checkpoint: replay from the first commit
    except (OSError, ValueError):
        return None
    checkpoint = int(last.get("version", -1))
    if checkpoint < 0 or checkpoint > version or "v2Checkpoint" in last:
        return None
    parts = int(last.get("parts") or 0)
    if parts:
        names = [f"{_LOG}/{checkpoint:020d}.checkpoint.{i:010d}.{parts:010d}.parquet" for i in range(1, parts + 1)]
    else:
        names = [f"{_LOG}/{checkpoint:020d}.checkpoint.parquet"]
    versions: dict[str, int] = {}
    try:
        for name in names:
            file = pq.ParquetFile(storage.source(name))
            if "txn" not in file.schema_arrow.names:
                continue
            for txn in file.read(columns=["txn"]).column("txn").to_pylist():
                if txn is not None and txn.get("appId") is not None:
                    versions[txn["appId"]] = int(txn["version"])
    except (OSError, ValueError):
        return None
    return checkpoint + 1, versions


def commit_transactions(data: bytes) -> dict[str, int]:
    """``appId -> version`` of the application transactions one commit file sets."""
    versions: dict[str, int] = {}
    for line in data.decode("utf-8").splitlines():
        if '"txn"' not in line:
            continue  # add/remove/commitInfo lines: skip without parsing
        action = json.loads(line)
        txn = action.get("txn")
        if isinstance(txn, dict) and "appId" in txn:
            versions[str(txn["appId"])] = int(txn["version"])
    return versions
