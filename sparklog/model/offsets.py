"""Offset specifications as Kafka and Spark's Kafka source spell them (pure parsing).

* ``"earliest"`` / ``"latest"``;
* JSON ``{"topic": {"0": 23, "1": -2}}`` with -2 = earliest and -1 = latest
  (``startingOffsets`` / ``endingOffsets``);
* JSON ``{"topic": {"0": 1700000000000}}`` of timestamps in ms (``...ByTimestamp``);
* ``assign`` JSON ``{"topic": [0, 1]}``.

Malformed input raises :class:`~sparklog.errors.InvalidOffsetSpecError` quoting the input.
"""

from __future__ import annotations

import json
from typing import Literal

from sparklog.errors import InvalidOffsetSpecError
from sparklog.model.topic import validate_topic_name

__all__ = ["EARLIEST", "LATEST", "OffsetSpec", "parse_assign_json", "parse_offset_spec", "parse_offsets_json"]

EARLIEST = -2
LATEST = -1

OffsetSpec = Literal["earliest", "latest"] | int


def _load(text: str, option: str) -> object:
    try:
        return json.loads(text)
    except (json.JSONDecodeError, TypeError) as exc:
        raise InvalidOffsetSpecError(f"{option}: malformed JSON {text!r}: {exc}") from exc


def parse_offsets_json(text: str, option: str = "startingOffsets") -> dict[str, dict[int, int]]:
    """``{"t": {"0": 23}}`` -> ``{"t": {0: 23}}``; values are offsets, -2 or -1 (or timestamps)."""
    if not str(text).strip().startswith("{"):
        # A misspelt keyword ("earlist") is the usual cause: name the option and what it takes.
        allowed = (
            'a JSON object of timestamps in ms such as {"topic":{"0":1700000000000}}'
            if option.endswith("ByTimestamp")
            else 'earliest, latest, or a JSON object of offsets such as {"topic":{"0":23,"1":-2}} '
            "(-2 earliest, -1 latest)"
        )
        raise InvalidOffsetSpecError(f"Option {option}: {text!r} is not allowed; use {allowed}")
    raw = _load(text, option)
    if not isinstance(raw, dict) or not raw:
        raise InvalidOffsetSpecError(f'{option}: expected a JSON object like {{"topic":{{"0":23}}}}, got {text!r}')
    result: dict[str, dict[int, int]] = {}
    for topic, partitions in raw.items():
        validate_topic_name(topic)
        if not isinstance(partitions, dict):
            raise InvalidOffsetSpecError(
                f"{option}: partitions of topic {topic!r} must be an object, got {partitions!r}"
            )
        parsed: dict[int, int] = {}
        for partition, offset in partitions.items():
            try:
                p = int(partition)
            except (TypeError, ValueError):
                raise InvalidOffsetSpecError(
                    f"{option}: partition {partition!r} of topic {topic!r} is not a number"
                ) from None
            if p < 0 or isinstance(offset, bool) or not isinstance(offset, int) or offset < -2:
                raise InvalidOffsetSpecError(
                    f"{option}: bad entry {partition!r}: {offset!r} for topic {topic!r} "
                    "(partition >= 0; offset >= 0, or -2 earliest, -1 latest)"
                )
            parsed[p] = offset
        result[topic] = parsed
    return result


def parse_assign_json(text: str) -> dict[str, list[int]]:
    raw = _load(text, "assign")
    if not isinstance(raw, dict) or not raw:
        raise InvalidOffsetSpecError(f'assign: expected a JSON object like {{"topic":[0,1]}}, got {text!r}')
    result: dict[str, list[int]] = {}
    for topic, partitions in raw.items():
        validate_topic_name(topic)
        if not isinstance(partitions, list) or not all(
            isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in partitions
        ):
            raise InvalidOffsetSpecError(f"assign: partitions of topic {topic!r} must be a list of numbers >= 0")
        result[topic] = sorted(set(partitions))
    return result


def parse_offset_spec(value: object) -> OffsetSpec:
    """``earliest``/``latest``/``-2``/``-1``/a timestamp in ms, as the CLI and API accept."""
    if isinstance(value, str):
        lowered = value.strip().lower()
        if lowered in ("earliest", "latest"):
            return lowered  # type: ignore[return-value]
        try:
            value = int(lowered)
        except ValueError:
            raise InvalidOffsetSpecError(
                f"Offset spec {value!r} is not earliest, latest, -2, -1 or a timestamp in ms"
            ) from None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidOffsetSpecError(f"Offset spec {value!r} is not earliest, latest or a timestamp in ms")
    if value == EARLIEST:
        return "earliest"
    if value == LATEST:
        return "latest"
    if value < 0:
        raise InvalidOffsetSpecError(f"Offset spec {value}: a timestamp must be >= 0 (or -2 earliest, -1 latest)")
    return value
