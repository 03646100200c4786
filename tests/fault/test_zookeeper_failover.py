"""A ZooKeeper failover within the session timeout is invisible to clients (issue 10).

On a real 3-server ensemble (:class:`sparklog.testing.ZooKeeperEnsemble`), two producer
processes (``acks=all`` and ``acks=1``; single sends and ``send_arrow`` requests) and a
consumer group of two member processes run while the ZooKeeper leader is killed with
SIGKILL, a new leader is elected and the killed server is restarted; then the new leader
hangs (SIGSTOP) until its followers depose it, and is resumed. A kill drops every client
connection at once, so only requests in flight at that instant fail; a hung leader makes
every write hang until the followers give up on it, so every busy client meets a lost
connection. Then:

* no send, poll or commit raised (coordination errors are retried inside the clients);
* every acknowledged record is stored exactly once, at its acknowledged offset, and every
  record sent was acknowledged (a batch committed before a coordination error is
  recognised by its producer sequence on retry, not appended again);
* the group kept consuming: committed offsets reach the high watermarks, and every stored
  record was polled by a member.

The other tests put one request of one client in flight at a hung server
(:func:`in_flight_at_hung_server`), for the places a lost connection used to escape: a
commit, a group member's sync, a write lease's release.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

import pytest

import sparklog
from sparklog.errors import ZooKeeperUnavailableError
from sparklog.metadata.group_member import GroupMember
from sparklog.metadata.lease import WriterLease
from sparklog.metadata.session import ZkSession
from sparklog.metadata.zkdata import writer_path
from sparklog.testing import ZooKeeperEnsemble
from tests.fault.workers import read_ack_log
from tests.fault.zk_failover_workers import consume_through_failover, produce_through_failover, read_lines
from tests.helpers import (
    Ack,
    assert_acks_stored,
    assert_acks_unique,
    assert_log_consistent,
    assert_values_unique,
    reaping,
    spawn_context,
)

TOPIC = "payments"
GROUP = "ledger"
PARTITIONS = 4
PRODUCER_ACKS = ("all", "1")
MEMBERS = 2
MEMBER_CONFIG = {"session_timeout_ms": 10_000}
PROGRESS = 40  # records each producer must get acknowledged in each phase


class Workers:
    """The producer and member processes of the test and their files."""

    def __init__(self, options: dict[str, str], tmp: Path, processes: list[BaseProcess]) -> None:
        self.tmp = tmp
        self.stop_producers, self.stop_members = tmp / "stop-producers", tmp / "stop-members"
        ctx = spawn_context()
        self.producers = [
            ctx.Process(
                target=produce_through_failover,
                args=(
                    options,
                    TOPIC,
                    f"p{i}",
                    acks,
                    str(self.ack_path(i)),
                    str(self.error_path(f"p{i}")),
                    str(self.stop_producers),
                ),
            )
            for i, acks in enumerate(PRODUCER_ACKS)
        ]
        self.members = [
            ctx.Process(
                target=consume_through_failover,
                args=(
                    options,
                    TOPIC,
                    GROUP,
                    str(self.journal_path(i)),
                    str(self.error_path(f"m{i}")),
                    str(self.stop_members),
                    MEMBER_CONFIG,
                ),
            )
            for i in range(MEMBERS)
        ]
        for process in self.members + self.producers:
            process.start()
            processes.append(process)

    def ack_path(self, i: int) -> Path:
        return self.tmp / f"acks-p{i}.log"

    def journal_path(self, i: int) -> Path:
        return self.tmp / f"journal-m{i}.log"

    def error_path(self, name: str) -> Path:
        return self.tmp / f"errors-{name}.log"

    def acked(self) -> list[int]:
        return [len(read_ack_log(self.ack_path(i))) for i in range(len(self.producers))]

    def commits(self) -> list[int]:
        return [sum(line.startswith("C ") for line in read_lines(self.journal_path(i))) for i in range(MEMBERS)]

    def errors(self) -> str:
        lines = [f"{path.name}: {line}" for path in sorted(self.tmp.glob("errors-*.log")) for line in read_lines(path)]
        return "\n".join(lines[:20]) + (f"\n... {len(lines) - 20} more" if len(lines) > 20 else "")

    def check_alive(self, producers: bool = True) -> None:
        for process in (self.producers if producers else []) + self.members:
            assert process.exitcode is None, f"worker {process.name} exited {process.exitcode}\n{self.errors()}"


@pytest.fixture
def ensemble(zk_ensemble: ZooKeeperEnsemble) -> Iterator[ZooKeeperEnsemble]:
    """The session's ensemble, whole again after the test (also when it failed midway)."""
    yield zk_ensemble
    for server_id in zk_ensemble.server_ids:
        if zk_ensemble.running(server_id):
            zk_ensemble.resume(server_id)  # SIGCONT: harmless unless paused
        else:
            zk_ensemble.start(server_id, wait=False)
    zk_ensemble.wait_serving(zk_ensemble.server_ids)


def cluster_options(ensemble: ZooKeeperEnsemble, tmp_path: Path, **extra: str) -> dict[str, str]:
    chroot = f"test-{uuid.uuid4().hex[:12]}"
    return {"zookeeper.connect": f"{ensemble.connect}/{chroot}", "sparklog.home": str(tmp_path / "home"), **extra}


def wait_progress(ensemble: ZooKeeperEnsemble, workers: Workers, what: str) -> None:
    """Every producer gets PROGRESS more acks and every member commits again."""
    acked, commits = workers.acked(), workers.commits()

    def progressed() -> bool:
        workers.check_alive()
        return all(n >= a + PROGRESS for n, a in zip(workers.acked(), acked, strict=False)) and all(
            n > c for n, c in zip(workers.commits(), commits, strict=False)
        )

    try:
        ensemble.wait_for(progressed, 90, f"producers and members to make progress {what}")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\nworker errors:\n{workers.errors()}") from None


def test_zookeeper_leader_failover_is_invisible(ensemble: ZooKeeperEnsemble, tmp_path: Path) -> None:
    options = cluster_options(ensemble, tmp_path)
    with sparklog.connect(options) as cluster, reaping(list[BaseProcess]()) as processes:
        cluster.create_topic(TOPIC, partitions=PARTITIONS)
        workers = Workers(options, tmp_path, processes)
        wait_progress(ensemble, workers, "before the failover")

        leader = ensemble.wait_leader()
        ensemble.kill(leader)
        successor = ensemble.wait_leader(60, other_than=[leader])
        wait_progress(ensemble, workers, f"after ZooKeeper leader {leader} was killed ({successor} leads now)")
        ensemble.start(leader)
        wait_progress(ensemble, workers, f"after ZooKeeper server {leader} was restarted")

        ensemble.pause(successor)
        third = ensemble.wait_leader(60, other_than=[successor])
        wait_progress(ensemble, workers, f"while ZooKeeper leader {successor} hangs ({third} leads now)")
        ensemble.resume(successor)
        ensemble.wait_serving(ensemble.server_ids)

        workers.stop_producers.touch()
        for process in workers.producers:
            process.join(120)
            assert process.exitcode == 0, f"producer {process.name} exited {process.exitcode}\n{workers.errors()}"
        high = cluster.high_watermarks(TOPIC)

        # The group catches up with everything produced, committing as it goes.
        def caught_up() -> bool:
            workers.check_alive(producers=False)
            return cluster.committed_offsets(GROUP, [TOPIC]) == {(TOPIC, p): o for p, o in high.items()}

        ensemble.wait_for(
            caught_up,
            90,
            f"group {GROUP} to commit up to the high watermarks {high}",
        )
        workers.stop_members.touch()
        for process in workers.members:
            process.join(60)
            assert process.exitcode == 0, f"member {process.name} exited {process.exitcode}\n{workers.errors()}"

        acks = [Ack(p, o, v) for i in range(len(PRODUCER_ACKS)) for p, o, v in read_ack_log(workers.ack_path(i))]
        assert_acks_unique(acks)
        records = assert_log_consistent(cluster, TOPIC)
        assert_values_unique(records)
        assert_acks_stored(records, acks)
        acked_values = {a.value for a in acks}
        unacked = [r for r in records if r.value not in acked_values]
        assert not unacked, (
            f"{len(unacked)} records stored whose send was not acknowledged (a retry would store them twice), "
            f"e.g. {unacked[:3]}\n{workers.errors()}"
        )
        assert workers.errors() == "", f"the ZooKeeper failover surfaced to the application:\n{workers.errors()}"
        polled = {
            (int(p), int(o))
            for i in range(MEMBERS)
            for _r, p, o in (line.split(" ") for line in read_lines(workers.journal_path(i)) if line.startswith("R "))
        }
        never = sorted({(r.partition, r.offset) for r in records} - polled)
        assert not never, f"{len(never)} stored records were never polled by the group, e.g. {never[:5]}"


# -- one request in flight at a hung server ------------------------------------------------------
SESSION_MS = "6000"  # a hung server is given up on after 2/3 of it: keeps these tests short


def in_flight_at_hung_server(ensemble: ZooKeeperEnsemble, session: ZkSession, operation: Callable[[], Any]) -> Any:
    """Run ``operation`` while the server ``session`` is connected to hangs: its request stays
    in flight until the client gives up on the server (connection lost, session kept). The
    server is then killed, so nothing it held is ever applied, and restarted. Returns what
    ``operation`` returned, or the exception it raised."""
    server = ensemble.server_of_session(session.session_id)
    assert server is not None, f"no ZooKeeper server lists session {session.session_id:#x}"
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(operation())
        except BaseException as exc:
            outcome.append(exc)

    ensemble.pause(server)
    thread = threading.Thread(target=run, daemon=True)
    try:
        thread.start()
        ensemble.wait_for(
            lambda: session.client.state != "CONNECTED" or bool(outcome),
            30,
            f"the client to give up on hung ZooKeeper server {server}",
        )
    finally:
        ensemble.kill(server)
    thread.join(60)
    assert outcome, "the operation did not return within 60 s of its ZooKeeper server's death"
    ensemble.start(server)
    return outcome[0]


def poll_until(consumer: Any, condition: Callable[[list[Any]], bool], what: str, timeout_s: float = 60) -> list[Any]:
    """Poll until ``condition(records polled so far)``; returns those records."""
    records: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while not condition(records):
        assert time.monotonic() < deadline, f"timed out after {timeout_s} s waiting for {what}"
        records += consumer.poll(50)
    return records


def test_a_commit_rides_through_its_zookeeper_server_hanging(ensemble: ZooKeeperEnsemble, tmp_path: Path) -> None:
    with sparklog.connect(
        cluster_options(ensemble, tmp_path, **{"zookeeper.session.timeout.ms": SESSION_MS})
    ) as cluster:
        cluster.create_topic("t", 2)
        with cluster.producer() as producer:
            for i in range(10):
                producer.send("t", f"r{i}".encode())
        consumer = cluster.consumer(
            "g", enable_auto_commit=False, auto_offset_reset="earliest", session_timeout_ms=int(SESSION_MS)
        )
        consumer.subscribe(["t"])
        poll_until(consumer, lambda got: len(got) >= 10, "10 records")
        positions = {tp: consumer.position(tp) for tp in consumer.assignment()}
        assert sum(positions.values()) == 10

        outcome = in_flight_at_hung_server(ensemble, cluster.replicas.zk, lambda: consumer.commit(positions))
        assert not isinstance(outcome, BaseException), f"the commit failed: {outcome!r}"
        assert cluster.committed_offsets("g", ["t"]) == positions
        consumer.close()


def test_a_group_member_keeps_its_membership_when_its_zookeeper_server_hangs(
    ensemble: ZooKeeperEnsemble, tmp_path: Path
) -> None:
    with sparklog.connect(
        cluster_options(ensemble, tmp_path, **{"zookeeper.session.timeout.ms": SESSION_MS})
    ) as cluster:
        cluster.create_topic("t", 2)
        consumer = cluster.consumer("g", enable_auto_commit=False, session_timeout_ms=int(SESSION_MS))
        consumer.subscribe(["t"])
        poll_until(consumer, lambda _: len(consumer.assignment()) == 2, "the assignment")
        member, before = consumer._member, consumer.group_metadata()  # white box: the member's session
        assert isinstance(member, GroupMember), member

        member.wakeup()  # the next poll reads the group state: in flight while the server hangs
        outcome = in_flight_at_hung_server(ensemble, member.zk, lambda: consumer.poll(0))
        assert not isinstance(outcome, BaseException), f"poll failed: {outcome!r}"
        assert consumer.assignment() == {("t", 0), ("t", 1)}, "the lost connection cost the member its partitions"
        # Once ZooKeeper answers, the member finds its session, znode and generation as they were.
        poll_until(consumer, lambda _: not member.changed.is_set(), "the member to sync with the group")
        assert consumer.group_metadata() == before
        assert consumer.assignment() == {("t", 0), ("t", 1)}
        consumer.close()


def test_a_lease_whose_release_lost_the_connection_is_renewed_not_waited_for(
    ensemble: ZooKeeperEnsemble, tmp_path: Path
) -> None:
    with sparklog.connect(
        cluster_options(ensemble, tmp_path, **{"zookeeper.session.timeout.ms": SESSION_MS})
    ) as cluster:
        cluster.create_topic("t", 1)
        lease = WriterLease(cluster.replicas.zk, "t", 0, "writer-a", lease_ms=60_000)
        first = lease.acquire(5_000)

        outcome = in_flight_at_hung_server(ensemble, cluster.replicas.zk, lease.release)
        assert isinstance(outcome, ZooKeeperUnavailableError), (
            f"expected the release to lose its connection, got {outcome!r}"
        )
        # The lease is still ours: taken again at once, same epoch, no epoch marker needed
        # (not after waiting out its 60 s expiry as if another writer had held it).
        record = cluster.replicas.zk.client.get(writer_path("t", 0))[0].decode()
        again = lease.acquire(2_000)
        assert (again.epoch, again.takeover) == (first.epoch, False), f"lease record before: {record}"
        lease.release()
