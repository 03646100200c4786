"""A store must prove it honours conditional create before sparklog commits to it (DESIGN
§16): moto's S3 server does, s3rver (npm) ignores ``If-None-Match`` and is refused; a store
that cannot be reached is named in a clear error. Nothing of the probe is left behind."""

from __future__ import annotations

from pathlib import Path

import obstore
import pytest

from sparklog.errors import StorageError
from sparklog.log.object_store import open_store, prove_conditional_create
from sparklog.model.storage_location import StorageSettings, parse_location
from sparklog.testing.brokers import free_port
from sparklog.testing.object_stores import MotoS3, S3rver


def test_moto_honours_conditional_create_and_the_probe_leaves_nothing(moto_s3: MotoS3, s3_bucket: str) -> None:
    location = parse_location(f"s3://{s3_bucket}/cluster")
    settings = StorageSettings.from_config(moto_s3.settings())
    prove_conditional_create(location, settings)
    store = open_store(location, settings)
    assert [meta["path"] for batch in obstore.list(store) for meta in batch] == []


def test_a_store_that_ignores_conditional_create_is_refused(tmp_path: Path) -> None:
    with S3rver(tmp_path / "s3rver") as server:
        server.create_bucket("lossy")
        location = parse_location("s3://lossy/cluster")
        settings = StorageSettings.from_config(server.settings())
        store = open_store(location, settings)
        obstore.put(store, "plain", b"an ordinary PUT works")  # the server does serve S3
        with pytest.raises(StorageError, match=r"s3://lossy/cluster .*does not honour conditional create") as caught:
            prove_conditional_create(location, settings)
        assert server.endpoint in str(caught.value)
        assert [m["path"] for batch in obstore.list(store) for m in batch] == ["plain"]


def test_a_missing_bucket_is_named(moto_s3: MotoS3) -> None:
    location = parse_location("s3://no-such-bucket-here/cluster")
    with pytest.raises(StorageError, match="bucket 'no-such-bucket-here' does not exist"):
        prove_conditional_create(location, StorageSettings.from_config(moto_s3.settings()))


def test_an_unreachable_endpoint_is_named_quickly() -> None:
    endpoint = f"http://127.0.0.1:{free_port()}"  # nobody listens there
    settings = StorageSettings.from_config(
        {
            "storage.endpoint": endpoint,
            "storage.allow.http": "true",
            "storage.region": "us-east-1",
            "storage.access.key.id": "k",
            "storage.secret.access.key": "s",
        }
    )
    with pytest.raises(StorageError, match=rf"s3://b/p \(endpoint {endpoint}\).*check storage.endpoint"):
        prove_conditional_create(parse_location("s3://b/p"), settings)
