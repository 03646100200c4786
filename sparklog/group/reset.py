"""Reset plans of consumer groups (Kafka's ``--reset-offsets`` scenarios), as pure functions.

:func:`reset_scenario` validates a scenario and its value (integer, ISO-8601 datetime or
duration, CSV plan file); :func:`plan_reset` computes the new offsets from the committed
offsets and the partitions' ``(log-start, log-end)`` bounds. No I/O besides reading a plan
file: :mod:`sparklog.admin.groups` gathers the inputs and applies the result.

Invariant: new offsets are clamped into ``[log-start, log-end]`` where Kafka clamps
(to-offset, shift-by, from-file), and every clamp is reported to the caller's ``warn`` in
Kafka's words ("New offset (99) is higher than latest offset for topic partition t-0. Value
will be set to 10"); the other scenarios are in range by construction, except to-current,
which keeps the committed offset as Kafka does.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Literal, get_args

from sparklog import clock
from sparklog.errors import InvalidOffsetSpecError
from sparklog.model.group_ids import validate_group_id
from sparklog.model.topic import TopicPartition, validate_topic_name

__all__ = [
    "SCENARIOS",
    "Bounds",
    "ResetKind",
    "ResetScenario",
    "Warn",
    "clamp",
    "parse_datetime",
    "parse_duration",
    "parse_reset_csv",
    "plan_reset",
    "reset_scenario",
]

Bounds = tuple[int, int]  # (log-start, log-end)
Warn = Callable[[str], None]  # receives Kafka's warning text for each clamped offset
ResetKind = Literal[
    "to-earliest", "to-latest", "to-current", "to-offset", "shift-by", "to-datetime", "by-duration", "from-file"
]
SCENARIOS: tuple[ResetKind, ...] = get_args(ResetKind)
_VALUED = frozenset({"to-offset", "shift-by", "to-datetime", "by-duration", "from-file"})

_DATETIME = re.compile(r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,3}))?(Z|[+-]\d{2}(?::?\d{2})?)?")
_DURATION = re.compile(
    r"([-+]?)P(?:([-+]?\d+)D)?(T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?(?:([-+]?\d+)(?:[.,](\d{0,9}))?S)?)?", re.IGNORECASE
)


def parse_datetime(text: str) -> int:
    """Kafka's ``--to-datetime``: ``YYYY-MM-DDTHH:mm:SS.sss`` with an optional zone (``Z``,
    ``+01``, ``+0100``, ``+01:00``); without one the time is UTC, as Kafka's
    ``Utils.getDateTime`` reads it. Returns ms since the epoch."""
    match = _DATETIME.fullmatch(text.strip())
    hint = "expected YYYY-MM-DDTHH:mm:SS.sss with an optional time zone (Z, +01:00), e.g. 2024-05-01T08:00:00.000Z"
    if match is None:
        raise InvalidOffsetSpecError(f"Invalid datetime {text!r}: {hint}")
    year, month, day, hour, minute, second = (int(match[i]) for i in range(1, 7))
    zone = match[8]
    try:
        tz = UTC
        if zone and zone != "Z":
            sign = -1 if zone[0] == "-" else 1
            tz = timezone(sign * timedelta(hours=int(zone[1:3]), minutes=int(zone[-2:]) if len(zone) > 3 else 0))
        moment = datetime(year, month, day, hour, minute, second, int((match[7] or "0").ljust(3, "0")) * 1000, tz)
    except ValueError as exc:
        raise InvalidOffsetSpecError(f"Invalid datetime {text!r}: {exc}; {hint}") from None
    return round(moment.timestamp() * 1000)


def parse_duration(text: str) -> int:
    """Kafka's ``--by-duration`` (Java ``Duration.parse``): ``PnDTnHnMn.nS``, e.g. ``PT30M``,
    ``P1DT2H``, ``-PT6H``. Returns milliseconds (sub-millisecond parts are dropped)."""
    match = _DURATION.fullmatch(text.strip())
    if match is None or match[3] == "T" or not any(match[i] for i in (2, 4, 5, 6)):
        raise InvalidOffsetSpecError(
            f"Invalid duration {text!r}: expected an ISO-8601 duration PnDTnHnMnS, e.g. PT30M, P1DT2H or PT0.5S"
        )
    days, hours, minutes = (int(match[i] or 0) for i in (2, 4, 5))
    seconds_ms = int(match[6] or 0) * 1000
    fraction_ms = int((match[7] or "").ljust(3, "0")[:3])
    seconds_ms += -fraction_ms if (match[6] or "").startswith("-") else fraction_ms
    total = ((days * 24 + hours) * 60 + minutes) * 60_000 + seconds_ms
    return -total if match[1] == "-" else total


def parse_reset_csv(text: str, group_ids: Sequence[str]) -> dict[str, dict[TopicPartition, int]]:
    """Kafka's reset plan file: ``topic,partition,offset`` lines (for the one group being
    reset) or ``group,topic,partition,offset`` lines (as ``--export`` writes for several)."""
    plan: dict[str, dict[TopicPartition, int]] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        fields = [f.strip() for f in line.split(",")]
        where = f"Reset plan line {number} {line!r}"
        if len(fields) == 3 and len(group_ids) != 1:
            raise InvalidOffsetSpecError(
                f"{where}: topic,partition,offset lines need exactly one group; write group,topic,partition,offset"
            )
        if len(fields) not in (3, 4):
            raise InvalidOffsetSpecError(f"{where}: expected topic,partition,offset (or group,topic,partition,offset)")
        group, topic, partition, offset = fields if len(fields) == 4 else [group_ids[0], *fields]
        try:
            validate_group_id(group)
            validate_topic_name(topic)
            tp, value = (topic, int(partition)), int(offset)
        except ValueError as exc:  # InvalidGroupIdError / InvalidTopicError are ValueErrors too
            raise InvalidOffsetSpecError(f"{where}: {exc}") from None
        if tp[1] < 0:
            raise InvalidOffsetSpecError(f"{where}: partition {tp[1]} is negative")
        plan.setdefault(group, {})[tp] = value
    if not plan:
        raise InvalidOffsetSpecError("The reset plan is empty: expected topic,partition,offset lines")
    return plan


@dataclass(frozen=True)
class ResetScenario:
    """A validated scenario: ``offset`` for to-offset/shift-by, ``timestamp_ms`` for
    to-datetime/by-duration, ``plan`` (group -> offsets) for from-file."""

    kind: ResetKind
    offset: int | None = None
    timestamp_ms: int | None = None
    plan: Mapping[str, Mapping[TopicPartition, int]] | None = None


def reset_scenario(
    name: str, value: object = None, *, group_ids: Sequence[str] = (), now_ms: int | None = None
) -> ResetScenario:
    """Validate the scenario ``name`` and its ``value`` (an int, a datetime, a duration, or a CSV file path)."""
    kind = next((k for k in SCENARIOS if k == name), None)
    if kind is None:
        raise InvalidOffsetSpecError(f"Unknown reset scenario {name!r}: use one of {', '.join(SCENARIOS)}")
    if (kind in _VALUED) != (value is not None):
        raise InvalidOffsetSpecError(
            f"Reset scenario {kind} {'needs a value' if kind in _VALUED else 'takes no value'}"
        )
    if kind in ("to-offset", "shift-by"):
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, str))
            or not re.fullmatch(r"[-+]?\d+", str(value).strip())
        ):
            raise InvalidOffsetSpecError(f"Reset scenario {kind} needs an integer, got {value!r}")
        return ResetScenario(kind, offset=int(str(value)))
    if kind == "to-datetime":
        return ResetScenario(kind, timestamp_ms=parse_datetime(str(value)))
    if kind == "by-duration":
        now = clock.now_ms() if now_ms is None else now_ms
        return ResetScenario(kind, timestamp_ms=now - parse_duration(str(value)))
    if kind == "from-file":
        try:
            if not isinstance(value, (str, os.PathLike)):
                raise TypeError(f"a path is a str, got {type(value).__name__}")
            text = Path(value).read_text(encoding="utf-8")
        except (OSError, TypeError, UnicodeDecodeError) as exc:
            raise InvalidOffsetSpecError(f"Cannot read the reset plan file {value!r}: {exc}") from None
        return ResetScenario(kind, plan=parse_reset_csv(text, group_ids))
    return ResetScenario(kind)


def clamp(offset: int, bounds: Bounds) -> int:
    return min(max(offset, bounds[0]), bounds[1])


def _clamp_warning(tp: TopicPartition, offset: int, bounds: Bounds) -> str | None:
    """kafka-consumer-groups' warning when ``offset`` is clamped (its checkOffsetsRange order:
    above the log end first), or None when it is in range."""
    where = f"for topic partition {tp[0]}-{tp[1]}. Value will be set to"
    if offset > bounds[1]:
        return f"New offset ({offset}) is higher than latest offset {where} {bounds[1]}"
    if offset < bounds[0]:
        return f"New offset ({offset}) is lower than earliest offset {where} {bounds[0]}"
    return None


def plan_reset(
    scenario: ResetScenario,
    group_id: str,
    partitions: Iterable[TopicPartition],
    committed: Mapping[TopicPartition, int],
    bounds: Mapping[TopicPartition, Bounds],
    by_time: Mapping[TopicPartition, int | None] | None = None,
    warn: Warn | None = None,
) -> dict[TopicPartition, int]:
    """New offsets of ``partitions`` for ``scenario``. ``by_time`` holds the first offset at or
    after the scenario's timestamp (None/-1: no such record, the log end is used, as in Kafka);
    ``warn`` receives a warning for each offset clamped into the log."""
    kind, shift, plan = scenario.kind, int(scenario.offset or 0), {}

    def clamped(tp: TopicPartition, offset: int) -> int:
        warning = _clamp_warning(tp, offset, bounds[tp])
        if warning is not None and warn is not None:
            warn(warning)
        return clamp(offset, bounds[tp])

    for tp in sorted(partitions):
        start, end = bounds[tp]
        if kind == "shift-by" and tp not in committed:
            raise InvalidOffsetSpecError(
                f"Cannot shift offset for partition {tp[0]}-{tp[1]} of group '{group_id}' since there is no current "
                "committed offset; reset it with --to-earliest, --to-latest or --to-offset first"
            )
        found = (by_time or {}).get(tp)
        plan[tp] = (
            start
            if kind == "to-earliest"
            else end
            if kind == "to-latest"
            else committed.get(tp, end)
            if kind == "to-current"
            else clamped(tp, shift)
            if kind == "to-offset"
            else clamped(tp, committed[tp] + shift)
            if kind == "shift-by"
            else (end if found is None or found < 0 else found)
            if kind in ("to-datetime", "by-duration")
            else clamped(tp, (scenario.plan or {})[group_id][tp])  # from-file
        )
    return plan
