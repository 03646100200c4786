"""Entry point of ``make bench``: ``python -m benchmarks.run [--runs N] [--only a,b] [--scale F] [--output PATH]``.

``--only`` (alias ``--cases``) selects cases, so a run of the consumer-group cases
(``--only e,f,g,h``) need not repeat the slow producer cases. The report *merges*: cases
of an existing report at ``--output`` that this run did not select are kept (marked
``carried_over`` with their own machine/config), so re-running some cases never drops the
others' figures (``--no-merge`` writes only this run's cases).

Starts one embedded ZooKeeper (under a temporary home) and one ``local[2]`` Spark session
for the whole benchmark, runs the selected cases, prints the results table on stdout and
writes the JSON report. Progress goes to stderr. Exit status 0 when every selected case
ran (whether or not it met its targets), 1 when a case failed with an error.

The code under test is frozen first: ``sparklog/`` (and ``pyspark_sparklog/``, ``conf/``)
are copied to the benchmark's temporary directory and put first on ``sys.path`` and
``PYTHONPATH``, and the working directory moves there, so the driver, the Spark Python
workers and the spawned reader processes all run the same code even if the working tree
is edited during a long run (``--no-snapshot`` benchmarks the working tree directly).
The code's SHA-256 is recorded in the report. ``kill -USR1 <pid>`` dumps every thread's
stack to stderr (to diagnose a hang).
"""

from __future__ import annotations

import argparse
import faulthandler
import hashlib
import json
import os
import shutil
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any

from benchmarks import (
    case_commit_growth,
    case_commit_latency,
    case_compaction,
    case_consumer,
    case_latency,
    case_light_producer,
    case_rebalance,
    case_replication,
    case_retention,
    case_spark_consume,
    case_spark_jobs,
    case_spark_produce,
    case_sql_scan,
    case_store_commits,
    case_store_latency,
    case_wire_commit,
    case_wire_consume,
    case_wire_cpu,
    case_wire_e2e,
    case_wire_groups,
    case_wire_latency,
    case_wire_memory,
    case_wire_produce,
    case_wire_txn,
)
from benchmarks.harness import BenchContext, CaseResult, format_table, machine_info, write_json

CASES: dict[str, ModuleType] = {
    case_spark_produce.CASE: case_spark_produce,
    case_light_producer.CASE: case_light_producer,
    case_sql_scan.CASE: case_sql_scan,
    case_latency.CASE: case_latency,
    case_consumer.CASE: case_consumer,
    case_spark_consume.CASE: case_spark_consume,
    case_commit_latency.CASE: case_commit_latency,
    case_rebalance.CASE: case_rebalance,
    case_retention.CASE: case_retention,
    case_compaction.CASE: case_compaction,
    case_commit_growth.CASE: case_commit_growth,
    case_replication.CASE: case_replication,
    case_wire_produce.CASE: case_wire_produce,
    case_wire_latency.CASE: case_wire_latency,
    case_wire_e2e.CASE: case_wire_e2e,
    case_wire_consume.CASE: case_wire_consume,
    case_wire_memory.CASE: case_wire_memory,
    case_wire_groups.CASE: case_wire_groups,
    case_wire_txn.CASE: case_wire_txn,
    case_wire_commit.CASE: case_wire_commit,
    case_wire_cpu.CASE: case_wire_cpu,
    case_store_commits.CASE: case_store_commits,
    case_store_latency.CASE: case_store_latency,
    case_spark_jobs.CASE: case_spark_jobs,
}
DEFAULT_OUTPUT = Path("benchmarks/results/latest.json")
SPARK_MASTER = "local[2]"
# The 5M-row DataFrame of cases (a)/(c) is cached (~0.6 GB); 1 GB default heap would spill it to disk.
SPARK_CONF = {"spark.driver.memory": "4g"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run", description="sparklog benchmarks vs baselines")
    parser.add_argument("--runs", type=int, default=3, help="runs per case; medians are reported (default 3)")
    parser.add_argument(
        "--only",
        "--cases",
        dest="only",
        default=",".join(CASES),
        help="comma-separated cases to run, e.g. a,c or e,f,g,h (default all)",
    )
    parser.add_argument(
        "--scale", type=float, default=1.0, help="multiplies record counts, e.g. 0.05 for a quick check"
    )
    parser.add_argument(
        "--output", type=Path, default=DEFAULT_OUTPUT, help=f"JSON report path (default {DEFAULT_OUTPUT})"
    )
    parser.add_argument("--no-snapshot", action="store_true", help="run the working tree's sparklog, not a frozen copy")
    parser.add_argument(
        "--no-merge",
        dest="merge",
        action="store_false",
        help="do not keep the other cases of an existing report at --output (default: keep them)",
    )
    args = parser.parse_args(argv)
    selected = [c.strip() for c in args.only.split(",") if c.strip()]
    unknown = [c for c in selected if c not in CASES]
    if unknown or not selected:
        parser.error(f"--only: unknown case(s) {unknown or selected}; choose from {','.join(CASES)}")
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    if args.scale <= 0:
        parser.error("--scale must be positive")
    args.only = selected
    return args


def load_previous(path: Path, selected: list[str]) -> dict[str, Any] | None:
    """The existing report at ``path`` if it has cases this run will not produce (to carry over)."""
    try:
        previous = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(previous, dict) or previous.get("schema") != "sparklog-bench/1":
        return None
    cases = {k: v for k, v in (previous.get("cases") or {}).items() if k not in selected}
    return {**previous, "cases": cases} if cases else None


def write_report(
    path: Path,
    results: list[CaseResult],
    machine: dict[str, object],
    config: dict[str, object],
    previous: dict[str, Any] | None,
) -> None:
    """``write_json``, then add the carried-over cases of ``previous`` (each with its own machine/config)."""
    write_json(path, results, machine, config)
    if previous is None:
        return
    payload = json.loads(path.read_text(encoding="utf-8"))
    origin = {"machine": previous.get("machine"), "config": previous.get("config")}
    # A case carried over twice keeps the machine/config of the run that measured it.
    carried = {k: {**v, "carried_over": v.get("carried_over") or origin} for k, v in previous["cases"].items()}
    fresh = {k: {**v, "carried_over": None} for k, v in payload["cases"].items()}
    merged = dict(sorted({**carried, **fresh}.items()))
    summary = [{**row, "carried_over": True} for row in previous.get("summary") or [] if row.get("case") in carried]
    summary += [{**row, "carried_over": False} for row in payload["summary"]]
    summary.sort(key=lambda row: str(row.get("case")))  # stable: metric order within a case is kept
    payload["cases"] = merged
    payload["summary"] = summary
    payload["config"] = {**payload["config"], "carried_over_cases": sorted(carried)}
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(payload, indent=2, allow_nan=False) + "\n", encoding="utf-8")
    tmp.replace(path)


def _code_digest(root: Path) -> tuple[str, int]:
    """SHA-256 over the ``.py`` files of ``sparklog/`` and ``pyspark_sparklog/`` under ``root``."""
    digest = hashlib.sha256()
    files = sorted(p for pkg in ("sparklog", "pyspark_sparklog") for p in (root / pkg).rglob("*.py"))
    for path in files:
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest(), len(files)


def freeze_code(work_dir: Path) -> Path:
    """Copy the code under test into ``work_dir/code`` and make every process import it from there."""
    assert "sparklog" not in sys.modules, "sparklog must not be imported before the code is frozen"
    repo = Path(__file__).resolve().parents[1]
    code = work_dir / "code"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("sparklog", "pyspark_sparklog", "conf"):
        if (repo / name).is_dir():
            shutil.copytree(repo / name, code / name, ignore=ignore)
    sys.path.insert(0, str(code))
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(code), os.environ.get("PYTHONPATH", "")) if p)
    # Spark's Python workers run ``python -m pyspark.daemon`` in the JVM's working directory,
    # which Python puts first on their path: it must not be the repo.
    os.chdir(work_dir)
    return code


def _check_workers_import(spark: object, code: Path) -> str:
    """Where Spark's Python workers import sparklog from (must be the frozen copy)."""
    where = spark.sparkContext.parallelize([0], 1).map(lambda _: __import__("sparklog").__file__).collect()[0]  # type: ignore[attr-defined]
    if not str(where).startswith(str(code)):
        raise RuntimeError(f"Spark workers import sparklog from {where}, not from the frozen copy {code}")
    return str(where)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.output = args.output.resolve()
    previous = load_previous(args.output, args.only) if args.merge else None
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    # Nothing from the caller's environment may point the benchmark at another cluster.
    for var in ("SPARKLOG_HOME", "SPARKLOG_ZOOKEEPER", "SPARKLOG_CONF"):
        os.environ.pop(var, None)

    work_dir = Path(tempfile.mkdtemp(prefix="sparklog-bench-"))
    original_cwd = Path.cwd()
    code = None if args.no_snapshot else freeze_code(work_dir)
    zk_home = work_dir / "zk-home"
    zk_home.mkdir()
    results: list[CaseResult] = []
    from sparklog.metadata import embedded
    from sparklog.spark import get_or_create_session

    sha, n_files = _code_digest(code if code else Path(__file__).resolve().parents[1])
    machine = machine_info()
    machine["load_average_at_start"] = list(os.getloadavg())
    config = {
        "runs": args.runs,
        "scale": args.scale,
        "only": args.only,
        "spark_master": SPARK_MASTER,
        "spark_conf": SPARK_CONF,
        "sparklog_code": {"frozen_copy": code is not None, "sha256": sha, "files": n_files},
        "command": " ".join(
            [os.path.basename(sys.executable), "-m", "benchmarks.run", *(argv if argv is not None else sys.argv[1:])]
        ),
    }
    started = time.perf_counter()
    spark = None
    try:
        print(f"[bench] starting embedded ZooKeeper under {zk_home} …", file=sys.stderr, flush=True)
        zk_hosts = embedded.ensure_started(zk_home)
        print(f"[bench] ZooKeeper at {zk_hosts}; starting Spark ({SPARK_MASTER}) …", file=sys.stderr, flush=True)
        spark = get_or_create_session(app_name="sparklog-bench", master=SPARK_MASTER, conf=SPARK_CONF)
        if code is not None:
            where = _check_workers_import(spark, code)
            print(
                f"[bench] code under test frozen at {code} (sha256 {sha[:12]}); workers import {where}",
                file=sys.stderr,
                flush=True,
            )
        ctx = BenchContext(
            spark=spark, zk_hosts=zk_hosts, work_dir=work_dir, runs=args.runs, scale=args.scale, output=args.output
        )
        for name in args.only:
            module = CASES[name]
            ctx.log(name, f"{module.TITLE}: {args.runs} run(s), scale {args.scale}, load avg {os.getloadavg()[0]:.2f}")
            case_start = time.perf_counter()
            try:
                result = module.run(ctx)
            except Exception as exc:  # noqa: BLE001 - report it and go on with the other cases
                traceback.print_exc()
                result = CaseResult(name, module.TITLE, module.__doc__ or "", error=f"{type(exc).__name__}: {exc}")
            result.duration_s = time.perf_counter() - case_start
            result.params["load_average_after"] = list(os.getloadavg())
            results.append(result)
            ctx.log(name, f"done in {result.duration_s:.0f} s" + (f" — ERROR {result.error}" if result.error else ""))
            write_report(args.output, results, machine, {**config, "partial": True}, previous)
    finally:
        if spark is not None:
            spark.stop()
        try:
            embedded.stop(zk_home)
        finally:
            os.chdir(original_cwd)
            shutil.rmtree(work_dir, ignore_errors=True)
    config["total_seconds"] = round(time.perf_counter() - started, 1)
    write_report(args.output, results, machine, config, previous)
    print(format_table(results))
    for result in results:
        if not result.error and not result.metrics:
            print(f"({result.case}) {result.title}: skipped — {'; '.join(result.notes) or 'no figures'}")
    if previous is not None:
        print(f"(kept from the previous report: cases {', '.join(sorted(previous['cases']))})", file=sys.stderr)
    print(f"\nJSON report: {args.output}", file=sys.stderr)
    return 1 if any(r.error for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
