"""What the driver does for ``format("sparklog")`` once :mod:`sparklog.spark` is imported.

Spark runs a Python data source only in its Python workers, which see neither the
SparkSession's conf nor the driver's working directory (on a cluster). Two things must
therefore happen in the driver, just before Spark plans a read or a write of the source:

* **Session settings.** The session's ``spark.sparklog.*`` conf (e.g. from ``spark-submit
  --conf spark.sparklog.sparklog.home=…``) and the home the driver resolved are handed to the
  source by registering it for the session with those settings (``register_session_source``);
  options given to the reader or writer still win. SQL (``USING sparklog``) planned after that
  sees them too.
* **The embedded ZooKeeper.** When the effective settings name no ``zookeeper.connect``, the
  driver starts (or finds) the embedded server of the home: a Spark worker never starts one
  (:func:`sparklog.metadata.embedded.in_spark_worker`).

And one Spark rule is bent as Kafka's sink bends it: ``df.write.format("sparklog").save()``
with no ``mode(...)`` appends. Spark decides save modes before a Python source is asked: the
JVM ``DataFrameWriter`` accepts only Append and Overwrite for a Python source and fails the
default mode (ErrorIfExists) with ``UNSUPPORTED_DATA_SOURCE_SAVE_MODE``; nothing (option,
capability, SQL conf) lets the source change that. Kafka gets away with it as a V1 source whose
``createRelation`` treats ErrorIfExists as append. So a write whose format is ``sparklog`` and
whose mode is unset, ``error``/``errorifexists`` or ``default`` is saved in append mode; other
formats and modes pass through unchanged (``overwrite`` fails in the source with a message
naming ``.mode("append")``). A script that never imports :mod:`sparklog.spark` gets Spark's
own behaviour: ``.mode("append")`` works everywhere. Spark Connect clients are not wrapped.

Implementation: ``format``/``option``/``options``/``mode`` of PySpark's four readers and
writers are wrapped to remember what the user chose, and ``load``/``save``/``start``/
``toTable`` to act on it (idempotent :func:`install`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from sparklog.spark.option_names import CHECKED_OPTION, SourceUse, warn_ignored

__all__ = ["install"]

_SOURCE = "_sparklog_source"
_OPTIONS = "_sparklog_options"
_MODE = "_sparklog_mode"
_INSTALLED = "_sparklog_hooks_installed"
# Spark's spellings of SaveMode.ErrorIfExists, which Kafka's sink treats as append.
_APPEND_MODES = frozenset({"error", "errorifexists", "default"})


def install() -> None:
    """Wrap PySpark's ``DataFrameReader``, ``DataFrameWriter``, ``DataStreamReader`` and
    ``DataStreamWriter`` (idempotent; a no-op without PySpark)."""
    try:
        from pyspark.sql.readwriter import DataFrameReader, DataFrameWriter
        from pyspark.sql.streaming.readwriter import DataStreamReader, DataStreamWriter
    except ImportError:  # no Spark here: nothing to read or write with
        return
    for cls in (DataFrameReader, DataFrameWriter, DataStreamReader, DataStreamWriter):
        if getattr(cls, _INSTALLED, False):
            continue
        _remember_choices(cls)
        setattr(cls, _INSTALLED, True)
    _wrap_finish(DataFrameReader, "load", ("format", "schema"), "batch read", _keep_mode)
    _wrap_finish(DataStreamReader, "load", ("format", "schema"), "stream read", _keep_mode)
    _wrap_finish(DataFrameWriter, "save", ("format", "mode"), "batch write", _append_by_default)
    _wrap_finish(DataStreamWriter, "start", ("format",), "stream write", _keep_mode)
    _wrap_finish(DataStreamWriter, "toTable", ("format",), "stream write", _keep_mode)


def _remember_choices(cls: type) -> None:
    original_format, original_option, original_options = cls.format, cls.option, cls.options  # type: ignore[attr-defined]

    @functools.wraps(original_format)
    def format(self: Any, source: str) -> Any:
        setattr(self, _SOURCE, source)
        return original_format(self, source)

    @functools.wraps(original_option)
    def option(self: Any, key: str, value: Any) -> Any:
        _chosen_options(self)[key] = value
        return original_option(self, key, value)

    @functools.wraps(original_options)
    def options(self: Any, **chosen: Any) -> Any:
        _chosen_options(self).update(chosen)
        return original_options(self, **chosen)

    cls.format, cls.option, cls.options = format, option, options  # type: ignore[attr-defined]
    if hasattr(cls, "mode"):
        original_mode = cls.mode

        @functools.wraps(original_mode)
        def mode(self: Any, saveMode: str | None) -> Any:
            if saveMode is not None:
                setattr(self, _MODE, saveMode)
            return original_mode(self, saveMode)

        cls.mode = mode


def _chosen_options(handle: Any) -> dict[str, Any]:
    chosen: dict[str, Any] | None = getattr(handle, _OPTIONS, None)
    if chosen is None:
        chosen = {}
        setattr(handle, _OPTIONS, chosen)
    return chosen


def _wrap_finish(
    cls: type, name: str, applied: tuple[str, ...], use: SourceUse, choose_mode: Callable[[Any], None]
) -> None:
    """Wrap ``cls.name`` so that, once the keyword arguments that set the format, mode, schema
    and options have been applied and just before Spark plans the job, a sparklog job gets its
    settings (and its ignored options said) and ``choose_mode`` settles the save mode."""
    original = getattr(cls, name)
    if getattr(original, "_sparklog_wrapped", False):
        return

    @functools.wraps(original)
    def finish(self: Any, *args: Any, **kwargs: Any) -> Any:
        for key in applied:
            value = kwargs.pop(key, None)
            if value is not None:
                getattr(self, key)(value)
        options = {k: v for k, v in kwargs.items() if k not in _PASSED_THROUGH}
        if options:
            self.options(**options)
            kwargs = {k: v for k, v in kwargs.items() if k in _PASSED_THROUGH}
        if _is_sparklog(self):
            _prepare(self, use)
            choose_mode(self)
        return original(self, *args, **kwargs)

    finish._sparklog_wrapped = True  # type: ignore[attr-defined]
    setattr(cls, name, finish)


# Keyword arguments of load/save/start/toTable that are not options.
_PASSED_THROUGH = frozenset({"path", "partitionBy", "outputMode", "queryName", "tableName", "trigger"})


def _is_sparklog(handle: Any) -> bool:
    source = getattr(handle, _SOURCE, None)
    return isinstance(source, str) and source.strip().lower() == "sparklog"


def _prepare(handle: Any, use: SourceUse) -> None:
    from sparklog.spark.session import prepare_source

    chosen = _chosen_options(handle)
    if CHECKED_OPTION in chosen:  # a handle reused for a second load/save
        return
    settings = prepare_source(handle._spark, chosen)
    warn_ignored(chosen, use, settings, stacklevel=3)  # this function, the wrapped method, the user's line
    handle.option(CHECKED_OPTION, "true")


def _keep_mode(handle: Any) -> None:
    return None


def _append_by_default(writer: Any) -> None:
    chosen = getattr(writer, _MODE, None)
    if chosen is None or str(chosen).strip().lower() in _APPEND_MODES:
        writer.mode("append")
