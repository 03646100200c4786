"""The application-transaction map read from ``_delta_log`` agrees with delta-rs at every
version: across commits, checkpoints, log cleanup, a re-created table and old snapshots."""

from __future__ import annotations

import os
import random
from pathlib import Path

from deltalake import DeltaTable

from sparklog.log import txn_state
from sparklog.log.storage import LocalTableStorage, ObjectTableStorage, storage_of
from sparklog.log.table import TopicTable
from sparklog.log.transactions import transaction_version

TOPIC = "txns"


def delta_rs_view(root: str, version: int, app_ids: set[str]) -> dict[str, int]:
    dt = DeltaTable(root, version=version)
    answers = {app_id: dt.transaction_version(app_id) for app_id in sorted(app_ids)}
    return {app_id: v for app_id, v in answers.items() if v is not None}


def our_view(table: TopicTable, version: int, app_ids: set[str]) -> dict[str, int]:
    dt = table.snapshot(version)
    answers = {app_id: transaction_version(dt, app_id) for app_id in sorted(app_ids)}
    return {app_id: v for app_id, v in answers.items() if v is not None}


def commit_random(table: TopicTable, rng: random.Random, app_ids: list[str]) -> dict[str, int]:
    chosen = {a: rng.randrange(0, 1_000) for a in rng.sample(app_ids, rng.randint(1, 3))}
    table.commit(table.snapshot(), [], chosen, {"sparklog.operation": "TEST"})
    return chosen


def test_map_matches_delta_rs_across_commits_and_checkpoints(tmp_path: Path) -> None:
    table = TopicTable(str(tmp_path), TOPIC)
    table.create("id-1", 600_000)
    rng = random.Random(7)
    app_ids = [f"sparklog.end.{p}" for p in range(4)] + ["sparklog.producer.x.0", 'a "quoted" id', "ü.unicode"]
    mismatches = {}
    for i in range(30):
        commit_random(table, rng, app_ids)
        if i in (9, 21):
            table.snapshot().create_checkpoint()
            txn_state._states.clear()  # the next read starts from the checkpoint
        dt = table.snapshot()
        version = dt.version()
        ours = txn_state.app_transactions(table.storage, str(dt.metadata().id), version)
        assert ours is not None, f"version {version}: the map was not built (delta-rs fallback)"
        if dict(ours) != (theirs := delta_rs_view(table.root, version, set(app_ids))):
            mismatches[version] = (dict(ours), theirs)
        assert our_view(table, version, set(app_ids)) == dict(ours)
    assert not mismatches, f"versions where the map differs from delta-rs (ours, delta-rs): {mismatches}"
    # older snapshots (delta-rs answers them) agree too
    for v in range(0, table.snapshot().version(), 7):
        assert our_view(table, v, set(app_ids)) == delta_rs_view(table.root, v, set(app_ids))


def test_newest_state_after_checkpoint_and_cleanup_from_a_fresh_process_state(tmp_path: Path) -> None:
    table = TopicTable(str(tmp_path), TOPIC)
    table.create("id-1", 600_000)
    rng = random.Random(11)
    app_ids = [f"sparklog.start.{p}" for p in range(3)]
    for _ in range(12):
        commit_random(table, rng, app_ids)
    table.snapshot().create_checkpoint()
    for name in os.listdir(os.path.join(table.root, "_delta_log")):
        if name.endswith(".json") and int(name[:20]) < 5:
            os.remove(os.path.join(table.root, "_delta_log", name))  # as log cleanup does
    for _ in range(3):
        commit_random(table, rng, app_ids)
    txn_state._states.clear()  # a process that never saw this table
    dt = table.snapshot()
    latest = dt.version()
    assert txn_state.app_transactions(table.storage, str(dt.metadata().id), latest) is not None
    assert our_view(table, latest, set(app_ids)) == delta_rs_view(table.root, latest, set(app_ids))


def test_recreated_table_at_the_same_root_is_not_mixed_up(tmp_path: Path) -> None:
    table = TopicTable(str(tmp_path), TOPIC)
    table.create("id-1", 600_000)
    table.commit(table.snapshot(), [], {"sparklog.end.0": 50, "sparklog.end.1": 7}, {})
    table.commit(table.snapshot(), [], {"sparklog.end.0": 60}, {})
    assert transaction_version(table.snapshot(), "sparklog.end.0") == 60
    table.delete()
    table.create("id-2", 600_000)
    table.commit(table.snapshot(), [], {"sparklog.end.0": 3}, {})
    table.commit(table.snapshot(), [], {"sparklog.end.2": 4}, {})
    table.commit(table.snapshot(), [], {"sparklog.end.2": 5}, {})
    dt = table.snapshot()
    assert {p: transaction_version(dt, f"sparklog.end.{p}") for p in range(3)} == {0: 3, 1: None, 2: 5}


def test_the_storage_of_a_table_uri() -> None:
    assert storage_of("/data/topics/t") == LocalTableStorage("/data/topics/t")
    assert storage_of("file:///data/my%20topics/t/") == LocalTableStorage("/data/my topics/t")
    on_store = storage_of("s3://bucket/topics/t/")
    assert isinstance(on_store, ObjectTableStorage) and on_store.root == "s3://bucket/topics/t"
