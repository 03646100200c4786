"""Landing a consumer group's records in a table: one round of ``jobs/consume.py``.

:func:`land` reads the group's next records of its topics, decodes values
(:class:`~sparklog.spark.value_formats.ValueFormat`) and appends them to the sink:

- ``delta``: through :func:`~sparklog.spark.exactly_once.consume_into`: the landed rows and
  the group's input end offsets in ONE Delta commit (exactly once; after a crash, run again).
- ``parquet`` / ``json``: :func:`~sparklog.spark.group_batch.consume`, files appended, then
  the offsets committed (at least once: a crash between the two lands a range again).

The sink is a path, or a table name (``clicks_lake``, ``lake.clicks``: no ``/`` or scheme):
the catalog's table when it exists (its location), else ``<the database's location>/<table>``
(the current database for a bare name; Spark puts a database under its warehouse dir unless
told otherwise), registered in the catalog as an external table of the sink's format by the
first round that lands rows there
(:func:`sink_location`, :func:`register_sink_table`).

Malformed values go to the dead-letter Delta table when one is given, else fail the round
(nothing committed). The dead-letter table keeps its own input offsets, as app transactions
with the sink's ids (``sparklog.input/<group>/<topic>/<partition>`` = next offset covered,
``sparklog.inputtopic/<group>/<topic>`` = the topic's incarnation, so offsets of a deleted
topic position nothing in one created again under its name), and trails the sink: before a
round it is brought up to the sink's offsets (completing a round that crashed between the
sink's commit and its own), after the round up to the new ones. So every malformed value of a landed range is in it exactly once, and a crash never
drops one. For parquet/json sinks the dead letters are Parquet files appended before the
rows and the offsets (at least once, like the rows).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from sparklog.errors import ConfigError
from sparklog.log.delta_sink import DeltaSink, input_app_id, input_topic_app_id
from sparklog.spark.group_batch import (
    Ranges,
    TopicPartition,
    connect_group,
    input_partitions,
    read_ranges_df,
    resolve_ranges,
)
from sparklog.spark.job_sources import is_table_name
from sparklog.spark.value_formats import ValueFormat

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["SINK_FORMATS", "LandResult", "land", "register_sink_table", "sink_location"]

SINK_FORMATS = ("delta", "parquet", "json")
_TABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?")


@dataclass(frozen=True)
class LandResult:
    """One round: the input ranges consumed and the malformed values dead-lettered."""

    input_ranges: Ranges
    dead_letters: int

    @property
    def records(self) -> int:
        return sum(end - start for start, end in self.input_ranges.values())


def land(
    spark: SparkSession,
    group_id: str,
    topics: Iterable[str],
    sink: str,
    sink_format: str,
    values: ValueFormat,
    dead_letter: str | None = None,
    **options: Any,
) -> LandResult:
    """One round (see the module's docstring); ``options`` are :func:`consume`'s."""
    if sink_format not in SINK_FORMATS:
        raise ConfigError(f"Unknown sink format {sink_format!r}; use one of {', '.join(SINK_FORMATS)}")
    names = list(topics)
    path, table = sink_location(spark, sink)
    if sink_format == "delta":
        result = _land_delta(spark, group_id, names, path, values, dead_letter, options)
    else:
        result = _land_files(spark, group_id, names, path, sink_format, values, dead_letter, options)
    if table is not None and result.records > result.dead_letters:
        register_sink_table(spark, table, path, sink_format)
    return result


def sink_location(spark: SparkSession, sink: str) -> tuple[str, str | None]:
    """``(path, table name or None)`` of a sink given as a path or a table name (module docstring)."""
    if not is_table_name(sink):
        return sink, None
    if _TABLE_NAME.fullmatch(sink) is None:
        raise ConfigError(f"Sink {sink!r} is neither a path (no /) nor a table name (table or db.table)")
    if spark.catalog.tableExists(sink):
        rows = spark.sql(f"DESCRIBE TABLE EXTENDED {sink}").collect()
        location = next((str(r.data_type) for r in rows if r.col_name == "Location"), None)
        if location is None:
            raise ConfigError(f"Table {sink} has no location (a view?); land into a table or a path")
        return _without_file_scheme(location), sink
    database, _, name = sink.rpartition(".")
    database = database or spark.catalog.currentDatabase()
    if not spark.catalog.databaseExists(database):
        raise ConfigError(f"Database {database} of sink table {sink} does not exist; create it or name another sink")
    return f"{_without_file_scheme(spark.catalog.getDatabase(database).locationUri).rstrip('/')}/{name}", sink


def _without_file_scheme(location: str) -> str:
    # Spark writes local locations as file: URIs; delta-rs and the file checks want paths.
    return urlparse(location).path if location.startswith("file:") else location


def register_sink_table(spark: SparkSession, table: str, path: str, sink_format: str) -> None:
    """The sink at ``path`` as the catalog's external table ``table`` (kept when it exists)."""
    spark.sql(f"CREATE TABLE IF NOT EXISTS {table} USING {sink_format} LOCATION '{path}'")


def _land_delta(
    spark: SparkSession,
    group_id: str,
    topics: list[str],
    sink: str,
    values: ValueFormat,
    dead_letter: str | None,
    options: Mapping[str, Any],
) -> LandResult:
    from sparklog.spark.exactly_once import consume_into

    if dead_letter is not None:
        _catch_up_dead_letters(spark, group_id, topics, sink, dead_letter, values, options)
    transform = values.landed if dead_letter is not None else values.fail_on_malformed
    result = consume_into(spark, group_id, topics, transform, output_path=sink, **options)
    dead = 0
    if dead_letter is not None and result.records:
        dead = _catch_up_dead_letters(spark, group_id, topics, sink, dead_letter, values, options)
    return LandResult(result.input_ranges, dead)


def _catch_up_dead_letters(
    spark: SparkSession,
    group_id: str,
    topics: list[str],
    sink: str,
    dead_letter: str,
    values: ValueFormat,
    options: Mapping[str, Any],
) -> int:
    """Bring the dead-letter table to the sink's input offsets; returns the rows it wrote.
    A partition it has no offset for starts where the sink stands, or, before the sink's
    first round, where that round starts (so its malformed values are covered)."""
    from sparklog.spark.exactly_once import append_once, new_incarnations, of_current_topics

    _opts, settings, groups = connect_group(spark, options)
    with groups.replicas:
        partitions = input_partitions(groups, group_id, topics)
        ids = {tp: input_app_id(group_id, *tp) for tp in partitions}
        topic_ids = {t: input_topic_app_id(group_id, t) for t in {t for t, _p in partitions}}
        incarnations = groups.replicas.topic_incarnations(topic_ids)
        every = [*ids.values(), *topic_ids.values()]
        stored = {"sink": DeltaSink(sink).app_versions(every), "dead": DeltaSink(dead_letter).app_versions(every)}
        # Offsets of an earlier topic of the name (deleted, created again) position nothing.
        current = of_current_topics(stored, ids, topic_ids, incarnations)
        sink_at: dict[TopicPartition, int | None] = {tp: current["sink"][ids[tp]] for tp in partitions}
        first = resolve_ranges(groups, group_id, partitions, settings, sink_at)
        ranges: Ranges = {}
        for tp in partitions:
            trailing, ahead = current["dead"][ids[tp]], sink_at[tp]
            begin = trailing if trailing is not None else ahead if ahead is not None else first[tp][0]
            ranges[tp] = (begin, max(begin, ahead if ahead is not None else begin))
        if all(current["dead"][ids[tp]] == end for tp, (_start, end) in ranges.items()):
            return 0
        ends = {tp: end for tp, (_start, end) in ranges.items()}
        transactions = {ids[tp]: end for tp, end in ends.items()}
        transactions.update(new_incarnations({dead_letter: stored["dead"]}, topic_ids, incarnations, ids, ends))
        letters = values.dead_letters(read_ranges_df(spark, groups, ranges, settings)).cache()
        try:
            count = letters.count()
            run_id = f"dead-letter-{group_id}-{uuid.uuid4().hex[:12]}"
            append_once(
                spark,
                letters,
                dead_letter,
                transactions,
                {app_id: stored["dead"][app_id] for app_id in ids.values()},
                {"sparklog.job": run_id, "sparklog.operation": "DEAD LETTER", "sparklog.group": group_id},
            )
        finally:
            letters.unpersist()
        return count


def _land_files(
    spark: SparkSession,
    group_id: str,
    topics: list[str],
    sink: str,
    sink_format: str,
    values: ValueFormat,
    dead_letter: str | None,
    options: Mapping[str, Any],
) -> LandResult:
    from sparklog.spark.group_batch import consume

    batch = consume(spark, group_id, topics, **options)
    if not batch.records:
        return LandResult(batch.ranges, 0)
    records = batch.df.cache()
    try:
        dead = 0
        if dead_letter is not None:
            letters = values.dead_letters(records)
            dead = _append(letters, dead_letter, "parquet")
            rows = values.landed(records)
        else:
            rows = values.fail_on_malformed(records)
        _append(rows, sink, sink_format)
        batch.commit()
    finally:
        records.unpersist()
    return LandResult(batch.ranges, dead)


def _append(df: DataFrame, path: str, fmt: str) -> int:
    cached = df.cache()
    try:
        count = cached.count()
        if count:
            cached.write.format(fmt).mode("append").save(path)
        return count
    finally:
        cached.unpersist()
