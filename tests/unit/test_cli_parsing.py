"""Pure parts of the CLI: argument parsing, the console producer's line reader, the console
consumer's formatter, kafka-configs' ``--add-config`` syntax. No ZooKeeper, no Delta."""

from __future__ import annotations

import argparse

import pytest

from sparklog.cli.configs import parse_add_config
from sparklog.cli.consume import ConsoleRecord, MessageFormatter
from sparklog.cli.main import build_parser, kafka_style_argv, main
from sparklog.cli.offsets import parse_partitions, parse_time
from sparklog.cli.options import UsageError, key_value, parse_properties
from sparklog.cli.output import error_line
from sparklog.cli.produce import READER_PROPERTIES, LineReader, MalformedLineError, ParsedLine
from sparklog.errors import ConfigError

COMMANDS = [
    ["topics", "create"],
    ["topics", "list"],
    ["topics", "describe"],
    ["topics", "alter"],
    ["topics", "delete"],
    ["configs", "describe"],
    ["configs", "alter"],
    ["produce"],
    ["consume"],
    ["get-offsets"],
    ["zookeeper", "start"],
    ["zookeeper", "stop"],
    ["zookeeper", "status"],
    ["broker", "start"],
    ["broker", "stop"],
    ["broker", "status"],
    ["groups", "list"],
    ["groups", "describe"],
    ["groups", "reset-offsets"],
    ["groups", "delete"],
    ["groups", "delete-offsets"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_command_has_help(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([*command, "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: sparklog {' '.join(command)}")
    assert "--zookeeper" in out and "--bootstrap-server" in out and "--home" in out


def test_global_options_before_and_after_the_command() -> None:
    parser = build_parser()
    before = parser.parse_args(["--zookeeper", "a:1/x", "--home", "h", "topics", "list"])
    assert (before.zookeeper, before.home) == ("a:1/x", "h")
    after = parser.parse_args(["topics", "list", "--bootstrap-server", "b:2", "--config", "f.properties"])
    assert (after.zookeeper, after.home, after.config_file) == ("b:2", None, "f.properties")
    both = parser.parse_args(["--zookeeper", "a:1", "topics", "list", "--zookeeper", "b:2"])
    assert both.zookeeper == "b:2"


def test_topics_create_config_is_a_topic_config_and_command_config_a_file() -> None:
    args = build_parser().parse_args(
        ["topics", "create", "--topic", "t", "--config", "retention.ms=1", "--command-config", "c.properties"]
    )
    assert args.topic_configs == [("retention.ms", "1")]
    assert args.config_file == "c.properties"


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["topics", "create"], ["consume", "--topic", "t", "--offset", "soon"], ["get-offsets", "--time", "x"]):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 2
    assert "usage:" in capsys.readouterr().err


def test_key_value() -> None:
    assert key_value("a=b=c") == ("a", "b=c")
    assert key_value("a=") == ("a", "")
    for bad in ("novalue", "=x"):
        with pytest.raises(argparse.ArgumentTypeError):
            key_value(bad)


def test_unknown_property_is_rejected() -> None:
    with pytest.raises(ConfigError, match=r"parse.kye"):
        parse_properties([("parse.kye", "true")], READER_PROPERTIES, "line reader")


def reader(**props: str) -> LineReader:
    return LineReader.from_properties(parse_properties(list(props.items()), READER_PROPERTIES, "line reader"))


def test_line_reader_plain_key_and_headers() -> None:
    assert LineReader().parse("a\tb", 1) == ParsedLine(None, "a\tb", None)
    keyed = reader(**{"parse.key": "true", "key.separator": "::"})
    assert keyed.parse("k::v::w", 1) == ParsedLine("k", "v::w", None)
    assert keyed.parse("::v", 1) == ParsedLine("", "v", None)
    both = reader(**{"parse.key": "true", "parse.headers": "true", "null.marker": "~"})
    assert both.parse("a:1,b:~,c:x:y\tk\tv", 1) == ParsedLine("k", "v", [("a", "1"), ("b", None), ("c", "x:y")])
    assert both.parse("\t~\t~", 1) == ParsedLine(None, None, None)
    custom = reader(
        **{"parse.headers": "true", "headers.delimiter": "|", "headers.separator": ";", "headers.key.separator": "="}
    )
    assert custom.parse("a=1;b=2|v", 1) == ParsedLine(None, "v", [("a", "1"), ("b", "2")])


def test_line_reader_errors_name_the_line() -> None:
    keyed = reader(**{"parse.key": "true"})
    with pytest.raises(MalformedLineError, match="No key separator found on line number 7: 'abc'"):
        keyed.parse("abc", 7)
    headed = reader(**{"parse.headers": "true"})
    with pytest.raises(MalformedLineError, match="No headers delimiter found on line number 2"):
        headed.parse("abc", 2)
    with pytest.raises(MalformedLineError, match="No header key separator found in pair 'x' on line number 3"):
        headed.parse("x\tv", 3)
    tolerant = reader(**{"parse.key": "true", "parse.headers": "true", "ignore.error": "true"})
    assert tolerant.parse("abc", 1) == ParsedLine(None, "abc", None)
    assert tolerant.parse("x\tk\tv", 1) == ParsedLine("k", "v", [("x", None)])


def test_line_reader_rejects_ambiguous_properties() -> None:
    for props in ({"null.marker": "\t"}, {"headers.separator": ":"}, {"key.separator": ""}, {"parse.key": "yes"}):
        with pytest.raises(ConfigError):
            reader(**props)


RECORD = ConsoleRecord(0, 5, 1700, 0, b"k", b"v\xff", [("h1", b"a"), ("h2", None)])


def test_formatter_default_prints_the_value_only() -> None:
    assert MessageFormatter().format(RECORD) == "v\ufffd\n"
    assert MessageFormatter().format(RECORD._replace(value=None)) == "null\n"


def test_formatter_kafka_column_order_and_separators() -> None:
    every = MessageFormatter(
        print_timestamp=True, print_key=True, print_partition=True, print_offset=True, print_headers=True
    )
    assert every.format(RECORD) == "CreateTime:1700\tPartition:0\tOffset:5\th1:a,h2:null\tk\tv\ufffd\n"
    log_append = RECORD._replace(timestamp_type=1, headers=None, key=None)
    assert every.format(log_append) == "LogAppendTime:1700\tPartition:0\tOffset:5\tNO_HEADERS\tnull\tv\ufffd\n"
    custom = MessageFormatter(print_key=True, print_value=False, key_separator="|", line_separator=";")
    assert custom.format(RECORD) == "k;"
    assert MessageFormatter(print_value=False).format(RECORD) == ""


def test_add_config_syntax() -> None:
    assert parse_add_config("a=1,b=[x,y],c=") == {"a": "1", "b": "x,y", "c": ""}
    assert parse_add_config("cleanup.policy=[compact,delete]") == {"cleanup.policy": "compact,delete"}
    with pytest.raises(UsageError, match="key=val"):
        parse_add_config("a=1,b")


def test_get_offsets_arguments() -> None:
    assert parse_partitions("0,2,4-6") == frozenset({0, 2, 4, 5, 6})
    assert (parse_time("-2"), parse_time("latest"), parse_time("1700")) == ("earliest", "latest", 1700)
    for bad in ("a", "3-1", "-1"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_partitions(bad)
    with pytest.raises(argparse.ArgumentTypeError):
        parse_time("-5")


def test_error_line_is_one_line() -> None:
    assert error_line("boom\n  detail\n\nmore") == "Error: boom; detail; more"


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["topics", "--list"], ["topics", "list"]),
        (["topics", "--topic", "t", "--describe"], ["topics", "describe", "--topic", "t"]),
        (
            ["--zookeeper", "z:1", "--home", "topics", "groups", "--reset-offsets", "--group", "g"],
            ["--zookeeper", "z:1", "--home", "topics", "groups", "reset-offsets", "--group", "g"],
        ),
        (["configs", "--bootstrap-server=z:1", "--alter"], ["configs", "alter", "--bootstrap-server=z:1"]),
        (["groups", "--delete-offsets", "--group", "g"], ["groups", "delete-offsets", "--group", "g"]),
        (["topics", "describe", "--topic", "t"], ["topics", "describe", "--topic", "t"]),  # already ours
        (["configs", "alter", "--delete-config", "k"], ["configs", "alter", "--delete-config", "k"]),
        (["consume", "--topic", "t"], ["consume", "--topic", "t"]),
    ],
)
def test_kafka_action_flags_become_subcommands(argv: list[str], expected: list[str]) -> None:
    assert kafka_style_argv(argv) == expected


def test_kafka_action_flags_parse(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(UsageError, match="exactly one action, got --list --describe"):
        kafka_style_argv(["topics", "--list", "--describe"])
    args = build_parser().parse_args(kafka_style_argv(["groups", "--describe", "--group", "g", "--members"]))
    assert (args.command, args.action, args.group, args.members) == ("groups", "describe", ["g"], True)
    with pytest.raises(SystemExit) as exit_info:
        main(["topics", "--list", "--describe"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: sparklog topics") and "--list" in err and "--describe" in err


def test_unrecognised_arguments_print_the_subcommands_usage(capsys: pytest.CaptureFixture[str]) -> None:
    for argv, usage in (
        (["topics", "list", "--bogus"], "usage: sparklog topics list"),
        (["groups", "describe", "--group", "g", "--bogus", "x"], "usage: sparklog groups describe"),
        (["consume", "--topic", "t", "extra"], "usage: sparklog consume"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith(usage), err
        assert "unrecognized arguments: " + " ".join(argv[-2 if argv[-1] == "x" else -1 :]) in err, err


def test_comma_separated_topic_lists() -> None:
    args = build_parser().parse_args(["groups", "delete-offsets", "--group", "g", "--topic", "a,b", "--topic", "c:0,1"])
    assert args.topic == [("a", None), ("b", None), ("c", frozenset({0, 1}))]
    maintenance = build_parser().parse_args(["optimize", "--topic", "a,b", "--topic", "c"])
    assert maintenance.topic == ["a", "b", "c"]
    for bad in ("a,b:0", "a,,b", ":0"):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["groups", "delete-offsets", "--group", "g", "--topic", bad])
