"""Partition assignors for consumer groups: Kafka's range, round-robin and sticky, and the
server-side assignors of Kafka's consumer group protocol (KIP-848): ``uniform`` and ``range``.

Pure policy (no I/O; imports neither Spark, kazoo nor deltalake). The group leader calls
:func:`assign` with the members' subscriptions and the partition count of every topic.

Invariants, for every strategy:

* every partition of every subscribed topic that appears in ``partitions_per_topic`` is
  assigned to exactly one member, and that member is subscribed to its topic;
* every member appears in the result (possibly with ``[]``), each list sorted by
  ``(topic, partition)``;
* the result is deterministic: equal input gives equal output (no randomness, no
  dependence on the order of ``members`` or of mapping iteration).

Members are ordered as Kafka's ``MemberInfo.compareTo``: static members (with a
``group.instance.id``) first, by instance id; then dynamic members by member id.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from sparklog.errors import ConfigError, GroupError
from sparklog.model.topic import TopicPartition

__all__ = [
    "ASSIGNORS",
    "SERVER_ASSIGNORS",
    "AssignorName",
    "MemberSubscription",
    "assign",
    "range_assign",
    "roundrobin_assign",
    "server_assign",
    "sticky_assign",
]

AssignorName = Literal["range", "roundrobin", "sticky"]
ASSIGNORS: tuple[str, ...] = ("range", "roundrobin", "sticky")

Assignment = dict[str, list[TopicPartition]]
Previous = Mapping[str, Sequence[TopicPartition]]


@dataclass(frozen=True)
class MemberSubscription:
    """One group member: its key, its subscribed topics and its static id, if any."""

    member_id: str
    topics: tuple[str, ...]
    instance_id: str | None = None


def _member_key(member: MemberSubscription) -> tuple[int, str, str]:
    """Kafka's order: static members first (by instance id), then dynamic by member id."""
    if member.instance_id is not None:
        return (0, member.instance_id, member.member_id)
    return (1, member.member_id, "")


def _ordered(members: Sequence[MemberSubscription]) -> list[MemberSubscription]:
    """Members in Kafka's order; rejects duplicate member ids."""
    seen: set[str] = set()
    for member in members:
        if member.member_id in seen:
            raise GroupError(
                f"Duplicate member id {member.member_id!r} in the assignment input; member ids must be unique"
            )
        seen.add(member.member_id)
    return sorted(members, key=_member_key)


def _partitions(topic: str, partitions_per_topic: Mapping[str, int]) -> list[TopicPartition]:
    return [(topic, p) for p in range(max(partitions_per_topic.get(topic, 0), 0))]


def _subscribed(members: Sequence[MemberSubscription], partitions_per_topic: Mapping[str, int]) -> list[TopicPartition]:
    """All existing partitions of all subscribed topics, sorted by (topic, partition)."""
    topics = sorted({t for m in members for t in m.topics if t in partitions_per_topic})
    return [tp for t in topics for tp in _partitions(t, partitions_per_topic)]


def _finish(assignment: Assignment) -> Assignment:
    return {member: sorted(tps) for member, tps in assignment.items()}


def range_assign(
    members: Sequence[MemberSubscription],
    partitions_per_topic: Mapping[str, int],
    previous: Previous | None = None,
) -> Assignment:
    """Kafka's RangeAssignor: per topic, contiguous ranges to the members subscribed to it."""
    ordered = _ordered(members)
    result: Assignment = {m.member_id: [] for m in ordered}
    for topic in sorted({t for m in ordered for t in m.topics if t in partitions_per_topic}):
        consumers = [m.member_id for m in ordered if topic in m.topics]
        n, c = max(partitions_per_topic[topic], 0), len(consumers)
        per_consumer, with_extra = divmod(n, c)
        for i, member_id in enumerate(consumers):
            start = per_consumer * i + min(i, with_extra)
            length = per_consumer + (1 if i < with_extra else 0)
            result[member_id].extend((topic, p) for p in range(start, start + length))
    return _finish(result)


def roundrobin_assign(
    members: Sequence[MemberSubscription],
    partitions_per_topic: Mapping[str, int],
    previous: Previous | None = None,
) -> Assignment:
    """Kafka's RoundRobinAssignor: sorted partitions dealt to a circle of sorted members,
    skipping members not subscribed to the partition's topic."""
    ordered = _ordered(members)
    result: Assignment = {m.member_id: [] for m in ordered}
    cursor = 0
    for topic, partition in _subscribed(ordered, partitions_per_topic):
        while topic not in ordered[cursor % len(ordered)].topics:
            cursor += 1
        result[ordered[cursor % len(ordered)].member_id].append((topic, partition))
        cursor += 1
    return _finish(result)


def sticky_assign(
    members: Sequence[MemberSubscription],
    partitions_per_topic: Mapping[str, int],
    previous: Previous | None = None,
) -> Assignment:
    """Balanced like Kafka's StickyAssignor, moving as few previously owned partitions as possible.

    1. Keep every previous ownership still valid (member present and subscribed, partition
       exists). ``previous`` is keyed by member id; a key equal to a current member's
       instance id (and to no member id) maps to that member: a static member rejoining.
       A partition claimed twice stays with the first claimant in member order.
    2. Give each unowned partition, in (topic, partition) order, to the least-loaded member
       subscribed to its topic (ties by member order).
    3. While some member has at least 2 more partitions than a member that could take one
       of them, move one from the most loaded such member to the least loaded such member,
       preferring partitions it did not own before. Each move strictly lowers the sum of
       squared loads, so this ends; with equal subscriptions it ends balanced (counts differ
       by at most 1) having moved only partitions from over-quota members.
    """
    ordered = _ordered(members)
    rank = {m.member_id: i for i, m in enumerate(ordered)}
    topics = {m.member_id: frozenset(m.topics) for m in ordered}
    universe = set(_subscribed(ordered, partitions_per_topic))
    result: Assignment = {m.member_id: [] for m in ordered}
    owned: dict[str, set[TopicPartition]] = {m.member_id: set() for m in ordered}

    by_key = {m.instance_id: m.member_id for m in ordered if m.instance_id is not None and m.instance_id not in rank}
    by_key.update({m: m for m in rank})
    prior = previous or {}
    claims = sorted((key for key in prior if key in by_key), key=lambda k: (rank[by_key[k]], k != by_key[k]))
    taken: set[TopicPartition] = set()
    for key in claims:
        member_id, tps = by_key[key], prior[key]
        for tp in sorted({(str(t), int(p)) for t, p in tps}):
            if tp in universe and tp not in taken and tp[0] in topics[member_id]:
                taken.add(tp)
                owned[member_id].add(tp)
                result[member_id].append(tp)

    def load(member_id: str) -> tuple[int, int]:
        return (len(result[member_id]), rank[member_id])

    for tp in sorted(universe - taken):
        eligible = [m for m in rank if tp[0] in topics[m]]
        result[min(eligible, key=load)].append(tp)

    while (move := _next_move(result, topics, load)) is not None:
        donor, receiver = move
        movable = [tp for tp in result[donor] if tp[0] in topics[receiver]]
        tp = max(movable, key=lambda t: (t not in owned[donor], t))
        result[donor].remove(tp)
        result[receiver].append(tp)
    return _finish(result)


def _next_move(
    result: Assignment, topics: Mapping[str, frozenset[str]], load: Callable[[str], tuple[int, int]]
) -> tuple[str, str] | None:
    """The (donor, receiver) of the next balancing move, or None when balanced."""
    donors = sorted(result, key=lambda m: (-load(m)[0], load(m)[1]))
    receivers = sorted(result, key=load)
    for donor in donors:
        held = {t for t, _ in result[donor]}
        for receiver in receivers:
            if len(result[donor]) - len(result[receiver]) <= 1:
                break
            if not held.isdisjoint(topics[receiver]):
                return donor, receiver
    return None


_STRATEGIES: dict[str, Callable[[Sequence[MemberSubscription], Mapping[str, int], Previous | None], Assignment]] = {
    "range": range_assign,
    "roundrobin": roundrobin_assign,
    "sticky": sticky_assign,
}


def assign(
    strategy: str,
    members: Sequence[MemberSubscription],
    partitions_per_topic: Mapping[str, int],
    previous: Previous | None = None,
) -> dict[str, list[TopicPartition]]:
    """member_id -> sorted list of (topic, partition). Every member appears (maybe with []).

    Topics subscribed but absent from ``partitions_per_topic`` are ignored. ``previous``
    (member id -> partitions owned) is used by ``sticky`` only.
    """
    assignor = _STRATEGIES.get(strategy)
    if assignor is None:
        raise ConfigError(f"Unknown partition assignment strategy {strategy!r}; allowed values: {', '.join(ASSIGNORS)}")
    return assignor(members, partitions_per_topic, previous)


# KIP-848's server-side assignors by Kafka's names (``group.remote.assignor``); the first is the
# brokers' default, as Kafka's ``group.consumer.assignors``.
SERVER_ASSIGNORS: tuple[str, ...] = ("uniform", "range")


def server_assign(
    name: str,
    members: Sequence[MemberSubscription],
    partitions_per_topic: Mapping[str, int],
    previous: Previous | None = None,
) -> dict[str, list[TopicPartition]]:
    """A consumer-protocol group's target assignment. ``uniform`` is Kafka's UniformAssignor's
    contract — balanced, and sticky to ``previous`` (the group's current target) — which
    :func:`sticky_assign` fulfils; ``range`` is :func:`range_assign` (co-partitioned topics get
    the same partition numbers)."""
    if name not in SERVER_ASSIGNORS:
        raise ConfigError(f"Unknown server assignor {name!r}; allowed values: {', '.join(SERVER_ASSIGNORS)}")
    return assign("sticky" if name == "uniform" else name, members, partitions_per_topic, previous)
