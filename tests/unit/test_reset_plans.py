"""The pure half of ``groups reset-offsets``: scenario validation, Kafka's datetime and
duration formats, the CSV plan, and the planner's clamping into [log-start, log-end].
Also the Kafka layouts of ``sparklog groups`` (pure formatting). No ZooKeeper, no Delta."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from sparklog.admin.groups import (
    GroupDescription,
    MemberDescription,
    PartitionLag,
    ResetScenario,
    clamp,
    parse_datetime,
    parse_duration,
    parse_reset_csv,
    plan_reset,
    reset_scenario,
)
from sparklog.cli.groups import members_lines, offsets_lines, parse_group_states, reset_lines, state_lines
from sparklog.cli.main import main
from sparklog.errors import InvalidOffsetSpecError

T0 = 1_704_067_200_000  # 2024-01-01T00:00:00Z in ms
BOUNDS = {("t", 0): (2, 10), ("t", 1): (0, 4)}
COMMITTED = {("t", 0): 5}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2024-01-01T00:00:00.000", T0),  # no zone: UTC, as Kafka's Utils.getDateTime
        ("2024-01-01T00:00:00.000Z", T0),
        ("2024-01-01T00:00:00Z", T0),
        ("2024-01-01T01:00:00.000+01:00", T0),
        ("2024-01-01T01:00:00.000+0100", T0),
        ("2024-01-01T01:00:00.000+01", T0),
        ("2023-12-31T19:30:00.000-04:30", T0),
        ("2024-01-01T00:00:01.5", T0 + 1500),
        ("2024-01-01T00:00:00.123", T0 + 123),
        ("1969-12-31T23:59:59.000Z", -1000),
    ],
)
def test_parse_datetime_kafka_formats(text: str, expected: int) -> None:
    assert parse_datetime(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "2024-01-01",
        "2024-01-01 00:00:00.000",
        "2024-13-01T00:00:00.000",
        "2024-02-30T00:00:00.000",
        "2024-01-01T25:00:00.000",
        "2024-01-01T00:00:00.000+25:00",
        "yesterday",
        "",
    ],
)
def test_parse_datetime_rejects_malformed_input(text: str) -> None:
    with pytest.raises(InvalidOffsetSpecError, match=r"Invalid datetime.*YYYY-MM-DDTHH:mm:SS.sss"):
        parse_datetime(text)


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("PT30M", 1_800_000),
        ("P1D", 86_400_000),
        ("P1DT2H3M4S", 93_784_000),
        ("PT0.5S", 500),
        ("PT20.345S", 20_345),
        ("pt1h", 3_600_000),
        ("-PT6H", -21_600_000),
        ("PT-6H3M", -21_420_000),
        ("PT-0.5S", -500),
        ("+P2D", 172_800_000),
        ("PT1,5S", 1500),
    ],
)
def test_parse_duration_java_syntax(text: str, ms: int) -> None:
    assert parse_duration(text) == ms


@pytest.mark.parametrize("text", ["P", "PT", "P1DT", "30M", "PT1.5H", "1h", "P1Y", ""])
def test_parse_duration_rejects_malformed_input(text: str) -> None:
    with pytest.raises(InvalidOffsetSpecError, match=r"Invalid duration.*PnDTnHnMnS"):
        parse_duration(text)


def test_reset_csv_single_group_and_group_columns() -> None:
    assert parse_reset_csv("t,0,5\n\nt,1,7\n", ["g"]) == {"g": {("t", 0): 5, ("t", 1): 7}}
    assert parse_reset_csv("a,t,0,1\nb,t,0,2\n", ["a", "b"]) == {"a": {("t", 0): 1}, "b": {("t", 0): 2}}


@pytest.mark.parametrize(
    ("text", "groups", "fragment"),
    [
        ("t,0", ["g"], "line 1 't,0': expected topic,partition,offset"),
        ("t,0,x", ["g"], "line 1 't,0,x'"),
        ("t,zero,1", ["g"], "line 1"),
        ("t,-1,1", ["g"], "partition -1 is negative"),
        ("bad topic!,0,1", ["g"], "line 1"),
        ("t,0,1", ["a", "b"], "need exactly one group"),
        ("g g,t,0,1", ["g"], "Group id"),
        ("\n\n", ["g"], "The reset plan is empty"),
    ],
)
def test_reset_csv_errors_name_the_line(text: str, groups: list[str], fragment: str) -> None:
    with pytest.raises(InvalidOffsetSpecError) as info:
        parse_reset_csv(text, groups)
    assert fragment in str(info.value)


def test_reset_scenario_validation(tmp_path: Path) -> None:
    assert reset_scenario("to-offset", "12") == ResetScenario("to-offset", offset=12)
    assert reset_scenario("shift-by", -3) == ResetScenario("shift-by", offset=-3)
    assert reset_scenario("by-duration", "PT1S", now_ms=T0) == ResetScenario("by-duration", timestamp_ms=T0 - 1000)
    assert reset_scenario("to-datetime", "2024-01-01T00:00:00.000").timestamp_ms == T0
    plan = tmp_path / "plan.csv"
    plan.write_text("t,0,3\n")
    assert reset_scenario("from-file", str(plan), group_ids=["g"]).plan == {"g": {("t", 0): 3}}
    for kind, value, fragment in (
        ("to-nowhere", None, "Unknown reset scenario 'to-nowhere'"),
        ("to-offset", None, "needs a value"),
        ("to-earliest", 3, "takes no value"),
        ("to-offset", "1.5", "needs an integer"),
        ("from-file", str(tmp_path / "missing.csv"), "Cannot read the reset plan file"),
    ):
        with pytest.raises(InvalidOffsetSpecError, match=fragment):
            reset_scenario(kind, value, group_ids=["g"])


@pytest.mark.parametrize(
    ("scenario", "expected"),
    [
        (ResetScenario("to-earliest"), {("t", 0): 2, ("t", 1): 0}),
        (ResetScenario("to-latest"), {("t", 0): 10, ("t", 1): 4}),
        (ResetScenario("to-current"), {("t", 0): 5, ("t", 1): 4}),  # no commit: the log end, as Kafka
        (ResetScenario("to-offset", offset=3), {("t", 0): 3, ("t", 1): 3}),
        (ResetScenario("to-offset", offset=99), {("t", 0): 10, ("t", 1): 4}),
        (ResetScenario("to-offset", offset=-5), {("t", 0): 2, ("t", 1): 0}),
        (ResetScenario("to-datetime", timestamp_ms=T0), {("t", 0): 7, ("t", 1): 4}),  # -1: the log end
        (ResetScenario("from-file", plan={"g": {("t", 0): 0, ("t", 1): 3}}), {("t", 0): 2, ("t", 1): 3}),
    ],
)
def test_plan_reset_scenarios_and_clamping(scenario: ResetScenario, expected: dict[tuple[str, int], int]) -> None:
    by_time = {("t", 0): 7, ("t", 1): -1}
    assert plan_reset(scenario, "g", BOUNDS, COMMITTED, BOUNDS, by_time) == expected


def test_plan_reset_shift_by_clamps_and_needs_a_committed_offset() -> None:
    assert plan_reset(ResetScenario("shift-by", offset=-4), "g", [("t", 0)], COMMITTED, BOUNDS) == {("t", 0): 2}
    assert plan_reset(ResetScenario("shift-by", offset=4), "g", [("t", 0)], COMMITTED, BOUNDS) == {("t", 0): 9}
    with pytest.raises(InvalidOffsetSpecError, match="Cannot shift offset for partition t-1 of group 'g'"):
        plan_reset(ResetScenario("shift-by", offset=1), "g", [("t", 0), ("t", 1)], COMMITTED, BOUNDS)
    assert [clamp(o, (2, 10)) for o in (1, 2, 5, 10, 11)] == [2, 2, 5, 10, 10]


def test_plan_reset_warns_in_kafkas_words_where_it_clamps() -> None:
    warnings: list[str] = []
    for scenario in (
        ResetScenario("to-offset", offset=3),
        ResetScenario("shift-by", offset=-4),
        ResetScenario("from-file", plan={"g": {("t", 0): 99}}),
    ):
        plan_reset(scenario, "g", [("t", 0)], COMMITTED, BOUNDS, warn=warnings.append)
    assert warnings == [
        "New offset (1) is lower than earliest offset for topic partition t-0. Value will be set to 2",
        "New offset (99) is higher than latest offset for topic partition t-0. Value will be set to 10",
    ]
    plan_reset(ResetScenario("to-earliest"), "g", BOUNDS, COMMITTED, BOUNDS, warn=warnings.append)
    assert len(warnings) == 2, "in range by construction: nothing to warn about"


def test_group_states_filter() -> None:
    assert parse_group_states("stable, EMPTY") == {"Stable", "Empty"}
    assert parse_group_states("reconciling") == {"Reconciling"}  # a consumer-protocol group's (KIP-848)
    with pytest.raises(
        argparse.ArgumentTypeError, match=r"Invalid state list 'Stable,Sleepy'. Valid states are: Empty, "
    ):
        parse_group_states("Stable,Sleepy")


def _description(state: str = "Stable") -> GroupDescription:
    member = MemberDescription("consumer-1-abc", None, "consumer-1", "/10.0.0.1", (("orders", 0), ("orders", 1)))
    rows = (
        PartitionLag("orders", 0, 5, 10, 5, member.member_id, member.host, member.client_id),
        PartitionLag("orders", 1, None, 3, None, member.member_id, member.host, member.client_id),
        PartitionLag("a-rather-long-topic-name", 0, 1, None, None),
    )
    return GroupDescription("g", state, "range", 3, 0, "broker-a", member.member_id, (member,), rows)


def test_kafka_layouts_of_describe_members_state_and_reset() -> None:
    assert offsets_lines(_description()) == [
        "",
        "GROUP           TOPIC                    PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG             CONSUMER-ID     HOST            CLIENT-ID",
        "g               orders                   0          5               10              5               consumer-1-abc  /10.0.0.1       consumer-1",
        "g               orders                   1          -               3               -               consumer-1-abc  /10.0.0.1       consumer-1",
        "g               a-rather-long-topic-name 0          1               -               -               -               -               -",
    ]
    assert members_lines(_description(), verbose=True) == [
        "",
        "GROUP           CONSUMER-ID     HOST            CLIENT-ID       #PARTITIONS     ASSIGNMENT",
        "g               consumer-1-abc  /10.0.0.1       consumer-1      2               orders(0,1)",
    ]
    assert state_lines(_description()) == [
        "",
        "GROUP           COORDINATOR (ID)          ASSIGNMENT-STRATEGY  STATE                #MEMBERS",
        "g               broker-a  (0)             range                Stable               1",
    ]
    assert reset_lines({"g": [("orders", 0, 7)]}) == [
        "",
        "GROUP           TOPIC           PARTITION  NEW-OFFSET",
        "g               orders          0          7",
    ]
    assert offsets_lines(GroupDescription("g", "Empty", "", 0, 0, "h", "")) == []


@pytest.mark.parametrize("action", ["list", "describe", "reset-offsets", "delete", "delete-offsets"])
def test_every_groups_command_has_help(action: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["groups", action, "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: sparklog groups {action}") and "--zookeeper" in out and "--home" in out
