"""The pure maintenance planners of sparklog.log.plans: retention (time, size, DeleteRecords),
compaction (plan and record-level), optimize grouping and vacuum candidates. No Spark, no
Delta, no ZooKeeper: segments are a tiny dataclass, records a pyarrow table."""

from __future__ import annotations

import ast
import itertools
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest

from sparklog.errors import OffsetOutOfRangeError
from sparklog.log.plans import (
    CompactionPlan,
    DeleteRecordsOffsetError,
    RetentionPlan,
    SegmentLike,
    compact_records,
    compaction_plan,
    delete_records_plan,
    optimize_plan,
    retention_plan,
    vacuum_candidates,
)
from sparklog.log.segment import SegmentFile
from sparklog.model.schema import CONTROL_TIMESTAMP_TYPE, FILE_SCHEMA

NOW = 1_704_067_200_000  # 2024-01-01T00:00:00Z in ms
US = 1000


@dataclass(frozen=True)
class Seg:
    path: str
    partition: int
    base_offset: int
    last_offset: int
    num_records: int
    size_bytes: int
    min_timestamp_us: int | None
    max_timestamp_us: int | None


def chain(*specs: tuple[int, int, int | None], start: int = 0, partition: int = 0) -> list[Seg]:
    """Contiguous segments from ``(records, size_bytes, max_timestamp_ms)`` specs."""
    out, base = [], start
    for i, (count, size, max_ms) in enumerate(specs):
        ts = None if max_ms is None else max_ms * US
        out.append(Seg(f"p{partition}/s{i}", partition, base, base + count - 1, count, size, ts, ts))
        base += count
    return out


def paths(segments: Sequence[SegmentLike]) -> list[str]:
    return [s.path for s in segments]


def surviving_offsets(segments: Sequence[SegmentLike], plan: RetentionPlan) -> list[int]:
    """Every offset still readable after ``plan``: in kept files and at/after the new log start."""
    gone = set(paths(plan.removed))
    return [
        o
        for s in segments
        if s.path not in gone
        for o in range(s.base_offset, s.last_offset + 1)
        if o >= plan.new_log_start
    ]


def retain(
    segments: Sequence[SegmentLike],
    *,
    log_start: int = 0,
    log_end: int | None = None,
    retention_ms: int = -1,
    retention_bytes: int = -1,
    now_ms: int = NOW,
) -> RetentionPlan:
    if log_end is None:
        log_end = max((s.last_offset + 1 for s in segments), default=0)
    return retention_plan(
        segments,
        partition=0,
        log_start=log_start,
        log_end=log_end,
        now_ms=now_ms,
        retention_ms=retention_ms,
        retention_bytes=retention_bytes,
    )


# -- retention.ms ------------------------------------------------------------------------
def test_time_retention_removes_the_breached_prefix_only() -> None:
    # max timestamps: 5 s old, 2 s old, exactly at the cutoff, 3 s old (behind a kept one)
    segs = chain((10, 100, NOW - 5000), (10, 100, NOW - 2000), (10, 100, NOW - 1000), (10, 100, NOW - 3000))
    plan = retain(segs, retention_ms=1000)
    assert paths(plan.removed) == ["p0/s0", "p0/s1"]
    assert plan.reason == {"p0/s0": "retention.ms", "p0/s1": "retention.ms"}
    assert plan.new_log_start == 20
    assert surviving_offsets(segs, plan) == list(range(20, 40))


@pytest.mark.parametrize(("max_us", "removed"), [((NOW - 1000) * US - 1, True), ((NOW - 1000) * US, False)])
def test_time_retention_boundary_is_strict(max_us: int, removed: bool) -> None:
    seg = Seg("p0/s0", 0, 0, 9, 10, 100, max_us, max_us)
    plan = retain([seg, *chain((5, 100, NOW), start=10)], retention_ms=1000)
    assert paths(plan.removed) == (["p0/s0"] if removed else []), (
        f"max timestamp {max_us} us, cutoff {(NOW - 1000) * US}"
    )


def test_time_retention_may_remove_the_newest_segment() -> None:
    segs = chain((10, 100, NOW - 9000), (10, 100, NOW - 8000))
    plan = retain(segs, retention_ms=1000)
    assert paths(plan.removed) == ["p0/s0", "p0/s1"]
    assert plan.new_log_start == 20 and surviving_offsets(segs, plan) == []


def test_missing_timestamp_stats_are_never_time_retained() -> None:
    segs = chain((10, 100, None), (10, 100, NOW - 9000))
    assert retain(segs, retention_ms=1000).removed == ()


# -- retention.bytes (Kafka's arithmetic) ---------------------------------------------------
@pytest.mark.parametrize(
    ("retention_bytes", "expected_removed", "expected_start"),
    [
        (200, ["p0/s0", "p0/s1"], 20),  # 400-100=300>=200, 300-100=200>=200 (boundary: removed), 200-100<200
        (201, ["p0/s0"], 10),  # 300>=201, then 200>=201 fails: keep >= retention.bytes
        (399, [], 0),  # 400-100=300 < 399
        (300, ["p0/s0"], 10),
        (0, ["p0/s0", "p0/s1", "p0/s2", "p0/s3"], 40),  # everything may go, log-start = log-end
    ],
)
def test_size_retention_matches_kafka_boundary(
    retention_bytes: int, expected_removed: list[str], expected_start: int
) -> None:
    segs = chain(*[(10, 100, NOW)] * 4)
    plan = retain(segs, retention_bytes=retention_bytes)
    assert paths(plan.removed) == expected_removed
    assert set(plan.reason.values()) <= {"retention.bytes"}
    assert plan.new_log_start == expected_start
    kept_bytes = sum(s.size_bytes for s in segs) - sum(s.size_bytes for s in plan.removed)
    assert kept_bytes >= retention_bytes


def test_size_retention_with_unequal_segments_stops_at_first_that_would_undershoot() -> None:
    segs = chain((10, 300, NOW), (10, 50, NOW), (10, 50, NOW))
    plan = retain(segs, retention_bytes=100)  # 400-300=100>=100 removes s0; 100-50=50<100 stops
    assert paths(plan.removed) == ["p0/s0"] and plan.new_log_start == 10


def test_time_and_size_together_interleave_along_the_prefix() -> None:
    # s0 only size-breached, s1 only time-breached (sizes make s1 survive the size rule), s2 neither
    segs = chain((10, 500, NOW), (10, 100, NOW - 10_000), (10, 100, NOW), (10, 100, NOW - 10_000))
    plan = retain(segs, retention_ms=1000, retention_bytes=300)
    # size: 800-500=300>=300 removes s0; s1 by time; s2: 200-100=100<300 and fresh: stop
    assert paths(plan.removed) == ["p0/s0", "p0/s1"]
    assert plan.reason == {"p0/s0": "retention.bytes", "p0/s1": "retention.ms"}
    assert plan.new_log_start == 20
    assert surviving_offsets(segs, plan) == list(range(20, 40))


def test_time_reason_wins_when_both_rules_apply() -> None:
    segs = chain((10, 100, NOW - 10_000), (10, 100, NOW))
    plan = retain(segs, retention_ms=1000, retention_bytes=0)
    assert plan.reason == {"p0/s0": "retention.ms", "p0/s1": "retention.bytes"}


def test_unlimited_retention_removes_nothing() -> None:
    segs = chain((10, 10**9, NOW - 10**9), (10, 10**9, NOW - 10**9))
    plan = retain(segs, log_start=3, retention_ms=-1, retention_bytes=-1)
    assert plan.removed == () and plan.new_log_start == 3 and plan.reason == {}


def test_segments_below_log_start_are_removed_and_log_start_never_moves_back() -> None:
    segs = chain((10, 100, NOW), (10, 100, NOW), (10, 100, NOW))
    plan = retain(segs, log_start=25)
    assert plan.reason == {"p0/s0": "delete-records", "p0/s1": "delete-records"}
    assert plan.new_log_start == 25, "the straddling file stays, log-start does not fall back to its base"
    assert surviving_offsets(segs, plan) == list(range(25, 30))


def test_retention_across_compaction_gaps_starts_at_first_kept_base() -> None:
    segs = [Seg("a", 0, 0, 99, 40, 100, 0, 0), Seg("b", 0, 120, 150, 31, 100, NOW * US, NOW * US)]
    plan = retain(segs, log_end=151, retention_ms=1000)
    assert paths(plan.removed) == ["a"] and plan.new_log_start == 120


def test_retention_ignores_other_partitions_and_rejects_overlaps_and_bad_bounds() -> None:
    other = chain((10, 100, 0), partition=1)
    assert retain(other, log_end=0, retention_ms=0).removed == ()
    overlapping = [Seg("a", 0, 0, 9, 10, 1, 0, 0), Seg("b", 0, 5, 14, 10, 1, 0, 0)]
    with pytest.raises(ValueError, match="overlap"):
        retain(overlapping, retention_ms=0)
    with pytest.raises(ValueError, match="log start 5"):
        retain([], log_start=5, log_end=4)


def test_retention_accepts_real_segment_files_and_unsorted_input() -> None:
    files = [SegmentFile(f"f{i}", 0, i * 10, i * 10 + 9, 100, 0, (NOW - 5000) * US, 0) for i in range(3)]
    plan = retain(list(reversed(files)), retention_bytes=100)
    assert paths(plan.removed) == ["f0", "f1"] and plan.new_log_start == 20


def test_random_retention_plans_keep_the_invariants() -> None:
    rng = random.Random(7)
    for _ in range(300):
        specs = [(rng.randint(1, 5), rng.randint(1, 50), NOW - rng.randint(0, 100)) for _ in range(rng.randint(0, 8))]
        segs = chain(*specs)
        end = sum(c for c, _, _ in specs)
        start = rng.randint(0, end)
        rms, rbytes = rng.choice([-1, 0, 30, 60]), rng.choice([-1, 0, 40, 100])
        plan = retain(segs, log_start=start, log_end=end, retention_ms=rms, retention_bytes=rbytes)
        n = len(plan.removed)
        assert list(plan.removed) == segs[:n], "retention removes a prefix"
        assert plan.new_log_start >= start
        assert plan.new_log_start == (start if n == 0 else max(start, segs[n].base_offset if n < len(segs) else end))
        kept = segs[n:]
        if kept:  # the first kept segment is breached by no rule
            first = kept[0]
            assert first.last_offset >= start
            assert rms < 0 or (first.max_timestamp_us or 0) >= (NOW - rms) * US
            assert rbytes < 0 or sum(s.size_bytes for s in kept) - first.size_bytes < rbytes


# -- DeleteRecords ----------------------------------------------------------------------------
SEGS30 = chain((10, 100, NOW), (10, 100, NOW), (10, 100, NOW))


@pytest.mark.parametrize(
    ("before", "expected_removed", "expected_start"),
    [
        (0, [], 0),
        (15, ["p0/s0"], 15),  # s1 (10..19) straddles: stays, readers filter by log-start
        (19, ["p0/s0"], 19),
        (20, ["p0/s0", "p0/s1"], 20),
        (30, ["p0/s0", "p0/s1", "p0/s2"], 30),
    ],
)
def test_delete_records(before: int, expected_removed: list[str], expected_start: int) -> None:
    plan = delete_records_plan(SEGS30, partition=0, log_start=0, log_end=30, before_offset=before)
    assert paths(plan.removed) == expected_removed
    assert plan.new_log_start == expected_start
    assert set(plan.reason.values()) <= {"delete-records"}
    assert surviving_offsets(SEGS30, plan) == list(range(expected_start, 30))


def test_delete_records_below_log_start_is_a_no_op() -> None:
    # 11 would cover s0 (0..9), but it is below the current log start: nothing changes
    plan = delete_records_plan(SEGS30, partition=0, log_start=12, log_end=30, before_offset=11)
    assert plan.removed == () and plan.new_log_start == 12 and plan.reason == {}


@pytest.mark.parametrize("before", [31, -1])
def test_delete_records_out_of_range_names_partition_and_range(before: int) -> None:
    with pytest.raises(
        DeleteRecordsOffsetError, match=rf"Partition 3: .*offset {before}.*valid range is 4\.\.30"
    ) as err:
        delete_records_plan(SEGS30, partition=3, log_start=4, log_end=30, before_offset=before)
    assert isinstance(err.value, ValueError) and isinstance(err.value, OffsetOutOfRangeError)


# -- compaction plan ----------------------------------------------------------------------------
def plan_compaction(
    segs: Sequence[SegmentLike],
    *,
    lag_ms: int = 0,
    ratio: float = 0.0,
    cleaned_up_to: int = 0,
    log_end: int | None = None,
) -> CompactionPlan | None:
    if log_end is None:
        log_end = max((s.last_offset + 1 for s in segs), default=0)
    return compaction_plan(
        segs,
        partition=0,
        log_end=log_end,
        now_ms=NOW,
        min_compaction_lag_ms=lag_ms,
        min_cleanable_dirty_ratio=ratio,
        cleaned_up_to=cleaned_up_to,
    )


def test_compaction_never_rewrites_the_active_head() -> None:
    assert plan_compaction(chain((10, 100, 0))) is None
    plan = plan_compaction(chain((10, 100, 0), (10, 100, 0)))
    assert plan is not None and paths(plan.rewrite) == ["p0/s0"]
    assert plan.first_uncleanable_offset == 10 and plan.dirty_ratio == 1.0


def test_compaction_respects_min_lag() -> None:
    # s1's newest record is exactly at now - lag (cleanable); s2's is 1 ms younger; s3 is old but behind s2
    segs = chain((10, 100, NOW - 5000), (10, 100, NOW - 1000), (10, 100, NOW - 999), (10, 100, 0), (10, 100, 0))
    plan = plan_compaction(segs, lag_ms=1000)
    assert plan is not None and paths(plan.rewrite) == ["p0/s0", "p0/s1"]
    assert plan.first_uncleanable_offset == 20
    assert plan_compaction(segs, lag_ms=10_000) is None


def test_compaction_treats_missing_timestamps_as_too_recent() -> None:
    plan = plan_compaction(chain((10, 100, 0), (10, 100, None), (10, 100, 0)))
    assert plan is not None and paths(plan.rewrite) == ["p0/s0"]


@pytest.mark.parametrize(
    ("cleaned_up_to", "ratio", "expected"),
    [
        (20, 0.5, None),  # dirty = s2 only: 100 / 300 bytes < 0.5
        (20, 1 / 3, 1 / 3),  # at the threshold: cleans
        (15, 0.5, 0.5),  # s1 half dirty (pro rata): (50 + 100) / 300
        (0, 0.9, 1.0),  # never cleaned: all dirty
        (30, 0.0, None),  # nothing dirty: no pass even at ratio 0
        (99, 0.0, None),
    ],
)
def test_compaction_dirty_ratio_threshold(cleaned_up_to: int, ratio: float, expected: float | None) -> None:
    segs = chain(*[(10, 100, 0)] * 4)  # s3 (30..39) is the head
    plan = plan_compaction(segs, ratio=ratio, cleaned_up_to=cleaned_up_to)
    if expected is None:
        assert plan is None, f"expected no pass, got ratio {plan and plan.dirty_ratio}"
    else:
        assert plan is not None and plan.dirty_ratio == pytest.approx(expected)
        assert paths(plan.rewrite) == ["p0/s0", "p0/s1", "p0/s2"] and plan.first_uncleanable_offset == 30


def test_compaction_of_nothing() -> None:
    assert plan_compaction([]) is None


# -- compact_records ----------------------------------------------------------------------------
def records(rows: list[tuple[int, int, bytes | None, bytes | None]]) -> pa.Table:
    """``(offset, timestamp_us, key, value)`` rows in FILE_SCHEMA layout."""
    n = len(rows)
    return pa.Table.from_pydict(
        {
            "offset": [r[0] for r in rows],
            "timestamp": [r[1] for r in rows],
            "timestampType": [0] * n,
            "key": [r[2] for r in rows],
            "value": [r[3] for r in rows],
            "headers": [None if r[0] % 3 else [{"key": "h", "value": b"%d" % r[0]}] for r in rows],
        },
        schema=FILE_SCHEMA,
    )


def compact(table: pa.Table, *, delete_retention_ms: int = 1000, first_uncleanable: int = 10**9) -> pa.Table:
    return compact_records(
        table, now_ms=NOW, delete_retention_ms=delete_retention_ms, first_uncleanable_offset=first_uncleanable
    )


def expected_survivors(rows: Sequence[tuple[int, int, bytes | None, bytes | None]], horizon_us: int) -> list[int]:
    """Reference implementation: a plain loop over rows."""
    newest: dict[bytes, int] = {}
    for offset, _ts, key, _value in rows:
        if key is not None:
            newest[key] = offset
    out = []
    for offset, ts, key, value in rows:
        if key is None:
            out.append(offset)
        elif newest[key] == offset and (value is not None or ts >= horizon_us):
            out.append(offset)
    return out


def test_compact_records_keeps_transaction_markers_apart_from_data_keys() -> None:
    marker_key = b"\x00\x00\x00\x01"  # Kafka's control key of a commit marker

    def table(kinds: list[int]) -> pa.Table:
        rows = records([(o, NOW * 1000, marker_key if o != 1 else b"k", b"v%d" % o) for o in range(len(kinds))])
        return rows.set_column(2, FILE_SCHEMA.field("timestampType"), pa.array(kinds, pa.int32()))

    # A data record carrying a marker's key survives the markers after it; markers all stay.
    assert compact(table([0, 0, CONTROL_TIMESTAMP_TYPE, CONTROL_TIMESTAMP_TYPE])).column("offset").to_pylist() == [
        0,
        1,
        2,
        3,
    ]
    # Between data records the key still decides: only the newest of them survives.
    assert compact(table([0, 0, 0, CONTROL_TIMESTAMP_TYPE])).column("offset").to_pylist() == [1, 2, 3]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_compact_records_keeps_newest_per_key(seed: int) -> None:
    rng = random.Random(seed)
    rows, offset = [], 5000
    for _ in range(3000):
        offset += rng.choice([1, 1, 1, 2, 7])  # gaps from earlier compactions
        key = None if rng.random() < 0.05 else b"k%d" % rng.randrange(120)
        value = None if rng.random() < 0.2 else rng.randbytes(rng.randint(0, 8))
        rows.append((offset, (NOW - rng.randint(0, 2000)) * US, key, value))
    table = pa.concat_tables([records(rows[:1000]), records(rows[1000:])])  # several chunks
    out = compact(table, delete_retention_ms=1000)

    got = out.column("offset").to_pylist()
    want = expected_survivors(rows, (NOW - 1000) * US)
    assert got == want, f"extra {sorted(set(got) - set(want))[:10]}, missing {sorted(set(want) - set(got))[:10]}"
    assert out.schema == FILE_SCHEMA
    by_offset = {r[0]: r for r in rows}
    assert [
        (o, k, v) for o, k, v in zip(got, out.column("key").to_pylist(), out.column("value").to_pylist(), strict=False)
    ] == [(o, by_offset[o][2], by_offset[o][3]) for o in got], "records keep their offset, key and value"
    keys = [k for k in out.column("key").to_pylist() if k is not None]
    assert len(keys) == len(set(keys)), "one record per key"
    assert sum(1 for r in rows if r[2] is None) == sum(1 for k in out.column("key").to_pylist() if k is None)


def test_tombstone_survives_until_delete_retention_passes() -> None:
    horizon = (NOW - 1000) * US
    rows: list[tuple[int, int, bytes | None, bytes | None]] = [
        (0, 0, b"a", b"1"),
        (1, horizon, b"a", None),  # tombstone exactly at the horizon: kept
        (2, 0, b"b", b"1"),
        (3, horizon - 1, b"b", None),  # 1 us older: dropped with its key
        (4, 0, b"c", None),
        (5, 0, b"c", b"2"),  # an older tombstone is superseded
    ]
    out = compact(records(rows), delete_retention_ms=1000)
    assert out.column("offset").to_pylist() == [1, 5]
    assert out.column("value").to_pylist() == [None, b"2"]


def test_null_keys_are_kept_as_they_are() -> None:
    rows = [(0, 0, None, b"x"), (1, 0, None, b"x"), (2, 0, None, None), (3, 0, b"k", b"1"), (4, 0, b"k", b"2")]
    assert compact(records(rows)).column("offset").to_pylist() == [0, 1, 2, 4]


def test_compact_records_edge_cases_and_contract() -> None:
    empty = records([])
    assert compact(empty).num_rows == 0
    with pytest.raises(ValueError, match="first uncleanable offset 4"):
        compact(records([(3, 0, b"a", b"1"), (4, 0, b"a", b"2")]), first_uncleanable=4)
    with pytest.raises(ValueError, match="increasing offset order"):
        compact(records([(4, 0, b"a", b"1"), (3, 0, b"b", b"2")]))


# -- optimize ----------------------------------------------------------------------------------
def sized(*sizes: int) -> list[Seg]:
    return chain(*[(10, size, NOW) for size in sizes])


def test_optimize_groups_small_consecutive_segments_greedily() -> None:
    segs = sized(10, 20, 15, 60, 10, 10, 45, 45, 30)  # segment.bytes=100: small means < 50
    groups = optimize_plan(segs, partition=0, segment_bytes=100)
    assert [paths(g) for g in groups] == [
        ["p0/s0", "p0/s1", "p0/s2"],  # 45 bytes; s3 (60) is not small and ends the run
        ["p0/s4", "p0/s5", "p0/s6"],  # 65; adding s7 would make 110 > 100
        ["p0/s7", "p0/s8"],  # 75, includes the newest segment
    ]
    for group in groups:
        assert sum(s.size_bytes for s in group) <= 100
        assert [s.base_offset for s in group] == sorted(s.base_offset for s in group)
        assert all(b.base_offset == a.last_offset + 1 for a, b in itertools.pairwise(group))


def test_optimize_min_files_and_half_size_threshold() -> None:
    segs = sized(10, 20, 15, 60, 10, 10, 45, 45, 30)
    assert [paths(g) for g in optimize_plan(segs, partition=0, segment_bytes=100, min_files=3)] == [
        ["p0/s0", "p0/s1", "p0/s2"],
        ["p0/s4", "p0/s5", "p0/s6"],
    ]
    assert optimize_plan(sized(50, 50, 50), partition=0, segment_bytes=100) == [], "half of segment.bytes is not small"
    assert optimize_plan(sized(60, 10, 60, 10, 60), partition=0, segment_bytes=100) == []
    with pytest.raises(ValueError, match="min_files >= 2"):
        optimize_plan(segs, partition=0, segment_bytes=100, min_files=1)


def test_optimize_merges_across_compaction_gaps_in_offset_order() -> None:
    segs = [Seg("c", 0, 50, 70, 3, 10, 0, 0), Seg("a", 0, 0, 9, 2, 10, 0, 0), Seg("b", 0, 20, 30, 4, 10, 0, 0)]
    assert [paths(g) for g in optimize_plan(segs, partition=0, segment_bytes=100)] == [["a", "b", "c"]]
    assert optimize_plan(segs, partition=1, segment_bytes=100) == []


# -- vacuum ------------------------------------------------------------------------------------
def test_vacuum_grace_period_orphans_and_live_files() -> None:
    delay = 1000
    removed = [
        ("old-removed", NOW - delay - 1),
        ("just-removed", NOW - delay),  # exactly the delay: not yet
        ("recently-removed-old-file", NOW - 10),
        ("live-again", NOW - 10**6),
        ("gone-already", NOW - 10**6),
    ]
    on_disk = {
        "old-removed": NOW - 10**6,
        "just-removed": NOW - 10**6,
        "recently-removed-old-file": NOW - 10**6,  # removal time counts, not mtime
        "live-again": NOW - 10**6,
        "live": NOW - 10**6,
        "orphan-old": NOW - delay - 1,
        "orphan-new": NOW - delay,  # maybe a writer about to commit
        "_delta_log/00000000000000000000.json": NOW - 10**6,
        "partition=0/.hidden.crc": NOW - 10**6,
    }
    live = {"live", "live-again"}
    got = vacuum_candidates(removed, on_disk, live, now_ms=NOW, file_delete_delay_ms=delay)
    assert got == ["old-removed", "orphan-old"]
    assert not set(got) & live


def test_vacuum_uses_the_latest_removal_and_never_live_paths() -> None:
    removed = [("f", NOW - 10**6), ("f", NOW - 5)]
    assert vacuum_candidates(removed, {"f": 0}, set(), now_ms=NOW, file_delete_delay_ms=1000) == []
    assert vacuum_candidates([], {"f": 0, "g": 0}, {"f", "g"}, now_ms=NOW, file_delete_delay_ms=0) == []


def test_policy_module_is_pure() -> None:
    source = Path(__file__).resolve().parents[2] / "sparklog" / "log" / "plans.py"
    roots: set[str] = set()
    for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            roots.add(node.module.split(".")[0])
    assert not roots & {"deltalake", "kazoo", "pyspark", "os", "shutil", "pathlib"}, sorted(roots)
