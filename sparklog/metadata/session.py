"""A chrooted ZooKeeper session, and the one place retryable ZooKeeper errors are declared.

``zookeeper.connect`` is ``host:port[,host:port...][/chroot]``; without a chroot sparklog
uses ``/sparklog``. The chroot znode is created on first connect. With no
``zookeeper.connect`` the embedded server under ``sparklog.home`` is started (or reused).
A session not connected after :data:`PROBE_AFTER_S` has its addresses probed once
(:mod:`sparklog.metadata.address_probe`): a Kafka listener or another server that is not
ZooKeeper fails at once with a :class:`~sparklog.errors.ConfigError` saying so, instead of
after the whole connection timeout.
Code outside ``metadata/`` never sees kazoo types: errors are wrapped into
:class:`~sparklog.errors.CoordinationError` subclasses.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import (
    ConnectionLoss,
    KazooException,
    NoNodeError,
    OperationTimeoutError,
    SessionExpiredError,
    SessionMovedError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import ForceRetryError, KazooRetry, RetryFailedError

from sparklog.config import ClusterConfig
from sparklog.errors import ConfigError, CoordinationError, ZooKeeperUnavailableError
from sparklog.metadata.address_probe import wrong_service

__all__ = [
    "DEFAULT_CHROOT",
    "PROBE_AFTER_S",
    "RETRYABLE_ERRORS",
    "ZkSession",
    "resolve_connect",
    "split_chroot",
    "zk_errors",
]

DEFAULT_CHROOT = "/sparklog"
# A reachable ZooKeeper grants a session within milliseconds; later than this, find out what
# answers at the addresses (probing every connect would cost each ZooKeeper a connection).
PROBE_AFTER_S = 1.0
# The errors after which the same request may simply be sent again: the connection to one
# server was lost or the session moved to another (an ensemble failover), the session is kept.
# A write whose reply was lost may have been applied: callers make a repeat harmless.
RETRYABLE_ERRORS: tuple[type[BaseException], ...] = (ConnectionLoss, OperationTimeoutError, SessionMovedError)

T = TypeVar("T")

_NO_CLUSTER_IN_WORKER = (
    "no ZooKeeper for the sparklog cluster of home {home}: no zookeeper.connect is set and no "
    "embedded ZooKeeper runs there, and a Spark Python worker never starts one. Point the job "
    'at its cluster: the options zookeeper.connect or sparklog.home of format("sparklog"), '
    "spark.sparklog.* session conf (passed to the source when sparklog.spark is imported in the "
    "driver), or SPARKLOG_ZOOKEEPER / SPARKLOG_HOME in the workers' environment "
    "(spark.executorEnv.*); or start the embedded server: sparklog zookeeper start --home {home}"
)

logging.getLogger("kazoo").setLevel(logging.ERROR)


def split_chroot(connect: str) -> tuple[str, str]:
    """``"h1:2181,h2:2181/x/y"`` → ``("h1:2181,h2:2181", "/x/y")``; default chroot if none."""
    hosts, slash, chroot = connect.partition("/")
    chroot = "/" + chroot.strip("/") if slash and chroot.strip("/") else DEFAULT_CHROOT
    if not hosts:
        raise ZooKeeperUnavailableError(f"zookeeper.connect {connect!r} names no host:port")
    return hosts, chroot


def resolve_connect(config: ClusterConfig) -> str:
    """The full connect string, starting the embedded server when none is configured."""
    if config.zookeeper_connect:
        hosts, chroot = split_chroot(config.zookeeper_connect)
        return hosts + chroot
    from sparklog.metadata import embedded

    if embedded.in_spark_worker():
        running = embedded.status(config.home).connect
        if running is None:
            raise ZooKeeperUnavailableError(_NO_CLUSTER_IN_WORKER.format(home=config.home))
        return running + DEFAULT_CHROOT
    return embedded.ensure_started(config.home) + DEFAULT_CHROOT


@contextmanager
def zk_errors(what: str) -> Iterator[None]:
    """Wrap kazoo errors raised inside the block, naming the operation."""
    try:
        yield
    except (SessionExpiredError, *RETRYABLE_ERRORS, RetryFailedError, KazooTimeoutError) as exc:
        raise ZooKeeperUnavailableError(
            f"{what}: ZooKeeper unreachable or session lost ({type(exc).__name__}); clients retry this "
            "within their timeouts, check the ensemble (`sparklog zookeeper status` for the embedded one)"
        ) from exc
    except KazooException as exc:
        raise CoordinationError(f"{what}: {type(exc).__name__} {exc}") from exc


class ZkSession:
    """One kazoo client bound to the cluster chroot. States: new → started → closed."""

    def __init__(self, connect: str, session_timeout_ms: int = 18_000, connection_timeout_ms: int = 30_000) -> None:
        self.hosts, self.chroot = split_chroot(connect)
        self._session_timeout_s = session_timeout_ms / 1000.0
        self._connection_timeout_s = connection_timeout_ms / 1000.0
        self._client: KazooClient | None = None
        self.retry = KazooRetry(max_tries=5, delay=0.05, max_delay=1.0, ignore_expire=False)
        self.retry.retry_exceptions = (*RETRYABLE_ERRORS, ForceRetryError)

    @classmethod
    def from_config(cls, config: ClusterConfig) -> ZkSession:
        return cls(resolve_connect(config), config.zookeeper_session_timeout_ms, config.zookeeper_connection_timeout_ms)

    @property
    def connect_string(self) -> str:
        return self.hosts + self.chroot

    @property
    def client(self) -> KazooClient:
        if self._client is None:
            self.start()
        assert self._client is not None
        return self._client

    def _new_client(self, hosts: str) -> KazooClient:
        return KazooClient(
            hosts=hosts,
            timeout=self._session_timeout_s,
            connection_retry=KazooRetry(max_tries=-1, delay=0.05, max_delay=1.0),
            command_retry=KazooRetry(max_tries=5, delay=0.05, max_delay=1.0),
        )

    def _start_client(self, client: KazooClient) -> None:
        deadline = time.monotonic() + self._connection_timeout_s
        connected = client.start_async()
        problem = None
        if not connected.wait(min(PROBE_AFTER_S, self._connection_timeout_s)):
            problem = wrong_service(self.hosts)
            if problem is None:
                connected.wait(max(deadline - time.monotonic(), 0.0))
        if client.connected:
            return
        client.stop()
        client.close()
        if problem is not None:
            raise ConfigError(problem)
        raise ZooKeeperUnavailableError(
            f"Cannot connect to ZooKeeper at {self.hosts} within {self._connection_timeout_s:.0f} s: "
            "check zookeeper.connect, or unset it to use the embedded server "
            "(`sparklog zookeeper status`)"
        )

    def start(self) -> ZkSession:
        if self._client is not None:
            return self
        root = self._new_client(self.hosts)
        self._start_client(root)
        try:
            with zk_errors(f"creating chroot {self.chroot}"):
                root.ensure_path(self.chroot)
        finally:
            root.stop()
            root.close()
        client = self._new_client(self.hosts + self.chroot)
        self._start_client(client)
        self._client = client
        return self

    def call(self, what: str, fn: Callable[[], T]) -> T:
        """Run ``fn`` with retries on retryable errors; wrap the rest."""
        with zk_errors(what):
            return self.retry(fn)

    def delete_own_ephemeral(self, path: str, what: str) -> None:
        """Delete the ephemeral ``path`` if this session created it (a successor's is kept)."""
        with zk_errors(what):
            try:
                stat = self.client.exists(path)
                if stat is not None and stat.ephemeralOwner == self.session_id:
                    self.client.delete(path, version=stat.version)
            except NoNodeError:
                pass

    @property
    def session_id(self) -> int:
        sid = self.client.client_id
        return sid[0] if sid else 0

    def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            try:
                client.stop()
            finally:
                client.close()

    def __enter__(self) -> ZkSession:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
