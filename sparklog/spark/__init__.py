"""Spark surface of sparklog: the ``sparklog`` data source, the Spark producer, SQL helpers.

``produce(df, topic)`` is ``df.write.format("sparklog")`` with the session's
``spark.sparklog.*`` settings applied, returning where the job's records landed.
``consumer_lag(spark)`` is every consumer group's lag as a DataFrame (DESIGN §8: lag as a
table); ``register_topics`` also registers it as the ``consumer_lag`` view.
``consume``/``consume_into`` read by consumer group, the latter exactly-once into a topic or
a Delta table (:mod:`sparklog.spark.group_batch`, :mod:`sparklog.spark.exactly_once`).
``committed_view`` reads a topic table with delta-spark as a read_committed consumer sees it,
and ``register_topics(database=...)`` makes topics catalog tables
(:mod:`sparklog.spark.delta_tables`).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sparklog.spark.delta_tables import catalog_table_name, committed_view
from sparklog.spark.format_hooks import install as _install_format_hooks
from sparklog.spark.options import cluster_config_from_options, connect_replicas, session_options
from sparklog.spark.session import get_or_create_session

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from sparklog.spark.exactly_once import ConsumeIntoResult
    from sparklog.spark.group_batch import GroupBatch

# format("sparklog") gets the session's settings, the embedded ZooKeeper started in the driver,
# and `df.write.format("sparklog").save()` with no mode appends, as Kafka's sink does.
_install_format_hooks()

__all__ = [
    "ConsumeIntoResult",
    "GroupBatch",
    "ProduceResult",
    "catalog_table_name",
    "committed_view",
    "consume",
    "consume_into",
    "consumer_lag",
    "get_or_create_session",
    "produce",
    "read",
    "register_topics",
    "session_options",
]


@dataclass(frozen=True)
class ProduceResult:
    """The offsets a Spark produce job committed: partition -> [start, end)."""

    topic: str
    ranges: dict[int, tuple[int, int]]

    @property
    def records(self) -> int:
        return sum(end - start for start, end in self.ranges.values())


def produce(df: DataFrame, topic: str, **options: Any) -> ProduceResult:
    """Write ``df`` (Kafka sink columns) to ``topic`` as one produce, atomic per leader table
    (whole-job atomic when one broker leads every partition); return its offsets."""
    from sparklog.spark.writer import JOB_ID_OPTION, committed_ranges

    opts = session_options(df.sparkSession, **options)
    job_id = uuid.uuid4().hex
    df.write.format("sparklog").options(**opts).option("topic", topic).option(JOB_ID_OPTION, job_id).mode(
        "append"
    ).save()
    # Only the cluster settings among the options say where the cluster is (the rest, e.g.
    # kafka.compression.type, were for the job).
    with connect_replicas(cluster_config_from_options(opts).to_options()) as replicas:
        # The commits ran in a Spark worker, one per leader table; their commitInfo records
        # the job's ranges. Every replica table is looked at: leadership may have moved since.
        tables = [table for table, _partitions in replicas.replica_tables(topic)]
        ranges = committed_ranges(tables, f"spark-{job_id}")
    return ProduceResult(topic, ranges)


def read(spark: SparkSession, topic: str | None = None, **options: Any) -> DataFrame:
    """Read topics with Spark's native Parquet reader (the data source's options and schema).

    ``read(spark, "clicks", startingOffsets=...)`` equals
    ``spark.read.format("sparklog").option("subscribe", "clicks")...load()`` but keeps
    Python off the data path, so scans run at Parquet speed.
    """
    from sparklog.spark.native import read_topics
    from sparklog.spark.option_names import warn_ignored

    opts = session_options(spark, **options)
    if topic is not None:
        opts["subscribe"] = topic
    warn_ignored(opts, "batch read", opts, stacklevel=2)
    return read_topics(spark, opts)


def consumer_lag(spark: SparkSession, **options: Any) -> DataFrame:
    """Every consumer group's lag per partition, as of this call: columns ``group, topic,
    partition, current_offset, log_end_offset, lag, consumer_id, host, client_id, state``
    (``kafka-consumer-groups --describe --all-groups`` as a table; nulls where Kafka shows -)."""
    from sparklog.group.coordinator import GroupCoordinator
    from sparklog.spark.native import lag_frame

    with connect_replicas(session_options(spark, **options)) as replicas:
        return lag_frame(spark, GroupCoordinator(replicas))


def register_topics(
    spark: SparkSession, native: bool = True, *, database: str | None = None, **options: Any
) -> list[str]:
    """Create a temporary view per topic, named after it, plus ``consumer_lag`` (see
    :func:`consumer_lag`; a topic of that name keeps the name); returns the topics' view names.

    Views are planned when registered: their offsets stay fixed (repeatable queries), and
    ``consumer_lag`` is a snapshot of the lag when registered; register again to see newer
    records and lag. ``native=True`` (default) reads with Spark's Parquet reader (Parquet
    speed); ``native=False`` makes ``CREATE TEMPORARY VIEW ... USING sparklog`` views, which
    move rows through the Python data source.

    ``database``: also make each topic the catalog table ``<database>.<catalog_table_name(topic)>``
    (``CREATE TABLE IF NOT EXISTS ... USING delta LOCATION`` over its leader's table, the
    database created when missing): delta-spark's SQL (``DESCRIBE HISTORY``, time travel)
    by name, and every row of the table, control rows and aborted records included
    (:func:`committed_view` hides them). Nothing is written to the topics' logs.
    """
    from sparklog.group.coordinator import GroupCoordinator
    from sparklog.model.topic import is_internal
    from sparklog.spark.delta_tables import create_catalog_tables
    from sparklog.spark.native import LAG_VIEW, lag_frame, read_topics

    opts = session_options(spark, **options)
    with connect_replicas(opts) as replicas:
        topics = [t for t in replicas.list_topics() if not is_internal(t)]
        if database is not None:
            create_catalog_tables(spark, database, topics, replicas)
        if LAG_VIEW not in topics:
            lag_frame(spark, GroupCoordinator(replicas)).createOrReplaceTempView(LAG_VIEW)
        for topic in topics:
            if native:
                read_topics(spark, {**opts, "subscribe": topic}, replicas).createOrReplaceTempView(f"`{topic}`")
            else:
                option_sql = "".join(f", `{k}` '{v}'" for k, v in opts.items())
                spark.sql(
                    f"CREATE OR REPLACE TEMPORARY VIEW `{topic}` USING sparklog OPTIONS (subscribe '{topic}'{option_sql})"
                )
    return topics


def consume(spark: SparkSession, group_id: str, topics: Any, **options: Any) -> GroupBatch:
    """The group's next records as a DataFrame plus a commit handle (see :mod:`sparklog.spark.group_batch`)."""
    from sparklog.spark.group_batch import consume as run

    return run(spark, group_id, topics, **options)


def consume_into(
    spark: SparkSession, group_id: str, topics: Any, transform: Any = None, **options: Any
) -> ConsumeIntoResult:
    """Exactly-once: output and input offsets in one Delta commit (see :mod:`sparklog.spark.exactly_once`)."""
    from sparklog.spark.exactly_once import consume_into as run

    return run(spark, group_id, topics, transform, **options)


def __getattr__(name: str) -> Any:
    # The result types load with their modules (pyspark data source, deltalake) only when used.
    if name == "GroupBatch":
        from sparklog.spark.group_batch import GroupBatch

        return GroupBatch
    if name == "ConsumeIntoResult":
        from sparklog.spark.exactly_once import ConsumeIntoResult

        return ConsumeIntoResult
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
