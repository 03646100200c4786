"""The commit rounds of a topic between its builder and its committer (DESIGN §15, §16).

A topic's builder hands each round it built to the topic's committer and goes on building
the next one; the rounds handed over and not yet taken back by the builder are *in flight*.
On a disk one round is in flight at a time: its files are written before it is handed over,
so a second one would only wait. On an object store a round is handed over while its
segments are still being PUT, and up to ``limit`` rounds are in flight, so a topic's
throughput is several rounds per store round trip instead of one
(:attr:`~sparklog.broker.round_pacing.RoundBounds.rounds_in_flight`).

Invariants:

* rounds are handed to the committer in the order they were built, and the builder takes
  them back (settles them) in that order, so requests keep their order;
* a round is built on the log as the rounds in flight before it will leave it
  (:meth:`RoundsInFlight.projected`), and committed only if each of its partitions' log
  ends where its files begin when its turn comes
  (:meth:`~sparklog.log.append.PreparedAppend.check`): behind a round that failed or must be
  built again, a round of the same partitions is built again after it, never committed out
  of place;
* at most ``limit`` rounds are in flight; waiting, taking over or releasing a write lease,
  and planning a Kafka transaction's round, happen only with none in flight (the builder
  settles them all first).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Literal

from sparklog.broker.pending_append import PendingAppend
from sparklog.broker.transactions.partition_txns import RoundPlan
from sparklog.config import Acks
from sparklog.log.append import LogView, PreparedAppend, ProjectedView
from sparklog.log.leader_log import LeaseSerials
from sparklog.log.table import TopicTable
from sparklog.metadata.zkdata import PartitionState
from sparklog.runtime.produce_request import TopicWriteSettings

__all__ = ["CommitRound", "RoundsInFlight", "Settled"]

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
    append_s: float  # files written (or their PUTs started); the committer adds the rest
    lease_serials: LeaseSerials  # the write-lease grants it was built under
    settled: Future[Settled] = field(default_factory=Future)


class RoundsInFlight:
    """Each topic's rounds in flight, oldest first. Used by the topics' builder threads only
    (a committer settles a round through its :attr:`CommitRound.settled` future)."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"rounds in flight must be at least 1, not {limit}")
        self.limit = limit
        self._rounds: dict[str, deque[CommitRound]] = {}

    def count(self, topic: str) -> int:
        return len(self._rounds.get(topic, ()))

    def oldest_settled(self, topic: str) -> bool:
        """Whether the oldest round in flight is settled (the builder may take it back)."""
        rounds = self._rounds.get(topic)
        return rounds is not None and len(rounds) > 0 and rounds[0].settled.done()

    def projected(self, topic: str, view: LogView) -> LogView:
        """``view`` (the log as committed) as the rounds in flight will leave it. Projecting
        a round that already committed changes nothing: a commit's app transactions carry
        absolute values (log ends, epochs)."""
        for round_ in self._rounds.get(topic, ()):
            view = ProjectedView(view, round_.prepared.transactions)
        return view

    def add(self, round_: CommitRound) -> None:
        self._rounds.setdefault(round_.topic, deque()).append(round_)

    def settle(self, topic: str, keep: int = 0) -> tuple[list[list[PendingAppend]], bool]:
        """Wait until at most ``keep`` rounds are in flight, taking back the oldest: the items
        of those that must be built again (a list per round, in order), and whether every
        round taken back committed."""
        rounds = self._rounds.get(topic)
        redo: list[list[PendingAppend]] = []
        committed = True
        while rounds and len(rounds) > keep:
            round_ = rounds.popleft()
            outcome = round_.settled.result()
            committed = committed and outcome == "committed"
            if outcome == "rebuild":
                redo.append([i for i in round_.items if not i.is_done])
        return [r for r in redo if r], committed

    def settle_done(self, topic: str) -> list[list[PendingAppend]]:
        """Take back the settled rounds at the front without waiting: :meth:`settle`'s items."""
        rounds = self._rounds.get(topic, deque())
        settled = next((n for n, r in enumerate(rounds) if not r.settled.done()), len(rounds))
        return self.settle(topic, keep=len(rounds) - settled)[0]
