"""Session settings reach ``format("sparklog")``, and Spark workers never start a cluster of
their own (issue 17, item 6).

Spark runs the Python data source only in Python workers, which cannot see the session's conf:
``spark.sparklog.*`` conf must reach them through the driver, and a worker that finds no
cluster must say so rather than start an empty embedded ZooKeeper where it happens to run."""

from __future__ import annotations

import json
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import sparklog
from tests.integration.test_spark_without_venv import scripts_dir, unactivated_env

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

TOPIC = "session-settings"


@pytest.fixture
def session_conf(spark: SparkSession, cluster_options: dict[str, str]) -> Iterator[None]:
    """The test's cluster named only in the session's conf, as ``spark-submit --conf`` does."""
    for key, value in cluster_options.items():
        spark.conf.set(f"spark.sparklog.{key}", value)
    try:
        yield
    finally:
        for key in cluster_options:
            spark.conf.unset(f"spark.sparklog.{key}")


def test_session_conf_reaches_reads_writes_and_sql(
    spark: SparkSession, cluster: sparklog.Cluster, session_conf: None
) -> None:
    import sparklog.spark  # noqa: F401  (what a script using any sparklog helper has imported)

    cluster.create_topic(TOPIC, partitions=2)
    df = spark.createDataFrame([(f"k{i}", f"v{i}") for i in range(6)], "key string, value string")
    df.write.format("sparklog").option("topic", TOPIC).mode("append").save()
    assert sum(end for _start, end in cluster.partition_offsets(TOPIC).values()) == 6
    read = spark.read.format("sparklog").option("subscribe", TOPIC).load()
    assert read.count() == 6
    spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW session_view USING sparklog OPTIONS (subscribe '{TOPIC}')")
    assert spark.sql("SELECT count(*) AS n FROM session_view").collect()[0].n == 6
    streamed = (
        spark.readStream.format("sparklog").option("subscribe", TOPIC).option("startingOffsets", "earliest").load()
    )
    query = streamed.writeStream.format("memory").queryName("session_stream").trigger(availableNow=True).start()
    query.awaitTermination(300)
    assert spark.sql("SELECT count(*) AS n FROM session_stream").collect()[0].n == 6


# What the user ran: settings on the spark-submit line, helpers and format("sparklog").
WITH_HELPERS = textwrap.dedent(
    """
    import sys
    from sparklog.spark import get_or_create_session, produce

    spark = get_or_create_session(master="local[1]")
    produce(spark.createDataFrame([("a",), ("b",), ("c",)], "value string"), "{topic}")
    rows = spark.read.format("sparklog").option("subscribe", "{topic}").load().count()
    print("ROWS", rows)
    spark.stop()
    """
).replace("{topic}", TOPIC)

# A script that never imports sparklog: its workers see only their environment, and Spark
# itself refuses a save without a mode (the README says to write with .mode("append")).
WITHOUT_SPARKLOG = textwrap.dedent(
    """
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
    try:
        spark.range(1).selectExpr("CAST(id AS STRING) AS value").write.format("sparklog").option("topic", "t").save()
    except Exception as exc:
        print("SAVE REFUSED", str(exc).splitlines()[0])
    spark.read.format("sparklog").option("subscribe", "{topic}").option("startingOffset", "earliest").load().count()
    """
).replace("{topic}", TOPIC)


def _spark_submit(script: str, cwd: Path, env: dict[str, str], *conf: str) -> subprocess.CompletedProcess[str]:
    job = cwd / "job.py"
    job.write_text(script, encoding="utf-8")
    command = [str(scripts_dir() / "spark-submit"), *(f"--conf={c}" for c in conf), str(job)]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False)


def test_spark_submit_conf_reaches_the_source(
    cluster: sparklog.Cluster, cluster_options: dict[str, str], tmp_path: Path
) -> None:
    cluster.create_topic(TOPIC, partitions=1)
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {**unactivated_env(scripts_dir()), "HOME": str(tmp_path / "user")}
    conf = [f"spark.sparklog.{key}={value}" for key, value in cluster_options.items()]
    done = _spark_submit(WITH_HELPERS, work, env, *conf)
    assert done.returncode == 0 and "ROWS 3" in done.stdout, f"{done.stdout}\n{done.stderr[-3000:]}"
    assert not (work / ".sparklog").exists() and not (tmp_path / "user" / ".sparklog").exists()


def test_a_worker_without_settings_fails_clearly_and_starts_nothing(tmp_path: Path) -> None:
    work = tmp_path / "elsewhere"
    work.mkdir()
    user = tmp_path / "user"
    env = {**unactivated_env(scripts_dir()), "HOME": str(user)}
    done = _spark_submit(WITHOUT_SPARKLOG, work, env)
    output = done.stdout + done.stderr  # spark-submit's Python driver writes its traceback to stdout
    assert done.returncode != 0
    refused = [line for line in done.stdout.splitlines() if line.startswith("SAVE REFUSED")]
    assert refused and "UNSUPPORTED_DATA_SOURCE_SAVE_MODE" in refused[0] and '"Append"' in refused[0], refused
    assert "a Spark Python worker never starts one" in output, output[-3000:]
    # No driver hook ran: the planning worker names the ignored option on the console.
    assert "startingoffset: unknown option (did you mean startingOffsets?)" in output, output[-3000:]
    assert f"sparklog zookeeper start --home {user / '.sparklog'}" in output, output[-3000:]
    assert "no zookeeper-*.jar" not in output
    assert not (work / ".sparklog").exists() and not (user / ".sparklog" / "zookeeper" / "server.json").exists()
    leftovers = json.dumps(sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")))
    assert "zoo.cfg" not in leftovers, leftovers
