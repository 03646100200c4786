"""sparklog's errors as Kafka error codes, so a client retries or fails as against Kafka.

One table, most specific class first: a retriable condition (leadership moved, not enough
replicas, a lease or ZooKeeper briefly unavailable) maps to a retriable Kafka code; bad input
maps to the code Kafka gives for it; a store that failed maps to KAFKA_STORAGE_ERROR; anything
else is UNKNOWN_SERVER_ERROR. Two errors exist
on the wire only: :class:`InvalidRequestError` (INVALID_REQUEST: a request Kafka's broker
refuses as malformed, e.g. a topic named twice) and :class:`PolicyViolationError`
(POLICY_VIOLATION: allowed by the protocol, refused by the broker's policy).
"""

from __future__ import annotations

import logging

from kio.schema.errors import ErrorCode

from sparklog import errors
from sparklog.broker.kafka.records import CorruptBatchError, TransactionalBatchError, UnsupportedMagicError
from sparklog.errors import SparklogError

__all__ = ["CODES", "InvalidRequestError", "PolicyViolationError", "error_code"]


class InvalidRequestError(SparklogError):
    """A request Kafka's broker refuses as malformed (Kafka: INVALID_REQUEST)."""


class PolicyViolationError(SparklogError):
    """A request the broker's policy refuses (Kafka: POLICY_VIOLATION)."""


log = logging.getLogger(__name__)

CODES: tuple[tuple[type[BaseException], ErrorCode], ...] = (
    (InvalidRequestError, ErrorCode.invalid_request),
    (PolicyViolationError, ErrorCode.policy_violation),
    (CorruptBatchError, ErrorCode.corrupt_message),
    (UnsupportedMagicError, ErrorCode.unsupported_for_message_format),
    (TransactionalBatchError, ErrorCode.invalid_txn_state),
    (errors.ProducerFencedError, ErrorCode.producer_fenced),
    (errors.InvalidTxnStateError, ErrorCode.invalid_txn_state),
    (errors.ConcurrentTransactionsError, ErrorCode.concurrent_transactions),
    (errors.InvalidTransactionTimeoutError, ErrorCode.invalid_transaction_timeout),
    (errors.InvalidProducerIdMappingError, ErrorCode.invalid_producer_id_mapping),
    (errors.TransactionCoordinatorFencedError, ErrorCode.transaction_coordinator_fenced),
    (errors.UnstableOffsetCommitError, ErrorCode.unstable_offset_commit),
    (errors.NotCoordinatorError, ErrorCode.not_coordinator),
    (errors.CoordinatorNotAvailableError, ErrorCode.coordinator_not_available),
    (errors.InconsistentGroupProtocolError, ErrorCode.inconsistent_group_protocol),
    (errors.GroupSubscribedToTopicError, ErrorCode.group_subscribed_to_topic),
    (errors.FencedInstanceIdError, ErrorCode.fenced_instance_id),
    (errors.UnknownMemberError, ErrorCode.unknown_member_id),
    (errors.IllegalGenerationError, ErrorCode.illegal_generation),
    (errors.StaleMemberEpochError, ErrorCode.stale_member_epoch),
    (errors.RebalanceInProgressError, ErrorCode.rebalance_in_progress),
    (errors.GroupNotEmptyError, ErrorCode.non_empty_group),
    (errors.GroupIdNotFoundError, ErrorCode.group_id_not_found),
    (errors.InvalidGroupIdError, ErrorCode.invalid_group_id),
    (errors.OffsetCommitError, ErrorCode.invalid_commit_offset_size),
    (errors.OutOfOrderSequenceError, ErrorCode.out_of_order_sequence_number),
    (errors.DuplicateSequenceError, ErrorCode.duplicate_sequence_number),
    (errors.InvalidProducerEpochError, ErrorCode.invalid_producer_epoch),
    (errors.NotLeaderError, ErrorCode.not_leader_or_follower),
    (errors.FencedError, ErrorCode.not_leader_or_follower),
    (errors.LeaderNotAvailableError, ErrorCode.leader_not_available),
    (errors.NotEnoughReplicasAfterAppendError, ErrorCode.not_enough_replicas_after_append),
    (errors.NotEnoughReplicasError, ErrorCode.not_enough_replicas),
    (errors.UnknownPartitionError, ErrorCode.unknown_topic_or_partition),
    (errors.TopicNotFoundError, ErrorCode.unknown_topic_or_partition),
    (errors.InvalidTopicError, ErrorCode.invalid_topic_exception),
    (errors.TopicExistsError, ErrorCode.topic_already_exists),
    (errors.InvalidPartitionsError, ErrorCode.invalid_partitions),
    (errors.InvalidReplicationFactorError, ErrorCode.invalid_replication_factor),
    (errors.InvalidReplicaAssignmentError, ErrorCode.invalid_replica_assignment),
    (errors.NoReassignmentInProgressError, ErrorCode.no_reassignment_in_progress),
    (errors.ControllerNotAvailableError, ErrorCode.not_controller),
    (errors.RecordTooLargeError, ErrorCode.message_too_large),
    (errors.OffsetOutOfRangeError, ErrorCode.offset_out_of_range),
    (errors.ConfigError, ErrorCode.invalid_config),
    # Retriable, as Kafka's offline log dir: a permanent code would make an idempotent
    # librdkafka producer bump its epoch and send its other partitions' possibly stored
    # batches again as new ones (DESIGN §16); retried, a batch keeps its sequence.
    (errors.StorageError, ErrorCode.kafka_storage_error),
    (errors.LeaseTimeoutError, ErrorCode.request_timed_out),
    (errors.ZooKeeperUnavailableError, ErrorCode.request_timed_out),
    (TimeoutError, ErrorCode.request_timed_out),
)


def error_code(exc: BaseException) -> ErrorCode:
    for kind, code in CODES:
        if isinstance(exc, kind):
            return code
    # Not an expected condition: keep the traceback for the operator.
    log.error("request failed unexpectedly; answered UNKNOWN_SERVER_ERROR", exc_info=exc)
    return ErrorCode.unknown_server_error
