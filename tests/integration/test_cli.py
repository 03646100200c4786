"""The ``sparklog`` command line, run as a real subprocess against a real ZooKeeper and Delta.

Every command is covered: topics, configs, produce, consume, get-offsets, zookeeper, plus
the error contract (one ``Error:`` line, exit 1; usage errors exit 2; never a traceback)
and the promise that metadata and console commands never import pyspark. Records are
produced and checked through the Python API where that makes expectations exact
(timestamps, partitions, headers).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

import sparklog
from sparklog.metadata import embedded
from tests.helpers import NO_PYSPARK

_TIMEOUT_S = 60


@dataclass
class Cli:
    """Runs ``sparklog`` against one test's cluster (its chroot and home)."""

    zk_connect: str
    home: Path

    def command(self, args: Sequence[str], *, cluster_options: bool = True, forbid_pyspark: bool = False) -> list[str]:
        launcher = ["-c", NO_PYSPARK, "sparklog.cli.main"] if forbid_pyspark else ["-m", "sparklog.cli.main"]
        options = ["--zookeeper", self.zk_connect, "--home", str(self.home)] if cluster_options else []
        return [sys.executable, *launcher, *args, *options]

    def __call__(
        self,
        *args: str,
        stdin: str | bytes | None = None,
        expect: int = 0,
        cluster_options: bool = True,
        forbid_pyspark: bool = False,
    ) -> subprocess.CompletedProcess[str]:
        data = stdin.encode() if isinstance(stdin, str) else stdin
        raw = subprocess.run(
            self.command(args, cluster_options=cluster_options, forbid_pyspark=forbid_pyspark),
            input=data,
            capture_output=True,
            timeout=_TIMEOUT_S,
            cwd=self.home,  # no stray conf/sparklog.properties from the repo's working dir
        )
        result = subprocess.CompletedProcess(
            raw.args, raw.returncode, raw.stdout.decode("utf-8"), raw.stderr.decode("utf-8")
        )
        context = f"sparklog {' '.join(args)} -> {result.returncode}\nstdout: {result.stdout}\nstderr: {result.stderr}"
        assert result.returncode == expect, context
        assert "Traceback" not in result.stderr, context
        return result


def assert_single_error(result: subprocess.CompletedProcess[str], *fragments: str) -> None:
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], result.stderr
    assert result.stdout == ""


def test_version_and_help(cli: Cli) -> None:
    assert cli("--version", cluster_options=False).stdout == f"sparklog {sparklog.__version__}\n"
    usage = cli("--help", cluster_options=False).stdout
    for command in ("topics", "configs", "produce", "consume", "get-offsets", "zookeeper"):
        assert command in usage


def test_topics_create_list_describe_alter_delete(cli: Cli, cluster: sparklog.Cluster) -> None:
    created = cli(
        "topics",
        "create",
        "--topic",
        "orders",
        "--partitions",
        "3",
        "--replication-factor",
        "1",
        "--config",
        "retention.ms=86400000",
        "--config",
        "cleanup.policy=compact",
    )
    assert created.stdout == "Created topic orders.\n"
    assert cli("topics", "create", "--topic", "audit").stdout == "Created topic audit.\n"
    assert cli("topics", "create", "--topic", "audit", "--if-not-exists").stdout == ""

    assert cli("topics", "list", forbid_pyspark=True).stdout == "audit\norders\n"
    assert cli("topics", "list", "--topic", "ord.*", "--output", "json").stdout.split() == ["[", '"orders"', "]"]

    topic_id = cluster.describe_topic("orders").topic_id
    expected = (
        f"Topic: orders\tTopicId: {topic_id}\tPartitionCount: 3\tReplicationFactor: 1\t"
        "Configs: cleanup.policy=compact,retention.ms=86400000\n"
        "\tTopic: orders\tPartition: 0\tLeader: 0\tReplicas: 0\tIsr: 0\n"
        "\tTopic: orders\tPartition: 1\tLeader: 0\tReplicas: 0\tIsr: 0\n"
        "\tTopic: orders\tPartition: 2\tLeader: 0\tReplicas: 0\tIsr: 0\n"
    )
    assert cli("topics", "describe", "--topic", "orders", forbid_pyspark=True).stdout == expected
    audit_id = cluster.describe_topic("audit").topic_id
    everything = cli("topics", "describe").stdout
    assert everything == (
        f"Topic: audit\tTopicId: {audit_id}\tPartitionCount: 1\tReplicationFactor: 1\tConfigs: \n"
        "\tTopic: audit\tPartition: 0\tLeader: 0\tReplicas: 0\tIsr: 0\n" + expected
    )

    assert cli("topics", "alter", "--topic", "orders", "--partitions", "5").stdout == ""
    assert cluster.describe_topic("orders").partition_count == 5
    described = cli("topics", "describe", "--topic", "orders", "--output", "json").stdout
    [doc] = json.loads(described)
    assert (doc["topic"], doc["topic_id"], doc["partition_count"]) == ("orders", topic_id, 5)
    assert [p["partition"] for p in doc["partitions"]] == [0, 1, 2, 3, 4]
    assert doc["configs"] == {"cleanup.policy": "compact", "retention.ms": "86400000"}

    assert cli("topics", "delete", "--topic", "audit").stdout == ""
    assert cluster.list_topics() == ["orders"]


def test_global_options_before_command_alias_and_properties_file(cli: Cli, cluster: sparklog.Cluster) -> None:
    cluster.create_topic("t")
    # Global options before the command, and --bootstrap-server as an alias of --zookeeper.
    before = [
        sys.executable,
        "-m",
        "sparklog.cli.main",
        "--bootstrap-server",
        cli.zk_connect,
        "--home",
        str(cli.home),
        "topics",
        "list",
    ]
    assert subprocess.run(before, capture_output=True, text=True, timeout=_TIMEOUT_S, cwd=cli.home).stdout == "t\n"
    props = cli.home / "client.properties"
    props.write_text(f"zookeeper.connect={cli.zk_connect}\nsparklog.home={cli.home}\n")
    assert cli("topics", "list", "--config", str(props), cluster_options=False).stdout == "t\n"


def test_configs_describe_and_alter(cli: Cli, cluster: sparklog.Cluster) -> None:
    cluster.create_topic("t", config={"retention.ms": 1000})
    described = cli("configs", "describe", "--entity-type", "topics", "--entity-name", "t").stdout
    assert described == (
        "Dynamic configs for topic t are:\n"
        "  retention.ms=1000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=1000}\n"
    )
    altered = cli(
        "configs",
        "alter",
        "--entity-type",
        "topics",
        "--entity-name",
        "t",
        "--add-config",
        "cleanup.policy=[compact,delete],segment.bytes=1048576",
        "--delete-config",
        "retention.ms",
    )
    assert altered.stdout == "Completed updating config for topic t.\n"
    assert cluster.describe_topic("t").configs == {"cleanup.policy": "compact,delete", "segment.bytes": "1048576"}
    assert cli("configs", "describe", "--topic", "t").stdout == (
        "Dynamic configs for topic t are:\n"
        "  cleanup.policy=compact,delete sensitive=false "
        "synonyms={DYNAMIC_TOPIC_CONFIG:cleanup.policy=compact,delete}\n"
        "  segment.bytes=1048576 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:segment.bytes=1048576}\n"
    )
    everything = cli("configs", "describe", "--topic", "t", "--all").stdout.splitlines()
    assert everything[0] == "All configs for topic t are:"
    assert "  retention.ms=604800000 sensitive=false synonyms={DEFAULT_CONFIG:retention.ms=604800000}" in everything
    assert cli("configs", "alter", "--topic", "t", "--delete-config", "cleanup.policy,segment.bytes").returncode == 0
    assert cluster.describe_topic("t").configs == {}


def _records(cluster: sparklog.Cluster, topic: str) -> list[tuple[bytes | None, bytes | None, object]]:
    rows = cluster.read(topic).to_pylist()
    rows.sort(key=lambda r: (r["partition"], r["offset"]))
    return [(r["key"], r["value"], r["headers"]) for r in rows]


def test_produce_plain_keyed_and_with_headers(cli: Cli, cluster: sparklog.Cluster) -> None:
    cluster.create_topic("t")
    assert cli("produce", "--topic", "t", "--sync", stdin="plain one\r\nplain two\n", forbid_pyspark=True).stdout == ""
    cli(
        "produce",
        "--topic",
        "t",
        "--property",
        "parse.key=true",
        "--property",
        "key.separator=:",
        "--producer-property",
        "linger.ms=0",
        "--request-required-acks",
        "1",
        stdin="k1:v1\nk2:v:2\n",
    )
    cli(
        "produce",
        "--topic",
        "t",
        "--property",
        "parse.key=true",
        "--property",
        "parse.headers=true",
        "--property",
        "null.marker=<null>",
        stdin="h1:x,h2:<null>\tk3\tv3\n\t<null>\tv4\nh3:z\tk5\t<null>\n",
    )
    assert _records(cluster, "t") == [
        (None, b"plain one", None),
        (None, b"plain two", None),
        (b"k1", b"v1", None),
        (b"k2", b"v:2", None),
        (b"k3", b"v3", [{"key": "h1", "value": b"x"}, {"key": "h2", "value": None}]),
        (None, b"v4", None),
        (b"k5", None, [{"key": "h3", "value": b"z"}]),
    ]

    bad = cli("produce", "--topic", "t", "--property", "parse.key=true", stdin="a\tb\nno separator\n", expect=1)
    assert_single_error(bad, "No key separator found on line number 2")
    assert _records(cluster, "t")[-1] == (b"a", b"b", None)  # lines before the bad one were sent, as in Kafka


@pytest.fixture
def filled_topic(cluster: sparklog.Cluster) -> str:
    """Two partitions with exact timestamps, keys, headers, a tombstone and non-UTF-8 bytes."""
    cluster.create_topic("events", partitions=2)
    with cluster.producer(linger_ms=0) as producer:
        producer.send("events", b"v0", key=b"k0", partition=0, headers=[("h", b"1"), ("n", None)], timestamp_ms=1000)
        producer.send("events", b"\xffok", partition=0, timestamp_ms=2000)
        producer.send("events", b"v2", key=b"k2", partition=0, timestamp_ms=3000)
        producer.send("events", None, key=b"k1", partition=1, headers=[], timestamp_ms=5000)
        producer.flush()
    return "events"


_PRINT_ALL = [f"print.{what}=true" for what in ("timestamp", "partition", "offset", "headers", "key")]


def _properties(*pairs: str) -> list[str]:
    return [arg for pair in pairs for arg in ("--property", pair)]


def test_consume_from_beginning_with_every_print_property(cli: Cli, filled_topic: str) -> None:
    result = cli(
        "consume",
        "--topic",
        filled_topic,
        "--from-beginning",
        "--timeout-ms",
        "500",
        *_properties(*_PRINT_ALL),
        forbid_pyspark=True,
    )
    assert result.stdout == (
        "CreateTime:1000\tPartition:0\tOffset:0\th:1,n:null\tk0\tv0\n"
        "CreateTime:2000\tPartition:0\tOffset:1\tNO_HEADERS\tnull\t\ufffdok\n"
        "CreateTime:3000\tPartition:0\tOffset:2\tNO_HEADERS\tk2\tv2\n"
        "CreateTime:5000\tPartition:1\tOffset:0\tNO_HEADERS\tk1\tnull\n"
    )
    assert result.stderr == "Processed a total of 4 messages\n"

    # As in Kafka's DefaultMessageFormatter, key.separator separates every printed column.
    custom = cli(
        "consume",
        "--topic",
        filled_topic,
        "--from-beginning",
        "--timeout-ms",
        "300",
        "--max-messages",
        "2",
        *_properties("print.key=true", "print.offset=true", "key.separator= | "),
    )
    assert custom.stdout == "Offset:0 | k0 | v0\nOffset:1 | null | \ufffdok\n"
    assert custom.stderr == "Processed a total of 2 messages\n"


def test_consume_partition_offset_max_messages_and_json(cli: Cli, filled_topic: str) -> None:
    from_offset = cli("consume", "--topic", filled_topic, "--partition", "0", "--offset", "1", "--timeout-ms", "300")
    assert from_offset.stdout == "\ufffdok\nv2\n"
    limited = cli(
        "consume",
        "--topic",
        filled_topic,
        "--partition",
        "0",
        "--offset",
        "earliest",
        "--max-messages",
        "1",
        "--output",
        "json",
    )
    assert json.loads(limited.stdout) == {
        "topic": "events",
        "partition": 0,
        "offset": 0,
        "timestamp": 1000,
        "timestampType": "CreateTime",
        "key": "k0",
        "value": "v0",
        "headers": [{"key": "h", "value": "1"}, {"key": "n", "value": None}],
    }
    # Without --from-beginning only new records count: none arrive, so the timeout ends it.
    idle = cli("consume", "--topic", filled_topic, "--timeout-ms", "300")
    assert (idle.stdout, idle.stderr) == ("", "Processed a total of 0 messages\n")


def test_consume_without_from_beginning_sees_records_produced_later(
    cli: Cli, filled_topic: str, cluster: sparklog.Cluster
) -> None:
    args = (
        "consume",
        "--topic",
        filled_topic,
        "--max-messages",
        "1",
        "--timeout-ms",
        "30000",
        *_properties("print.partition=true"),
    )
    proc = subprocess.Popen(cli.command(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cli.home)
    try:
        # Until the consumer has read its start positions a record counts as old, so keep
        # producing the same record until it reports one.
        with cluster.producer(linger_ms=0) as producer:
            for _attempt in range(60):
                producer.send(filled_topic, b"late", partition=1).result()
                try:
                    proc.wait(timeout=0.5)
                    break
                except subprocess.TimeoutExpired:
                    continue
        stdout, stderr = proc.communicate(timeout=_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, stderr
    assert stdout.decode() == "Partition:1\tlate\n"
    assert stderr.decode() == "Processed a total of 1 messages\n"


def test_get_offsets_earliest_latest_and_by_timestamp(cli: Cli, filled_topic: str) -> None:
    latest = cli("get-offsets", "--topic", filled_topic, "--time", "-1", forbid_pyspark=True)
    assert latest.stdout == "events:0:3\nevents:1:1\n"
    assert cli("get-offsets", "--time", "earliest").stdout == "events:0:0\nevents:1:0\n"
    assert cli("get-offsets", "--topic", filled_topic, "--time", "-2", "--partitions", "1").stdout == "events:1:0\n"
    assert cli("get-offsets", "--topic", filled_topic, "--time", "1500").stdout == "events:0:1\nevents:1:0\n"
    # No record at or after the time: Kafka prints the partition with an empty offset.
    assert cli("get-offsets", "--topic", filled_topic, "--time", "4000").stdout == "events:0:\nevents:1:0\n"
    as_json = json.loads(cli("get-offsets", "--time", "4000", "--partitions", "0", "--output", "json").stdout)
    assert as_json == [{"topic": "events", "partition": 0, "offset": None}]


def test_zookeeper_start_status_stop(tmp_path: Path) -> None:
    home = tmp_path / "zk-home"
    cli = Cli("unused", home)
    home.mkdir()
    try:
        stopped = cli("zookeeper", "status", "--home", str(home), cluster_options=False, expect=3)
        assert stopped.stdout == "ZooKeeper is not running\n"
        started = cli("zookeeper", "start", "--home", str(home), cluster_options=False).stdout
        match = re.fullmatch(r"ZooKeeper is running at 127\.0\.0\.1:(\d+) \(pid (\d+), data (.+)\)\n", started)
        assert match, started
        assert Path(match.group(3)) == (home / "zookeeper" / "data").resolve()
        assert cli("zookeeper", "status", "--home", str(home), cluster_options=False).stdout == started
        stop = cli("zookeeper", "stop", "--home", str(home), cluster_options=False).stdout
        assert stop == f"Stopped ZooKeeper (pid {match.group(2)})\n"
        after = cli("zookeeper", "status", "--home", str(home), cluster_options=False, expect=3)
        assert after.stdout == "ZooKeeper is not running\n"
        again = cli("zookeeper", "stop", "--home", str(home), cluster_options=False)
        assert again.stdout == "ZooKeeper is not running\n"
    finally:
        embedded.stop(home)


_ERROR_CASES: list[tuple[tuple[str, ...], str]] = [
    (("topics", "describe", "--topic", "nope"), "Topic 'nope' does not exist"),
    (("consume", "--topic", "nope", "--timeout-ms", "100"), "Topic 'nope' does not exist"),
    (("produce", "--topic", "nope"), "Topic 'nope' does not exist"),
    (("get-offsets", "--topic", "nope"), "Topic 'nope' does not exist"),
    (("topics", "create", "--topic", "bad/name"), "'bad/name' is illegal"),
    (("topics", "create", "--topic", "t"), "Topic 't' already exists."),
    (("topics", "create", "--topic", "u", "--config", "no.such.key=1"), "Unknown topic configuration 'no.such.key'"),
    (
        ("configs", "alter", "--topic", "t", "--add-config", "retention.ms=soon"),
        "'soon' for configuration retention.ms",
    ),
    (("configs", "alter", "--topic", "t", "--delete-config", "no.such.key"), "no.such.key"),
    (("topics", "alter", "--topic", "t", "--partitions", "1"), "Partitions can only be increased"),
    (("consume", "--topic", "t", "--partition", "0", "--offset", "7"), "Offset 7 is out of range for t-0"),
    (("consume", "--topic", "t", "--partition", "5"), "partition 5 does not exist"),
]


def test_errors_are_one_line_with_exit_1(cli: Cli, cluster: sparklog.Cluster) -> None:
    cluster.create_topic("t", partitions=2)
    # Independent commands: run them side by side to keep the file fast.
    with ThreadPoolExecutor(max_workers=6) as pool:
        results = list(pool.map(lambda case: cli(*case[0], stdin="x\n", expect=1), _ERROR_CASES))
    for (_args, fragment), result in zip(_ERROR_CASES, results, strict=False):
        assert_single_error(result, fragment)
    assert cluster.list_topics() == ["t"]
    assert cluster.describe_topic("t").partition_count == 2


def test_usage_errors_exit_2(cli: Cli, cluster: sparklog.Cluster) -> None:
    cluster.create_topic("t")
    bad_time = cli("get-offsets", "--topic", "t", "--time", "yesterday", expect=2)
    assert "argument --time" in bad_time.stderr and "'yesterday'" in bad_time.stderr
    no_partition = cli("consume", "--topic", "t", "--offset", "3", expect=2)
    assert "The partition is required when offset is specified." in no_partition.stderr
    assert "required: --topic" in cli("topics", "create", expect=2).stderr
