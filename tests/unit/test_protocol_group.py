"""The classic group protocol's state machine (sparklog/broker/groups/group.py), clock in hand."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from sparklog.broker.groups.group import (
    COMPLETING,
    EMPTY,
    PREPARING,
    STABLE,
    JoinRequest,
    JoinResult,
    Pending,
    ProtocolGroup,
    SyncRequest,
    SyncResult,
)

SESSION, REBALANCE = 10_000, 30_000


def join(group: ProtocolGroup, now: int, member_id: str = "", initial_delay_ms: int = 0, **kw: Any) -> Pending:
    fields: dict[str, Any] = {
        "member_id": member_id,
        "instance_id": None,
        "client_id": "c",
        "client_host": "/127.0.0.1",
        "session_timeout_ms": SESSION,
        "rebalance_timeout_ms": REBALANCE,
        "protocol_type": "consumer",
        "protocols": (("range", b"r"), ("roundrobin", b"rr")),
    }
    fields.update(kw)
    fields["protocols"] = tuple(fields["protocols"])
    return group.join(now, JoinRequest(**fields), initial_delay_ms)


def sync(group: ProtocolGroup, now: int, **kw: Any) -> Pending:
    kw["assignments"] = tuple(kw.get("assignments", ()))
    return group.sync(now, SyncRequest(**kw))


def result(pending: Pending) -> Any:
    assert pending.done, "the request is still waiting"
    return pending.value


def joined_member(group: ProtocolGroup, now: int, **kw: Any) -> tuple[str, Pending]:
    first = result(join(group, now, **kw))
    assert isinstance(first, JoinResult) and first.error == ErrorCode.member_id_required
    return first.member_id, join(group, now, first.member_id, **kw)


def settle(group: ProtocolGroup, now: int) -> None:
    if group.ready_to_complete(now):
        group.complete_join()


def stable_pair(group: ProtocolGroup) -> tuple[str, str]:
    a, pa = joined_member(group, 0)
    settle(group, 0)
    assert result(pa).generation == 1
    sync(group, 0, member_id=a, instance_id=None, generation=1, protocol_type=None, protocol_name=None, assignments=[])
    b, pb = joined_member(group, 10)
    assert group.state == PREPARING and not pb.done
    assert group.heartbeat(20, a, None, 1) == ErrorCode.rebalance_in_progress
    pa2 = join(group, 30, a)
    settle(group, 30)
    ra, rb = result(pa2), result(pb)
    assert (ra.generation, rb.generation) == (2, 2)
    assert ra.leader == rb.leader == a
    assert {m[0] for m in ra.members} == {a, b} and rb.members == ()
    sb = sync(
        group, 40, member_id=b, instance_id=None, generation=2, protocol_type=None, protocol_name=None, assignments=[]
    )
    assert not sb.done and group.state == COMPLETING
    sa = sync(
        group,
        41,
        member_id=a,
        instance_id=None,
        generation=2,
        protocol_type="consumer",
        protocol_name="range",
        assignments=[(a, b"A"), (b, b"B")],
    )
    assert result(sa).assignment == b"A" and result(sb).assignment == b"B"
    assert group.state == STABLE
    return a, b


def test_member_id_required_then_join_and_sync_to_stable() -> None:
    group = ProtocolGroup("g")
    a, b = stable_pair(group)
    assert group.heartbeat(50, b, None, 2) == ErrorCode.none
    assert group.heartbeat(50, b, None, 1) == ErrorCode.illegal_generation
    assert group.heartbeat(50, "nobody", None, 2) == ErrorCode.unknown_member_id
    assert group.check_commit(a, None, 2) is None
    assert group.check_commit(a, None, 1) == ErrorCode.illegal_generation


def test_unused_member_ids_expire_and_unknown_ids_are_refused() -> None:
    group = ProtocolGroup("g")
    first = result(join(group, 0))
    group.expire(SESSION + 1)
    assert result(join(group, SESSION + 2, first.member_id)).error == ErrorCode.unknown_member_id
    assert result(join(group, 0, "made-up")).error == ErrorCode.unknown_member_id


def test_session_expiry_removes_a_silent_member_and_rebalances() -> None:
    group = ProtocolGroup("g")
    a, b = stable_pair(group)
    group.heartbeat(SESSION, a, None, 2)
    assert group.expire(SESSION + 100)  # b was last seen at 40
    assert b not in group.members and group.state == PREPARING
    pending = join(group, SESSION + 200, a)
    settle(group, SESSION + 200)
    assert result(pending).generation == 3 and result(pending).members[0][0] == a


def test_a_member_waiting_in_join_is_not_expired_and_stragglers_leave_at_the_deadline() -> None:
    group = ProtocolGroup("g")
    a, b = stable_pair(group)
    group.leave(100, "nobody", None)
    pa = join(group, 100, a, protocols=[("range", b"changed")])  # changed metadata: a rebalance
    assert group.state == PREPARING
    group.expire(100 + SESSION * 2)  # a waits in join: kept; b is silent: removed
    assert a in group.members and b not in group.members
    settle(group, 100 + SESSION * 2)
    assert result(pa).generation == 3


def test_rebalance_deadline_drops_members_that_did_not_rejoin() -> None:
    group = ProtocolGroup("g")
    a, b = stable_pair(group)
    pa = join(group, 100, a, protocols=[("range", b"new")])
    group.heartbeat(100 + REBALANCE - 1, b, None, 2)  # alive, but never rejoins
    assert not group.ready_to_complete(100 + REBALANCE - 1)
    assert group.ready_to_complete(100 + REBALANCE)
    group.complete_join()
    assert result(pa).generation == 3 and list(group.members) == [a]


def test_leave_rebalances_and_the_last_leave_empties_the_group() -> None:
    group = ProtocolGroup("g")
    a, b = stable_pair(group)
    assert group.leave(100, b, None) == ErrorCode.none
    assert group.state == PREPARING
    settle(group, 100)  # a has not rejoined yet
    assert group.state == PREPARING
    assert group.leave(110, a, None) == ErrorCode.none
    settle(group, 110)
    assert group.state == EMPTY and group.members == {}
    assert group.leave(120, a, None) == ErrorCode.unknown_member_id


def test_static_member_restart_keeps_generation_and_assignment_and_fences_the_old_id() -> None:
    group = ProtocolGroup("g")
    a, _pa = joined_member(group, 0)
    settle(group, 0)
    pending_static = join(group, 1, "", instance_id="static-1")
    assert not pending_static.done  # static: no MEMBER_ID_REQUIRED, it waits for the join phase
    pa2 = join(group, 2, a)
    settle(group, 2)
    generation = result(pa2).generation
    old_id = result(pending_static).member_id
    sync(
        group,
        3,
        member_id=a,
        instance_id=None,
        generation=generation,
        protocol_type=None,
        protocol_name=None,
        assignments=[(a, b"A"), (old_id, b"S")],
    )
    assert group.state == STABLE
    restarted = result(join(group, 500, "", instance_id="static-1"))
    assert restarted.error == ErrorCode.none and restarted.generation == generation
    assert restarted.member_id != old_id and group.state == STABLE
    synced = sync(
        group,
        501,
        member_id=restarted.member_id,
        instance_id="static-1",
        generation=generation,
        protocol_type=None,
        protocol_name=None,
        assignments=[],
    )
    assert result(synced).assignment == b"S"
    assert group.heartbeat(502, old_id, "static-1", generation) == ErrorCode.fenced_instance_id


def test_protocols_are_voted_and_incompatible_members_refused() -> None:
    group = ProtocolGroup("g")
    a, pa = joined_member(group, 0, protocols=[("roundrobin", b""), ("range", b"")])
    b, _pb = joined_member(group, 0, protocols=[("range", b""), ("roundrobin", b"")])
    c, _pc = joined_member(group, 0, protocols=[("range", b"")])
    settle(group, 0)
    assert result(pa).protocol_name == "range"
    refused = result(join(group, 1, protocols=[("sticky", b"")]))
    assert refused.error == ErrorCode.inconsistent_group_protocol
    refused = result(join(group, 1, protocol_type="connect"))
    assert refused.error == ErrorCode.inconsistent_group_protocol
    assert {a, b, c} == set(group.members)


def test_initial_delay_waits_for_more_members_and_generation_floor_is_respected() -> None:
    group = ProtocolGroup("g", generation_floor=41)
    _a, pa = joined_member(group, 0, initial_delay_ms=300)
    assert not group.ready_to_complete(100)
    _b, pb = joined_member(group, 200, initial_delay_ms=300)
    assert not group.ready_to_complete(400)  # the delay grew with b
    assert group.ready_to_complete(500)
    group.complete_join()
    assert result(pa).generation == result(pb).generation == 42


def test_sync_errors() -> None:
    group = ProtocolGroup("g")
    a, b = stable_pair(group)
    wrong = sync(
        group,
        60,
        member_id=a,
        instance_id=None,
        generation=2,
        protocol_type="connect",
        protocol_name=None,
        assignments=[],
    )
    assert isinstance(result(wrong), SyncResult) and result(wrong).error == ErrorCode.inconsistent_group_protocol
    join(group, 70, b, protocols=[("range", b"x")])
    in_rebalance = sync(
        group, 71, member_id=a, instance_id=None, generation=2, protocol_type=None, protocol_name=None, assignments=[]
    )
    assert result(in_rebalance).error == ErrorCode.rebalance_in_progress


def test_static_leader_restart_gets_the_members_with_skip_assignment_and_no_rebalance() -> None:
    group = ProtocolGroup("g")
    leader_join = join(group, 0, instance_id="lead")
    settle(group, 0)
    first = result(leader_join)
    sync(
        group,
        1,
        member_id=first.member_id,
        instance_id="lead",
        generation=first.generation,
        protocol_type=None,
        protocol_name=None,
        assignments=[(first.member_id, b"L")],
    )
    again = result(join(group, 100, instance_id="lead"))
    assert again.error == ErrorCode.none and again.skip_assignment and again.leader == again.member_id
    assert again.generation == first.generation and group.state == STABLE
    assert [m[0] for m in again.members] == [again.member_id]
    synced = sync(
        group,
        101,
        member_id=again.member_id,
        instance_id="lead",
        generation=again.generation,
        protocol_type=None,
        protocol_name=None,
        assignments=[(again.member_id, b"ignored in Stable")],
    )
    assert result(synced).assignment == b"L"
