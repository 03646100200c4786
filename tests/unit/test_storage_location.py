"""Log dirs as local paths or store URIs, and the ``storage.*`` settings (DESIGN §16): each
bad spelling gets an error that says what to write instead."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparklog.errors import ConfigError
from sparklog.model.storage_location import StorageLocation, StorageSettings, parse_location


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("s3://bucket/some/prefix/", StorageLocation("s3", bucket="bucket", prefix="some/prefix")),
        ("s3a://bucket", StorageLocation("s3", bucket="bucket")),
        ("gs://b/p", StorageLocation("gs", bucket="b", prefix="p")),
        (
            "abfss://c@acct.dfs.core.windows.net/p",
            StorageLocation("az", bucket="c@acct.dfs.core.windows.net", prefix="p"),
        ),
    ],
)
def test_store_uris_parse_to_bucket_and_prefix(text: str, expected: StorageLocation) -> None:
    location = parse_location(text)
    assert location == expected
    assert location.is_object_store
    assert parse_location(location.uri) == location  # the URI round-trips


def test_local_paths_and_file_uris_are_one_absolute_directory(tmp_path: Path) -> None:
    assert parse_location(str(tmp_path / "a" / ".." / "data")) == StorageLocation("file", path=str(tmp_path / "data"))
    assert parse_location(f"file://{tmp_path}/data") == StorageLocation("file", path=str(tmp_path / "data"))
    assert not parse_location(tmp_path).is_object_store


def test_children_of_a_location_are_one_segment_each() -> None:
    root = parse_location("s3://bucket/cluster-a")
    assert root.child("topics", "orders").uri == "s3://bucket/cluster-a/topics/orders"
    assert parse_location("s3://bucket").child("topics").uri == "s3://bucket/topics"
    for bad in ("", "..", "a/b"):
        with pytest.raises(ConfigError, match="not one path segment"):
            root.child("topics", bad)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "log.dirs is empty"),
        ("ftp://host/dir", "scheme 'ftp' is not supported"),
        ("s3:///prefix", "names no bucket"),
        ("file://relative/dir", "needs an absolute path"),
    ],
)
def test_bad_log_dirs_are_refused_with_what_to_write(text: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        parse_location(text)


def test_settings_override_the_environment_and_unknown_keys_are_refused() -> None:
    environ = {"AWS_ENDPOINT_URL": "http://env:9000", "AWS_REGION": "eu-west-1", "HOME": "/root"}
    settings = StorageSettings.from_config({"storage.endpoint": "http://set:9000", "log.dirs": "s3://b"})
    assert settings.variables(environ) == {"AWS_ENDPOINT_URL": "http://set:9000", "AWS_REGION": "eu-west-1"}
    assert StorageSettings().endpoint({}) == "the provider's default endpoint"
    with pytest.raises(ConfigError, match=r"Unknown storage setting 'storage\.endpoint\.url'.*storage\.endpoint"):
        StorageSettings.from_config({"storage.endpoint.url": "http://x"})


def test_a_topic_table_on_a_store_is_under_its_uri_never_a_local_directory() -> None:
    """An s3:// log dir is a store location (normalised), never taken for a local directory
    named ``s3:``; a file:// log dir is the local path."""
    from sparklog.log.object_store import ObjectTableStorage
    from sparklog.log.table import TopicTable

    on_store = TopicTable("s3://lake/p/", "orders")
    assert on_store.root == "s3://lake/p/topics/orders"
    assert isinstance(on_store.storage, ObjectTableStorage) and on_store.storage.local_path("x") is None
    assert TopicTable("/data/log", "orders").root == "/data/log/topics/orders"
    assert TopicTable("file:///data/log", "orders").root == "/data/log/topics/orders"
