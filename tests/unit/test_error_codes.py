"""The error-code table: sparklog's errors as the Kafka codes a client acts on.

A Kafka client decides from the code alone whether to send a request again, so the table
must agree with the one retriable marker of the error tree, and its first-match order must
never hide a specific entry behind a general one."""

from __future__ import annotations

import logging

import pytest
from kio.schema.errors import ErrorCode

from sparklog import errors
from sparklog.broker.kafka.error_codes import CODES, error_code
from sparklog.broker.kafka.records import CorruptBatchError

# Where sparklog's retriable marker and Kafka's retriable flag differ on purpose.
RETRIABLE_ON_THE_WIRE_ONLY = {
    # A Kafka client refreshes its metadata and retries (the topic may be being created);
    # a library caller asked for a topic that does not exist.
    errors.TopicNotFoundError,
    errors.UnknownPartitionError,
    # Kafka retries a batch corrupted in transit; the codec's error is about the bytes sent.
    CorruptBatchError,
    # A Kafka client sends a batch the store failed again under its sequence (the broker
    # finds out whether it landed); a library caller is told the store failed.
    errors.StorageError,
    # Python's own, not in sparklog's tree.
    TimeoutError,
}
# Raised by clients about brokers they cannot reach; never answered by a broker.
CLIENT_SIDE_ONLY = {errors.BrokerNotAvailableError}


def _is_retriable(kind: type[BaseException]) -> bool:
    return issubclass(kind, errors.RetriableError)


def test_retriable_errors_map_to_retriable_codes_and_the_rest_do_not() -> None:
    differing = [
        f"{kind.__name__} -> {code.name}: ours {_is_retriable(kind)}, Kafka's {code.retriable}"
        for kind, code in CODES
        if _is_retriable(kind) != code.retriable and kind not in RETRIABLE_ON_THE_WIRE_ONLY
    ]
    assert differing == []


def test_the_documented_differences_still_differ() -> None:
    stale = [
        kind.__name__
        for kind, code in CODES
        if kind in RETRIABLE_ON_THE_WIRE_ONLY and _is_retriable(kind) == code.retriable
    ]
    assert stale == [], "remove these from RETRIABLE_ON_THE_WIRE_ONLY"


def test_no_entry_is_hidden_behind_a_more_general_earlier_one() -> None:
    hidden = [
        f"{later.__name__} (row {j}) behind {earlier.__name__} (row {i})"
        for i, (earlier, _) in enumerate(CODES)
        for j, (later, _) in enumerate(CODES)
        if i < j and issubclass(later, earlier)
    ]
    assert hidden == []


def test_every_retriable_error_a_broker_raises_has_a_code() -> None:
    retriable = [getattr(errors, n) for n in errors.__all__ if n != "RetriableError"]
    unmapped = [
        kind.__name__
        for kind in retriable
        if _is_retriable(kind)
        and kind not in CLIENT_SIDE_ONLY
        and not any(issubclass(kind, mapped) for mapped, _ in CODES)
    ]
    assert unmapped == []


@pytest.mark.parametrize(
    ("raised", "expected"),
    [
        (errors.NotLeaderError("moved"), ErrorCode.not_leader_or_follower),
        (errors.FencedError("stale lease"), ErrorCode.not_leader_or_follower),
        (errors.NotEnoughReplicasAfterAppendError("isr shrank"), ErrorCode.not_enough_replicas_after_append),
        (errors.NotEnoughReplicasError("isr"), ErrorCode.not_enough_replicas),
        (errors.FencedInstanceIdError("old instance"), ErrorCode.fenced_instance_id),
        (errors.UnknownMemberError("gone"), ErrorCode.unknown_member_id),
        (
            errors.UnknownTopicCommitError("deleted", partitions=frozenset({("t", 0)})),
            ErrorCode.unknown_topic_or_partition,
        ),
        (errors.DeleteRecordsOffsetError("beyond the end"), ErrorCode.offset_out_of_range),
        (errors.ZooKeeperUnavailableError("electing"), ErrorCode.request_timed_out),
        (errors.StorageError("503 SlowDown"), ErrorCode.kafka_storage_error),
        (errors.RetriesExhaustedError("lost every race"), ErrorCode.kafka_storage_error),
    ],
)
def test_the_most_specific_class_decides(raised: BaseException, expected: ErrorCode) -> None:
    assert error_code(raised) is expected


def test_an_unexpected_error_is_unknown_server_error_with_its_traceback_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.ERROR, logger="sparklog.broker.kafka.error_codes"):
        code = error_code(KeyError("a bug"))
    assert code is ErrorCode.unknown_server_error
    assert [r.exc_info is not None for r in caplog.records] == [True]
