"""sparklog: a Kafka-style distributed commit log whose storage is the lakehouse.

The public API is small: :func:`connect` returns a :class:`Cluster` (topic admin, offsets,
reads, the light producer); :mod:`sparklog.spark` has the Spark producer and helpers;
every error is a :class:`~sparklog.errors.SparklogError`.
"""

from typing import TYPE_CHECKING, Any

from sparklog.errors import SparklogError

if TYPE_CHECKING:
    from sparklog.cluster import Cluster, PartitionOffsets, connect
    from sparklog.model.records import RecordMetadata
    from sparklog.model.topic import PartitionDescription, TopicDescription

_LAZY = {
    "connect": "sparklog.cluster",
    "Cluster": "sparklog.cluster",
    "PartitionOffsets": "sparklog.cluster",
    "RecordMetadata": "sparklog.model.records",
    "TopicDescription": "sparklog.model.topic",
    "PartitionDescription": "sparklog.model.topic",
}


def __getattr__(name: str) -> Any:
    # Keep `import sparklog` (and so every CLI call) free of kazoo/deltalake/pyarrow imports.
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'sparklog' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


__all__ = [
    "Cluster",
    "PartitionDescription",
    "PartitionOffsets",
    "RecordMetadata",
    "SparklogError",
    "TopicDescription",
    "connect",
]

__version__ = "0.1.0"
