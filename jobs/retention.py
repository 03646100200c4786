"""``spark-submit jobs/retention.py [--topic T ...] [--dry-run]``: scheduled log maintenance.

Applies every selected topic's delete policy (``retention.ms``/``retention.bytes``,
metadata-only Delta commits that advance log-start) and prints what it removed per
partition. Exit code 0 on success, 1 on a sparklog error. Cluster settings come from the
usual places (``SPARKLOG_*`` environment, ``conf/sparklog.properties``).
"""

from __future__ import annotations

import argparse
import sys

import sparklog
from sparklog.errors import SparklogError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="retention", description=__doc__)
    parser.add_argument("--topic", action="append", help="topic to maintain (repeatable; default: all)")
    parser.add_argument("--dry-run", action="store_true", help="report what would be removed; change nothing")
    args = parser.parse_args(argv)
    try:
        with sparklog.connect() as cluster:
            results = cluster.run_retention(args.topic, dry_run=args.dry_run)
    except SparklogError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    verb = "would remove" if args.dry_run else "removed"
    for r in results:
        print(
            f"{r.topic}-{r.partition}: {verb} {r.removed_files} files, {r.removed_records} records, "
            f"{r.removed_bytes} bytes; log-start {r.old_log_start} -> {r.new_log_start}",
            flush=True,
        )
    print(f"{len(results)} partitions checked", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
