"""Committing to a topic table by the Delta protocol's own rule, for a leader's hot path.

A Delta commit is the atomic creation of the next ``_delta_log/<version>.json``: whoever
creates it first wins. The table's storage creates it
(:meth:`~sparklog.log.storage.TableStorage.create`: on a local disk a temporary file linked to
its final name, ``link(2)`` failing when the name exists; on a store one conditional PUT), so
readers never see a half-written commit; delta-rs keeps doing checkpoints, optimize, vacuum
and every read.

Invariants (the same delta-rs gives sparklog with ``max_commit_retries=0``, see DESIGN §6):

* a commit lands at exactly one version, whole, or not at all; a create whose answer was
  lost is read back before anything else is decided (:func:`put_commit`);
* two commits that touch a common application transaction id never both land: when the
  version we aimed at is taken, the commit there is read, and if it touched any of our app
  ids (every append to ``p`` touches ``sparklog.end.<p>`` and ``sparklog.fence.<p>``) ours
  fails with :class:`~sparklog.log.table.CommitConflict`; otherwise ours goes to the next
  version (it only adds files, so a commit on other partitions cannot invalidate it);
* the commit files follow the Delta protocol (``commitInfo``, ``txn``, ``add`` actions with
  partition values and the segments' stats), so delta-rs, Spark and every Delta reader read
  them as their own; with ``fsync`` the commit file and ``_delta_log/`` are fsynced;
* every ``delta.checkpointInterval`` versions a checkpoint is written in the background
  (:mod:`sparklog.log.checkpoints`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence

from sparklog.errors import StorageError
from sparklog.log.checkpoints import checkpoint_if_due
from sparklog.log.plans import SegmentLike
from sparklog.log.segment import SegmentFile
from sparklog.log.storage import TableStorage

__all__ = ["commit_actions", "commit_name", "put_commit"]

log = logging.getLogger(__name__)

_CREATE_ATTEMPTS = 3  # a commit's create failing without an answer, tried again after a read-back
_LOG = "_delta_log"


def commit_name(version: int) -> str:
    """Commit ``version``'s path relative to the table root."""
    return f"{_LOG}/{version:020d}.json"


def commit_actions(
    segments: Sequence[SegmentFile],
    transactions: Mapping[str, int],
    metadata: Mapping[str, str],
    read_version: int,
    now_ms: int,
    removes: Sequence[SegmentLike] = (),
) -> bytes:
    """The newline-delimited JSON actions of one append commit; ``removes``: live files it
    replaces (a rewrite that keeps their surviving records, e.g. ``__consumer_offsets``
    compacted as it is written), removed in the same commit."""
    info = {
        "timestamp": now_ms,
        "operation": "WRITE",
        "operationParameters": {"mode": "Append"},
        "readVersion": read_version,
        "isBlindAppend": not removes,
        "clientVersion": "sparklog",
        **metadata,
    }
    lines = [json.dumps({"commitInfo": info})]
    lines += [
        json.dumps({"txn": {"appId": app_id, "version": version, "lastUpdated": now_ms}})
        for app_id, version in sorted(transactions.items())
    ]
    lines += [
        json.dumps(
            {
                "remove": {
                    "path": seg.path,
                    "deletionTimestamp": now_ms,
                    "dataChange": True,
                    "extendedFileMetadata": True,
                    "partitionValues": {"partition": str(seg.partition)},
                    "size": seg.size_bytes,
                }
            }
        )
        for seg in removes
    ]
    lines += [
        json.dumps(
            {
                "add": {
                    "path": seg.path,
                    "partitionValues": {"partition": str(seg.partition)},
                    "size": seg.size_bytes,
                    "modificationTime": seg.modification_time_ms,
                    "dataChange": True,
                    "stats": seg.stats_json(),
                }
            }
        )
        for seg in segments
    ]
    return ("\n".join(lines) + "\n").encode()


def put_commit(storage: TableStorage, version: int, data: bytes, fsync: bool) -> tuple[object, ...] | None:
    """Create commit ``version`` with ``data`` if nobody did: its stamp
    (:meth:`~sparklog.log.storage.TableStorage.stamp`); None when another commit holds it.

    A create whose answer was lost (a timeout or a dropped connection after the store took
    it; stores do not retry conditional writes) has an unknown outcome: the version is read
    back. Our bytes there mean it landed; nothing there, it is created again; another
    commit's bytes, it is taken. The store's error is raised only when even that read fails."""
    name = commit_name(version)
    for attempt in range(1, _CREATE_ATTEMPTS + 1):
        try:
            stamp = storage.create(name, data, durable=fsync)
            break
        except StorageError as lost:
            try:
                landed = storage.read(name)
            except FileNotFoundError:
                if attempt == _CREATE_ATTEMPTS:
                    raise lost from None
                log.info("commit %d of %s: the create failed (%s); creating it again", version, storage.root, lost)
                continue
            except StorageError:
                raise lost from None
            if landed != data:
                return None
            stamp = storage.stamp(name) or ()
            break
    if stamp is None:
        return None
    checkpoint_if_due(storage, version)
    return stamp
