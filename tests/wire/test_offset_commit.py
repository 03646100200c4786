"""Group offsets through the Kafka protocol: OffsetCommit, OffsetFetch and OffsetDelete with
confluent-kafka and kafka-python (``assign()`` consumers with a ``group.id``) against real
broker agents, checked through sparklog's own API and CLI, and the other way round; bad input
and a non-coordinator broker through raw requests; every served version once."""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from kafka import KafkaAdminClient, KafkaConsumer
from kafka import TopicPartition as KpTopicPartition
from kafka.errors import NoError
from kafka.structs import OffsetAndMetadata
from kio.schema.errors import ErrorCode
from kio.static.primitive import i64Timedelta

import sparklog
from sparklog.broker.kafka.offset_commit_api import MAX_METADATA_BYTES
from sparklog.model.topic import OFFSETS_TOPIC
from sparklog.testing import BrokerAgents
from tests.helpers import BOTH_STORES, wait_until
from tests.integration.test_cli import Cli
from tests.integration.test_groups_admin import live_member
from tests.integration.test_kafka_admin import nested, raw_call, served
from tests.wire.conftest import create_led_topic, wait_transactions_complete

TOPIC = "orders"
COMMIT, FETCH, DELETE = 8, 9, 47


def ck_consumer(bootstrap: str, group: str) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})


def kp_consumer(bootstrap: str, group: str) -> KafkaConsumer:
    return KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)


@BOTH_STORES
def test_confluent_kafka_commits_are_the_groups_offsets_everywhere(
    cluster: sparklog.Cluster, one_broker: BrokerAgents, zk_connect: str, sparklog_home: Path
) -> None:
    create_led_topic(cluster, one_broker, TOPIC, partitions=3)
    consumer = ck_consumer(one_broker.bootstrap_servers, "ck-group")
    try:
        consumer.assign([CkTopicPartition(TOPIC, p) for p in range(3)])
        commits = [
            CkTopicPartition(TOPIC, 0, 5, metadata="first", leader_epoch=0),
            CkTopicPartition(TOPIC, 1, 7),
        ]
        stored = consumer.commit(offsets=commits, asynchronous=False)
        assert [(tp.partition, tp.offset, tp.error) for tp in stored] == [(0, 5, None), (1, 7, None)]
        fetched = consumer.committed([CkTopicPartition(TOPIC, p) for p in range(3)], timeout=30)
        assert [(tp.partition, tp.offset) for tp in fetched] == [(0, 5), (1, 7), (2, -1001)]  # -1001: none
        assert fetched[0].metadata == "first" and fetched[0].leader_epoch == 0
        # a lower offset is stored too (Kafka stores what a commit carries)
        consumer.commit(offsets=[CkTopicPartition(TOPIC, 1, 3)], asynchronous=False)
    finally:
        consumer.close()
    assert cluster.committed_offsets("ck-group") == {(TOPIC, 0): 5, (TOPIC, 1): 3}
    assert cluster.committed_offsets("ck-group", [TOPIC]) == {(TOPIC, 0): 5, (TOPIC, 1): 3}
    description = cluster.describe_group("ck-group")
    assert {(r.topic, r.partition): r.current_offset for r in description.partitions} == {
        (TOPIC, 0): 5,
        (TOPIC, 1): 3,
    }
    assert description.coordinator == 1
    out = Cli(zk_connect, sparklog_home)("groups", "describe", "--group", "ck-group", "--output", "json").stdout
    [described] = json.loads(out)
    rows = {(r["topic"], r["partition"]): r["current_offset"] for r in described["partitions"]}
    assert rows == {(TOPIC, 0): 5, (TOPIC, 1): 3}
    assert "ck-group" in [g.group_id for g in cluster.list_groups()]


def test_kafka_python_reads_library_commits_and_the_library_reads_its_commits(
    cluster: sparklog.Cluster, one_broker: BrokerAgents
) -> None:
    create_led_topic(cluster, one_broker, TOPIC, partitions=2)
    cluster.commit_offsets("kp-group", {(TOPIC, 0): 11, (TOPIC, 1): 4}, metadata="from the library")
    consumer = kp_consumer(one_broker.bootstrap_servers, "kp-group")
    try:
        tps = [KpTopicPartition(TOPIC, p) for p in (0, 1)]
        consumer.assign(tps)
        assert [consumer.committed(tp) for tp in tps] == [11, 4]
        consumer.commit({tps[0]: OffsetAndMetadata(20, "from kafka-python", -1)})
        assert consumer.committed(tps[0], metadata=True).metadata == "from kafka-python"
    finally:
        consumer.close()
    assert cluster.committed_offsets("kp-group", [TOPIC]) == {(TOPIC, 0): 20, (TOPIC, 1): 4}
    # the library's committed_all reads the metadata the broker wrote
    assert cluster.groups.committed_all("kp-group")[(TOPIC, 0)].metadata == "from kafka-python"


def test_offset_delete_tombstones_offsets_and_refuses_subscribed_topics(
    cluster: sparklog.Cluster, one_broker: BrokerAgents
) -> None:
    create_led_topic(cluster, one_broker, TOPIC, partitions=2)
    create_led_topic(cluster, one_broker, "other", partitions=1)
    cluster.commit_offsets("doomed", {(TOPIC, 0): 3, (TOPIC, 1): 4, ("other", 0): 9})
    admin = KafkaAdminClient(bootstrap_servers=one_broker.bootstrap_servers)
    try:
        result = admin.delete_group_offsets("doomed", [KpTopicPartition(TOPIC, 0)])
        assert result == {KpTopicPartition(TOPIC, 0): NoError}
        assert cluster.committed_offsets("doomed") == {(TOPIC, 1): 4, ("other", 0): 9}
        # a live member subscribed to `orders` (sparklog's own membership): refused there only
        with live_member(cluster, "doomed", TOPIC):
            port = one_broker.port(1)
            response = raw_call(
                port,
                DELETE,
                0,
                group_id="doomed",
                topics=(
                    nested(DELETE, 0, "OffsetDeleteRequestTopic", name=TOPIC, partitions=(_dp(1),)),
                    nested(DELETE, 0, "OffsetDeleteRequestTopic", name="other", partitions=(_dp(0),)),
                ),
            )
            assert response.error_code == ErrorCode.none
            codes = {(t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions}
            assert codes == {(TOPIC, 1): ErrorCode.group_subscribed_to_topic, ("other", 0): ErrorCode.none}
        assert cluster.committed_offsets("doomed") == {(TOPIC, 1): 4}
        unknown = raw_call(port, DELETE, 0, group_id="nobody", topics=())
        assert unknown.error_code == ErrorCode.group_id_not_found
    finally:
        admin.close()


def _dp(partition: int) -> Any:
    return nested(DELETE, 0, "OffsetDeleteRequestPartition", partition_index=partition)


def test_standalone_commit_is_refused_while_the_group_has_live_members(
    cluster: sparklog.Cluster, one_broker: BrokerAgents
) -> None:
    create_led_topic(cluster, one_broker, TOPIC, partitions=1)
    cluster.commit_offsets("busy", {(TOPIC, 0): 1})
    with live_member(cluster, "busy", TOPIC):
        consumer = ck_consumer(one_broker.bootstrap_servers, "busy")
        try:
            consumer.assign([CkTopicPartition(TOPIC, 0)])
            with pytest.raises(KafkaException, match="UNKNOWN_MEMBER_ID"):
                consumer.commit(offsets=[CkTopicPartition(TOPIC, 0, 9)], asynchronous=False)
        finally:
            consumer.close()
    assert cluster.committed_offsets("busy") == {(TOPIC, 0): 1}


def _commit_request(version: int, group: str, topic: str, partitions: list[tuple[int, int, str]]) -> dict[str, Any]:
    parts = tuple(
        nested(
            COMMIT,
            version,
            "OffsetCommitRequestPartition",
            partition_index=p,
            committed_offset=o,
            committed_leader_epoch=-1,
            committed_metadata=m,
            commit_timestamp=-1,
        )
        for p, o, m in partitions
    )
    return {
        "group_id": group,
        "generation_id_or_member_epoch": -1,
        "member_id": "",
        "group_instance_id": None,
        "retention_time": i64Timedelta.parse(datetime.timedelta(milliseconds=-1)),
        "topics": (nested(COMMIT, version, "OffsetCommitRequestTopic", name=topic, partitions=parts),),
    }


def _codes(response: Any) -> dict[tuple[str, int], ErrorCode]:
    return {(t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions}


def test_bad_commits_get_kafkas_codes_and_change_nothing(cluster: sparklog.Cluster, one_broker: BrokerAgents) -> None:
    create_led_topic(cluster, one_broker, TOPIC, partitions=2)
    cluster.commit_offsets("careful", {(TOPIC, 0): 1, (TOPIC, 1): 1})
    port = one_broker.port(1)
    huge = "m" * (MAX_METADATA_BYTES + 1)
    response = raw_call(
        port, COMMIT, 9, **_commit_request(9, "careful", TOPIC, [(0, -5, ""), (1, 2, huge), (7, 2, "")])
    )
    assert _codes(response) == {
        (TOPIC, 0): ErrorCode.invalid_commit_offset_size,
        (TOPIC, 1): ErrorCode.offset_metadata_too_large,
        (TOPIC, 7): ErrorCode.unknown_topic_or_partition,
    }
    response = raw_call(port, COMMIT, 9, **_commit_request(9, "careful", "no-such-topic", [(0, 2, "")]))
    assert _codes(response) == {("no-such-topic", 0): ErrorCode.unknown_topic_or_partition}
    # one bad partition fails alone: the good one of the same request is stored
    response = raw_call(port, COMMIT, 9, **_commit_request(9, "careful", TOPIC, [(0, -1, ""), (1, 6, "ok")]))
    assert _codes(response) == {(TOPIC, 0): ErrorCode.invalid_commit_offset_size, (TOPIC, 1): ErrorCode.none}
    assert cluster.committed_offsets("careful") == {(TOPIC, 0): 1, (TOPIC, 1): 6}
    response = raw_call(port, COMMIT, 9, **_commit_request(9, "bad group!", TOPIC, [(0, 1, "")]))
    assert _codes(response) == {(TOPIC, 0): ErrorCode.invalid_group_id}
    # a member commit for a group nobody knows: GROUP_ID_NOT_FOUND (v9), ILLEGAL_GENERATION before
    for version, code in ((9, ErrorCode.group_id_not_found), (8, ErrorCode.illegal_generation)):
        fields = {**_commit_request(version, "ghost", TOPIC, [(0, 1, "")]), "generation_id_or_member_epoch": 3}
        assert _codes(raw_call(port, COMMIT, version, **{**fields, "member_id": "m-1"})) == {(TOPIC, 0): code}
    assert cluster.committed_offsets("ghost") == {}


def test_only_the_coordinator_answers(cluster: sparklog.Cluster, two_brokers: BrokerAgents) -> None:
    cluster.create_topic(TOPIC, partitions=1, replication_factor=2)
    cluster.groups.offsets_table()  # creates __consumer_offsets, spread over both brokers

    def leaders() -> dict[int, int] | None:
        found = {p.partition: p.leader for p in cluster.describe_topic(OFFSETS_TOPIC).partitions}
        return found if set(found.values()) == {1, 2} else None

    led = wait_until(leaders, f"{OFFSETS_TOPIC} led by both brokers")
    group = next(f"g{i}" for i in range(1000) if led[cluster.groups.log_partition(f"g{i}")] == 1)
    wrong, right = two_brokers.port(2), two_brokers.port(1)
    response = raw_call(wrong, COMMIT, 9, **_commit_request(9, group, TOPIC, [(0, 4, "")]))
    assert _codes(response) == {(TOPIC, 0): ErrorCode.not_coordinator}
    fetch = _fetch(wrong, 7, group)
    assert fetch.error_code == ErrorCode.not_coordinator
    assert cluster.committed_offsets(group) == {}
    assert _codes(raw_call(right, COMMIT, 9, **_commit_request(9, group, TOPIC, [(0, 4, "")]))) == {
        (TOPIC, 0): ErrorCode.none
    }
    assert cluster.committed_offsets(group) == {(TOPIC, 0): 4}
    [[answer]] = [t.partitions for t in _fetch(right, 7, group).topics]
    assert answer.committed_offset == 4


def _fetch(port: int, version: int, group: str, topics: Any = None, require_stable: bool = False) -> Any:
    wanted = (
        None
        if topics is None
        else tuple(
            nested(FETCH, version, "OffsetFetchRequestTopic", name=t, partition_indexes=tuple(ps)) for t, ps in topics
        )
    )
    return raw_call(port, FETCH, version, group_id=group, topics=wanted, require_stable=require_stable)


def test_offsets_pending_in_a_transaction_are_unstable_to_a_stable_fetch(
    cluster: sparklog.Cluster, one_broker: BrokerAgents
) -> None:
    create_led_topic(cluster, one_broker, TOPIC, partitions=1)
    bootstrap, group = one_broker.bootstrap_servers, "pending-group"
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "pending-offsets"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(TOPIC, b"x")
    metadata = ck_consumer(bootstrap, group).consumer_group_metadata()
    producer.send_offsets_to_transaction([CkTopicPartition(TOPIC, 0, 5)], metadata, 30)

    def answer(require_stable: bool) -> Any:
        [[found]] = [t.partitions for t in _fetch(one_broker.port(1), 7, group, [(TOPIC, [0])], require_stable).topics]
        return found

    # Kafka's rule: a stable fetch waits out the transaction (UNSTABLE_OFFSET_COMMIT, retriable);
    # a plain fetch answers what is committed so far.
    assert answer(True).error_code == ErrorCode.unstable_offset_commit
    assert (answer(False).error_code, answer(False).committed_offset) == (ErrorCode.none, -1)
    producer.commit_transaction(30)
    wait_transactions_complete(cluster, "pending-offsets")
    assert (answer(True).error_code, answer(True).committed_offset) == (ErrorCode.none, 5)


def test_every_served_version_once(cluster: sparklog.Cluster, one_broker: BrokerAgents) -> None:
    create_led_topic(cluster, one_broker, TOPIC, partitions=1)
    port = one_broker.port(1)
    for v in served(COMMIT):
        response = raw_call(port, COMMIT, v, **_commit_request(v, f"v{v}", TOPIC, [(0, 100 + v, f"meta {v}")]))
        assert _codes(response) == {(TOPIC, 0): ErrorCode.none}, f"OffsetCommit v{v}"
        assert cluster.committed_offsets(f"v{v}") == {(TOPIC, 0): 100 + v}
    for v in served(FETCH):
        group = f"v{min(v + 1, max(served(COMMIT)))}"
        expected = 100 + int(group[1:])
        if v >= 8:
            groups = (
                nested(
                    FETCH, v, "OffsetFetchRequestGroup", group_id=group, member_id=None, member_epoch=-1, topics=None
                ),
                nested(FETCH, v, "OffsetFetchRequestGroup", group_id="unknown", member_id=None, topics=()),
            )
            response = raw_call(port, FETCH, v, groups=groups, require_stable=False)
            [mine, other] = response.groups
            assert (mine.group_id, mine.error_code, other.error_code) == (group, ErrorCode.none, ErrorCode.none)
            [[answer]] = [t.partitions for t in mine.topics]
        else:
            response = _fetch(port, v, group, [(TOPIC, [0])] if v < 2 else None)
            [[answer]] = [t.partitions for t in response.topics]
        assert (answer.committed_offset, answer.metadata, answer.error_code) == (
            expected,
            f"meta {expected - 100}",
            ErrorCode.none,
        ), f"OffsetFetch v{v}"
    for v in served(DELETE):
        response = raw_call(
            port,
            DELETE,
            v,
            group_id="v2",
            topics=(nested(DELETE, v, "OffsetDeleteRequestTopic", name=TOPIC, partitions=(_dp(0),)),),
        )
        assert response.error_code == ErrorCode.none and _codes(response) == {(TOPIC, 0): ErrorCode.none}
        assert cluster.committed_offsets("v2") == {}
