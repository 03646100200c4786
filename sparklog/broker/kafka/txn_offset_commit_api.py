"""TxnOffsetCommit (key 28, v0..v4): a transaction's group offsets, pending until it ends.

Answered by the group's coordinator (the leader of the group's ``__consumer_offsets``
partition; NOT_COORDINATOR elsewhere). Checks, as Kafka's group coordinator does them, plus
the transaction's state (kept in ZooKeeper, so any broker can read it): the producer id
belongs to the transactional id (INVALID_PRODUCER_ID_MAPPING), its epoch is current
(PRODUCER_FENCED; INVALID_PRODUCER_EPOCH below v3), the transaction is ongoing and holds the
group's offsets partition (AddOffsetsToTxn first: INVALID_TXN_STATE otherwise;
CONCURRENT_TRANSACTIONS while the previous one is decided and its markers are being written,
as Kafka's transaction verification answers), every
partition exists (UNKNOWN_TOPIC_OR_PARTITION for it; the topic's incarnation is kept with the
pending offsets, so they are not applied if the topic is deleted before the transaction ends).
Membership: generation -1 with no member id is a consumer using ``assign()`` and is accepted;
otherwise the group's member check is used when the broker's group coordinator offers one.
Accepted offsets are stored pending (:mod:`sparklog.broker.transactions.txn_offsets`) and
reach ``__consumer_offsets`` only when the transaction commits.
"""

from __future__ import annotations

from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from sparklog.broker.kafka.context import NO_THROTTLE, Api, ApiRequest, BrokerContext, build, response_module
from sparklog.broker.kafka.error_codes import error_code
from sparklog.broker.kafka.offset_commit_api import OffsetCommitTopic
from sparklog.broker.kafka.txn_api import TxnProducerFields, txn_error_code
from sparklog.broker.transactions.txn_offsets import store_pending_offsets
from sparklog.errors import CoordinatorNotAvailableError, InvalidTxnStateError, SparklogError, TopicNotFoundError
from sparklog.metadata.transactions import ONGOING
from sparklog.model.group_ids import validate_group_id
from sparklog.model.topic import OFFSETS_TOPIC

__all__ = ["APIS"]

TXN_OFFSET_COMMIT_KEY = 28
_NO_GENERATION = -1
_NO_EPOCH = -1


class TxnOffsetCommitBody(TxnProducerFields, Protocol):
    """What the handler reads of a TxnOffsetCommit request (kio's v0..v4 request classes)."""

    @property
    def group_id(self) -> str: ...
    @property
    def topics(self) -> tuple[OffsetCommitTopic, ...]: ...


def txn_offset_commit(request: ApiRequest[TxnOffsetCommitBody], broker: BrokerContext) -> Any:
    module = response_module(TXN_OFFSET_COMMIT_KEY, request.api_version)
    body = request.body
    wanted = [(str(t.name), p) for t in body.topics for p in t.partitions]
    codes: dict[tuple[str, int], ErrorCode] = {}
    try:
        _check(request, broker)
        accepted = []
        known = broker.replicas.topic_incarnations({t for t, _ in wanted}, max_age_ms=1000)
        for topic, partition in wanted:
            try:
                broker.replicas.check_partition(topic, int(partition.partition_index), max_age_ms=1000)
                if topic not in known:
                    raise TopicNotFoundError(f"Topic '{topic}' does not exist")
            except SparklogError as exc:
                codes[(topic, int(partition.partition_index))] = error_code(exc)
                continue
            accepted.append(
                (
                    topic,
                    int(partition.partition_index),
                    int(partition.committed_offset),
                    partition.committed_metadata or "",
                    int(getattr(partition, "committed_leader_epoch", _NO_EPOCH)),  # v2+
                )
            )
        if accepted:
            assert broker.transactions is not None
            store_pending_offsets(
                broker.transactions.store,
                str(body.transactional_id),
                int(body.producer_id),
                int(body.producer_epoch),
                str(body.group_id),
                accepted,
                {entry[0]: known[entry[0]] for entry in accepted},
            )
    except Exception as exc:  # noqa: BLE001 - every partition gets the request's error code
        code = txn_error_code(exc, 3, request.api_version)
        codes = {(t, int(p.partition_index)): code for t, p in wanted}
    topics = []
    for t in body.topics:
        partitions = tuple(
            build(
                module.TxnOffsetCommitResponsePartition,
                partition_index=p.partition_index,
                error_code=codes.get((str(t.name), int(p.partition_index)), ErrorCode.none),
            )
            for p in t.partitions
        )
        topics.append(build(module.TxnOffsetCommitResponseTopic, name=t.name, partitions=partitions))
    return build(module.TxnOffsetCommitResponse, throttle_time=NO_THROTTLE, topics=tuple(topics))


def _check(request: ApiRequest[TxnOffsetCommitBody], broker: BrokerContext) -> None:
    body = request.body
    group_id = validate_group_id(str(body.group_id))
    if broker.groups is None or broker.transactions is None:
        raise CoordinatorNotAvailableError("this listener has no group or transaction coordinator")
    partition = broker.groups.check_coordinator(group_id)
    generation = int(getattr(body, "generation_id", _NO_GENERATION))
    member_id = str(getattr(body, "member_id", "") or "")
    if generation != _NO_GENERATION or member_id:
        # The group membership APIs provide check_member(group, member, generation, instance):
        # a member of an older generation or an unknown member is refused as Kafka refuses it
        # (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID). Until a broker has it,
        # such commits are accepted on the transaction's checks alone.
        check_member = getattr(broker.groups, "check_member", None)
        if check_member is not None:
            check_member(group_id, member_id, generation, getattr(body, "group_instance_id", None))
    transactions = broker.transactions
    record, _version = transactions.current_record(
        str(body.transactional_id), int(body.producer_id), int(body.producer_epoch)
    )
    transactions.refuse_while_completing(record)
    if record.state != ONGOING or [OFFSETS_TOPIC, partition] not in record.partitions:
        raise InvalidTxnStateError(
            f"group {group_id!r} is not in an ongoing transaction of {body.transactional_id!r} (state "
            f"{record.state}); call AddOffsetsToTxn (send_offsets_to_transaction) first"
        )


APIS = (Api(TXN_OFFSET_COMMIT_KEY, 0, 4, txn_offset_commit),)
