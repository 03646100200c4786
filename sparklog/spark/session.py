"""A SparkSession set up for sparklog: quiet logs, the ``sparklog`` source registered, and
Delta Lake's SQL extension and catalog when its jars are installed (``make venv`` links them
into PySpark's jars: :mod:`sparklog.spark.spark_env`), so topic tables read with
``format("delta")``, ``DESCRIBE HISTORY`` and time travel.

Use it in scripts, notebooks and tests; ``spark-submit`` jobs get the same through
``conf/spark-defaults.conf``. Any other session can use ``format("sparklog")`` too once
sparklog is installed (``pyspark_sparklog`` is found by Spark's data-source lookup).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "DELTA_SESSION_CONF",
    "delta_jars_installed",
    "get_or_create_session",
    "log4j2_config_path",
    "prepare_source",
    "register_session_source",
]

# Delta Lake's own settings for a session (delta-spark's quickstart): its SQL (DESCRIBE
# HISTORY, VERSION AS OF, OPTIMIZE, VACUUM) and its catalog for the session catalog's tables.
DELTA_SESSION_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}

_BOUND = "_sparklog_source_settings"


def log4j2_config_path() -> str:
    """The quiet log4j2 config shipped with sparklog (repo ``conf/`` or package data)."""
    repo_conf = Path(__file__).resolve().parents[2] / "conf" / "log4j2.properties"
    if repo_conf.is_file():
        return str(repo_conf)
    return str(resources.files("sparklog.spark").joinpath("log4j2.properties"))


def delta_jars_installed() -> bool:
    """Whether delta-spark's jar is on PySpark's classpath (its ``jars`` directory)."""
    import pyspark

    return any((Path(pyspark.__file__).parent / "jars").glob("delta-spark_*.jar"))


def register_session_source(spark: SparkSession) -> dict[str, str]:
    """Register ``format("sparklog")`` for ``spark`` with the session's cluster settings (its
    ``spark.sparklog.*`` conf, and the home and ZooKeeper the driver resolves, so workers in
    other directories or on other machines agree); returns them. Registers again only when
    they changed (``spark.conf.set("spark.sparklog.…")`` between jobs)."""
    from sparklog.spark.options import cluster_config_from_options, session_options
    from sparklog.spark.source import with_settings

    settings = session_options(spark)
    config = cluster_config_from_options(settings)
    settings["sparklog.home"] = config.home
    if config.zookeeper_connect:
        settings["zookeeper.connect"] = config.zookeeper_connect
    key = tuple(sorted(settings.items()))
    if getattr(spark, _BOUND, None) != key:
        spark.dataSource.register(with_settings(settings))
        setattr(spark, _BOUND, key)
    return settings


def prepare_source(spark: SparkSession, options: Mapping[str, object]) -> dict[str, str]:
    """Before Spark plans a read or write of ``format("sparklog")`` with ``options``: register
    the session's settings, and start the embedded ZooKeeper here in the driver when the job
    names no ``zookeeper.connect`` (Spark workers never start one). Returns the settings the
    source will see: the session's beneath ``options``."""
    from sparklog.metadata.session import resolve_connect
    from sparklog.spark.options import cluster_config_from_options

    settings = register_session_source(spark)
    merged = {**settings, **{str(k): str(v) for k, v in options.items() if v is not None}}
    resolve_connect(cluster_config_from_options(merged))
    return merged


def get_or_create_session(
    app_name: str = "sparklog",
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """Build (or reuse) a session; ``spark.sparklog.*`` entries of ``conf`` configure sparklog."""
    from pyspark.sql import SparkSession

    settings = dict(conf or {})
    log_conf = log4j2_config_path()
    java_opts = f"-Dlog4j2.configurationFile=file:{log_conf}"
    # Python workers must run the interpreter that has sparklog installed.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # The driver JVM starts before any SparkConf applies: its options go on the submit line.
    if "PYSPARK_SUBMIT_ARGS" not in os.environ:
        os.environ["PYSPARK_SUBMIT_ARGS"] = f'--driver-java-options "{java_opts}" pyspark-shell'
    builder = SparkSession.builder.appName(app_name)
    # Under spark-submit (its driver hands Python a gateway) the master is --master's.
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ
    if master or os.environ.get("SPARK_MASTER") or not submitted:
        builder = builder.master(master or os.environ.get("SPARK_MASTER", "local[*]"))
    defaults = {
        "spark.driver.extraJavaOptions": java_opts,
        "spark.executor.extraJavaOptions": java_opts,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "8",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.execution.arrow.maxRecordsPerBatch": "50000",
        "spark.python.worker.reuse": "true",
        **(DELTA_SESSION_CONF if delta_jars_installed() else {}),
    }
    for key, value in {**defaults, **settings}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register_session_source(spark)
    return spark
