"""A transaction's group offsets (TxnOffsetCommit): pending until the transaction ends.

The group's coordinator (leader of the group's ``__consumer_offsets`` partition) receives
TxnOffsetCommit and stores the offsets as *pending*, durably, in ZooKeeper
(``/transactions/offsets/<pid>/<group>``, :mod:`sparklog.metadata.transactions`), not in
``__consumer_offsets``. The transaction's commit marker reaches the group's offsets
partition's leader (the group coordinator, through WriteTxnMarkers like any partition), which
applies them to ``__consumer_offsets`` (one offset commit, generation -1: the membership was
checked when they were received) and drops the znode; an abort marker only drops the znode.

Invariants: a consumer never reads an offset of a transaction that did not commit; an
offset commit made visible is exactly what the transaction sent last for that partition;
applying twice (a coordinator that failed between applying and dropping) stores the same
values again. :func:`unstable_partitions` tells OffsetFetch (``require_stable``) which
partitions of a group have pending offsets (Kafka's UNSTABLE_OFFSET_COMMIT).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence

from sparklog.broker.groups.offset_log import OffsetLog
from sparklog.errors import ConcurrentTransactionsError, UnknownTopicCommitError
from sparklog.log.group_offsets import OffsetCommit
from sparklog.metadata.session import ZkSession
from sparklog.metadata.transactions import PendingOffsetsRecord, TransactionStore

__all__ = ["complete_group_offsets", "store_pending_offsets", "unstable_partitions"]

log = logging.getLogger(__name__)

_CAS_ATTEMPTS = 20


def store_pending_offsets(
    store: TransactionStore,
    transactional_id: str,
    producer_id: int,
    producer_epoch: int,
    group_id: str,
    offsets: Sequence[tuple[str, int, int, str, int]],
    incarnations: Mapping[str, int],
) -> None:
    """Merge ``offsets`` ((topic, partition, offset, metadata, committed leader epoch)) into the
    pending ones, with the
    ``incarnations`` of their topics as the caller checked them."""
    for _attempt in range(_CAS_ATTEMPTS):
        found = store.pending_offsets(producer_id, group_id)
        merged: dict[tuple[str, int], list[object]] = {}
        known: dict[str, int] = {}
        if found is not None:
            merged = {(str(entry[0]), int(entry[1])): list(entry) for entry in found[0].offsets}
            known = dict(found[0].incarnations)
        merged.update({(entry[0], entry[1]): list(entry) for entry in offsets})
        known.update(incarnations)
        record = PendingOffsetsRecord(
            transactional_id, producer_id, producer_epoch, group_id, [merged[k] for k in sorted(merged)], known
        )
        try:
            store.put_pending_offsets(record, None if found is None else found[1])
            return
        except ConcurrentTransactionsError:
            continue
    raise ConcurrentTransactionsError(f"pending offsets of group {group_id!r} kept changing; retry")


def complete_group_offsets(
    store: TransactionStore, offsets: OffsetLog, producer_id: int, group_id: str, commit: bool
) -> None:
    """Apply (``commit``) or drop the pending offsets of ``producer_id`` for ``group_id``;
    offsets of a topic deleted since they were taken are dropped (DESIGN §8)."""
    found = store.pending_offsets(producer_id, group_id)
    if found is None:
        return
    record = found[0]
    if commit and record.offsets:
        commits = {(str(t), int(p)): OffsetCommit(int(o), str(m), int(e)) for t, p, o, m, e in record.offsets}
        # Records written before incarnations were kept: the topics as they are now.
        unknown = {t for t, _ in commits} - set(record.incarnations)
        incarnations = {**offsets.replicas.topic_incarnations(unknown), **record.incarnations}
        try:
            offsets.commit(group_id, commits, incarnations=incarnations)
        except UnknownTopicCommitError as exc:
            log.info("transaction of producer %d: %s", producer_id, exc)
    store.delete_pending_offsets(producer_id, group_id)


def unstable_partitions(
    zk: ZkSession, group_id: str, partitions: Iterable[tuple[str, int]] | None = None
) -> set[tuple[str, int]]:
    """The (topic, partition)s of ``group_id`` (among ``partitions``; None: all) that an open
    transaction holds pending offsets for: OffsetFetch with ``require_stable`` answers them
    UNSTABLE_OFFSET_COMMIT (the consumer retries until the transaction ends)."""
    store = TransactionStore(zk)
    wanted = None if partitions is None else set(partitions)
    held: set[tuple[str, int]] = set()
    for producer_id in store.producers_with_pending_offsets():
        found = store.pending_offsets(producer_id, group_id)
        if found is None:
            continue
        held.update((str(t), int(p)) for t, p, *_rest in found[0].offsets)
    return held if wanted is None else held & wanted
