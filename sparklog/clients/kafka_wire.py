"""A minimal blocking Kafka-protocol client: what the light consumer's protocol membership
(:mod:`sparklog.clients.protocol_member`) needs to talk to the brokers' group coordinator.

One :class:`KafkaConnection` is one TCP connection to one broker, used by one thread at a
time: a request is written as a size-prefixed frame (request header v1 or v2, following the
body's flexibility), and the answer with the same correlation id is read back within the
timeout. Versions are fixed per API (the broker serves them all, DESIGN §14), so there is no
ApiVersions round trip. Message types come from kio, like the broker's own.

Failures are :class:`~sparklog.errors.BrokerNotAvailableError` naming the broker, the API and
what happened (refused, closed, timed out, a response that does not belong to the request);
after one the connection is closed, since the stream position is unknown. Error codes inside
responses are the caller's: :func:`raise_for` turns a group-protocol code into sparklog's
exception of the same meaning.
"""

from __future__ import annotations

import importlib
import io
import itertools
import socket
import struct
from dataclasses import fields
from typing import Any

from kio.index import load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32

from sparklog import errors
from sparklog.config import parse_bootstrap_servers

__all__ = ["KafkaConnection", "bootstrap_addresses", "raise_for", "request"]

_SIZE = struct.Struct(">i")
_MAX_FRAME = 100 * 1024 * 1024


def bootstrap_addresses(servers: str) -> list[tuple[str, int]]:
    """``bootstrap.servers`` as ``(host, port)`` pairs (validated by the consumer's configs)."""
    return parse_bootstrap_servers(servers)


def request(api: str, version: int, **values: Any) -> Any:
    """The kio request entity of ``api`` (e.g. ``"join_group"``) at ``version``; fields this
    version lacks are dropped, so one call site can serve several versions."""
    module = importlib.import_module(f"kio.schema.{api}.v{version}.request")
    name = "".join(part.capitalize() for part in api.split("_")) + "Request"
    return _build(getattr(module, name), values)


def nested(api: str, version: int, type_name: str, **values: Any) -> Any:
    """A nested entity (``JoinGroupRequestProtocol``...) of ``api``'s request at ``version``."""
    module = importlib.import_module(f"kio.schema.{api}.v{version}.request")
    return _build(getattr(module, type_name), values)


def _build(entity_type: type, values: dict[str, Any]) -> Any:
    names = {f.name for f in fields(entity_type)}
    return entity_type(**{k: v for k, v in values.items() if k in names})


class KafkaConnection:
    """A blocking connection to broker ``node`` at ``host:port`` (see the module docstring)."""

    def __init__(self, node: int | str, host: str, port: int, client_id: str, timeout_s: float) -> None:
        self.node, self.host, self.port = node, host, port
        self.client_id = client_id
        self.timeout_s = timeout_s
        self._sock: socket.socket | None = None
        self._ids = itertools.count(1)

    def __repr__(self) -> str:
        return f"broker {self.node} ({self.host}:{self.port})"

    @property
    def connected(self) -> bool:
        return self._sock is not None

    def _connect(self, api: str) -> socket.socket:
        if self._sock is None:
            try:
                self._sock = socket.create_connection((self.host, self.port), timeout=min(self.timeout_s, 10.0))
            except OSError as exc:
                raise errors.BrokerNotAvailableError(
                    f"Cannot connect to {self!r} for {api}: {exc}; is the broker agent running?"
                ) from exc
            self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return self._sock

    def call(self, body: Any, timeout_s: float | None = None) -> Any:
        """Send ``body`` (a kio request entity) and return the decoded response body."""
        api_key, version = int(body.__api_key__), int(body.__version__)
        api = f"{type(body).__name__} v{version}"
        sock = self._connect(api)
        correlation_id = next(self._ids) & 0x7FFFFFFF
        header_type = RequestHeaderV2 if getattr(type(body), "__flexible__", True) else RequestHeaderV1
        buffer = io.BytesIO()
        entity_writer(header_type)(
            buffer,
            header_type(
                request_api_key=i16(api_key),
                request_api_version=i16(version),
                correlation_id=i32(correlation_id),
                client_id=self.client_id,
            ),
        )
        entity_writer(type(body))(buffer, body)
        payload = buffer.getvalue()
        try:
            sock.settimeout(timeout_s if timeout_s is not None else self.timeout_s)
            sock.sendall(_SIZE.pack(len(payload)) + payload)
            (size,) = _SIZE.unpack(self._read(sock, _SIZE.size, api))
            if not 0 <= size <= _MAX_FRAME:
                raise errors.BrokerNotAvailableError(f"{self!r} answered {api} with a frame of {size} bytes")
            answer = self._read(sock, size, api)
        except TimeoutError as exc:
            self.close()
            raise errors.BrokerNotAvailableError(
                f"{self!r} did not answer {api} within {timeout_s or self.timeout_s:.1f} s"
            ) from exc
        except OSError as exc:
            self.close()
            raise errors.BrokerNotAvailableError(f"Connection to {self!r} failed during {api}: {exc}") from exc
        except errors.BrokerNotAvailableError:
            self.close()
            raise
        response_type = load_response_schema(api_key, version)
        header, offset = entity_reader(response_type.__header_schema__)(answer, 0)
        if header.correlation_id != correlation_id:
            self.close()
            raise errors.BrokerNotAvailableError(
                f"{self!r} answered {api} with correlation id {header.correlation_id}, expected {correlation_id}"
            )
        response, _ = entity_reader(response_type)(answer, offset)
        return response

    def _read(self, sock: socket.socket, size: int, api: str) -> bytes:
        chunks: list[bytes] = []
        remaining = size
        while remaining:
            chunk = sock.recv(min(remaining, 1 << 20))
            if not chunk:
                raise errors.BrokerNotAvailableError(f"{self!r} closed the connection during {api}")
            chunks.append(chunk)
            remaining -= len(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        """Close the connection (a call blocked in another thread fails at once)."""
        sock, self._sock = self._sock, None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()


# Group-protocol error codes → sparklog's exceptions of the same meaning.
_ERRORS: dict[ErrorCode, type[errors.SparklogError]] = {
    ErrorCode.not_coordinator: errors.NotCoordinatorError,
    ErrorCode.coordinator_not_available: errors.CoordinatorNotAvailableError,
    ErrorCode.coordinator_load_in_progress: errors.CoordinatorNotAvailableError,
    ErrorCode.unknown_member_id: errors.UnknownMemberError,
    ErrorCode.illegal_generation: errors.IllegalGenerationError,
    ErrorCode.rebalance_in_progress: errors.RebalanceInProgressError,
    ErrorCode.fenced_instance_id: errors.FencedInstanceIdError,
    ErrorCode.inconsistent_group_protocol: errors.InconsistentGroupProtocolError,
    ErrorCode.invalid_group_id: errors.InvalidGroupIdError,
    ErrorCode.group_id_not_found: errors.GroupIdNotFoundError,
    ErrorCode.invalid_commit_offset_size: errors.OffsetCommitError,
    ErrorCode.unknown_topic_or_partition: errors.UnknownTopicCommitError,  # OffsetCommit: a deleted topic
    ErrorCode.request_timed_out: errors.CoordinatorNotAvailableError,
}


def raise_for(code: ErrorCode | int, what: str) -> None:
    """Nothing for NONE; else the sparklog error of ``code``, its message naming ``what``."""
    code = ErrorCode(int(code))
    if code == ErrorCode.none:
        return
    kind = _ERRORS.get(code, errors.GroupError)
    raise kind(f"{what}: {code.name.upper()}")
