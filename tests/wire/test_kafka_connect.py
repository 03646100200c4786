"""Kafka Connect (Kafka's own distributed worker, the seeds' Connector API) on a sparklog
broker: its config, offset and status topics live on sparklog (created compacted by the
worker), Kafka's file source and sink connectors move a file in and out through a topic with
exactly-once source support enabled, and a worker killed -9 and restarted picks up where the
committed offsets say: every line of the file is in the topic exactly once, and in the sink's
file (Connect's file sink is at-least-once by design: a line it wrote after its last offset
commit may be written again after the kill)."""

from __future__ import annotations

import functools
import json
import signal
import subprocess
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import sparklog
from sparklog.testing import BrokerAgents, KafkaTools
from sparklog.testing.brokers import free_port
from tests.helpers import wait_until

TOPIC = "connect-lines"
INTERNAL_TOPICS = ("connect-configs", "connect-offsets", "connect-status")


class ConnectWorker:
    """``ConnectDistributed`` with a properties file, its REST API on a free port."""

    def __init__(self, bootstrap: str, work: Path) -> None:
        self.port = free_port()
        self.properties = work / "worker.properties"
        self.properties.write_text(
            "\n".join(
                [
                    f"bootstrap.servers={bootstrap}",
                    "group.id=connect-cluster",
                    "key.converter=org.apache.kafka.connect.storage.StringConverter",
                    "value.converter=org.apache.kafka.connect.storage.StringConverter",
                    *(f"{kind}.storage.topic=connect-{kind}s" for kind in ("config", "offset")),
                    "status.storage.topic=connect-status",
                    *(f"{kind}.storage.replication.factor=1" for kind in ("config", "offset", "status")),
                    f"listeners=http://127.0.0.1:{self.port}",
                    "exactly.once.source.support=enabled",
                    "offset.flush.interval.ms=500",
                ]
            )
            + "\n"
        )
        self.log = work / "worker.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        worker = "org.apache.kafka.connect.cli.ConnectDistributed"
        command = KafkaTools().command(worker, str(self.properties), heap_mb=512)
        with self.log.open("a") as out:
            self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
        wait_until(self._answers, f"Connect's REST API on port {self.port}", timeout_s=120, interval_s=0.5)

    def _answers(self) -> bool:
        try:
            self.rest("GET", "/")
        except OSError:
            return False
        return True

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(60)

    def rest(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}",
            method=method,
            data=json.dumps(body).encode() if body is not None else None,
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read() or b"null")

    def tasks_running(self, connector: str) -> bool:
        try:
            status = self.rest("GET", f"/connectors/{connector}/status")
        except OSError:
            return False
        states = [status["connector"]["state"], *(t["state"] for t in status["tasks"])]
        return len(states) > 1 and all(s == "RUNNING" for s in states)


@pytest.fixture
def worker(group_broker: BrokerAgents, tmp_path: Path) -> Iterator[ConnectWorker]:
    started = ConnectWorker(group_broker.bootstrap_servers, tmp_path)
    try:
        yield started
    finally:
        started.kill()


def lines_of(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_file_source_and_sink_through_a_topic_across_a_kill(
    cluster: sparklog.Cluster, worker: ConnectWorker, tmp_path: Path
) -> None:
    source, sink = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_text("".join(f"line {i}\n" for i in range(200)))
    worker.start()
    file_connector = "org.apache.kafka.connect.file.FileStream{}Connector"
    connectors = {
        "file-in": {"connector.class": file_connector.format("Source"), "file": str(source), "topic": TOPIC},
        "file-out": {"connector.class": file_connector.format("Sink"), "file": str(sink), "topics": TOPIC},
    }
    for name, config in connectors.items():
        worker.rest("POST", "/connectors", {"name": name, "config": {**config, "tasks.max": "1"}})
    for name in connectors:
        wait_until(functools.partial(worker.tasks_running, name), f"{name} running", timeout_s=60)
    wait_until(lambda: len(lines_of(sink)) >= 200, "the first 200 lines through the topic into the sink file")
    with source.open("a") as more:
        more.write("".join(f"line {i}\n" for i in range(200, 500)))
    wait_until(lambda: len(lines_of(sink)) > 200, "the sink writing the appended lines")
    worker.kill()  # in the middle of the appended lines, most likely; either way nothing may be lost
    worker.start()  # the connectors come back from the config topic, their progress from the offsets
    expected = [f"line {i}" for i in range(500)]
    wait_until(lambda: set(lines_of(sink)) >= set(expected), "every line in the sink file", timeout_s=120)
    # read_committed: an aborted transaction of the killed worker's source task is no record.
    wait_until(lambda: cluster.read(TOPIC).num_rows >= len(expected), "every line committed to the topic")
    in_topic = Counter(value.decode() for value in cluster.read(TOPIC).column("value").to_pylist())
    assert in_topic == Counter(expected), "every line of the file in the topic exactly once"
    assert set(lines_of(sink)) == set(expected), "the sink file holds the file's lines and nothing else"
    for topic in INTERNAL_TOPICS:
        assert cluster.topic_config(topic)["cleanup.policy"] == "compact", topic
