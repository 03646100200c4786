"""Record values as columns: how ``jobs/consume.py`` lands a topic's records in a table.

:class:`ValueFormat` turns the Kafka source's columns (``key, value, topic, partition, offset,
timestamp, ...``) into the landed rows: ``raw`` keeps ``key`` and ``value`` as strings,
``json`` and ``csv`` parse ``value`` with a DDL schema into one column per field; every row
keeps ``topic, partition, offset, timestamp`` (the record's identity, so a landed table can
be checked against the topic). A value the schema cannot parse is *malformed*: it goes to
the dead-letter rows (:meth:`ValueFormat.dead_letters`: the record's identity, its raw key
and value, and why) and never into the landed rows. A null value (a tombstone) is not
malformed: it lands as a row of nulls.

Invariant: :meth:`ValueFormat.landed` and :meth:`ValueFormat.dead_letters` of one frame
partition its records (every record is in exactly one), both deterministic (consume_into
may evaluate them more than once).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sparklog.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import StructType

__all__ = ["IDENTITY_COLUMNS", "VALUE_FORMATS", "ValueFormat", "parse_schema"]

VALUE_FORMATS = ("raw", "json", "csv")
IDENTITY_COLUMNS = ("topic", "partition", "offset", "timestamp")
_CORRUPT = "_sparklog_malformed"  # Spark's columnNameOfCorruptRecord, never a user column
_PARSED = "_sparklog_parsed"


def parse_schema(spark: SparkSession, ddl: str) -> StructType:
    """``ddl`` (``"id BIGINT, name STRING"``) as a schema; ConfigError naming what is wrong."""
    from pyspark.sql.types import StructType

    try:
        schema = spark.createDataFrame([], ddl).schema  # parsed by Spark's own DDL parser
    except Exception as exc:  # pyspark's ParseException and friends: one line is enough
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(
            f"--schema {ddl!r} is not a valid DDL schema ({first}); e.g. 'id BIGINT, name STRING'"
        ) from exc
    if not isinstance(schema, StructType) or not schema.fields:
        raise ConfigError(f"--schema {ddl!r} names no columns; e.g. 'id BIGINT, name STRING'")
    reserved = {_CORRUPT, _PARSED, *IDENTITY_COLUMNS} & {f.name for f in schema.fields}
    if reserved:
        raise ConfigError(
            f"--schema {ddl!r} uses the column name(s) {sorted(reserved)}, which the landed rows keep for the "
            "record's identity; rename them in the schema"
        )
    return schema


@dataclass(frozen=True)
class ValueFormat:
    """How values are decoded: ``kind`` one of :data:`VALUE_FORMATS`, ``schema`` for json/csv."""

    kind: str
    schema: StructType | None = None

    def __post_init__(self) -> None:
        if self.kind not in VALUE_FORMATS:
            raise ConfigError(f"Unknown value format {self.kind!r}; use one of {', '.join(VALUE_FORMATS)}")
        if self.kind != "raw" and self.schema is None:
            raise ConfigError(f"--value-format {self.kind} needs --schema DDL (e.g. 'id BIGINT, name STRING')")

    def _parsed(self, df: DataFrame) -> DataFrame:
        """``df`` plus the parsed value as a struct with the corrupt-record column."""
        from pyspark.sql import functions as F
        from pyspark.sql.types import StringType, StructField, StructType

        assert self.schema is not None
        with_corrupt = StructType([*self.schema.fields, StructField(_CORRUPT, StringType())])
        text = F.col("value").cast("string")
        options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": _CORRUPT}
        if self.kind == "json":
            parsed = F.from_json(text, with_corrupt, options)
        else:
            ddl = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in with_corrupt.fields)
            parsed = F.from_csv(text, ddl, options)
        return df.withColumn(_PARSED, parsed)

    def _malformed(self) -> Column:
        from pyspark.sql import functions as F

        return F.col("value").isNotNull() & F.col(f"{_PARSED}.{_CORRUPT}").isNotNull()

    def _rows(self, parsed: DataFrame) -> DataFrame:
        """The landed columns of a parsed frame: key, the schema's fields, the identity."""
        from pyspark.sql import functions as F

        assert self.schema is not None
        fields = [F.col(f"{_PARSED}.{f.name}").alias(f.name) for f in self.schema.fields]
        key = F.col("key").cast("string").alias("key")
        return parsed.select(key, *fields, *(F.col(c) for c in IDENTITY_COLUMNS))

    def landed(self, df: DataFrame) -> DataFrame:
        """The rows to land: the decoded columns, then the record's identity."""
        from pyspark.sql import functions as F

        if self.kind == "raw":
            key, value = F.col("key").cast("string").alias("key"), F.col("value").cast("string").alias("value")
            return df.select(key, value, *(F.col(c) for c in IDENTITY_COLUMNS))
        return self._rows(self._parsed(df).where(~self._malformed()))

    def dead_letters(self, df: DataFrame) -> DataFrame:
        """The malformed records: identity, raw key and value (binary, as stored) and the error."""
        from pyspark.sql import functions as F

        identity = [F.col(c) for c in IDENTITY_COLUMNS]
        columns = [*identity, F.col("key"), F.col("value")]
        if self.kind == "raw":
            return df.where(F.lit(False)).select(*columns, F.lit("").alias("error"))
        error = F.lit(f"value is not {self.kind} of schema {self.schema.simpleString() if self.schema else ''}")
        return self._parsed(df).where(self._malformed()).select(*columns, error.alias("error"))

    def fail_on_malformed(self, df: DataFrame) -> DataFrame:
        """``landed(df)``, but a malformed record fails the Spark job (nothing is committed)."""
        from pyspark.sql import functions as F

        if self.kind == "raw":
            return self.landed(df)
        message = F.format_string(
            f"Malformed {self.kind} value at %s-%d offset %d (not of the schema); nothing committed. "
            "Fix the producer, or land with --dead-letter PATH",
            F.col("topic"),
            F.col("partition"),
            F.col("offset"),
        )
        checked = F.when(self._malformed(), F.raise_error(message)).otherwise(F.col(_PARSED))
        return self._rows(self._parsed(df).withColumn(_PARSED, checked))
