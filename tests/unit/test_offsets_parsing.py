"""Offset specifications as Spark's Kafka source spells them (pure parsing)."""

from __future__ import annotations

import pytest

from sparklog.errors import InvalidOffsetSpecError, InvalidTopicError
from sparklog.model.offsets import parse_assign_json, parse_offset_spec, parse_offsets_json

MALFORMED_OFFSETS = [
    "{",
    "",
    "[]",
    "null",
    "5",
    '"t"',
    "{}",
    '{"t": 5}',
    '{"t": [0, 1]}',
    '{"t": {"x": 1}}',
    '{"t": {"0": -3}}',
    '{"t": {"0": "a"}}',
    '{"t": {"0": "5"}}',
    '{"t": {"0": 1.5}}',
    '{"t": {"0": true}}',
    '{"t": {"0": null}}',
    '{"t": {"-1": 0}}',
    '{"t": {"0x1": 0}}',
]


@pytest.mark.parametrize("text", MALFORMED_OFFSETS)
def test_malformed_offsets_json(text: str) -> None:
    with pytest.raises(InvalidOffsetSpecError) as info:
        parse_offsets_json(text)
    assert "startingOffsets" in str(info.value)


def test_error_names_the_option_and_quotes_input() -> None:
    with pytest.raises(InvalidOffsetSpecError, match="endingOffsets") as info:
        parse_offsets_json("{oops", option="endingOffsets")
    assert "{oops" in str(info.value)


@pytest.mark.parametrize("text", [None, b"{}", 5])
def test_offsets_json_non_text(text: object) -> None:
    with pytest.raises(InvalidOffsetSpecError):
        parse_offsets_json(text)  # type: ignore[arg-type]


def test_offsets_json_bad_topic_name() -> None:
    with pytest.raises(InvalidTopicError):
        parse_offsets_json('{"a b": {"0": 1}}')


def test_offsets_json_valid() -> None:
    parsed = parse_offsets_json('{"t1": {"0": 23, "1": -2, "2": -1}, "t.2": {"10": 1700000000000}}')
    assert parsed == {"t1": {0: 23, 1: -2, 2: -1}, "t.2": {10: 1700000000000}}
    assert all(isinstance(p, int) for parts in parsed.values() for p in parts)


MALFORMED_ASSIGN = [
    "{",
    "[]",
    "{}",
    '{"t": 5}',
    '{"t": {"x": 1}}',
    '{"t": {"0": 1}}',
    '{"t": [-1]}',
    '{"t": ["a"]}',
    '{"t": [true]}',
    '{"t": [1.0]}',
    "null",
]


@pytest.mark.parametrize("text", MALFORMED_ASSIGN)
def test_malformed_assign_json(text: str) -> None:
    with pytest.raises(InvalidOffsetSpecError, match="assign"):
        parse_assign_json(text)


def test_assign_json_valid() -> None:
    assert parse_assign_json('{"a": [2, 0, 2], "b": []}') == {"a": [0, 2], "b": []}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("earliest", "earliest"),
        (" LATEST ", "latest"),
        ("-2", "earliest"),
        (-1, "latest"),
        ("0", 0),
        (1700000000000, 1700000000000),
    ],
)
def test_offset_spec(value: object, expected: object) -> None:
    assert parse_offset_spec(value) == expected


@pytest.mark.parametrize("value", ["first", "", "-3", -5, 1.5, True, None, "1e3"])
def test_bad_offset_spec(value: object) -> None:
    with pytest.raises(InvalidOffsetSpecError):
        parse_offset_spec(value)
