"""Broker agents apply retention and the Delta log step to the partitions they lead, every
``log.retention.check.interval.ms`` (``sparklog/broker/log_manager.py``, DESIGN §9).

Real agent processes (:class:`sparklog.testing.BrokerAgents`) checking every 500 ms, real
Delta tables; every wait is on a condition. A round visits topics in name order, which the
tests use to know a round has passed over a topic (see each test).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import sparklog
from sparklog.log.history import topic_history
from sparklog.testing import BrokerAgents

HOUR_MS = 3_600_000
CHECK_MS = 500
_TIMEOUT_S = 60.0


@pytest.fixture
def agents(zk_connect: str, sparklog_home: Path, tmp_path: Path) -> Iterator[BrokerAgents]:
    properties = {"log.retention.check.interval.ms": str(CHECK_MS)}
    with BrokerAgents(zk_connect, sparklog_home, tmp_path / "brokers", properties=properties) as running:
        yield running


def wait_until(agents: BrokerAgents, condition: Callable[[], Any], what: str) -> None:
    agents.wait_for(lambda: bool(condition()), _TIMEOUT_S, what, exited_is_failure=[1, 2])


def produce(cluster: sparklog.Cluster, topic: str, partition: int, ages_ms: list[int], per_batch: int = 10) -> None:
    """One request (one file) per batch, records timestamped ``now - age``."""
    now = int(time.time() * 1000)
    with cluster.producer(linger_ms=0) as producer:
        for b, age in enumerate(ages_ms):
            for i in range(per_batch):
                producer.send(topic, value=f"b{b}-{i}".encode(), partition=partition, timestamp_ms=now - age)
            producer.flush()


def live_files(cluster: sparklog.Cluster, topic: str) -> list[str]:
    table = cluster.replicas.leader_table(topic)
    return [f.path for f in table.files(table.snapshot())]


def log_start(cluster: sparklog.Cluster, topic: str, partition: int = 0) -> int:
    return cluster.partition_offsets(topic)[partition].log_start


def delta_log(agents: BrokerAgents, broker_id: int, topic: str) -> Path:
    return agents.log_dir(broker_id) / "topics" / topic / "_delta_log"


def retention_commits(cluster: sparklog.Cluster, topic: str, broker_id: int) -> list[dict[int, int]]:
    """The log-starts each RETENTION commit in ``broker_id``'s table of ``topic`` raised."""
    rows = topic_history(cluster.replicas.replica_table(topic, broker_id))
    return [
        {int(p): s for p, s in json.loads(json.loads(row["userMetadata"])["sparklog.log_starts"]).items()}
        for row in rows
        if row["operation"] == "RETENTION"
    ]


def agent_log(agents: BrokerAgents, broker_id: int) -> str:
    return agents.log_path(broker_id).read_text(encoding="utf-8", errors="replace")


def test_agent_removes_old_segments_by_itself_and_leaves_unlimited_topics_alone(
    cluster: sparklog.Cluster, agents: BrokerAgents
) -> None:
    """Topics in name order: a-old (retention.ms 1 h, history.retention.ms 1 s), b-unlimited
    (retention.ms -1), c-sentinel (retention.ms 1 h). b-unlimited is produced first; when
    c-sentinel, produced after a-old's log-start moved, loses a file, the agent has also
    checked b-unlimited after all of its records were there."""
    agents.start(1)
    cluster.create_topic("a-old", 1, config={"retention.ms": str(HOUR_MS), "history.retention.ms": "1000"})
    cluster.create_topic("b-unlimited", 1, config={"retention.ms": "-1", "retention.bytes": "-1"})
    cluster.create_topic("c-sentinel", 1, config={"retention.ms": str(HOUR_MS)})
    produce(cluster, "b-unlimited", 0, [10 * HOUR_MS, 3 * HOUR_MS, 0])
    unlimited_files = live_files(cluster, "b-unlimited")
    produce(cluster, "a-old", 0, [3 * HOUR_MS, 3 * HOUR_MS, 0])
    old_files = live_files(cluster, "a-old")

    wait_until(agents, lambda: log_start(cluster, "a-old") == 20, "a-old's log-start to reach 20 by itself")
    assert cluster.read("a-old", 0).column("offset").to_pylist() == list(range(20, 30))
    for path in old_files[:2]:
        assert os.path.exists(os.path.join(cluster.replicas.leader_table("a-old").root, path)), (
            "retention removes from the log; vacuum deletes"
        )
    assert "retention removed" in agent_log(agents, 1) and "of a-old-0; log-start" in agent_log(agents, 1)
    assert any(line.endswith("-> 20") for line in agent_log(agents, 1).splitlines() if "of a-old-0;" in line)

    # The Delta log step: a checkpoint, then commit files older than history.retention.ms deleted.
    wait_until(
        agents,
        lambda: (
            (delta_log(agents, 1, "a-old") / "_last_checkpoint").exists()
            and not (delta_log(agents, 1, "a-old") / f"{0:020d}.json").exists()
            and "checkpointed a-old at version" in agent_log(agents, 1)
        ),
        "a-old's first commit file to be cleaned up after a checkpoint, and the agent to say so",
    )
    assert "expired Delta log files deleted" in agent_log(agents, 1)

    produce(cluster, "c-sentinel", 0, [3 * HOUR_MS, 0])
    wait_until(agents, lambda: log_start(cluster, "c-sentinel") == 10, "c-sentinel's log-start to reach 10")
    assert cluster.partition_offsets("b-unlimited")[0] == (0, 30)
    assert live_files(cluster, "b-unlimited") == unlimited_files
    assert retention_commits(cluster, "b-unlimited", 1) == []
    assert "b-unlimited-0" not in agent_log(agents, 1)
    assert (delta_log(agents, 1, "b-unlimited") / "_last_checkpoint").exists(), "the log step runs there too"
    agents.stop(1)  # SIGTERM: the log manager's thread stops with the agent (exit code 0)


def test_a_failing_topic_is_logged_and_the_next_topic_goes_on(cluster: sparklog.Cluster, agents: BrokerAgents) -> None:
    agents.start(1)
    cluster.create_topic("a-broken", 1, config={"retention.ms": str(HOUR_MS)})
    cluster.create_topic("b-old", 1, config={"retention.ms": str(HOUR_MS)})
    shutil.rmtree(agents.log_dir(1) / "topics" / "a-broken")
    produce(cluster, "b-old", 0, [3 * HOUR_MS, 0])
    wait_until(agents, lambda: log_start(cluster, "b-old") == 10, "b-old's log-start to reach 10")
    lines = agent_log(agents, 1).splitlines()
    done = next(i for i, line in enumerate(lines) if "of b-old-0; log-start 0 -> 10" in line)
    failures = [i for i, line in enumerate(lines) if "retention check of topic a-broken failed" in line]
    assert failures and failures[0] < done, "\n".join(lines[-40:])
    assert "WARNING" in lines[failures[0]] and "a-broken" in lines[failures[0]]
    assert agents.running(1)


def test_two_agents_each_touch_only_the_partitions_they_lead(cluster: sparklog.Cluster, agents: BrokerAgents) -> None:
    agents.start(1, 2)
    cluster.create_topic("t", 2, config={"retention.ms": str(HOUR_MS)}, replica_assignment={0: [1, 2], 1: [2, 1]})
    wait_until(
        agents,
        lambda: all(p.leader >= 0 and sorted(p.isr) == [1, 2] for p in cluster.describe_topic("t").partitions),
        "t: leaders and full ISRs",
    )
    leaders = {p.partition: p.leader for p in cluster.describe_topic("t").partitions}
    assert leaders == {0: 1, 1: 2}
    for partition in (0, 1):
        produce(cluster, "t", partition, [3 * HOUR_MS, 3 * HOUR_MS, 0])
    wait_until(
        agents, lambda: cluster.partition_offsets("t") == {0: (20, 30), 1: (20, 30)}, "both log-starts to reach 20"
    )
    for broker, led in ((1, 0), (2, 1)):
        raised = retention_commits(cluster, "t", broker)
        assert raised, f"broker {broker} ran no retention on its table"
        assert all(set(commit) == {led} for commit in raised), (broker, raised)
        text = agent_log(agents, broker)
        assert f"of t-{led}; log-start" in text
        assert f"of t-{1 - led}; log-start" not in text, agents.logs([broker])


def test_bad_check_interval_fails_the_broker_start(zk_connect: str, sparklog_home: Path, tmp_path: Path) -> None:
    for bad in ("0", "soon"):
        properties = {"log.retention.check.interval.ms": bad}
        with BrokerAgents(zk_connect, sparklog_home, tmp_path / f"bad-{bad}", properties=properties) as agents:
            agents.start(1, wait=False)
            assert agents.wait_exited(1, _TIMEOUT_S) == 1
            assert agents.live() == []
            errors = [line for line in agent_log(agents, 1).splitlines() if line.startswith("Error:")]
            assert errors == [
                f"Error: Invalid value '{bad}' for configuration log.retention.check.interval.ms: "
                "allowed an integer >= 1"
            ]
