"""The ``jobs/`` entry points as a user runs them, in child processes against the test's
cluster: a misspelt topic or an unknown broker is an ``Error:`` line and exit code 1 before
Spark starts (not "0 records copied"), and Spark stays quiet (no INFO lines) under the
environment's ``spark-submit`` and ``python`` without ``--properties-file``."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

import sparklog
from tests.helpers import NO_PYSPARK

REPO = Path(__file__).resolve().parents[2]
_TIMEOUT_S = 600


def job_env(cluster_options: dict[str, str]) -> dict[str, str]:
    """A job's environment: the test's cluster as the usual ``SPARKLOG_*`` settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARKLOG_", "PYSPARK_SUBMIT_ARGS"))}
    env["SPARKLOG_ZOOKEEPER"] = cluster_options["zookeeper.connect"]
    env["SPARKLOG_HOME"] = cluster_options["sparklog.home"]
    env["PYTHONPATH"] = str(REPO)  # `jobs` is imported from the repository, as spark-submit's cwd would
    return env


def _run(command: list[str], cluster_options: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, env=job_env(cluster_options), cwd=cwd, capture_output=True, text=True, timeout=_TIMEOUT_S, check=False
    )


@pytest.mark.parametrize(
    ("module", "args", "fragments"),
    [
        ("jobs.replica_fetch", ["--topic", "clikcs"], ["Topic 'clikcs' does not exist", "clicks"]),
        ("jobs.replica_fetch", ["--broker", "5"], ["Broker 5 is not registered", "registered brokers: 0"]),
        ("jobs.replica_fetch", ["--topic", "clicks,clikcs"], ["Topic 'clikcs' does not exist"]),
        ("jobs.retention", ["--topic", "clikcs"], ["Topic 'clikcs' does not exist", "clicks"]),
    ],
)
def test_unknown_topics_and_brokers_are_errors_before_spark_starts(
    cluster: sparklog.Cluster,
    cluster_options: dict[str, str],
    tmp_path: Path,
    module: str,
    args: list[str],
    fragments: list[str],
) -> None:
    cluster.create_topic("clicks")
    done = _run([sys.executable, "-c", NO_PYSPARK, module, *args], cluster_options, tmp_path)
    context = f"{module} {args} -> {done.returncode}\nstdout: {done.stdout}\nstderr: {done.stderr}"
    assert done.returncode == 1, context
    [line] = done.stderr.splitlines()
    assert line.startswith("Error: "), context
    for fragment in fragments:
        assert fragment in line, context
    assert "records copied" not in done.stdout, context


def _info_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if " INFO " in line]


@pytest.mark.parametrize("launcher", ["spark-submit", "python"])
def test_jobs_are_quiet_without_a_properties_file(
    launcher: str, cluster: sparklog.Cluster, cluster_options: dict[str, str], tmp_path: Path
) -> None:
    # A compacted topic makes the maintenance job start Spark; replica fetch always does.
    cluster.create_topic("compacted", config={"cleanup.policy": "compact"})
    with cluster.producer(linger_ms=0) as producer:
        for value in (b"1", b"2"):
            producer.send("compacted", value, key=b"k").result()
    bin_dir = Path(sysconfig.get_path("scripts"))
    for job in ("jobs/replica_fetch.py", "jobs/retention.py"):
        began = time.monotonic()
        done = _run([str(bin_dir / launcher), str(REPO / job), "--topic", "compacted"], cluster_options, tmp_path)
        context = f"{launcher} {job} -> {done.returncode} in {time.monotonic() - began:.0f} s\n{done.stderr}"
        assert done.returncode == 0, context + done.stdout
        assert _info_lines(done.stdout + done.stderr) == [], context
        assert [line for line in done.stderr.splitlines() if " WARN " in line] == [], context
