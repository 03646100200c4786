"""What deleting a topic removes from every consumer group (DESIGN §8), as Kafka's group
coordinator does when topics are deleted (tombstones for the deleted partitions' offsets):

* every group's committed offsets of the topic, in the leader table of every
  ``__consumer_offsets`` partition, with the deletion marker that refuses any later commit
  still naming the deleted topic (:func:`~sparklog.log.group_offsets.delete_topic_offsets`);
* the topic's entries in transactions' pending offsets (TxnOffsetCommit), which would be
  applied when their transaction commits.

Brokers hold no other copy: a coordinator's offsets in memory
(:class:`~sparklog.log.offsets_partition.OffsetsPartitionLog`) are reloaded as soon as a
commit it did not make lands, the deletion's included, and a light consumer or Spark job
reads committed offsets from the tables when it starts a partition.

:func:`sparklog.runtime.topics.delete_topic` calls it after the topic's znodes are gone (no
commit can look the topic up any more) and before its tables are deleted: a deletion cut short
leaves a table behind, and the next creation of the name, finding it, runs this again.
"""

from __future__ import annotations

from sparklog.log.group_offsets import delete_topic_offsets
from sparklog.metadata.transactions import TransactionStore
from sparklog.model.topic import OFFSETS_TOPIC
from sparklog.runtime.replica_manager import ReplicaManager

__all__ = ["remove_topic_offsets"]


def remove_topic_offsets(replicas: ReplicaManager, topic: str, incarnation: int) -> list[tuple[str, int]]:
    """Remove every group's offsets of ``topic``, whose incarnations up to ``incarnation`` are
    deleted; returns the (group, partition) offsets tombstoned."""
    if OFFSETS_TOPIC not in replicas.list_topics():
        # No offsets table, no offsets. A commit creating the table now looks the topic up
        # after the table exists (GroupCoordinator), so after the topic's znodes went away.
        return []
    removed: list[tuple[str, int]] = []
    for table, partitions in replicas.leader_tables(OFFSETS_TOPIC):
        table.await_created()
        removed += delete_topic_offsets(table, partitions, topic, incarnation)
    TransactionStore(replicas.zk).drop_topic_pending_offsets(topic)
    return sorted(removed)
