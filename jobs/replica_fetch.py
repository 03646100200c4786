"""``spark-submit jobs/replica_fetch.py [--broker N ...] [--topic T ...]``: catch follower replicas up.

Runs :func:`sparklog.spark.replica_fetch.run_replica_fetch`: one Spark task per follower broker
copies, from each partition's leader, what its replicas lack (after reconciling them with the
leader epoch history when leadership moved), round after round until nothing is left to
copy. Broker agents do the same continuously; the job is for brokers run without an agent
(or to catch a replica up in bulk before starting it). Prints one line per partition copied
or truncated, then a summary. Exit code 0 on success (errors on single partitions are
printed and retried by the next run), 1 on a sparklog error, e.g. a ``--broker`` that is not
registered or a ``--topic`` that does not exist (checked before Spark starts), 2 on bad
arguments.
"""

from __future__ import annotations

import argparse
import sys

import sparklog
from sparklog.admin.brokers import require_fetch_selection
from sparklog.cli.options import topic_names
from sparklog.errors import SparklogError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="replicate", description=__doc__)
    parser.add_argument(
        "--broker", type=int, action="append", help="follower broker to catch up (repeatable; default: all)"
    )
    parser.add_argument(
        "--topic", action="extend", type=topic_names, help="topics to replicate, a or a,b (repeatable; default: all)"
    )
    args = parser.parse_args(argv)
    try:
        with sparklog.connect() as cluster:
            require_fetch_selection(cluster.replicas, args.broker, args.topic)  # before Spark starts
            from sparklog.spark import get_or_create_session
            from sparklog.spark.replica_fetch import run_replica_fetch

            spark = get_or_create_session(app_name="sparklog-replication")
            reports = run_replica_fetch(spark, cluster.replicas, args.broker, args.topic)
    except SparklogError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    records = 0
    for report in reports:
        for topic, partition, copied, log_end in report.copied:
            records += copied
            print(
                f"broker {report.broker_id}: {topic}-{partition}: copied {copied} records; log end {log_end}",
                flush=True,
            )
        for topic, partition, offset in report.truncated:
            print(f"broker {report.broker_id}: {topic}-{partition}: truncated to offset {offset}", flush=True)
        for topic, partition, error in report.errors:
            print(f"broker {report.broker_id}: {topic}-{partition}: not copied: {error}", file=sys.stderr, flush=True)
    brokers = sorted({r.broker_id for r in reports})
    print(f"{records} records copied to brokers {brokers}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
