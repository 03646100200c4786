"""Log maintenance from the shell: retention, DeleteRecords, optimize, vacuum and history.

``retention run [--topic T ...] [--dry-run]`` applies each topic's delete policy
(``retention.ms``, ``retention.bytes``; metadata-only) and prints, per partition, what was
(or, dry, would be) removed and the new log-start offset. ``delete-records --topic T
--partition P --offset O`` is Kafka's ``kafka-delete-records``: records of ``T-P`` below
``O`` disappear, and the new low watermark (log-start) is printed in Kafka's words.

``optimize [--topic T ...] [--dry-run]`` merges each partition's small files into
``segment.bytes``-sized ones (offsets kept, ``dataChange=false``), then checkpoints the
Delta log; it prints per partition the files merged, files written and bytes.
``vacuum [--topic T ...] [--dry-run]`` deletes data files removed from the log more than the
topic's ``file.delete.delay.ms`` ago (and uncommitted orphans that old) and prints the files
and bytes deleted. ``history --topic T [--limit N]`` prints the table's commits in the
columns of Delta's ``DESCRIBE HISTORY``, newest first.

Without ``--topic``, retention, optimize and vacuum cover every topic. Progress (a line per
partition or directory) goes to stderr, results to stdout (``--output json`` for machines).
None of these commands starts Spark.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import asdict
from datetime import datetime
from typing import Any

from sparklog.cli.options import add_command, connect, topic_names
from sparklog.cli.output import add_output_option, print_stderr, table_lines, write_json, write_lines

__all__ = ["register"]

_RETENTION_HEADER = ["TOPIC", "PARTITION", "REMOVED-FILES", "REMOVED-RECORDS", "REMOVED-BYTES", "LOG-START-OFFSET"]
_OPTIMIZE_HEADER = [
    "TOPIC",
    "PARTITION",
    "FILES-MERGED",
    "FILES-WRITTEN",
    "BYTES-MERGED",
    "BYTES-WRITTEN",
    "LIVE-FILES",
]
_VACUUM_HEADER = ["TOPIC", "FILES-DELETED", "BYTES-DELETED"]
_DRY_RUN_LINE = "DRY RUN: nothing was changed"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    retention = subparsers.add_parser("retention", help="apply retention policies (delete policy)")
    actions = retention.add_subparsers(dest="action", metavar="ACTION", required=True)
    run = add_command(actions, "run", _retention_run, "apply retention.ms / retention.bytes now", description=__doc__)
    _add_topics_and_dry_run(run, "print what would be removed; change nothing")
    delete = add_command(
        subparsers,
        "delete-records",
        _delete_records,
        "delete records below an offset (kafka-delete-records)",
        description=__doc__,
    )
    delete.add_argument("--topic", required=True)
    delete.add_argument("--partition", type=int, required=True)
    delete.add_argument("--offset", type=int, required=True, help="records below this offset are deleted")
    add_output_option(delete)
    optimize = add_command(
        subparsers, "optimize", _optimize, "merge small files into segment.bytes-sized ones", description=__doc__
    )
    _add_topics_and_dry_run(optimize, "print what would be merged; change nothing")
    vacuum = add_command(
        subparsers,
        "vacuum",
        _vacuum,
        "delete data files removed longer than file.delete.delay.ms ago",
        description=__doc__,
    )
    _add_topics_and_dry_run(vacuum, "print what would be deleted; delete nothing")
    history = add_command(subparsers, "history", _history, "the commit history of a topic's table", description=__doc__)
    history.add_argument("--topic", required=True)
    history.add_argument("--limit", type=_positive_int, help="only the newest N versions")
    add_output_option(history)


def _add_topics_and_dry_run(parser: argparse.ArgumentParser, dry_run_help: str) -> None:
    parser.add_argument(
        "--topic",
        action="extend",
        type=topic_names,
        help="topics to maintain, a or a,b (repeatable; default: every topic)",
    )
    parser.add_argument("--dry-run", action="store_true", help=dry_run_help)
    add_output_option(parser)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _print_table(header: Sequence[str], rows: Sequence[Sequence[str]], dry_run: bool = False) -> None:
    widths = [max([len(h), *(len(row[i]) for row in rows)]) for i, h in enumerate(header[:-1])]
    write_lines(([_DRY_RUN_LINE] if dry_run else []) + table_lines(header, rows, widths))


def _arrow(before: int, after: int) -> str:
    return f"{before} -> {after}" if before != after else str(after)


# -- retention and DeleteRecords ---------------------------------------------------------------
def _retention_run(args: argparse.Namespace) -> int:
    with connect(args) as cluster:
        results = cluster.run_retention(args.topic, dry_run=args.dry_run)
    if args.output == "json":
        write_json([asdict(r) for r in results])
        return 0
    rows = [
        [
            r.topic,
            str(r.partition),
            str(r.removed_files),
            str(r.removed_records),
            str(r.removed_bytes),
            _arrow(r.old_log_start, r.new_log_start),
        ]
        for r in results
    ]
    _print_table(_RETENTION_HEADER, rows, args.dry_run)
    return 0


def _delete_records(args: argparse.Namespace) -> int:
    with connect(args) as cluster:
        low = cluster.delete_records(args.topic, {args.partition: args.offset})[args.partition]
    if args.output == "json":
        write_json({"topic": args.topic, "partition": args.partition, "low_watermark": low})
        return 0
    write_lines(
        [
            "Executing records delete operation",
            "Records delete operation completed:",
            f"partition: {args.topic}-{args.partition}\tlow_watermark: {low}",
        ]
    )
    return 0


# -- optimize --------------------------------------------------------------------------------
def _optimize(args: argparse.Namespace) -> int:
    from sparklog.maintenance.runner import run_optimize

    with connect(args) as cluster:
        results, checkpoints = run_optimize(cluster.replicas, args.topic, dry_run=args.dry_run, progress=print_stderr)
    if args.output == "json":
        write_json({"partitions": [asdict(r) for r in results], "checkpoints": [asdict(c) for c in checkpoints]})
        return 0
    rows = [
        [
            r.topic,
            str(r.partition),
            str(r.files_merged),
            str(r.files_written),
            str(r.bytes_merged),
            str(r.bytes_written),
            _arrow(r.live_files_before, r.live_files_after),
        ]
        for r in results
    ]
    _print_table(_OPTIMIZE_HEADER, rows, args.dry_run)
    return 0


# -- vacuum ----------------------------------------------------------------------------------
def _vacuum(args: argparse.Namespace) -> int:
    from sparklog.maintenance.runner import run_vacuum

    with connect(args) as cluster:
        results = run_vacuum(cluster.replicas, args.topic, dry_run=args.dry_run, progress=print_stderr)
    if args.output == "json":
        write_json(
            [
                {
                    **asdict(r),
                    "candidates": list(r.candidates),
                    "by_directory": {d: {"files": f, "bytes": b} for d, (f, b) in r.by_directory.items()},
                }
                for r in results
            ]
        )
        return 0
    rows = [
        [
            r.topic,
            str(len(r.candidates) if r.dry_run else r.deleted_files),
            str(r.candidate_bytes if r.dry_run else r.deleted_bytes),
        ]
        for r in results
    ]
    _print_table(_VACUUM_HEADER, rows, args.dry_run)
    return 0


# -- history ---------------------------------------------------------------------------------
def _history(args: argparse.Namespace) -> int:
    from sparklog.admin.topics import HISTORY_COLUMNS, topic_history

    with connect(args) as cluster:
        rows = topic_history(cluster.replicas, args.topic, args.limit)
    if args.output == "json":
        write_json([{k: _json_value(v) for k, v in row.items()} for row in rows])
        return 0
    _print_table(HISTORY_COLUMNS, [[_text_value(row[c]) for c in HISTORY_COLUMNS] for row in rows])
    return 0


def _json_value(value: Any) -> Any:
    return _iso(value) if isinstance(value, datetime) else value


def _text_value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, datetime):
        return _iso(value)
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    return str(value).lower() if isinstance(value, bool) else str(value)


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
