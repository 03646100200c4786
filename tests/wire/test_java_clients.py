"""Kafka's Java clients, 4.x (4.3.1) and 3.9 (3.9.2), against a sparklog broker: the producer
with every acks setting, idempotent and transactional; a transactional consume-transform-produce;
consumers in groups with each of Kafka's assignors, eager and cooperative; static membership
across a kill -9; ``read_committed``; and the AdminClient's topic, config, partition, record,
offset, log dir and group calls. The programs are ``tests/jvm/JavaClients.java`` (compiled by
``make venv``), run on either line's jars."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import sparklog
from sparklog.testing import BrokerAgents, KafkaTools
from sparklog.testing.kafka_tools import KAFKA39_JARS, KAFKA_JARS
from sparklog.testing.metrics import scrape
from tests.helpers import wait_until
from tests.wire.conftest import create_led_topic, produce_confirmed

TOPIC, OUTPUT, GROUP = "java-in", "java-out", "java-group"
TIMEOUT_S = 120.0


@pytest.fixture(scope="module", params=[KAFKA_JARS, KAFKA39_JARS], ids=["java-4.x", "java-3.9"])
def java(request: pytest.FixtureRequest) -> KafkaTools:
    return KafkaTools(Path(sys.prefix) / request.param)


def run(java: KafkaTools, *args: str) -> list[str]:
    """JavaClients ``args`` run to its end; -> the lines it printed (AssertionError with its output if it failed)."""
    done = subprocess.run(
        java.command("JavaClients", *args), capture_output=True, text=True, timeout=TIMEOUT_S, check=False
    )
    assert done.returncode == 0, f"JavaClients {' '.join(args)} on {java.version()}: {done.stdout}\n{done.stderr}"
    return done.stdout.splitlines()


class Member:
    """A running ``JavaClients consume`` group member: its printed lines, collected as they come."""

    def __init__(self, java: KafkaTools, bootstrap: str, tmp_path: Path, name: str, *options: str) -> None:
        assignor, instance_id, isolation = options
        self.stop_file = tmp_path / f"stop-{name}"
        self.stop_file.unlink(missing_ok=True)
        self.lines: list[str] = []
        self.process = subprocess.Popen(
            java.command(
                "JavaClients", "consume", bootstrap, TOPIC, GROUP, assignor, instance_id, isolation, str(self.stop_file)
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    def assignments(self) -> list[set[int]]:
        """Each assignment it reported, in order."""
        return [
            _partitions(line.removeprefix("assignment ")) for line in list(self.lines) if line.startswith("assignment")
        ]

    def assignment(self) -> set[int] | None:
        seen = self.assignments()
        return seen[-1] if seen else None

    def revoked(self) -> list[set[int]]:
        return [_partitions(line.removeprefix("revoked ")) for line in list(self.lines) if line.startswith("revoked")]

    def records(self) -> list[tuple[int, int, str]]:
        """(partition, offset, value) of every record it received."""
        return [
            (int(p), int(o), value)
            for _, p, o, value in (line.split(" ", 3) for line in list(self.lines) if line.startswith("record "))
        ]

    def close(self) -> None:
        """Stop it as an application does (``close()``: offsets committed, the group left)."""
        self.stop_file.touch()
        assert self.process.wait(TIMEOUT_S) == 0, self.lines[-20:]
        self._reader.join(10)
        assert self.lines[-1] == "closed", self.lines[-20:]

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(TIMEOUT_S)


def _partitions(text: str) -> set[int]:
    return {int(p) for p in text.strip("[]").split(", ") if p}


@pytest.fixture
def members(java: KafkaTools, group_broker: BrokerAgents, tmp_path: Path) -> Iterator[list[Member]]:
    started: list[Member] = []
    yield started
    for member in started:
        if member.process.poll() is None:
            member.kill()


def produce_values(bootstrap: str, topic: str, count: int, first: int = 0) -> set[str]:
    """``count`` records valued ``value-<i>`` (keys spread over the partitions); -> the values."""
    return produce_confirmed(bootstrap, topic, (f"value-{i}" for i in range(first, first + count)))


def stored_values(cluster: sparklog.Cluster, topic: str) -> list[str]:
    """The committed values of ``topic``, checking that each partition's offsets run contiguously from 0."""
    table = cluster.read(topic).to_pylist()
    for partition in {row["partition"] for row in table}:
        offsets = sorted(row["offset"] for row in table if row["partition"] == partition)
        assert offsets == list(range(len(offsets))), f"{topic}/{partition}: offsets {offsets[:20]}..."
    return [row["value"].decode() for row in table]


@pytest.mark.parametrize("mode", ["acks0", "acks1", "acksall", "idempotent"])
def test_producer_acks_and_idempotence(
    java: KafkaTools, group_broker: BrokerAgents, cluster: sparklog.Cluster, mode: str
) -> None:
    create_led_topic(cluster, group_broker, TOPIC, partitions=3)
    assert run(java, "produce", group_broker.bootstrap_servers, TOPIC, "500", mode) == ["produced 500"]
    # acks=0: the producer is done when its requests are sent, before the broker appended them.
    wait_until(lambda: sum(cluster.high_watermarks(TOPIC).values()) >= 500, "500 records appended")
    assert sorted(stored_values(cluster, TOPIC)) == sorted(f"value-{i}" for i in range(500))


def test_transactional_producer_and_read_committed_consumers(
    java: KafkaTools, group_broker: BrokerAgents, cluster: sparklog.Cluster, members: list[Member], tmp_path: Path
) -> None:
    bootstrap = group_broker.bootstrap_servers
    create_led_topic(cluster, group_broker, TOPIC, partitions=2)
    assert run(java, "produce", bootstrap, TOPIC, "100", "transactional") == ["produced 100"]
    # A record after the aborted transaction: a consumer that received it has passed all the rest.
    produce_values(bootstrap, TOPIC, 1, first=100)
    committed = Member(java, bootstrap, tmp_path, "committed", "range", "-", "read_committed")
    members.append(committed)
    wait_until(lambda: any(v == "value-100" for _, _, v in committed.records()), "the record after the transactions")
    assert sorted(v for _, _, v in committed.records()) == sorted(f"value-{i}" for i in range(101))
    committed.close()
    # read_uncommitted sees the aborted records too (Kafka's semantics), from the group's start again.
    cluster.delete_group(GROUP)
    uncommitted = Member(java, bootstrap, tmp_path, "uncommitted", "range", "-", "read_uncommitted")
    members.append(uncommitted)
    wait_until(lambda: len(uncommitted.records()) == 201, "every record, aborted ones included")
    assert sum(v.startswith("aborted-") for _, _, v in uncommitted.records()) == 100
    uncommitted.close()


def test_consume_transform_produce_commits_offsets_in_the_transaction(
    java: KafkaTools, group_broker: BrokerAgents, cluster: sparklog.Cluster
) -> None:
    bootstrap = group_broker.bootstrap_servers
    create_led_topic(cluster, group_broker, TOPIC, partitions=3)
    create_led_topic(cluster, group_broker, OUTPUT, partitions=3)
    values = produce_values(bootstrap, TOPIC, 300)
    assert run(java, "transform", bootstrap, TOPIC, OUTPUT, GROUP, "300") == ["transformed 300"]
    assert sorted(stored_values(cluster, OUTPUT)) == sorted(v.upper() for v in values)
    wait_until(
        lambda: (
            cluster.committed_offsets(GROUP, [TOPIC])
            == {(TOPIC, p): o for p, o in cluster.high_watermarks(TOPIC).items()}
        ),
        "the group's offsets committed with the last transaction",
    )


def _stable(members: list[Member], partitions: int) -> bool:
    """Every member reported an assignment, and together they hold each partition once."""
    held = [m.assignment() for m in members]
    if any(h is None for h in held):
        return False
    return sorted(p for h in held for p in h or ()) == list(range(partitions))


@pytest.mark.parametrize("assignor", ["range", "roundrobin", "sticky", "cooperative-sticky"])
def test_group_members_share_partitions_with_each_assignor(
    java: KafkaTools,
    group_broker: BrokerAgents,
    cluster: sparklog.Cluster,
    members: list[Member],
    tmp_path: Path,
    assignor: str,
) -> None:
    bootstrap = group_broker.bootstrap_servers
    create_led_topic(cluster, group_broker, TOPIC, partitions=4)
    first = Member(java, bootstrap, tmp_path, "first", assignor, "-", "read_committed")
    members.append(first)
    wait_until(lambda: first.assignment() == {0, 1, 2, 3}, "the first member holds every partition")
    second = Member(java, bootstrap, tmp_path, "second", assignor, "-", "read_committed")
    members.append(second)
    wait_until(
        lambda: _stable(members, 4) and all(len(m.assignment() or ()) == 2 for m in members), "two partitions each"
    )
    if assignor == "cooperative-sticky":
        # Incremental: the first member gave up only what moved and never its whole assignment.
        assert [len(r) for r in first.revoked()] == [2], first.lines
    else:
        assert first.revoked() == [{0, 1, 2, 3}], first.lines

    values = produce_values(bootstrap, TOPIC, 200)
    wait_until(lambda: len(first.records()) + len(second.records()) == 200, "every record consumed once")
    for member in members:
        held = member.assignment() or set()
        assert {p for p, _, _ in member.records()} <= held, (assignor, held, member.records()[:5])
    assert sorted(v for m in members for _, _, v in m.records()) == sorted(values)

    second.close()
    wait_until(lambda: first.assignment() == {0, 1, 2, 3}, "the remaining member takes every partition")
    first.close()
    high = cluster.high_watermarks(TOPIC)
    assert cluster.committed_offsets(GROUP, [TOPIC]) == {(TOPIC, p): o for p, o in high.items()}


def test_a_static_member_restarted_within_its_session_keeps_its_partitions(
    java: KafkaTools, group_broker: BrokerAgents, cluster: sparklog.Cluster, members: list[Member], tmp_path: Path
) -> None:
    bootstrap = group_broker.bootstrap_servers
    create_led_topic(cluster, group_broker, TOPIC, partitions=4)
    steady = Member(java, bootstrap, tmp_path, "steady", "range", "instance-a", "read_committed")
    restarted = Member(java, bootstrap, tmp_path, "restarted", "range", "instance-b", "read_committed")
    members.extend([steady, restarted])
    wait_until(lambda: _stable(members, 4) and len(steady.assignment() or ()) == 2, "two partitions each")
    held_by_b, lines_of_a = restarted.assignment(), len(steady.lines)

    restarted.kill()
    again = Member(java, bootstrap, tmp_path, "again", "range", "instance-b", "read_committed")
    members.append(again)
    wait_until(lambda: again.assignment() is not None, "the restarted static member's assignment")
    assert again.assignment() == held_by_b
    values = produce_values(bootstrap, TOPIC, 100)
    wait_until(lambda: len(steady.records()) + len(again.records()) == 100, "every record consumed")
    assert sorted(v for m in (steady, again) for _, _, v in m.records()) == sorted(values)
    # No rebalance reached the member that stayed: no new assignment, nothing revoked.
    assert [line for line in steady.lines[lines_of_a:] if not line.startswith("record ")] == [], steady.lines
    steady.close()
    again.close()


def test_admin_client(java: KafkaTools, group_broker: BrokerAgents) -> None:
    transcript = run(java, "admin", group_broker.bootstrap_servers, "java-admin", "java-admin-group")
    # Each connection's first request is ApiVersions at the clients' newest version (4, in 3.9.x
    # and 4.x), answered as it is: no UNSUPPORTED_VERSION round trip through v0.
    answered = scrape(group_broker.metrics_url(1)).series("kafka_network_requestmetrics_requests_total")
    api_versions = {dict(labels)["version"] for labels in answered if ("request", "ApiVersions") in labels}
    assert api_versions == {"4"}, answered
    assert transcript == [
        "cluster nodes 1 controller true",
        "listed true",
        "partitions 2",
        "retention.ms 3600000 DYNAMIC_TOPIC_CONFIG",
        "retention.ms 7200000 DYNAMIC_TOPIC_CONFIG",
        "partitions 3",
        "low watermark 4",
        "offsets earliest latest by-timestamp 4 10 4",
        "log dir replicas 3",
        "group offset 7",
        "group listed true",
        "group state Empty",
        "group offsets after delete 0",
        "listed false",
    ]
