"""Invariant 10 (safety of input): bad input fails with a specific error and changes nothing.

Every case runs inside :func:`tests.helpers.assert_unchanged`, which compares every znode
(data and version) under the test's chroot and every file under ``sparklog.home``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest

import sparklog
from sparklog.errors import (
    ConfigError,
    InvalidOffsetSpecError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    RecordTooLargeError,
    SchemaMismatchError,
    SparklogError,
    TopicExistsError,
    TopicNotFoundError,
    UnknownPartitionError,
)
from sparklog.model.offsets import parse_assign_json, parse_offsets_json
from tests.helpers import assert_unchanged, stored_records, topic_dirs

BAD_NAMES = ["", ".", "..", "a" * 250, "a b", "a/b", "../x", "/abs", "a\x00b", "é", "t\n", "a:b", "*"]
BAD_NAME_IDS = [
    "empty",
    "dot",
    "dotdot",
    "250chars",
    "space",
    "slash",
    "parent",
    "abs",
    "nul",
    "e-acute",
    "newline",
    "colon",
    "star",
]


def fails_cleanly(
    cluster: sparklog.Cluster,
    home: Path,
    error: type[SparklogError],
    action: Callable[[], object],
    match: str | None = None,
) -> SparklogError:
    """``action`` raises exactly the documented ``error`` (a SparklogError) and changes nothing."""
    assert issubclass(error, SparklogError)
    with assert_unchanged(cluster, home):
        with pytest.raises(error, match=match) as info:
            action()
    return info.value


@pytest.fixture
def existing(cluster: sparklog.Cluster) -> str:
    """A topic with 2 partitions and 3 records in partition 0, created before the bad input."""
    cluster.create_topic("existing", partitions=2, config={"max.message.bytes": 1000})
    with cluster.producer() as producer:
        for i in range(3):
            producer.send("existing", b"v%d" % i, partition=0)
    return "existing"


@pytest.mark.parametrize("name", BAD_NAMES, ids=BAD_NAME_IDS)
def test_bad_topic_names(cluster: sparklog.Cluster, sparklog_home: Path, existing: str, name: str) -> None:
    producer = cluster.producer()
    actions: dict[str, Callable[[], object]] = {
        "create": lambda: cluster.create_topic(name),
        "describe": lambda: cluster.describe_topic(name),
        "read": lambda: cluster.read(name),
        "delete": lambda: cluster.delete_topic(name),
        "send": lambda: producer.send(name, b"v"),
        "send_arrow": lambda: producer.send_arrow(name, pa.table({"value": [b"v"]})),
        "list_offsets": lambda: cluster.list_offsets(name),
        "topic_config": lambda: cluster.topic_config(name),
        "alter": lambda: cluster.alter_topic_config(name, set={"retention.ms": 1}),
        "create_partitions": lambda: cluster.create_partitions(name, 5),
    }
    for what, action in actions.items():
        try:
            fails_cleanly(cluster, sparklog_home, InvalidTopicError, action)
        except AssertionError as exc:
            raise AssertionError(f"{what}({name!r}): {exc}") from exc
    producer.close()
    assert topic_dirs(sparklog_home) == [existing]


def test_longest_legal_name_works(cluster: sparklog.Cluster, sparklog_home: Path) -> None:
    name = "a" * 249
    cluster.create_topic(name)
    assert cluster.list_topics() == [name] and topic_dirs(sparklog_home) == [name]


@pytest.mark.parametrize(
    "config",
    [
        {"retention.ms": "abc"},
        {"cleanup.policy": "nope"},
        {"message.timestamp.type": "x"},
        {"min.insync.replicas": 0},
        {"max.message.bytes": -5},
        {"no.such.key": 1},
        {"retention.ms": 1, "bogus": 2},  # one bad key spoils the lot
    ],
)
def test_bad_topic_config(
    cluster: sparklog.Cluster, sparklog_home: Path, existing: str, config: dict[str, object]
) -> None:
    bad_key = next(k for k in config if k != "retention.ms" or len(config) == 1)
    error = fails_cleanly(cluster, sparklog_home, ConfigError, lambda: cluster.create_topic("fresh", config=config))
    assert bad_key in str(error)
    before = cluster.describe_topic(existing).configs
    error = fails_cleanly(cluster, sparklog_home, ConfigError, lambda: cluster.alter_topic_config(existing, set=config))
    assert bad_key in str(error)
    assert cluster.describe_topic(existing).configs == before == {"max.message.bytes": "1000"}


def test_alter_delete_unknown_key(cluster: sparklog.Cluster, sparklog_home: Path, existing: str) -> None:
    fails_cleanly(
        cluster,
        sparklog_home,
        ConfigError,
        lambda: cluster.alter_topic_config(existing, set={"retention.ms": 5}, delete=["nope"]),
        "nope",
    )


@pytest.mark.parametrize("partitions", [0, -1, True, 1.5, "3"])
def test_bad_partition_count(cluster: sparklog.Cluster, sparklog_home: Path, partitions: object) -> None:
    fails_cleanly(
        cluster,
        sparklog_home,
        InvalidPartitionsError,
        lambda: cluster.create_topic("t", partitions=partitions),  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("total", [1, 2, 0])
def test_create_partitions_cannot_shrink(
    cluster: sparklog.Cluster, sparklog_home: Path, existing: str, total: int
) -> None:
    fails_cleanly(cluster, sparklog_home, InvalidPartitionsError, lambda: cluster.create_partitions(existing, total))
    assert cluster.describe_topic(existing).partition_count == 2


@pytest.mark.parametrize("rf", [2, 0])
def test_replication_factor_above_brokers(
    cluster: sparklog.Cluster, sparklog_home: Path, existing: str, rf: int
) -> None:
    # ``existing`` made this client broker 0, the only broker
    fails_cleanly(
        cluster,
        sparklog_home,
        InvalidReplicationFactorError,
        lambda: cluster.create_topic("t", partitions=2, replication_factor=rf),
    )


def test_create_existing_topic(cluster: sparklog.Cluster, sparklog_home: Path, existing: str) -> None:
    topic_id = cluster.describe_topic(existing).topic_id
    fails_cleanly(cluster, sparklog_home, TopicExistsError, lambda: cluster.create_topic(existing, partitions=5))
    assert cluster.describe_topic(existing).topic_id == topic_id
    assert [r.value for r in stored_records(cluster, existing)] == [b"v0", b"v1", b"v2"]


def test_record_too_large(cluster: sparklog.Cluster, sparklog_home: Path, existing: str) -> None:
    producer = cluster.producer()
    before = cluster.list_offsets(existing)
    fails_cleanly(cluster, sparklog_home, RecordTooLargeError, lambda: producer.send(existing, b"x" * 1000), "1000")
    fails_cleanly(
        cluster, sparklog_home, RecordTooLargeError, lambda: producer.send(existing, b"x" * 500, key=b"k" * 500)
    )
    big_header = [("h", b"x" * 1000)]
    fails_cleanly(
        cluster, sparklog_home, RecordTooLargeError, lambda: producer.send(existing, b"x", headers=big_header)
    )
    batch = pa.table({"value": [b"ok", b"x" * 2000, b"ok"]})
    fails_cleanly(cluster, sparklog_home, RecordTooLargeError, lambda: producer.send_arrow(existing, batch), "Record 1")
    small = cluster.producer(max_request_size=100)
    fails_cleanly(cluster, sparklog_home, RecordTooLargeError, lambda: small.send(existing, b"x" * 200))
    assert cluster.list_offsets(existing) == before
    producer.send(existing, b"x" * 900).result()  # below the limit still works
    assert cluster.list_offsets(existing)[0] == before[0] + 1
    producer.close()
    small.close()


def test_unknown_topic(cluster: sparklog.Cluster, sparklog_home: Path, existing: str) -> None:
    producer = cluster.producer()
    for what, action in {
        "describe": lambda: cluster.describe_topic("missing"),
        "read": lambda: cluster.read("missing"),
        "list_offsets": lambda: cluster.list_offsets("missing"),
        "delete": lambda: cluster.delete_topic("missing"),
        "send": lambda: producer.send("missing", b"v"),
        "send_arrow": lambda: producer.send_arrow("missing", pa.table({"value": [b"v"]})),
        "topic_config": lambda: cluster.topic_config("missing"),
        "alter": lambda: cluster.alter_topic_config("missing", set={"retention.ms": 1}),
        "create_partitions": lambda: cluster.create_partitions("missing", 3),
    }.items():
        try:
            fails_cleanly(cluster, sparklog_home, TopicNotFoundError, action, "missing")
        except AssertionError as exc:
            raise AssertionError(f"{what}: {exc}") from exc
    producer.close()


@pytest.mark.parametrize("partition", [True, "1", 1.0], ids=["bool", "str", "float"])
def test_send_partition_must_be_an_int(
    cluster: sparklog.Cluster, sparklog_home: Path, existing: str, partition: object
) -> None:
    with cluster.producer() as producer:
        fails_cleanly(
            cluster,
            sparklog_home,
            UnknownPartitionError,
            lambda: producer.send(existing, b"v", partition=partition),  # type: ignore[arg-type]
        )


@pytest.mark.parametrize("partition", [2, -1, 100])
def test_unknown_partition(cluster: sparklog.Cluster, sparklog_home: Path, existing: str, partition: int) -> None:
    producer = cluster.producer()
    fails_cleanly(cluster, sparklog_home, UnknownPartitionError, lambda: cluster.read(existing, partition=partition))
    fails_cleanly(
        cluster, sparklog_home, UnknownPartitionError, lambda: producer.send(existing, b"v", partition=partition)
    )
    batch = pa.table({"value": [b"a", b"b"], "partition": pa.array([0, partition], pa.int32())})
    fails_cleanly(cluster, sparklog_home, UnknownPartitionError, lambda: producer.send_arrow(existing, batch))
    producer.close()


def test_bad_client_configs(cluster: sparklog.Cluster, sparklog_home: Path, cluster_options: dict[str, str]) -> None:
    fails_cleanly(cluster, sparklog_home, ConfigError, lambda: cluster.producer(no_such_setting=1), "no_such_setting")
    fails_cleanly(cluster, sparklog_home, ConfigError, lambda: cluster.producer(acks="2"), "acks")
    fails_cleanly(cluster, sparklog_home, ConfigError, lambda: sparklog.connect(unknown_key=1), "unknown_key")
    fails_cleanly(
        cluster,
        sparklog_home,
        ConfigError,
        lambda: sparklog.connect({**cluster_options, "bogus.key": "1"}),
        "bogus.key",
    )


@pytest.mark.parametrize(
    ("batch", "match"),
    [
        (pa.table({"key": [b"k"]}), "value"),
        (pa.table({"value": [b"v"], "colour": ["red"]}), "colour"),
        (pa.table({"value": pa.array([1, 2], pa.int64())}), "value"),
        (pa.table({"value": [b"v"], "key": pa.array([1], pa.int32())}), "key"),
        (pa.table({"value": [b"v"], "partition": ["0"]}), "partition"),
        (pa.table({"value": [b"v"], "timestamp": [5]}), "timestamp"),
        (pa.table({"value": [b"v"], "headers": [5]}), "headers"),
        (pa.table({"value": [b"v"], "topic": ["other"]}), "other"),
    ],
    ids=[
        "no-value",
        "unknown-column",
        "int-value",
        "int-key",
        "string-partition",
        "int-timestamp",
        "int-headers",
        "other-topic",
    ],
)
def test_send_arrow_schema_mismatch(
    cluster: sparklog.Cluster, sparklog_home: Path, existing: str, batch: pa.Table, match: str
) -> None:
    with cluster.producer() as producer:
        fails_cleanly(cluster, sparklog_home, SchemaMismatchError, lambda: producer.send_arrow(existing, batch), match)


@pytest.mark.parametrize("value", [5, 1.5, object(), [b"a"]], ids=["int", "float", "object", "list"])
def test_send_bad_value_type(cluster: sparklog.Cluster, sparklog_home: Path, existing: str, value: object) -> None:
    with cluster.producer() as producer:
        fails_cleanly(cluster, sparklog_home, SchemaMismatchError, lambda: producer.send(existing, value))  # type: ignore[arg-type]
        fails_cleanly(cluster, sparklog_home, SchemaMismatchError, lambda: producer.send(existing, b"v", key=value))  # type: ignore[arg-type]
        fails_cleanly(
            cluster,
            sparklog_home,
            SchemaMismatchError,
            lambda: producer.send(existing, b"v", headers=[(1, b"x")]),  # type: ignore[list-item]
        )


@pytest.mark.parametrize("text", ["{", "[]", '{"t": 5}', '{"t": {"x": 1}}', '{"t": {"0": -3}}', '{"t": {"0": "a"}}'])
def test_malformed_offsets_json(cluster: sparklog.Cluster, sparklog_home: Path, text: str) -> None:
    fails_cleanly(cluster, sparklog_home, InvalidOffsetSpecError, lambda: parse_offsets_json(text))
    fails_cleanly(cluster, sparklog_home, InvalidOffsetSpecError, lambda: parse_assign_json(text))


@pytest.mark.parametrize("spec", ["soonest", "-3", 1.5])
def test_bad_list_offsets_spec(cluster: sparklog.Cluster, sparklog_home: Path, existing: str, spec: object) -> None:
    fails_cleanly(cluster, sparklog_home, InvalidOffsetSpecError, lambda: cluster.list_offsets(existing, spec))  # type: ignore[arg-type]


def test_empty_arrow_batch_is_a_no_op(cluster: sparklog.Cluster, sparklog_home: Path, existing: str) -> None:
    with cluster.producer() as producer:
        with assert_unchanged(cluster, sparklog_home):
            result = producer.send_arrow(existing, pa.table({"value": pa.array([], pa.binary())}))
        assert all(count == 0 for _start, count in result.offsets.values())


def test_replication_factor_error_on_a_fresh_cluster_registers_no_broker(
    cluster: sparklog.Cluster, sparklog_home: Path
) -> None:
    fails_cleanly(
        cluster, sparklog_home, InvalidReplicationFactorError, lambda: cluster.create_topic("t", replication_factor=2)
    )
    assert cluster.replicas.metadata.brokers() == {}, (
        "a rejected create_topic must not register this client as a broker"
    )
