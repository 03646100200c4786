"""The one exception tree of sparklog.

Every error raised by the public API is a :class:`SparklogError`. Third-party errors (kazoo,
deltalake, pyarrow, py4j) are wrapped once, at the module boundary where they occur, with
``raise ... from exc`` so the original stays visible in the traceback. Messages name what
failed (topic, partition, offset, path, epoch), expected versus actual, and what to do.
"""

from __future__ import annotations

__all__ = [
    "BrokerNotAvailableError",
    "ConcurrentTransactionsError",
    "ConfigError",
    "ConsumerClosedError",
    "ControllerNotAvailableError",
    "CoordinationError",
    "CoordinatorNotAvailableError",
    "DeleteRecordsOffsetError",
    "DuplicateSequenceError",
    "FencedError",
    "FencedInstanceIdError",
    "GroupError",
    "GroupIdNotFoundError",
    "GroupNotEmptyError",
    "GroupSubscribedToTopicError",
    "IllegalGenerationError",
    "InconsistentGroupProtocolError",
    "InvalidGroupIdError",
    "InvalidOffsetSpecError",
    "InvalidPartitionsError",
    "InvalidProducerEpochError",
    "InvalidProducerIdMappingError",
    "InvalidReplicaAssignmentError",
    "InvalidReplicationFactorError",
    "InvalidTopicError",
    "InvalidTransactionTimeoutError",
    "InvalidTxnStateError",
    "LeaderNotAvailableError",
    "LeaseTimeoutError",
    "NoReassignmentInProgressError",
    "NotCoordinatorError",
    "NotEnoughReplicasAfterAppendError",
    "NotEnoughReplicasError",
    "NotLeaderError",
    "OffsetCommitError",
    "OffsetOutOfRangeError",
    "OutOfOrderSequenceError",
    "PolicyError",
    "ProducerClosedError",
    "ProducerFencedError",
    "ProducerSequenceError",
    "RebalanceInProgressError",
    "RecordTooLargeError",
    "RetriableError",
    "RetriesExhaustedError",
    "SchemaMismatchError",
    "SparklogError",
    "StaleMemberEpochError",
    "StorageError",
    "TopicExistsError",
    "TopicNotFoundError",
    "TransactionCoordinatorFencedError",
    "TransactionError",
    "UnknownMemberError",
    "UnknownPartitionError",
    "UnknownTopicCommitError",
    "UnstableOffsetCommitError",
    "ZooKeeperUnavailableError",
]


class SparklogError(Exception):
    """Root of every error sparklog raises."""


class RetriableError(SparklogError):
    """The one retriable marker (Kafka's ``RetriableException``): the condition is passing —
    leadership moving, replicas catching up, a coordinator or ZooKeeper briefly away, a
    transaction being completed — and the same request may succeed when sent again after a
    backoff and a metadata refresh. Retry loops catch this class, never a list of their own;
    every one of these maps to a retriable Kafka error code on the wire."""


class PolicyError(SparklogError, ValueError):
    """A pure policy (placement, election, retention, compaction plans) was given input its
    contract excludes: a caller's bug or a corrupt log, never a user's mistake to retry."""


class ConfigError(SparklogError, ValueError):
    """A configuration key is unknown or its value is not allowed."""


class InvalidTopicError(SparklogError, ValueError):
    """A topic name breaks Kafka's naming rule (``[a-zA-Z0-9._-]``, 1..249 chars)."""


class TopicExistsError(SparklogError):
    """The topic to create exists already."""


class TopicNotFoundError(SparklogError):
    """The topic named does not exist."""


class InvalidPartitionsError(SparklogError, ValueError):
    """A partition count is not allowed (zero, negative, or a decrease)."""


class InvalidReplicationFactorError(SparklogError, ValueError):
    """The replication factor is below 1 or above the number of live brokers."""


class InvalidReplicaAssignmentError(SparklogError, ValueError):
    """A replica assignment (explicit or to be computed) is malformed or cannot be made: empty,
    duplicate or unknown brokers, uneven replication factor, or rack information on some brokers only."""


class NoReassignmentInProgressError(SparklogError):
    """A cancel of a partition reassignment that is not in progress (Kafka: NO_REASSIGNMENT_IN_PROGRESS)."""


class UnknownPartitionError(SparklogError, ValueError):
    """A partition number is outside ``0 .. partitions - 1`` of its topic."""


class OffsetOutOfRangeError(SparklogError):
    """An offset is below the log-start offset or above the log-end offset."""


class InvalidOffsetSpecError(SparklogError, ValueError):
    """An offsets specification (JSON, keyword, timestamp) cannot be parsed."""


class RecordTooLargeError(SparklogError, ValueError):
    """A record or request exceeds ``max.message.bytes`` / ``max.request.size``.

    ``records``: partition -> positions of the records too large in the request's batch for
    that partition, when a produce request names them (the producer then fails only those
    and sends the rest again, as Kafka's producer splits a batch rejected as too large)."""

    def __init__(self, message: str, records: dict[int, list[int]] | None = None) -> None:
        super().__init__(message)
        self.records: dict[int, list[int]] = dict(records or {})


class SchemaMismatchError(SparklogError, ValueError):
    """Input columns or types do not match what a topic accepts."""


class FencedError(RetriableError):
    """A writer's lease or epoch is stale: a newer writer owns the partition."""


class NotLeaderError(FencedError):
    """The writer is not (or no longer) the leader of the partition."""


class ProducerSequenceError(SparklogError):
    """An idempotent producer's batch does not continue its sequence in the partition."""


class OutOfOrderSequenceError(ProducerSequenceError):
    """The batch skips sequence numbers (an earlier batch was lost): Kafka's OUT_OF_ORDER_SEQUENCE_NUMBER."""


class DuplicateSequenceError(ProducerSequenceError):
    """The batch was stored before, but its offsets are no longer known (older than the last
    five batches, or before a failover): Kafka's DUPLICATE_SEQUENCE_NUMBER, a success for clients."""


class InvalidProducerEpochError(ProducerSequenceError):
    """The producer epoch is older than one the partition has seen: a newer incarnation
    of the producer took over (Kafka's INVALID_PRODUCER_EPOCH)."""


class LeaderNotAvailableError(RetriableError):
    """The partition has no leader right now (no live in-sync replica): retry later."""


class NotEnoughReplicasError(RetriableError):
    """``acks=all`` with fewer in-sync replicas than ``min.insync.replicas``: nothing was appended."""


class NotEnoughReplicasAfterAppendError(NotEnoughReplicasError):
    """The batch was appended, but the ISR fell below ``min.insync.replicas`` before every
    in-sync replica had it: it is not acknowledged (a retry is deduplicated)."""


class BrokerNotAvailableError(RetriableError):
    """A broker agent could not be started or is not running (e.g. the embedded broker's
    listener port is taken by another process); the message names the port and the log."""


class LeaseTimeoutError(RetriableError):
    """A partition's write lease could not be acquired in time (``partition``: which)."""

    def __init__(self, message: str, partition: int = -1) -> None:
        super().__init__(message)
        self.partition = partition


class CoordinationError(SparklogError):
    """ZooKeeper coordination failed (unexpected znode state, lost session)."""


class ControllerNotAvailableError(CoordinationError, RetriableError):
    """No controller runs, or it did not take an admin request in time (Kafka: NOT_CONTROLLER,
    which makes a client refresh its metadata and send the request again)."""


class ZooKeeperUnavailableError(CoordinationError, RetriableError):
    """ZooKeeper cannot be reached (a lost connection, e.g. while its ensemble elects a new
    leader, or a lost session) or the embedded server cannot start. Clients retry it within
    their timeouts (``delivery.timeout.ms``, ``session.timeout.ms``)."""


class StorageError(SparklogError):
    """The Delta table or its files cannot be read or written."""


class RetriesExhaustedError(StorageError):
    """An operation kept losing races (concurrent commits) until its retry budget was spent;
    nothing of the failed attempts was committed."""


class ProducerClosedError(SparklogError):
    """``send`` was called on a closed producer."""


class GroupError(SparklogError):
    """Consumer-group coordination failed."""


class InvalidGroupIdError(GroupError, ValueError):
    """A group id (or group.instance.id) breaks the naming rule (``[a-zA-Z0-9._-]``, 1..249 chars)."""


class IllegalGenerationError(GroupError):
    """A commit or sync carries a generation that is not the group's current one."""


class UnknownMemberError(GroupError):
    """The member is not (or no longer) part of the group's current generation."""


class FencedInstanceIdError(UnknownMemberError):
    """Another process joined with the same ``group.instance.id``; this one is fenced."""


class StaleMemberEpochError(GroupError):
    """A consumer-protocol member (KIP-848) commits or fetches with an epoch that is not its
    current one (Kafka: STALE_MEMBER_EPOCH); it heartbeats to learn its epoch and retries."""


class RebalanceInProgressError(GroupError):
    """The group is rebalancing; rejoin (poll) and retry."""


class GroupNotEmptyError(GroupError):
    """The operation needs an inactive group (no live members)."""


class GroupIdNotFoundError(GroupError):
    """The group does not exist (no members and no committed offsets)."""


class OffsetCommitError(GroupError, ValueError):
    """An offset commit is malformed (a negative offset)."""


class NotCoordinatorError(GroupError, RetriableError):
    """This broker does not coordinate the group or transactional id (Kafka: NOT_COORDINATOR);
    find the coordinator again."""


class CoordinatorNotAvailableError(GroupError, RetriableError):
    """The coordinator is not ready (no leader for its offsets partition yet, or loading);
    retry (Kafka: COORDINATOR_NOT_AVAILABLE)."""


class InconsistentGroupProtocolError(GroupError):
    """A member's protocol type or assignors share nothing with the group's, or the group is
    already coordinated by another membership system (Kafka: INCONSISTENT_GROUP_PROTOCOL)."""


class GroupSubscribedToTopicError(GroupError):
    """Offsets of a topic the group's live members subscribe to cannot be deleted."""


class UnknownTopicCommitError(TopicNotFoundError, GroupError):
    """An offset commit names topics that do not exist — deleted, perhaps re-created since
    the committer looked them up (Kafka: UNKNOWN_TOPIC_OR_PARTITION). ``partitions``: the
    (topic, partition)s refused; the commit's other partitions were stored."""

    def __init__(self, message: str, partitions: frozenset[tuple[str, int]] = frozenset()) -> None:
        super().__init__(message)
        self.partitions = partitions


class ConsumerClosedError(SparklogError):
    """The consumer was used after ``close()``."""


class DeleteRecordsOffsetError(OffsetOutOfRangeError, ValueError):
    """A DeleteRecords offset is negative or beyond the partition's log end."""


class TransactionError(SparklogError):
    """A Kafka transaction request the coordinator or a partition leader refuses (DESIGN §14,
    docs/transactions.md)."""


class ProducerFencedError(TransactionError):
    """A newer instance of this transactional id has a newer producer epoch (Kafka:
    PRODUCER_FENCED, INVALID_PRODUCER_EPOCH for old request versions); this one must stop."""


class InvalidTxnStateError(TransactionError):
    """The request does not fit the transaction's state (EndTxn without a transaction, a
    transactional batch for a partition not in the transaction; Kafka: INVALID_TXN_STATE)."""


class ConcurrentTransactionsError(TransactionError, RetriableError):
    """The previous transaction of this id is still being completed, or another request
    changed its state meanwhile; retry (Kafka: CONCURRENT_TRANSACTIONS, retriable)."""


class InvalidTransactionTimeoutError(TransactionError, ValueError):
    """``transaction.timeout.ms`` above the broker's ``transaction.max.timeout.ms`` or not
    positive (Kafka: INVALID_TRANSACTION_TIMEOUT)."""


class InvalidProducerIdMappingError(TransactionError):
    """The producer id does not belong to the transactional id, or the transactional id is
    unknown (Kafka: INVALID_PRODUCER_ID_MAPPING)."""


class TransactionCoordinatorFencedError(TransactionError):
    """A marker from a coordinator older than one this partition already heard from (Kafka:
    TRANSACTION_COORDINATOR_FENCED)."""


class UnstableOffsetCommitError(GroupError, RetriableError):
    """A transaction holds offsets of this group that are not committed or aborted yet
    (Kafka: UNSTABLE_OFFSET_COMMIT, answered to OffsetFetch with require_stable)."""
