"""Committing to a topic table by the Delta protocol's own rule, for a leader's hot path.

A Delta commit is the atomic creation of the next ``_delta_log/<version>.json``: whoever
creates it first wins. Here the file is written under a temporary name and linked to its
final name (``link(2)`` fails when the name exists, and readers never see a half-written
commit); delta-rs keeps doing checkpoints, optimize, vacuum and every read.

Invariants (the same delta-rs gives sparklog with ``max_commit_retries=0``, see DESIGN §6):

* a commit lands at exactly one version, whole, or not at all;
* two commits that touch a common application transaction id never both land: when the
  version we aimed at is taken, the commit there is read, and if it touched any of our app
  ids (every append to ``p`` touches ``sparklog.end.<p>`` and ``sparklog.fence.<p>``) ours
  fails with :class:`~sparklog.log.table.CommitConflict`; otherwise ours goes to the next
  version (it only adds files, so a commit on other partitions cannot invalidate it);
* the commit files follow the Delta protocol (``commitInfo``, ``txn``, ``add`` actions with
  partition values and the segments' stats), so delta-rs, Spark and every Delta reader read
  them as their own; with ``fsync`` the commit file and ``_delta_log/`` are fsynced;
* every ``checkpoint_interval`` versions a checkpoint is written in the background by
  delta-rs, as its own commits would (``delta.checkpointInterval``).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import uuid
from collections.abc import Mapping, Sequence

from deltalake import DeltaTable

from sparklog.log.plans import SegmentLike
from sparklog.log.segment import SegmentFile, fsync_path

__all__ = ["CHECKPOINT_INTERVAL", "commit_actions", "commit_file", "put_commit", "touched_app_ids"]

log = logging.getLogger(__name__)

CHECKPOINT_INTERVAL = 100  # the tables' delta.checkpointInterval
_LOG = "_delta_log"


def commit_file(root: str, version: int) -> str:
    return os.path.join(root, _LOG, f"{version:020d}.json")


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


def put_commit(root: str, version: int, data: bytes, fsync: bool) -> bool:
    """Create commit ``version`` with ``data`` if nobody did; False when it exists."""
    log_dir = os.path.join(root, _LOG)
    temporary = os.path.join(log_dir, f".{version:020d}.json.{uuid.uuid4().hex}.tmp")
    with open(temporary, "wb") as handle:
        handle.write(data)
        if fsync:
            handle.flush()
            os.fsync(handle.fileno())
    try:
        os.link(temporary, commit_file(root, version))
    except FileExistsError:
        return False
    finally:
        os.unlink(temporary)
    if fsync:
        fsync_path(log_dir)
    if version % CHECKPOINT_INTERVAL == 0:
        threading.Thread(target=_checkpoint, args=(root, version), name="delta-checkpoint", daemon=True).start()
    return True


def touched_app_ids(root: str, version: int) -> set[str]:
    """The application transaction ids commit ``version`` set."""
    touched = set()
    with open(commit_file(root, version), encoding="utf-8") as handle:
        for line in handle:
            if '"txn"' in line:
                action = json.loads(line).get("txn")
                if action is not None:
                    touched.add(str(action["appId"]))
    return touched


def _checkpoint(root: str, version: int) -> None:
    try:
        DeltaTable(root, version=version).create_checkpoint()
    except Exception as exc:  # noqa: BLE001 - a missed checkpoint only makes reads slower; maintenance writes the next
        log.warning("checkpoint of %s at version %d failed: %s", root, version, exc)
