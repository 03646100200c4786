"""``jobs/produce.py`` and ``jobs/consume.py`` as a user runs them: real ``spark-submit``
processes against the test's cluster, locally and on a standalone master + worker started by
the test. A JSON file goes to a topic and comes back as a Delta table equal to it (malformed
values in the topic land in the dead-letter table, the group's offsets at the end); bad
input (and a malformed value without a dead-letter path) is an ``Error:`` line, exit code 1
(2 for bad arguments) and nothing written."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import sparklog
from sparklog.model.topic import is_internal
from sparklog.testing.spark_standalone import SparkStandalone
from tests.helpers import wait_for
from tests.integration.test_cli import Cli
from tests.integration.test_jobs import REPO, job_env
from tests.integration.test_spark_consume import delta_rows

ROWS = 200
SCHEMA = "id BIGINT, name STRING, score DOUBLE"
MALFORMED = [b"not json at all", b'{"id": "seven", "name": "x", "score": 1.0}']
_TIMEOUT_S = 600


def job_command(job: str, args: list[str], master: str | None = None) -> list[str]:
    """``spark-submit jobs/<job>.py ARGS`` (``--master`` as the job's own flag when given)."""
    command = [str(Path(sys.executable).with_name("spark-submit"))]
    if master is not None:
        command += ["--conf", "spark.executor.cores=1", "--conf", "spark.executor.memory=512m"]
    return [*command, str(REPO / "jobs" / f"{job}.py"), *args, *(["--master", master] if master else [])]


def submit(
    job: str, args: list[str], cluster_options: dict[str, str], cwd: Path, master: str | None = None
) -> subprocess.CompletedProcess[str]:
    command = job_command(job, args, master)
    return subprocess.run(
        command, env=job_env(cluster_options), cwd=cwd, capture_output=True, text=True, timeout=_TIMEOUT_S, check=False
    )


def context(done: subprocess.CompletedProcess[str]) -> str:
    return f"{' '.join(done.args)} -> {done.returncode}\nstdout: {done.stdout[-4000:]}\nstderr: {done.stderr[-4000:]}"


def write_rows(path: Path, rows: range) -> list[dict[str, object]]:
    records: list[dict[str, object]] = [{"id": i, "name": f"name-{i}", "score": i * 1.5} for i in rows]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return records


@pytest.fixture(params=["local", "standalone"])
def master(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str | None]:
    if request.param == "local":
        yield None
        return
    with SparkStandalone(tmp_path / "spark", workers=1, cores=1, memory="1g") as standalone:
        yield standalone.master_url


def test_file_to_topic_to_delta_round_trip(
    master: str | None, cluster: sparklog.Cluster, cluster_options: dict[str, str], cli: Cli, tmp_path: Path
) -> None:
    source = tmp_path / "in" / "people.json"
    expected = write_rows(source, range(ROWS))
    produce_args = ["--topic", "people", "--source", str(source), "--format", "json", "--create-partitions", "3"]
    produce_args += ["--key-expr", "CAST(id AS STRING)", "--timestamp-expr", "timestamp_millis(1700000000000 + id)"]
    produce_args += ["--headers-expr", "array(named_struct('key', 'origin', 'value', CAST('file' AS BINARY)))"]
    produced = submit("produce", produce_args, cluster_options, tmp_path, master)
    assert produced.returncode == 0, context(produced)
    assert f"Produced {ROWS} records" in produced.stdout, context(produced)
    assert f"Spark master {master or 'local[*]'} " in produced.stdout, context(produced)
    hw = cluster.high_watermarks("people")
    assert sum(hw.values()) == ROWS and len(hw) == 3
    for p, end in hw.items():
        assert f"people-{p}: offsets 0..{end - 1} ({end} records)" in produced.stdout, context(produced)
    with cluster.producer() as producer:
        for value in MALFORMED:
            producer.send("people", value, key=b"bad").result()

    sink, dead = tmp_path / "lake" / "people", tmp_path / "lake" / "people-malformed"
    consume_args = ["--topic", "people", "--group", "lake", "--sink", str(sink), "--value-format", "json"]
    consume_args += ["--schema", SCHEMA, "--dead-letter", str(dead)]
    consumed = submit("consume", consume_args, cluster_options, tmp_path, master)
    assert consumed.returncode == 0, context(consumed)
    assert f"Landed {ROWS + len(MALFORMED)} records" in consumed.stdout, context(consumed)
    assert f"Spark master {master or 'local[*]'} " in consumed.stdout, context(consumed)

    rows = delta_rows(str(sink))
    assert rows.schema.names == ["key", "id", "name", "score", "topic", "partition", "offset", "timestamp"]
    landed = rows.to_pylist()
    assert sorted(({k: r[k] for k in ("id", "name", "score")} for r in landed), key=lambda r: r["id"]) == expected
    assert all(
        r["key"] == str(r["id"]) and r["timestamp"].timestamp() * 1000 == 1_700_000_000_000 + r["id"] for r in landed
    )
    letters = delta_rows(str(dead)).to_pylist()
    assert sorted(r["value"] for r in letters) == sorted(MALFORMED)
    assert all(r["topic"] == "people" and r["key"] == b"bad" and "not json" in r["error"] for r in letters)
    hw = cluster.high_watermarks("people")
    assert cluster.committed_offsets("lake") == {("people", p): end for p, end in hw.items()}
    described = cli("groups", "describe", "--group", "lake", forbid_pyspark=True).stdout
    lag_rows = [line.split() for line in described.splitlines() if line.startswith("lake ")]
    assert len(lag_rows) == 3 and all(row[5] == "0" for row in lag_rows), described


def _no_writes(cluster: sparklog.Cluster, tmp_path: Path) -> None:
    assert [t for t in cluster.list_topics() if not is_internal(t)] == ["people"], "no topic created"
    written = sorted(str(p.relative_to(tmp_path)) for p in (tmp_path / "lake").rglob("*") if p.is_file())
    assert not written, f"no sink written, found {written}"
    assert cluster.committed_offsets("lake") == {}, "no offsets committed"


@pytest.mark.parametrize(
    ("job", "args", "code", "fragments"),
    [
        ("produce", ["--topic", "people", "--source", "{tmp}/missing", "--format", "json"], 1, ["does not exist"]),
        ("produce", ["--topic", "people", "--source", "{tmp}/in", "--format", "xml"], 2, ["invalid choice: 'xml'"]),
        ("produce", ["--topic", "peeple", "--source", "{tmp}/in", "--format", "json"], 1, ["'peeple' does not exist"]),
        (
            "consume",
            [
                *("--topic", "people", "--group", "lake", "--sink", "{tmp}/lake", "--value-format", "json"),
                "--schema",
                "id BIGIN, name",
            ],
            1,
            ["is not a valid DDL schema"],
        ),
        ("consume", ["--topic", "peeple", "--group", "lake", "--sink", "{tmp}/lake"], 1, ["'peeple' does not exist"]),
        (  # a malformed value without --dead-letter fails the job
            "consume",
            [
                *("--topic", "people", "--group", "lake", "--sink", "{tmp}/lake", "--value-format", "json"),
                "--schema",
                SCHEMA,
            ],
            1,
            ["Malformed json value at people-0 offset 1", "--dead-letter"],
        ),
        (
            "consume",
            ["--topic", "people", "--group", "lake", "--sink", "{tmp}/lake", "--value-format", "csv"],
            2,
            ["--value-format csv needs --schema"],
        ),
    ],
)
def test_bad_input_is_an_error_and_nothing_is_written(
    cluster: sparklog.Cluster,
    cluster_options: dict[str, str],
    tmp_path: Path,
    job: str,
    args: list[str],
    code: int,
    fragments: list[str],
) -> None:
    cluster.create_topic("people", partitions=1)
    with cluster.producer() as producer:
        for value in (b'{"id": 1}', MALFORMED[0]):
            producer.send("people", value).result()
    write_rows(tmp_path / "in" / "people.json", range(3))
    before = cluster.high_watermarks("people")
    done = submit(job, [a.replace("{tmp}", str(tmp_path)) for a in args], cluster_options, tmp_path)
    assert done.returncode == code, context(done)
    # spark-submit hands the Python driver's stderr to its stdout.
    lines = (done.stdout + done.stderr).splitlines()
    [error] = [line for line in lines if line.startswith("Error: ") or f"{job}: error: " in line]
    assert all(f in error for f in fragments), context(done)
    assert cluster.high_watermarks("people") == before, "nothing produced"
    _no_writes(cluster, tmp_path)


@pytest.mark.parametrize("job", ["produce", "consume"])
def test_help_shows_a_worked_example(job: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "jobs" / f"{job}.py"), "--help"],
        env=job_env({"zookeeper.connect": "127.0.0.1:1", "sparklog.home": str(tmp_path)}),
        capture_output=True,
        text=True,
        timeout=_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, context(done)
    example = done.stdout.split("Example:\n", 1)[1]
    assert f"spark-submit jobs/{job}.py --topic" in example or f"spark-submit jobs/{job}.py --pattern" in example


def test_csv_and_text_sources_then_a_pattern_from_explicit_offsets_into_json(
    cluster: sparklog.Cluster, cluster_options: dict[str, str], tmp_path: Path
) -> None:
    csv_source, text_source = tmp_path / "in" / "people.csv", tmp_path / "in" / "lines.txt"
    csv_source.parent.mkdir(parents=True)
    csv_source.write_text("id,name\n" + "".join(f"{i},name-{i}\n" for i in range(10)))
    text_source.write_text("".join(f"line-{i}\n" for i in range(5)))
    for topic, source, fmt in (("pat-csv", csv_source, "csv"), ("pat-text", text_source, "text")):
        value_expr = "name" if fmt == "csv" else "value"
        args = ["--topic", topic, "--source", str(source), "--format", fmt, "--create-partitions", "1"]
        produced = submit("produce", [*args, "--value-expr", value_expr], cluster_options, tmp_path)
        assert produced.returncode == 0, context(produced)

    sink = tmp_path / "lake" / "pattern"
    starting = json.dumps({"pat-csv": {"0": 4}, "pat-text": {"0": -2}})  # Spark's JSON: -2 earliest
    args = ["--pattern", "pat-.*", "--group", "pattern", "--sink", str(sink), "--format", "json"]
    args += ["--value-format", "csv", "--schema", "name STRING", "--starting-offsets", starting]
    consumed = submit("consume", args, cluster_options, tmp_path)
    assert consumed.returncode == 0, context(consumed)
    landed = [json.loads(line) for part in sorted(sink.glob("*.json")) for line in part.read_text().splitlines()]
    by_topic = {t: sorted(r["name"] for r in landed if r["topic"] == t) for t in ("pat-csv", "pat-text")}
    assert by_topic == {
        "pat-csv": sorted(f"name-{i}" for i in range(4, 10)),
        "pat-text": sorted(f"line-{i}" for i in range(5)),
    }, context(consumed)
    assert cluster.committed_offsets("pattern") == {("pat-csv", 0): 10, ("pat-text", 0): 5}


def test_ctrl_c_stops_a_streaming_consume_with_a_line_not_a_traceback(
    cluster: sparklog.Cluster, cluster_options: dict[str, str], tmp_path: Path
) -> None:
    """SIGINT to the whole process group, as a terminal's Ctrl-C sends it: exit code 130, one
    line saying what is committed, and the landed table holds exactly the committed rounds."""
    cluster.create_topic("people", partitions=1)
    with cluster.producer() as producer:
        for i in range(ROWS):
            producer.send("people", json.dumps({"id": i, "name": f"n{i}", "score": 1.0}).encode())
    sink = tmp_path / "lake"
    args = ["--topic", "people", "--group", "lake", "--sink", str(sink), "--value-format", "json", "--schema", SCHEMA]
    args += ["--stream", "--trigger", "1s", "--max-offsets-per-trigger", "50"]
    log = tmp_path / "consume.log"
    with open(log, "wb") as out:
        running = subprocess.Popen(
            job_command("consume", args),
            env=job_env(cluster_options),
            cwd=tmp_path,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_for(
            lambda: sum(cluster.committed_offsets("lake").values()) >= 50 or running.poll() is not None,
            _TIMEOUT_S,
            "the first round landed",
            interval_s=0.2,
        )
        os.killpg(running.pid, signal.SIGINT)
        code = running.wait(timeout=120)
    finally:
        if running.poll() is None:
            os.killpg(running.pid, signal.SIGKILL)
            running.wait()
    output = log.read_text()
    assert code == 130, output[-4000:]
    assert "Stopped (interrupted): every round that finished is committed" in output, output[-4000:]
    assert "Traceback" not in output, output[-4000:]
    [(_, committed)] = cluster.committed_offsets("lake").items()
    assert sorted(r["offset"] for r in delta_rows(str(sink)).to_pylist()) == list(range(committed))
