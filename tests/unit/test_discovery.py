"""Finding the project's cluster from any working directory (sparklog.discovery), and what
cluster settings then resolve to: pure file-system lookups in a temporary tree."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparklog.config import resolve_cluster_config
from sparklog.discovery import discover


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A checkout: ``conf/sparklog.properties`` (home left to discovery) and a notebooks folder."""
    root = tmp_path / "project"
    (root / "conf").mkdir(parents=True)
    (root / "conf" / "sparklog.properties").write_text("sparklog.home=\nbroker.id=4\n")
    (root / "notebooks" / "deep").mkdir(parents=True)
    return root


def test_a_subdirectory_of_the_project_finds_the_projects_home_and_file(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    user = {"HOME": str(tmp_path / "user")}
    monkeypatch.chdir(project / "notebooks" / "deep")
    config = resolve_cluster_config(environ=user)
    assert config.home == str(project / ".sparklog"), "before the home exists: the project's"
    assert config.broker_id == 4, "the project's properties file is read from a subdirectory"
    (project / ".sparklog").mkdir()
    monkeypatch.chdir(project / "notebooks")
    assert resolve_cluster_config(environ=user).home == str(project / ".sparklog")


def test_the_nearest_enclosing_home_wins(project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (project / ".sparklog").mkdir()
    (project / "notebooks" / ".sparklog").mkdir()
    monkeypatch.chdir(project / "notebooks" / "deep")
    found = discover(Path.cwd(), {"HOME": str(tmp_path / "user")})
    assert found.default_home == project / "notebooks" / ".sparklog"
    assert "nearest enclosing" in found.home_reason


def test_outside_any_project_the_user_wide_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    user = tmp_path / "user"
    found = discover(Path.cwd(), {"HOME": str(user)})
    assert (found.properties_file, found.default_home) == (None, user / ".sparklog")
    assert resolve_cluster_config(environ={"HOME": str(user)}).home == str(user / ".sparklog")


def test_environment_and_arguments_still_win(project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(project / "notebooks")
    env = {"HOME": str(tmp_path / "user"), "SPARKLOG_HOME": str(tmp_path / "env-home")}
    assert resolve_cluster_config(environ=env).home == str(tmp_path / "env-home")
    explicit = resolve_cluster_config({"sparklog.home": str(tmp_path / "arg")}, environ=env)
    assert explicit.home == str(tmp_path / "arg")


def test_relative_paths_in_a_properties_file_are_relative_to_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conf = tmp_path / "etc" / "cluster.properties"
    conf.parent.mkdir()
    conf.write_text("sparklog.home=state\nlog.dirs=../logs\n")
    somewhere = tmp_path / "somewhere"
    somewhere.mkdir()
    monkeypatch.chdir(somewhere)
    config = resolve_cluster_config(environ={"SPARKLOG_CONF": str(conf)})
    assert config.home == str(tmp_path / "etc" / "state")
    assert config.log_dir == str(tmp_path / "logs")
