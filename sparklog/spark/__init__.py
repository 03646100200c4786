"""Spark surface of sparklog: the ``sparklog`` data source, the Spark producer, SQL helpers.

``produce(df, topic)`` is ``df.write.format("sparklog")`` with the session's
``spark.sparklog.*`` settings applied, returning where the job's records landed.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sparklog.spark.options import cluster_options_from_conf
from sparklog.spark.session import get_or_create_session

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["produce", "ProduceResult", "read", "register_topics", "get_or_create_session", "session_options"]


@dataclass(frozen=True)
class ProduceResult:
    """The offsets a Spark produce job committed: partition -> [start, end)."""

    topic: str
    ranges: dict[int, tuple[int, int]]

    @property
    def records(self) -> int:
        return sum(end - start for start, end in self.ranges.values())


def session_options(spark: "SparkSession", **options: Any) -> dict[str, str]:
    """``spark.sparklog.*`` session conf overlaid with explicit options (explicit wins)."""
    conf = {k: v for k, v in spark.conf.getAll.items()} if hasattr(spark.conf, "getAll") else {}
    merged = cluster_options_from_conf(conf)
    merged.update({k.replace("_", "."): str(v) for k, v in options.items() if v is not None})
    return merged


def produce(df: "DataFrame", topic: str, **options: Any) -> ProduceResult:
    """Write ``df`` (Kafka sink columns) to ``topic`` as one atomic produce; return its offsets."""
    from sparklog.cluster import connect
    from sparklog.spark.writer import JOB_ID_OPTION, job_ranges

    opts = session_options(df.sparkSession, **options)
    job_id = uuid.uuid4().hex
    df.write.format("sparklog").options(**opts).option("topic", topic).option(JOB_ID_OPTION, job_id).mode("append").save()
    with connect(opts) as cluster:
        # The commit ran in a Spark worker; its commitInfo records the job's ranges.
        ranges = job_ranges(cluster.table(topic).snapshot().history(50), f"spark-{job_id}")
    return ProduceResult(topic, ranges or {})


def read(spark: "SparkSession", topic: str, **options: Any) -> "DataFrame":
    """``spark.read.format("sparklog").option("subscribe", topic)`` with session settings."""
    return spark.read.format("sparklog").options(**session_options(spark, **options)).option("subscribe", topic).load()


def register_topics(spark: "SparkSession", **options: Any) -> list[str]:
    """Create a temporary view per topic (named after it); returns the view names."""
    from sparklog.cluster import connect

    opts = session_options(spark, **options)
    with connect(opts) as cluster:
        topics = cluster.list_topics(include_internal=False)
    option_sql = ", ".join(f"`{k}` '{v}'" for k, v in opts.items())
    for topic in topics:
        extra = f", {option_sql}" if option_sql else ""
        spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW `{topic}` USING sparklog OPTIONS (subscribe '{topic}'{extra})")
    return topics
