"""The README's two commands: the quick start says exactly `make demo` and `make test`, and
`make demo` runs end to end (with fewer records) twice in a row. (`make test` is this run.)"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_quick_start_is_exactly_the_two_commands():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```(?:sh|bash)?\n(.*?)```", section, flags=re.S)
    commands = [line.strip() for block in blocks for line in block.splitlines() if line.strip()]
    assert commands == ["make demo", "make test"], commands


def test_ci_runs_make_test_and_nothing_else():
    lines = [line.strip() for line in (REPO / ".ci" / "run").read_text().splitlines()]
    commands = [line for line in lines if line and not line.startswith(("#", "set ", "cd "))]
    assert commands == ["make test"], commands


def test_make_demo_runs_end_to_end_twice(tmp_path: Path):
    env = {
        **os.environ,
        "SPARKLOG_HOME": str(tmp_path / "demo-home"),
        "SPARKLOG_DEMO_RECORDS": "20000",
        "PYTHON": sys.executable,
    }
    env.pop("SPARKLOG_ZOOKEEPER", None)
    try:
        for attempt in (1, 2):
            done = subprocess.run(
                ["make", "--no-print-directory", "demo"], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
            )
            output = done.stdout + done.stderr
            assert done.returncode == 0, f"make demo run {attempt} failed:\n{output[-4000:]}"
            for expected in (
                "Created topic demo-events with 6 partitions",
                "Produced 20,000 records in one Delta commit",
                "Replay of partition 0 from offset 1000",
                "Processed a total of 10 messages",
                "Topic demo-events: 20,010 records in 6 partitions",
                "Spark produce throughput:",
            ):
                assert expected in output, f"run {attempt}: {expected!r} missing from:\n{output[-4000:]}"
            assert " INFO " not in output, "Spark INFO logging must be off"
    finally:
        subprocess.run(
            [sys.executable, "-m", "sparklog.cli.main", "zookeeper", "stop", "--home", str(tmp_path / "demo-home")],
            capture_output=True,
            timeout=60,
        )
