"""Writing command results: text in the layouts of Kafka's tools, or JSON for machines.

Invariants:

* Results go to stdout, everything else (progress, totals, errors) to stderr.
* Both streams are UTF-8 whatever the locale (Kafka's tools write UTF-8 bytes too), so
  record values print the same on every machine.
* An error is reported as exactly one line ``Error: <message>``: a multi-line message is
  folded onto that line, so scripts can rely on ``head -1`` / ``grep ^Error:``.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import sys
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = [
    "EXIT_NOT_RUNNING",
    "OUTPUT_FORMATS",
    "add_output_option",
    "comma_list",
    "decode_bytes",
    "error_line",
    "print_error",
    "print_stderr",
    "report_status",
    "table_lines",
    "use_utf8_streams",
    "write_json",
    "write_json_line",
    "write_lines",
]

OUTPUT_FORMATS = ("text", "json")
# ``status`` of a background server that is not running (the LSB init-script convention).
EXIT_NOT_RUNNING = 3


def add_output_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--output",
        choices=OUTPUT_FORMATS,
        default="text",
        help="text (Kafka's tool layout, the default) or json (for machines)",
    )


def use_utf8_streams() -> None:
    """Make stdout/stderr UTF-8 so output never depends on the locale."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(encoding="utf-8", errors="replace")


def write_lines(lines: Iterable[str]) -> None:
    out = sys.stdout
    for line in lines:
        out.write(line)
        out.write("\n")
    out.flush()


def write_json(value: Any) -> None:
    """One JSON document (indented: it is also read by people)."""
    sys.stdout.write(json.dumps(value, indent=2, ensure_ascii=False))
    sys.stdout.write("\n")
    sys.stdout.flush()


def write_json_line(value: Any) -> None:
    """One compact JSON document per line (JSON Lines), for streams of records."""
    sys.stdout.write(json.dumps(value, ensure_ascii=False, separators=(",", ":")))
    sys.stdout.write("\n")


def print_stderr(message: str) -> None:
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


def error_line(message: str) -> str:
    # Messages such as the embedded ZooKeeper's start failure carry a log tail over several
    # lines; the contract is one line, so fold them.
    parts = [part.strip() for part in str(message).splitlines() if part.strip()]
    return "Error: " + ("; ".join(parts) if parts else "unknown error")


def print_error(message: str) -> None:
    print_stderr(error_line(message))


def decode_bytes(data: bytes | None, null_literal: str) -> str:
    """Bytes as text the way the console consumer shows them (invalid UTF-8 replaced)."""
    return null_literal if data is None else data.decode("utf-8", errors="replace")


def comma_list(values: Iterable[object]) -> str:
    return ",".join(str(v) for v in values)


def table_lines(header: Sequence[str], rows: Sequence[Sequence[str]], widths: Sequence[int]) -> list[str]:
    """Kafka's printf layout: each column but the last left-aligned in its width, one space
    apart (a longer value widens only its own row, as ``%-15s`` does)."""

    def line(cells: Sequence[str]) -> str:
        return " ".join([*(c.ljust(w) for c, w in zip(cells[:-1], widths, strict=False)), cells[-1]]).rstrip()

    return [line(header), *(line(row) for row in rows)]


def report_status(args: argparse.Namespace, status: Any, line: str) -> int:
    """A background server's status (a dataclass with ``running``): ``line``, or the status as
    JSON with ``--output json``; exit 0 when it runs, :data:`EXIT_NOT_RUNNING` when not."""
    if args.output == "json":
        write_json(dataclasses.asdict(status))
    else:
        write_lines([line])
    return 0 if status.running else EXIT_NOT_RUNNING
