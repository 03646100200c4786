"""A table's storage, on a local disk and on an S3 store (moto), keeps the Delta commit rule
(DESIGN §16): of several writers creating one name exactly one lands, whole, and the others
learn they lost; nothing half-written is ever read."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparklog.log.storage import LocalTableStorage, ObjectTableStorage, TableStorage
from sparklog.model.storage_location import StorageSettings, parse_location
from sparklog.testing.object_stores import MotoS3
from tests.helpers import in_threads

COMMIT = "_delta_log/00000000000000000001.json"


@pytest.fixture(params=["local", "s3"])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[TableStorage]:
    if request.param == "local":
        (tmp_path / "table" / "_delta_log").mkdir(parents=True)
        yield LocalTableStorage(str(tmp_path / "table"))
    else:
        moto: MotoS3 = request.getfixturevalue("moto_s3")
        bucket: str = request.getfixturevalue("s3_bucket")
        location = parse_location(f"s3://{bucket}/topics/orders")
        yield ObjectTableStorage(location, StorageSettings.from_config(moto.settings()))


def test_a_create_lands_once_and_the_second_learns_it_lost(storage: TableStorage) -> None:
    created = storage.create(COMMIT, b'{"commitInfo":{}}\n', durable=True)
    assert created is not None and created == storage.stamp(COMMIT), "a create answers the new object's stamp"
    assert not storage.create(COMMIT, b"another writer's commit\n", durable=True)
    assert storage.read(COMMIT) == b'{"commitInfo":{}}\n'


def test_racing_creates_of_one_version_have_exactly_one_winner(storage: TableStorage) -> None:
    writers = 8
    barrier = threading.Barrier(writers)
    won: list[int] = []

    def commit(writer: int) -> None:
        barrier.wait()
        if storage.create(COMMIT, f"writer {writer}\n".encode() * 1000, durable=True):
            won.append(writer)

    in_threads(commit, writers)
    assert len(won) == 1, f"writers {won} all created {COMMIT}"
    assert storage.read(COMMIT) == f"writer {won[0]}\n".encode() * 1000  # the winner's, whole


def test_reading_a_missing_object_is_file_not_found(storage: TableStorage) -> None:
    with pytest.raises(FileNotFoundError):
        storage.read("_delta_log/00000000000000000009.json")


def test_a_local_create_leaves_no_temporary_file(tmp_path: Path) -> None:
    (tmp_path / "_delta_log").mkdir()
    storage = LocalTableStorage(str(tmp_path))
    assert storage.create(COMMIT, b"x\n", durable=True)
    assert not storage.create(COMMIT, b"y\n", durable=False)
    assert sorted(p.name for p in (tmp_path / "_delta_log").iterdir()) == [COMMIT.split("/")[1]]


def test_a_stamp_tells_a_rewritten_commit_from_the_one_read(storage: TableStorage) -> None:
    """A topic deleted and created again reaches the same commit versions with other objects:
    the stamp of the commit a snapshot was read at tells them apart."""
    assert storage.stamp(COMMIT) is None and not storage.exists(COMMIT)
    assert storage.create(COMMIT, b"first table\n", durable=False)
    first = storage.stamp(COMMIT)
    assert first is not None and storage.exists(COMMIT)
    assert storage.stamp(COMMIT) == first  # the same object, looked up again
    storage.delete_all()
    assert not storage.exists(COMMIT)
    if isinstance(storage, LocalTableStorage):
        Path(storage.root, "_delta_log").mkdir(parents=True)
    assert storage.create(COMMIT, b"the re-created table\n", durable=False)
    assert storage.stamp(COMMIT) not in (None, first)
    storage.delete_all()
    storage.delete_all()  # nothing left to delete is fine
