"""Child process of the streaming kill test: copy topic ``src`` to topic ``dst`` with an
exactly-once streaming query (checkpointed, ``trigger(availableNow=True)``), in its own local
Spark session (``local[1]``, small driver heap: the machine is shared).

Run from the repository root as::

    python -m tests.fault.stream_worker <options-json> <checkpoint> <src> <dst> <max> <warm-topic> <ready> <go>

A new JVM's first micro-batch is slow (class loading, Python workers starting), so the worker
first warms up on a throwaway query ``<warm-topic>`` -> ``<warm-topic>-out`` (own
checkpoint), touches ``<ready>``, and waits for ``<go>`` to exist before it starts the real
query: the test keeps the next worker warm while the current one runs. Exits 0 once
everything available at its start is copied, 1 if the query failed. The test SIGKILLs it
(and its JVM and Python workers) at random points.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def copy_topic(
    spark: SparkSession, options: dict[str, str], checkpoint: str, src: str, dst: str, max_offsets: int
) -> int:
    query = (
        spark.readStream.format("sparklog")
        .options(**options)
        .option("subscribe", src)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(max_offsets))
        .load()
        .select("key", "value")
        .writeStream.format("sparklog")
        .options(**options)
        .option("topic", dst)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    if query.exception() is not None:
        print(f"stream worker: query {src} -> {dst} failed: {query.exception()}", file=sys.stderr, flush=True)
        return 1
    return 0


def main(argv: list[str]) -> int:
    from sparklog.spark.session import get_or_create_session

    options_json, checkpoint, src, dst, limit, warm_topic, ready, go = argv
    options = json.loads(options_json)
    spark = get_or_create_session(
        app_name="sparklog-stream-worker",
        master="local[1]",
        conf={"spark.driver.memory": "512m", "spark.sql.shuffle.partitions": "1"},
    )
    if copy_topic(spark, options, f"{checkpoint}-{warm_topic}", warm_topic, f"{warm_topic}-out", 1) != 0:
        return 1
    Path(ready).touch()
    while not Path(go).exists():
        time.sleep(0.05)
    status = copy_topic(spark, options, checkpoint, src, dst, int(limit))
    spark.stop()
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
