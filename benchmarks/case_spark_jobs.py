"""Case (x): the spark-submit jobs vs the API they wrap (issue 21).

What it measures: 1,000,000 rows (``id BIGINT, user STRING, score DOUBLE``; 8 Parquet files,
written untimed) produced into an 8-partition topic and landed from it into a Delta table
with JSON values decoded by a schema, twice in the same run:

- **sparklog (the jobs):** ``spark-submit --master local[2] jobs/produce.py --topic job
  --source SRC --format parquet`` and ``spark-submit --master local[2] jobs/consume.py
  --topic job --group job --sink LAKE --value-format json --schema DDL``, each a process of
  its own, timed wall clock (JVM start included: what a user waits for). The rate each job
  reports for its own work (after Spark started) is kept per run (``*_job_reported``).
- **baseline (the API in this process's session):** ``produce(to_records(spark.read.parquet
  (SRC)), "direct")`` and ``consume_into(spark, "direct", "direct",
  ValueFormat("json", schema).landed, output_path=LAKE2)``: the same work without the job
  around it (argument parsing, topic checks, the session start).

Both sides check their answer (records produced; records landed, once each). No target:
the figures say what the job shell costs. ``--only x`` runs it alone; ``--scale`` applies.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from benchmarks.harness import BenchContext, CaseResult, Metric, RunEnv, alternate, timed

CASE = "x"
TITLE = "spark-submit produce/consume jobs vs produce/consume_into called directly (1M rows)"
RECORDS = 1_000_000
TOPIC_PARTITIONS = 8
SCHEMA = "id BIGINT, user STRING, score DOUBLE"
REPO = Path(__file__).resolve().parents[1]
_RATE = re.compile(r"\(([\d,]+) records/s\)")


def _source(ctx: BenchContext, records: int) -> str:
    path = ctx.work_dir / f"jobs-source-{records}"
    if not path.exists():
        ctx.spark.range(0, records, 1, 8).selectExpr(
            "id", "concat('user-', id % 1000) AS user", "id * 1.5 AS score"
        ).write.parquet(str(path))
    return str(path)


def _submit(env: RunEnv, job: str, args: list[str]) -> tuple[float, float]:
    """Run a job; (wall seconds, the records/s its summary reports)."""
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("SPARKLOG_")}
    child_env.update(SPARKLOG_ZOOKEEPER=env.zk_connect, SPARKLOG_HOME=str(env.home))
    submit = Path(sys.executable).with_name("spark-submit")
    command = [str(submit), "--master", "local[2]", "--driver-memory", "2g", str(REPO / "jobs" / f"{job}.py"), *args]
    seconds, done = timed(
        lambda: subprocess.run(command, env=child_env, capture_output=True, text=True, timeout=3600, check=False)
    )
    if done.returncode != 0:
        raise AssertionError(f"{job} job exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    rates = _RATE.findall(done.stdout)
    return seconds, float(rates[-1].replace(",", "")) if rates else float("nan")


def _landed(path: Path) -> int:
    import pyarrow.parquet as pq

    from sparklog.log.delta_sink import DeltaSink

    sink = DeltaSink(str(path))
    return sum(pq.ParquetFile(str(Path(sink.root) / p)).metadata.num_rows for p in sink.live_paths())


def run(ctx: BenchContext) -> CaseResult:
    import sparklog
    from sparklog.spark import consume_into, produce
    from sparklog.spark.job_sources import to_records
    from sparklog.spark.value_formats import ValueFormat, parse_schema

    records = ctx.scaled(RECORDS, minimum=1000)
    result = CaseResult(CASE, TITLE, __doc__ or "", params={"records": records, "schema": SCHEMA})
    source = _source(ctx, records)
    values = ValueFormat("json", parse_schema(ctx.spark, SCHEMA))
    rates: dict[str, list[float]] = {k: [] for k in ("produce", "produce_api", "consume", "consume_api")}
    for run_no in range(1, ctx.runs + 1):
        with ctx.fresh_env(CASE, run_no) as env:
            with sparklog.connect(env.options) as cluster:
                for topic in ("job", "direct"):
                    cluster.create_topic(topic, partitions=TOPIC_PARTITIONS)
            extra: dict[str, Any] = {}

            def job_produce() -> float:
                ctx.log(CASE, f"run {run_no}/{ctx.runs} produce job …")
                seconds, extra["produce_job_reported"] = _submit(
                    env, "produce", ["--topic", "job", "--source", source, "--format", "parquet"]
                )
                return seconds

            def api_produce() -> float:
                ctx.log(CASE, f"run {run_no}/{ctx.runs} produce() …")
                frame = to_records(ctx.spark.read.parquet(source))
                seconds, produced = timed(lambda: produce(frame, "direct", **env.options))
                assert produced.records == records, produced.ranges
                return seconds

            p_job, p_api = alternate(run_no, job_produce, api_produce)

            def job_consume() -> float:
                ctx.log(CASE, f"run {run_no}/{ctx.runs} consume job …")
                args = ["--topic", "job", "--group", "job", "--sink", str(env.scratch / "job-lake")]
                seconds, extra["consume_job_reported"] = _submit(
                    env, "consume", [*args, "--value-format", "json", "--schema", SCHEMA]
                )
                assert _landed(env.scratch / "job-lake") == records
                return seconds

            def api_consume() -> float:
                ctx.log(CASE, f"run {run_no}/{ctx.runs} consume_into() …")
                lake = str(env.scratch / "direct-lake")
                seconds, done = timed(
                    lambda: consume_into(ctx.spark, "direct", "direct", values.landed, output_path=lake, **env.options)
                )
                assert done.records == records and _landed(Path(lake)) == records
                return seconds

            c_job, c_api = alternate(run_no, job_consume, api_consume)
            for key, seconds in (
                ("produce", p_job),
                ("produce_api", p_api),
                ("consume", c_job),
                ("consume_api", c_api),
            ):
                rates[key].append(records / seconds)
            result.runs.append(
                {
                    "run": run_no,
                    "load_avg": list(os.getloadavg()),
                    **extra,
                    **{f"{k}_records_per_s": v[-1] for k, v in rates.items()},
                }
            )
            ctx.log(CASE, f"run {run_no}/{ctx.runs}: " + ", ".join(f"{k} {v[-1]:,.0f}/s" for k, v in rates.items()))
    result.metrics.append(
        Metric(CASE, "produce job (wall) vs produce()", "records/s", rates["produce"], rates["produce_api"])
    )
    result.metrics.append(
        Metric(CASE, "consume job (wall) vs consume_into()", "records/s", rates["consume"], rates["consume_api"])
    )
    return result
