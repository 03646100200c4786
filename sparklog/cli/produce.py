"""``sparklog produce``: Kafka's console producer over the light (non-Spark) producer.

Each stdin line (without its ``\\n`` / ``\\r\\n``) is one record, parsed as Kafka's
``LineMessageReader`` does:

* ``parse.headers=true``: ``<headers><headers.delimiter><rest>``; headers are
  ``k<headers.key.separator>v`` pairs joined by ``headers.separator`` (defaults TAB,
  ``,``, ``:``). An empty headers part means no headers.
* ``parse.key=true``: ``<key><key.separator><value>`` (default separator TAB).
* ``null.marker=X``: a key, value or header value equal to X becomes null.
* A missing separator is an error naming the line number, unless ``ignore.error=true``
  (then the whole text is the value / the pair is a header key with a null value).

Bytes are kept as given: lines are decoded with ``surrogateescape`` and re-encoded the
same way, so non-UTF-8 input round-trips. Records are sent as they are read (so an
interactive session streams) and flushed and closed at EOF; on a malformed line the lines
before it are still delivered, as in Kafka. Default producer settings are the console
producer's: ``acks=all`` and ``linger.ms=1000`` (0 with ``--sync``); ``--producer.config``,
then ``--producer-property``, then ``--request-required-acks`` override them.
"""

from __future__ import annotations

import argparse
import sys
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any, NamedTuple

from sparklog.cli.options import (
    add_command,
    bool_property,
    connect,
    key_value,
    parse_properties,
    text_property,
)
from sparklog.errors import ConfigError, SparklogError

if TYPE_CHECKING:
    from sparklog.model.records import RecordMetadata

__all__ = ["READER_PROPERTIES", "LineReader", "MalformedLineError", "ParsedLine", "register"]

READER_PROPERTIES: dict[str, str | None] = {
    "parse.key": "false",
    "key.separator": "\t",
    "parse.headers": "false",
    "headers.delimiter": "\t",
    "headers.separator": ",",
    "headers.key.separator": ":",
    "null.marker": None,
    "ignore.error": "false",
}
_QUOTED_LINE_LIMIT = 120


class MalformedLineError(SparklogError, ValueError):
    """A stdin line does not have the shape the reader properties ask for."""


class ParsedLine(NamedTuple):
    key: str | None
    value: str | None
    headers: list[tuple[str, str | None]] | None


def _quoted(line: str) -> str:
    shown = line if len(line) <= _QUOTED_LINE_LIMIT else line[:_QUOTED_LINE_LIMIT] + "..."
    return repr(shown)


@dataclass(frozen=True)
class LineReader:
    """Kafka's ``LineMessageReader`` rules; pure, so it is unit-tested on its own."""

    parse_key: bool = False
    key_separator: str = "\t"
    parse_headers: bool = False
    headers_delimiter: str = "\t"
    headers_separator: str = ","
    headers_key_separator: str = ":"
    null_marker: str | None = None
    ignore_error: bool = False

    @classmethod
    def from_properties(cls, props: dict[str, str | None]) -> LineReader:
        reader = cls(
            parse_key=bool_property(props, "parse.key"),
            key_separator=text_property(props, "key.separator"),
            parse_headers=bool_property(props, "parse.headers"),
            headers_delimiter=text_property(props, "headers.delimiter"),
            headers_separator=text_property(props, "headers.separator"),
            headers_key_separator=text_property(props, "headers.key.separator"),
            null_marker=props["null.marker"],
            ignore_error=bool_property(props, "ignore.error"),
        )
        # The same checks as Kafka: with equal markers a line would have two readings.
        if reader.headers_separator == reader.headers_key_separator:
            raise ConfigError("headers.separator and headers.key.separator may not be equal")
        for name in ("key.separator", "headers.separator", "headers.key.separator"):
            if reader.null_marker is not None and reader.null_marker == props[name]:
                raise ConfigError(f"null.marker and {name} may not be equal")
        return reader

    def _null(self, text: str) -> str | None:
        return None if text == self.null_marker else text

    def _headers(self, text: str, line_number: int) -> list[tuple[str, str | None]] | None:
        if text == "":
            return None
        headers: list[tuple[str, str | None]] = []
        for pair in text.split(self.headers_separator):
            key, sep, value = pair.partition(self.headers_key_separator)
            if not sep:
                if not self.ignore_error:
                    raise MalformedLineError(
                        f"No header key separator found in pair {pair!r} on line number {line_number}"
                    )
                headers.append((pair, None))
                continue
            if key == self.null_marker:
                raise MalformedLineError(
                    f"Header keys should not be equal to the null marker {self.null_marker!r} as they can't be null "
                    f"(line number {line_number})"
                )
            headers.append((key, self._null(value)))
        return headers

    def parse(self, line: str, line_number: int) -> ParsedLine:
        """One record from one line (without its line terminator)."""
        headers = None
        rest = line
        if self.parse_headers:
            head, sep, tail = line.partition(self.headers_delimiter)
            if sep:
                headers, rest = self._headers(head, line_number), tail
            elif not self.ignore_error:
                raise MalformedLineError(f"No headers delimiter found on line number {line_number}: {_quoted(line)}")
        key = None
        if self.parse_key:
            head, sep, tail = rest.partition(self.key_separator)
            if sep:
                key, rest = self._null(head), tail
            elif not self.ignore_error:
                raise MalformedLineError(f"No key separator found on line number {line_number}: {_quoted(line)}")
        return ParsedLine(key, self._null(rest), headers)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(
        subparsers,
        "produce",
        _produce,
        "send stdin lines to a topic, one record per line (kafka-console-producer)",
        description=__doc__,
    )
    parser.add_argument("--topic", required=True, help="the topic to produce to")
    parser.add_argument(
        "--property",
        dest="properties",
        type=key_value,
        action="append",
        metavar="KEY=VALUE",
        help="line reader property: " + ", ".join(READER_PROPERTIES) + " (repeatable)",
    )
    parser.add_argument(
        "--producer-property",
        dest="producer_properties",
        type=key_value,
        action="append",
        metavar="KEY=VALUE",
        help="producer config, e.g. linger.ms=100 (repeatable)",
    )
    parser.add_argument(
        "--producer.config",
        "--producer-config",
        dest="producer_config",
        metavar="FILE",
        help="producer configs from a properties file",
    )
    parser.add_argument(
        "--request-required-acks", choices=["0", "1", "all", "-1"], help="acks of each request (default all)"
    )
    parser.add_argument("--sync", action="store_true", help="wait for each record's acknowledgement before the next")


def _producer_configs(args: argparse.Namespace) -> dict[str, Any]:
    from sparklog.config import load_properties

    # Kafka's console producer defaults; --sync waits on every record, so lingering would
    # only add a second to each line.
    configs: dict[str, Any] = {"acks": "all", "linger.ms": "0" if args.sync else "1000"}
    if args.producer_config:
        configs.update(load_properties(args.producer_config))
    configs.update(dict(args.producer_properties or []))
    if args.request_required_acks is not None:
        configs["acks"] = args.request_required_acks
    return configs  # dotted keys pass through **kwargs unchanged


def _encode(text: str | None) -> bytes | None:
    return None if text is None else text.encode("utf-8", "surrogateescape")


def _raise_failed(pending: deque[Future[RecordMetadata]], wait: bool) -> None:
    """Drop acknowledged futures from the front; raise the first failure."""
    while pending and (wait or pending[0].done()):
        pending.popleft().result()


def _lines(stream: IO[bytes]) -> Iterator[tuple[int, str]]:
    for number, raw in enumerate(stream, 1):
        if raw.endswith(b"\n"):
            raw = raw[:-1]
            if raw.endswith(b"\r"):
                raw = raw[:-1]
        yield number, raw.decode("utf-8", "surrogateescape")


def _produce(args: argparse.Namespace) -> int:
    reader = LineReader.from_properties(parse_properties(args.properties, READER_PROPERTIES, "line reader"))
    configs = _producer_configs(args)
    with connect(args) as cluster:
        cluster.describe_topic(args.topic)  # fail before reading stdin, not at the first line typed
        producer = cluster.producer(**configs)
        pending: deque[Future[RecordMetadata]] = deque()
        try:
            for number, line in _lines(sys.stdin.buffer):
                record = reader.parse(line, number)
                headers = None if record.headers is None else [(k, _encode(v)) for k, v in record.headers]
                future = producer.send(args.topic, _encode(record.value), key=_encode(record.key), headers=headers)
                pending.append(future)
                _raise_failed(pending, wait=args.sync)
            producer.flush()
            _raise_failed(pending, wait=True)
        finally:
            producer.close()
    return 0
