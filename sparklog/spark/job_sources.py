"""Files and tables as records: what ``jobs/produce.py`` reads and how rows become records.

:func:`check_source` refuses a source that cannot be read before Spark starts (a missing
path; a table name given for a file format). :func:`read_source` reads it whole (batch) or
as a growing directory (stream: the schema from ``--schema`` or inferred from the files
present at start, as Spark's file streams need one). :func:`to_records` turns rows into
the Kafka sink's columns with SQL expressions: ``value`` defaults to the whole row as JSON
(``to_json(struct(*))``), ``key`` to none; ``headers`` must give Kafka's
``array<struct<key string, value binary>>``, ``timestamp`` a timestamp (default: the
produce time).

Invariant: nothing is written here; a bad expression or source fails before any produce.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from sparklog.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

__all__ = [
    "SOURCE_FORMATS",
    "check_source",
    "is_table_name",
    "read_source",
    "to_records",
]

SOURCE_FORMATS = ("json", "csv", "parquet", "delta", "text")
_FILE_OPTIONS: Mapping[str, Mapping[str, str]] = {"csv": {"header": "true", "inferSchema": "true"}}


def is_table_name(name: str) -> bool:
    """Whether a job's source or sink names a catalog table rather than a path: no ``/``, no
    scheme, and nothing of that name in the working directory."""
    return not ("/" in name or "://" in name or Path(name).exists())


def check_source(source: str, fmt: str) -> None:
    """Fail (ConfigError) unless ``source`` can be read as ``fmt``: a local path must exist
    (and be a Delta table for ``delta``); a bare name is a table, only for ``delta``."""
    if fmt not in SOURCE_FORMATS:
        raise ConfigError(f"Unknown source format {fmt!r}; use one of {', '.join(SOURCE_FORMATS)}")
    if is_table_name(source):
        if fmt != "delta":
            raise ConfigError(
                f"Source {source!r} does not exist (no such file or directory); a table name needs --format delta"
            )
        return
    if "://" in source and not source.startswith("file:"):
        return  # an object store: Spark finds out
    path = Path(source.removeprefix("file:"))
    if not path.exists():
        raise ConfigError(f"Source {source} does not exist (no such file or directory); nothing produced")
    if fmt == "delta" and not (path / "_delta_log").is_dir():
        raise ConfigError(f"Source {source} is not a Delta table (no _delta_log); use the format its files have")


def read_source(
    spark: SparkSession,
    source: str,
    fmt: str,
    *,
    stream: bool = False,
    schema: StructType | None = None,
    max_files: int | None = None,
) -> DataFrame:
    """``source`` as a DataFrame (streaming when ``stream``, at most ``max_files`` new files
    per micro-batch); a table name reads the table."""
    if is_table_name(source):
        if not spark.catalog.tableExists(source):
            implementation = spark.conf.get("spark.sql.catalogImplementation", "in-memory")
            raise ConfigError(
                f"Source table {source} is not in the session's catalog ({implementation}); a job's own session "
                "sees only tables of a persistent catalog (a Hive metastore, spark.sql.catalogImplementation=hive, "
                "or your platform's), else give the table's path; nothing produced"
            )
        return spark.readStream.table(source) if stream else spark.read.table(source)
    options = dict(_FILE_OPTIONS.get(fmt, {}))
    if not stream:
        reader = spark.read.format(fmt).options(**options)
        return (reader.schema(schema) if schema is not None else reader).load(source)
    if fmt == "delta":
        return spark.readStream.format("delta").load(source)
    if schema is None and fmt != "text":
        # File streams need a schema: the files present now say it (their first batch).
        schema = spark.read.format(fmt).options(**options).load(source).schema
    options.pop("inferSchema", None)
    if max_files:
        options["maxFilesPerTrigger"] = str(max_files)
    stream_reader = spark.readStream.format(fmt).options(**options)
    return (stream_reader.schema(schema) if schema is not None else stream_reader).load(source)


def to_records(
    df: DataFrame,
    *,
    key_expr: str | None = None,
    value_expr: str | None = None,
    headers_expr: str | None = None,
    timestamp_expr: str | None = None,
) -> DataFrame:
    """The Kafka sink's columns of ``df``'s rows; a bad expression is a ConfigError naming it."""
    from pyspark.sql import functions as F

    columns = [
        ("key", key_expr),
        ("value", value_expr),
        ("headers", headers_expr),
        ("timestamp", timestamp_expr),
    ]
    selected = []
    for name, expr in columns:
        if expr is None:
            if name == "value":
                selected.append(F.to_json(F.struct(*[F.col(f"`{c}`") for c in df.columns])).alias("value"))
            continue
        try:
            column = F.expr(expr)
            df.select(column).schema  # noqa: B018 - analysing the expression is the check
        except Exception as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ConfigError(
                f"--{name}-expr {expr!r} does not work on the source's columns {df.columns}: {first}"
            ) from exc
        selected.append(column.alias(name))
    return df.select(*selected)
