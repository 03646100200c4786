"""Controller policies: leader election, ISR upkeep, high watermark, log reconciliation, rebalancing.

Pure policy (no I/O; imports neither Spark, kazoo nor deltalake).
Each function returns what to write; the caller bumps the leader epoch and writes the znode.

Invariants (tested in ``tests/unit/test_controller_policy.py``):

* a clean election never picks a replica that is not live or not in the ISR; only
  ``unclean=True`` may pick an out-of-sync replica, and the result says so;
* the leader stays in the ISR it leads (shrink never drops it, expand never needs it added);
* the high watermark never exceeds the log end of any ISR member;
* a follower truncated to ``truncation_offset`` holds a prefix of the leader's log, under the
  contract on the epoch history described there.

Replica, ISR and live-broker arguments are broker ids; orders matter where Kafka's do (the
assignment order decides elections, the ISR order is kept).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from sparklog.errors import PolicyError
from sparklog.model.topic import TopicPartition, partitions_by_topic
from sparklog.runtime.placement import RackAwareMode, assign_replicas

__all__ = [
    "EpochHistory",
    "LeaderElection",
    "append_epoch",
    "controlled_shutdown_leader",
    "elect_leader",
    "epoch_end_offset",
    "expand_isr",
    "generate_reassignment",
    "high_watermark",
    "preferred_leader_election",
    "preferred_leader_imbalance",
    "reassignment_leader",
    "replace_down_replicas",
    "shrink_isr",
    "truncation_offset",
]

EpochHistory = tuple[tuple[int, int], ...]
"""``((leader_epoch, start_offset), ...)`` ascending: the offset at which each epoch's records begin."""


@dataclass(frozen=True)
class LeaderElection:
    """Outcome of an election: the new leader, the ISR to write with it, and whether an
    out-of-sync replica was chosen (committed records may be lost: an unclean election)."""

    leader: int
    isr: tuple[int, ...]
    unclean: bool = False


# -- leader election -----------------------------------------------------------------------


def elect_leader(
    replicas: Sequence[int], isr: Sequence[int], live: Collection[int], *, unclean: bool
) -> LeaderElection | None:
    """Kafka's offline-partition election: the first replica in assignment order that is live and
    in the ISR; the new ISR is the live ISR members, order kept.

    With none, ``unclean`` elects the first live replica with ISR ``(leader,)``; otherwise None:
    the partition stays offline (leader -1) until an ISR member returns.
    """
    live_set, isr_set = set(live), set(isr)
    for broker in replicas:
        if broker in live_set and broker in isr_set:
            return LeaderElection(broker, tuple(r for r in isr if r in live_set))
    if unclean:
        for broker in replicas:
            if broker in live_set:
                return LeaderElection(broker, (broker,), unclean=True)
    return None


def replace_down_replicas(
    replicas: Sequence[int], live: Collection[int], candidates: Sequence[int], leaders: Mapping[int, int]
) -> list[int] | None:
    """Shared storage (DESIGN §16): the replicas of a partition none of whose replicas is live,
    each replaced by a live broker of ``candidates`` (brokers that serve the same table) that is
    not a replica yet, the one leading the fewest partitions first (``leaders``; ties by id),
    so the first of them leads and the partitions of a lost broker spread over the others. No
    data moves: every candidate's replica is the table itself. None: no candidate is live."""
    live_set = set(live)
    free = sorted((b for b in candidates if b in live_set and b not in replicas), key=lambda b: (leaders.get(b, 0), b))
    if not free:
        return None
    chosen: list[int] = []
    for broker in replicas:
        if broker in live_set:
            chosen.append(broker)
        elif free:
            chosen.append(free.pop(0))
    return list(dict.fromkeys(chosen))


def controlled_shutdown_leader(
    replicas: Sequence[int], isr: Sequence[int], live: Collection[int], shutting_down: Collection[int]
) -> LeaderElection | None:
    """Kafka's controlled-shutdown election: the first replica in assignment order that is live,
    in the ISR and not shutting down; the shutting-down brokers leave the ISR. None: no such
    replica, the partition keeps its leader until that broker goes away."""
    live_set, isr_set, leaving = set(live), set(isr), set(shutting_down)
    for broker in replicas:
        if broker in live_set and broker in isr_set and broker not in leaving:
            return LeaderElection(broker, tuple(r for r in isr if r not in leaving))
    return None


def preferred_leader_election(
    replicas: Sequence[int], isr: Sequence[int], live: Collection[int], current_leader: int
) -> LeaderElection | None:
    """Move leadership back to the preferred replica (``replicas[0]``) if it is live, in the ISR and
    not leading already; ISR unchanged. None: nothing to do or not possible now."""
    if not replicas:
        return None
    preferred = replicas[0]
    if preferred == current_leader or preferred not in set(live) or preferred not in set(isr):
        return None
    return LeaderElection(preferred, tuple(isr))


def reassignment_leader(
    target_replicas: Sequence[int], isr: Sequence[int], live: Collection[int], current_leader: int
) -> LeaderElection | None:
    """Leader when a reassignment switches to ``target_replicas``: the current leader if it is in
    the target, live and in the ISR (no needless move), else the first target replica that is
    live and in the ISR (Kafka's reassignment election). None: no target replica can lead yet.

    The returned ISR is the ISR restricted to the target, order kept: Kafka elects first and then
    drops the removed replicas from the ISR; both happen in this one step here.
    """
    target, live_set, isr_set = list(target_replicas), set(live), set(isr)
    if current_leader in target and current_leader in live_set and current_leader in isr_set:
        leader: int | None = current_leader
    else:
        leader = next((b for b in target if b in live_set and b in isr_set), None)
    if leader is None:
        return None
    return LeaderElection(leader, tuple(r for r in isr if r in set(target)))


# -- ISR and high watermark ----------------------------------------------------------------


def shrink_isr(
    leader: int,
    isr: Sequence[int],
    last_caught_up_ms: Mapping[int, int],
    now_ms: int,
    replica_lag_time_max_ms: int,
    *,
    log_end_offsets: Mapping[int, int] | None = None,
) -> tuple[int, ...]:
    """ISR without the followers that fell out of sync; the leader always stays, order kept.

    Kafka's rule: a follower is out of sync when ``now_ms - last_caught_up_ms[follower] >
    replica_lag_time_max_ms``, its last-caught-up time being the last time its log end reached
    the leader's. Given ``log_end_offsets``, a follower whose log end equals the leader's stays
    regardless (Kafka's ``isCaughtUp``: nothing to catch up with on an idle partition).

    Raises ValueError when the leader is not in the ISR or an ISR follower has no last-caught-up
    time: initialise it to the leader's election time, as Kafka does, rather than guess.
    """
    if leader not in isr:
        raise PolicyError(f"leader {leader} is not in ISR {list(isr)}: a leader always leads from its ISR")
    if replica_lag_time_max_ms < 0:
        raise PolicyError(f"replica.lag.time.max.ms must be >= 0, got {replica_lag_time_max_ms}")
    leader_end = None if log_end_offsets is None else log_end_offsets.get(leader)
    kept: list[int] = []
    for replica in isr:
        if replica == leader:
            kept.append(replica)
            continue
        if leader_end is not None and log_end_offsets is not None and log_end_offsets.get(replica) == leader_end:
            kept.append(replica)
            continue
        if replica not in last_caught_up_ms:
            raise PolicyError(
                f"ISR follower {replica} has no last-caught-up time; initialise it to the time leader "
                f"{leader} was elected"
            )
        if now_ms - last_caught_up_ms[replica] <= replica_lag_time_max_ms:
            kept.append(replica)
    return tuple(kept)


def expand_isr(
    leader: int,
    isr: Sequence[int],
    replicas: Sequence[int],
    live: Collection[int],
    log_end_offsets: Mapping[int, int],
    high_watermark: int,
    *,
    leader_epoch_start_offset: int | None = None,
) -> tuple[int, ...]:
    """ISR with the assigned, live followers that caught up rejoining.

    Kafka's rule: a follower rejoins when its log end is at least the high watermark; given
    ``leader_epoch_start_offset`` it must also have reached the start of the leader's epoch
    (Kafka's later guard, so a follower still holding another epoch's tail cannot rejoin).
    When someone rejoins the result is in assignment order (ISR members outside the assignment,
    e.g. mid-reassignment, follow in their old order); when nobody does, the ISR comes back
    unchanged, so ``new == old`` means there is nothing to write.
    """
    if leader not in isr:
        raise PolicyError(f"leader {leader} is not in ISR {list(isr)}: a leader always leads from its ISR")
    isr_set, live_set = set(isr), set(live)
    floor = high_watermark if leader_epoch_start_offset is None else max(high_watermark, leader_epoch_start_offset)
    joining = {
        r
        for r in replicas
        if r not in isr_set and r in live_set and r in log_end_offsets and log_end_offsets[r] >= floor
    }
    if not joining:
        return tuple(isr)
    assigned = set(replicas)
    ordered = [r for r in dict.fromkeys(replicas) if r in isr_set or r in joining]
    return tuple(ordered + [r for r in isr if r not in assigned])


def high_watermark(isr: Sequence[int], log_end_offsets: Mapping[int, int]) -> int:
    """The smallest log end among the ISR members: every record below it is on every in-sync
    replica. Keeping it monotonic (Kafka's leader only ever moves it forward) is the caller's job.
    Raises ValueError for an empty ISR or an ISR member whose log end is unknown."""
    if not isr:
        raise PolicyError("an empty ISR has no high watermark: the partition is offline")
    missing = [r for r in isr if r not in log_end_offsets]
    if missing:
        raise PolicyError(f"log end offset unknown for ISR member(s) {missing}; fetch them before computing the HW")
    return min(log_end_offsets[r] for r in isr)


# -- leader epochs and truncation (KIP-101 / KIP-279) ----------------------------------------


def append_epoch(history: Sequence[tuple[int, int]], epoch: int, start_offset: int) -> EpochHistory:
    """The history with ``epoch`` starting at ``start_offset`` (the new leader's log end) appended.

    Epochs strictly increase (ValueError otherwise). A start offset below earlier entries is
    legal: the new leader lacks those epochs' records (an in-sync follower may lag within
    replica.lag.time.max.ms). As Kafka's ``LeaderEpochFileCache.assign``, entries starting at or
    after ``start_offset`` are dropped, since no record of theirs survives in the new lineage;
    so start offsets in the result strictly increase.
    """
    entries = _checked_history(history)
    if epoch < 0 or start_offset < 0:
        raise PolicyError(f"leader epoch and start offset must be >= 0, got epoch {epoch} at offset {start_offset}")
    if entries and epoch <= entries[-1][0]:
        raise PolicyError(
            f"leader epoch {epoch} is not above the latest epoch {entries[-1][0]}; "
            "a new leader always gets a higher epoch"
        )
    kept = tuple(entry for entry in entries if entry[1] < start_offset)
    return (*kept, (epoch, start_offset))


def epoch_end_offset(history: Sequence[tuple[int, int]], epoch: int, log_end: int) -> tuple[int, int] | None:
    """Kafka's ``OffsetsForLeaderEpoch`` answer (``LeaderEpochFileCache.endOffsetFor``) from a log
    with this epoch history and log end: ``(largest epoch <= epoch, offset where it ends)``.

    The latest epoch ends at ``log_end``; an epoch older than the whole history ends where the
    history starts. None (Kafka's UNDEFINED) for an epoch newer than the latest or an empty history.
    """
    entries = _checked_history(history)
    if not entries or epoch > entries[-1][0]:
        return None
    if epoch == entries[-1][0]:
        return epoch, log_end
    higher = next(entry for entry in entries if entry[0] > epoch)
    floor = [entry for entry in entries if entry[0] <= epoch]
    return (floor[-1][0] if floor else epoch), higher[1]


def truncation_offset(
    follower_log_end: int,
    follower_last_epoch: int | None,
    epoch_start_offsets: Sequence[tuple[int, int]],
    *,
    follower_epoch_start_offsets: Sequence[tuple[int, int]] | None = None,
) -> int:
    """Offset a follower truncates its log to before copying from the leader (KIP-101/KIP-279).

    ``epoch_start_offsets`` is the leader's lineage: the epochs that have records in the leader's
    log and its current epoch, with their start offsets. The end of the follower's last epoch in
    that lineage is the start of the first later epoch (none later: the follower is in the current
    epoch and holds a prefix, nothing to truncate); the follower keeps
    ``min(follower_log_end, that end)``. So records the follower wrote as leader of an epoch that
    the next leader never received are dropped, and records beyond the follower's high watermark
    that the leader does hold are kept (KIP-101's two scenarios).

    Contract without ``follower_epoch_start_offsets``: the history records every epoch the
    controller issued, kept with :func:`append_epoch`, and each new leader had reconciled with
    its predecessor. Then an epoch missing from the history was dropped because a later epoch
    started at or before it, which bounds the follower's end of the floor epoch by the answer,
    so one lookup is exact. Give ``follower_epoch_start_offsets`` (the follower's own history)
    for Kafka's full KIP-279 exchange, exact also when the leader's lineage lacks the follower's
    epoch for other reasons (e.g. after an unclean election): where the leader answers with an
    older epoch, the follower's own end of that epoch bounds the result too, repeated until
    both sides agree on an epoch.

    ``follower_last_epoch`` None (empty log, or records without a known epoch): everything from
    the first recorded epoch on may diverge, so the follower keeps ``min(follower_log_end, start
    of the first epoch)`` and refetches the rest; records below the history's start predate it
    and are taken as shared (for an empty log this truncates nothing). Kafka falls back to the
    high watermark here; the history's start is the safe equivalent without one.

    Raises ValueError when the follower's epoch is newer than every epoch in the history (the
    history is stale or not the leader's: reload it) or the inputs are inconsistent.
    """
    if follower_log_end < 0:
        raise PolicyError(f"follower log end offset must be >= 0, got {follower_log_end}")
    leader_history = _checked_history(epoch_start_offsets)
    if follower_epoch_start_offsets is None:
        if follower_last_epoch is None:
            return min(follower_log_end, leader_history[0][1]) if leader_history else follower_log_end
        return min(follower_log_end, _leader_answer(leader_history, follower_last_epoch)[1])
    own = list(_checked_history(follower_epoch_start_offsets))
    own_last = own[-1][0] if own else None
    if own_last != follower_last_epoch:
        raise PolicyError(
            f"follower_last_epoch {follower_last_epoch} differs from the latest epoch {own_last} of the "
            "follower's own epoch history"
        )
    log_end = follower_log_end
    while own:
        leader_epoch, leader_end = _leader_answer(leader_history, own[-1][0])
        follower_answer = epoch_end_offset(own, leader_epoch, log_end)
        assert follower_answer is not None  # leader_epoch <= own latest epoch, so it is defined
        follower_epoch, follower_end = follower_answer
        if follower_epoch == leader_epoch:
            return min(log_end, leader_end, follower_end)
        # The follower lacks the leader's epoch: cut back to the end of its own older epoch and ask
        # again with that one (Kafka's intermediate truncation); own epochs strictly shrink.
        log_end = min(log_end, follower_end)
        own = [entry for entry in own if entry[1] < log_end]
    return min(log_end, leader_history[0][1]) if leader_history else log_end


def _leader_answer(leader_history: EpochHistory, epoch: int) -> tuple[int, int]:
    """The leader's ``(epoch, end offset)`` for the follower's epoch; its own log end is unknown
    here, so the current epoch ends at 'infinity' (the follower holds a prefix of it)."""
    answer = epoch_end_offset(leader_history, epoch, _NO_END)
    if answer is None:
        latest = leader_history[-1][0] if leader_history else None
        raise PolicyError(
            f"follower epoch {epoch} is newer than the leader's latest epoch {latest}: the epoch history "
            "is stale or not the current leader's; reload it before truncating"
        )
    return answer


_NO_END = 2**63 - 1  # larger than any offset (offsets are bigint)


def _checked_history(history: Sequence[tuple[int, int]]) -> EpochHistory:
    entries = tuple((int(epoch), int(start)) for epoch, start in history)
    for (epoch, start), (next_epoch, next_start) in itertools.pairwise(entries):
        if next_epoch <= epoch or next_start < start:
            raise PolicyError(
                f"epoch history must have strictly increasing epochs and non-decreasing start offsets, "
                f"got ({epoch}, {start}) then ({next_epoch}, {next_start})"
            )
    return entries


# -- rebalancing and reassignment --------------------------------------------------------------


def preferred_leader_imbalance(
    assignments: Mapping[TopicPartition, Sequence[int]],
    leaders: Mapping[TopicPartition, int],
    imbalance_percentage: int = 10,
) -> dict[int, list[TopicPartition]]:
    """Kafka's auto leader rebalance check: preferred broker -> its partitions to move back.

    For each broker that is some partitions' preferred replica (first in the assignment), the
    imbalance is the share of those partitions led by another broker (or by none, leader -1);
    partitions without known leadership are not counted. Brokers whose imbalance exceeds
    ``leader.imbalance.per.broker.percentage`` get their not-led partitions listed (sorted).
    Run :func:`preferred_leader_election` on each: it skips those whose preferred replica cannot
    lead now (Kafka's ``canPreferredReplicaBeLeader``).
    """
    if imbalance_percentage < 0:
        raise PolicyError(f"leader.imbalance.per.broker.percentage must be >= 0, got {imbalance_percentage}")
    by_preferred: dict[int, list[TopicPartition]] = {}
    for tp, replicas in assignments.items():
        if replicas:
            by_preferred.setdefault(replicas[0], []).append(tp)
    result: dict[int, list[TopicPartition]] = {}
    for broker in sorted(by_preferred):
        partitions = by_preferred[broker]
        not_led = sorted(tp for tp in partitions if tp in leaders and leaders[tp] != broker)
        # Integer form of Kafka's notLed / total > percentage / 100, free of float rounding.
        if not_led and len(not_led) * 100 > imbalance_percentage * len(partitions):
            result[broker] = not_led
    return result


def generate_reassignment(
    current: Mapping[TopicPartition, Sequence[int]],
    broker_ids: Sequence[int],
    *,
    broker_racks: Mapping[int, str | None] | None = None,
    rack_aware_mode: RackAwareMode = "enforced",
    rng: random.Random | None = None,
) -> dict[TopicPartition, list[int]]:
    """A fresh placement of the given partitions over ``broker_ids`` (kafka-reassign-partitions
    ``--generate``): per topic, :func:`assign_replicas` with that topic's replication factor (of
    its lowest listed partition, as Kafka takes one partition's) and a random start index and
    shift per topic, drawn from ``rng`` (topics in name order) so a seeded ``rng`` reproduces it.
    Partition ids keep their place in the round robin (partition ``p`` is ``p``-th), so the whole
    topic gets exactly Kafka's layout.
    """
    draw = rng if rng is not None else random.Random()
    brokers = sorted(set(broker_ids))
    by_topic = partitions_by_topic(current)
    proposed: dict[TopicPartition, list[int]] = {}
    for topic in sorted(by_topic):
        partitions = sorted(by_topic[topic])
        rf = len(current[(topic, partitions[0])])
        start = draw.randrange(len(brokers)) if brokers else 0
        shift = draw.randrange(len(brokers)) if brokers else 0
        placed = assign_replicas(
            brokers,
            partitions[-1] + 1,
            rf,
            start_index=start,
            replica_shift=shift,
            broker_racks=broker_racks,
            rack_aware_mode=rack_aware_mode,
        )
        for partition in partitions:
            proposed[(topic, partition)] = placed[partition]
    return proposed
