"""The InitProducerId API (key 22, v0..v4): ids and epochs for idempotent producers.

Without a ``transactional_id`` any broker answers: a fresh producer id from its block
(:class:`~sparklog.metadata.producer_ids.ProducerIdBlocks`, unique cluster-wide) at epoch 0;
a producer that names its current id and epoch (v3+, KIP-360: it lost track of a sequence)
keeps its id with the epoch bumped, or gets a fresh id when the epoch would overflow. The
partitions' leaders check sequences (:mod:`sparklog.broker.producer_state`).

With a ``transactional_id`` only the id's transaction coordinator answers (NOT_COORDINATOR
elsewhere): :meth:`~sparklog.broker.transactions.coordinator.TransactionCoordinator.init_producer_id`
gives the id's producer id a new epoch, fencing the previous instance (PRODUCER_FENCED to a
KIP-360 request naming an older epoch: INVALID_PRODUCER_EPOCH below v4), aborts the
previous instance's open transaction first (CONCURRENT_TRANSACTIONS meanwhile, retriable),
and refuses a ``transaction.timeout.ms`` above ``transaction.max.timeout.ms``
(INVALID_TRANSACTION_TIMEOUT).
"""

from __future__ import annotations

import datetime
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from sparklog.broker.kafka.context import NO_THROTTLE, Api, ApiRequest, BrokerContext, build, response_module
from sparklog.broker.kafka.txn_api import txn_error_code
from sparklog.errors import CoordinatorNotAvailableError

__all__ = ["APIS"]

INIT_PRODUCER_ID_KEY = 22
_MAX_EPOCH = 2**15 - 1


class InitProducerIdBody(Protocol):
    """What the handler reads of an InitProducerId request (kio's v0..v4 request classes)."""

    @property
    def transactional_id(self) -> str | None: ...
    @property
    def transaction_timeout(self) -> datetime.timedelta: ...


def init_producer_id(request: ApiRequest[InitProducerIdBody], broker: BrokerContext) -> Any:
    module = response_module(INIT_PRODUCER_ID_KEY, request.api_version)
    body = request.body
    if body.transactional_id is not None:
        return _transactional(request, broker, module)
    if broker.producer_ids is None:
        return build(
            module.InitProducerIdResponse,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.invalid_request,
            producer_id=-1,
            producer_epoch=-1,
        )
    current_id = int(getattr(body, "producer_id", -1))
    current_epoch = int(getattr(body, "producer_epoch", -1))
    if current_id >= 0 and 0 <= current_epoch < _MAX_EPOCH - 1:
        producer_id, epoch = current_id, current_epoch + 1
    else:
        producer_id, epoch = broker.producer_ids.next_id(), 0
    return build(
        module.InitProducerIdResponse,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        producer_id=producer_id,
        producer_epoch=epoch,
    )


def _transactional(request: ApiRequest[InitProducerIdBody], broker: BrokerContext, module: Any) -> Any:
    body = request.body
    try:
        if broker.transactions is None:
            raise CoordinatorNotAvailableError("this listener has no transaction coordinator")
        producer_id, epoch = broker.transactions.init_producer_id(
            str(body.transactional_id),
            int(body.transaction_timeout.total_seconds() * 1000),
            int(getattr(body, "producer_id", -1)),
            int(getattr(body, "producer_epoch", -1)),
        )
        code = ErrorCode.none
    except Exception as exc:  # noqa: BLE001 - answered as Kafka's code
        producer_id, epoch, code = -1, -1, txn_error_code(exc, 4, request.api_version)
    return build(
        module.InitProducerIdResponse,
        throttle_time=NO_THROTTLE,
        error_code=code,
        producer_id=producer_id,
        producer_epoch=epoch,
    )


APIS = (Api(INIT_PRODUCER_ID_KEY, 0, 4, init_producer_id),)
