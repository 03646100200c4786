"""Kafka's consumer group protocol (KIP-848) across a coordinator failover (DESIGN §8): the
coordinator's broker killed -9 while two Java consumers (``group.protocol=consumer``) consume
a topic whose partitions it does not hold, or a third of which it leads (those move too).

The new leader of the group's ``__consumer_offsets`` partition restores the members the old
coordinator published, holding their partitions; their heartbeats are fenced, they release
everything and rejoin with epoch 0, and only then are partitions handed out again: no partition
has two owners at any moment, no record is lost, and consumption carries on from the commits.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import sparklog
from sparklog.testing import BrokerAgents
from tests.helpers import wait_until
from tests.wire.conftest import replicated_offsets_brokers, transaction_coordinator
from tests.wire.test_consumer_protocol_groups import (
    GROUP,
    PROPERTIES,
    TOPIC,
    Member,
    assert_one_owner_at_a_time,
    produce,
    start_member,
)

PARTITIONS = 6


@pytest.fixture
def three_brokers(zk_connect: str, sparklog_home: Path, tmp_path: Path) -> Iterator[BrokerAgents]:
    with replicated_offsets_brokers(zk_connect, sparklog_home, tmp_path, PROPERTIES) as agents:
        yield agents


@pytest.mark.parametrize("leaders", ["elsewhere", "with-the-coordinator"])
def test_coordinator_killed_members_rejoin_without_two_owners(
    three_brokers: BrokerAgents, cluster: sparklog.Cluster, tmp_path: Path, leaders: str
) -> None:
    agents = three_brokers
    bootstrap = agents.bootstrap_servers
    # The coordinator is the leader of the group's offsets partition. "elsewhere": the topic's
    # partitions live on the two other brokers, so only the coordinator fails over;
    # "with-the-coordinator": it leads a third of them too, which move to their second replica
    # at the same time (the members validate their positions with the new leaders,
    # OffsetForLeaderEpoch).
    cluster.groups.offsets_table()
    coordinator = transaction_coordinator(cluster, GROUP)
    others = [b for b in (1, 2, 3) if b != coordinator]
    if leaders == "elsewhere":
        placement = {p: others if p % 2 else others[::-1] for p in range(PARTITIONS)}
    else:
        brokers = [coordinator, *others]
        placement = {p: [brokers[p % 3], brokers[(p + 1) % 3]] for p in range(PARTITIONS)}
    cluster.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=2, replica_assignment=placement)
    wait_until(
        lambda: (
            [p.leader for p in cluster.describe_topic(TOPIC).partitions] == [placement[p][0] for p in range(PARTITIONS)]
        ),
        "leaders",
    )
    sent = produce(bootstrap, 0, 300)
    members: list[Member] = []
    try:
        first = start_member(members, bootstrap, "member-a", tmp_path)
        second = start_member(members, bootstrap, "member-b", tmp_path)
        everything = {f"{TOPIC}-{p}" for p in range(PARTITIONS)}

        def shared() -> bool:
            return bool(first.current()) and bool(second.current()) and first.current() | second.current() == everything

        def seen() -> set[str]:
            return {v for m in members for _, _, v in m.consumed()}

        wait_until(shared, "two members share the partitions", timeout_s=120)
        wait_until(lambda: sent <= seen(), "the first records consumed", timeout_s=90)
        assert cluster.describe_group(GROUP).coordinator == coordinator
        agents.kill(coordinator)
        sent |= produce(bootstrap, 300, 300)
        wait_until(lambda: sent <= seen(), "every record consumed after the failover", timeout_s=120)
        wait_until(shared, "the members share the partitions again", timeout_s=120)
        assert_one_owner_at_a_time(members)
        # They were fenced by the new coordinator (their partitions lost) and rejoined.
        assert all(any(words[1] == "LOST" for words in m.lines()) for m in members), "both rejoined"
        assert cluster.describe_group(GROUP).coordinator != coordinator
    finally:
        for member in members:
            if member.process.poll() is None:
                member.process.kill()
                member.process.wait(30)
