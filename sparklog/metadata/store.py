"""Cluster metadata in ZooKeeper: brokers, topics, partition states, topic configs.

Only the admin layer (:mod:`sparklog.admin`) and metadata readers call this. Invariants:
a topic's znodes are created in one ZooKeeper multi-op (all or nothing); configs are
updated by compare-and-set so two concurrent alters never lose one another; nothing here
touches storage (the caller orders ZooKeeper and Delta steps).
"""

from __future__ import annotations

import base64
import socket
import uuid
from collections.abc import Callable

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError

from sparklog.errors import ConfigError, CoordinationError, TopicExistsError, TopicNotFoundError
from sparklog.metadata import zkdata
from sparklog.metadata.session import ZkSession, zk_errors
from sparklog.metadata.zkdata import (
    BrokerRecord,
    ClusterIdRecord,
    ElectionRequestRecord,
    PartitionState,
    ReassignmentRecord,
    TopicAssignment,
    TopicConfigRecord,
    encode,
)

__all__ = ["MetadataStore"]


class MetadataStore:
    def __init__(self, zk: ZkSession) -> None:
        self.zk = zk
        self._cluster_id: str | None = None

    def cluster_id(self) -> str:
        """The cluster's id (``/cluster/id``), created on first use as Kafka does; it never
        changes, so it is read once per store."""
        if self._cluster_id is None:
            client = self.zk.client
            candidate = ClusterIdRecord(id=base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("="))
            with zk_errors("reading or creating the cluster id"):
                try:
                    client.create(zkdata.CLUSTER_ID, encode(candidate), makepath=True)
                except NodeExistsError:
                    pass
                data, _ = client.get(zkdata.CLUSTER_ID)
            self._cluster_id = ClusterIdRecord.decode(data, zkdata.CLUSTER_ID).id
        return self._cluster_id

    # -- brokers -------------------------------------------------------------------------
    def register_broker(self, broker_id: int, log_dir: str, rack: str | None) -> None:
        """Record broker ``broker_id``'s storage root, or check it matches the one recorded."""
        path = zkdata.broker_registry_path(broker_id)
        record = BrokerRecord(log_dir=log_dir, rack=rack, host=socket.gethostname())
        client = self.zk.client
        with zk_errors(f"registering broker {broker_id}"):
            try:
                client.create(path, encode(record), makepath=True)
                return
            except NodeExistsError:
                data, _ = client.get(path)
        existing = BrokerRecord.decode(data, path)
        if existing.log_dir != log_dir:
            raise ConfigError(
                f"Broker {broker_id} is registered with log.dirs={existing.log_dir} in ZooKeeper "
                f"{self.zk.connect_string}, but this client has log.dirs={log_dir}: use the same "
                "log.dirs, another broker.id, or another zookeeper.connect chroot"
            )

    def brokers(self) -> dict[int, BrokerRecord]:
        client = self.zk.client
        with zk_errors("listing brokers"):
            ids = client.get_children(zkdata.BROKER_REGISTRY) if client.exists(zkdata.BROKER_REGISTRY) else []
            result = {}
            for child in ids:
                path = f"{zkdata.BROKER_REGISTRY}/{child}"
                data, _ = client.get(path)
                result[int(child)] = BrokerRecord.decode(data, path)
        return dict(sorted(result.items()))

    # -- topics --------------------------------------------------------------------------
    def create_topic(
        self, topic: str, topic_id: str, assignment: dict[int, list[int]], configs: dict[str, str]
    ) -> None:
        """Create every znode of a new topic in one multi-op."""
        client = self.zk.client
        with zk_errors(f"creating topic {topic}"):
            client.ensure_path(zkdata.TOPICS)
            client.ensure_path(zkdata.CONFIG_TOPICS)
            txn = client.transaction()
            txn.create(zkdata.topic_config_path(topic), encode(TopicConfigRecord(config=configs)))
            txn.create(
                zkdata.topic_path(topic),
                encode(TopicAssignment(topic_id=topic_id, partitions={str(p): r for p, r in assignment.items()})),
            )
            txn.create(zkdata.partitions_path(topic), b"")
            for partition, replicas in sorted(assignment.items()):
                self._add_partition_ops(txn, topic, partition, replicas)
            results = txn.commit()
        for result in results:
            if isinstance(result, NodeExistsError):
                raise TopicExistsError(f"Topic '{topic}' already exists.")
            if isinstance(result, Exception) and not _is_rollback(result):
                raise CoordinationError(f"Creating topic {topic} in ZooKeeper failed: {result!r}")

    @staticmethod
    def _add_partition_ops(txn: object, topic: str, partition: int, replicas: list[int]) -> None:
        state = PartitionState(leader=replicas[0], leader_epoch=0, isr=list(replicas))
        txn.create(zkdata.partition_path(topic, partition), b"")  # type: ignore[attr-defined]
        txn.create(zkdata.partition_state_path(topic, partition), encode(state))  # type: ignore[attr-defined]

    def list_topics(self) -> list[str]:
        client = self.zk.client
        with zk_errors("listing topics"):
            if not client.exists(zkdata.TOPICS):
                return []
            return sorted(client.get_children(zkdata.TOPICS))

    def topic_exists(self, topic: str) -> bool:
        with zk_errors(f"checking topic {topic}"):
            return self.zk.client.exists(zkdata.topic_path(topic)) is not None

    def assignment(self, topic: str) -> tuple[TopicAssignment, int]:
        """The topic's replica assignment and its znode version (for compare-and-set)."""
        path = zkdata.topic_path(topic)
        with zk_errors(f"reading topic {topic}"):
            try:
                data, stat = self.zk.client.get(path)
            except NoNodeError:
                raise TopicNotFoundError(
                    f"Topic '{topic}' does not exist (ZooKeeper {self.zk.connect_string}); "
                    "create it with `sparklog topics create --topic {topic}`".replace("{topic}", topic)
                ) from None
        return TopicAssignment.decode(data, path), stat.version

    def topic_incarnation(self, topic: str) -> int:
        """The zxid that created the topic's znode: it tells a topic from an earlier topic of
        the same name (a re-created topic's is always higher, ZooKeeper's zxids only grow)."""
        with zk_errors(f"reading topic {topic}"):
            stat = self.zk.client.exists(zkdata.topic_path(topic))
        if stat is None:
            raise TopicNotFoundError(f"Topic '{topic}' does not exist (ZooKeeper {self.zk.connect_string})")
        return int(stat.czxid)

    def partition_states(self, topic: str, partitions: list[int]) -> dict[int, PartitionState]:
        client = self.zk.client
        result = {}
        with zk_errors(f"reading partition states of {topic}"):
            for partition in partitions:
                path = zkdata.partition_state_path(topic, partition)
                try:
                    data, _ = client.get(path)
                except NoNodeError:
                    raise TopicNotFoundError(f"Topic '{topic}' partition {partition} has no state znode") from None
                result[partition] = PartitionState.decode(data, path)
        return result

    def partition_state(self, topic: str, partition: int) -> tuple[PartitionState, int]:
        """The state of one partition and its znode version (for compare-and-set)."""
        path = zkdata.partition_state_path(topic, partition)
        with zk_errors(f"reading the state of {topic}-{partition}"):
            try:
                data, stat = self.zk.client.get(path)
            except NoNodeError:
                raise TopicNotFoundError(f"Topic '{topic}' partition {partition} has no state znode") from None
        return PartitionState.decode(data, path), stat.version

    def set_partition_state(
        self,
        topic: str,
        partition: int,
        state: PartitionState,
        expected_version: int,
        controller_epoch_version: int | None = None,
    ) -> bool:
        """Compare-and-set a partition's state; with ``controller_epoch_version``, only while
        ``/controller_epoch`` still has that version (a deposed controller writes nothing).
        False when either changed meanwhile."""
        path = zkdata.partition_state_path(topic, partition)
        client = self.zk.client
        with zk_errors(f"updating the state of {topic}-{partition}"):
            txn = client.transaction()
            if controller_epoch_version is not None:
                txn.check(zkdata.CONTROLLER_EPOCH, controller_epoch_version)
            txn.set_data(path, encode(state), version=expected_version)
            results = txn.commit()
        if any(isinstance(r, (BadVersionError, NoNodeError)) for r in results):
            return False
        errors = [r for r in results if isinstance(r, Exception) and not _is_rollback(r)]
        if errors:
            raise CoordinationError(f"Updating the state of {topic}-{partition} failed: {errors[0]!r}")
        return True

    def set_assignment(self, topic: str, assignment: TopicAssignment, expected_version: int) -> bool:
        """Compare-and-set a topic's replica assignment (reassignment); False if it changed."""
        with zk_errors(f"updating the assignment of {topic}"):
            try:
                self.zk.client.set(zkdata.topic_path(topic), encode(assignment), version=expected_version)
            except BadVersionError:
                return False
            except NoNodeError:
                raise TopicNotFoundError(f"Topic '{topic}' does not exist") from None
        return True

    # -- admin requests (executed by the controller) -------------------------------------
    def create_admin_request(self, path: str, record: object, what: str) -> None:
        with zk_errors(f"requesting {what}"):
            try:
                self.zk.client.create(path, encode(record), makepath=True)
            except NodeExistsError:
                raise CoordinationError(
                    f"A {what} is already in progress ({path} exists); wait for the controller to finish it"
                ) from None

    def preferred_election_request(self) -> ElectionRequestRecord | None:
        data = self._get_or_none(zkdata.ADMIN_PREFERRED_ELECTION)
        return None if data is None else ElectionRequestRecord.decode(data, zkdata.ADMIN_PREFERRED_ELECTION)

    def delete_preferred_election_request(self) -> None:
        self._delete_if_exists(zkdata.ADMIN_PREFERRED_ELECTION)

    def reassignment_request(self) -> dict[str, list[int]] | None:
        record = self.reassignment_record()
        return None if record is None else record.partitions

    def reassignment_record(self) -> ReassignmentRecord | None:
        data = self._get_or_none(zkdata.ADMIN_REASSIGN)
        return None if data is None else ReassignmentRecord.decode(data, zkdata.ADMIN_REASSIGN)

    def update_reassignment_request(
        self, change: Callable[[ReassignmentRecord | None], ReassignmentRecord]
    ) -> ReassignmentRecord:
        """Compare-and-set ``change(current request)`` (None: there is none), creating the
        request or deleting it when no partition is left: the controller removing finished
        partitions and admin clients adding or cancelling others never lose each other's."""
        path = zkdata.ADMIN_REASSIGN
        while True:
            with zk_errors("updating the reassignment request"):
                try:
                    data, stat = self.zk.client.get(path)
                    current: ReassignmentRecord | None = ReassignmentRecord.decode(data, path)
                    version: int | None = stat.version
                except NoNodeError:
                    current, version = None, None
                new = change(current)
                try:
                    if not new.partitions:
                        if version is not None:
                            self.zk.client.delete(path, version=version)
                    elif version is None:
                        self.zk.client.create(path, encode(new), makepath=True)
                    else:
                        self.zk.client.set(path, encode(new), version=version)
                    return new
                except (BadVersionError, NodeExistsError, NoNodeError):
                    continue  # changed under us: apply the change to what is there now

    def _get_or_none(self, path: str) -> bytes | None:
        with zk_errors(f"reading {path}"):
            try:
                data, _ = self.zk.client.get(path)
            except NoNodeError:
                return None
        return data

    def _delete_if_exists(self, path: str) -> None:
        with zk_errors(f"deleting {path}"):
            try:
                self.zk.client.delete(path)
            except NoNodeError:
                pass

    def topic_config(self, topic: str) -> tuple[dict[str, str], int]:
        path = zkdata.topic_config_path(topic)
        with zk_errors(f"reading config of {topic}"):
            try:
                data, stat = self.zk.client.get(path)
            except NoNodeError:
                raise TopicNotFoundError(f"Topic '{topic}' does not exist") from None
        return TopicConfigRecord.decode(data, path).config, stat.version

    def set_topic_config(self, topic: str, configs: dict[str, str], expected_version: int) -> bool:
        """Compare-and-set the overrides; False if someone else changed them first."""
        path = zkdata.topic_config_path(topic)
        with zk_errors(f"updating config of {topic}"):
            try:
                self.zk.client.set(path, encode(TopicConfigRecord(config=configs)), version=expected_version)
            except BadVersionError:
                return False
            except NoNodeError:
                raise TopicNotFoundError(f"Topic '{topic}' does not exist") from None
        return True

    def add_partitions(
        self, topic: str, current: TopicAssignment, expected_version: int, new: dict[int, list[int]]
    ) -> bool:
        """Append partitions in one multi-op; False if the assignment changed meanwhile."""
        merged = dict(current.partitions)
        merged.update({str(p): r for p, r in new.items()})
        client = self.zk.client
        with zk_errors(f"adding partitions to {topic}"):
            txn = client.transaction()
            txn.set_data(
                zkdata.topic_path(topic),
                encode(TopicAssignment(topic_id=current.topic_id, partitions=merged)),
                version=expected_version,
            )
            for partition, replicas in sorted(new.items()):
                self._add_partition_ops(txn, topic, partition, replicas)
            results = txn.commit()
        if any(isinstance(r, BadVersionError) for r in results):
            return False
        errors = [r for r in results if isinstance(r, Exception) and not _is_rollback(r)]
        if errors:
            raise CoordinationError(f"Adding partitions to {topic} failed: {errors[0]!r}")
        return True

    def delete_topic(self, topic: str) -> None:
        client = self.zk.client
        with zk_errors(f"deleting topic {topic}"):
            if not client.exists(zkdata.topic_path(topic)):
                raise TopicNotFoundError(f"Topic '{topic}' does not exist")
            for attempt in range(20):
                try:
                    client.delete(zkdata.topic_path(topic), recursive=True)
                    break
                except NotEmptyError:
                    # A writer created a lease/reservation znode while we deleted: go again
                    # (writers never re-create the partition znodes, so this ends).
                    if attempt == 19:
                        raise
            try:
                client.delete(zkdata.topic_config_path(topic))
            except NoNodeError:
                pass


def _is_rollback(result: Exception) -> bool:
    # Kazoo reports the untried operations of a failed multi-op as RolledBackError /
    # RuntimeInconsistency; the real cause is the other entry.
    return type(result).__name__ in ("RolledBackError", "RuntimeInconsistency")
