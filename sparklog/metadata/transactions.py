"""Kafka transactions' coordinator state in ZooKeeper (Kafka keeps it in ``__transaction_state``).

Znodes (paths in :mod:`sparklog.metadata.zkdata`):

* ``/transactions/ids/<id>`` — :class:`TransactionRecord`: the transactional id's producer id
  and epoch, its state (Kafka's: Empty, Ongoing, PrepareCommit, PrepareAbort,
  CompleteCommit, CompleteAbort), the partitions and groups of the ongoing transaction,
  its timeout and start time;
* ``/transactions/producers/<pid>`` — which transactional id a producer id belongs to;
* ``/transactions/offsets/<pid>/<group>`` — :class:`PendingOffsetsRecord`: offsets a
  transaction committed for a group (TxnOffsetCommit), applied to ``__consumer_offsets``
  when it commits, dropped when it aborts.

Invariants: every change of a record is a compare-and-set on the znode version, so two
coordinators (an old one not yet aware it was replaced, and its successor) never both
move a transaction: the loser gets :class:`~sparklog.errors.ConcurrentTransactionsError`
(Kafka's CONCURRENT_TRANSACTIONS, which clients retry). A decision (Prepare*) is durable
before any marker is written, so whoever coordinates next completes it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import unquote

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError

from sparklog.errors import ConcurrentTransactionsError, CoordinationError
from sparklog.metadata.session import ZkSession, zk_errors
from sparklog.metadata.zkdata import (
    TRANSACTIONS,
    decode_json,
    encode,
    transaction_offsets_path,
    transaction_producer_path,
    transaction_state_path,
)

__all__ = [
    "COMPLETE_ABORT",
    "COMPLETE_COMMIT",
    "EMPTY",
    "ONGOING",
    "PREPARE_ABORT",
    "PREPARE_COMMIT",
    "PendingOffsetsRecord",
    "TransactionRecord",
    "TransactionStore",
]

EMPTY, ONGOING = "Empty", "Ongoing"
PREPARE_COMMIT, PREPARE_ABORT = "PrepareCommit", "PrepareAbort"
COMPLETE_COMMIT, COMPLETE_ABORT = "CompleteCommit", "CompleteAbort"
_CAS_ATTEMPTS = 20
_STATES = {EMPTY, ONGOING, PREPARE_COMMIT, PREPARE_ABORT, COMPLETE_COMMIT, COMPLETE_ABORT}


@dataclass(frozen=True)
class TransactionRecord:
    """``/transactions/ids/<id>``. ``last_producer_epoch``: the epoch before the coordinator
    bumped it on its own (a timeout or a fence), so that producer's retried EndTxn and its
    InitProducerId recovery are recognised (Kafka's lastProducerEpoch); -1 otherwise."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: str = EMPTY
    last_producer_epoch: int = -1
    partitions: list[list[Any]] = field(default_factory=list)  # [[topic, partition], ...]
    groups: list[str] = field(default_factory=list)
    started_ms: int = -1
    updated_ms: int = -1
    version: int = 1

    @classmethod
    def decode(cls, data: bytes, path: str) -> TransactionRecord:
        raw = decode_json(data, path)
        if raw.get("version") != 1 or raw.get("state") not in _STATES:
            raise CoordinationError(f"znode {path}: unknown transaction record {raw}")
        return cls(
            transactional_id=str(raw["transactional_id"]),
            producer_id=int(raw["producer_id"]),
            producer_epoch=int(raw["producer_epoch"]),
            timeout_ms=int(raw["timeout_ms"]),
            state=str(raw["state"]),
            last_producer_epoch=int(raw.get("last_producer_epoch", -1)),
            partitions=[[str(t), int(p)] for t, p in raw.get("partitions", [])],
            groups=[str(g) for g in raw.get("groups", [])],
            started_ms=int(raw.get("started_ms", -1)),
            updated_ms=int(raw.get("updated_ms", -1)),
        )

    @property
    def topic_partitions(self) -> list[tuple[str, int]]:
        return [(str(t), int(p)) for t, p in self.partitions]

    def evolve(self, **changes: Any) -> TransactionRecord:
        return replace(self, **changes)


def _pending_offset(entry: list[Any]) -> list[Any]:
    topic, partition, offset, metadata, *epoch = entry
    return [str(topic), int(partition), int(offset), str(metadata), int(epoch[0]) if epoch else -1]


@dataclass(frozen=True)
class PendingOffsetsRecord:
    """``/transactions/offsets/<pid>/<group>``: ``offsets`` = [[topic, partition, offset, metadata,
    leader epoch], ...] (the epoch absent in records written before it was kept: -1, none);
    ``incarnations``: topic -> the incarnation the coordinator checked when it took them (absent
    in records written before it was kept), so they are never applied to a topic created since."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    group_id: str
    offsets: list[list[Any]] = field(default_factory=list)
    incarnations: dict[str, int] = field(default_factory=dict)
    version: int = 1

    @classmethod
    def decode(cls, data: bytes, path: str) -> PendingOffsetsRecord:
        raw = decode_json(data, path)
        if raw.get("version") != 1:
            raise CoordinationError(f"znode {path}: unknown pending offsets record {raw}")
        return cls(
            transactional_id=str(raw["transactional_id"]),
            producer_id=int(raw["producer_id"]),
            producer_epoch=int(raw["producer_epoch"]),
            group_id=str(raw["group_id"]),
            offsets=[_pending_offset(entry) for entry in raw.get("offsets", [])],
            incarnations={str(t): int(i) for t, i in raw.get("incarnations", {}).items()},
        )


class TransactionStore:
    """Reads and compare-and-set writes of the znodes above. Thread-safe (kazoo is)."""

    def __init__(self, zk: ZkSession) -> None:
        self.zk = zk

    # -- transaction records ---------------------------------------------------------------
    def get(self, transactional_id: str) -> tuple[TransactionRecord, int] | None:
        path = transaction_state_path(transactional_id)
        with zk_errors(f"reading transaction {transactional_id!r}"):
            try:
                data, stat = self.zk.client.get(path)
            except NoNodeError:
                return None
        return TransactionRecord.decode(data, path), int(stat.version)

    def create(self, record: TransactionRecord) -> int:
        path = transaction_state_path(record.transactional_id)
        with zk_errors(f"creating transaction {record.transactional_id!r}"):
            try:
                self.zk.client.create(path, encode(record), makepath=True)
            except NodeExistsError:
                raise ConcurrentTransactionsError(
                    f"transactional id {record.transactional_id!r} was initialised concurrently; retry"
                ) from None
        return 0

    def update(self, record: TransactionRecord, znode_version: int) -> int:
        """Write ``record`` if the znode is still at ``znode_version``; the new version."""
        path = transaction_state_path(record.transactional_id)
        with zk_errors(f"updating transaction {record.transactional_id!r}"):
            try:
                stat = self.zk.client.set(path, encode(record), version=znode_version)
            except (BadVersionError, NoNodeError):
                raise ConcurrentTransactionsError(
                    f"transaction {record.transactional_id!r} changed concurrently (another coordinator or "
                    "request); retry"
                ) from None
        return int(stat.version)

    def transactional_ids(self) -> list[str]:
        with zk_errors("listing transactional ids"):
            try:
                names = self.zk.client.get_children(f"{TRANSACTIONS}/ids")
            except NoNodeError:
                return []
        return sorted(unquote(n.removeprefix("id-")) for n in names if n.startswith("id-"))

    # -- producer ids ----------------------------------------------------------------------
    def map_producer(self, producer_id: int, transactional_id: str) -> None:
        path = transaction_producer_path(producer_id)
        with zk_errors(f"recording producer id {producer_id}"):
            try:
                self.zk.client.create(path, encode({"transactional_id": transactional_id, "version": 1}), makepath=True)
            except NodeExistsError:
                pass  # ids are handed out once: it is ours already

    def transactional_id_of(self, producer_id: int) -> str | None:
        path = transaction_producer_path(producer_id)
        with zk_errors(f"reading producer id {producer_id}"):
            try:
                data, _stat = self.zk.client.get(path)
            except NoNodeError:
                return None
        return str(decode_json(data, path)["transactional_id"])

    # -- pending group offsets -------------------------------------------------------------
    def pending_offsets(self, producer_id: int, group_id: str) -> tuple[PendingOffsetsRecord, int] | None:
        path = transaction_offsets_path(producer_id, group_id)
        with zk_errors(f"reading pending offsets of group {group_id!r}"):
            try:
                data, stat = self.zk.client.get(path)
            except NoNodeError:
                return None
        return PendingOffsetsRecord.decode(data, path), int(stat.version)

    def put_pending_offsets(self, record: PendingOffsetsRecord, znode_version: int | None) -> None:
        """Create (``znode_version`` None) or compare-and-set the pending offsets."""
        path = transaction_offsets_path(record.producer_id, record.group_id)
        with zk_errors(f"storing pending offsets of group {record.group_id!r}"):
            try:
                if znode_version is None:
                    self.zk.client.create(path, encode(record), makepath=True)
                else:
                    self.zk.client.set(path, encode(record), version=znode_version)
            except (NodeExistsError, BadVersionError, NoNodeError):
                raise ConcurrentTransactionsError(
                    f"pending offsets of group {record.group_id!r} changed concurrently; retry"
                ) from None

    def delete_pending_offsets(self, producer_id: int, group_id: str) -> None:
        with zk_errors(f"dropping pending offsets of group {group_id!r}"):
            try:
                self.zk.client.delete(transaction_offsets_path(producer_id, group_id))
            except NoNodeError:
                pass
            try:
                self.zk.client.delete(transaction_offsets_path(producer_id))
            except (NoNodeError, NotEmptyError):
                pass

    def drop_topic_pending_offsets(self, topic: str) -> int:
        """Remove ``topic``'s entries from every transaction's pending offsets (the topic was
        deleted), by compare-and-set. An entry added concurrently may survive; it names the
        deleted topic's incarnation and is refused when applied. Returns the entries removed."""
        removed = 0
        for producer_id in self.producers_with_pending_offsets():
            for group_id in self.pending_groups(producer_id):
                for _attempt in range(_CAS_ATTEMPTS):
                    found = self.pending_offsets(producer_id, group_id)
                    if found is None or all(entry[0] != topic for entry in found[0].offsets):
                        break
                    record, znode_version = found
                    kept = [entry for entry in record.offsets if entry[0] != topic]
                    rest = {t: i for t, i in record.incarnations.items() if t != topic}
                    try:
                        self.put_pending_offsets(replace(record, offsets=kept, incarnations=rest), znode_version)
                    except ConcurrentTransactionsError:
                        continue
                    removed += len(record.offsets) - len(kept)
                    break
                # A record that kept changing keeps its entries: they carry the deleted topic's
                # incarnation, which the offsets log refuses when the transaction applies them.
        return removed

    def pending_groups(self, producer_id: int) -> list[str]:
        """The groups ``producer_id``'s transaction holds pending offsets of."""
        with zk_errors(f"listing pending offsets of producer {producer_id}"):
            try:
                names = self.zk.client.get_children(transaction_offsets_path(producer_id))
            except NoNodeError:
                return []
        return sorted(unquote(n.removeprefix("id-")) for n in names if n.startswith("id-"))

    def producers_with_pending_offsets(self) -> list[int]:
        with zk_errors("listing pending transactional offsets"):
            try:
                return [int(n) for n in self.zk.client.get_children(f"{TRANSACTIONS}/offsets")]
            except NoNodeError:
                return []

    def has_pending_offsets(self, producer_id: int, group_id: str) -> bool:
        with zk_errors(f"reading pending offsets of group {group_id!r}"):
            return self.zk.client.exists(transaction_offsets_path(producer_id, group_id)) is not None
