"""Topic reads through Spark's native Parquet reader (no Python on the data path).

The offsets are resolved exactly as the ``sparklog`` data source does (same options, same
clamping, one committed snapshot per topic); then the chosen segment files are handed to
``spark.read.parquet`` with the table root as ``basePath`` (so ``partition`` comes from the
``partition=N`` directories) and filtered to the offset ranges, which Parquet row-group
stats prune. The result has the Kafka source's columns. Runs where the SparkSession is.
As the data source: transactions' control rows are filtered out (``timestampType`` -1), and
read_committed (the default; ``kafka.isolation.level``/``isolation.level``) ends at the last
stable offset and filters the aborted runs out (docs/transactions.md).

A topic on an object store is read through the ``sparklog`` data source instead, with the
ranges resolved here: Spark's Parquet reader would need Hadoop's S3 connector on the JVM's
classpath, which sparklog does not ship; the data source reads through sparklog's storage.
So ``read``, ``register_topics`` and ``consume_into`` work on every store, at the data
source's speed there.

:func:`lag_frame` is the ``consumer_lag`` view's DataFrame: the Arrow table of
:func:`sparklog.admin.groups.consumer_lag` handed to ``createDataFrame``, i.e. a snapshot of
every group's lag taken when it is built (register the view again for a fresh one).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import reduce
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from sparklog.group.coordinator import GroupCoordinator
    from sparklog.log.table import FileEntry
    from sparklog.runtime.replica_manager import ReplicaManager

__all__ = ["LAG_VIEW", "lag_frame", "read_topics"]

LAG_VIEW = "consumer_lag"

_FILE_DDL = (
    "offset bigint, timestamp timestamp, timestampType int, key binary, value binary, "
    "headers array<struct<key: string, value: binary>>, partition int"
)


def _range_predicate(ranges: Mapping[int, tuple[int, int]], files: list[FileEntry]) -> str | None:
    """SQL filter keeping ``[start, end)`` per partition; None when every file lies inside."""
    partial = {
        f.partition for f in files if f.base_offset < ranges[f.partition][0] or f.last_offset >= ranges[f.partition][1]
    }
    if not partial:
        return None
    whole = sorted({f.partition for f in files} - partial)
    terms = [
        f"(`partition` = {p} AND `offset` >= {ranges[p][0]} AND `offset` < {ranges[p][1]})" for p in sorted(partial)
    ]
    if whole:
        terms.append(f"`partition` IN ({', '.join(str(p) for p in whole)})")
    return " OR ".join(terms)


def _transaction_predicate(aborted: Mapping[int, list[tuple[int, int]]]) -> str:
    """SQL filter leaving out control rows and the aborted runs (partition -> runs)."""
    from sparklog.log.txn_log import CONTROL_TIMESTAMP_TYPE

    terms = [f"`timestampType` <> {CONTROL_TIMESTAMP_TYPE}"]
    for partition, runs in sorted(aborted.items()):
        terms += [
            f"NOT (`partition` = {partition} AND `offset` >= {start} AND `offset` < {end})" for start, end in runs
        ]
    return " AND ".join(terms)


def read_topics(spark: SparkSession, options: Mapping[str, str], replicas: ReplicaManager | None = None) -> DataFrame:
    """Like ``spark.read.format("sparklog").options(**options).load()``, natively.

    ``replicas`` lets a caller that reads many topics share one ZooKeeper session.
    """
    from pyspark.sql.datasource import CaseInsensitiveDict

    from sparklog.log.reader import files_for_ranges
    from sparklog.log.txn_log import aborted_ranges
    from sparklog.model.schema import SPARK_READ_DDL, SPARK_READ_DDL_WITH_HEADERS
    from sparklog.spark.options import connect_replicas, option_flag, option_read_committed
    from sparklog.spark.reader import resolve_read_ranges

    opts = CaseInsensitiveDict(dict(options))
    include_headers = option_flag(opts, "includeHeaders", False)
    committed = option_read_committed(opts)
    output_ddl = SPARK_READ_DDL_WITH_HEADERS if include_headers else SPARK_READ_DDL
    frames: list[DataFrame] = []
    own = replicas is None
    if replicas is None:
        replicas = connect_replicas(opts)
    try:
        for topic, all_ranges in resolve_read_ranges(replicas, opts).items():
            for table, parts in replicas.leader_tables(topic, all_ranges):
                ranges = {p: all_ranges[p] for p in parts}
                if table.storage.is_object_store:
                    frames.append(_read_through_the_source(spark, topic, ranges, opts, replicas))
                    continue
                dt = table.snapshot()
                files = files_for_ranges(table, dt, ranges)
                if not files:
                    continue
                df = (
                    spark.read.schema(_FILE_DDL)
                    .option("basePath", table.root)
                    .parquet(*[table.full_path(f.path) for f in files])
                )
                predicate = _range_predicate(ranges, files)
                if predicate is not None:
                    df = df.where(predicate)  # one SQL string: a py4j call per Column op adds up
                df = df.where(_transaction_predicate({p: aborted_ranges(dt, p) for p in ranges} if committed else {}))
                # Topic names are validated ([a-zA-Z0-9._-]), so they are safe in a SQL literal.
                selected = ["key", "value", f"'{topic}' AS topic", "partition", "offset", "timestamp", "timestampType"]
                frames.append(df.selectExpr(*selected, *(["headers"] if include_headers else [])))
    finally:
        if own:
            replicas.close()
    if not frames:
        return spark.createDataFrame([], output_ddl)
    return reduce(lambda a, b: a.unionByName(b), frames)


# What a read through the data source keeps of the caller's options (the topics and offsets
# are the ranges already resolved).
_CARRIED_OPTIONS = ("includeHeaders", "kafka.isolation.level", "isolation.level")


def _read_through_the_source(
    spark: SparkSession,
    topic: str,
    ranges: Mapping[int, tuple[int, int]],
    options: Mapping[str, str],
    replicas: ReplicaManager,
) -> DataFrame:
    """``ranges`` of a topic on an object store, read by the ``sparklog`` data source: Spark's
    Parquet reader would need Hadoop's S3 connector on the JVM's classpath, the data source
    reads through sparklog's storage (the store settings travel with its read slices)."""
    import json

    carried = {key: options[key] for key in _CARRIED_OPTIONS if key in options}
    reader = spark.read.format("sparklog").options(**replicas.config.to_options(), **carried)
    return (
        reader.option("assign", json.dumps({topic: sorted(ranges)}))
        .option("startingOffsets", json.dumps({topic: {str(p): start for p, (start, _) in ranges.items()}}))
        .option("endingOffsets", json.dumps({topic: {str(p): end for p, (_, end) in ranges.items()}}))
        .load()
    )


def lag_frame(spark: SparkSession, groups: GroupCoordinator) -> DataFrame:
    """Every group's per-partition lag now (group, topic, partition, current_offset,
    log_end_offset, lag, consumer_id, host, client_id, state) as a small local DataFrame."""
    from sparklog.admin.groups import consumer_lag

    return spark.createDataFrame(consumer_lag(groups))
