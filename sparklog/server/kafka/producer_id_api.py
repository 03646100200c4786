"""The InitProducerId API (key 22, v0..v4): ids and epochs for idempotent producers.

Without a ``transactional_id`` any broker answers: a fresh producer id from its block
(:class:`~sparklog.metadata.producer_ids.ProducerIdBlocks`, unique cluster-wide) at epoch 0;
a producer that names its current id and epoch (v3+, KIP-360: it lost track of a sequence)
keeps its id with the epoch bumped, or gets a fresh id when the epoch would overflow. The
partitions' leaders check sequences (:mod:`sparklog.server.producer_state`).

With a ``transactional_id`` the answer is INVALID_REQUEST (a non-retriable error, so a
transactional producer fails at ``init_transactions`` instead of hanging): transactions are
not served by this version of sparklog.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from sparklog.server.kafka.context import NO_THROTTLE, Api, ApiRequest, BrokerContext, build, response_module

__all__ = ["APIS"]

INIT_PRODUCER_ID_KEY = 22
_MAX_EPOCH = 2**15 - 1


def init_producer_id(request: ApiRequest, broker: BrokerContext) -> Any:
    module = response_module(INIT_PRODUCER_ID_KEY, request.api_version)
    body = request.body
    if body.transactional_id is not None or broker.producer_ids is None:
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


APIS = (Api(INIT_PRODUCER_ID_KEY, 0, 4, init_producer_id),)
