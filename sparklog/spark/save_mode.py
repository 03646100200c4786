"""``df.write.format("sparklog").save()`` with no ``mode(...)`` appends, as Spark's Kafka sink does.

Spark decides save modes before a Python data source is asked: for a source that supports
batch writes, the JVM ``DataFrameWriter`` accepts only Append and Overwrite and fails the
default mode (ErrorIfExists) with ``UNSUPPORTED_DATA_SOURCE_SAVE_MODE``; nothing (option,
capability, SQL conf) lets a Python source change that. Kafka gets away with it as a V1 source
(``spark.sql.sources.useV1SourceList``) whose ``createRelation`` treats ErrorIfExists as append.

So sparklog wraps PySpark's ``DataFrameWriter`` once, when :mod:`sparklog.spark` is imported
(``get_or_create_session`` and every sparklog Spark helper import it): a write whose format is
``sparklog`` and whose mode is unset, ``error``/``errorifexists`` or ``default`` is saved in
append mode. Other formats and modes pass through unchanged, so ``ignore`` and ``overwrite``
still fail as before (Kafka rejects both too). Spark Connect clients are not wrapped.
"""

from __future__ import annotations

import functools
from typing import Any

__all__ = ["install"]

_SOURCE = "_sparklog_source"
_MODE = "_sparklog_mode"
# Spark's spellings of SaveMode.ErrorIfExists, which Kafka's sink treats as append.
_APPEND_MODES = frozenset({"error", "errorifexists", "default"})


def install() -> None:
    """Wrap ``DataFrameWriter.format``/``mode``/``save`` (idempotent)."""
    try:
        from pyspark.sql.readwriter import DataFrameWriter
    except ImportError:  # no Spark here: nothing to write with
        return
    if getattr(DataFrameWriter, "_sparklog_appends_by_default", False):
        return
    original_format, original_mode, original_save = DataFrameWriter.format, DataFrameWriter.mode, DataFrameWriter.save

    @functools.wraps(original_format)
    def format(self: Any, source: str) -> Any:
        setattr(self, _SOURCE, source)
        return original_format(self, source)

    @functools.wraps(original_mode)
    def mode(self: Any, saveMode: str | None) -> Any:
        if saveMode is not None:
            setattr(self, _MODE, saveMode)
        return original_mode(self, saveMode)

    @functools.wraps(original_save)
    def save(
        self: Any,
        path: str | None = None,
        format: str | None = None,
        mode: str | None = None,
        partitionBy: Any = None,
        **options: Any,
    ) -> None:
        if format is not None:
            self.format(format)
        if mode is not None:
            self.mode(mode)
        if _appends_by_default(self):
            self.mode("append")
        return original_save(self, path, partitionBy=partitionBy, **options)

    DataFrameWriter.format = format  # type: ignore[method-assign]
    DataFrameWriter.mode = mode  # type: ignore[method-assign]
    DataFrameWriter.save = save  # type: ignore[method-assign]
    DataFrameWriter._sparklog_appends_by_default = True  # type: ignore[attr-defined]


def _appends_by_default(writer: Any) -> bool:
    source = getattr(writer, _SOURCE, None)
    if not isinstance(source, str) or source.strip().lower() != "sparklog":
        return False
    chosen = getattr(writer, _MODE, None)
    return chosen is None or str(chosen).strip().lower() in _APPEND_MODES
