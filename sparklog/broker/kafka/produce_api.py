"""The Produce API (key 0, v3..v9): record batches from Kafka producers into the leader's log.

Per partition of a request, before anything is queued:

* the topic and partition exist (UNKNOWN_TOPIC_OR_PARTITION), this broker leads it
  (NOT_LEADER_OR_FOLLOWER; the appender checks again under the commit's leader epoch);
* every batch is magic 2 with a valid CRC (CORRUPT_MESSAGE) and at most the topic's
  ``max.message.bytes`` on the wire (MESSAGE_TOO_LARGE), as Kafka's broker checks a batch;
* a transactional batch that starts its producer's transaction in this partition is
  verified against the transaction's state in ZooKeeper (Kafka's KIP-890 check: the
  transaction is ongoing under this producer epoch and holds the partition;
  INVALID_TXN_STATE / INVALID_PRODUCER_EPOCH otherwise), so a zombie or a late batch cannot
  open a transaction no coordinator will end; idempotent batches go through :class:`~sparklog.broker.kafka.producer_state.ProducerStates`
  (sequence checks; a duplicate is answered with the offsets it got the first time).

A partition that fails a check gets its error code and nothing of it is appended; the
others of the same request go on. The valid ones are queued to the broker's
:class:`~sparklog.broker.leader_appender.LeaderAppender` (group commit) and the response
waits for their commits, up to the request's timeout. ``acks=0`` gets no response at all,
as in Kafka. What a request appended is counted in the broker's metrics (Kafka's
BytesInPerSec and MessagesInPerSec per topic) once its commit succeeded.
"""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from sparklog.broker.kafka.context import (
    METADATA_MAX_AGE_MS,
    NO_RESPONSE,
    NO_THROTTLE,
    Api,
    ApiRequest,
    BrokerContext,
    Deferred,
    Partitions,
    build,
    led_partition,
    response_module,
)
from sparklog.broker.kafka.error_codes import error_code
from sparklog.broker.kafka.records import RecordBatch, TransactionalBatchError, check_batches
from sparklog.broker.leader_appender import PendingAppend
from sparklog.broker.producer_state import ProducerBatch, ProducerStates
from sparklog.config import Acks
from sparklog.errors import NotLeaderError, RecordTooLargeError

__all__ = ["APIS"]

PRODUCE_KEY = 0
_ACKS: dict[int, Acks] = {0: "0", 1: "1", -1: "all"}


def produce(request: ApiRequest, broker: BrokerContext) -> Any:
    return start_produce(request, broker).finish()


def start_produce(request: ApiRequest, broker: BrokerContext) -> Deferred:
    """Check and queue the request's batches (in the connection's order); the returned
    :class:`Deferred` waits for their commits and builds the response. Requests carrying
    idempotent batches are ``ordered`` by partition: their sequences were checked against the
    batches still pending, so a later request of the connection to one of those partitions
    starts only once this one is answered (requests to other partitions go on meanwhile, and
    share commit rounds)."""
    body = request.body
    module = response_module(PRODUCE_KEY, request.api_version)
    acks = _ACKS.get(int(body.acks))
    timeout_ms = max(0, int(body.timeout.total_seconds() * 1000))
    results: dict[tuple[str, int], tuple[ErrorCode, int, int, str | None]] = {}
    queued: dict[tuple[str, int], list[PendingAppend]] = {}
    for topic_data in body.topic_data:
        topic = topic_data.name
        for partition_data in topic_data.partition_data:
            key = (topic, int(partition_data.index))
            if acks is None:
                results[key] = (ErrorCode.invalid_required_acks, -1, -1, f"acks={body.acks} is not 0, 1 or -1")
                continue
            try:
                queued[key] = _prepare(broker, topic, key[1], partition_data.records or b"", acks, timeout_ms)
            except Exception as exc:  # noqa: BLE001 - becomes this partition's error code
                results[key] = (error_code(exc), -1, -1, str(exc))
    appender = broker.appender
    appended: dict[tuple[str, int], list[PendingAppend]] = {}
    for key, items in queued.items():
        assert appender is not None
        appended[key] = [i for i in items if not i.done.is_set()]  # duplicates are answered
        appender.append(key[0], appended[key])
    ordered = frozenset(key for key, items in queued.items() if any(i.producer is not None for i in items))

    def finish() -> Any:
        response = _respond(request, module, acks, timeout_ms, results, queued)
        _count_appended(broker, appended, results)
        return response

    return Deferred(finish, ordered)


def _count_appended(
    broker: BrokerContext,
    appended: dict[tuple[str, int], list[PendingAppend]],
    results: dict[tuple[str, int], tuple[ErrorCode, int, int, str | None]],
) -> None:
    """Kafka's BytesIn/MessagesIn: the batches (bytes as sent) and records a request appended,
    per partition that succeeded; duplicates answered from the producer state are not counted."""
    for (topic, partition), items in appended.items():
        if items and results[(topic, partition)][0] == ErrorCode.none:
            wire_bytes = sum(i.batch.size_bytes for i in items if i.batch is not None)
            broker.metrics.bytes_in(topic, wire_bytes, sum(i.rows for i in items))


def produce_partitions(request: ApiRequest) -> Partitions:
    """The partitions a Produce request writes (known before it starts)."""
    return frozenset((str(t.name), int(p.index)) for t in request.body.topic_data for p in t.partition_data)


def _respond(
    request: ApiRequest,
    module: Any,
    acks: Acks | None,
    timeout_ms: int,
    results: dict[tuple[str, int], tuple[ErrorCode, int, int, str | None]],
    queued: dict[tuple[str, int], list[PendingAppend]],
) -> Any:
    body = request.body
    for key, items in queued.items():
        results[key] = _outcome(items, timeout_ms)
    if acks == "0":
        return NO_RESPONSE
    topics = []
    for topic_data in body.topic_data:
        partitions = []
        for partition_data in topic_data.partition_data:
            code, base, append_ms, message = results[(topic_data.name, int(partition_data.index))]
            partitions.append(
                build(
                    module.PartitionProduceResponse,
                    index=partition_data.index,
                    error_code=code,
                    base_offset=base,
                    log_append_time=None
                    if append_ms < 0
                    else datetime.datetime.fromtimestamp(append_ms / 1000, datetime.UTC),
                    log_start_offset=-1,
                    record_errors=(),
                    error_message=message,
                )
            )
        topics.append(build(module.TopicProduceResponse, name=topic_data.name, partition_responses=tuple(partitions)))
    return build(module.ProduceResponse, responses=tuple(topics), throttle_time=NO_THROTTLE)


def _prepare(
    broker: BrokerContext, topic: str, partition: int, data: bytes, acks: Acks, timeout_ms: int
) -> list[PendingAppend]:
    replicas = broker.replicas
    if broker.appender is None:
        raise NotLeaderError(f"this listener does not serve produce requests ({topic}-{partition})")
    state = led_partition(broker, topic, partition)
    batches = check_batches(data)  # the records are read with the rest of the commit round's
    max_message_bytes = int(replicas.topic_config(topic, METADATA_MAX_AGE_MS)["max.message.bytes"])
    for batch in batches:
        if batch.size_bytes > max_message_bytes:
            raise RecordTooLargeError(
                f"a record batch of {batch.size_bytes} bytes to {topic}-{partition} exceeds the topic's "
                f"max.message.bytes={max_message_bytes}; nothing of it was appended"
            )
        if batch.transactional:
            _verify_transactional(broker, topic, partition, state.leader_epoch, batch)
    items = []
    for batch in batches:
        if not batch.count:
            continue
        item = PendingAppend(
            partition,
            None,
            acks,
            timeout_ms,
            batch.compression,
            batch=batch,
            wire=batch.raw,
            transactional=batch.transactional,
        )
        if batch.idempotent and broker.producer_states is not None:
            _check_sequence(broker, broker.producer_states, topic, partition, state.leader_epoch, batch, item)
        items.append(item)
    return items


def _verify_transactional(
    broker: BrokerContext, topic: str, partition: int, leader_epoch: int, batch: RecordBatch
) -> None:
    """A transaction's first batch in this partition must belong to an ongoing transaction
    holding the partition; later ones continue the transaction the leader already tracks."""
    if broker.transactions is None or broker.appender is None:
        raise TransactionalBatchError(f"this listener serves no transactions ({topic}-{partition})")
    if broker.appender.txns.is_open(topic, partition, leader_epoch, batch.producer_id):
        return
    broker.transactions.verify_batch(batch.producer_id, batch.producer_epoch, topic, partition)


def _check_sequence(
    broker: BrokerContext,
    states: ProducerStates,
    topic: str,
    partition: int,
    leader_epoch: int,
    batch: RecordBatch,
    item: PendingAppend,
) -> None:
    """A duplicate is answered at once with its first offsets; a new batch carries its
    sequence into the commit and records it when the commit returns."""
    sequenced = ProducerBatch(batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.count)
    table = broker.replicas.replica_table(topic, broker.broker_id)
    original = states.check(table, partition, leader_epoch, sequenced, item, item.timeout_ms / 1000)
    if original is not None:
        item.finish(original)
        return
    item.producer = sequenced

    def committed(base_offset: int) -> None:
        states.appended(topic, partition, leader_epoch, sequenced, base_offset)

    item.on_commit = committed


def _outcome(items: list[PendingAppend], timeout_ms: int) -> tuple[ErrorCode, int, int, str | None]:
    """One partition's answer: the first batch's base offset, or the first error."""
    for item in items:
        if not item.done.wait(timeout_ms / 1000 + 1):
            return ErrorCode.request_timed_out, -1, -1, f"not committed within {timeout_ms} ms"
        if item.error is not None:
            return error_code(item.error), -1, -1, str(item.error)
    if not items:
        return ErrorCode.none, -1, -1, None
    return ErrorCode.none, items[0].base_offset, items[0].log_append_time_ms, None


APIS = (Api(PRODUCE_KEY, 3, 9, produce, start_produce, produce_partitions),)
