"""``sparklog retention run`` and ``sparklog delete-records``: log maintenance from the shell.

``retention run [--topic T ...] [--dry-run]`` applies each topic's delete policy
(``retention.ms``, ``retention.bytes``; metadata-only) and prints, per partition, what was
(or, dry, would be) removed and the new log-start offset. ``delete-records --topic T
--partition P --offset O`` is Kafka's ``kafka-delete-records``: records of ``T-P`` below
``O`` disappear, and the new low watermark (log-start) is printed in Kafka's words. Neither
starts Spark.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict

from sparklog.cli.options import add_command, connect
from sparklog.cli.output import add_output_option, table_lines, write_json, write_lines

__all__ = ["register"]

_RETENTION_HEADER = ["TOPIC", "PARTITION", "REMOVED-FILES", "REMOVED-RECORDS", "REMOVED-BYTES", "LOG-START-OFFSET"]


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    retention = subparsers.add_parser("retention", help="apply retention policies (delete policy)")
    actions = retention.add_subparsers(dest="action", metavar="ACTION", required=True)
    run = add_command(actions, "run", _retention_run, "apply retention.ms / retention.bytes now", description=__doc__)
    run.add_argument("--topic", action="append", help="a topic to maintain (repeatable; default: every topic)")
    run.add_argument("--dry-run", action="store_true", help="print what would be removed; change nothing")
    add_output_option(run)
    delete = add_command(
        subparsers, "delete-records", _delete_records, "delete records below an offset (kafka-delete-records)",
        description=__doc__,
    )  # fmt: skip
    delete.add_argument("--topic", required=True)
    delete.add_argument("--partition", type=int, required=True)
    delete.add_argument("--offset", type=int, required=True, help="records below this offset are deleted")
    add_output_option(delete)


def _retention_run(args: argparse.Namespace) -> int:
    with connect(args) as cluster:
        results = cluster.run_retention(args.topic, dry_run=args.dry_run)
    if args.output == "json":
        write_json([asdict(r) for r in results])
        return 0
    rows = [
        [r.topic, str(r.partition), str(r.removed_files), str(r.removed_records), str(r.removed_bytes),
         f"{r.old_log_start} -> {r.new_log_start}" if r.new_log_start != r.old_log_start else str(r.new_log_start)]
        for r in results
    ]  # fmt: skip
    widths = [max([len(h), *(len(row[i]) for row in rows)]) for i, h in enumerate(_RETENTION_HEADER[:-1])]
    if args.dry_run:
        write_lines(["DRY RUN: nothing was changed"])
    write_lines(table_lines(_RETENTION_HEADER, rows, widths))
    return 0


def _delete_records(args: argparse.Namespace) -> int:
    with connect(args) as cluster:
        low = cluster.delete_records(args.topic, {args.partition: args.offset})[args.partition]
    if args.output == "json":
        write_json({"topic": args.topic, "partition": args.partition, "low_watermark": low})
        return 0
    write_lines([
        "Executing records delete operation",
        "Records delete operation completed:",
        f"partition: {args.topic}-{args.partition}\tlow_watermark: {low}",
    ])  # fmt: skip
    return 0
