"""The Produce API (key 0, v3..v9): record batches from Kafka producers into the leader's log.

The handler decodes, hands each partition's bytes to the partition
(:meth:`~sparklog.broker.partition.LeaderPartition.prepare_append`: leadership, then every
batch checked per batch — magic 2 and CRC (CORRUPT_MESSAGE), the topic's
``max.message.bytes`` (MESSAGE_TOO_LARGE), a transaction's first batch verified against
its transaction (KIP-890: INVALID_TXN_STATE / INVALID_PRODUCER_EPOCH), an idempotent
batch's sequence (a duplicate answered with the offsets it got the first time)) and encodes.

A partition that fails a check gets its error code and nothing of it is appended; the
others of the same request go on. The valid ones are queued to the broker's
:class:`~sparklog.broker.leader_appender.LeaderAppender` (group commit) and the response
waits for their commits, up to the request's timeout, holding no thread
(:class:`DelayedProduce`). ``acks=0`` gets no response at all, as in Kafka.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from sparklog.broker.kafka.context import (
    NO_RESPONSE,
    Api,
    ApiRequest,
    BrokerContext,
    EncodedResponse,
    led_partition,
    wait_for_response,
)
from sparklog.broker.kafka.error_codes import error_code
from sparklog.broker.kafka.produce_codec import ProduceRequestBody, encode_produce_response
from sparklog.broker.pending_append import PendingAppend
from sparklog.config import Acks

__all__ = ["APIS"]

PRODUCE_KEY = 0
_ACKS: dict[int, Acks] = {0: "0", 1: "1", -1: "all"}


def produce(request: ApiRequest[ProduceRequestBody], broker: BrokerContext) -> Any:
    return wait_for_response(start_produce(request, broker))


def start_produce(request: ApiRequest[ProduceRequestBody], broker: BrokerContext) -> DelayedProduce:
    """Check and queue the request's batches; the returned :class:`DelayedProduce` answers
    once their commits are (the connection's next request is read only then: its
    sequences may depend on this one's outcome, as with Kafka's muted channel)."""
    body = request.body
    acks = _ACKS.get(int(body.acks))
    timeout_ms = max(0, body.timeout_ms)
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
                partition = led_partition(broker, topic, key[1])
                queued[key] = partition.prepare_append(partition_data.records or b"", acks, timeout_ms)
            except Exception as exc:  # noqa: BLE001 - becomes this partition's error code
                results[key] = (error_code(exc), -1, -1, str(exc))
    for (topic, _p), items in queued.items():
        assert broker.partitions is not None
        # Duplicates are answered from the producer state, not appended.
        broker.partitions.appender.append(topic, [i for i in items if not i.is_done and i.duplicate_of is None])
    return DelayedProduce(request, acks, timeout_ms, results, queued)


_Outcome = tuple[int, int, int, str | None]  # error code, base offset, log append time, message


class DelayedProduce:
    """A Produce request until every queued batch is answered or the request's timeout
    passed (then the unanswered partitions get REQUEST_TIMED_OUT)."""

    recheck_s: float | None = None
    # Its answer is its batches' outcomes, encoded: the committer answering a round runs it
    # at once rather than waking a handler thread for each request of the round.
    completes_on_wake = True

    def __init__(
        self,
        request: ApiRequest[ProduceRequestBody],
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


def _response(request: ApiRequest[ProduceRequestBody], results: dict[tuple[str, int], _Outcome]) -> EncodedResponse:
    topics = [
        (
            topic_data.name,
            [
                (partition_data.index, *results[(topic_data.name, partition_data.index)])
                for partition_data in topic_data.partition_data
            ],
        )
        for topic_data in request.body.topic_data
    ]
    return EncodedResponse(encode_produce_response(request.api_version, request.correlation_id, topics))


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
