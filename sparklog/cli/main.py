"""Entry point of the ``sparklog`` command: builds the parser and maps outcomes to exit codes.

Exit codes: 0 success; 1 a :class:`~sparklog.errors.SparklogError` (reported as the single
stderr line ``Error: <message>``, never a traceback); 2 a command-line usage error (argparse's
usage text and message); 3 ``zookeeper status`` of a stopped server; 130 interrupted.
Anything else escaping a command is a bug and keeps its traceback.

Commands import what they need when they run, so ``--help`` and metadata commands never
load Spark (see :mod:`sparklog.cli`).

Kafka's habits are accepted: an action flag (``topics --list``, ``groups --describe``,
``configs --alter``) names the subcommand (:func:`kafka_style_argv`), and Ctrl-C exits 130
without a traceback, as Kafka's tools do. Unrecognised arguments are reported with the usage
of the command they were given to.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from sparklog.cli import brokers, configs, consume, groups, maintenance, offsets, partitions, produce, topics, zookeeper
from sparklog.cli.options import UsageError, add_global_options
from sparklog.cli.output import print_error, use_utf8_streams
from sparklog.errors import SparklogError

__all__ = ["build_parser", "kafka_style_argv", "main"]

_COMMANDS = (topics, configs, produce, consume, offsets, groups, maintenance, brokers, partitions, zookeeper)
_EXIT_ERROR = 1
_EXIT_INTERRUPTED = 130
# Kafka's tools name the action with a flag (kafka-topics --list); sparklog's commands with
# these nouns take it as a subcommand of the same name.
_ACTIONS = {
    "topics": ("create", "list", "describe", "alter", "delete"),
    "groups": ("list", "describe", "reset-offsets", "delete", "delete-offsets"),
    "configs": ("describe", "alter"),
}
# Global options that take a value (the value may look like a command name).
_VALUED_GLOBALS = frozenset({"--zookeeper", "--bootstrap-server", "--home", "--config", "--command-config"})


class _ActionFlagsError(UsageError):
    def __init__(self, command: str, flags: Sequence[str]) -> None:
        actions = ", ".join("--" + action for action in _ACTIONS[command])
        super().__init__(
            f"Command must include exactly one action, got {' '.join(flags)}: one of {actions} "
            f"(or sparklog {command} ACTION)"
        )
        self.command = command


def build_parser() -> argparse.ArgumentParser:
    from sparklog import __version__

    parser = argparse.ArgumentParser(
        prog="sparklog",
        description="sparklog: a Kafka-style commit log on Delta tables. Kafka's command-line tools, "
        "for topics stored in the lakehouse.",
    )
    parser.add_argument("--version", action="version", version=f"sparklog {__version__}")
    add_global_options(parser, top_level=True)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in _COMMANDS:
        module.register(commands)
    return parser


def kafka_style_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` with a Kafka action flag turned into its subcommand, wherever it stands after
    the command: ``topics --topic t --describe`` is ``topics describe --topic t``. Raises
    :class:`UsageError` for several action flags; anything else is returned unchanged."""
    args = list(argv)
    index = 0
    while index < len(args) and args[index].startswith("-"):
        index += 2 if args[index] in _VALUED_GLOBALS else 1
    command = args[index] if index < len(args) else None
    if command not in _ACTIONS or index + 1 == len(args) or args[index + 1] in _ACTIONS[command]:
        return args
    rest = args[index + 1 :]
    flags = [arg for arg in rest if arg.startswith("--") and arg[2:] in _ACTIONS[command]]
    if len(flags) > 1:
        raise _ActionFlagsError(command, flags)
    if not flags:
        return args
    rest.remove(flags[0])
    return [*args[: index + 1], flags[0][2:], *rest]


def _command_parser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices[command]
    return parser


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace:
    """Parse, reporting a mistake with the usage of the command it was made in (argparse's
    own check would print the top-level usage for arguments no command recognised)."""
    try:
        argv = kafka_style_argv(argv)
    except _ActionFlagsError as exc:
        _command_parser(parser, exc.command).error(str(exc))
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        getattr(args, "command_parser", parser).error(f"unrecognized arguments: {' '.join(unknown)}")
    return args


def _silence_stdout() -> None:
    # The reader went away (e.g. `| head`): further writes, including the interpreter's final
    # flush, must not raise again.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def main(argv: Sequence[str] | None = None) -> int:
    use_utf8_streams()
    args = _parse(build_parser(), sys.argv[1:] if argv is None else argv)
    try:
        return int(args.handler(args))
    except UsageError as exc:
        args.command_parser.error(str(exc))  # exits 2
        raise  # unreachable: error() exits
    except SparklogError as exc:
        print_error(str(exc))
        return _EXIT_ERROR
    except KeyboardInterrupt:
        return _EXIT_INTERRUPTED
    except BrokenPipeError:
        _silence_stdout()
        return _EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
