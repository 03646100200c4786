"""sparklog: a Kafka-style distributed commit log whose storage is the lakehouse.

The public API is small: :func:`connect` returns a :class:`Cluster` (topic admin, offsets,
reads, the light producer); :mod:`sparklog.spark` has the Spark producer and helpers;
every error is a :class:`~sparklog.errors.SparklogError`.
"""

from sparklog.cluster import Cluster, PartitionOffsets, connect
from sparklog.errors import SparklogError
from sparklog.records import RecordMetadata
from sparklog.topic import PartitionDescription, TopicDescription

__all__ = [
    "connect",
    "Cluster",
    "PartitionOffsets",
    "RecordMetadata",
    "TopicDescription",
    "PartitionDescription",
    "SparklogError",
]

__version__ = "0.1.0"
