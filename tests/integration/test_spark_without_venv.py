"""A plain PySpark job run with the virtual environment's ``python`` or ``spark-submit``, the
environment NOT activated: the ``sparklog`` source is found and Spark's Python workers run
the environment's interpreter (issue 10). Each case starts its own Spark JVM in a child
process whose environment a user without activation would have."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

import sparklog

TOPIC = "plain-job"

# A user's job: a plain session (not sparklog's helper), nothing imported from sparklog.
JOB = textwrap.dedent(
    """
    import json
    import sys

    from pyspark.sql import SparkSession

    options = json.loads(sys.argv[1])
    spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
    df = spark.createDataFrame([("k1", "v1"), ("k2", "v2"), ("k3", "v3")], "key string, value string")
    df.write.format("sparklog").option("topic", "{topic}").options(**options).mode("append").save()
    rows = (spark.read.format("sparklog").option("subscribe", "{topic}").options(**options).load()
            .selectExpr("CAST(value AS STRING) AS value").collect())
    worker_prefix = spark.sparkContext.parallelize([0], 1).map(lambda _: sys.prefix).collect()[0]
    print("RESULT " + json.dumps({"values": sorted(r.value or b"" for r in rows), "worker_prefix": worker_prefix}))
    spark.stop()
    """
).replace("{topic}", TOPIC)


def scripts_dir() -> Path:
    """The environment's ``bin`` (where pip put ``python``, ``spark-submit``)."""
    assert sys.prefix != sys.base_prefix, f"run the tests from a virtual environment, not {sys.executable}"
    return Path(sysconfig.get_path("scripts"))


def unactivated_env(bin_dir: Path) -> dict[str, str]:
    """The caller's environment as it is without activation: no PYSPARK_*/SPARK_* settings (the
    Makefile exports PYSPARK_PYTHON), no VIRTUAL_ENV, the environment's bin not on PATH."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("PYSPARK_", "SPARK_")) and key not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")
    }
    env["PATH"] = os.pathsep.join(
        entry
        for entry in os.environ.get("PATH", "").split(os.pathsep)
        if entry and Path(entry).resolve() != bin_dir.resolve()
    )
    return env


@pytest.mark.parametrize("launcher", ["python", "spark-submit"])
def test_plain_job_finds_sparklog_without_activation(
    launcher: str, cluster: sparklog.Cluster, cluster_options: dict[str, str], tmp_path: Path
) -> None:
    cluster.create_topic(TOPIC, partitions=2)
    bin_dir = scripts_dir()
    job = tmp_path / "job.py"
    job.write_text(JOB, encoding="utf-8")
    done = subprocess.run(
        [str(bin_dir / launcher), str(job), json.dumps(cluster_options)],
        cwd=tmp_path,
        env=unactivated_env(bin_dir),
        capture_output=True,
        text=True,
        timeout=600,
    )
    results = [line[len("RESULT ") :] for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and results, (
        f"{bin_dir / launcher} job.py exited {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-6000:]}"
    )
    result = json.loads(results[0])
    assert result["values"] == ["v1", "v2", "v3"]
    assert Path(result["worker_prefix"]).resolve() == Path(sys.prefix).resolve(), (
        f"Spark's Python workers ran {result['worker_prefix']}, not this environment ({sys.prefix})"
    )
    assert sorted(cluster.read(TOPIC).column("value").to_pylist()) == [b"v1", b"v2", b"v3"]
