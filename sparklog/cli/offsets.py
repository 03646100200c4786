"""``sparklog get-offsets``: offsets per partition at a point in time (``kafka-get-offsets``).

Prints ``topic:partition:offset`` lines sorted by topic and partition. ``--time`` is
``latest``/``-1`` (the high watermark, the default), ``earliest``/``-2`` (the log start) or
a timestamp in ms (the first offset whose timestamp is at or after it). When no record is
that recent the line is ``topic:partition:`` with nothing after the colon, as in Kafka
(JSON: ``"offset": null``). ``--topic`` is a name or a regular expression (all topics if
absent); ``--partitions`` filters by ``0,1,4-6``. Metadata and Delta stats only: no Spark.
"""

from __future__ import annotations

import argparse

from sparklog.cli.options import add_command, connect, select_topics
from sparklog.cli.output import add_output_option, write_json, write_lines
from sparklog.errors import InvalidOffsetSpecError, TopicNotFoundError, UnknownPartitionError
from sparklog.model.offsets import OffsetSpec, parse_offset_spec

__all__ = ["parse_partitions", "parse_time", "register"]


def parse_time(text: str) -> OffsetSpec:
    """argparse type of ``--time``."""
    try:
        return parse_offset_spec(text)
    except InvalidOffsetSpecError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def parse_partitions(text: str) -> frozenset[int]:
    """argparse type of ``--partitions``: ``0,2,5-7``."""
    result: set[int] = set()
    for part in text.split(","):
        low, dash, high = part.strip().partition("-")
        try:
            first = int(low)
            last = int(high) if dash else first
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected partition ids like 0,1,4-6, got {text!r}") from None
        if first < 0 or last < first:
            raise argparse.ArgumentTypeError(f"bad partition range {part.strip()!r} in {text!r}")
        result.update(range(first, last + 1))
    return frozenset(result)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(
        subparsers,
        "get-offsets",
        _get_offsets,
        "print offsets per partition at a time (kafka-get-offsets)",
        description=__doc__,
    )
    parser.add_argument("--topic", help="a topic name or a regular expression over names (default: all topics)")
    parser.add_argument("--partitions", type=parse_partitions, help="partition ids, e.g. 0,1,4-6 (default: all)")
    parser.add_argument(
        "--time",
        type=parse_time,
        default="latest",
        help="latest or -1 (default), earliest or -2, or a timestamp in ms since the epoch",
    )
    parser.add_argument("--exclude-internal-topics", action="store_true", help="leave out internal topics")
    add_output_option(parser)


def _get_offsets(args: argparse.Namespace) -> int:
    rows: list[tuple[str, int, int | None]] = []
    with connect(args) as cluster:
        topics = select_topics(cluster, args.topic, exclude_internal=args.exclude_internal_topics)
        for topic in topics:
            for partition, offset in sorted(cluster.list_offsets(topic, args.time).items()):
                if args.partitions is None or partition in args.partitions:
                    rows.append((topic, partition, None if offset < 0 else offset))
    if not rows:
        error = UnknownPartitionError if topics else TopicNotFoundError
        raise error("Could not match any topic-partitions with the specified filters")
    if args.output == "json":
        write_json([{"topic": t, "partition": p, "offset": o} for t, p, o in rows])
    else:
        write_lines(f"{t}:{p}:{'' if o is None else o}" for t, p, o in rows)
    return 0
