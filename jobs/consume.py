"""``spark-submit jobs/consume.py --topic T --group G --sink PATH``: a topic landed in a table.

Each round reads the group's next records (its committed offsets, else
``--starting-offsets``), decodes values (``--value-format raw|json|csv``, json/csv with
``--schema DDL``) into columns next to ``key, topic, partition, offset, timestamp``, and
appends them to the sink (:func:`sparklog.spark.landing.land`). To a Delta sink (the
default) the rows and the group's input offsets commit together, exactly once across
crashes (:func:`sparklog.spark.consume_into`); to parquet/json files, at least once. The
group's offsets are committed too, so ``sparklog groups describe`` and consumer lag show its
progress. A malformed value (not of the schema) goes to ``--dead-letter PATH`` (identity,
raw key and value, error; a Delta table, exactly once, for a Delta sink, else Parquet files)
or, without it, fails the job with nothing committed; it is never dropped. Batch (default): rounds until what is there is landed.
``--stream --trigger 30s``: a round every 30 s until stopped; ``--trigger available-now``
as batch. Exit code 0 ok, 1 sparklog error, 2 bad arguments.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from typing import Any

from sparklog.cli.options import topic_names
from sparklog.spark.job_cli import (
    Trigger,
    add_common_arguments,
    ensure_topic,
    job_parser,
    progress,
    run_job,
    start_spark,
)
from sparklog.spark.landing import SINK_FORMATS, LandResult, land
from sparklog.spark.value_formats import VALUE_FORMATS, ValueFormat, parse_schema

EXAMPLE = """\
  spark-submit jobs/consume.py --topic clicks --group clicks-lake --sink /data/lake/clicks \\
      --value-format json --schema 'user_id STRING, page STRING, ts TIMESTAMP' \\
      --dead-letter /data/lake/clicks-malformed
  spark-submit jobs/consume.py --pattern 'clicks-.*' --group lake --sink /data/lake/all \\
      --stream --trigger 1m --max-offsets-per-trigger 1000000"""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = job_parser("consume", __doc__ or "", EXAMPLE)
    topics = parser.add_mutually_exclusive_group(required=True)
    topics.add_argument("--topic", action="extend", type=topic_names, help="topics to consume, a or a,b (repeatable)")
    topics.add_argument("--pattern", help="consume every topic whose name matches this regular expression")
    parser.add_argument("--group", required=True, help="the consumer group whose offsets track the progress")
    parser.add_argument(
        "--sink",
        required=True,
        help="where the records land: a path, or a table name (db.table) in Spark's catalog, made in the "
        "warehouse dir and registered when missing",
    )
    parser.add_argument("--format", default="delta", choices=SINK_FORMATS, help="the sink's format (default delta)")
    parser.add_argument("--value-format", default="raw", choices=VALUE_FORMATS, help="how values decode (default raw)")
    parser.add_argument("--schema", metavar="DDL", help="json/csv values' schema, e.g. 'id BIGINT, name STRING'")
    parser.add_argument("--dead-letter", metavar="PATH", help="land malformed values here (default: fail the job)")
    parser.add_argument(
        "--starting-offsets",
        default="earliest",
        help="where a partition the group has no offset for starts: earliest, latest or Spark's JSON",
    )
    parser.add_argument("--max-offsets-per-trigger", type=int, metavar="N", help="at most N records per round")
    add_common_arguments(parser)
    args = parser.parse_args(argv)
    if args.value_format != "raw" and not args.schema:
        parser.error(f"--value-format {args.value_format} needs --schema DDL")
    if args.trigger is not None and not args.stream:
        parser.error("--trigger goes with --stream")
    return args


def _topics(args: argparse.Namespace) -> list[str]:
    """The topics named, or matching ``--pattern``; an unknown one is an error (before Spark)."""
    import sparklog
    from sparklog.errors import ConfigError, TopicNotFoundError
    from sparklog.model.topic import is_internal

    with sparklog.connect() as cluster:
        if args.pattern is None:
            for topic in args.topic:
                ensure_topic(cluster.replicas, topic, args.create_partitions)
            return list(dict.fromkeys(args.topic))
        try:
            matcher = re.compile(args.pattern)
        except re.error as exc:
            raise ConfigError(f"--pattern {args.pattern!r} is not a regular expression: {exc}") from exc
        found = [t for t in cluster.list_topics() if not is_internal(t) and matcher.fullmatch(t)]
        if not found:
            raise TopicNotFoundError(f"No topic matches --pattern {args.pattern!r} (topics: {cluster.list_topics()})")
        return found


def consume_job(args: argparse.Namespace) -> str:
    topics = _topics(args)
    spark = start_spark("sparklog-consume", args.master)
    values = ValueFormat(args.value_format, parse_schema(spark, args.schema) if args.schema else None)
    options: dict[str, Any] = {"startingOffsets": args.starting_offsets}
    if args.max_offsets_per_trigger:
        options["maxOffsetsPerTrigger"] = str(args.max_offsets_per_trigger)
    trigger: Trigger = args.trigger or (Trigger(False, 10.0) if args.stream else Trigger(True))
    progress(f"landing {', '.join(topics)} (group {args.group}) in {args.sink} ({args.format}), {trigger.describe()}")
    began = time.monotonic()
    rounds = records = dead = 0
    while True:
        round_began = time.monotonic()
        result = land(spark, args.group, topics, args.sink, args.format, values, args.dead_letter, **options)
        rounds, records, dead = rounds + 1, records + result.records, dead + result.dead_letters
        if result.records:
            progress(f"round {rounds}: {_describe(result)}")
        if trigger.available_now and not result.records:
            break
        if not trigger.available_now:
            # Processing time: the next round starts one interval after this one started.
            time.sleep(max(0.0, trigger.interval_s - (time.monotonic() - round_began)))
    seconds = time.monotonic() - began
    rate = records / seconds if seconds else 0.0
    mode = "exactly once (rows and offsets in one Delta commit)" if args.format == "delta" else "at least once"
    letters = f"{dead:,} malformed values to {args.dead_letter}" if args.dead_letter else "no malformed values"
    return (
        f"Landed {records:,} records of {', '.join(topics)} in {args.sink} ({args.format}, {mode}) in {rounds} "
        f"rounds in {seconds:.1f} s ({rate:,.0f} records/s); {letters}. Group {args.group} committed "
        f"{_committed(args.group, topics)}; see `sparklog groups describe --group {args.group}`."
    )


def _describe(result: LandResult) -> str:
    parts = [
        f"{t}-{p} {start}..{end - 1}" for (t, p), (start, end) in sorted(result.input_ranges.items()) if end > start
    ]
    return f"{result.records} records ({', '.join(parts)}), {result.dead_letters} dead letters"


def _committed(group: str, topics: list[str]) -> str:
    import sparklog

    with sparklog.connect() as cluster:
        offsets = cluster.committed_offsets(group)
    shown = [f"{t}-{p}={o}" for (t, p), o in sorted(offsets.items()) if t in topics]
    return ", ".join(shown) or "nothing"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return run_job(lambda: consume_job(args))


if __name__ == "__main__":
    sys.exit(main())
