"""Spark on a standalone cluster (a master and two workers, started by the test) working on
topics on an object store: produce, batch, SQL and streaming reads, consume_into and the
maintenance jobs (compaction as Spark tasks, optimize, vacuum), all from one
``spark-submit --master spark://...`` whose executors run on the workers (DESIGN §16)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparklog.testing.spark_standalone import SparkStandalone

JOB = Path(__file__).with_name("standalone_job.py")
ROWS, KEYS = 2000, 50


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[SparkStandalone]:
    with SparkStandalone(tmp_path / "spark", workers=2, cores=1, memory="1g") as cluster:
        yield cluster


@pytest.mark.parametrize("log_store", ["s3"], indirect=True)
def test_a_standalone_cluster_works_on_topics_on_a_store(
    standalone: SparkStandalone, cluster_options: dict[str, str], tmp_path: Path
) -> None:
    submit = Path(sys.executable).with_name("spark-submit")
    command = [
        str(submit),
        "--master",
        standalone.master_url,
        "--conf",
        "spark.executor.cores=1",
        "--conf",
        "spark.executor.memory=512m",
        str(JOB),
        json.dumps(cluster_options),
        str(tmp_path / "out"),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=dict(os.environ), cwd=tmp_path)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, (
        f"spark-submit exited {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}\n{standalone.logs()}"
    )
    result = json.loads(lines[-1].removeprefix("RESULT "))
    print(json.dumps(result, indent=2))
    assert result["master"] == standalone.master_url
    assert result["executors"] == 2, "one executor on each worker"
    for topic in ("orders", "latest"):
        stored = sum(end - start for start, end in result["produced"][topic].values())
        assert stored == ROWS, f"{topic}: {result['produced'][topic]}"
    assert result["batch_values"], "the batch read returns every produced value once"
    assert result["sql_count"] == ROWS
    assert result["stream_count"] == ROWS
    assert result["landed"] == ROWS
    assert result["committed"] == {p: end for p, (_, end) in result["produced"]["orders"].items()}
    assert result["compacted_newest"], "compaction keeps every key's newest record"
    assert result["compacted_records"] < ROWS, f"compaction on the workers dropped nothing: {result['maintenance']}"
