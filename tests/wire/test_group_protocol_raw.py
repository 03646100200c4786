"""Every served version of the group APIs once, raw (kio message types, no client library),
plus the protocol errors a client library would never provoke."""

from __future__ import annotations

import datetime
import importlib
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32Timedelta

import sparklog
from sparklog.broker.kafka.apis import API_VERSIONS
from sparklog.broker.kafka.context import build
from sparklog.group.consumer_protocol import decode_assignment, encode_assignment, encode_subscription
from sparklog.testing import BrokerAgents
from tests.helpers import wait_until
from tests.wire.conftest import create_led_topic
from tests.wire.raw import call


def request(api: str, version: int, **values: Any) -> Any:
    module = importlib.import_module(f"kio.schema.{api}.v{version}.request")
    name = "".join(part.capitalize() for part in api.split("_")) + "Request"
    return build(getattr(module, name), **values)


def nested(api: str, version: int, type_name: str, **values: Any) -> Any:
    return build(getattr(importlib.import_module(f"kio.schema.{api}.v{version}.request"), type_name), **values)


def ms(value: int) -> Any:
    return i32Timedelta.parse(datetime.timedelta(milliseconds=value))


def join(
    port: int,
    version: int,
    group: str,
    member_id: str = "",
    instance_id: str | None = None,
    *,
    session_timeout_ms: int = 10_000,
    protocol_type: str = "consumer",
) -> Any:
    protocol = nested(
        "join_group", version, "JoinGroupRequestProtocol", name="range", metadata=encode_subscription(["t"])
    )
    return call(
        port,
        request(
            "join_group",
            version,
            group_id=group,
            session_timeout=ms(session_timeout_ms),
            rebalance_timeout=ms(session_timeout_ms),
            member_id=member_id,
            group_instance_id=instance_id,
            protocol_type=protocol_type,
            protocols=(protocol,),
            reason=None,
        ),
    )


def test_every_version_of_join_sync_heartbeat_leave(group_broker: BrokerAgents, cluster: sparklog.Cluster) -> None:
    port = group_broker.port(1)
    create_led_topic(cluster, group_broker, "t", 2)
    assert API_VERSIONS[11] == (0, 9) and API_VERSIONS[14] == (0, 5)
    for version in range(10):
        group = f"raw-{version}"
        answer = join(port, version, group)
        if version >= 4:
            assert answer.error_code == ErrorCode.member_id_required and answer.member_id
            answer = join(port, version, group, answer.member_id)
        assert answer.error_code == ErrorCode.none, (version, answer)
        assert answer.leader == answer.member_id and answer.generation_id >= 1
        assert [m.member_id for m in answer.members] == [answer.member_id]
        sync_version = min(version, 5)
        assignment = encode_assignment([("t", 0), ("t", 1)])
        synced = call(
            port,
            request(
                "sync_group",
                sync_version,
                group_id=group,
                generation_id=answer.generation_id,
                member_id=answer.member_id,
                group_instance_id=None,
                protocol_type="consumer",
                protocol_name="range",
                assignments=(
                    nested(
                        "sync_group",
                        sync_version,
                        "SyncGroupRequestAssignment",
                        member_id=answer.member_id,
                        assignment=assignment,
                    ),
                ),
            ),
        )
        assert synced.error_code == ErrorCode.none and decode_assignment(synced.assignment) == [("t", 0), ("t", 1)]
        beat = call(
            port,
            request(
                "heartbeat",
                min(version, 4),
                group_id=group,
                generation_id=answer.generation_id,
                member_id=answer.member_id,
                group_instance_id=None,
            ),
        )
        assert beat.error_code == ErrorCode.none
        # sparklog's tools read what the coordinator publishes to ZooKeeper, moments later.
        wait_until(lambda: cluster.describe_group(group).state == "Stable", f"{group} published as Stable")
        description = cluster.describe_group(group)
        assert [m.member_id for m in description.members] == [answer.member_id]
        assert set(description.members[0].partitions) == {("t", 0), ("t", 1)}
        leave_version = min(version, 5)
        if leave_version >= 3:
            leave = request(
                "leave_group",
                leave_version,
                group_id=group,
                members=(
                    nested(
                        "leave_group",
                        leave_version,
                        "MemberIdentity",
                        member_id=answer.member_id,
                        group_instance_id=None,
                        reason=None,
                    ),
                ),
            )
        else:
            leave = request("leave_group", leave_version, group_id=group, member_id=answer.member_id)
        assert call(port, leave).error_code == ErrorCode.none
        wait_until(lambda: cluster.describe_group(group).state == "Empty", f"{group} empty after the leave")


def test_protocol_errors(group_broker: BrokerAgents, cluster: sparklog.Cluster) -> None:
    port = group_broker.port(1)
    assert join(port, 9, "errs", member_id="never-issued").error_code == ErrorCode.unknown_member_id
    first = join(port, 9, "errs")
    member = join(port, 9, "errs", first.member_id)
    assert member.error_code == ErrorCode.none
    stale = call(
        port,
        request("heartbeat", 4, group_id="errs", generation_id=member.generation_id + 5, member_id=member.member_id),
    )
    assert stale.error_code == ErrorCode.illegal_generation
    too_short = join(port, 9, "errs", session_timeout_ms=10)
    assert too_short.error_code == ErrorCode.invalid_session_timeout
    other_type = join(port, 9, "errs", protocol_type="connect")
    assert other_type.error_code == ErrorCode.inconsistent_group_protocol
    bad_name = join(port, 9, "bad group!")
    assert bad_name.error_code == ErrorCode.invalid_group_id
    described = call(port, request("describe_groups", 6, groups=("errs", "nope"), include_authorized_operations=False))
    states = {g.group_id: (g.group_state, g.error_code) for g in described.groups}
    assert states["errs"][0] in ("Stable", "CompletingRebalance") and states["nope"][1] == ErrorCode.group_id_not_found
    listed = call(port, request("list_groups", 5, states_filter=(), types_filter=()))
    assert "errs" in {g.group_id for g in listed.groups}
    deleted = call(port, request("delete_groups", 2, groups_names=("errs", "nope")))
    codes = {r.group_id: r.error_code for r in deleted.results}
    assert codes == {"errs": ErrorCode.non_empty_group, "nope": ErrorCode.group_id_not_found}
