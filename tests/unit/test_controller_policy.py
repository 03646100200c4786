"""Controller policies: elections, ISR upkeep, high watermark, epoch reconciliation, rebalancing."""

from __future__ import annotations

import ast
import random
from collections import Counter
from pathlib import Path

import pytest

from sparklog.errors import InvalidReplicationFactorError
from sparklog.runtime.placement import assign_replicas
from sparklog.runtime.policy import (
    LeaderElection,
    append_epoch,
    controlled_shutdown_leader,
    elect_leader,
    epoch_end_offset,
    expand_isr,
    generate_reassignment,
    high_watermark,
    preferred_leader_election,
    preferred_leader_imbalance,
    reassignment_leader,
    replace_down_replicas,
    shrink_isr,
    truncation_offset,
)

POLICY = Path(__file__).resolve().parents[2] / "sparklog" / "runtime" / "policy.py"


def test_policy_module_is_pure() -> None:
    roots: set[str] = set()
    for node in ast.walk(ast.parse(POLICY.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    engines = roots & {"pyspark", "kazoo", "deltalake", "pyarrow", "os", "socket", "time"}
    assert not engines, f"runtime/policy.py must stay pure, imports {sorted(engines)}"


# -- elections ---------------------------------------------------------------------------


def test_elect_leader_first_live_isr_replica_in_assignment_order() -> None:
    assert elect_leader([3, 1, 2], [2, 1, 3], {1, 2}, unclean=False) == LeaderElection(1, (2, 1))
    assert elect_leader([3, 1, 2], [2, 1, 3], {1, 2, 3}, unclean=False) == LeaderElection(3, (2, 1, 3))


def test_elect_leader_offline_without_unclean() -> None:
    assert elect_leader([1, 2, 3], [1], {2, 3}, unclean=False) is None
    assert elect_leader([1, 2, 3], [], {1, 2, 3}, unclean=False) is None


def test_elect_leader_unclean_picks_first_live_replica() -> None:
    got = elect_leader([1, 2, 3], [1], {3, 2}, unclean=True)
    assert got == LeaderElection(2, (2,), unclean=True), got
    assert elect_leader([1, 2, 3], [1], set(), unclean=True) is None
    # An ISR member alive wins over unclean election even when unclean is allowed.
    assert elect_leader([1, 2, 3], [3], {2, 3}, unclean=True) == LeaderElection(3, (3,))


def test_seeded_random_elections_respect_isr_and_liveness() -> None:
    rng = random.Random(101)
    for trial in range(2000):
        replicas = rng.sample(range(8), rng.randint(1, 5))
        isr = rng.sample(replicas, rng.randint(0, len(replicas)))
        live = set(rng.sample(range(8), rng.randint(0, 8)))
        unclean = rng.random() < 0.5
        got = elect_leader(replicas, isr, live, unclean=unclean)
        context = f"trial {trial}: replicas {replicas}, isr {isr}, live {sorted(live)}, unclean {unclean} -> {got}"
        clean_candidates = [b for b in replicas if b in live and b in isr]
        if clean_candidates:
            assert got is not None and not got.unclean, context
            assert got.leader == clean_candidates[0], context
            assert got.leader in got.isr and set(got.isr) <= live & set(isr), context
            assert list(got.isr) == [r for r in isr if r in live], context
        elif unclean and live & set(replicas):
            assert got is not None and got.unclean and got.isr == (got.leader,), context
            assert got.leader == next(b for b in replicas if b in live), context
        else:
            assert got is None, context


def test_controlled_shutdown_leader() -> None:
    got = controlled_shutdown_leader([1, 2, 3], [1, 2, 3], {1, 2, 3}, shutting_down={1})
    assert got == LeaderElection(2, (2, 3)), got
    assert controlled_shutdown_leader([1, 2, 3], [1, 3], {1, 2, 3}, {1, 3}) is None  # 2 is out of sync
    assert controlled_shutdown_leader([1, 2], [1, 2], {1}, {1}) is None  # 2 is not live


def test_preferred_leader_election() -> None:
    assert preferred_leader_election([1, 2, 3], [2, 1], {1, 2}, current_leader=2) == LeaderElection(1, (2, 1))
    assert preferred_leader_election([1, 2, 3], [2, 1], {1, 2}, current_leader=1) is None  # already leads
    assert preferred_leader_election([1, 2, 3], [2, 3], {1, 2}, current_leader=2) is None  # not in ISR
    assert preferred_leader_election([1, 2, 3], [2, 1], {2}, current_leader=2) is None  # not live
    assert preferred_leader_election([], [2], {2}, current_leader=2) is None


def test_reassignment_leader_keeps_current_leader_when_possible() -> None:
    assert reassignment_leader([4, 2, 3], [2, 3, 1, 4], {1, 2, 3, 4}, current_leader=2) == LeaderElection(2, (2, 3, 4))
    # Leader 1 leaves: the first target replica that is live and in sync takes over.
    assert reassignment_leader([4, 2, 3], [1, 3, 2], {1, 2, 3, 4}, current_leader=1) == LeaderElection(2, (3, 2))
    assert reassignment_leader([4, 2, 3], [1, 3, 2], {1, 3, 4}, current_leader=2) == LeaderElection(3, (3, 2))
    assert reassignment_leader([4, 5], [1, 2], {1, 2, 4, 5}, current_leader=1) is None  # targets not caught up


# -- ISR and high watermark --------------------------------------------------------------


def test_shrink_isr_drops_laggards_past_lag_time() -> None:
    caught_up = {1: 1_000, 2: 9_000, 3: 10_000 - 30_000}
    assert shrink_isr(1, [1, 2, 3], caught_up, 10_000, 30_000) == (1, 2, 3)  # exactly at the limit stays
    assert shrink_isr(1, [1, 2, 3], caught_up, 10_001, 30_000) == (1, 2)  # one ms over: out
    assert shrink_isr(1, [3, 1], {3: 0}, 10**9, 30_000) == (1,)  # leader stays whatever its time


def test_shrink_isr_keeps_follower_at_leader_log_end() -> None:
    got = shrink_isr(1, [1, 2, 3], {2: 0, 3: 0}, 100_000, 30_000, log_end_offsets={1: 50, 2: 50, 3: 49})
    assert got == (1, 2), got


def test_shrink_isr_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="leader 9 is not in ISR"):
        shrink_isr(9, [1, 2], {1: 0, 2: 0}, 0, 10)
    with pytest.raises(ValueError, match="follower 2 has no last-caught-up time"):
        shrink_isr(1, [1, 2], {}, 0, 10)


def test_expand_isr_rejoins_caught_up_live_replicas_in_assignment_order() -> None:
    ends = {1: 100, 2: 80, 3: 100, 4: 100}
    assert expand_isr(3, [3, 1], [1, 2, 3], {1, 2, 3}, ends, high_watermark=80) == (1, 2, 3)
    assert expand_isr(3, [3, 1], [1, 2, 3], {1, 2, 3}, ends, high_watermark=81) == (3, 1)  # 2 behind HW
    assert expand_isr(3, [3, 1], [1, 2, 3], {1, 3}, ends, high_watermark=80) == (3, 1)  # 2 not live
    assert expand_isr(3, [3, 1], [1, 3], {1, 2, 3, 4}, ends, high_watermark=0) == (3, 1)  # 2, 4 not assigned
    assert expand_isr(3, [3, 9], [1, 3], {1, 3}, ends, high_watermark=0) == (1, 3, 9)  # 9: mid-reassignment
    assert expand_isr(3, [3], [2, 3], {2, 3}, {3: 5}, high_watermark=0) == (3,)  # unknown log end: not proven


def test_expand_isr_respects_leader_epoch_start() -> None:
    ends = {1: 100, 2: 90}
    assert expand_isr(1, [1], [1, 2], {1, 2}, ends, 80, leader_epoch_start_offset=95) == (1,)
    assert expand_isr(1, [1], [1, 2], {1, 2}, ends, 80, leader_epoch_start_offset=90) == (1, 2)


def test_high_watermark_is_min_isr_log_end() -> None:
    assert high_watermark([1, 2, 3], {1: 10, 2: 7, 3: 9, 4: 0}) == 7
    with pytest.raises(ValueError, match=r"unknown for ISR member\(s\) \[3\]"):
        high_watermark([1, 3], {1: 10})
    with pytest.raises(ValueError, match="empty ISR"):
        high_watermark([], {1: 10})


def test_seeded_random_isr_and_high_watermark() -> None:
    rng = random.Random(7)
    for trial in range(2000):
        replicas = rng.sample(range(6), rng.randint(1, 5))
        leader = rng.choice(replicas)
        isr = [leader] + [r for r in replicas if r != leader and rng.random() < 0.5]
        ends = {r: rng.randint(0, 50) for r in replicas}
        ends[leader] = max(ends.values())  # the leader's log is the longest
        hw = high_watermark(isr, ends)
        context = f"trial {trial}: isr {isr}, ends {ends}, hw {hw}"
        assert all(hw <= ends[r] for r in isr) and hw in [ends[r] for r in isr], context
        live = set(rng.sample(replicas, rng.randint(1, len(replicas)))) | {leader}
        grown = expand_isr(leader, isr, replicas, live, ends, hw)
        assert set(isr) <= set(grown) and leader in grown, context
        assert high_watermark(grown, ends) == hw, f"{context}: rejoining replicas moved the HW ({grown})"
        now = 1_000
        caught = {r: rng.randint(0, now) for r in grown}
        shrunk = shrink_isr(leader, grown, caught, now, 500)
        assert leader in shrunk and set(shrunk) <= set(grown), context
        assert [r for r in grown if r in shrunk] == list(shrunk), f"{context}: order changed {grown} -> {shrunk}"
        assert high_watermark(shrunk, ends) >= hw, f"{context}: shrinking the ISR lowered the HW"


# -- epochs and truncation ---------------------------------------------------------------


def test_append_epoch_validation_and_dropping() -> None:
    history = append_epoch((), 0, 0)
    history = append_epoch(history, 1, 5)
    assert append_epoch(history, 3, 9) == ((0, 0), (1, 5), (3, 9))
    # A new leader with a shorter log: epochs starting at or after its log end leave the lineage.
    assert append_epoch(history, 2, 5) == ((0, 0), (2, 5))
    assert append_epoch(history, 2, 3) == ((0, 0), (2, 3))
    with pytest.raises(ValueError, match="not above the latest epoch 1"):
        append_epoch(history, 1, 9)
    with pytest.raises(ValueError, match=">= 0"):
        append_epoch(history, 2, -1)
    with pytest.raises(ValueError, match="strictly increasing epochs"):
        append_epoch([(2, 0), (1, 5)], 3, 9)


def test_epoch_end_offset_matches_kafka_end_offset_for() -> None:
    history = [(1, 0), (3, 10), (5, 20)]
    assert epoch_end_offset(history, 5, 25) == (5, 25)  # the current epoch ends at the log end
    assert epoch_end_offset(history, 3, 25) == (3, 20)
    assert epoch_end_offset(history, 4, 25) == (3, 20)  # unknown epoch: the largest one below it
    assert epoch_end_offset(history, 0, 25) == (0, 0)  # older than the history: where it starts
    assert epoch_end_offset(history, 6, 25) is None  # newer than the latest: Kafka's UNDEFINED
    assert epoch_end_offset([], 0, 0) is None


def test_truncation_offset_basic_rules() -> None:
    history = [(0, 0), (1, 5), (2, 8)]
    assert truncation_offset(10, 0, history) == 5  # epoch 0 ended at 5 in the lineage
    assert truncation_offset(4, 0, history) == 4  # nothing beyond the follower's log end
    assert truncation_offset(12, 2, history) == 12  # current epoch: a prefix, nothing to cut
    assert truncation_offset(0, None, history) == 0  # empty log
    assert truncation_offset(7, None, [(3, 4), (4, 9)]) == 4  # unknown epoch: keep what predates the history
    assert truncation_offset(7, None, []) == 7
    with pytest.raises(ValueError, match="newer than the leader's latest epoch 2"):
        truncation_offset(10, 3, history)
    with pytest.raises(ValueError, match=">= 0"):
        truncation_offset(-1, 0, history)


def reconcile(follower: list[tuple[int, str]], leader: list[tuple[int, str]], history: list[tuple[int, int]]) -> int:
    """Truncate ``follower`` in place by the epoch rule, then copy what it lacks from ``leader``."""
    last_epoch = follower[-1][0] if follower else None
    keep = truncation_offset(len(follower), last_epoch, history)
    assert follower[:keep] == leader[:keep], f"kept {follower[:keep]} is not a prefix of the leader's {leader}"
    del follower[keep:]
    follower.extend(leader[len(follower) :])
    return keep


def test_kip101_scenario_1_hw_truncation_then_immediate_election() -> None:
    # KIP-101 "Scenario 1: High Watermark Truncation followed by Immediate Leader Election":
    # B leads epoch 0; follower A fetched m2 but its high watermark (1) does not cover it yet.
    history = [(0, 0)]
    b = [(0, "m1"), (0, "m2")]
    a = [(0, "m1"), (0, "m2")]
    a_high_watermark = 1
    # A restarts. Truncating to its HW would drop m2; the epoch rule keeps it.
    keep = truncation_offset(len(a), a[-1][0], history)
    assert keep == 2 and keep > a_high_watermark, f"A truncated to {keep}, would lose m2 (HW {a_high_watermark})"
    # B fails at once, A becomes leader of epoch 1 at its log end: m2 survives.
    history = list(append_epoch(history, 1, len(a)))
    a.append((1, "m3"))
    # B returns as a follower: it keeps m1, m2 and fetches m3.
    assert reconcile(b, a, history) == 2
    assert b == a == [(0, "m1"), (0, "m2"), (1, "m3")]


def test_kip101_scenario_2_divergence_after_multiple_hard_failures() -> None:
    # KIP-101 "Scenario 2: Replica Divergence on Restart after Multiple Hard Failures":
    # A leads epoch 0 with m1, m2; B holds m1 only (m2 was not yet replicated/flushed). Both crash.
    history = [(0, 0)]
    a = [(0, "m1"), (0, "m2")]
    b = [(0, "m1")]
    a_high_watermark = 2  # the old rule truncates A to its HW: nothing, m2 stays beside B's m3
    # B restarts first, leads epoch 1 from offset 1 and takes m3 at offset 1.
    history = list(append_epoch(history, 1, len(b)))
    b.append((1, "m3"))
    # A restarts as a follower: epoch 0 ended at offset 1 in B's lineage, so m2 goes.
    keep = truncation_offset(len(a), a[-1][0], history)
    assert keep == 1 < a_high_watermark, f"A kept {keep} records, expected to drop the orphaned m2"
    assert reconcile(a, b, history) == 1
    assert a == b == [(0, "m1"), (1, "m3")], f"logs diverge: A {a}, B {b}"


def test_kip279_follower_history_resolves_epoch_missing_from_leader() -> None:
    # Fast failover (KIP-279): N leads epoch 0 with r0..r9; L is elected for epoch 1 from offset 8
    # (N stays in the ISR, not yet reconciled) and F copies L's s8, s9; L dies and N leads epoch 2.
    n_log = [(0, f"r{i}") for i in range(10)]
    f_log = [(0, f"r{i}") for i in range(8)] + [(1, "s8"), (1, "s9")]
    n_history = [(0, 0), (2, 10)]  # N's own lineage: it never held epoch 1
    f_history = [(0, 0), (1, 8)]
    keep = truncation_offset(len(f_log), 1, n_history, follower_epoch_start_offsets=f_history)
    assert keep == 8 and f_log[:keep] == n_log[:keep], f"F keeps {f_log[:keep]}"
    # The single lookup needs its contract (new leaders reconcile first); N did not, so it is not enough:
    assert truncation_offset(len(f_log), 1, n_history) == 10
    with pytest.raises(ValueError, match="differs from the latest epoch 1"):
        truncation_offset(len(f_log), 0, n_history, follower_epoch_start_offsets=f_history)


def truncated_history(history: tuple[tuple[int, int], ...], log_end: int) -> tuple[tuple[int, int], ...]:
    """Kafka's LeaderEpochFileCache.truncateFromEnd: epochs starting at or after the new end go."""
    return tuple(entry for entry in history if entry[1] < log_end)


def run_replication(seed: int, *, leader_caches: bool) -> None:
    """Random appends, fetches, crashes and elections over 3 replicas; after every truncation the
    follower must hold a prefix of the leader's log.

    ``leader_caches``: every replica keeps its own epoch history (Kafka's leader-epoch cache) and
    any replica may be elected (unclean elections included); the follower passes its history.
    Otherwise the controller keeps one history, elections pick replicas that reconciled in the
    current epoch, and followers pass only their last record's epoch (the single-lookup contract).
    """
    rng = random.Random(seed)
    replicas = [0, 1, 2]
    logs: dict[int, list[tuple[int, int]]] = {r: [] for r in replicas}
    caches: dict[int, tuple[tuple[int, int], ...]] = {r: () for r in replicas}
    controller_history: tuple[tuple[int, int], ...] = ((0, 0),)
    leader, epoch, next_id = 0, 0, 0
    caches[0] = append_epoch((), 0, 0)
    reconciled = {r: (0 if r == leader else -1) for r in replicas}

    def elect(new_leader: int) -> None:
        nonlocal leader, epoch, controller_history
        epoch += 1
        leader = new_leader
        caches[leader] = append_epoch(caches[leader], epoch, len(logs[leader]))
        controller_history = append_epoch(controller_history, epoch, len(logs[leader]))
        reconciled[leader] = epoch

    for step in range(300):
        action = rng.random()
        context = f"seed {seed} step {step}: leader {leader} epoch {epoch} logs {logs} caches {caches}"
        if action < 0.3:  # the leader appends a batch
            for _ in range(rng.randint(1, 3)):
                logs[leader].append((epoch, next_id))
                next_id += 1
        elif action < 0.7:  # a follower fetches
            follower = rng.choice([r for r in replicas if r != leader])
            log = logs[follower]
            if reconciled[follower] != epoch:
                if leader_caches:
                    last = caches[follower][-1][0] if caches[follower] else None
                    keep = truncation_offset(
                        len(log), last, caches[leader], follower_epoch_start_offsets=caches[follower]
                    )
                else:
                    keep = truncation_offset(len(log), log[-1][0] if log else None, controller_history)
                assert keep <= len(logs[leader]) and log[:keep] == logs[leader][:keep], (
                    f"{context}: follower {follower} keeps {keep} records, not a prefix of leader {leader}'s log"
                )
                del log[keep:]
                caches[follower] = truncated_history(caches[follower], keep)
                reconciled[follower] = epoch
            for record in logs[leader][len(log) : len(log) + rng.randint(0, 4)]:
                if not caches[follower] or caches[follower][-1][0] != record[0]:
                    caches[follower] = append_epoch(caches[follower], record[0], len(log))
                log.append(record)
            assert log == logs[leader][: len(log)], f"{context}: follower {follower} diverged after copying"
        elif action < 0.8:  # a replica crashes and loses an unflushed tail
            victim = rng.choice(replicas)
            keep = rng.randint(0, len(logs[victim]))
            del logs[victim][keep:]
            caches[victim] = truncated_history(caches[victim], keep)
            if victim == leader:  # a crashed leader is replaced
                elect(rng.choice(replicas if leader_caches else [r for r in replicas if reconciled[r] == epoch]))
        else:
            candidates = replicas if leader_caches else [r for r in replicas if reconciled[r] == epoch]
            elect(rng.choice(candidates))


@pytest.mark.parametrize("leader_caches", [True, False], ids=["kip279-leader-caches", "controller-history"])
def test_seeded_random_truncation_leaves_a_prefix_of_the_leader(leader_caches: bool) -> None:
    for seed in range(150):
        run_replication(seed, leader_caches=leader_caches)


# -- rebalancing and reassignment --------------------------------------------------------


def test_preferred_leader_imbalance() -> None:
    assignments = {("t", p): [p % 2, 1 - p % 2] for p in range(20)}  # broker 0 prefers 10, broker 1 prefers 10
    leaders = {tp: r[0] for tp, r in assignments.items()}
    assert preferred_leader_imbalance(assignments, leaders) == {}
    leaders[("t", 0)] = 1  # 1 of 10 = 10%: not above the 10% default
    assert preferred_leader_imbalance(assignments, leaders) == {}
    leaders[("t", 2)] = -1  # offline counts too: 2 of 10 = 20%
    assert preferred_leader_imbalance(assignments, leaders) == {0: [("t", 0), ("t", 2)]}
    assert preferred_leader_imbalance(assignments, leaders, imbalance_percentage=20) == {}
    assert preferred_leader_imbalance(assignments, leaders, imbalance_percentage=0) == {0: [("t", 0), ("t", 2)]}
    del leaders[("t", 0)], leaders[("t", 2)]  # unknown leadership is not counted
    assert preferred_leader_imbalance(assignments, leaders, imbalance_percentage=0) == {}
    with pytest.raises(ValueError, match=">= 0"):
        preferred_leader_imbalance(assignments, leaders, imbalance_percentage=-1)


def test_generate_reassignment_matches_kafka_per_topic() -> None:
    current = {("a", p): [0, 1] for p in range(4)} | {("b", p): [0, 1, 2] for p in range(3)}
    brokers = [0, 1, 2, 3, 4]
    got = generate_reassignment(current, brokers, rng=random.Random(3))
    draw = random.Random(3)
    expected: dict[tuple[str, int], list[int]] = {}
    for topic, count, rf in (("a", 4, 2), ("b", 3, 3)):
        start, shift = draw.randrange(5), draw.randrange(5)
        placed = assign_replicas(brokers, count, rf, start_index=start, replica_shift=shift)
        expected |= {(topic, p): r for p, r in placed.items()}
    assert got == expected
    assert got == generate_reassignment(current, brokers, rng=random.Random(3)), "a seeded rng must reproduce"


def test_generate_reassignment_properties() -> None:
    racks = {b: f"r{b % 3}" for b in range(6)}
    current = {("t", p): [0, 1, 2] for p in range(12)} | {("u", 3): [5, 4], ("u", 7): [4, 5]}
    for seed in range(30):
        got = generate_reassignment(current, range(6), broker_racks=racks, rng=random.Random(seed))
        assert set(got) == set(current), f"seed {seed}: partitions {sorted(got)}"
        for tp, replicas in got.items():
            assert len(replicas) == len(current[tp]) == len(set(replicas)), f"seed {seed}: {tp} -> {replicas}"
            assert len({racks[b] for b in replicas}) == len(replicas), f"seed {seed}: {tp} -> {replicas} shares a rack"
        leaders = Counter(got[("t", p)][0] for p in range(12))
        assert set(leaders.values()) == {2}, f"seed {seed}: leaders of t uneven {leaders}"
    with pytest.raises(InvalidReplicationFactorError):
        generate_reassignment(current, [0, 1])
    assert generate_reassignment({}, [0]) == {}


def test_down_replicas_on_shared_storage_go_to_the_least_loaded_live_brokers() -> None:
    # replicas 1 and 2 down; 3 and 4 serve the same table, 4 leads fewer partitions
    assert replace_down_replicas([1, 2], {3, 4}, [3, 4], {3: 5, 4: 1}) == [4, 3]
    # a tie goes to the lower id; a live replica keeps its place, only down ones are replaced
    assert replace_down_replicas([1, 5], {3, 4, 5}, [3, 4, 5], {}) == [3, 5]
    # fewer candidates than down replicas: the replica list shrinks rather than repeating one
    assert replace_down_replicas([1, 2, 3], {4}, [4], {}) == [4]
    # no live candidate (their log dirs differ, or none is live): nothing to do
    assert replace_down_replicas([1, 2], {3}, [], {}) is None
    assert replace_down_replicas([1, 2], set(), [3], {}) is None
