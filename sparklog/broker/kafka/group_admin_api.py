"""Group administration on the wire (DESIGN §8, §14): DescribeGroups (15) v0–v6, ListGroups (16)
v0–v5, DeleteGroups (42) v0–v2, for groups of both protocols (classic and KIP-848's consumer
protocol: ListGroups v5 answers the group type and filters by it; DescribeGroups describes a
consumer-protocol group as Kafka 4 does, protocol type ``consumer``, the assignor as its
protocol, subscriptions and assignments in the classic encoding).

One group system: besides the groups this broker coordinates through the protocol, the
answers include sparklog's other groups whose offsets partition it leads — groups of light
consumers (ZooKeeper membership) and groups that only have committed offsets (Spark jobs,
standalone commits) — as sparklog's own tools see them (``sparklog groups``). Their members'
subscriptions and assignments are encoded in Kafka's consumer protocol, so admin clients
decode them as usual. A group that does not exist is ``Dead`` (DescribeGroups v0–v5) or
GROUP_ID_NOT_FOUND (v6); DeleteGroups refuses groups with members (NON_EMPTY_GROUP).
"""

from __future__ import annotations

from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from sparklog.broker.groups.coordinator import GroupView
from sparklog.broker.kafka.context import NO_THROTTLE, Api, ApiRequest, BrokerContext, build, response_module
from sparklog.broker.kafka.error_codes import error_code
from sparklog.broker.kafka.group_api import groups_of
from sparklog.errors import GroupNotEmptyError, NotCoordinatorError, SparklogError
from sparklog.group.consumer_protocol import CONSUMER, encode_assignment, encode_subscription
from sparklog.group.deletion import delete_group
from sparklog.model.topic import OFFSETS_TOPIC

__all__ = ["APIS"]

DESCRIBE_GROUPS_KEY, LIST_GROUPS_KEY, DELETE_GROUPS_KEY = 15, 16, 42
_NOT_REQUESTED = -(2**31)  # Kafka's "authorized operations not requested"
_CLASSIC = "classic"


class DescribeGroupsBody(Protocol):
    """What the handler reads of a DescribeGroups request (kio's v0..v6 request classes)."""

    @property
    def groups(self) -> tuple[str, ...]: ...


class ListGroupsBody(Protocol):
    """What the handler reads of a ListGroups request (kio's v0..v5 request classes): only
    the filters of v4+ (``states_filter``) and v5 (``types_filter``), where they exist."""


class DeleteGroupsBody(Protocol):
    """What the handler reads of a DeleteGroups request (kio's v0..v2 request classes)."""

    @property
    def groups_names(self) -> tuple[str, ...]: ...


def _view(broker: BrokerContext, group_id: str) -> GroupView | None:
    """The group as this broker (its coordinator) knows it; None when it does not exist."""
    groups = groups_of(broker)
    groups.check_coordinator(group_id)
    view = groups.view(group_id)
    if view is not None:
        return view
    registry = groups.library.registry
    if not registry.exists(group_id) and not groups.offsets.committed_all(group_id):
        return None
    snap = registry.snapshot(group_id)
    record = snap.record
    members = tuple(
        (
            m.member_id,
            m.instance_id,
            m.client_id,
            m.host,
            encode_subscription(m.topics),
            encode_assignment(record.partitions_of(m.key) if record is not None else []),
        )
        for m in snap.members.values()
    )
    protocol = record.protocol if record is not None and snap.active else ""
    return GroupView(group_id, snap.state, CONSUMER if snap.active else "", protocol, members)


def describe_groups(request: ApiRequest[DescribeGroupsBody], broker: BrokerContext) -> Any:
    module = response_module(DESCRIBE_GROUPS_KEY, request.api_version)
    described = []
    for group_id in request.body.groups:
        code, message, view = ErrorCode.none, None, None
        try:
            view = _view(broker, str(group_id))
            if view is None and request.api_version >= 6:
                code, message = ErrorCode.group_id_not_found, f"Group {group_id} not found."
        except Exception as exc:  # noqa: BLE001 - answered as this group's error code
            code, message = error_code(exc), str(exc)
        described.append(
            build(
                module.DescribedGroup,
                error_code=code,
                error_message=message,
                group_id=group_id,
                group_state=view.state if view is not None else "Dead",
                protocol_type=view.protocol_type if view is not None else "",
                protocol_data=view.protocol if view is not None else "",
                members=tuple(
                    build(
                        module.DescribedGroupMember,
                        member_id=m,
                        group_instance_id=i,
                        client_id=c,
                        client_host=h,
                        member_metadata=meta,
                        member_assignment=assignment,
                    )
                    for m, i, c, h, meta, assignment in (view.members if view is not None else ())
                ),
                authorized_operations=_NOT_REQUESTED,
            )
        )
    return build(module.DescribeGroupsResponse, throttle_time=NO_THROTTLE, groups=tuple(described))


def list_groups(request: ApiRequest[ListGroupsBody], broker: BrokerContext) -> Any:
    module = response_module(LIST_GROUPS_KEY, request.api_version)
    body = request.body
    states = {str(s) for s in getattr(body, "states_filter", ()) or ()}
    types = {str(t).lower() for t in getattr(body, "types_filter", ()) or ()}
    code, listed = ErrorCode.none, []
    try:
        listed = [g for g in _coordinated_groups(broker) if not types or g[3] in types]
    except Exception as exc:  # noqa: BLE001 - answered as the request's error code
        code = error_code(exc)
    return build(
        module.ListGroupsResponse,
        throttle_time=NO_THROTTLE,
        error_code=code,
        groups=tuple(
            build(module.ListedGroup, group_id=g, protocol_type=t, group_state=s, group_type=kind)
            for g, t, s, kind in listed
            if not states or s in states
        ),
    )


def _coordinated_groups(broker: BrokerContext) -> list[tuple[str, str, str, str]]:
    """``(group, protocol type, state, group type)`` of every group whose offsets partition this
    broker leads; the group type is Kafka's: ``consumer`` (KIP-848's protocol) or ``classic``."""
    groups = groups_of(broker)
    if OFFSETS_TOPIC not in broker.replicas.list_topics():
        return []  # listing never creates the offsets topic
    result = {
        v.group_id: (v.group_id, v.protocol_type or CONSUMER, v.state, v.group_type) for v in groups.coordinated()
    }
    for group_id in groups.library.registry.list_groups():
        if group_id in result:
            continue
        try:
            groups.check_coordinator(group_id)
        except NotCoordinatorError:
            continue
        snap = groups.library.registry.snapshot(group_id)
        result[group_id] = (group_id, CONSUMER, snap.state, _CLASSIC)
    return sorted(result.values())


def delete_groups(request: ApiRequest[DeleteGroupsBody], broker: BrokerContext) -> Any:
    module = response_module(DELETE_GROUPS_KEY, request.api_version)
    results = []
    for group_id in request.body.groups_names:
        code = ErrorCode.none
        try:
            groups = groups_of(broker)
            groups.check_coordinator(str(group_id))
            view = groups.view(str(group_id))
            if view is not None and view.members:
                raise GroupNotEmptyError(f"Group {group_id} has {len(view.members)} member(s)")
            delete_group(groups.library, str(group_id))
            groups.forget(str(group_id))
        except SparklogError as exc:
            code = error_code(exc)
        results.append(build(module.DeletableGroupResult, group_id=group_id, error_code=code))
    return build(module.DeleteGroupsResponse, throttle_time=NO_THROTTLE, results=tuple(results))


APIS = (
    Api(DESCRIBE_GROUPS_KEY, 0, 6, describe_groups),
    Api(LIST_GROUPS_KEY, 0, 5, list_groups),
    Api(DELETE_GROUPS_KEY, 0, 2, delete_groups),
)
