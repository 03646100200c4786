"""Topics on an ``s3://`` log dir (DESIGN §16): the table lands in the bucket as a plain Delta
table any reader opens, the ``storage.*`` settings alone reach the store, and a store that
would lose data or cannot be used fails topic creation with an error naming it, leaving
nothing behind (no topic, no objects)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import obstore
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable

import sparklog
from sparklog.errors import StorageError
from sparklog.log.checkpoints import STORE_CHECKPOINT_INTERVAL, write_checkpoint
from sparklog.log.object_store import open_store, store_requests
from sparklog.model.storage_location import STORAGE_SETTINGS, StorageSettings, parse_location
from sparklog.testing.object_stores import MotoS3, S3rver
from tests.helpers import spawn_context

ON_S3 = pytest.mark.parametrize("log_store", ["s3"], indirect=True)


def objects(server: MotoS3 | S3rver, uri: str) -> list[str]:
    location = parse_location(uri)
    store = open_store(location, StorageSettings.from_config(server.settings()))
    return sorted(str(meta["path"]) for batch in obstore.list(store) for meta in batch)


@ON_S3
def test_a_topic_on_a_store_is_a_delta_table_in_the_bucket_and_nothing_is_local(
    cluster: sparklog.Cluster, log_store: str, moto_s3: MotoS3, sparklog_home: Path
) -> None:
    cluster.create_topic("events", partitions=2)
    with cluster.producer() as producer:
        for i in range(20):
            producer.send("events", value=b"v%d" % i, key=b"k%d" % (i % 5))
    table = DeltaTable(f"{log_store}/topics/events", storage_options=moto_s3.environ()).to_pyarrow_table()
    assert sorted(table.column("value").to_pylist()) == sorted(b"v%d" % i for i in range(20))
    assert sorted(table.column("offset").to_pylist()) == sorted(
        o for p in (0, 1) for o in range(table.filter(pc.equal(table.column("partition"), p)).num_rows)
    ), "offsets contiguous per partition"
    listed = objects(moto_s3, f"{log_store}/topics/events")
    assert "_delta_log/00000000000000000000.json" in listed
    assert any(path.startswith("partition=") and path.endswith(".parquet") for path in listed)
    assert not (sparklog_home / "data" / "topics").exists(), "nothing of the topic on the local disk"
    assert cluster.read("events").num_rows == 20


def test_the_storage_settings_alone_reach_the_store(
    zk_connect: str, sparklog_home: Path, moto_s3: MotoS3, s3_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for variable in STORAGE_SETTINGS.values():
        monkeypatch.delenv(variable, raising=False)
    options = {
        "zookeeper.connect": zk_connect,
        "sparklog.home": str(sparklog_home),
        "log.dirs": f"s3://{s3_bucket}/settings-only",
        **moto_s3.settings(),
    }
    with sparklog.connect(options) as cluster:
        cluster.create_topic("t", partitions=1)
        with cluster.producer() as producer:
            producer.send("t", value=b"through the settings")
        assert cluster.read("t").column("value").to_pylist() == [b"through the settings"]
    assert "topics/t/_delta_log/00000000000000000000.json" in objects(moto_s3, f"s3://{s3_bucket}/settings-only")


def store_cluster(zk_connect: str, home: Path, log_dir: str, settings: dict[str, str]) -> sparklog.Cluster:
    return sparklog.connect(
        {"zookeeper.connect": zk_connect, "sparklog.home": str(home), "log.dirs": log_dir, **settings}
    )


def test_a_store_that_ignores_conditional_create_refuses_the_topic_and_keeps_nothing(
    zk_connect: str, sparklog_home: Path, tmp_path: Path
) -> None:
    with S3rver(tmp_path / "s3rver") as server:
        server.create_bucket("lossy")
        with store_cluster(zk_connect, sparklog_home, "s3://lossy/cluster", server.settings()) as cluster:
            with pytest.raises(StorageError, match=r"s3://lossy/cluster/topics/t .*does not honour conditional create"):
                cluster.create_topic("t", partitions=1)
            assert "t" not in cluster.list_topics()
        assert objects(server, "s3://lossy/cluster") == []


def test_wrong_credentials_are_named_and_nothing_is_created(
    zk_connect: str, sparklog_home: Path, tmp_path: Path
) -> None:
    with MotoS3(tmp_path / "guarded", check_credentials=True) as server:
        with store_cluster(zk_connect, sparklog_home, "s3://guarded/cluster", server.settings()) as cluster:
            with pytest.raises(StorageError, match=r"s3://guarded/cluster/topics/t\S* .*credentials were refused"):
                cluster.create_topic("t", partitions=1)
            assert "t" not in cluster.list_topics()


def test_a_missing_bucket_is_named_and_no_topic_is_left(zk_connect: str, sparklog_home: Path, moto_s3: MotoS3) -> None:
    bucket = f"missing-{uuid.uuid4().hex[:8]}"
    with store_cluster(zk_connect, sparklog_home, f"s3://{bucket}/cluster", moto_s3.settings()) as cluster:
        with pytest.raises(StorageError, match=rf"bucket '{bucket}' does not exist"):
            cluster.create_topic("t", partitions=1)
        assert "t" not in cluster.list_topics()


def _checkpoint_counting(root: str, options: dict[str, str], version: int) -> dict[str, int]:
    """In a fresh process (no log mirror yet): checkpoint ``root`` at ``version``; the store
    requests it made."""
    from sparklog.log.checkpoints import write_checkpoint
    from sparklog.log.object_store import store_requests

    write_checkpoint(root, options, version)
    return {kind: n for kind, n in store_requests().items() if n}


def _last_checkpoint(server: MotoS3, root: str) -> int:
    store = open_store(parse_location(root), StorageSettings.from_config(server.settings()))
    try:
        return int(json.loads(bytes(obstore.get(store, "_delta_log/_last_checkpoint").bytes()))["version"])
    except FileNotFoundError:
        return -1


@ON_S3
def test_a_store_tables_checkpoint_fetches_each_commit_once_and_any_reader_uses_it(
    cluster: sparklog.Cluster, log_store: str, moto_s3: MotoS3
) -> None:
    """delta-rs's own checkpoint on a store reads every commit since the last one two or
    three times (~80 GETs for 20); made on a local copy of the log, each is fetched once, by
    name, and the copy keeps its checkpoint for the next while the store's
    ``_last_checkpoint`` is still the one it uploaded (DESIGN §16)."""
    cluster.create_topic("cp", partitions=1)
    root = f"{log_store}/topics/cp"

    def commits(count: int, prefix: str) -> int:
        with cluster.producer() as producer:
            for i in range(count):  # a commit each
                producer.send("cp", value=b"%s%d" % (prefix.encode(), i))
                producer.flush()
        return int(DeltaTable(root, storage_options=moto_s3.environ()).version())

    def checkpoint_here(version: int) -> dict[str, int]:
        before = store_requests()
        write_checkpoint(root, moto_s3.environ(), version)
        after = store_requests()
        return {kind: after[kind] - before.get(kind, 0) for kind in after if after[kind] > before.get(kind, 0)}

    # The light producer commits through delta-rs, whose post-commit hook checkpoints too.
    newest = commits(STORE_CHECKPOINT_INTERVAL + 5, "v")
    stored = _last_checkpoint(moto_s3, root)
    assert 0 < stored < newest
    # A process without a copy: _last_checkpoint, its checkpoint, each newer commit once; no
    # HEAD (the PUT of _last_checkpoint answers the stamp the copy keeps).
    with spawn_context().Pool(1) as pool:
        counted = pool.apply(_checkpoint_counting, (root, moto_s3.environ(), newest))
    assert counted == {"GET": 2 + newest - stored, "PUT": 2}, counted
    assert _last_checkpoint(moto_s3, root) == newest

    assert checkpoint_here(again := commits(2, "a")) == {"GET": 2 + again - newest, "PUT": 2}
    # Its copy current (a HEAD shows _last_checkpoint is its own), only the commits since.
    assert checkpoint_here(last := commits(3, "l")) == {"GET": last - again, "PUT": 2, "HEAD": 1}

    # Every reader opens the table from the checkpoint alone (no commit after it) and sees it all.
    assert _last_checkpoint(moto_s3, root) == last
    values = DeltaTable(root, storage_options=moto_s3.environ()).to_pyarrow_table().column("value").to_pylist()
    expected = [b"v%d" % i for i in range(STORE_CHECKPOINT_INTERVAL + 5)] + [b"a0", b"a1", b"l0", b"l1", b"l2"]
    assert sorted(values) == sorted(expected)
    assert cluster.read("cp").num_rows == len(expected)
