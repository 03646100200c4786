"""Child-process entry point of the ``consume_into`` kill test (started by ``spawn``).

The child becomes a process-group leader, so the parent's ``killpg(SIGKILL)`` takes down
the whole "driver host" at once: this Python driver, its Spark JVM and the JVM's Python
workers (where the Spark job's Delta commit runs). It then runs ``consume_into`` in a loop
with a small cap per run (many runs, many moments to die in) and records each finished
run (records, seconds, run index) in an append-only, fsynced log; an empty run means it caught up.
With ``go_path`` it starts Spark and runs one ``consume_into`` of the warm-up topic into
``warmup_output`` first, then waits for that file: the parent warms the next child while the current one runs (a
Spark start and a first run are most of a restart).
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Mapping
from pathlib import Path

WARMUP_TOPIC = "warmup"  # one record, created by the parent


def _lineage(df):  # type: ignore[no-untyped-def]
    """The Delta output: each input record's value and where it came from."""
    from pyspark.sql import functions as F

    return df.select(F.col("value").cast("string").alias("value"), "topic", "partition", "offset")


def consume_into_loop(
    options: Mapping[str, str],
    group_id: str,
    input_topic: str,
    output_topic: str | None,
    output_path: str | None,
    cap: int,
    runs_path: str,
    go_path: str | None = None,
    warmup_output: str | None = None,
) -> None:
    os.setsid()
    from sparklog.spark import consume_into, get_or_create_session

    spark = get_or_create_session(app_name="consume-into-kill", master="local[1]")
    if go_path is not None:
        # A first consume_into is slow (the Python data source's first write: ~5 s); run one on
        # the parent's warm-up topic, as a group of its own, into this child's own warm-up
        # output (a topic, or a Delta path) of the same kind as the real one.
        consume_into(
            spark,
            f"{WARMUP_TOPIC}-{os.getpid()}",
            WARMUP_TOPIC,
            None if output_topic else _lineage,
            output_topic=warmup_output if output_topic else None,
            output_path=None if output_topic else warmup_output,
            **options,
        )
        while not os.path.exists(go_path):
            time.sleep(0.05)
    fd = os.open(runs_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    for index in itertools.count():
        started = time.monotonic()
        result = consume_into(
            spark,
            group_id,
            input_topic,
            None if output_topic else _lineage,
            output_topic=output_topic,
            output_path=output_path,
            maxOffsetsPerTrigger=cap,
            **options,
        )
        os.write(fd, f"{result.records} {time.monotonic() - started:.3f} {index}\n".encode())
        os.fsync(fd)
        if result.records == 0:
            break
    spark.stop()


def finished_runs(path: str | os.PathLike[str]) -> list[tuple[int, float, int]]:
    """(records, seconds, index in its child) per completed run (complete lines only: ``kill -9``
    may cut the last one). A child's run 0 includes Spark's warm-up."""
    text = Path(path).read_text() if Path(path).exists() else ""
    return [(int(r), float(s), int(i)) for r, s, i in (line.split() for line in text.split("\n")[:-1])]
