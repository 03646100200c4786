"""The produce and consume jobs' command lines: triggers, and the combinations refused with
exit code 2 before anything connects (argparse's usage errors)."""

from __future__ import annotations

import pytest

from jobs import consume, produce
from sparklog.spark.job_cli import Trigger, parse_trigger

PRODUCE = ["--topic", "t", "--source", "in/", "--format", "json"]
CONSUME = ["--topic", "t", "--group", "g", "--sink", "lake/"]


@pytest.mark.parametrize(
    ("text", "trigger"),
    [
        ("available-now", Trigger(True)),
        ("10s", Trigger(False, 10.0)),
        ("500ms", Trigger(False, 0.5)),
        ("1 minute", Trigger(False, 60.0)),
        ("2", Trigger(False, 2.0)),
    ],
)
def test_triggers(text: str, trigger: Trigger) -> None:
    assert parse_trigger(text) == trigger


@pytest.mark.parametrize(
    ("module", "argv", "message"),
    [
        (produce, [*PRODUCE, "--stream"], "--stream needs --checkpoint DIR"),
        (produce, [*PRODUCE, "--checkpoint", "c"], "go with --stream"),
        (produce, [*PRODUCE, "--stream", "--checkpoint", "c", "--trigger", "soon"], "expected available-now"),
        (consume, [*CONSUME, "--trigger", "10s"], "--trigger goes with --stream"),
        (consume, [*CONSUME, "--pattern", "t.*"], "not allowed with argument --topic"),
        (consume, [*CONSUME, "--value-format", "json"], "--value-format json needs --schema DDL"),
    ],
)
def test_bad_arguments_exit_2(
    module: object, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        module.parse_args(argv)  # type: ignore[attr-defined]
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_defaults() -> None:
    args = consume.parse_args(CONSUME)
    assert (args.format, args.value_format, args.starting_offsets, args.dead_letter) == (
        "delta",
        "raw",
        "earliest",
        None,
    )
    assert produce.parse_args(PRODUCE).stream is False
