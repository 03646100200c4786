"""Found by Spark's Python data-source lookup (modules named ``pyspark_*`` exposing
``DefaultSource``), so ``format("sparklog")`` works in any session once sparklog is installed
for the Python that Spark runs (without an activated venv: see :mod:`sparklog.spark.spark_env`)."""

from sparklog.spark.source import SparklogDataSource as DefaultSource

__all__ = ["DefaultSource"]
