"""Shared machinery of the benchmarks: context, timing, statistics, targets, table and JSON.

Every case module exposes ``CASE`` (its letter), ``TITLE`` and
``run(ctx: BenchContext) -> CaseResult``. A case measures sparklog and its baseline on
the same data in the same run, ``ctx.runs`` times, each run in a fresh ``sparklog.home``
and a fresh ZooKeeper chroot of the one embedded server started for the benchmark.
The harness turns the per-run figures into :class:`Metric` rows (medians over runs,
ratio to the baseline, pass/miss against the targets), prints the table and writes JSON.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import importlib.metadata
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "BenchContext",
    "CaseResult",
    "Metric",
    "RunEnv",
    "Target",
    "format_table",
    "machine_info",
    "median",
    "percentile",
    "rotate",
    "timed",
    "write_json",
]

T = TypeVar("T")


# -- statistics -------------------------------------------------------------------------
def median(values: Sequence[float]) -> float:
    """Median of ``values`` (mean of the middle two for an even count); NaN when empty."""
    ordered = sorted(v for v in values if not math.isnan(v))
    if not ordered:
        return math.nan
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2.0


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) with linear interpolation (numpy's default)."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    rank = (len(ordered) - 1) * q / 100.0
    lo = math.floor(rank)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (rank - lo)


def timed(fn: Callable[[], T]) -> tuple[float, T]:
    """``(wall seconds, result)`` of ``fn()``, timed with ``perf_counter``."""
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


# -- metrics and targets ----------------------------------------------------------------
def alternate(run_no: int, sparklog_side: Callable[[], T], baseline_side: Callable[[], T]) -> tuple[T, T]:
    """Run both sides, sparklog first on odd runs: warm caches favour neither. -> (sparklog, baseline)."""
    if run_no % 2:
        first = sparklog_side()
        return first, baseline_side()
    second = baseline_side()
    return sparklog_side(), second


def rotate(run_no: int, sides: dict[str, Callable[[], T]]) -> tuple[list[str], dict[str, T]]:
    """Run every side once, the order rotated by run (run 1: as given, run 2: from the second
    side on, …), so none always goes first. -> (the order, each side's result)."""
    names = list(sides)
    shift = (run_no - 1) % len(names)
    order = names[shift:] + names[:shift]
    return order, {name: sides[name]() for name in order}


@dataclass(frozen=True)
class FilledTopic:
    """A topic a case filled (untimed): where its table lives and what it holds."""

    table_root: str
    live_files: int
    high_watermarks: dict[int, int]


def fill_topic(cluster: Any, topic: str, partitions: int, batches: Sequence[Any]) -> FilledTopic:
    """Create ``topic`` and produce the Arrow ``batches`` into it, one request each."""
    cluster.create_topic(topic, partitions=partitions)
    with cluster.producer(acks=1) as producer:
        for batch in batches:
            producer.send_arrow(topic, batch)
    hw = cluster.high_watermarks(topic)
    assert sum(hw.values()) == sum(b.num_rows for b in batches), hw
    table = cluster.replicas.leader_table(topic)
    return FilledTopic(table.root, len(table.files(table.snapshot())), hw)


def run_record(run_no: int, records: int, s_sec: float, b_sec: float, **extra: Any) -> dict[str, Any]:
    """The per-run JSON row shared by the throughput cases."""
    return {
        "run": run_no,
        "order": "sparklog-first" if run_no % 2 else "baseline-first",
        "load_avg": list(os.getloadavg()),
        "sparklog_seconds": s_sec,
        "baseline_seconds": b_sec,
        "sparklog_records_per_s": records / s_sec,
        "baseline_records_per_s": records / b_sec,
        **extra,
    }


@dataclass(frozen=True)
class Target:
    """One requirement on a metric's median: on the absolute value or on the ratio to the baseline."""

    on: Literal["value", "ratio"]
    op: Literal[">=", "<="]
    bound: float
    label: str

    def met(self, value: float, ratio: float) -> bool | None:
        x = value if self.on == "value" else ratio
        if math.isnan(x):
            return None
        return x >= self.bound if self.op == ">=" else x <= self.bound

    def to_json(self) -> dict[str, Any]:
        return {"on": self.on, "op": self.op, "bound": self.bound, "label": self.label}


@dataclass
class Metric:
    """A row of the results table: per-run figures of sparklog (and the baseline), targets."""

    case: str
    name: str
    unit: str
    sparklog: list[float]
    baseline: list[float] | None = None
    targets: list[Target] = field(default_factory=list)
    higher_is_better: bool = True
    note: str = ""
    # What the baseline is when it has a name (the wire cases: "kafka"), and further columns
    # beside it (the wire cases: {"mock": …}), each with its own ratio; targets apply to the
    # value or to the ratio to the baseline only.
    baseline_label: str = "baseline"
    others: dict[str, list[float]] = field(default_factory=dict)

    @property
    def sparklog_median(self) -> float:
        return median(self.sparklog)

    @property
    def baseline_median(self) -> float:
        return median(self.baseline) if self.baseline else math.nan

    @property
    def ratio(self) -> float:
        """sparklog median ÷ baseline median (for throughputs higher is better, for latencies lower)."""
        return _ratio(self.sparklog_median, self.baseline_median)

    def other_median(self, label: str) -> float:
        return median(self.others.get(label) or [])

    def other_ratio(self, label: str) -> float:
        """sparklog median ÷ the median of the column ``label``."""
        return _ratio(self.sparklog_median, self.other_median(label))

    @property
    def status(self) -> str:
        if not self.targets:
            return "info"
        verdicts = [t.met(self.sparklog_median, self.ratio) for t in self.targets]
        if any(v is None for v in verdicts):
            return "n/a"
        return "pass" if all(verdicts) else "miss"

    def to_json(self) -> dict[str, Any]:
        return {
            "case": self.case,
            "metric": self.name,
            "unit": self.unit,
            "higher_is_better": self.higher_is_better,
            "sparklog_runs": self.sparklog,
            "baseline_runs": self.baseline,
            "sparklog_median": _finite(self.sparklog_median),
            "baseline_median": _finite(self.baseline_median),
            "ratio_to_baseline": _finite(self.ratio),
            "baseline_label": self.baseline_label,
            "others_runs": self.others,
            "others_median": {k: _finite(self.other_median(k)) for k in self.others},
            "ratio_to_others": {k: _finite(self.other_ratio(k)) for k in self.others},
            "targets": [t.to_json() for t in self.targets],
            "target_results": [t.met(self.sparklog_median, self.ratio) for t in self.targets],
            "status": self.status,
            "note": self.note,
        }


@dataclass
class CaseResult:
    """Everything one case produced: raw per-run figures, metric rows, notes."""

    case: str
    title: str
    description: str
    params: dict[str, Any] = field(default_factory=dict)
    runs: list[dict[str, Any]] = field(default_factory=list)
    metrics: list[Metric] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    error: str | None = None
    duration_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "case": self.case,
            "title": self.title,
            "description": self.description,
            "params": self.params,
            "runs": self.runs,
            "metrics": [m.to_json() for m in self.metrics],
            "notes": self.notes,
            "error": self.error,
            "duration_s": round(self.duration_s, 3),
        }


def _ratio(value: float, base: float) -> float:
    if math.isnan(base) or math.isnan(value) or base == 0:
        return math.nan
    return value / base


def _finite(x: float) -> float | None:
    return None if math.isnan(x) else x


# -- run context ------------------------------------------------------------------------
@dataclass(frozen=True)
class RunEnv:
    """One run's cluster: a fresh ``sparklog.home`` and ZooKeeper chroot, plus scratch space."""

    home: Path
    zk_connect: str
    scratch: Path

    @property
    def options(self) -> dict[str, str]:
        """Settings pointing any sparklog client (API, Spark options, child process) at this run."""
        return {"sparklog.home": str(self.home), "zookeeper.connect": self.zk_connect}


@dataclass
class BenchContext:
    """What every case gets: the Spark session, the ZooKeeper server, scale, runs, progress."""

    spark: SparkSession
    zk_hosts: str  # "127.0.0.1:<port>" of the embedded server
    work_dir: Path
    runs: int = 3
    scale: float = 1.0
    cache: dict[str, Any] = field(default_factory=dict)
    output: Path | None = None  # the JSON report; figures (PNG) are written beside it

    def artifact(self, name: str) -> Path:
        """Where a case writes a file beside the report: ``<report stem>-<name>``."""
        report = self.output or Path("benchmarks/results/latest.json").resolve()
        report.parent.mkdir(parents=True, exist_ok=True)
        return report.with_name(f"{report.stem}-{name}")

    def scaled(self, n: int, minimum: int = 1) -> int:
        """``n`` multiplied by ``--scale`` (at least ``minimum``)."""
        return max(minimum, round(n * self.scale))

    def log(self, case: str, message: str) -> None:
        """A progress line on stderr: ``[a] run 2/3 …``."""
        stamp = time.strftime("%H:%M:%S")
        print(f"{stamp} [{case}] {message}", file=sys.stderr, flush=True)

    @contextlib.contextmanager
    def fresh_env(self, case: str, run: int | str) -> Iterator[RunEnv]:
        """A new ``sparklog.home`` and chroot ``/bench-<case>-<run>``; the home is deleted afterwards."""
        home = Path(tempfile.mkdtemp(prefix=f"run-{case}-{run}-", dir=self.work_dir))
        scratch = home / "baseline"
        scratch.mkdir()
        env = RunEnv(home=home, zk_connect=f"{self.zk_hosts}/bench-{case}-{run}", scratch=scratch)
        try:
            yield env
        finally:
            shutil.rmtree(home, ignore_errors=True)


# -- machine info -----------------------------------------------------------------------
def _proc_field(path: str, name: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                if key.strip() == name:
                    return value.strip()
    except OSError:
        return None
    return None


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _java_version() -> str | None:
    try:
        out = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = (out.stderr or out.stdout).strip().splitlines()
    return lines[0] if lines else None


def machine_info() -> dict[str, Any]:
    """CPU count and model, memory, OS, interpreter and library versions, date."""
    mem_kb = _proc_field("/proc/meminfo", "MemTotal")
    mem_bytes = int(mem_kb.split()[0]) * 1024 if mem_kb else None
    try:
        usable_cpus: int | None = len(os.sched_getaffinity(0))
    except AttributeError:
        usable_cpus = os.cpu_count()
    return {
        "cpu_count": os.cpu_count(),
        "usable_cpus": usable_cpus,
        "cpu_model": _proc_field("/proc/cpuinfo", "model name"),
        "memory_bytes": mem_bytes,
        "memory_gib": round(mem_bytes / 2**30, 1) if mem_bytes else None,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "java": _java_version(),
        "versions": {
            p: _version(p)
            for p in (
                "sparklog",
                "pyspark",
                "deltalake",
                "pyarrow",
                "kazoo",
                "numpy",
                "confluent-kafka",
                "kafka-python",
            )
        },
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
    }


# -- output -----------------------------------------------------------------------------
def _fmt(value: float, unit: str) -> str:
    if math.isnan(value):
        return "—"
    if unit == "records/s":
        if abs(value) >= 1e6:
            return f"{value / 1e6:.2f}M"
        if abs(value) >= 1e3:
            return f"{value / 1e3:.1f}k"
        return f"{value:.0f}"
    if unit == "ms":
        return f"{value:.1f}" if value < 1000 else f"{value:.0f}"
    if unit == "×":
        return f"{value:.2f}×"
    if unit == "s":
        return f"{value:.2f}"
    return f"{value:.3g}"


def _fmt_ratio(ratio: float) -> str:
    return "—" if math.isnan(ratio) else f"{ratio:.2f}×"


def format_table(results: Sequence[CaseResult]) -> str:
    """The results as a fixed-width text table (one row per metric, errors as rows). The
    baseline column is headed ``baseline/<label>`` (e.g. ``baseline/kafka``) for metrics that
    name it; every further column a metric has (e.g. ``mock``) gets a value and a ratio column."""
    metrics = [m for r in results if not r.error for m in r.metrics]
    others = sorted({label for m in metrics for label in m.others})
    header = (
        "case",
        "metric",
        "sparklog",
        "baseline",
        *others,
        "unit",
        "ratio",
        *(f"ratio/{o}" for o in others),
        "target",
        "result",
    )
    rows: list[tuple[str, ...]] = []
    for result in results:
        if result.error:
            blanks = ("",) * (2 * len(others))
            rows.append((result.case, result.title, "—", "—", *blanks, "", "", "", "ERROR"))
            continue
        for m in result.metrics:
            base = _fmt(m.baseline_median, m.unit)
            rows.append(
                (
                    m.case,
                    m.name,
                    _fmt(m.sparklog_median, m.unit),
                    base if m.baseline_label == "baseline" or base == "—" else f"{base} ({m.baseline_label})",
                    *(_fmt(m.other_median(o), m.unit) for o in others),
                    m.unit,
                    _fmt_ratio(m.ratio),
                    *(_fmt_ratio(m.other_ratio(o)) for o in others),
                    "; ".join(t.label for t in m.targets) or "(info)",
                    m.status,
                )
            )
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    line = "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=False))
    out = [line, "  ".join("-" * w for w in widths)]
    for row in rows:
        out.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)))
    out.append("ratio = sparklog median ÷ baseline median (throughput: higher is better; latency: lower is better)")
    return "\n".join(out)


def write_json(path: Path, results: Sequence[CaseResult], machine: dict[str, Any], config: dict[str, Any]) -> None:
    """Write all per-run figures, medians, ratios, targets and machine info to ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "schema": "sparklog-bench/1",
        "machine": machine,
        "config": config,
        "cases": {r.case: r.to_json() for r in results},
        "summary": [m.to_json() for r in results for m in r.metrics],
    }
    tmp = path.with_suffix(path.suffix + ".tmp")
    text = json.dumps(_clean(payload), indent=2, default=_json_default, allow_nan=False)
    tmp.write_text(text + "\n", encoding="utf-8")
    tmp.replace(path)


def _clean(value: Any) -> Any:
    """NaN/inf → null (strict JSON), recursively."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def _json_default(value: object) -> object:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, float) and math.isnan(value):
        return None
    return str(value)
