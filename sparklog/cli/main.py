"""Entry point of the ``sparklog`` command: builds the parser and maps outcomes to exit codes.

Exit codes: 0 success; 1 a :class:`~sparklog.errors.SparklogError` (reported as the single
stderr line ``Error: <message>``, never a traceback); 2 a command-line usage error (argparse's
usage text and message); 3 ``zookeeper status`` of a stopped server; 130 interrupted.
Anything else escaping a command is a bug and keeps its traceback.

Commands import what they need when they run, so ``--help`` and metadata commands never
load Spark (see :mod:`sparklog.cli`).
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

__all__ = ["build_parser", "main"]

_COMMANDS = (topics, configs, produce, consume, offsets, groups, maintenance, brokers, partitions, zookeeper)
_EXIT_ERROR = 1
_EXIT_INTERRUPTED = 130


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


def _silence_stdout() -> None:
    # The reader went away (e.g. `| head`): further writes, including the interpreter's final
    # flush, must not raise again.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def main(argv: Sequence[str] | None = None) -> int:
    use_utf8_streams()
    parser = build_parser()
    args = parser.parse_args(argv)
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
