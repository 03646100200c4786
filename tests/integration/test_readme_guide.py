"""The README's user guide runs as written, top to bottom, against one fresh cluster (issue 17).

Every ``python`` and ``sh`` block after "## User guide" runs in the order it appears: Python
blocks in one namespace in this process (as a reader pastes them into one interpreter, with the
run's Spark session), shell blocks with bash (``-euo pipefail``) from the repository's root.
The cluster is the embedded default under a temporary ``SPARKLOG_HOME``; what the README
cannot know is substituted and nothing else: free ports for the example listeners
(``127.0.0.1:9092``–``9095``) and a temporary directory for ``/tmp/sparklog/``.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import sparklog
from sparklog.testing.brokers import free_port
from sparklog.testing.object_stores import MotoS3

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

REPO = Path(__file__).resolve().parents[2]
GUIDE = (REPO / "README.md").read_text(encoding="utf-8").split("\n## User guide\n", 1)[1]
BLOCKS: list[tuple[str, str]] = re.findall(r"```(python|sh)\n(.*?)```", GUIDE, flags=re.S)
EXAMPLE_PORTS = (9092, 9093, 9094, 9095, 8083)
EXAMPLE_STORE_PORT, EXAMPLE_BUCKET = 9000, "lake"


@pytest.fixture
def guide_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, moto_s3: MotoS3) -> Iterator[dict[int, int]]:
    """The environment a reader has after ``make demo`` minus the demo: the venv's commands first
    on PATH, the repository as working directory, a fresh home; example ports mapped to free ones,
    and the example's MinIO (``127.0.0.1:9000``, bucket ``lake``) is moto's S3 server."""
    moto_s3.create_bucket(EXAMPLE_BUCKET)
    ports = {port: free_port() for port in EXAMPLE_PORTS}
    ports[EXAMPLE_STORE_PORT] = moto_s3.port
    properties = tmp_path / "sparklog.properties"
    properties.write_text(f"listeners=PLAINTEXT://127.0.0.1:{ports[9092]}\n")
    home = tmp_path / "home"
    monkeypatch.setenv("SPARKLOG_HOME", str(home))
    monkeypatch.setenv("SPARKLOG_CONF", str(properties))
    monkeypatch.delenv("SPARKLOG_ZOOKEEPER", raising=False)
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.chdir(REPO)
    try:
        yield ports
    finally:
        stop = [sys.executable, "-m", "sparklog.cli.main", "zookeeper", "stop", "--home", str(home)]
        subprocess.run(stop, capture_output=True, text=True, timeout=120, check=False)


def as_run_here(block: str, ports: dict[int, int], scratch: Path) -> str:
    for example, port in ports.items():
        block = block.replace(f"127.0.0.1:{example}", f"127.0.0.1:{port}")
    return block.replace("/tmp/sparklog/", f"{scratch}/")


def run_shell(block: str) -> str:
    """One shell block; background jobs it leaves are stopped with it (its own process group)."""
    process = subprocess.Popen(
        ["bash", "-euo", "pipefail", "-c", block],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=900)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
    assert process.returncode == 0, f"README block failed ({process.returncode}):\n{block}\n--- output ---\n{output}"
    return output


def run_python(block: str, namespace: dict[str, object]) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            exec(compile(block, "README.md", "exec"), namespace)
        except Exception as exc:
            raise AssertionError(f"README block failed:\n{block}\n--- output ---\n{out.getvalue()}") from exc
    return out.getvalue()


def test_the_guide_has_the_sections_a_new_user_needs() -> None:
    languages = [language for language, _ in BLOCKS]
    assert languages.count("python") >= 6 and languages.count("sh") >= 5, languages
    for needed in (
        "readStream",
        "writeStream",
        "availableNow",
        "maxOffsetsPerTrigger",
        "replay.ipynb",
        '.mode("append")',
    ):
        assert needed in GUIDE, f"{needed} is not in the README's user guide"


def test_the_user_guide_runs_top_to_bottom(spark: SparkSession, guide_env: dict[int, int], tmp_path: Path) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    namespace: dict[str, object] = {"__name__": "__readme__"}
    outputs = []
    try:
        for language, block in BLOCKS:
            block = as_run_here(block, guide_env, scratch)
            outputs.append(run_python(block, namespace) if language == "python" else run_shell(block))
    finally:
        # What the reader's interpreter would still hold, closed before the cluster stops.
        for value in namespace.values():
            if isinstance(value, sparklog.Cluster):
                value.close()
    text = "\n".join(outputs)
    # A few things each part must have shown, beyond not failing.
    assert "RecordMetadata(topic='clicks'" in text, text[-3000:]
    assert "records copied" in text and "5 records copied" in text, text[-3000:]
    assert "Processed a total of 2 messages" in text, text[-3000:]
    assert "Processed a total of 3 messages" in text, text[-3000:]
    assert "Produced 2 records from" in text and "Landed 2 records of page-views" in text, text[-3000:]
    assert "New offset" not in text or "Value will be set to" in text
    assert re.search(r"broker 0 at 127\.0\.0\.1:\d+ \(controller\)|broker \d at 127\.0\.0\.1:\d+", text), text[-3000:]
    assert "k1=hello (partition" in text and "k2=world (partition" in text, text[-3000:]
    assert 'topic "greetings" with 3 partitions' in text, text[-3000:]
    assert "Reassignment of partition greetings-0 is completed." in text, text[-3000:]
    assert "to\t2" in text and "be\t2" in text, text[-3000:]  # the Streams word count, committed
    assert "\n100\n" in text and "greetings upper-cased" in text, text[-3000:]
    assert all(f"lake-events\tPartition: {p}\tLeader: 5" in text for p in (0, 1)), text[-3000:]
    greeters = run_shell("sparklog groups describe --group greeters")
    rows = [line.split() for line in greeters.splitlines() if line.startswith("greeters ")]
    assert sum(int(row[3]) for row in rows) == 3, greeters  # CURRENT-OFFSET: the three records read
