"""The consumer group protocol's state machine (KIP-848, ``sparklog/broker/groups/consumer_group.py``)
and its server assignors: joining, reconciliation (a partition moves only once its owner revoked
it), epochs and fencing, expiry, static members, offset checks."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from sparklog.broker.groups.consumer_group import (
    RECONCILING,
    STABLE,
    ConsumerGroup,
    HeartbeatRequest,
    HeartbeatResult,
)
from sparklog.group.assignors import MemberSubscription, server_assign
from sparklog.model.topic import TopicPartition

TOPICS = {"t": 4, "other": 2}
SESSION_MS = 1000


def group() -> ConsumerGroup:
    return ConsumerGroup("g", session_timeout_ms=SESSION_MS)


def beat(
    g: ConsumerGroup,
    member: str,
    epoch: int,
    owned: frozenset[TopicPartition] | set[TopicPartition] | None = None,
    *,
    now_ms: int = 0,
    topics: tuple[str, ...] | None = None,
    regex: str | None = None,
    instance: str | None = None,
) -> HeartbeatResult:
    join = epoch == 0
    request = HeartbeatRequest(
        member_id=member,
        member_epoch=epoch,
        instance_id=instance,
        rebalance_timeout_ms=5000 if join else -1,
        subscribed_topic_names=topics if topics is not None else (("t",) if join and regex is None else None),
        subscribed_topic_regex=regex,
        owned=frozenset(owned) if owned is not None else (frozenset() if join else None),
    )
    return g.heartbeat(now_ms, request, TOPICS, "uniform")


def parts(*numbers: int) -> frozenset[TopicPartition]:
    return frozenset(("t", n) for n in numbers)


def test_first_member_gets_every_partition_and_the_group_epoch() -> None:
    g = group()
    result = beat(g, "a", 0)
    assert result.error is ErrorCode.none
    assert result.assignment == parts(0, 1, 2, 3)
    assert result.member_epoch == g.group_epoch == 1
    assert g.state == STABLE


def test_empty_member_id_gets_one_from_the_broker() -> None:
    result = beat(group(), "", 0)
    assert result.error is ErrorCode.none and result.member_id


def test_a_partition_moves_only_after_its_owner_revoked_it() -> None:
    g = group()
    beat(g, "a", 0)
    b = beat(g, "b", 0)
    # b's target is half the partitions, all still owned by a: it gets none yet.
    assert b.error is ErrorCode.none and b.assignment == frozenset()
    assert g.state == RECONCILING
    target_b = g.target["b"]
    assert len(target_b) == 2
    # a is told to keep only its target; it keeps its epoch until it has revoked.
    a = beat(g, "a", 1, parts(0, 1, 2, 3))
    assert a.assignment == parts(0, 1, 2, 3) - target_b and a.member_epoch == 1
    # b asks again: a has not revoked yet (its heartbeat still lists them).
    assert beat(g, "b", b.member_epoch, set()).assignment == frozenset()
    still = beat(g, "a", 1, parts(0, 1, 2, 3))
    assert still.member_epoch == 1
    # a revokes: its epoch advances, and b gets the partitions.
    revoked = beat(g, "a", 1, parts(0, 1, 2, 3) - target_b)
    assert revoked.member_epoch == g.group_epoch == 2
    given = beat(g, "b", b.member_epoch, set())
    assert given.assignment == target_b
    assert g.state == STABLE


def test_leaving_member_frees_its_partitions() -> None:
    g = group()
    a = beat(g, "a", 0)
    b = beat(g, "b", 0)
    a = beat(g, "a", a.member_epoch, parts(0, 1, 2, 3))
    a = beat(g, "a", a.member_epoch, set(a.assignment or ()))
    b = beat(g, "b", b.member_epoch, set())
    left = beat(g, "b", -1)
    assert left.error is ErrorCode.none and left.member_epoch == -1
    back = beat(g, "a", a.member_epoch, set(a.assignment or ()))
    assert back.assignment == parts(0, 1, 2, 3) and back.member_epoch == g.group_epoch


def test_silent_member_expires_after_the_session_timeout() -> None:
    g = group()
    beat(g, "a", 0, now_ms=0)
    b = beat(g, "b", 0, now_ms=0)
    assert not g.expire(SESSION_MS)
    beat(g, "b", b.member_epoch, set(), now_ms=SESSION_MS)
    assert g.expire(SESSION_MS + 1)
    assert set(g.members) == {"b"}
    assert beat(g, "a", 1).error is ErrorCode.unknown_member_id
    assert beat(g, "b", b.member_epoch, set(), now_ms=SESSION_MS + 2).assignment == parts(0, 1, 2, 3)


def test_member_that_does_not_revoke_in_time_is_removed() -> None:
    g = group()
    beat(g, "a", 0, now_ms=0)
    beat(g, "b", 0, now_ms=0)
    beat(g, "a", 1, parts(0, 1, 2, 3), now_ms=0)  # told to revoke, rebalance timeout 5000
    beat(g, "a", 1, parts(0, 1, 2, 3), now_ms=900)
    assert g.expire(5001) and "a" not in g.members


def test_epochs_are_fenced() -> None:
    g = group()
    a = beat(g, "a", 0)
    assert beat(g, "a", a.member_epoch + 1).error is ErrorCode.fenced_member_epoch
    assert beat(g, "nobody", 3).error is ErrorCode.unknown_member_id
    beat(g, "b", 0)
    beat(g, "a", a.member_epoch, parts(0, 1, 2, 3))
    moved = beat(g, "a", a.member_epoch, set(g.members["a"].assigned))
    assert moved.member_epoch == 2
    # The response carrying epoch 2 was lost: epoch 1 with a subset of its partitions is accepted.
    assert beat(g, "a", 1, set(g.members["a"].assigned)).error is ErrorCode.none
    assert beat(g, "a", 1, parts(0, 1, 2, 3)).error is ErrorCode.fenced_member_epoch
    # A fenced member rejoins with epoch 0 and the same id.
    assert beat(g, "a", 0).error is ErrorCode.none


def test_bad_first_heartbeat_is_an_invalid_request() -> None:
    g = group()
    no_subscription = HeartbeatRequest("a", 0, rebalance_timeout_ms=5000, owned=frozenset())
    assert g.heartbeat(0, no_subscription, TOPICS, "uniform").error is ErrorCode.invalid_request
    owning = HeartbeatRequest(
        "a", 0, rebalance_timeout_ms=5000, subscribed_topic_names=("t",), owned=frozenset(parts(0))
    )
    assert g.heartbeat(0, owning, TOPICS, "uniform").error is ErrorCode.invalid_request
    unknown = HeartbeatRequest(
        "a", 0, rebalance_timeout_ms=5000, subscribed_topic_names=("t",), owned=frozenset(), server_assignor="x"
    )
    assert g.heartbeat(0, unknown, TOPICS, "uniform").error is ErrorCode.unsupported_assignor


def test_regex_subscription_and_subscription_change_bump_the_epoch() -> None:
    g = group()
    a = beat(g, "a", 0, regex="oth.*")
    assert a.assignment == frozenset({("other", 0), ("other", 1)})
    epoch = g.group_epoch
    changed = g.heartbeat(
        0,
        HeartbeatRequest("a", a.member_epoch, subscribed_topic_names=("t",), subscribed_topic_regex=""),
        TOPICS,
        "uniform",
    )
    assert g.group_epoch == epoch + 1 and changed.error is ErrorCode.none


def test_static_member_keeps_its_assignment_across_a_restart() -> None:
    g = group()
    a = beat(g, "a", 0, instance="i1")
    assert beat(g, "a2", 0, instance="i1").error is ErrorCode.unreleased_instance_id
    assert beat(g, "a", -2).error is ErrorCode.none
    back = beat(g, "a2", 0, instance="i1")
    assert back.error is ErrorCode.none and back.member_epoch == a.member_epoch
    assert back.assignment == parts(0, 1, 2, 3)


def test_offset_checks_follow_the_member_epoch() -> None:
    g = group()
    a = beat(g, "a", 0)
    assert g.check_offsets("a", a.member_epoch, parts(0)) is None
    assert g.check_offsets("a", a.member_epoch + 1, parts(0)) is ErrorCode.stale_member_epoch
    assert g.check_offsets("b", 1, parts(0)) is ErrorCode.unknown_member_id


def test_server_assignors_balance_and_stick() -> None:
    members = [MemberSubscription("a", ("t",)), MemberSubscription("b", ("t",))]
    uniform = server_assign("uniform", members, {"t": 4}, {"a": [("t", 0), ("t", 1), ("t", 2), ("t", 3)]})
    assert sorted(len(v) for v in uniform.values()) == [2, 2]
    assert set(uniform["a"]) <= parts(0, 1, 2, 3)
    assert server_assign("range", members, {"t": 4}) == {"a": [("t", 0), ("t", 1)], "b": [("t", 2), ("t", 3)]}


def test_members_of_a_previous_coordinator_hold_their_partitions_until_they_rejoin() -> None:
    g = group()
    g.restore(0, {"a": parts(0, 1), "b": parts(2, 3)})
    assert beat(g, "c", 0).assignment == frozenset(), "everything is still held by the restored members"
    assert beat(g, "a", 5, parts(0, 1)).error is ErrorCode.fenced_member_epoch
    assert g.check_offsets("a", 5, parts(0)) is ErrorCode.stale_member_epoch
    a = beat(g, "a", 0, now_ms=10)  # rejoined: it has released everything
    c = beat(g, "c", g.members["c"].member_epoch, frozenset(), now_ms=10)
    a = beat(g, "a", a.member_epoch, frozenset(), now_ms=10)
    given = (a.assignment or frozenset()) | (c.assignment or frozenset()) | g.members["c"].assigned
    assert given and not given & parts(2, 3), "b's partitions stay b's while its session lasts"
    # b never comes back: after its session its partitions are given out.
    beat(g, "a", g.members["a"].member_epoch, g.members["a"].assigned, now_ms=SESSION_MS)
    beat(g, "c", g.members["c"].member_epoch, g.members["c"].assigned, now_ms=SESSION_MS)
    assert g.expire(SESSION_MS + 1) and set(g.members) == {"a", "c"}
    for _ in range(3):
        for member in ("a", "c"):
            beat(g, member, g.members[member].member_epoch, g.members[member].assigned, now_ms=SESSION_MS + 2)
    assert g.members["a"].assigned | g.members["c"].assigned == parts(0, 1, 2, 3)
    assert g.state == STABLE
