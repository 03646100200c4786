"""A commit round as the leader's appender hands it from its builder to its committer
(:mod:`sparklog.broker.leader_appender`, DESIGN §14, §15).

Invariants: a round's items are in commit order, and its :attr:`CommitRound.settled` future
is set once, by the committer, to how the round ended: ``committed`` (answered, or waiting
for in-sync replicas), ``failed`` (its items answered with the error) or ``rebuild`` (the
log moved under it: nothing of it was committed, its items are built again).
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Literal

from sparklog.broker.pending_append import PendingAppend
from sparklog.broker.transactions.partition_txns import RoundPlan
from sparklog.config import Acks
from sparklog.log.append import PreparedAppend
from sparklog.log.leader_log import LeaseSerials
from sparklog.log.table import TopicTable
from sparklog.metadata.zkdata import PartitionState
from sparklog.runtime.produce_request import TopicWriteSettings

__all__ = ["CommitRound", "Settled"]

Settled = Literal["committed", "failed", "rebuild"]


@dataclass(eq=False)
class CommitRound:
    """A built round: its items (in commit order), its files and commit, how to answer it."""

    topic: str
    table: TopicTable
    items: list[PendingAppend]
    plan: RoundPlan[PendingAppend]
    prepared: PreparedAppend
    settings: TopicWriteSettings
    states: Mapping[int, PartitionState]  # of the round's partitions, as built
    acks: Acks
    followers: bool  # acks=all waits for in-sync followers
    started_s: float
    timeout_ms: int
    append_s: float  # files written; the committer adds fsync and commit
    lease_serials: LeaseSerials  # the write-lease grants it was built under
    settled: Future[Settled] = field(default_factory=Future)
