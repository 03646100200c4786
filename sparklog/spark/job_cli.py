"""What the ``spark-submit`` jobs share (``jobs/produce.py``, ``jobs/consume.py``): exit codes,
common arguments, the Spark session, progress lines and triggers.

Exit codes: 0 ok, 1 a sparklog error (or a Spark job that failed, its first line shown),
2 bad arguments (argparse's), 130 stopped by Ctrl-C (SIGINT; the shell's code for it): a
streaming job runs until stopped, and stopping it is no error worth a traceback, since
every round that finished is committed and a round cut short commits nothing. Errors print
one ``Error: ...`` line on stderr. Cluster settings come from the usual places
(``SPARKLOG_*`` environment, ``conf/sparklog.properties``, ``spark.sparklog.*`` conf on the
spark-submit line).
"""

from __future__ import annotations

import argparse
import logging
import re
import signal
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
    "EXIT_INTERRUPTED",
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

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
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
    _stop_quietly_on_ctrl_c()
    progress(f"Spark master {spark.sparkContext.master} (application {spark.sparkContext.applicationId})")
    return spark


class _AfterInterrupt(logging.Filter):
    """Drops what py4j logs (with ``logging.exception``, on the root logger) about the call
    a Ctrl-C cut short: the job's own line says what happened."""

    interrupted = False

    def filter(self, record: logging.LogRecord) -> bool:
        return not (self.interrupted and record.exc_info)


_AFTER_INTERRUPT = _AfterInterrupt()


def _stop_quietly_on_ctrl_c() -> None:
    """Replace PySpark's SIGINT handler, which cancels the running Spark jobs through py4j
    from inside the interrupted py4j call (a reentrant call that fails with tracebacks; under
    spark-submit the JVM is going down on the same signal anyway), by a plain
    KeyboardInterrupt that :func:`run_job` turns into one line and exit code 130."""

    def interrupt(signum: int, frame: object) -> None:
        _AFTER_INTERRUPT.interrupted = True
        raise KeyboardInterrupt

    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:  # nohup'd jobs keep ignoring it
        signal.signal(signal.SIGINT, interrupt)
    if _AFTER_INTERRUPT not in logging.getLogger().filters:
        logging.getLogger().addFilter(_AFTER_INTERRUPT)


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
    except KeyboardInterrupt:
        print(
            "Stopped (interrupted): every round that finished is committed, a round cut short committed "
            "nothing; run the job again to continue.",
            file=sys.stderr,
            flush=True,
        )
        return EXIT_INTERRUPTED
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
