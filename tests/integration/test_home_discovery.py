"""Every command started anywhere in a project finds the project's cluster, and an embedded
ZooKeeper is never started without a word on stderr (issue 17, item 2). Real CLI processes
and a real embedded ZooKeeper under a temporary project."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparklog.metadata import embedded


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Path]:
    """A project directory with sparklog's ``conf/sparklog.properties`` (home left to discovery)."""
    root = tmp_path / "project"
    (root / "conf").mkdir(parents=True)
    (root / "conf" / "sparklog.properties").write_text("zookeeper.connect=\nsparklog.home=\n")
    (root / "notebooks").mkdir()
    try:
        yield root
    finally:
        for home in (root / ".sparklog", tmp_path / "user" / ".sparklog"):
            embedded.stop(home)


def sparklog_cli(cwd: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARKLOG_")}
    env["HOME"] = str(tmp_path / "user")
    command = [sys.executable, "-m", "sparklog.cli.main", *args]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=180, check=False)


def test_a_subdirectory_finds_the_projects_cluster_and_starting_is_announced(project: Path, tmp_path: Path) -> None:
    created = sparklog_cli(project, tmp_path, "topics", "create", "--topic", "orders", "--partitions", "2")
    assert created.returncode == 0, created.stderr
    home = project / ".sparklog"
    assert "started an embedded ZooKeeper at 127.0.0.1:" in created.stderr, created.stderr
    assert f"for home {home}" in created.stderr and "sparklog zookeeper stop" in created.stderr, created.stderr

    listed = sparklog_cli(project / "notebooks", tmp_path, "topics", "list")
    assert listed.returncode == 0 and listed.stdout.split() == ["orders"], listed
    assert "started an embedded ZooKeeper" not in listed.stderr, "the running server is reused, silently"
    assert not (project / "notebooks" / ".sparklog").exists()


def test_outside_any_project_the_user_wide_cluster_is_announced(project: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    listed = sparklog_cli(elsewhere, tmp_path, "topics", "list")
    assert listed.returncode == 0, listed.stderr
    user_home = tmp_path / "user" / ".sparklog"
    assert "started an embedded ZooKeeper at 127.0.0.1:" in listed.stderr, listed.stderr
    assert f"for home {user_home}" in listed.stderr, listed.stderr
    assert not (elsewhere / ".sparklog").exists()
