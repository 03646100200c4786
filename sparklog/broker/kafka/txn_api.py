"""The transaction coordinator's APIs: AddPartitionsToTxn (key 24, v0..v4), AddOffsetsToTxn
(25, v0..v4) and EndTxn (26, v0..v4) — docs/transactions.md, DESIGN §14.

Each is answered by the transactional id's coordinator only (NOT_COORDINATOR elsewhere:
the client finds the coordinator again) through
:class:`~sparklog.broker.transactions.coordinator.TransactionCoordinator`. Errors are
Kafka's: INVALID_PRODUCER_ID_MAPPING (unknown id or another producer id),
PRODUCER_FENCED — INVALID_PRODUCER_EPOCH below v2, as Kafka answers old clients —,
CONCURRENT_TRANSACTIONS (the previous transaction is being completed; retriable),
INVALID_TXN_STATE (EndTxn without an ongoing transaction); AddPartitionsToTxn answers per
partition, an unknown one UNKNOWN_TOPIC_OR_PARTITION and the others
OPERATION_NOT_ATTEMPTED, and then adds nothing. v4 of AddPartitionsToTxn is the batched
broker-to-broker form (several transactional ids, ``verify_only``). The v5 forms (KIP-890
part 2: an epoch bump at every EndTxn) are not served.
"""

from __future__ import annotations

from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from sparklog.broker.kafka.context import NO_THROTTLE, Api, ApiRequest, BrokerContext, build, response_module
from sparklog.broker.kafka.error_codes import error_code
from sparklog.broker.transactions.coordinator import OperationNotAttempted, TransactionCoordinator
from sparklog.errors import CoordinatorNotAvailableError, ProducerFencedError

__all__ = ["APIS", "txn_error_code"]

ADD_PARTITIONS_KEY, ADD_OFFSETS_KEY, END_TXN_KEY = 24, 25, 26


class AddPartitionsToTxnTopic(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def partitions(self) -> tuple[int, ...]: ...


class TxnProducerFields(Protocol):
    """The transactional producer a transaction request comes from (every version)."""

    @property
    def transactional_id(self) -> str: ...
    @property
    def producer_id(self) -> int: ...
    @property
    def producer_epoch(self) -> int: ...


class AddPartitionsToTxnTransaction(TxnProducerFields, Protocol):
    @property
    def verify_only(self) -> bool: ...
    @property
    def topics(self) -> tuple[AddPartitionsToTxnTopic, ...]: ...


class AddPartitionsToTxnBody(Protocol):
    """What the handler reads of an AddPartitionsToTxn request (kio's v0..v4 request classes).

    The ``v3_and_below_*`` fields exist up to v3 and ``transactions`` from v4 (the batched
    broker-to-broker form): each is read only in the versions that have it."""

    @property
    def v3_and_below_transactional_id(self) -> str: ...
    @property
    def v3_and_below_producer_id(self) -> int: ...
    @property
    def v3_and_below_producer_epoch(self) -> int: ...
    @property
    def v3_and_below_topics(self) -> tuple[AddPartitionsToTxnTopic, ...]: ...
    @property
    def transactions(self) -> tuple[AddPartitionsToTxnTransaction, ...]: ...


class AddOffsetsToTxnBody(TxnProducerFields, Protocol):
    """What the handler reads of an AddOffsetsToTxn request (kio's v0..v4 request classes)."""

    @property
    def group_id(self) -> str: ...


class EndTxnBody(TxnProducerFields, Protocol):
    """What the handler reads of an EndTxn request (kio's v0..v4 request classes)."""

    @property
    def committed(self) -> bool: ...


def txn_error_code(exc: BaseException, fenced_code_from: int, version: int) -> ErrorCode:
    """Kafka's code for ``exc``; PRODUCER_FENCED is INVALID_PRODUCER_EPOCH below
    ``fenced_code_from`` (clients before KIP-588 do not know it)."""
    if isinstance(exc, OperationNotAttempted):
        return ErrorCode.operation_not_attempted
    if isinstance(exc, ProducerFencedError) and version < fenced_code_from:
        return ErrorCode.invalid_producer_epoch
    return error_code(exc)


def _coordinator(broker: BrokerContext) -> TransactionCoordinator:
    if broker.transactions is None:
        raise CoordinatorNotAvailableError("this listener has no transaction coordinator")
    return broker.transactions


def add_partitions_to_txn(request: ApiRequest[AddPartitionsToTxnBody], broker: BrokerContext) -> Any:
    module = response_module(ADD_PARTITIONS_KEY, request.api_version)
    body = request.body
    version = request.api_version
    if version >= 4:
        results = tuple(
            build(
                module.AddPartitionsToTxnResult,
                transactional_id=txn.transactional_id,
                topic_results=_topic_results(
                    module,
                    broker,
                    str(txn.transactional_id),
                    int(txn.producer_id),
                    int(txn.producer_epoch),
                    txn.topics,
                    version,
                    bool(txn.verify_only),
                ),
            )
            for txn in body.transactions
        )
        return build(
            module.AddPartitionsToTxnResponse,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.none,
            results_by_transaction=results,
        )
    topic_results = _topic_results(
        module,
        broker,
        str(body.v3_and_below_transactional_id),
        int(body.v3_and_below_producer_id),
        int(body.v3_and_below_producer_epoch),
        body.v3_and_below_topics,
        version,
        False,
    )
    return build(
        module.AddPartitionsToTxnResponse, throttle_time=NO_THROTTLE, results_by_topic_v3_and_below=topic_results
    )


def _topic_results(
    module: Any,
    broker: BrokerContext,
    transactional_id: str,
    producer_id: int,
    producer_epoch: int,
    topics: tuple[AddPartitionsToTxnTopic, ...],
    version: int,
    verify_only: bool,
) -> tuple[Any, ...]:
    wanted = [(str(t.name), int(p)) for t in topics for p in t.partitions]
    codes: dict[tuple[str, int], ErrorCode] = {}
    try:
        outcome = _coordinator(broker).add_partitions(
            transactional_id, producer_id, producer_epoch, wanted, verify_only=verify_only
        )
        codes = {tp: ErrorCode.none if e is None else txn_error_code(e, 2, version) for tp, e in outcome.items()}
    except Exception as exc:  # noqa: BLE001 - every partition gets the request's error code
        code = txn_error_code(exc, 2, version)
        codes = dict.fromkeys(wanted, code)
    by_topic: dict[str, list[Any]] = {}
    for topic, partition in wanted:
        by_topic.setdefault(topic, []).append(
            build(
                module.AddPartitionsToTxnPartitionResult,
                partition_index=partition,
                partition_error_code=codes[(topic, partition)],
            )
        )
    return tuple(
        build(module.AddPartitionsToTxnTopicResult, name=topic, results_by_partition=tuple(results))
        for topic, results in by_topic.items()
    )


def add_offsets_to_txn(request: ApiRequest[AddOffsetsToTxnBody], broker: BrokerContext) -> Any:
    module = response_module(ADD_OFFSETS_KEY, request.api_version)
    body = request.body
    try:
        _coordinator(broker).add_offsets(
            str(body.transactional_id), int(body.producer_id), int(body.producer_epoch), str(body.group_id)
        )
        code = ErrorCode.none
    except Exception as exc:  # noqa: BLE001 - answered as Kafka's code
        code = txn_error_code(exc, 2, request.api_version)
    return build(module.AddOffsetsToTxnResponse, throttle_time=NO_THROTTLE, error_code=code)


def end_txn(request: ApiRequest[EndTxnBody], broker: BrokerContext) -> Any:
    module = response_module(END_TXN_KEY, request.api_version)
    body = request.body
    try:
        _coordinator(broker).end_txn(
            str(body.transactional_id), int(body.producer_id), int(body.producer_epoch), bool(body.committed)
        )
        code = ErrorCode.none
    except Exception as exc:  # noqa: BLE001 - answered as Kafka's code
        code = txn_error_code(exc, 2, request.api_version)
    return build(module.EndTxnResponse, throttle_time=NO_THROTTLE, error_code=code)


APIS = (
    Api(ADD_PARTITIONS_KEY, 0, 4, add_partitions_to_txn),
    Api(ADD_OFFSETS_KEY, 0, 4, add_offsets_to_txn),
    Api(END_TXN_KEY, 0, 4, end_txn),
)
