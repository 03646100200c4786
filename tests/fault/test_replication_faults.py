"""Kafka's ReplicationTest, on sparklog: 3 broker agent processes (separate log dirs), a
replication-factor-3 topic with min.insync.replicas=2, a producer process sending with
acks=all the whole time, while the leader's broker is stopped cleanly, killed -9, bounced 5
times, or the controller is killed. At the end every acknowledged record is present exactly
once, and all replicas hold identical records up to the high watermark (invariant 9).

Also: 2 of 3 brokers down refuses produces (nothing appended) until one returns; a paused
leader cannot commit under its old epoch; unclean election off never elects a stale replica,
on it does and says so.
"""

from __future__ import annotations

import multiprocessing
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.recipe.watchers import DataWatch

import sparklog
from sparklog.admin.partitions import elect_preferred_leaders
from sparklog.errors import LeaderNotAvailableError, NotEnoughReplicasError, NotLeaderError
from sparklog.log.append import append
from sparklog.log.reader import read_ranges
from sparklog.log.table import TopicTable
from sparklog.metadata import zkdata
from sparklog.metadata.zkdata import PartitionState
from sparklog.model.records import records_to_arrow
from sparklog.testing import BrokerAgents
from tests.fault.workers import produce_until_killed, read_ack_log
from tests.helpers import send_signal

TOPIC = "replicated"
PARTITIONS = 2


@pytest.fixture
def agents(zk_connect: str, sparklog_home: Path, tmp_path: Path) -> Iterator[BrokerAgents]:
    with BrokerAgents(zk_connect, sparklog_home, tmp_path / "brokers", replica_lag_time_max_ms=3_000) as running:
        running.start(1, 2, 3)
        yield running


def create_topic(cluster: sparklog.Cluster, agents: BrokerAgents, topic: str = TOPIC, **configs: str) -> None:
    cluster.create_topic(topic, PARTITIONS, replication_factor=3, config={"min.insync.replicas": "2", **configs})
    agents.wait_controller()


class Producer:
    """A child process producing with acks=all until killed; acks are logged to a file."""

    def __init__(self, cluster_options: dict[str, str], tmp_path: Path, topic: str = TOPIC) -> None:
        self.ack_path = tmp_path / f"acks-{topic}.log"
        ready = tmp_path / f"ready-{topic}"
        context = multiprocessing.get_context("spawn")
        self.process = context.Process(
            target=produce_until_killed, args=(cluster_options, topic, "r", str(self.ack_path), str(ready), 10_000)
        )
        self.process.start()
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert self.process.is_alive() and time.monotonic() < deadline, "the producer did not start"
            time.sleep(0.05)

    def acked(self) -> int:
        return len(read_ack_log(self.ack_path))

    def wait_acks(self, more: int, timeout_s: float = 60) -> None:
        target = self.acked() + more
        deadline = time.monotonic() + timeout_s
        while self.acked() < target:
            assert self.process.is_alive(), "the producer process died"
            assert time.monotonic() < deadline, f"the producer made no progress ({self.acked()} acks, wanted {target})"
            time.sleep(0.05)

    def kill(self) -> list[tuple[int, int, bytes]]:
        send_signal(self.process, signal.SIGKILL)
        self.process.join(10)
        return read_ack_log(self.ack_path)


def leader_of(cluster: sparklog.Cluster, partition: int = 0, topic: str = TOPIC) -> int:
    return cluster.replicas.states(topic, [partition])[partition].leader


def replica_records(
    cluster: sparklog.Cluster, broker: int, partition: int, end: int, topic: str = TOPIC
) -> list[tuple[int, bytes]]:
    table = cluster.replicas.replica_table(topic, broker)
    got = read_ranges(table, table.snapshot(), {partition: (0, end)})
    return list(zip(got.column("offset").to_pylist(), got.column("value").to_pylist(), strict=False))


def assert_replicated_exactly_once(
    cluster: sparklog.Cluster, agents: BrokerAgents, acked: list[tuple[int, int, bytes]]
) -> None:
    """Every ack is in the log once at its offset; with all brokers back, replicas agree below the HW."""
    agents.wait_for(
        lambda: all(sorted(s.isr) == [1, 2, 3] for s in cluster.replicas.states(TOPIC).values()), 60, "a full ISR again"
    )
    records = cluster.read(TOPIC)
    values = Counter(records.column("value").to_pylist())
    duplicates = {v: n for v, n in values.items() if n > 1}
    assert not duplicates, f"records stored more than once: {list(duplicates)[:10]}"
    where = dict(
        zip(
            records.column("value").to_pylist(),
            zip(records.column("partition").to_pylist(), records.column("offset").to_pylist(), strict=False),
            strict=False,
        )
    )
    missing = [(p, o, v) for p, o, v in acked if where.get(v) != (p, o)]
    assert not missing, f"{len(missing)} acknowledged records lost or moved, e.g. {missing[:5]}\n{agents.logs()}"
    for partition, hw in cluster.high_watermarks(TOPIC).items():
        copies = {b: replica_records(cluster, b, partition, hw) for b in (1, 2, 3)}
        assert copies[1] == copies[2] == copies[3], f"replicas of {TOPIC}-{partition} differ below the HW {hw}"
        assert [o for o, _v in copies[1]] == list(range(hw)), "offsets contiguous"


@pytest.mark.parametrize("fault", ["stop", "kill", "bounce", "kill-controller"])
def test_acked_records_survive_leader_failures(
    fault: str, cluster: sparklog.Cluster, cluster_options: dict[str, str], agents: BrokerAgents, tmp_path: Path
) -> None:
    create_topic(cluster, agents)
    producer = Producer(cluster_options, tmp_path)
    producer.wait_acks(20)
    if fault == "kill-controller":
        victims = [agents.wait_controller()]
    else:
        victims = [leader_of(cluster)] if fault != "bounce" else []
    if fault == "stop":
        agents.stop(victims[0])
    elif fault in ("kill", "kill-controller"):
        agents.kill(victims[0])
    else:
        for _ in range(5):
            leader = leader_of(cluster)
            agents.kill(leader)
            agents.wait_for(lambda: leader_of(cluster) not in (leader, -1), 30, "a new leader")
            producer.wait_acks(10)
            agents.start(leader)
    if fault != "bounce":
        if fault == "kill-controller":
            agents.wait_for(lambda: agents.controller() not in (None, victims[0]), 30, "a new controller")
        else:
            agents.wait_for(lambda: leader_of(cluster) not in (victims[0], -1), 30, "a new leader")
        producer.wait_acks(20)
        agents.start(victims[0])
    producer.wait_acks(20)
    acked = producer.kill()
    assert_replicated_exactly_once(cluster, agents, acked)


def test_two_of_three_down_refuses_produces_until_one_returns(cluster: sparklog.Cluster, agents: BrokerAgents) -> None:
    create_topic(cluster, agents, "two-down")
    with cluster.producer(acks="all", linger_ms=0) as producer:
        producer.send("two-down", value=b"before", partition=0).result(timeout=60)
    leader = leader_of(cluster, 0, "two-down")
    down = [b for b in (1, 2, 3) if b != leader]
    for broker in down:
        agents.kill(broker)
    agents.wait_for(
        lambda: cluster.replicas.states("two-down", [0])[0].isr == [leader], 30, "the ISR shrinking to the leader"
    )
    table = cluster.replicas.replica_table("two-down", leader)
    end = table.log_end(table.snapshot(), 0)
    with cluster.producer(acks="all", linger_ms=0, delivery_timeout_ms=1_000) as producer:
        with pytest.raises(NotEnoughReplicasError, match=r"fewer than min.insync.replicas=2"):
            producer.send("two-down", value=b"refused", partition=0).result(timeout=60)
    assert table.log_end(table.snapshot(), 0) == end, "nothing appended"
    agents.start(down[0])
    with cluster.producer(acks="all", linger_ms=0) as producer:  # retried until the replica is back in the ISR
        producer.send("two-down", value=b"after", partition=0).result(timeout=60)
    assert [v for _o, v in replica_records(cluster, down[0], 0, 2, "two-down")] == [b"before", b"after"]


class FirstSight:
    """The replicas as they were the instant a new leader of ``topic``-``partition`` became
    visible in ZooKeeper: a watch on the partition state, at the first state naming a leader
    other than ``old_leader`` (and not -1), notes every other replica's newest Delta version
    and tries an append of ``old_epoch`` on the old leader's replica. It runs on the watching
    client's event thread, as soon as ZooKeeper notifies, so whatever the controller does
    after publishing the leader has not happened yet."""

    def __init__(self, cluster: sparklog.Cluster, topic: str, partition: int, old_leader: int, old_epoch: int) -> None:
        self.state: PartitionState | None = None
        self.versions: dict[int, int] = {}  # replica -> its newest commit at that instant
        self.append_error: BaseException | None = None
        self.failure: BaseException | None = None  # the observation itself broke
        self._seen = threading.Event()
        path = zkdata.partition_state_path(topic, partition)
        replicas = cluster.replicas.metadata.assignment(topic)[0].replicas(partition)

        def on_change(data: bytes | None, _stat: object) -> bool | None:
            if self._seen.is_set() or data is None:
                return None
            state = PartitionState.decode(data, path)
            if state.leader in (old_leader, -1):
                return None
            try:
                self.versions = {
                    b: newest_commit(cluster.replicas.replica_table(topic, b)) for b in replicas if b != state.leader
                }
                batch = records_to_arrow([None], [b"zombie"], [int(time.time() * 1000)], [None])
                try:
                    append(
                        cluster.replicas.replica_table(topic, old_leader),
                        {partition: 1_000},
                        {partition: batch},
                        leader_epochs={partition: old_epoch},
                    )
                except BaseException as exc:
                    self.append_error = exc
            except BaseException as exc:
                self.failure = exc
            self.state = state
            self._seen.set()
            return False

        DataWatch(cluster.replicas.zk.client, path, on_change)

    def wait(self, timeout_s: float) -> PartitionState:
        assert self._seen.wait(timeout_s), f"no new leader became visible within {timeout_s} s"
        if self.failure is not None:
            raise AssertionError(f"observing the new leader failed: {self.failure!r}") from self.failure
        assert self.state is not None
        return self.state


def newest_commit(table: TopicTable) -> int:
    log_dir = Path(table.root, "_delta_log")
    return max(int(p.name[:20]) for p in log_dir.iterdir() if p.name.endswith(".json") and p.name[:20].isdigit())


def assert_fenced_when_visible(
    cluster: sparklog.Cluster, sight: FirstSight, topic: str, old_leader: int, old_epoch: int
) -> None:
    new = sight.wait(30)
    for broker, version in sorted(sight.versions.items()):
        fenced = TopicTable.fenced_leader_epoch(cluster.replicas.replica_table(topic, broker).snapshot(version), 0)
        assert fenced >= new.leader_epoch, (
            f"{topic}-0: broker {new.leader} became visible as leader at epoch {new.leader_epoch} while the replica on "
            f"broker {broker} (old leader {old_leader}) was fenced only at epoch {fenced} (its version {version}): "
            "it still accepted writes of the old epoch"
        )
    assert isinstance(sight.append_error, NotLeaderError), (
        f"an append of the old epoch {old_epoch} to the old leader {old_leader} at the moment leader {new.leader} "
        f"became visible should be refused, got {sight.append_error!r}"
    )
    assert "leadership moved" in str(sight.append_error)


def test_paused_leader_cannot_commit_under_its_old_epoch(cluster: sparklog.Cluster, agents: BrokerAgents) -> None:
    """Never two replicas accepting writes: when the new leader becomes visible, every other
    replica (the paused old leader included) is already fenced at the new epoch."""
    create_topic(cluster, agents, "paused")
    with cluster.producer(acks="all", linger_ms=0) as producer:
        producer.send("paused", value=b"a", partition=0).result(timeout=60)
    state = cluster.replicas.states("paused", [0])[0]
    old_leader, old_epoch = state.leader, state.leader_epoch
    sight = FirstSight(cluster, "paused", 0, old_leader, old_epoch)
    agents.pause(old_leader)
    assert_fenced_when_visible(cluster, sight, "paused", old_leader, old_epoch)
    agents.resume(old_leader)
    table = cluster.replicas.replica_table("paused", old_leader)
    batch = records_to_arrow([None], [b"zombie"], [int(time.time() * 1000)], [None])
    with pytest.raises(NotLeaderError, match="leadership moved"):
        append(table, {0: 1_000}, {0: batch}, leader_epochs={0: old_epoch})
    with cluster.producer(acks="all", linger_ms=0) as producer:
        producer.send("paused", value=b"b", partition=0).result(timeout=60)
    agents.wait_for(
        lambda: sorted(cluster.replicas.states("paused", [0])[0].isr) == [1, 2, 3], 60, "the old leader back in sync"
    )
    assert [v for _o, v in replica_records(cluster, old_leader, 0, 2, "paused")] == [b"a", b"b"]


def test_preferred_election_fences_the_live_leader_before_publishing(
    cluster: sparklog.Cluster, cluster_options: dict[str, str], agents: BrokerAgents, tmp_path: Path
) -> None:
    """The same at a preferred-leader election, where the old leader is live and a producer
    keeps writing to it: no instant at which both it and the new leader take writes."""
    create_topic(cluster, agents)
    preferred = cluster.replicas.metadata.assignment(TOPIC)[0].replicas(0)[0]
    agents.stop(preferred)  # its partitions move to another replica
    agents.wait_for(lambda: leader_of(cluster) not in (preferred, -1), 30, "a new leader")
    agents.start(preferred)
    agents.wait_for(
        lambda: preferred in cluster.replicas.states(TOPIC, [0])[0].isr, 60, "the preferred replica in sync"
    )
    producer = Producer(cluster_options, tmp_path)
    producer.wait_acks(20)
    state = cluster.replicas.states(TOPIC, [0])[0]
    sight = FirstSight(cluster, TOPIC, 0, state.leader, state.leader_epoch)
    assert elect_preferred_leaders(cluster.replicas, [(TOPIC, 0)])[(TOPIC, 0)] == "elected"
    assert_fenced_when_visible(cluster, sight, TOPIC, state.leader, state.leader_epoch)
    producer.wait_acks(20)
    assert_replicated_exactly_once(cluster, agents, producer.kill())


def controller_ticks(cluster: sparklog.Cluster, topic: str, ticks: int) -> None:
    """Return after the controller ran ``ticks`` whole ticks from now: a preferred-election
    request (for ``topic``-0, already led by its preferred replica: a no-op) is taken in the
    admin step that ends a tick, after every partition of that tick was looked at."""
    for _ in range(ticks):
        assert elect_preferred_leaders(cluster.replicas, [(topic, 0)]) == {(topic, 0): "already"}


def test_unclean_election_only_when_enabled_and_reported(cluster: sparklog.Cluster, agents: BrokerAgents) -> None:
    create_topic(cluster, agents, "unclean")
    leader = leader_of(cluster, 0, "unclean")
    stale = next(b for b in (1, 2, 3) if b != leader)
    agents.stop(stale)
    with cluster.producer(acks="all", linger_ms=0) as producer:
        for i in range(5):
            producer.send("unclean", value=b"v%d" % i, partition=0).result(timeout=60)
    survivors = [b for b in (1, 2, 3) if b != stale]
    for broker in survivors:
        agents.kill(broker)
    agents.wait_not_live(survivors)
    agents.start(stale)
    agents.wait_for(lambda: agents.controller() == stale, 30, "the stale broker's agent as controller")
    agents.wait_for(lambda: leader_of(cluster, 0, "unclean") == -1, 30, "the partition offline")
    cluster.create_topic("ticks", 1, replication_factor=1)
    controller_ticks(cluster, "ticks", 2)  # each looked at the offline partition with the stale broker live
    state = cluster.replicas.states("unclean", [0])[0]
    assert state.leader == -1, f"a stale replica must not be elected with unclean election off: {state}"
    with pytest.raises(LeaderNotAvailableError):
        cluster.replicas.leader("unclean", 0)
    cluster.alter_topic_config("unclean", set={"unclean.leader.election.enable": "true"})
    agents.wait_for(lambda: leader_of(cluster, 0, "unclean") == stale, 30, "the unclean election")
    # the controller logs once its state write is acknowledged, which may be after we saw the leader
    controller_log = Path(agents.log_path(agents.wait_controller()))
    agents.wait_for(lambda: "UNCLEAN leader election" in controller_log.read_text(), 10, "the UNCLEAN election logged")
    with cluster.producer(acks="1", linger_ms=0) as producer:
        producer.send("unclean", value=b"after", partition=0).result(timeout=60)
