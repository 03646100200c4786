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
waits for their commits, up to the request's timeout, holding no thread
(:class:`DelayedProduce`). ``acks=0`` gets no response at all, as in Kafka.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from sparklog.broker.kafka.context import (
    METADATA_MAX_AGE_MS,
    NO_RESPONSE,
    NO_THROTTLE,
    Api,
    ApiRequest,
    BrokerContext,
    build,
    led_partition,
    response_module,
    wait_for_response,
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
    return wait_for_response(start_produce(request, broker))


def start_produce(request: ApiRequest, broker: BrokerContext) -> DelayedProduce:
    """Check and queue the request's batches; the returned :class:`DelayedProduce` answers
    once their commits are (the connection's next request is read only then: its
    sequences may depend on this one's outcome, as with Kafka's muted channel)."""
    body = request.body
    acks = _ACKS.get(int(body.acks))
    timeout_ms = max(0, int(body.timeout.total_seconds() * 1000))
    results: dict[tuple[str, int], _Outcome] = {}
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
    for (topic, _p), items in queued.items():
        assert appender is not None
        # Duplicates are answered from the producer state, not appended.
        appender.append(topic, [i for i in items if not i.is_done and i.duplicate_of is None])
    return DelayedProduce(request, acks, timeout_ms, results, queued)


_Outcome = tuple[ErrorCode, int, int, str | None]


class DelayedProduce:
    """A Produce request until every queued batch is answered or the request's timeout
    passed (then the unanswered partitions get REQUEST_TIMED_OUT)."""

    recheck_s: float | None = None

    def __init__(
        self,
        request: ApiRequest,
        acks: Acks | None,
        timeout_ms: int,
        results: dict[tuple[str, int], _Outcome],
        queued: dict[tuple[str, int], list[PendingAppend]],
    ) -> None:
        self.request = request
        self.deadline_s = time.monotonic() + timeout_ms / 1000 + 1
        self._acks = acks
        self._timeout_ms = timeout_ms
        self._results = results
        self._queued = queued
        # Without idempotent batches the connection's next requests may share the commit
        # round; an idempotent batch's successor waits for its outcome (a failed batch
        # followed by an appended one would leave a sequence gap).
        self.pipelined = not any(i.batch is not None and i.batch.idempotent for items in queued.values() for i in items)

    def try_complete(self) -> Any | None:
        if self._acks == "0":
            return NO_RESPONSE
        if self._unanswered() is not None:
            return None
        return self._answer()

    def on_progress(self, wake: Callable[[], None]) -> None:
        item = self._unanswered()
        if item is None:
            wake()
        else:
            item.on_done(wake)

    def expire(self) -> Any:
        return self._answer()

    def _answer(self) -> Any:
        """The response from every batch's outcome so far (REQUEST_TIMED_OUT where none yet)."""
        for key, items in self._queued.items():
            self._results[key] = _outcome(items, self._timeout_ms)
        if self._acks == "0":
            return NO_RESPONSE
        return _response(self.request, self._results)

    def _unanswered(self) -> PendingAppend | None:
        return next((i for items in self._queued.values() for i in items if not i.is_done), None)


def _response(request: ApiRequest, results: dict[tuple[str, int], _Outcome]) -> Any:
    module = response_module(PRODUCE_KEY, request.api_version)
    topics = []
    for topic_data in request.body.topic_data:
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
    original = states.check(table, partition, leader_epoch, sequenced, item)
    if isinstance(original, int):
        item.finish(original)
        return
    if original is not None:  # the same batch is being appended: answer as it ends
        item.duplicate_of = copied = original
        copied.on_done(lambda: item.finish(copied.base_offset, copied.log_append_time_ms, copied.error))
        return
    item.producer = sequenced

    def committed(base_offset: int) -> None:
        states.appended(topic, partition, leader_epoch, sequenced, base_offset)

    item.on_commit = committed


def _outcome(items: list[PendingAppend], timeout_ms: int) -> _Outcome:
    """One partition's answer: the first batch's base offset, or the first error."""
    for item in items:
        if not item.is_done:
            return ErrorCode.request_timed_out, -1, -1, f"not committed within {timeout_ms} ms"
        if item.error is not None:
            return error_code(item.error), -1, -1, str(item.error)
    if not items:
        return ErrorCode.none, -1, -1, None
    return ErrorCode.none, items[0].base_offset, items[0].log_append_time_ms, None


APIS = (Api(PRODUCE_KEY, 3, 9, produce, start_produce),)
