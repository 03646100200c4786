"""Where a cluster's files are found when nothing names them: the properties file and the home.

A user expects one cluster per project whatever directory a command, a notebook kernel (Jupyter
starts it in the notebook's folder) or a job starts in, so discovery walks up from the working
directory, as git finds its repository:

* the properties file: ``SPARKLOG_CONF``, else the nearest enclosing ``conf/sparklog.properties``;
* the home (``sparklog.home``), when no argument, variable or properties file sets it: the
  nearest enclosing ``.sparklog`` directory, else ``.sparklog`` in the project directory (the
  one holding the ``conf/`` of the properties file found), else the user-wide ``~/.sparklog``.

Relative paths in a properties file are relative to the file's directory (wherever the command
runs); relative paths given as arguments or in the environment are relative to the working
directory. Pure file-system lookups: nothing is created here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = ["HOME_DIR_NAME", "PROJECT_CONF", "Discovered", "discover", "find_upwards"]

HOME_DIR_NAME = ".sparklog"
PROJECT_CONF = Path("conf") / "sparklog.properties"


@dataclass(frozen=True)
class Discovered:
    """What discovery found for one working directory and environment."""

    properties_file: Path | None  # None: no properties file applies
    default_home: Path  # the home to use when nothing sets ``sparklog.home``
    home_reason: str  # why that home, for messages ("nearest enclosing .sparklog", ...)


def find_upwards(start: Path, relative: Path | str, want_dir: bool) -> Path | None:
    """The nearest ``<ancestor>/<relative>`` of ``start`` (itself included) that exists as a
    directory (``want_dir``) or a file."""
    for folder in (start, *start.parents):
        candidate = folder / relative
        if candidate.is_dir() if want_dir else candidate.is_file():
            return candidate
    return None


def discover(cwd: Path, environ: Mapping[str, str]) -> Discovered:
    """The properties file and the default home seen from ``cwd`` (absolute) under ``environ``."""
    named = environ.get("SPARKLOG_CONF")
    project_conf = find_upwards(cwd, PROJECT_CONF, want_dir=False)
    properties = Path(named) if named else project_conf
    enclosing = find_upwards(cwd, HOME_DIR_NAME, want_dir=True)
    if enclosing is not None:
        return Discovered(properties, enclosing, f"the nearest enclosing {HOME_DIR_NAME} directory")
    if project_conf is not None:
        project = project_conf.parent.parent
        return Discovered(properties, project / HOME_DIR_NAME, f"the project directory of {project_conf}")
    user_home = Path(environ.get("HOME") or Path.home())
    return Discovered(properties, user_home / HOME_DIR_NAME, "the user-wide default")
