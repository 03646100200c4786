"""What the ``spark-submit`` jobs share (``jobs/produce.py``, ``jobs/consume.py``): exit codes,
common arguments, the Spark session, progress lines and triggers.

Exit codes: 0 ok, 1 a sparklog error (or a Spark job that failed, its first line shown),
2 bad arguments (argparse's). Errors print one ``Error: ...`` line on stderr. Cluster
settings come from the usual places (``SPARKLOG_*`` environment, ``conf/sparklog.properties``,
``spark.sparklog.*`` conf on the spark-submit line).
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sparklog.errors import ConfigError, SparklogError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from sparklog.runtime.replica_manager import ReplicaManager

__all__ = [
    "EXIT_ERROR",
    "EXIT_OK",
    "EXIT_USAGE",
    "Trigger",
    "add_common_arguments",
    "ensure_topic",
    "job_parser",
    "parse_trigger",
    "progress",
    "run_job",
    "start_spark",
]

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|sec|secs|seconds?|m|min|minutes?)?\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class Trigger:
    """``available-now`` (everything there at start, then stop) or every ``interval_s`` seconds."""

    available_now: bool
    interval_s: float = 0.0

    def describe(self) -> str:
        return "available-now" if self.available_now else f"processing time {self.interval_s:g} s"


def parse_trigger(text: str) -> Trigger:
    """argparse type: ``available-now`` or a processing-time interval (``10s``, ``500ms``, ``1 minute``)."""
    if text.strip().lower() in ("available-now", "availablenow", "available_now"):
        return Trigger(True)
    match = _DURATION.match(text)
    if match is None:
        raise argparse.ArgumentTypeError(f"expected available-now or an interval such as 10s, 500ms, 1m; got {text!r}")
    unit = (match.group(2) or "s").lower()
    scale = 0.001 if unit == "ms" else 60.0 if unit.startswith("m") else 1.0
    return Trigger(False, float(match.group(1)) * scale)


def job_parser(prog: str, doc: str, example: str) -> argparse.ArgumentParser:
    """A parser whose ``--help`` ends with a worked example."""
    return argparse.ArgumentParser(
        prog=prog,
        description=doc,
        epilog=f"Example:\n{example}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--master", help="Spark master, e.g. spark://host:7077 (default: spark-submit's --master, else local[*])"
    )
    parser.add_argument(
        "--create-partitions",
        type=int,
        metavar="N",
        help="create the topic with N partitions when it does not exist (default: a missing topic is an error)",
    )
    parser.add_argument("--stream", action="store_true", help="run as a streaming job until stopped")
    parser.add_argument(
        "--trigger",
        type=parse_trigger,
        default=None,
        help="with --stream: available-now, or a processing-time interval such as 10s (default 10s)",
    )


def ensure_topic(replicas: ReplicaManager, topic: str, create_partitions: int | None) -> None:
    """The topic must exist, or be created with ``create_partitions`` partitions."""
    from sparklog.admin.topics import create_topic, require_topics

    if topic in replicas.list_topics():
        return
    if create_partitions is None:
        require_topics(replicas, [topic])
        return
    if create_partitions < 1:
        raise ConfigError(f"--create-partitions must be at least 1, got {create_partitions}")
    create_topic(replicas, topic, create_partitions)
    progress(f"created topic {topic} with {create_partitions} partitions")


def start_spark(app_name: str, master: str | None) -> SparkSession:
    from sparklog.spark import get_or_create_session

    spark = get_or_create_session(app_name=app_name, master=master)
    progress(f"Spark master {spark.sparkContext.master} (application {spark.sparkContext.applicationId})")
    return spark


def progress(line: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {line}", flush=True)


def _spark_failure(exc: Exception) -> str | None:
    """The first line of a failed Spark job's error (pyspark's captured exceptions), or None."""
    try:
        from pyspark.errors.exceptions.base import PySparkException
    except ImportError:
        return None
    if not isinstance(exc, PySparkException):
        return None
    for line in str(exc).splitlines():
        if "Malformed" in line or "nothing committed" in line:
            return line.strip()
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__


def run_job(main: Callable[[], str]) -> int:
    """Run ``main`` (returns the summary paragraph); map errors to exit codes."""
    try:
        summary = main()
    except SparklogError as exc:
        print(f"Error: {exc}", file=sys.stderr, flush=True)
        return EXIT_ERROR
    except Exception as exc:
        line = _spark_failure(exc)
        if line is None:
            raise
        print(f"Error: the Spark job failed: {line}", file=sys.stderr, flush=True)
        return EXIT_ERROR
    print(summary, flush=True)
    return EXIT_OK
