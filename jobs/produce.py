"""``spark-submit jobs/produce.py --topic T --source PATH_OR_TABLE --format FMT``: files or a
table into a topic.

Batch (default): the whole source in ONE produce (:func:`sparklog.spark.produce`: atomic per
leader table), then the offsets each partition got. ``--stream --checkpoint DIR``: a growing
directory (or a Delta table) produced as files arrive, exactly once across restarts (the
``sparklog`` sink's query id + batch id, DESIGN §11); ``--trigger available-now`` stops once
what is there is produced, ``--trigger 10s`` runs until stopped. Each row becomes one record:
``--value-expr`` (default: the row as JSON), ``--key-expr`` (default: none), ``--headers-expr``
(``array<struct<key string, value binary>>``), ``--timestamp-expr`` (default: produce time),
SQL over the source's columns. A missing source, a bad expression or schema, or a topic that
does not exist (unless ``--create-partitions N``) is an error and nothing is written.
Exit code 0 ok, 1 sparklog error, 2 bad arguments.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from sparklog.errors import StorageError
from sparklog.spark.job_cli import (
    Trigger,
    add_common_arguments,
    ensure_topic,
    job_parser,
    progress,
    run_job,
    start_spark,
)
from sparklog.spark.job_sources import SOURCE_FORMATS, check_source, read_source, to_records

EXAMPLE = """\
  spark-submit jobs/produce.py --topic clicks --source data/clicks/ --format json \\
      --key-expr 'user_id' --timestamp-expr 'to_timestamp(ts)' --create-partitions 6
  spark-submit jobs/produce.py --topic clicks --source incoming/ --format csv \\
      --stream --checkpoint /var/lib/sparklog/checkpoints/clicks --trigger 30s"""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = job_parser("produce", __doc__ or "", EXAMPLE)
    parser.add_argument("--topic", required=True, help="the topic to produce to")
    parser.add_argument("--source", required=True, help="a file, a directory, or a Delta table's path or name")
    parser.add_argument("--format", required=True, choices=SOURCE_FORMATS, help="the source's format")
    parser.add_argument(
        "--schema", help="the source's schema as DDL (default: inferred), e.g. 'id BIGINT, name STRING'"
    )
    parser.add_argument("--key-expr", metavar="SQL", help="the record key (default: none)")
    parser.add_argument("--value-expr", metavar="SQL", help="the record value (default: the row as JSON)")
    parser.add_argument("--headers-expr", metavar="SQL", help="the headers, array<struct<key string, value binary>>")
    parser.add_argument("--timestamp-expr", metavar="SQL", help="the record timestamp (default: produce time)")
    parser.add_argument("--checkpoint", metavar="DIR", help="with --stream: the query's checkpoint (required)")
    parser.add_argument(
        "--max-files-per-trigger", type=int, metavar="N", help="with --stream: at most N new files per micro-batch"
    )
    add_common_arguments(parser)
    args = parser.parse_args(argv)
    if args.stream and not args.checkpoint:
        parser.error("--stream needs --checkpoint DIR (where the query remembers what it produced)")
    if not args.stream and (args.checkpoint or args.trigger or args.max_files_per_trigger):
        parser.error("--checkpoint, --trigger and --max-files-per-trigger go with --stream")
    return args


def produce_job(args: argparse.Namespace) -> str:
    import sparklog
    from sparklog.spark import produce
    from sparklog.spark.value_formats import parse_schema

    check_source(args.source, args.format)
    with sparklog.connect() as cluster:
        if args.topic not in cluster.list_topics() and args.create_partitions is None:
            ensure_topic(cluster.replicas, args.topic, None)  # the error, before Spark starts
    spark = start_spark("sparklog-produce", args.master)
    schema = parse_schema(spark, args.schema) if args.schema else None
    rows = read_source(
        spark, args.source, args.format, stream=args.stream, schema=schema, max_files=args.max_files_per_trigger
    )
    records = to_records(
        rows,
        key_expr=args.key_expr,
        value_expr=args.value_expr,
        headers_expr=args.headers_expr,
        timestamp_expr=args.timestamp_expr,
    )
    with sparklog.connect() as cluster:
        ensure_topic(cluster.replicas, args.topic, args.create_partitions)
    began = time.monotonic()
    if args.stream:
        return stream(records, args, began)
    progress(f"producing {args.source} ({args.format}) to {args.topic}")
    result = produce(records, args.topic)
    seconds = time.monotonic() - began
    for partition, (start, end) in sorted(result.ranges.items()):
        progress(f"{args.topic}-{partition}: offsets {start}..{end - 1} ({end - start} records)")
    rate = result.records / seconds if seconds else 0.0
    return (
        f"Produced {result.records:,} records from {args.source} ({args.format}) to topic {args.topic} in one "
        f"produce over {len(result.ranges)} partitions in {seconds:.1f} s ({rate:,.0f} records/s)."
    )


def stream(records: Any, args: argparse.Namespace, began: float) -> str:
    trigger: Trigger = args.trigger or Trigger(False, 10.0)
    writer = (
        records.writeStream.format("sparklog")
        .option("topic", args.topic)
        .option("checkpointLocation", args.checkpoint)
        .queryName(f"produce-{args.topic}")
    )
    writer = (
        writer.trigger(availableNow=True)
        if trigger.available_now
        else writer.trigger(processingTime=f"{trigger.interval_s} seconds")
    )
    progress(f"streaming {args.source} ({args.format}) to {args.topic}, trigger {trigger.describe()}")
    query = writer.start()
    done: dict[int, int] = {}
    while not query.awaitTermination(5):
        _new_batches(query, done)
    _new_batches(query, done)
    if query.exception() is not None:
        raise StorageError(f"The streaming produce to topic {args.topic} failed: {query.exception()}")
    seconds = time.monotonic() - began
    return (
        f"Streamed {sum(done.values()):,} records from {args.source} ({args.format}) to topic {args.topic} in "
        f"{len(done)} micro-batches in {seconds:.1f} s; exactly once across restarts from checkpoint {args.checkpoint}."
    )


def _new_batches(query: Any, done: dict[int, int]) -> None:
    """A progress line per micro-batch finished since the last call (``done``: id -> records)."""
    for report in query.recentProgress:
        batch = int(report["batchId"])
        if batch not in done:
            done[batch] = int(report["numInputRows"])
            progress(f"micro-batch {batch}: {done[batch]} records")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return run_job(lambda: produce_job(args))


if __name__ == "__main__":
    sys.exit(main())
