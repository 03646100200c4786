"""Group members and coordinators killed -9 under Kafka clients (DESIGN §8, §14).

* A member process killed -9: its partitions move to the survivor once its session times out;
  every record is consumed and no acknowledged commit is lost.
* The coordinator's broker killed -9 while three members consume: they find the new leader
  of the group's ``__consumer_offsets`` partition, rejoin, and carry on from their committed
  offsets; nothing committed before the kill is lost.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import sparklog
from sparklog.testing import BrokerAgents
from tests.helpers import wait_until
from tests.wire.conftest import GROUP_PROPERTIES, create_led_topic, replicated_offsets_brokers
from tests.wire.test_consumer_groups import Tracked, consumer, poll_until, produce

TOPIC = "events"


def test_killed_member_partitions_move_after_its_session_timeout(
    zk_connect: str, sparklog_home: Path, tmp_path: Path, cluster: sparklog.Cluster
) -> None:
    out = tmp_path / "doomed.txt"
    with BrokerAgents(zk_connect, sparklog_home, tmp_path / "brokers", properties=GROUP_PROPERTIES) as agents:
        agents.start(1)
        agents.wait_controller()
        create_led_topic(cluster, agents, TOPIC, 4)
        produce(agents, 200, topic=TOPIC)
        doomed = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.fault.group_wire_workers",
                agents.bootstrap_servers,
                "g",
                TOPIC,
                str(out),
                "3000",
            ]
        )
        try:
            wait_until(lambda: out.exists() and len(out.read_text().splitlines()) >= 5, "the doomed member commits")
            survivor = Tracked(consumer(agents, "g", **{"session.timeout.ms": 3000}))
            poll_until([survivor], lambda: 0 < len(survivor.owned()) < 4, "the survivor joins and gets a share")
            doomed.kill()
            doomed.wait()
            poll_until([survivor], lambda: survivor.owned() == {0, 1, 2, 3}, "partitions move after the session")
            committed_by_doomed = {tuple(map(int, line.split())) for line in out.read_text().splitlines()}
            poll_until(
                [survivor],
                lambda: len(committed_by_doomed | set(survivor.seen)) >= 200,
                "every record consumed by one member or the other",
            )
            survivor.client.commit(asynchronous=False)
            assert sum(cluster.committed_offsets("g").values()) == 200
            survivor.client.close()
        finally:
            if doomed.poll() is None:
                doomed.kill()


@pytest.fixture
def three_brokers(zk_connect: str, sparklog_home: Path, tmp_path: Path) -> Iterator[BrokerAgents]:
    with replicated_offsets_brokers(zk_connect, sparklog_home, tmp_path, GROUP_PROPERTIES) as agents:
        yield agents


def test_coordinator_killed_members_carry_on_with_their_commits(
    three_brokers: BrokerAgents, cluster: sparklog.Cluster
) -> None:
    agents = three_brokers
    cluster.create_topic(TOPIC, partitions=6, replication_factor=3)
    wait_until(lambda: all(p.leader in agents.live() for p in cluster.describe_topic(TOPIC).partitions), "leaders")
    produce(agents, 150, topic=TOPIC)
    members = [Tracked(consumer(agents, "survivors", **{"client.id": f"m{i}"})) for i in range(3)]
    try:
        poll_until(members, lambda: sum(len(m.seen) for m in members) >= 150, "the first records")
        for m in members:
            m.client.commit(asynchronous=False)
        before = cluster.committed_offsets("survivors")
        assert sum(before.values()) == 150
        coordinator = cluster.describe_group("survivors").coordinator
        agents.kill(coordinator)
        produce(agents, 150, start=150, topic=TOPIC)

        def all_committed() -> bool:
            for m in members:
                if m.client.assignment():
                    try:
                        m.client.commit(asynchronous=False)
                    except Exception:
                        pass
            try:
                return sum(cluster.committed_offsets("survivors").values()) == 300
            except sparklog.SparklogError:
                return False  # the offsets partition is electing its new leader

        poll_until(members, all_committed, "every record committed under the new coordinator", timeout_s=120)
        after = cluster.committed_offsets("survivors")
        assert all(after[tp] >= offset for tp, offset in before.items()), "a committed offset went back"
        assert cluster.describe_group("survivors").coordinator != coordinator
        values = {v for m in members for v in m.seen.values()}
        assert values == {f"v{i}".encode() for i in range(300)}
    finally:
        for m in members:
            m.client.close()
