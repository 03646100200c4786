"""Consumer-group administration: Kafka's ``kafka-consumer-groups`` as a library.

Reads: :func:`list_groups`, :func:`describe_group`, :func:`consumer_lag` (all groups' lag as
Arrow). Writes: :func:`delete_groups` (:mod:`sparklog.group.deletion`, which the brokers'
DeleteGroups runs too), :func:`delete_group_offsets`, :func:`reset_group_offsets`,
whose planner is pure (:func:`reset_scenario` validates, :func:`plan_reset` computes); the I/O
functions gather its inputs (committed offsets, log bounds) and apply its result.

Invariants:

* Nothing is written for an active group (live or departed-static members): every write
  checks the registry first, and :meth:`GroupCoordinator.reset` checks again right before
  its commit. A dry run, a refusal or any bad input (group id, topic, partition, datetime,
  duration, CSV) changes nothing: everything is validated and planned before the first write.
* Reads never create anything (not even ``__consumer_offsets``).
* New offsets are clamped into ``[log-start, log-end]`` where Kafka clamps (to-offset,
  shift-by, from-file), each clamp reported to the caller's ``warn``; to-earliest/to-latest/to-datetime/by-duration are in range by
  construction; to-current keeps the committed offset as is (Kafka does the same).
* Lag = log-end offset (high watermark) - committed offset; None without a commit.

Every function receives the :class:`~sparklog.group.coordinator.GroupCoordinator` (and
through it the replica manager for log offsets).
"""

from __future__ import annotations

import re
import socket
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa

from sparklog.errors import (
    GroupIdNotFoundError,
    GroupNotEmptyError,
    InvalidOffsetSpecError,
    TopicNotFoundError,
    UnknownPartitionError,
)
from sparklog.group.coordinator import GroupCoordinator
from sparklog.group.deletion import active_members, committed_offsets, delete_group, delete_groups, group_exists
from sparklog.group.reset import (
    SCENARIOS,
    Bounds,
    ResetScenario,
    Warn,
    clamp,
    parse_datetime,
    parse_duration,
    parse_reset_csv,
    plan_reset,
    reset_scenario,
)
from sparklog.metadata.group_registry import COMPLETING, DEAD, EMPTY, PREPARING, STABLE
from sparklog.metadata.zkdata import GroupStateRecord, MemberRecord
from sparklog.model.group_ids import validate_group_id
from sparklog.model.topic import OFFSETS_TOPIC, TopicPartition, validate_topic_name
from sparklog.runtime import log_access

__all__ = [
    "COMPLETING",
    "DEAD",
    "EMPTY",
    "GROUP_STATES",
    "LAG_SCHEMA",
    "PREPARING",
    "SCENARIOS",
    "STABLE",
    "GroupDescription",
    "GroupListing",
    "MemberDescription",
    "PartitionLag",
    "ResetScenario",
    "apply_reset",
    "clamp",
    "consumer_lag",
    "delete_group",
    "delete_group_offsets",
    "delete_groups",
    "describe_group",
    "list_groups",
    "parse_datetime",
    "parse_duration",
    "parse_reset_csv",
    "plan_group_reset",
    "plan_reset",
    "reset_group_offsets",
    "reset_scenario",
]

# Kafka's consumer group protocol (KIP-848) adds its own: the brokers publish them (DESIGN §8).
GROUP_STATES = (EMPTY, PREPARING, COMPLETING, STABLE, DEAD, "Assigning", "Reconciling")
LAG_SCHEMA = pa.schema(
    [
        ("group", pa.string()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("current_offset", pa.int64()),
        ("log_end_offset", pa.int64()),
        ("lag", pa.int64()),
        ("consumer_id", pa.string()),
        ("host", pa.string()),
        ("client_id", pa.string()),
        ("state", pa.string()),
    ]
)


@dataclass(frozen=True)
class GroupListing:
    group_id: str
    state: str


@dataclass(frozen=True)
class MemberDescription:
    member_id: str
    instance_id: str | None
    client_id: str
    host: str
    partitions: tuple[TopicPartition, ...]


@dataclass(frozen=True)
class PartitionLag:
    """A ``describe`` row; consumer columns None: no member owns it; log end None: topic deleted."""

    topic: str
    partition: int
    current_offset: int | None
    log_end_offset: int | None
    lag: int | None
    consumer_id: str | None = None
    host: str | None = None
    client_id: str | None = None


@dataclass(frozen=True)
class GroupDescription:
    group_id: str
    state: str
    protocol: str  # the assignment strategy ("" while Empty)
    generation: int
    coordinator: int  # broker leading the group's __consumer_offsets partition
    coordinator_host: str
    leader: str
    members: tuple[MemberDescription, ...] = ()
    partitions: tuple[PartitionLag, ...] = ()


# -- reads -----------------------------------------------------------------------------------
def list_groups(groups: GroupCoordinator, states: Iterable[str] | None = None) -> list[GroupListing]:
    """Every group (those in ``states`` only, when given) with its state."""
    registry = groups.registry
    listings = [GroupListing(g, registry.snapshot(g).state) for g in registry.list_groups()]
    wanted = None if states is None else set(states)
    return [listing for listing in listings if wanted is None or listing.state in wanted]


def _coordinator(groups: GroupCoordinator, group_id: str) -> tuple[int, str]:
    broker = groups.replicas.config.broker_id
    if OFFSETS_TOPIC in groups.replicas.list_topics():  # never create the offsets topic by reading
        partition = groups.log_partition(group_id)
        broker = groups.replicas.metadata.partition_states(OFFSETS_TOPIC, [partition])[partition].leader
    registered = groups.replicas.metadata.brokers().get(broker)
    return broker, getattr(registered, "host", "") or socket.gethostname()


def _assigned(record: GroupStateRecord | None, member: MemberRecord) -> tuple[TopicPartition, ...]:
    if record is None or record.members.get(member.key) != member.member_id:
        return ()  # not (yet) part of the recorded generation
    return tuple(sorted(record.partitions_of(member.key)))


def _describe(
    groups: GroupCoordinator, group_id: str, watermarks: dict[str, dict[int, int] | None]
) -> GroupDescription:
    validate_group_id(group_id)
    registry = groups.registry
    committed = committed_offsets(groups, group_id)
    if not group_exists(groups, group_id, committed):
        raise GroupIdNotFoundError(f"Consumer group '{group_id}' does not exist.")
    snap = registry.snapshot(group_id)
    members = tuple(
        MemberDescription(m.member_id, m.instance_id, m.client_id, m.host, _assigned(snap.record, m))
        for m in sorted(active_members(snap), key=lambda m: m.member_id)
    )

    def log_end(topic: str, partition: int) -> int | None:
        if topic not in watermarks:
            try:
                watermarks[topic] = groups.replicas.high_watermarks(topic)
            except TopicNotFoundError:
                watermarks[topic] = None
        return (watermarks[topic] or {}).get(partition)

    def row(tp: TopicPartition, member: MemberDescription | None) -> PartitionLag:
        current, end = committed.get(tp), log_end(*tp)
        lag = None if current is None or end is None else end - current
        if member is None:
            return PartitionLag(tp[0], tp[1], current, end, lag)
        return PartitionLag(tp[0], tp[1], current, end, lag, member.member_id, member.host, member.client_id)

    rows: list[PartitionLag] = []
    owned: set[TopicPartition] = set()
    for member in sorted(members, key=lambda m: (-len(m.partitions), m.member_id)):  # Kafka's order
        rows += [row(tp, member) for tp in member.partitions]
        owned.update(member.partitions)
    rows += [row(tp, None) for tp in sorted(set(committed) - owned)]
    record = snap.record if snap.state != EMPTY else None
    coordinator, host = _coordinator(groups, group_id)
    return GroupDescription(
        group_id,
        snap.state,
        record.protocol if record else "",
        snap.record.generation if snap.record else 0,
        coordinator,
        host,
        record.leader if record else "",
        members,
        tuple(rows),
    )


def describe_group(groups: GroupCoordinator, group_id: str) -> GroupDescription:
    """State, members and per-partition lag of ``group_id`` (GroupIdNotFoundError if unknown)."""
    return _describe(groups, group_id, {})


def consumer_lag(groups: GroupCoordinator) -> pa.Table:
    """Every group's ``describe`` rows as one table (:data:`LAG_SCHEMA`): consumer lag as a table."""
    watermarks: dict[str, dict[int, int] | None] = {}  # one snapshot per topic for all groups
    rows = []
    for group_id in groups.registry.list_groups():
        try:
            description = _describe(groups, group_id, watermarks)
        except GroupIdNotFoundError:
            continue  # deleted while we looked
        rows += [{"group": group_id, **vars(r), "state": description.state} for r in description.partitions]
    return pa.Table.from_pylist(rows, schema=LAG_SCHEMA)


# -- deletes ---------------------------------------------------------------------------------
def _subscribes(member: MemberRecord, topic: str) -> bool:
    return topic in member.topics or (member.pattern is not None and re.fullmatch(member.pattern, topic) is not None)


def _select(
    groups: GroupCoordinator,
    group_id: str,
    topic: str,
    wanted: Iterable[int] | None,
    leftovers: Mapping[TopicPartition, int],
) -> list[TopicPartition]:
    """``topic``'s partitions (all, or ``wanted``), each checked to exist; a deleted topic still
    has the partitions in ``leftovers`` (a group's offsets of it, which may be deleted)."""
    try:
        existing = groups.replicas.partitions_of(validate_topic_name(topic))
    except TopicNotFoundError:
        existing = sorted(p for t, p in leftovers if t == topic)
        if not existing:
            raise
    chosen = existing if wanted is None else sorted(set(wanted))
    missing = [p for p in chosen if p not in existing]
    if missing:
        raise UnknownPartitionError(
            f'The partitions "{",".join(f"{topic}-{p}" for p in missing)}" do not exist (topic {topic} has '
            f"partitions {', '.join(map(str, existing))}); group '{group_id}' was left unchanged"
        )
    return [(topic, p) for p in chosen]


def delete_group_offsets(
    groups: GroupCoordinator,
    group_id: str,
    topic: str | Mapping[str, Iterable[int] | None],
    partitions: Iterable[int] | None = None,
) -> list[TopicPartition]:
    """Delete the committed offsets of ``topic`` (all its partitions, or ``partitions``) for an
    inactive group; ``topic`` may also map several topics to partitions (None: all). Returns
    the partitions handled (Kafka reports each as successful)."""
    validate_group_id(group_id)
    selection = {topic: partitions} if isinstance(topic, str) else dict(topic)
    committed = committed_offsets(groups, group_id)
    if not group_exists(groups, group_id, committed):
        raise GroupIdNotFoundError(
            f"Offsets of group '{group_id}' cannot be deleted: consumer group '{group_id}' does not exist."
        )
    targets = sorted(tp for t, wanted in selection.items() for tp in _select(groups, group_id, t, wanted, committed))
    snap = groups.registry.snapshot(group_id)
    if snap.active:
        subscribed = sorted({t for t, _ in targets if any(_subscribes(m, t) for m in active_members(snap))})
        reason = (
            f"GROUP_SUBSCRIBED_TO_TOPIC (it is subscribed to {', '.join(subscribed)})"
            if subscribed
            else "NON_EMPTY_GROUP"
        )
        raise GroupNotEmptyError(
            f"Offsets of group '{group_id}' could not be deleted due to: {reason}; the group is {snap.state}: "
            "stop its consumers and retry."
        )
    doomed = {tp: None for tp in targets if tp in committed}
    if doomed:
        groups.reset(group_id, doomed)
    return targets


# -- reset: I/O --------------------------------------------------------------------------------
def _scope(
    groups: GroupCoordinator,
    group_id: str,
    scenario: ResetScenario,
    committed: Mapping[TopicPartition, int],
    topics: Sequence[str],
    partitions: Iterable[TopicPartition],
    all_topics: bool,
) -> list[TopicPartition]:
    """The partitions to reset, each checked to exist (Kafka's reset scopes)."""
    chosen = [(str(t), int(p)) for t, p in partitions] + (list(committed) if all_topics else [])
    if scenario.kind == "from-file":
        if topics or chosen or all_topics:
            raise InvalidOffsetSpecError(
                "A reset from a file takes its partitions from the file; give no topics, partitions or all_topics"
            )
        if group_id not in (scenario.plan or {}):
            raise InvalidOffsetSpecError(f"No reset plan for group {group_id} found in the file")
        chosen = list((scenario.plan or {})[group_id])
    elif not (topics or chosen or all_topics):
        raise InvalidOffsetSpecError("One of the reset scopes should be defined: --all-topics, --topic.")
    wanted: dict[str, set[int] | None] = dict.fromkeys(topics)
    for topic, partition in chosen:
        if wanted.setdefault(topic, set()) is not None:
            wanted[topic].add(partition)  # type: ignore[union-attr]
    return sorted({tp for t, ps in wanted.items() for tp in _select(groups, group_id, t, ps, {})})


def plan_group_reset(
    groups: GroupCoordinator,
    group_id: str,
    scenario: ResetScenario,
    *,
    topics: Sequence[str] = (),
    partitions: Iterable[TopicPartition] = (),
    all_topics: bool = False,
    warn: Warn | None = None,
) -> dict[TopicPartition, int]:
    """Validate everything and compute the new offsets of ``group_id``; writes nothing.
    ``warn`` receives Kafka's warning for each offset clamped into the log."""
    snap = groups.registry.snapshot(validate_group_id(group_id))
    if snap.active:
        raise GroupNotEmptyError(
            f"Assignments can only be reset if the group '{group_id}' is inactive, but the current state is "
            f"{snap.state}. Stop its {len(active_members(snap))} active member(s) and retry."
        )
    committed = committed_offsets(groups, group_id)
    scope = _scope(groups, group_id, scenario, committed, topics, partitions, all_topics)
    bounds: dict[TopicPartition, Bounds] = {}
    by_time: dict[TopicPartition, int | None] = {}
    for topic in sorted({t for t, _ in scope}):
        bounds.update({(topic, p): (o.log_start, o.high_watermark) for p, o in groups.replicas.offsets(topic).items()})
        if scenario.timestamp_ms is not None:
            found = log_access.list_offsets(groups.replicas, topic, max(0, scenario.timestamp_ms))
            by_time.update({(topic, p): o for p, o in found.items()})
    return plan_reset(scenario, group_id, scope, committed, bounds, by_time, warn)


def apply_reset(groups: GroupCoordinator, group_id: str, plan: Mapping[TopicPartition, int]) -> None:
    """Commit ``plan`` (the group must still be inactive: the coordinator checks again)."""
    if plan:
        groups.registry.ensure_group(group_id)  # a group reset into being is listed too
        groups.reset(group_id, dict(plan))


def reset_group_offsets(
    groups: GroupCoordinator,
    group_id: str,
    scenario: str | ResetScenario,
    value: object = None,
    *,
    topics: Sequence[str] = (),
    partitions: Iterable[TopicPartition] = (),
    all_topics: bool = False,
    execute: bool = False,
) -> list[tuple[str, int, int]]:
    """Kafka's ``--reset-offsets``: a dry run unless ``execute``; returns ``(topic, partition, new offset)``."""
    if isinstance(scenario, str):
        scenario = reset_scenario(scenario, value, group_ids=[group_id])
    plan = plan_group_reset(groups, group_id, scenario, topics=topics, partitions=partitions, all_topics=all_topics)
    if execute:
        apply_reset(groups, group_id, plan)
    return [(t, p, o) for (t, p), o in sorted(plan.items())]
