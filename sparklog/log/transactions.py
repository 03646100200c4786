"""The application transactions of a topic table: their ids, and a cheap way to read them.

sparklog keeps its per-partition offsets and epochs inside the Delta log as application
transactions (``txn`` actions: an app id and a version), so they commit atomically with the
files and are read from a snapshot without listing files. Every id used is built here
(documented on :mod:`sparklog.log.table`); :func:`transaction_version` reads one. Only
``log/`` imports deltalake.
"""

from __future__ import annotations

from collections.abc import Mapping

from deltalake import DeltaTable
from deltalake.exceptions import DeltaError

from sparklog.errors import StorageError
from sparklog.log.storage import storage_of
from sparklog.log.txn_state import app_transactions

__all__ = [
    "KAFKA_PRODUCERS_PREFIX",
    "aborted_app_id",
    "cleaned_app_id",
    "end_app_id",
    "fence_app_id",
    "kafka_producer_id",
    "leader_app_id",
    "leader_fence_app_id",
    "open_txn_app_id",
    "producer_app_id",
    "rewrite_app_id",
    "start_app_id",
    "transaction_version",
    "transaction_versions",
    "transactions_at",
]


def end_app_id(partition: int) -> str:
    return f"sparklog.end.{partition}"


def start_app_id(partition: int) -> str:
    return f"sparklog.start.{partition}"


def cleaned_app_id(partition: int) -> str:
    """Compaction: the first offset of ``partition`` not yet cleaned."""
    return f"sparklog.cleaned.{partition}"


def rewrite_app_id(partition: int) -> str:
    """Optimize: touched by every rebasing rewrite of ``partition``'s files (version = count)."""
    return f"sparklog.rewrite.{partition}"


def fence_app_id(partition: int) -> str:
    return f"sparklog.fence.{partition}"


def leader_app_id(partition: int) -> str:
    """The leader epoch of the records' lineage: what the last writer or fetch followed."""
    return f"sparklog.leader.{partition}"


def leader_fence_app_id(partition: int) -> str:
    """The newest leader epoch any commit to this replica claimed, epoch markers included.
    Kept apart from :func:`leader_app_id`: fencing a deposed leader's table must not make it
    look like it already follows the new epoch (it still has to reconcile)."""
    return f"sparklog.leaderfence.{partition}"


def producer_app_id(producer_id: str, partition: int) -> str:
    # Per partition: after a failover a batch's partitions may sit in different leaders' tables.
    return f"sparklog.producer.{producer_id}.{partition}"


def kafka_producer_id(producer_id: int) -> str:
    """A Kafka producer id (InitProducerId) as app transactions name it, apart from the light
    producers' ids."""
    return f"kafka-{producer_id}"


def open_txn_app_id(partition: int, producer_id: int) -> str:
    """A Kafka producer's open transaction in ``partition``: version = its first offset + 1
    (0: none open). Partition first, so one partition's ids share a prefix."""
    return f"sparklog.txnopen.{partition}.{producer_id}"


def aborted_app_id(partition: int, start: int) -> str:
    """A run of aborted records of ``partition`` starting at ``start``: version = the run's
    end (exclusive). Only the aborted producer's batches: other producers' records inside a
    transaction's span are runs' boundaries."""
    return f"sparklog.aborted.{partition}.{start}"


KAFKA_PRODUCERS_PREFIX = producer_app_id(kafka_producer_id(0), 0).removesuffix("0.0")


# Application transaction versions are memoised on the snapshot object, per version: the hot
# paths (appends, fetch rounds, high watermarks) ask for the same ids of the same version
# again and again. The map of a version comes from :mod:`sparklog.log.txn_state` (one commit
# file read per new version); delta-rs answers what that module can't (≈3 ms a call measured
# with deltalake 1.6.6: it replays the log's txn actions each time). A snapshot object is used
# by one thread.
_TXN_CACHE_ATTRIBUTE = "_sparklog_transactions"


def transactions_at(dt: DeltaTable, version: int) -> Mapping[str, int] | None:
    """Every app transaction of ``dt``'s table as of ``version`` (which may be newer than
    ``dt``'s own) from :mod:`sparklog.log.txn_state`; None: ask delta-rs."""
    return app_transactions(storage_of(dt.table_uri), str(dt.metadata().id), version)


def transaction_versions(dt: DeltaTable, prefix: str, suffix: str = "") -> dict[str, int]:
    """Every app transaction of snapshot ``dt`` whose id starts with ``prefix`` and ends with
    ``suffix``. Empty when the map cannot be read from ``_delta_log`` (cleaned up under it):
    delta-rs can only be asked id by id."""
    version = dt.version()
    every = transactions_at(dt, version)
    if every is None:
        return {}
    return {k: v for k, v in every.items() if k.startswith(prefix) and k.endswith(suffix)}


def transaction_version(dt: DeltaTable, app_id: str) -> int | None:
    """The version of application transaction ``app_id`` in snapshot ``dt`` (None: absent)."""
    # Snapshot state is read lazily: a table deleted (or re-created) under a cached snapshot
    # fails here, not in snapshot(). Keep deltalake's errors inside this module.
    try:
        version = dt.version()
        cached: tuple[int, Mapping[str, int] | None, dict[str, int | None]] | None = getattr(
            dt, _TXN_CACHE_ATTRIBUTE, None
        )
        if cached is None or cached[0] != version:
            cached = (version, transactions_at(dt, version), {})
            setattr(dt, _TXN_CACHE_ATTRIBUTE, cached)
        if cached[1] is not None:
            return cached[1].get(app_id)
        if app_id not in cached[2]:
            cached[2][app_id] = dt.transaction_version(app_id)
        return cached[2][app_id]
    except (DeltaError, OSError) as exc:
        raise StorageError(
            f"Cannot read {app_id} of the table at {dt.table_uri}: {exc}. Was the topic deleted or re-created?"
        ) from exc
