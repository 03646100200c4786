"""Topic tables through delta-spark: a read_committed view, and topics as catalog tables.

A plain Delta reader of a topic table (``spark.read.format("delta")``, a catalog table,
Trino, DuckDB) sees every row of the version it reads: transactions' control rows (markers,
``timestampType`` -1), aborted transactions' records, open transactions' records, records
above the high watermark that the in-sync replicas have not copied yet, and records below
an explicit log-start inside a file that straddles it (DESIGN §3, docs/transactions.md).
:func:`committed_view` reads the table with delta-spark and leaves out exactly those, so it
holds what a read_committed consumer reads, with ``format("sparklog")``'s columns.

Invariants of :func:`committed_view`:

* one Delta version per leader table: the bounds (log-start, last stable offset) and the
  aborted runs come from the app transactions of the snapshot sparklog resolves, and
  delta-spark reads that same version (``versionAsOf``), so rows and bounds agree whatever
  commits land meanwhile;
* the filter is Spark's: a join with a small per-partition bounds frame and an anti join
  with the aborted runs (both broadcast), no Python per row;
* nothing is written: sparklog's commit stays the only writer of topic tables.

:func:`create_catalog_tables` registers topics as catalog tables ``<database>.<name>``
(``CREATE TABLE IF NOT EXISTS ... USING delta LOCATION``: external tables over the leader's
replica, nothing committed to the topic's log, dropping them leaves the topic alone). Spark's
catalog takes letters, digits and ``_`` only and ignores case, so a topic's table name is
:func:`catalog_table_name`: lower case, ``.`` and ``-`` turned into ``_``; topics whose names
meet there are refused together. Tables on an object store are not offered: delta-spark
would need Hadoop's S3 connector on the JVM's classpath, which sparklog does not ship.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from sparklog.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from sparklog.log.table import TopicTable
    from sparklog.runtime.replica_manager import ReplicaManager

__all__ = ["catalog_table_name", "committed_view", "create_catalog_tables"]

_BOUNDS_DDL = "partition int, log_start bigint, stable_end bigint"
_ABORTED_DDL = "aborted_partition int, aborted_start bigint, aborted_end bigint"
_NOT_A_CATALOG_NAME = re.compile(r"[.-]")
_CATALOG_NAME = re.compile(r"[A-Za-z0-9_]+")


def catalog_table_name(topic: str) -> str:
    """The catalog table name of ``topic``: lower case, ``.`` and ``-`` as ``_`` (Spark's
    catalog refuses other characters and ignores case)."""
    return _NOT_A_CATALOG_NAME.sub("_", topic).lower()


def _delta_root(table: TopicTable, topic: str) -> str:
    """The table's root for delta-spark, which reads local paths only (see the module doc)."""
    if table.storage.is_object_store:
        raise ConfigError(
            f"Topic {topic}'s table is on an object store ({table.root}): delta-spark would need Hadoop's S3 "
            "connector, which sparklog does not ship; read it with sparklog.spark.read or format('sparklog')"
        )
    return table.root


def committed_view(
    spark: SparkSession, topic: str, view_name: str | None = None, include_headers: bool = False, **options: Any
) -> DataFrame:
    """``topic`` read with delta-spark, showing what a read_committed consumer reads: data
    records from log-start up to the last stable offset, no control rows, no aborted record;
    ``format("sparklog")``'s columns (``headers`` too with ``include_headers``). Registered as
    the temporary view ``view_name`` when given. ``options`` name the cluster (as for
    :func:`sparklog.spark.read`); the frame is pinned to the versions read now."""
    from functools import reduce

    from pyspark.sql.functions import broadcast

    from sparklog.log.txn_log import CONTROL_TIMESTAMP_TYPE, aborted_ranges
    from sparklog.model.schema import SPARK_READ_DDL, SPARK_READ_DDL_WITH_HEADERS
    from sparklog.spark.options import connect_replicas, session_options

    frames: list[DataFrame] = []
    with connect_replicas(session_options(spark, **options)) as replicas:
        positions = replicas.fetch_positions(topic, replicas.partitions_of(topic))
        # One snapshot per leader table (fetch_positions shares it between its partitions).
        by_snapshot: dict[int, list[int]] = {}
        for partition, at in positions.items():
            by_snapshot.setdefault(id(at.snapshot), []).append(partition)
        for partitions in by_snapshot.values():
            first = positions[partitions[0]]
            table, dt = first.table, first.snapshot
            starts = table.log_starts(dt)
            bounds = [(p, starts.get(p, positions[p].log_end), positions[p].last_stable_offset) for p in partitions]
            aborted = [(p, start, end) for p in partitions for start, end in aborted_ranges(dt, p)]
            rows = spark.read.format("delta").option("versionAsOf", dt.version()).load(_delta_root(table, topic))
            rows = rows.join(broadcast(spark.createDataFrame(bounds, _BOUNDS_DDL)), "partition").where(
                f"`offset` >= log_start AND `offset` < stable_end AND timestampType <> {CONTROL_TIMESTAMP_TYPE}"
            )
            if aborted:
                runs = broadcast(spark.createDataFrame(aborted, _ABORTED_DDL))
                inside = (
                    (rows["partition"] == runs["aborted_partition"])
                    & (rows["offset"] >= runs["aborted_start"])
                    & (rows["offset"] < runs["aborted_end"])
                )
                rows = rows.join(runs, inside, "left_anti")
            # Topic names are validated ([a-zA-Z0-9._-]), so they are safe in a SQL literal.
            selected = ["key", "value", f"'{topic}' AS topic", "partition", "offset", "timestamp", "timestampType"]
            frames.append(rows.selectExpr(*selected, *(["headers"] if include_headers else [])))
    result = (
        reduce(lambda a, b: a.unionByName(b), frames)
        if frames
        else spark.createDataFrame([], SPARK_READ_DDL_WITH_HEADERS if include_headers else SPARK_READ_DDL)
    )
    if view_name is not None:
        result.createOrReplaceTempView(f"`{view_name}`")
    return result


def create_catalog_tables(
    spark: SparkSession, database: str, topics: Iterable[str], replicas: ReplicaManager
) -> dict[str, str]:
    """Make each of ``topics`` the catalog table ``<database>.<catalog_table_name(topic)>``
    over its leader's table (created with the database when missing; an existing table of
    that name is kept); returns topic -> qualified table name. Refuses, before creating
    anything, topics whose table names meet, and a database name Spark's catalog would."""
    if not _CATALOG_NAME.fullmatch(database):
        raise ConfigError(f"Database name {database!r} is not a Spark catalog name: use letters, digits and _")
    topics = list(topics)
    names: dict[str, list[str]] = {}
    for topic in topics:
        names.setdefault(catalog_table_name(topic), []).append(topic)
    clashes = sorted(", ".join(sorted(group)) for group in names.values() if len(group) > 1)
    if clashes:
        raise ConfigError(
            f"Topics {'; '.join(clashes)} would share a catalog table name in database {database} (Spark's catalog "
            "takes letters, digits and _ only, and ignores case); register without a database and read those "
            "topics as delta.`<path>` (Cluster.topic_location) instead"
        )
    roots = {topic: _delta_root(replicas.leader_table(topic), topic) for topic in topics}
    spark.sql(f"CREATE DATABASE IF NOT EXISTS `{database}`")
    created = {}
    for topic, root in roots.items():
        name = catalog_table_name(topic)
        location = root.replace("\\", "\\\\").replace("'", "\\'")  # a log dir path may hold either
        spark.sql(f"CREATE TABLE IF NOT EXISTS `{database}`.`{name}` USING delta LOCATION '{location}'")
        created[topic] = f"{database}.{name}"
    return created
