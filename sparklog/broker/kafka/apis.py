"""Kafka requests in, Kafka responses out: header parsing and dispatch by api key + version.

The served APIs and their version ranges are the :class:`~sparklog.broker.kafka.context.Api`
rows of the API modules (``metadata_api``, ``produce_api``, ``fetch_api``, ``offsets_api``,
``producer_id_api``, ``topics_api``, ``delete_records_api``, ``configs_api``,
``coordinator_api``, ``group_api``, ``group_admin_api``, ``consumer_group_api``,
``offset_commit_api``, ``txn_api``, ``txn_markers_api``, ``txn_offset_commit_api``,
``partitions_api``, ``log_dirs_api``, ``leader_epoch_api``); ApiVersions
(18) v0..v4 advertises exactly them. An ApiVersions request of a
version outside that range is answered with UNSUPPORTED_VERSION in a v0 response listing
what is served (Kafka's rule, so a client can retry with a version both sides know). Any
other unknown api key or version is a :class:`ProtocolError`: the listener closes the
connection, as Kafka does.
"""

from __future__ import annotations

import functools
import io
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from kio.index import load_payload_module, load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType

from sparklog.broker.kafka import (
    configs_api,
    consumer_group_api,
    coordinator_api,
    delete_records_api,
    fetch_api,
    group_admin_api,
    group_api,
    leader_epoch_api,
    log_dirs_api,
    metadata_api,
    offset_commit_api,
    offsets_api,
    partitions_api,
    produce_api,
    producer_id_api,
    topics_api,
    txn_api,
    txn_markers_api,
    txn_offset_commit_api,
)
from sparklog.broker.kafka.context import (
    NO_RESPONSE,
    NO_THROTTLE,
    Api,
    ApiRequest,
    BrokerContext,
    Deferred,
    DelayedResponse,
    EncodedResponse,
    build,
    wait_for_response,
)
from sparklog.broker.kafka.produce_codec import read_produce_request
from sparklog.errors import SparklogError

__all__ = ["API_VERSIONS", "ProtocolError", "StartedRequest", "handle_request", "start_request"]

API_VERSIONS_KEY = 18

_PREFIX = struct.Struct(">hhi")


class ProtocolError(SparklogError):
    """A request the listener cannot answer (unknown api key or version, unreadable body);
    the connection is closed."""


@dataclass(frozen=True)
class StartedRequest:
    """A parsed and started request: its answer is ``response`` (known at once) or comes
    from ``delayed`` (woken, holds no thread) or ``deferred`` (blocks a thread of its own);
    :meth:`frame` encodes it (None when Kafka sends no response: Produce with acks=0)."""

    api_key: int
    api_version: int
    correlation_id: int
    response: Any = None
    delayed: DelayedResponse | None = None
    deferred: Deferred | None = None

    @property
    def pipelined(self) -> bool:
        """Whether the connection's next request may start before this one is answered."""
        return self.delayed is not None and self.delayed.pipelined

    def frame(self, response: Any) -> bytes | None:
        if response is NO_RESPONSE:
            return None
        if isinstance(response, EncodedResponse):
            return response.payload
        return _encode(self.api_key, self.api_version, self.correlation_id, response)


def handle_request(payload: bytes, cluster: BrokerContext, peer: str) -> bytes | None:
    """The response frame payload (header + body) for one request frame payload, blocking
    until it is ready; None when Kafka sends no response (Produce with acks=0)."""
    started = start_request(payload, cluster, peer)
    if started.delayed is not None:
        return started.frame(wait_for_response(started.delayed))
    if started.deferred is not None:
        return started.frame(started.deferred.finish())
    return started.frame(started.response)


def start_request(payload: bytes, cluster: BrokerContext, peer: str) -> StartedRequest:
    """Parse and start one request (in the connection's request order)."""
    if len(payload) < _PREFIX.size:
        raise ProtocolError(f"request of {len(payload)} bytes from {peer} is shorter than a request header")
    api_key, api_version, correlation_id = _PREFIX.unpack_from(payload)
    served = API_VERSIONS.get(api_key)
    if served is None:
        raise ProtocolError(f"api key {api_key} from {peer} is not served (served: {sorted(API_VERSIONS)})")
    if not served[0] <= api_version <= served[1]:
        if api_key == API_VERSIONS_KEY:
            # The body of an unknown version cannot be read; the header prefix is all we need.
            return StartedRequest(api_key, 0, correlation_id, _api_versions_body(0, ErrorCode.unsupported_version))
        raise ProtocolError(
            f"api key {api_key} version {api_version} from {peer} is not served (served: v{served[0]}..v{served[1]})"
        )
    request = _parse(payload, api_key, api_version, peer)
    api = _APIS[api_key]
    if api.start is None:
        return StartedRequest(api_key, api_version, correlation_id, api.handle(request, cluster))
    waiting = api.start(request, cluster)
    if isinstance(waiting, Deferred):
        return StartedRequest(api_key, api_version, correlation_id, deferred=waiting)
    return StartedRequest(api_key, api_version, correlation_id, delayed=waiting)


@functools.cache
def _readers(api_key: int, api_version: int) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The header and body readers of a request version (kio resolves its schema by name:
    once per version, not per request)."""
    request_type = load_request_schema(api_key, api_version)
    header_type = RequestHeaderV2 if request_type.__flexible__ else RequestHeaderV1
    if api_key == produce_api.PRODUCE_KEY:  # the hot path: read by hand (produce_codec.py)
        return entity_reader(header_type), functools.partial(read_produce_request, version=api_version)
    return entity_reader(header_type), entity_reader(request_type)


def _parse(payload: bytes, api_key: int, api_version: int, peer: str) -> ApiRequest:
    header: RequestHeaderV1 | RequestHeaderV2
    read_header, read_body = _readers(api_key, api_version)
    try:
        header, header_size = read_header(payload, 0)
        body, _ = read_body(payload, header_size)
    except Exception as exc:
        raise ProtocolError(
            f"unreadable api key {api_key} v{api_version} request from {peer}: {type(exc).__name__}: {exc}"
        ) from exc
    return ApiRequest(api_key, api_version, header.correlation_id, header.client_id, body, peer)


def _encode(api_key: int, api_version: int, correlation_id: int, response: Any) -> bytes:
    buffer = io.BytesIO()
    header_type = response.__header_schema__
    entity_writer(header_type)(buffer, header_type(correlation_id=correlation_id))
    entity_writer(type(response))(buffer, response)
    return buffer.getvalue()


def _api_versions_body(version: int, error_code: ErrorCode) -> Any:
    module = load_payload_module(API_VERSIONS_KEY, version, EntityType.response)
    return build(
        module.ApiVersionsResponse,
        error_code=error_code,
        api_keys=tuple(
            module.ApiVersion(api_key=key, min_version=low, max_version=high)
            for key, (low, high) in sorted(API_VERSIONS.items())
        ),
        throttle_time=NO_THROTTLE,
    )


class ApiVersionsBody(Protocol):
    """What :func:`_api_versions` reads of an ApiVersions request (kio's v0..v4 request
    classes): nothing, the answer depends on the header's version alone."""


def _api_versions(request: ApiRequest[ApiVersionsBody], _cluster: BrokerContext) -> Any:
    return _api_versions_body(request.api_version, ErrorCode.none)


_APIS: dict[int, Api] = {
    api.key: api
    for api in (
        Api(API_VERSIONS_KEY, 0, 4, _api_versions),
        *metadata_api.APIS,
        *produce_api.APIS,
        *fetch_api.APIS,
        *offsets_api.APIS,
        *producer_id_api.APIS,
        *topics_api.APIS,
        *delete_records_api.APIS,
        *configs_api.APIS,
        *coordinator_api.APIS,
        *group_api.APIS,
        *group_admin_api.APIS,
        *consumer_group_api.APIS,
        *offset_commit_api.APIS,
        *txn_api.APIS,
        *txn_markers_api.APIS,
        *txn_offset_commit_api.APIS,
        *partitions_api.APIS,
        *log_dirs_api.APIS,
        *leader_epoch_api.APIS,
    )
}
# api key -> (min version, max version) served.
API_VERSIONS: dict[int, tuple[int, int]] = {key: (api.min_version, api.max_version) for key, api in _APIS.items()}

# ApiVersions' response header is v0 in every version (clients read it before knowing
# whether the broker speaks flexible versions); kio's types say so, this keeps it checked.
assert load_response_schema(API_VERSIONS_KEY, 4).__header_schema__ is ResponseHeaderV0
