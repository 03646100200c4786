"""A driver for ``spark-submit --master spark://...`` (tests/integration/test_spark_standalone.py):
everything a Spark user does with topics, on the cluster the options name, with executors on
the standalone workers. Prints one ``RESULT {json}`` line.

Usage: ``standalone_job.py OPTIONS_JSON OUTPUT_DIR``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import sparklog
from sparklog.maintenance.runner import run_maintenance
from sparklog.spark import consume_into, get_or_create_session, produce, register_topics

ROWS = 2000
KEYS = 50


def main() -> None:
    options: dict[str, str] = json.loads(sys.argv[1])
    out = Path(sys.argv[2])
    spark = get_or_create_session(app_name="sparklog-standalone")
    with sparklog.connect(options) as cluster:
        cluster.create_topic("orders", partitions=2)
        cluster.create_topic("latest", partitions=2, config={"cleanup.policy": "compact"})
    rows = spark.range(ROWS).selectExpr(f"CAST(id % {KEYS} AS STRING) AS key", "CAST(id AS STRING) AS value")
    produced = {t: produce(rows, t, **options).ranges for t in ("orders", "latest")}

    def values(topic: str) -> list[int]:
        read = spark.read.format("sparklog").options(**options).option("subscribe", topic)
        frame = read.option("startingOffsets", "earliest").load()
        return sorted(int(r.value) for r in frame.selectExpr("CAST(value AS STRING) AS value").collect())

    batch_values = values("orders")
    register_topics(spark, True, **options)
    sql_count = spark.sql("SELECT count(*) FROM orders").first()[0]  # type: ignore[index]
    stream = (
        spark.readStream.format("sparklog")
        .options(**options)
        .option("subscribe", "orders")
        .option("startingOffsets", "earliest")
        .load()
        .selectExpr("CAST(value AS STRING) AS value")
        .writeStream.format("parquet")
        .option("path", str(out / "stream"))
        .option("checkpointLocation", str(out / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    stream.awaitTermination()
    stream_count = spark.read.parquet(str(out / "stream")).count()
    landed = consume_into(spark, "landing", "orders", output_path=str(out / "landed"), **options)
    with sparklog.connect(options) as cluster:
        report = run_maintenance(cluster.replicas, spark, ["latest", "orders"])
        committed = cluster.committed_offsets("landing", ["orders"])
    compacted = values("latest")
    executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
    result = {
        "master": spark.sparkContext.master,
        "executors": executors,
        "produced": {t: {str(p): list(r) for p, r in ranges.items()} for t, ranges in produced.items()},
        "batch_values": batch_values == list(range(ROWS)),
        "sql_count": sql_count,
        "stream_count": stream_count,
        "landed": landed.records,
        "committed": {str(tp[1] if isinstance(tp, tuple) else tp): o for tp, o in committed.items()},
        "compacted_records": len(compacted),
        # Compaction keeps each key's newest record (values are ids; key = id % KEYS).
        "compacted_newest": set(range(ROWS - KEYS, ROWS)) <= set(compacted),
        "maintenance": report.summary(),
    }
    print("RESULT " + json.dumps(result), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
