"""The README's commands: the quick start says exactly `make demo` and `make test`, `make demo`
runs end to end (with fewer records) twice in a row (`make test` is this run; the user guide's
examples run in tests/integration/test_readme_guide.py). Each runs in the embedded default (its own ZooKeeper and
broker under a temporary home) with the broker on a free port instead of 9092."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import obstore
import pytest

from sparklog.log.object_store import open_store
from sparklog.model.storage_location import StorageSettings, parse_location
from sparklog.testing.brokers import free_port
from sparklog.testing.object_stores import MotoS3

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text(encoding="utf-8")


def _section(title: str) -> str:
    """The README's text under ``title`` up to the next heading (a ``#`` comment in a code
    block is not one)."""
    return re.split(r"\n##+ ", README.split(f"{title}\n", 1)[1], maxsplit=1)[0]


def _stop(home: Path) -> subprocess.CompletedProcess[str]:
    """`sparklog zookeeper stop`: the embedded broker first, then ZooKeeper."""
    command = [sys.executable, "-m", "sparklog.cli.main", "zookeeper", "stop", "--home", str(home)]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture
def embedded_env(tmp_path: Path) -> Iterator[tuple[dict[str, str], int]]:
    """An environment for the README's commands: its own home, the broker on a free port
    (``listeners`` in a properties file, as a user would set it), no external ZooKeeper."""
    port = free_port()
    properties = tmp_path / "sparklog.properties"
    properties.write_text(f"listeners=PLAINTEXT://127.0.0.1:{port}\n")
    home = tmp_path / "home"
    env = {
        **os.environ,
        "SPARKLOG_HOME": str(home),
        "SPARKLOG_CONF": str(properties),
        "PYTHON": sys.executable,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    env.pop("SPARKLOG_ZOOKEEPER", None)
    try:
        yield env, port
    finally:
        _stop(home)


def test_quick_start_is_exactly_the_two_commands() -> None:
    blocks = re.findall(r"```(?:sh|bash)?\n(.*?)```", _section("## Quick start"), flags=re.S)
    commands = [line.strip() for block in blocks for line in block.splitlines() if line.strip()]
    assert commands == ["make demo", "make test"], commands


def test_ci_runs_make_test_and_nothing_else() -> None:
    lines = [line.strip() for line in (REPO / ".ci" / "run").read_text().splitlines()]
    commands = [line for line in lines if line and not line.startswith(("#", "set ", "cd "))]
    assert commands == ["make test"], commands


def make_demo(env: dict[str, str], what: str) -> str:
    """`make demo` run to its end; its output."""
    done = subprocess.run(
        ["make", "--no-print-directory", "demo"], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"make demo {what} failed:\n{output[-4000:]}"
    return output


def test_make_demo_runs_end_to_end_twice(embedded_env: tuple[dict[str, str], int]) -> None:
    env, port = embedded_env
    env["SPARKLOG_DEMO_RECORDS"] = "20000"
    pids = set()
    for attempt in (1, 2):
        output = make_demo(env, f"run {attempt}")
        for expected in (
            "Created topic demo-events with 6 partitions",
            "Produced 20,000 records in one Delta commit",
            "Replay of partition 0 from offset 1000",
            "Processed a total of 10 messages",
            f"serves Kafka clients at 127.0.0.1:{port}",
            "Sent 10 records with confluent-kafka to demo-events-",
            f"$ kcat -b 127.0.0.1:{port} -C -t demo-events -p ",
            "Topic demo-events: 20,020 records in 6 partitions",
            "Spark produce throughput:",
            f"kcat -b 127.0.0.1:{port} -L",
        ):
            assert expected in output, f"run {attempt}: {expected!r} missing from:\n{output[-4000:]}"
        assert " INFO " not in output, "Spark INFO logging must be off"
        # the delivery reports, and kcat reading the same ten records back through the broker
        delivered = re.findall(r"delivered key=kafka-user to demo-events partition (\d+) offset (\d+)", output)
        consumed = re.findall(r"partition (\d+) offset (\d+) key kafka-user: \{\"event_id\": \"kafka-\d\"", output)
        assert len(delivered) == 10 and sorted(consumed) == sorted(delivered), output[-4000:]
        broker = re.search(r"serves Kafka clients at \S+ \(pid (\d+)", output)
        assert broker is not None, output[-4000:]
        pids.add(broker.group(1))
    assert len(pids) == 1, f"the second run started another broker: {pids}"
    listing = subprocess.run(
        ["kcat", "-b", f"127.0.0.1:{port}", "-L"], capture_output=True, text=True, timeout=60, check=False
    )
    assert f"broker 0 at 127.0.0.1:{port}" in listing.stdout and "demo-events" in listing.stdout, listing
    stopped = _stop(Path(env["SPARKLOG_HOME"]))
    assert stopped.stdout.startswith("Stopped the embedded broker (pid"), stopped


def test_make_demo_runs_on_a_store_by_one_setting(
    embedded_env: tuple[dict[str, str], int], moto_s3: MotoS3, s3_bucket: str
) -> None:
    """The README's one setting: ``SPARKLOG_LOG_DIRS=s3://bucket/prefix make demo`` (the
    store reached with the usual AWS_* variables) puts the demo's topics, and the embedded
    broker's, in the bucket."""
    command = re.search(r"`(SPARKLOG_LOG_DIRS=s3://\S+ make demo)`", README)
    assert command is not None, "the README shows the demo pointed at a store"
    setting, _make = command.group(1).split(" ", 1)
    prefix = f"s3://{s3_bucket}/" + setting.split("/", 3)[3]
    env, _port = embedded_env
    env.update(moto_s3.environ(), SPARKLOG_LOG_DIRS=prefix, SPARKLOG_DEMO_RECORDS="20000")
    output = make_demo(env, f"on {prefix}")
    for expected in (
        "Produced 20,000 records in one Delta commit",
        "Topic demo-events: 20,020 records in 6 partitions",
    ):
        assert expected in output, f"{expected!r} missing from:\n{output[-4000:]}"
    store = open_store(parse_location(prefix), StorageSettings.from_config(moto_s3.settings()))
    objects = [str(meta["path"]) for batch in obstore.list(store) for meta in batch]
    assert any("topics/demo-events/_delta_log/" in path for path in objects), objects[:20]
    assert not (Path(env["SPARKLOG_HOME"]) / "data" / "topics" / "demo-events").exists(), "nothing on the local disk"
