"""A SparkSession set up for sparklog: quiet logs, the ``sparklog`` source registered.

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

__all__ = ["get_or_create_session", "log4j2_config_path", "register_source"]


def log4j2_config_path() -> str:
    """The quiet log4j2 config shipped with sparklog (repo ``conf/`` or package data)."""
    repo_conf = Path(__file__).resolve().parents[2] / "conf" / "log4j2.properties"
    if repo_conf.is_file():
        return str(repo_conf)
    return str(resources.files("sparklog.spark").joinpath("log4j2.properties"))


def register_source(spark: SparkSession) -> None:
    from sparklog.spark.source import SparklogDataSource

    spark.dataSource.register(SparklogDataSource)


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
    }
    # Python workers inherit executorEnv, so session settings reach the data source there.
    for key, value in settings.items():
        if key.startswith("spark.sparklog."):
            name = key[len("spark.sparklog.") :]
            env = {
                "zookeeper.connect": "SPARKLOG_ZOOKEEPER",
                "home": "SPARKLOG_HOME",
                "sparklog.home": "SPARKLOG_HOME",
            }.get(name)
            if env:
                defaults[f"spark.executorEnv.{env}"] = value
    for key, value in {**defaults, **settings}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register_source(spark)
    return spark
