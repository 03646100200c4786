"""The ``sparklog`` data source: ``spark.read/write.format("sparklog")``, SQL ``USING sparklog``,
and Structured Streaming (``spark.readStream/writeStream.format("sparklog")``).

Schema and options are those of Spark's Kafka source, so a job written for
``format("kafka")`` ports by changing the format name and the connection option
(``kafka.bootstrap.servers`` → ``zookeeper.connect``, or nothing for the embedded server).
Spark instantiates this class in its Python workers; the readers and writers it returns
are documented in :mod:`sparklog.spark.reader`, :mod:`~sparklog.spark.writer`,
:mod:`~sparklog.spark.stream_reader` and :mod:`~sparklog.spark.stream_writer`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, MutableMapping

from pyspark.sql.datasource import (
    CaseInsensitiveDict,
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from sparklog.model.schema import SPARK_READ_DDL, SPARK_READ_DDL_WITH_HEADERS
from sparklog.spark.option_names import CHECKED_OPTION, SourceUse, describe_cluster, ignored_options, warning_text
from sparklog.spark.options import option_flag

__all__ = ["SparklogDataSource", "with_settings"]


class SparklogDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "sparklog"

    def schema(self) -> str:
        return SPARK_READ_DDL_WITH_HEADERS if option_flag(self.options, "includeHeaders", False) else SPARK_READ_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        from sparklog.spark.reader import SparklogBatchReader

        _warn_ignored(self.options, "batch read")
        return SparklogBatchReader(self.options, option_flag(self.options, "includeHeaders", False))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from sparklog.spark.writer import SparklogBatchWriter

        _warn_ignored(self.options, "batch write")
        return SparklogBatchWriter(self.options, schema, overwrite)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from sparklog.spark.stream_reader import SparklogStreamReader

        _warn_ignored(self.options, "stream read")
        return SparklogStreamReader(self.options, option_flag(self.options, "includeHeaders", False))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from sparklog.spark.stream_writer import SparklogStreamWriter

        _warn_ignored(self.options, "stream write")
        return SparklogStreamWriter(self.options, schema, overwrite)


def _warn_ignored(options: Mapping[str, str], use: SourceUse) -> None:
    # In the planning worker, for jobs whose driver did not warn (no sparklog.spark import
    # there): its stderr is the Spark driver's console.
    if CHECKED_OPTION in options:
        return
    notes = ignored_options(options, use, lambda: describe_cluster(options))
    if notes:
        logging.getLogger("sparklog.spark").warning(warning_text(notes, use))


def with_settings(settings: Mapping[str, str]) -> type[SparklogDataSource]:
    """The source with ``settings`` beneath every reader's and writer's own options: how a
    session's cluster settings reach the Python workers that run it (registered per session
    by :func:`sparklog.spark.session.register_session_source`). Defined here, not at module
    level, so the class is pickled by value with its settings."""
    frozen = dict(settings)

    class SessionSparklogDataSource(SparklogDataSource):
        def __init__(self, options: MutableMapping[str, str]) -> None:
            merged = CaseInsensitiveDict(frozen)
            merged.update(options)
            super().__init__(merged)

    return SessionSparklogDataSource
