"""Bind the Spark of a Python environment to that environment's interpreter, so that
``<venv>/bin/python job.py`` and ``<venv>/bin/spark-submit job.py`` work without activating it.

Without activation pip's ``pyspark`` runs Python as ``python3`` from ``PATH`` (PySpark's
default when ``PYSPARK_PYTHON`` is unset): the workers, the data-source lookup that finds
``pyspark_sparklog`` and, under ``spark-submit``, the driver. That interpreter has no sparklog
(``DATA_SOURCE_NOT_FOUND``), and ``spark-submit`` even fails to find ``SPARK_HOME`` because
its launcher asks ``python3`` where pyspark is.

``python -m sparklog.spark.spark_env`` (``make venv`` runs it) writes two files, both read by
Spark's own launch scripts, so every launch from the environment is covered, also a plain
``SparkSession.builder.getOrCreate()`` that never imports sparklog:

* ``<pyspark>/conf/spark-env.sh`` (``$SPARK_HOME/conf``, sourced by ``bin/load-spark-env.sh``
  before the JVM starts): if ``PYSPARK_PYTHON`` is unset, it becomes this interpreter and the
  environment's ``bin`` goes first on the JVM's ``PATH``. The ``PATH`` entry is for
  ``python job.py``: that driver computed its worker command (``python3``) from its own
  environment, which a file sourced by its child cannot change.
* ``<bin>/spark-distribution``, a link to the pyspark directory: a place pyspark's
  ``find_spark_home.py`` searches next to itself, whichever ``python3`` runs it.

A ``PYSPARK_PYTHON`` the user sets still wins. Rerunning rewrites both; deleting them undoes
the binding. A ``spark-env.sh`` that sparklog did not write is never overwritten.

It also installs sparklog's quiet log configuration (``conf/log4j2.properties`` of the
repository, :func:`sparklog.spark.session.log4j2_config_path`) as
``<pyspark>/conf/log4j2.properties``: Spark's launcher puts its conf directory on the JVM's
classpath, where log4j2 finds that file, so every job launched from the environment
(``spark-submit job.py`` without ``--properties-file``, ``python job.py``, a plain
``SparkSession``) logs errors only instead of dozens of INFO lines. A
``log4j2.properties`` that sparklog did not write is left as it is.

With ``--jars DIR`` (``make venv`` passes ``.venv/spark-jars``, the jars of
``jvm/spark/pom.xml`` that Maven fetched at install time) it links into ``<pyspark>/jars``
every jar of ``DIR`` whose artifact PySpark does not ship already: delta-spark and its
kernel, Spark's Kafka connector and the Kafka client it needs. Spark puts that directory on
every JVM's classpath (driver, executors, a standalone master and workers started from the
environment), so ``format("delta")`` and ``format("kafka")`` work in every launch and nothing
downloads when a session starts. A library PySpark ships in another version keeps PySpark's
(one copy of a class on the classpath); rerunning replaces the links, and the links are the
only files sparklog adds there.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shlex
import sys
import sysconfig
from pathlib import Path

from sparklog.errors import ConfigError

__all__ = ["artifact_name", "bind_environment", "install_log_config", "link_jars", "main", "spark_env_script"]

MARKER = "# Written by sparklog (python -m sparklog.spark.spark_env)"
SPARK_HOME_LINK = "spark-distribution"


def spark_env_script(python: Path, bin_dir: Path) -> str:
    """The ``spark-env.sh`` that defaults Spark's Python to ``python``."""
    return f"""\
{MARKER}: Spark launched from this Python
# environment runs Python (workers, data-source lookup, the spark-submit driver) with its
# interpreter, activated or not. A PYSPARK_PYTHON set by the user wins. Delete to undo.
if [ -z "${{PYSPARK_PYTHON:-}}" ]; then
  PYSPARK_PYTHON={shlex.quote(str(python))}
  # `python job.py` asks for plain python3 (its own environment lacked PYSPARK_PYTHON).
  PATH={shlex.quote(str(bin_dir))}:"$PATH"
fi
"""


def bind_environment(python: Path, bin_dir: Path, spark_home: Path) -> list[Path]:
    """Write ``spark_home/conf/spark-env.sh`` and ``bin_dir/spark-distribution``; return both."""
    env_file = spark_home / "conf" / "spark-env.sh"
    if env_file.exists() and not env_file.read_text(encoding="utf-8").startswith(MARKER):
        raise ConfigError(
            f"Cannot bind Spark to {python}: {env_file} exists and was not written by sparklog. "
            f'Add to it: export PYSPARK_PYTHON="${{PYSPARK_PYTHON:-{python}}}" (or set PYSPARK_PYTHON '
            "when running jobs)"
        )
    link = bin_dir / SPARK_HOME_LINK
    target = os.path.relpath(spark_home, bin_dir)
    if link.exists() and not link.is_symlink():
        raise ConfigError(
            f"Cannot bind Spark to {python}: {link} exists and is not a link; pyspark's launcher "
            f"searches it for SPARK_HOME. Move it away, or set SPARK_HOME={spark_home} when running spark-submit"
        )
    env_file.parent.mkdir(exist_ok=True)
    tmp = env_file.with_name(f".spark-env.sh.{os.getpid()}")
    tmp.write_text(spark_env_script(python, bin_dir), encoding="utf-8")
    os.replace(tmp, env_file)
    if not (link.is_symlink() and os.readlink(link) == target):
        link.unlink(missing_ok=True)
        link.symlink_to(target, target_is_directory=True)
    return [env_file, link]


def install_log_config(spark_home: Path, source: Path) -> Path | None:
    """Write ``source`` (a log4j2 config) as ``spark_home/conf/log4j2.properties``; None (and
    nothing written) when a file sparklog did not write is there."""
    target = spark_home / "conf" / "log4j2.properties"
    if target.exists() and not target.read_text(encoding="utf-8").startswith(MARKER):
        return None
    target.parent.mkdir(exist_ok=True)
    header = f"{MARKER}: Spark launched from this Python environment logs\n# errors only. Delete to get Spark's default logging.\n"
    tmp = target.with_name(f".log4j2.properties.{os.getpid()}")
    tmp.write_text(header + source.read_text(encoding="utf-8"), encoding="utf-8")
    os.replace(tmp, target)
    return target


# Fetched as dependencies but not linked: PySpark routes commons-logging to SLF4J with
# jcl-over-slf4j (the same classes), and RoaringBitmap 1.x, which it ships, took in 0.9's shims.
UNLINKED_ARTIFACTS = frozenset({"commons-logging", "shims"})
_VERSIONED_JAR = re.compile(r"(?P<artifact>.+)-(?P<version>\d+(\.\d+)+[^/]*)\.jar")


def artifact_name(jar: str) -> str:
    """The artifact of a Maven jar's file name: ``kafka-clients-3.9.2.jar`` -> ``kafka-clients``,
    ``spark-sql-kafka-0-10_2.13-4.2.0.jar`` -> ``spark-sql-kafka-0-10_2.13``."""
    match = _VERSIONED_JAR.fullmatch(jar)
    return match["artifact"] if match else jar.removesuffix(".jar")


def link_jars(spark_home: Path, jar_dir: Path) -> list[Path]:
    """Link the jars of ``jar_dir`` whose artifacts ``spark_home/jars`` lacks into it, after
    removing the links an earlier run made from ``jar_dir``; -> the links."""
    source = jar_dir.absolute()
    fetched = sorted(source.glob("*.jar"))
    if not fetched:
        raise ConfigError(f"No jars in {source}: they come from Maven Central at install time; run `make venv`")
    jars = spark_home / "jars"
    for path in jars.iterdir():
        if path.is_symlink() and Path(os.readlink(path)).parent == source:
            path.unlink()
    unwanted = {artifact_name(p.name) for p in jars.glob("*.jar")} | UNLINKED_ARTIFACTS
    linked = []
    for jar in fetched:
        if artifact_name(jar.name) in unwanted:
            continue
        link = jars / jar.name
        link.symlink_to(jar)
        linked.append(link)
    return linked


def _installed_spark_home() -> Path:
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise ConfigError(f"pyspark is not installed for {sys.executable}: pip install pyspark")
    spark_home = Path(spec.origin).parent
    # Binding a pyspark shared with other environments would point their Spark at this one.
    prefix = Path(sys.prefix).resolve()
    if not spark_home.resolve().is_relative_to(prefix):
        raise ConfigError(
            f"pyspark at {spark_home} is not part of the environment {prefix}; set PYSPARK_PYTHON={sys.executable} "
            "when running jobs instead"
        )
    return spark_home


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sparklog.spark.spark_env",
        description="Make Spark launched from this Python environment use its interpreter, activated or not.",
    )
    parser.add_argument(
        "--jars",
        type=Path,
        metavar="DIR",
        help="link the jars of DIR that PySpark lacks into its jars directory (make venv: .venv/spark-jars)",
    )
    args = parser.parse_args(argv)
    # Not resolved: the venv's python is a link to the base interpreter, which lacks the venv's packages.
    python = Path(sys.executable).absolute()
    from sparklog.spark.session import log4j2_config_path

    try:
        spark_home = _installed_spark_home()
        written = bind_environment(python, Path(sysconfig.get_path("scripts")), spark_home)
    except ConfigError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    print(
        f"Spark from {sys.prefix} runs Python with {python} unless PYSPARK_PYTHON is set ({', '.join(map(str, written))})"
    )
    logging = install_log_config(spark_home, Path(log4j2_config_path()))
    if logging is None:
        print(f"{spark_home / 'conf' / 'log4j2.properties'} was not written by sparklog: Spark keeps its logging")
    else:
        print(f"Spark from {sys.prefix} logs errors only ({logging})")
    if args.jars is not None:
        try:
            linked = link_jars(spark_home, args.jars)
        except ConfigError as exc:
            print(f"Error: {exc}", file=sys.stderr)
            return 1
        names = ", ".join(artifact_name(link.name) for link in linked)
        print(f"Spark from {sys.prefix} has {len(linked)} jars from {args.jars} ({names}) in {spark_home / 'jars'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
