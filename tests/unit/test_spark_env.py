"""The binding of an environment's Spark to its interpreter (sparklog.spark.spark_env): what
Spark's launch scripts see, that a user's PYSPARK_PYTHON wins, and that files sparklog did not
write are left alone; the JVM jars linked into PySpark's jars directory. The end-to-end jobs
are in tests/integration/test_spark_without_venv.py."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from sparklog.errors import ConfigError
from sparklog.spark.session import log4j2_config_path
from sparklog.spark.spark_env import MARKER, artifact_name, bind_environment, install_log_config, link_jars

_PYSPARK = importlib.util.find_spec("pyspark")
assert _PYSPARK is not None and _PYSPARK.origin is not None
INSTALLED_SPARK_HOME = Path(_PYSPARK.origin).parent
BIN_DIR = Path(sysconfig.get_path("scripts"))


def launch_env(spark_home: Path, **env: str) -> tuple[str, str]:
    """PYSPARK_PYTHON and the python3 on PATH after pyspark's own bin/load-spark-env.sh."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_"))}
    # As without activation: this environment's bin is not on PATH.
    base["PATH"] = os.pathsep.join(
        p for p in os.environ.get("PATH", "").split(os.pathsep) if p and Path(p).resolve() != BIN_DIR.resolve()
    )
    script = '. "$SPARK_HOME/bin/load-spark-env.sh"; echo "${PYSPARK_PYTHON:-}"; command -v python3'
    done = subprocess.run(
        ["bash", "-c", script],
        env={**base, "SPARK_HOME": str(spark_home), **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    pyspark_python, python3 = done.stdout.splitlines()
    return pyspark_python, python3


def test_make_venv_bound_this_environment() -> None:
    bin_dir = BIN_DIR
    assert (INSTALLED_SPARK_HOME / "conf" / "spark-env.sh").is_file(), "run `make venv` (it binds .venv's Spark)"
    assert (bin_dir / "spark-distribution").resolve() == INSTALLED_SPARK_HOME.resolve()
    pyspark_python, python3 = launch_env(INSTALLED_SPARK_HOME)
    assert Path(pyspark_python).parent == bin_dir and Path(pyspark_python).name.startswith("python")
    assert Path(python3).parent == bin_dir


def test_make_venv_made_this_environments_spark_quiet() -> None:
    installed = (INSTALLED_SPARK_HOME / "conf" / "log4j2.properties").read_text()
    assert installed.startswith(MARKER) and installed.endswith(Path(log4j2_config_path()).read_text())


def test_log_config_rewrites_its_own_and_leaves_a_users_alone(tmp_path: Path) -> None:
    spark_home, _bin_dir = fake_environment(tmp_path)
    source = tmp_path / "quiet.properties"
    target = spark_home / "conf" / "log4j2.properties"
    for text in ("rootLogger.level = error\n", "rootLogger.level = warn\n"):
        source.write_text(text)
        assert install_log_config(spark_home, source) == target
        assert target.read_text().startswith(MARKER) and target.read_text().endswith(text)
    users = "rootLogger.level = info\n"
    target.write_text(users)
    assert install_log_config(spark_home, source) is None
    assert target.read_text() == users


def test_explicit_pyspark_python_wins(tmp_path: Path) -> None:
    pyspark_python, python3 = launch_env(INSTALLED_SPARK_HOME, PYSPARK_PYTHON="/opt/other/bin/python3")
    assert pyspark_python == "/opt/other/bin/python3"
    assert Path(python3).parent != BIN_DIR, "PATH must stay the user's"


def fake_environment(root: Path) -> tuple[Path, Path]:
    """A pyspark directory with its real launch scripts, and a bin dir whose path needs quoting
    (Spark's load-spark-env.sh itself breaks on a space in SPARK_HOME)."""
    spark_home = root / "site-packages" / "pyspark"
    (spark_home / "bin").mkdir(parents=True)
    (spark_home / "bin" / "load-spark-env.sh").write_bytes(
        (INSTALLED_SPARK_HOME / "bin" / "load-spark-env.sh").read_bytes()
    )
    bin_dir = root / "my env's" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python3").symlink_to(sys.executable)
    return spark_home, bin_dir


def test_bind_writes_env_and_link_and_rewrites_its_own(tmp_path: Path) -> None:
    spark_home, bin_dir = fake_environment(tmp_path)
    python = bin_dir / "python3"
    for _ in range(2):
        env_file, link = bind_environment(python, bin_dir, spark_home)
        assert env_file == spark_home / "conf" / "spark-env.sh"
        assert link.is_symlink() and link.resolve() == spark_home.resolve()
        assert launch_env(spark_home) == (str(python), str(python))


def test_bind_never_overwrites_a_users_spark_env(tmp_path: Path) -> None:
    spark_home, bin_dir = fake_environment(tmp_path)
    (spark_home / "conf").mkdir()
    users = "SPARK_LOCAL_IP=127.0.0.1\n"
    (spark_home / "conf" / "spark-env.sh").write_text(users)
    with pytest.raises(ConfigError, match=r"was not written by sparklog.*PYSPARK_PYTHON"):
        bind_environment(bin_dir / "python3", bin_dir, spark_home)
    assert (spark_home / "conf" / "spark-env.sh").read_text() == users
    assert not (bin_dir / "spark-distribution").exists()


def test_bind_never_replaces_a_real_spark_distribution_dir(tmp_path: Path) -> None:
    spark_home, bin_dir = fake_environment(tmp_path)
    (bin_dir / "spark-distribution").mkdir()
    with pytest.raises(ConfigError, match=r"is not a link.*SPARK_HOME"):
        bind_environment(bin_dir / "python3", bin_dir, spark_home)
    assert (bin_dir / "spark-distribution").is_dir() and not (spark_home / "conf" / "spark-env.sh").exists()


@pytest.mark.parametrize(
    ("jar", "artifact"),
    [
        ("kafka-clients-3.9.2.jar", "kafka-clients"),
        ("spark-sql-kafka-0-10_2.13-4.2.0.jar", "spark-sql-kafka-0-10_2.13"),
        ("zstd-jni-1.5.7-3.jar", "zstd-jni"),
        ("jackson-annotations-2.21.jar", "jackson-annotations"),
        ("delta-spark_2.13-4.4.0.jar", "delta-spark_2.13"),
        ("no-version.jar", "no-version"),
    ],
)
def test_artifact_name(jar: str, artifact: str) -> None:
    assert artifact_name(jar) == artifact


def jar_files(directory: Path, *names: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name in names:
        (directory / name).write_bytes(b"PK")


def test_link_jars_links_only_what_pyspark_lacks(tmp_path: Path) -> None:
    spark_home, fetched = tmp_path / "pyspark", tmp_path / "spark-jars"
    jar_files(spark_home / "jars", "jackson-core-2.21.2.jar", "kafka-streams-4.0.0.jar")
    jar_files(
        fetched,
        "jackson-core-2.13.5.jar",  # PySpark ships another version: its own is kept
        "delta-spark_2.13-4.4.0.jar",
        "kafka-clients-3.9.2.jar",
        "commons-logging-1.3.0.jar",  # PySpark has jcl-over-slf4j instead
    )
    linked = link_jars(spark_home, fetched)
    assert sorted(p.name for p in linked) == ["delta-spark_2.13-4.4.0.jar", "kafka-clients-3.9.2.jar"]
    assert all(p.is_symlink() and p.resolve().parent == fetched.resolve() for p in linked)
    assert sorted(p.name for p in (spark_home / "jars").iterdir()) == [
        "delta-spark_2.13-4.4.0.jar",
        "jackson-core-2.21.2.jar",
        "kafka-clients-3.9.2.jar",
        "kafka-streams-4.0.0.jar",
    ]


def test_link_jars_again_replaces_its_own_links(tmp_path: Path) -> None:
    spark_home, fetched = tmp_path / "pyspark", tmp_path / "spark-jars"
    jar_files(spark_home / "jars", "spark-core_2.13-4.2.0.jar")
    jar_files(fetched, "delta-spark_2.13-4.4.0.jar")
    link_jars(spark_home, fetched)
    (fetched / "delta-spark_2.13-4.4.0.jar").unlink()
    jar_files(fetched, "delta-spark_2.13-4.4.1.jar")
    link_jars(spark_home, fetched)
    assert sorted(p.name for p in (spark_home / "jars").iterdir()) == [
        "delta-spark_2.13-4.4.1.jar",
        "spark-core_2.13-4.2.0.jar",
    ]


def test_link_jars_without_fetched_jars_says_to_run_make(tmp_path: Path) -> None:
    (tmp_path / "pyspark" / "jars").mkdir(parents=True)
    (tmp_path / "spark-jars").mkdir()
    with pytest.raises(ConfigError, match=r"No jars in .*spark-jars.*make venv"):
        link_jars(tmp_path / "pyspark", tmp_path / "spark-jars")
    assert list((tmp_path / "pyspark" / "jars").iterdir()) == []


def test_the_environments_spark_has_delta_and_the_kafka_connector() -> None:
    """What `make venv` leaves: the jars of jvm/spark/pom.xml that PySpark lacks, linked."""
    linked = {artifact_name(p.name) for p in (INSTALLED_SPARK_HOME / "jars").iterdir() if p.is_symlink()}
    assert {"delta-spark_2.13", "delta-storage", "spark-sql-kafka-0-10_2.13", "kafka-clients"} <= linked
