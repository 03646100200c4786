"""``spark-submit jobs/retention.py [--topic T ...] [--dry-run]``: scheduled log maintenance.

Runs :func:`sparklog.maintenance.runner.run_maintenance` on every selected topic (default: all but
internal ones), in this order: its ``cleanup.policy`` (``delete`` removes whole old files by
``retention.ms``/``retention.bytes`` in metadata-only commits that advance log-start;
``compact`` keeps the newest record per key, one Spark task and one Delta commit per
partition; ``compact,delete`` both), then optimize (small files merged, ``dataChange=false``)
with a Delta log checkpoint and log cleanup, then vacuum (files removed more than
``file.delete.delay.ms`` ago deleted). Prints one line per partition (or directory) as it is
done, then a summary. Exit code 0 on success, 1 on a sparklog error (e.g. a ``--topic`` that
does not exist, checked before Spark starts), 2 on bad arguments. Cluster settings come from the usual places (``SPARKLOG_*`` environment,
``conf/sparklog.properties``). The Spark session starts only when a selected topic compacts.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import sparklog
from sparklog.admin.topics import require_topics
from sparklog.cli.options import topic_names
from sparklog.errors import SparklogError
from sparklog.maintenance.runner import run_maintenance


def _needs_spark(cluster: sparklog.Cluster, topics: list[str] | None) -> bool:
    from sparklog.model.topic import is_internal

    selected = topics if topics is not None else [t for t in cluster.list_topics() if not is_internal(t)]
    return any("compact" in str(cluster.topic_config(t)["cleanup.policy"]) for t in selected)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="retention", description=__doc__)
    parser.add_argument(
        "--topic", action="extend", type=topic_names, help="topics to maintain, a or a,b (repeatable; default: all)"
    )
    parser.add_argument("--dry-run", action="store_true", help="report what would be done; change nothing")
    args = parser.parse_args(argv)
    if args.dry_run:
        print("DRY RUN: nothing will be changed", flush=True)
    try:
        with sparklog.connect() as cluster:
            require_topics(cluster.replicas, args.topic or ())
            spark: Any = None
            if _needs_spark(cluster, args.topic):
                from sparklog.spark import get_or_create_session

                spark = get_or_create_session(app_name="sparklog-maintenance")
            report = run_maintenance(
                cluster.replicas, spark, args.topic, dry_run=args.dry_run, progress=lambda line: print(line, flush=True)
            )
    except SparklogError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    print(("DRY RUN: " if args.dry_run else "") + report.summary(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
