"""``sparklog consume``: Kafka's console consumer, polling the topic's Delta table.

``--topic a,b`` consumes several topics (Kafka's list form). Start position per partition:
the high watermark (only new records), the log start with ``--from-beginning``, or
``--offset`` (a number, ``earliest`` or ``latest``) of the one ``--partition`` of the one
topic. Partitions added while consuming are read from their start. Every ~100 ms the
consumer reads ``partition_offsets`` and fetches ``[position, high watermark)`` of each
partition that grew, so it only ever sees committed records (invariant 5). It stops after
``--max-messages`` records, after ``--timeout-ms`` without a new record, or on Ctrl-C /
SIGTERM, and then prints ``Processed a total of N messages`` on stderr; Ctrl-C exits 130,
as Kafka's console consumer does.

With ``--group g`` it is a member of consumer group ``g`` (the light consumer's
``subscribe``): the group assigns the partitions, each starts at the group's committed offset
(else at the end, or the log start with ``--from-beginning``, i.e. ``auto.offset.reset``),
and the position is committed every ``auto.commit.interval.ms`` and on exit. A poll never
takes more records than ``--max-messages`` still allows, so the commit never skips a record.

Records print with Kafka's ``DefaultMessageFormatter``: the enabled columns of
``CreateTime:<ms>`` (or ``LogAppendTime:<ms>``), ``Partition:<p>``, ``Offset:<o>``,
headers (``k:v,k2:v2`` or ``NO_HEADERS``), key and value, in that order, joined by
``key.separator`` (default TAB, as in Kafka every column separator is the key separator),
ended by ``line.separator``; null shows as ``null.literal``. Bytes are decoded as UTF-8
with invalid sequences replaced. ``--output json`` prints one JSON object per record instead.
A position below the log start (retention ran meanwhile) is an ``OffsetOutOfRangeError``,
never a silent skip (invariant 8).
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import FrameType
from typing import TYPE_CHECKING, Any, NamedTuple

from sparklog.cli.options import (
    UsageError,
    add_command,
    bool_property,
    connect,
    key_value,
    parse_properties,
    text_property,
    topic_names,
)
from sparklog.cli.output import add_output_option, decode_bytes, print_stderr, write_json_line
from sparklog.errors import OffsetOutOfRangeError

if TYPE_CHECKING:
    import pyarrow as pa

    from sparklog.clients.consumer import Consumer
    from sparklog.cluster import Cluster

__all__ = ["FORMATTER_PROPERTIES", "ConsoleRecord", "MessageFormatter", "records_of", "register"]

FORMATTER_PROPERTIES: dict[str, str | None] = {
    "print.timestamp": "false",
    "print.key": "false",
    "print.partition": "false",
    "print.offset": "false",
    "print.headers": "false",
    "print.value": "true",
    "key.separator": "\t",
    "line.separator": "\n",
    "headers.separator": ",",
    "null.literal": "null",
}
_POLL_INTERVAL_S = 0.1
_MAX_OFFSETS_PER_READ = 10_000  # bounds memory when replaying a long partition
_TIMESTAMP_TYPES = {0: "CreateTime", 1: "LogAppendTime"}


class ConsoleRecord(NamedTuple):
    partition: int
    offset: int
    timestamp_ms: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] | None
    topic: str = ""


def records_of(table: pa.Table) -> Iterator[ConsoleRecord]:
    """Rows of a :meth:`Cluster.read` (or consumer poll) table, timestamps in ms."""
    import pyarrow as pa

    columns = {
        name: table.column(name).to_pylist()
        for name in ("topic", "partition", "offset", "timestampType", "key", "value", "headers")
    }
    micros = table.column("timestamp").cast(pa.int64()).to_pylist()
    for i in range(table.num_rows):
        headers = columns["headers"][i]
        yield ConsoleRecord(
            partition=columns["partition"][i],
            offset=columns["offset"][i],
            timestamp_ms=micros[i] // 1000,
            timestamp_type=columns["timestampType"][i],
            key=columns["key"][i],
            value=columns["value"][i],
            headers=None if headers is None else [(h["key"], h["value"]) for h in headers],
            topic=columns["topic"][i],
        )


@dataclass(frozen=True)
class MessageFormatter:
    """Kafka's ``DefaultMessageFormatter``; pure, so it is unit-tested on its own."""

    print_timestamp: bool = False
    print_key: bool = False
    print_partition: bool = False
    print_offset: bool = False
    print_headers: bool = False
    print_value: bool = True
    key_separator: str = "\t"
    line_separator: str = "\n"
    headers_separator: str = ","
    null_literal: str = "null"

    @classmethod
    def from_properties(cls, props: dict[str, str | None]) -> MessageFormatter:
        flags = {name: bool_property(props, name) for name in props if name.startswith("print.")}
        return cls(
            **{name.replace(".", "_"): value for name, value in flags.items()},
            key_separator=text_property(props, "key.separator"),
            line_separator=text_property(props, "line.separator"),
            headers_separator=text_property(props, "headers.separator"),
            null_literal=props["null.literal"] or "",
        )

    def _text(self, data: bytes | None) -> str:
        return decode_bytes(data, self.null_literal)

    def format(self, record: ConsoleRecord) -> str:
        columns = []
        if self.print_timestamp:
            kind = _TIMESTAMP_TYPES.get(record.timestamp_type)
            columns.append(f"{kind}:{record.timestamp_ms}" if kind else "NO_TIMESTAMP")
        if self.print_partition:
            columns.append(f"Partition:{record.partition}")
        if self.print_offset:
            columns.append(f"Offset:{record.offset}")
        if self.print_headers:
            pairs = [f"{key}:{self._text(value)}" for key, value in record.headers or ()]
            columns.append(self.headers_separator.join(pairs) if pairs else "NO_HEADERS")
        if self.print_key:
            columns.append(self._text(record.key))
        if self.print_value:
            columns.append(self._text(record.value))
        return self.key_separator.join(columns) + self.line_separator if columns else ""


def record_json(record: ConsoleRecord) -> dict[str, Any]:
    def text(data: bytes | None) -> str | None:
        return None if data is None else data.decode("utf-8", errors="replace")

    return {
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "timestamp": record.timestamp_ms,
        "timestampType": _TIMESTAMP_TYPES.get(record.timestamp_type, "NO_TIMESTAMP"),
        "key": text(record.key),
        "value": text(record.value),
        "headers": None if record.headers is None else [{"key": k, "value": text(v)} for k, v in record.headers],
    }


def _offset_arg(text: str) -> int | str:
    lowered = text.strip().lower()
    if lowered in ("earliest", "latest"):
        return lowered
    try:
        value = int(lowered)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative offset, earliest or latest, got {text!r}")
    return value


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(
        subparsers, "consume", _consume, "print a topic's records (kafka-console-consumer)", description=__doc__
    )
    parser.add_argument(
        "--topic", required=True, type=topic_names, help="the topic to consume, or several as a list a,b"
    )
    parser.add_argument(
        "--group",
        help="consume as a member of this consumer group: partitions come from the group, reading starts at the "
        "group's committed offsets, and the position is committed while consuming and on exit",
    )
    parser.add_argument(
        "--from-beginning",
        action="store_true",
        help="start at the log start instead of the end (with --group: where the group has no committed offset)",
    )
    parser.add_argument("--partition", type=int, help="consume only this partition")
    parser.add_argument("--offset", type=_offset_arg, help="start offset of --partition: a number, earliest or latest")
    parser.add_argument("--max-messages", type=int, help="exit after this many records")
    parser.add_argument("--timeout-ms", type=int, help="exit when no record arrived for this long (default: never)")
    parser.add_argument(
        "--property",
        dest="properties",
        type=key_value,
        action="append",
        metavar="KEY=VALUE",
        help="formatter property: " + ", ".join(FORMATTER_PROPERTIES) + " (repeatable)",
    )
    add_output_option(parser)


def _check_options(args: argparse.Namespace) -> None:
    if args.partition is not None and len(args.topic) > 1:
        raise UsageError(f"--partition needs exactly one topic, got {','.join(args.topic)}")
    for option in ("partition", "offset"):
        if args.group is not None and getattr(args, option) is not None:
            raise UsageError(f"Options group and {option} cannot be specified together.")
    if args.offset is not None and args.partition is None:
        raise UsageError("The partition is required when offset is specified.")
    if args.offset is not None and args.from_beginning:
        raise UsageError("Options from-beginning and offset cannot be specified together.")
    for name in ("partition", "max_messages", "timeout_ms"):
        value = getattr(args, name)
        if value is not None and value < 0:
            raise UsageError(f"--{name.replace('_', '-')} must be >= 0, got {value}")


def _start_positions(cluster: Cluster, args: argparse.Namespace, topic: str) -> dict[int, int]:
    from sparklog.errors import UnknownPartitionError

    offsets = cluster.partition_offsets(topic)
    if args.partition is not None:
        if args.partition not in offsets:
            raise UnknownPartitionError(
                f"Topic {topic} has partitions 0..{len(offsets) - 1}; partition {args.partition} does not exist"
            )
        offsets = {args.partition: offsets[args.partition]}
    positions = {}
    for partition, (log_start, high_watermark) in offsets.items():
        if args.from_beginning or args.offset == "earliest":
            positions[partition] = log_start
        elif args.offset is None or args.offset == "latest":
            positions[partition] = high_watermark
        elif not log_start <= args.offset <= high_watermark:
            raise OffsetOutOfRangeError(
                f"Offset {args.offset} is out of range for {topic}-{partition}: valid offsets are "
                f"{log_start}..{high_watermark} (log-start..high watermark)"
            )
        else:
            positions[partition] = args.offset
    return positions


def _poll_topics(
    cluster: Cluster,
    positions: dict[str, dict[int, int]],
    follow_new: bool,
    limit: int | None,
    emit: Callable[[ConsoleRecord], None],
) -> int:
    """One poll of every topic (at most ``limit`` records in all); return how many."""
    count = 0
    for topic, topic_positions in positions.items():
        count += _poll_once(cluster, topic, topic_positions, follow_new, None if limit is None else limit - count, emit)
    return count


def _poll_once(
    cluster: Cluster,
    topic: str,
    positions: dict[int, int],
    follow_new: bool,
    limit: int | None,
    emit: Callable[[ConsoleRecord], None],
) -> int:
    """Emit what was committed since the last poll (at most ``limit``); return how many."""
    count = 0
    for partition, (log_start, high_watermark) in sorted(cluster.partition_offsets(topic).items()):
        if partition not in positions:
            if not follow_new:
                continue
            positions[partition] = log_start  # created after we started: all of it is new
        while positions[partition] < high_watermark and (limit is None or count < limit):
            start = positions[partition]
            end = min(high_watermark, start + _MAX_OFFSETS_PER_READ)
            if limit is not None:
                end = min(end, start + limit - count)  # offsets >= records: compaction leaves gaps
            for record in records_of(cluster.read(topic, partition, start_offset=start, end_offset=end)):
                emit(record)
                count += 1
            positions[partition] = end
    return count


def _poll_group(consumer: Consumer, limit: int | None, emit: Callable[[ConsoleRecord], None]) -> int:
    """One poll as a group member (never more than ``limit`` records, so the position the
    consumer commits is exactly past the last record printed)."""
    table = consumer.poll_arrow(0, limit)
    for record in records_of(table):
        emit(record)
    return int(table.num_rows)


def _group_consumer(cluster: Cluster, args: argparse.Namespace) -> Consumer:
    reset = "earliest" if args.from_beginning else "latest"
    consumer = cluster.consumer(args.group, **{"client.id": "console-consumer", "auto.offset.reset": reset})
    try:
        consumer.subscribe(args.topic)
    except BaseException:
        consumer.close()
        raise
    return consumer


@dataclass
class _Printer:
    """Prints records and counts them as they are printed, so an interrupted poll reports
    exactly the records that reached stdout."""

    formatter: MessageFormatter
    json: bool
    count: int = 0

    def __call__(self, record: ConsoleRecord) -> None:
        if self.json:
            write_json_line(record_json(record))
        else:
            sys.stdout.write(self.formatter.format(record))
        self.count += 1


class _StopSignals:
    """SIGINT and SIGTERM end the poll loop between polls, so the total reports exactly the
    records printed (an exception raised inside a write would lose count of one); a second
    Ctrl-C interrupts at once, e.g. a poll waiting for an unreachable ZooKeeper."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _StopSignals:
        self._previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        if signum == signal.SIGINT and signum in self.received:
            raise KeyboardInterrupt
        self.received.append(signum)


def _run(args: argparse.Namespace, fetch: Callable[[int | None], int], printer: _Printer) -> None:
    """Poll until ``--max-messages``, ``--timeout-ms`` idle, Ctrl-C or SIGTERM; report the
    total. After Ctrl-C, KeyboardInterrupt goes on to the caller (exit 130, as Kafka's tools)."""
    with _StopSignals() as signals:
        try:
            last_record = time.monotonic()
            while not signals.received and (args.max_messages is None or printer.count < args.max_messages):
                got = fetch(None if args.max_messages is None else args.max_messages - printer.count)
                sys.stdout.flush()
                if got:
                    last_record = time.monotonic()
                    continue  # more may be waiting: poll again at once
                if args.timeout_ms is not None and (time.monotonic() - last_record) * 1000 >= args.timeout_ms:
                    break
                time.sleep(_POLL_INTERVAL_S)
        finally:
            with contextlib.suppress(BrokenPipeError):  # the reader left; the total still goes to stderr
                sys.stdout.flush()
            print_stderr(f"Processed a total of {printer.count} messages")
    if signal.SIGINT in signals.received:
        raise KeyboardInterrupt


def _consume(args: argparse.Namespace) -> int:
    _check_options(args)
    props = parse_properties(args.properties, FORMATTER_PROPERTIES, "formatter")
    emit = _Printer(MessageFormatter.from_properties(props), json=args.output == "json")
    with connect(args) as cluster:
        if args.group is None:
            positions = {topic: _start_positions(cluster, args, topic) for topic in dict.fromkeys(args.topic)}
            _run(args, lambda limit: _poll_topics(cluster, positions, args.partition is None, limit, emit), emit)
        else:
            with _group_consumer(cluster, args) as consumer:  # closing commits the position
                _run(args, lambda limit: _poll_group(consumer, limit, emit), emit)
    return 0
