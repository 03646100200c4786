"""Topic reads through Spark's native Parquet reader (no Python on the data path).

The offsets are resolved exactly as the ``sparklog`` data source does (same options, same
clamping, one committed snapshot per topic); then the chosen segment files are handed to
``spark.read.parquet`` with the table root as ``basePath`` (so ``partition`` comes from the
``partition=N`` directories) and filtered to the offset ranges, which Parquet row-group
stats prune. The result has the Kafka source's columns. Runs where the SparkSession is.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import reduce
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from sparklog.cluster import Cluster

__all__ = ["read_topics"]

_FILE_DDL = (
    "offset bigint, timestamp timestamp, timestampType int, key binary, value binary, "
    "headers array<struct<key: string, value: binary>>, partition int"
)


def read_topics(spark: "SparkSession", options: Mapping[str, str], cluster: "Cluster | None" = None) -> "DataFrame":
    """Like ``spark.read.format("sparklog").options(**options).load()``, natively.

    ``cluster`` lets a caller that reads many topics share one ZooKeeper session.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.datasource import CaseInsensitiveDict

    from sparklog.cluster import Cluster as ClusterClient
    from sparklog.log.reader import files_for_ranges
    from sparklog.schema import SPARK_READ_DDL, SPARK_READ_DDL_WITH_HEADERS
    from sparklog.spark.options import cluster_config_from_options, option_flag
    from sparklog.spark.reader import resolve_read_ranges

    opts = CaseInsensitiveDict(dict(options))
    include_headers = option_flag(opts, "includeHeaders", False)
    output_ddl = SPARK_READ_DDL_WITH_HEADERS if include_headers else SPARK_READ_DDL
    frames: list[DataFrame] = []
    own = cluster is None
    if cluster is None:
        cluster = ClusterClient(cluster_config_from_options(opts))
    try:
        for topic, ranges in resolve_read_ranges(cluster, opts).items():
            table = cluster.table(topic)
            files = files_for_ranges(table, table.snapshot(), ranges)
            if not files:
                continue
            wanted: list[Column] = [
                (F.col("partition") == p) & (F.col("offset") >= start) & (F.col("offset") < end)
                for p, (start, end) in sorted(ranges.items())
                if end > start
            ]
            df = (
                spark.read.schema(_FILE_DDL)
                .option("basePath", table.root)
                .parquet(*[table.full_path(f.path) for f in files])
                .where(reduce(lambda a, b: a | b, wanted))
            )
            selected = [
                "key", "value", F.lit(topic).alias("topic"), "partition", "offset", "timestamp", "timestampType",
            ] + (["headers"] if include_headers else [])
            frames.append(df.select(*selected))
    finally:
        if own:
            cluster.close()
    if not frames:
        return spark.createDataFrame([], output_ddl)
    return reduce(lambda a, b: a.unionByName(b), frames)
