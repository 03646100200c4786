"""Shared fixtures: one real ZooKeeper and one real Spark session per test run.

Isolation between tests comes from a per-test ZooKeeper chroot and a per-test
``sparklog.home`` (so per-test log dirs), never from mocks.

Tests run in tiers, fastest first — ``unit`` (pure logic, seconds), ``integration`` (real
Spark, ZooKeeper, Delta), ``wire`` (broker processes and Kafka clients), ``fault`` (processes
killed, sessions expired) — each test marked with its folder's tier, so a broken unit is
reported within seconds of ``make test`` and ``pytest -m unit`` (or ``-m "not fault"``) picks
tiers.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import sparklog
from sparklog.metadata import embedded
from sparklog.testing import ZooKeeperEnsemble
from sparklog.testing.object_stores import MotoS3
from sparklog.testing.store_proxy import StoreProxy

for _var in ("SPARKLOG_HOME", "SPARKLOG_ZOOKEEPER", "SPARKLOG_CONF"):
    os.environ.pop(_var, None)

TIERS = ("unit", "integration", "wire", "fault")


def _tier(item: pytest.Item) -> str:
    folder = Path(str(item.path)).parent.name
    if folder not in TIERS:
        raise pytest.UsageError(f"{item.nodeid}: tests live in one of the tier folders {TIERS}")
    return folder


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(getattr(pytest.mark, _tier(item)))
    # A stable sort: files stay whole and in their order within a tier.
    items.sort(key=lambda item: TIERS.index(_tier(item)))


@pytest.fixture(scope="session")
def zk_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``127.0.0.1:<port>`` of an embedded ZooKeeper started for this test run."""
    home = tmp_path_factory.mktemp("zk-home")
    connect = embedded.ensure_started(home)
    try:
        yield connect
    finally:
        embedded.stop(home)


@pytest.fixture(scope="session")
def zk_ensemble(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperEnsemble]:
    """A 3-server ZooKeeper ensemble for failover tests, started once (on first use). A test
    that kills servers restarts them before it ends; use a chroot of your own on it."""
    with ZooKeeperEnsemble(tmp_path_factory.mktemp("zk-ensemble")) as ensemble:
        ensemble.start()
        yield ensemble


@pytest.fixture(scope="session")
def moto_s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoS3]:
    """moto's S3 server on loopback (a child process), started once per run (on first use); a
    test takes a bucket of its own (``s3_bucket``, ``log_store``)."""
    with MotoS3(tmp_path_factory.mktemp("moto")) as server:
        yield server


@pytest.fixture
def proxy(moto_s3: MotoS3, tmp_path: Path) -> Iterator[StoreProxy]:
    """A counting, fault-injecting proxy in front of ``moto_s3``, the test's own."""
    with StoreProxy(tmp_path / "proxy", moto_s3) as running:
        yield running


@pytest.fixture
def s3_bucket(moto_s3: MotoS3) -> str:
    """A fresh bucket on the shared moto server, unique to the test."""
    bucket = f"test-{uuid.uuid4().hex[:12]}"
    moto_s3.create_bucket(bucket)
    return bucket


@pytest.fixture
def zk_connect(zk_server: str) -> str:
    """A fresh chroot on the shared server, unique to the test."""
    return f"{zk_server}/test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def sparklog_home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    return home


@pytest.fixture
def log_store(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str | None:
    """Where this test's topic tables live: None for the local default (``<home>/data``), or
    an ``s3://`` log dir in a bucket of its own on moto, for tests parametrised with
    :data:`tests.helpers.BOTH_STORES`. The store is reached through the ``AWS_*`` variables,
    as a user's processes would (child processes inherit them)."""
    kind = getattr(request, "param", "local")
    if kind == "local":
        return None
    if kind != "s3":
        raise pytest.UsageError(f"log_store is 'local' or 's3', not {kind!r}")
    server: MotoS3 = request.getfixturevalue("moto_s3")
    bucket = f"test-{uuid.uuid4().hex[:12]}"
    server.create_bucket(bucket)
    for name, value in server.environ().items():
        monkeypatch.setenv(name, value)
    return f"s3://{bucket}/cluster"


@pytest.fixture
def cluster_options(
    request: pytest.FixtureRequest, zk_connect: str, sparklog_home: Path, log_store: str | None
) -> dict[str, str]:
    """Settings that point any client (API, CLI, Spark, child process) at this test's cluster;
    on a store, its ``storage.*`` settings too (Spark's Python workers do not see variables
    set after the session started)."""
    options = {"zookeeper.connect": zk_connect, "sparklog.home": str(sparklog_home)}
    if log_store is not None:
        server: MotoS3 = request.getfixturevalue("moto_s3")
        options.update({"log.dirs": log_store, **server.settings()})
    return options


@pytest.fixture
def cluster(cluster_options: dict[str, str]) -> Iterator[sparklog.Cluster]:
    c = sparklog.connect(cluster_options)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """One local Spark session for the whole run (quiet logging, sparklog source registered)."""
    from sparklog.spark.session import get_or_create_session

    session = get_or_create_session(app_name="sparklog-tests", master="local[2]")
    try:
        yield session
    finally:
        session.stop()
