"""What a user of Kafka's tools types on the first day, run as real ``sparklog`` subprocesses:
``--bootstrap-server`` pointed at a Kafka listener (a real broker agent) fails at once with
directions instead of waiting 30 s for a ZooKeeper that is not there; Kafka's action flags
(``topics --list``, ``groups --describe``, ``configs --alter``...); ``--topic a,b`` as a
list of topics; and Ctrl-C ending a waiting consumer with exit code 130 and no traceback.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import sparklog
from sparklog.testing import BrokerAgents
from tests.integration.test_cli import Cli, assert_single_error

_FAIL_FAST_S = 10.0  # well below the 30 s connection timeout the tools used to wait for


def _timed(cli: Cli, *args: str, expect: int) -> tuple[subprocess.CompletedProcess[str], float]:
    began = time.monotonic()
    done = cli(*args, "--home", str(cli.home), expect=expect, cluster_options=False)
    return done, time.monotonic() - began


def test_bootstrap_server_at_a_kafka_listener_fails_fast_with_directions(
    cli: Cli, zk_connect: str, sparklog_home: Path, tmp_path: Path
) -> None:
    with BrokerAgents(zk_connect, sparklog_home, tmp_path / "brokers") as agents:
        agents.start(1)
        listener = f"127.0.0.1:{agents.port(1)}"
        for flag in ("--bootstrap-server", "--zookeeper"):
            done, seconds = _timed(cli, "topics", "list", flag, listener, expect=1)
            assert_single_error(done, f"{listener} is a Kafka listener", "--zookeeper", "sparklog zookeeper status")
            assert seconds < _FAIL_FAST_S, seconds
    # The broker's own ZooKeeper address still works under Kafka's flag name.
    listed = cli(
        "topics", "list", "--bootstrap-server", zk_connect, "--home", str(sparklog_home), cluster_options=False
    )
    assert listed.stdout == ""


@pytest.fixture
def not_zookeeper() -> Iterator[str]:
    """``host:port`` of a server that answers every connection like a web server would."""
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        thread.join()
        server.close()


def test_an_address_that_is_not_zookeeper_fails_fast(cli: Cli, not_zookeeper: str) -> None:
    done, seconds = _timed(cli, "topics", "list", "--zookeeper", not_zookeeper, expect=1)
    assert_single_error(done, f"{not_zookeeper} does not answer as ZooKeeper", "sparklog zookeeper status")
    assert seconds < _FAIL_FAST_S, seconds


def test_kafka_action_flags_run_the_subcommands(cli: Cli, cluster: sparklog.Cluster) -> None:
    assert cli("topics", "--create", "--topic", "clicks", "--partitions", "2").stdout == "Created topic clicks.\n"
    assert cli("topics", "--topic", "audit", "--create").stdout == "Created topic audit.\n"  # flag anywhere
    assert cli("topics", "--list").stdout == "audit\nclicks\n"
    described = cli("topics", "--describe", "--topic", "clicks").stdout
    assert described.startswith("Topic: clicks\t") and "PartitionCount: 2" in described
    assert cli("topics", "--alter", "--topic", "clicks", "--partitions", "3").stdout == ""
    assert cluster.describe_topic("clicks").partition_count == 3
    altered = cli(
        "configs", "--alter", "--entity-type", "topics", "--entity-name", "clicks", "--add-config", "retention.ms=1000"
    )
    assert altered.stdout == "Completed updating config for topic clicks.\n"
    assert cli("configs", "--describe", "--topic", "clicks").stdout.startswith("Dynamic configs for topic clicks are:")

    cluster.commit_offsets("g", {("clicks", 0): 0})
    assert cli("groups", "--list").stdout == "g\n"
    assert "CURRENT-OFFSET" in cli("groups", "--describe", "--group", "g").stdout
    reset = cli("groups", "--reset-offsets", "--group", "g", "--topic", "clicks", "--to-latest", "--execute")
    assert "NEW-OFFSET" in reset.stdout
    assert cli("groups", "--delete", "--group", "g").stdout.startswith("Deletion of requested consumer groups ('g')")
    assert cli("topics", "--delete", "--topic", "audit").stdout == ""
    assert cluster.list_topics(include_internal=False) == ["clicks"]

    both = cli("topics", "--list", "--describe", expect=2)
    assert "usage: sparklog topics" in both.stderr and "--list" in both.stderr and "--describe" in both.stderr


def test_comma_separated_topics_are_several_topics(cli: Cli, cluster: sparklog.Cluster) -> None:
    for topic in ("a", "b", "c"):
        cluster.create_topic(topic)
        with cluster.producer(linger_ms=0) as producer:
            producer.send(topic, f"{topic}0".encode()).result()
    assert cli("topics", "list", "--topic", "a,c").stdout == "a\nc\n"
    described = cli("topics", "describe", "--topic", "a,b").stdout
    assert [line.split("\t")[0] for line in described.splitlines() if not line.startswith("\t")] == [
        "Topic: a",
        "Topic: b",
    ]
    assert cli("get-offsets", "--topic", "b,c").stdout == "b:0:1\nc:0:1\n"

    consumed = cli("consume", "--topic", "a,b", "--from-beginning", "--max-messages", "2", "--timeout-ms", "5000")
    assert sorted(consumed.stdout.splitlines()) == ["a0", "b0"]

    cluster.commit_offsets("g", {("a", 0): 1, ("b", 0): 1, ("c", 0): 1})
    reset = cli("groups", "reset-offsets", "--group", "g", "--topic", "a,b", "--to-earliest", "--execute")
    assert [line.split()[1] for line in reset.stdout.splitlines()[2:]] == ["a", "b"]
    assert cluster.committed_offsets("g") == {("a", 0): 0, ("b", 0): 0, ("c", 0): 1}

    assert cli("topics", "delete", "--topic", "a,b").stdout == ""
    assert cluster.list_topics(include_internal=False) == ["c"]


def test_ctrl_c_ends_a_waiting_consumer_with_exit_130(cli: Cli, cluster: sparklog.Cluster) -> None:
    cluster.create_topic("t")
    with cluster.producer(linger_ms=0) as producer:
        producer.send("t", b"first").result()
    # --timeout-ms only bounds a broken run: the consumer is interrupted long before.
    command = cli.command(["consume", "--topic", "t", "--from-beginning", "--timeout-ms", "60000"])
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cli.home)
    try:
        assert proc.stdout is not None
        # The record printed means the consumer is in its poll loop, waiting for more.
        assert proc.stdout.readline() == b"first\n"
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, stderr
    assert stderr.decode() == "Processed a total of 1 messages\n"
    assert stdout == b""
