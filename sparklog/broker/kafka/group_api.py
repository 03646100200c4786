"""Kafka's classic consumer-group protocol on the wire (DESIGN §8, §14): JoinGroup (11) v0–v9,
SyncGroup (14) v0–v5, Heartbeat (12) v0–v4, LeaveGroup (13) v0–v5.

Only the group's coordinator answers (NOT_COORDINATOR elsewhere: the client finds it
again); the protocol itself is :mod:`sparklog.broker.groups.group`. JoinGroup v4+ without a
member id gets MEMBER_ID_REQUIRED with an id to come back with (KIP-394); v0 has no
rebalance timeout (the session timeout is used, as Kafka does). JoinGroup and SyncGroup are
answered when the join phase / the leader's assignment completes; the listener reads the
connection's next requests meanwhile.
"""

from __future__ import annotations

import datetime
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from sparklog.broker.groups.coordinator import BrokerGroups
from sparklog.broker.groups.group import JoinRequest, JoinResult, SyncRequest, SyncResult
from sparklog.broker.kafka.context import (
    NO_THROTTLE,
    Api,
    ApiRequest,
    BrokerContext,
    Deferred,
    build,
    response_module,
)
from sparklog.broker.kafka.error_codes import error_code
from sparklog.errors import SparklogError

__all__ = ["APIS", "groups_of", "host_of"]

JOIN_GROUP_KEY, HEARTBEAT_KEY, LEAVE_GROUP_KEY, SYNC_GROUP_KEY = 11, 12, 13, 14


class JoinGroupProtocol(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def metadata(self) -> bytes: ...


class JoinGroupBody(Protocol):
    """What the handler reads of a JoinGroup request (kio's v0..v9 request classes);
    ``rebalance_timeout`` is v1+'s, read only there."""

    @property
    def group_id(self) -> str: ...
    @property
    def session_timeout(self) -> datetime.timedelta: ...
    @property
    def rebalance_timeout(self) -> datetime.timedelta: ...
    @property
    def member_id(self) -> str: ...
    @property
    def protocol_type(self) -> str: ...
    @property
    def protocols(self) -> tuple[JoinGroupProtocol, ...]: ...


class SyncGroupAssignment(Protocol):
    @property
    def member_id(self) -> str: ...
    @property
    def assignment(self) -> bytes: ...


class HeartbeatBody(Protocol):
    """What the handler reads of a Heartbeat request (kio's v0..v4 request classes): a
    member of a generation of a group."""

    @property
    def group_id(self) -> str: ...
    @property
    def generation_id(self) -> int: ...
    @property
    def member_id(self) -> str: ...


class SyncGroupBody(HeartbeatBody, Protocol):
    """What the handler reads of a SyncGroup request (kio's v0..v5 request classes)."""

    @property
    def assignments(self) -> tuple[SyncGroupAssignment, ...]: ...


class MemberIdentity(Protocol):
    @property
    def member_id(self) -> str: ...
    @property
    def group_instance_id(self) -> str | None: ...


class LeaveGroupBody(Protocol):
    """What the handler reads of a LeaveGroup request (kio's v0..v5 request classes).

    ``member_id`` exists up to v2 and ``members`` from v3 (the batched form): each is read
    only in the versions that have it."""

    @property
    def group_id(self) -> str: ...
    @property
    def member_id(self) -> str: ...
    @property
    def members(self) -> tuple[MemberIdentity, ...]: ...


def groups_of(broker: BrokerContext) -> BrokerGroups:
    if broker.groups is None:
        raise SparklogError("this listener has no group coordinator")
    return broker.groups


def _ms(value: datetime.timedelta) -> int:
    return int(value.total_seconds() * 1000)


def start_join_group(request: ApiRequest[JoinGroupBody], broker: BrokerContext) -> Deferred:
    return Deferred(lambda: join_group(request, broker))


def join_group(request: ApiRequest[JoinGroupBody], broker: BrokerContext) -> Any:
    module = response_module(JOIN_GROUP_KEY, request.api_version)
    body = request.body
    member_id = str(body.member_id)
    try:
        session_timeout_ms = _ms(body.session_timeout)
        joining = JoinRequest(
            member_id=member_id,
            instance_id=getattr(body, "group_instance_id", None),
            client_id=request.client_id or "",
            client_host=host_of(request.peer),
            session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=_ms(body.rebalance_timeout) if request.api_version >= 1 else session_timeout_ms,
            protocol_type=str(body.protocol_type),
            protocols=tuple((str(p.name), bytes(p.metadata)) for p in body.protocols),
            require_known_member_id=request.api_version >= 4,
        )
        result = groups_of(broker).join(str(body.group_id), joining)
    except Exception as exc:  # noqa: BLE001 - answered as the request's error code
        result = JoinResult(error_code(exc), member_id)
    return build(
        module.JoinGroupResponse,
        throttle_time=NO_THROTTLE,
        error_code=result.error,
        generation_id=result.generation,
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name or ("" if request.api_version < 7 else None),
        leader=result.leader,
        skip_assignment=result.skip_assignment,
        member_id=result.member_id,
        members=tuple(
            build(module.JoinGroupResponseMember, member_id=m, group_instance_id=i, metadata=meta)
            for m, i, meta in result.members
        ),
    )


def start_sync_group(request: ApiRequest[SyncGroupBody], broker: BrokerContext) -> Deferred:
    return Deferred(lambda: sync_group(request, broker))


def sync_group(request: ApiRequest[SyncGroupBody], broker: BrokerContext) -> Any:
    module = response_module(SYNC_GROUP_KEY, request.api_version)
    body = request.body
    try:
        sync = SyncRequest(
            member_id=str(body.member_id),
            instance_id=getattr(body, "group_instance_id", None),
            generation=int(body.generation_id),
            protocol_type=getattr(body, "protocol_type", None),
            protocol_name=getattr(body, "protocol_name", None),
            assignments=tuple((str(a.member_id), bytes(a.assignment)) for a in body.assignments),
        )
        result = groups_of(broker).sync(str(body.group_id), sync)
    except Exception as exc:  # noqa: BLE001 - answered as the request's error code
        result = SyncResult(error_code(exc))
    return build(
        module.SyncGroupResponse,
        throttle_time=NO_THROTTLE,
        error_code=result.error,
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name,
        assignment=result.assignment,
    )


def heartbeat(request: ApiRequest[HeartbeatBody], broker: BrokerContext) -> Any:
    module = response_module(HEARTBEAT_KEY, request.api_version)
    body = request.body
    try:
        code = groups_of(broker).heartbeat(
            str(body.group_id),
            str(body.member_id),
            getattr(body, "group_instance_id", None),
            int(body.generation_id),
        )
    except Exception as exc:  # noqa: BLE001 - answered as the request's error code
        code = error_code(exc)
    return build(module.HeartbeatResponse, throttle_time=NO_THROTTLE, error_code=code)


def leave_group(request: ApiRequest[LeaveGroupBody], broker: BrokerContext) -> Any:
    module = response_module(LEAVE_GROUP_KEY, request.api_version)
    body = request.body
    if request.api_version >= 3:
        leaving = [(str(m.member_id), m.group_instance_id) for m in body.members]
    else:
        leaving = [(str(body.member_id), None)]
    try:
        codes = groups_of(broker).leave(str(body.group_id), leaving)
        top = ErrorCode.none if request.api_version >= 3 else codes[0]
    except Exception as exc:  # noqa: BLE001 - answered as the request's error code
        top, codes = error_code(exc), []
    members = ()
    if request.api_version >= 3:
        members = tuple(
            build(module.MemberResponse, member_id=m, group_instance_id=i, error_code=c)
            for (m, i), c in zip(leaving, codes, strict=False)
        )
    return build(module.LeaveGroupResponse, throttle_time=NO_THROTTLE, error_code=top, members=members)


def host_of(peer: str) -> str:
    """Kafka shows a member's host as ``/<address>``."""
    host = peer.rsplit(":", 1)[0] if peer else ""
    return f"/{host.strip('[]')}" if host else ""


APIS = (
    Api(JOIN_GROUP_KEY, 0, 9, join_group, start_join_group),
    Api(SYNC_GROUP_KEY, 0, 5, sync_group, start_sync_group),
    Api(HEARTBEAT_KEY, 0, 4, heartbeat),
    Api(LEAVE_GROUP_KEY, 0, 5, leave_group),
)
