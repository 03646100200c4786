"""The broker agent (``sparklog broker start``): keeps one broker live, its replicas in step,
and competes for the controller role.

A broker is a storage root; its agent is the process that vouches for it (DESIGN §2):

* **storage probe** every ``probe_interval_ms``: write a heartbeat file under the log dir,
  fsync it, read it back. Passing → the ephemeral ``/brokers/ids/<id>`` is registered;
  failing (an error, or no answer within ``probe_timeout_ms``) → deregistered, so the
  controller moves leadership away, until a probe passes again;
* **replica fetcher** (:class:`sparklog.runtime.replica_fetcher.ReplicaFetcher`) for the partitions the
  broker follows, while registered;
* **log manager** (:class:`sparklog.broker.log_manager.LogManager`): every
  ``log.retention.check.interval.ms``, retention and the Delta log step for the partitions
  the broker leads;
* **transaction coordinator** (:class:`~sparklog.broker.transactions.coordinator.TransactionCoordinator`):
  every second, aborts transactions past their ``transaction.timeout.ms`` and completes
  decided ones, for the transactional ids this broker coordinates;
* **metrics** (:class:`~sparklog.broker.metrics.BrokerMetrics`): what the listeners and the
  appender record, served at ``http://<metrics.host>:<metrics.port>/metrics`` from the
  start (port 0: the OS picks one) and registered as ``metrics_url`` with the broker;
* **controller candidacy** (:class:`~sparklog.metadata.controller_election.ControllerElection`);
  when elected, :class:`~sparklog.broker.controller.controller.Controller` runs here.

States: *new* → (:meth:`start`) *running* → (:meth:`stop`, e.g. on SIGTERM) *stopped*:
controller role resigned, fetcher stopped, ephemeral znode deleted, session closed. A
``kill -9`` skips all that; the session timeout does the rest.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from dataclasses import dataclass, field

from sparklog.broker.append_watchers import AppendWatchers
from sparklog.broker.controller.controller import Controller, ControllerSettings
from sparklog.broker.groups.coordinator import BrokerGroups
from sparklog.broker.kafka.context import BrokerContext
from sparklog.broker.kafka.listener import (
    DISK_PIPELINED_BYTES,
    DISK_PIPELINED_REQUESTS,
    STORE_PIPELINED_REQUESTS,
    KafkaListener,
    NetworkThread,
)
from sparklog.broker.kafka.request_channel import RequestChannel
from sparklog.broker.leader_appender import LeaderAppender
from sparklog.broker.log_manager import LogManager
from sparklog.broker.metrics import BrokerMetrics, MetricsServer, replica_gauges
from sparklog.broker.partition import LeaderPartitions
from sparklog.broker.producer_state import ProducerStates
from sparklog.broker.round_pacing import RoundBounds
from sparklog.broker.transactions.coordinator import TransactionCoordinator
from sparklog.broker.transactions.markers import MarkerWriter
from sparklog.config import ClusterConfig, Endpoint
from sparklog.errors import ConfigError, SparklogError
from sparklog.log.checkpoints import checkpoint_in_a_child_process
from sparklog.log.object_store import prove_conditional_create, store_requests
from sparklog.log.storage import fsync_path
from sparklog.metadata.broker_registration import BrokerRegistration
from sparklog.metadata.controller_election import ControllerElection
from sparklog.metadata.foreign_writes import ForeignWrites
from sparklog.metadata.lease import broker_lease_owner
from sparklog.metadata.producer_ids import ProducerIdBlocks
from sparklog.metadata.zkdata import BrokerRecord
from sparklog.model.storage_location import StorageSettings, parse_location
from sparklog.runtime.replica_fetcher import ReplicaFetcher
from sparklog.runtime.replica_manager import ReplicaManager

__all__ = [
    "BrokerAgent",
    "BrokerSettings",
    "ControllerSettings",
    "advertised_endpoints",
    "metrics_host",
    "probe_storage",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BrokerSettings:
    probe_interval_ms: int = 1_000
    probe_timeout_ms: int = 5_000
    controller: ControllerSettings = field(default_factory=ControllerSettings)


def probe_storage(log_dir: str, broker_id: int, settings: StorageSettings) -> None:
    """Write, fsync and read back a heartbeat file under ``log_dir``; raises OSError when any
    step fails or the content read differs. A store is proven once (conditional create,
    :func:`~sparklog.log.object_store.prove_conditional_create`) and then judged by the
    requests the broker makes anyway: a heartbeat object a second would cost requests while
    the broker idles (DESIGN §16)."""
    location = parse_location(log_dir)
    if location.is_object_store:
        prove_conditional_create(location, settings)
        return
    os.makedirs(log_dir, exist_ok=True)
    path = os.path.join(log_dir, f".sparklog-broker-{broker_id}.heartbeat")
    nonce = uuid.uuid4().hex.encode()
    with open(path, "wb") as handle:
        handle.write(nonce)
        handle.flush()
        os.fsync(handle.fileno())
    fsync_path(log_dir)
    with open(path, "rb") as handle:
        if handle.read() != nonce:
            raise OSError(f"heartbeat file {path} read back different content")


class BrokerAgent:
    """One broker's agent; see the module docstring."""

    def __init__(self, config: ClusterConfig, settings: BrokerSettings | None = None) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self.settings = settings or BrokerSettings()
        self.replicas = ReplicaManager.connect(config)
        self.metrics = BrokerMetrics(lambda: replica_gauges(self.replicas, self.broker_id), store_requests)
        self.controller = Controller(self.replicas, self.broker_id, self.settings.controller)
        self.appender = LeaderAppender(
            self.replicas,
            self.broker_id,
            config.writer_lease_ms,
            self.metrics,
            watchers=_watchers_of_every_writer(self.replicas, self.broker_id),
            round_bounds=_round_bounds(config),
        )
        self.producer_states = ProducerStates()
        self.producer_ids = ProducerIdBlocks(self.replicas.zk)
        self.groups = BrokerGroups(self.replicas, self.broker_id, config)
        # Markers to other leaders go over the first listener (Kafka's inter.broker.listener.name).
        inter_broker = config.listeners[0].name if config.listeners else "PLAINTEXT"
        self.transactions = TransactionCoordinator(
            self.groups,
            self.producer_ids,
            MarkerWriter(self.replicas, self.broker_id, self.appender, inter_broker),
            config.transaction_max_timeout_ms,
        )
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._registration: BrokerRegistration | None = None
        self._election: ControllerElection | None = None
        self._listeners: list[KafkaListener] = []
        self._network = NetworkThread(f"broker-{self.broker_id}-network")
        self._requests = RequestChannel(config.num_io_threads, self.metrics, f"broker-{self.broker_id}")
        self._metrics_server: MetricsServer | None = None
        self.healthy = False

    @property
    def listeners(self) -> list[KafkaListener]:
        return list(self._listeners)

    def start(self) -> BrokerAgent:
        # Checkpoints (delta-rs holds the GIL while it waits for the store) must not stall
        # the requests this process serves.
        checkpoint_in_a_child_process()
        # The persistent registry says where this broker's storage is, also while it is down.
        self.replicas.metadata.register_broker(self.broker_id, self.config.log_dir, self.config.broker_rack)
        self._network.start()
        self._requests.start()
        pipelined_requests, pipelined_bytes = _pipelining(self.config)
        self._listeners = [
            KafkaListener(
                endpoint,
                BrokerContext(
                    self.replicas,
                    endpoint.name,
                    self.broker_id,
                    LeaderPartitions(
                        self.replicas, self.broker_id, self.appender, self.producer_states, self.transactions
                    ),
                    self.producer_ids,
                    groups=self.groups,
                    transactions=self.transactions,
                    metrics=self.metrics,
                ),
                self.config.socket_request_max_bytes,
                self._network,
                self._requests,
                pipelined_requests=pipelined_requests,
                pipelined_bytes=pipelined_bytes,
            )
            for endpoint in self.config.listeners
        ]
        advertised = advertised_endpoints(self.config.advertised_listeners, self._listeners)
        self._metrics_server = self._serve_metrics()
        record = BrokerRecord(
            log_dir=self.config.log_dir,
            rack=self.config.broker_rack,
            host=advertised[0].host if advertised else socket.gethostname(),
            port=advertised[0].port if advertised else -1,
            endpoints=[str(e) for e in advertised],
            metrics_url=self.metrics_url or "",
        )
        for listener in self._listeners:
            listener.start()
        self._registration = BrokerRegistration(self.replicas.zk, self.broker_id, record)
        self._probe_once()
        fetcher = ReplicaFetcher(self.replicas, self.broker_id)
        log_manager = LogManager(self.replicas, self.broker_id, self.config.log_retention_check_interval_ms)
        self._threads = [
            threading.Thread(target=self._probe_loop, name=f"broker-{self.broker_id}-probe", daemon=True),
            threading.Thread(
                target=self._fetch_loop, args=(fetcher,), name=f"broker-{self.broker_id}-fetcher", daemon=True
            ),
            threading.Thread(
                target=self.groups.run, args=(self._stop,), name=f"broker-{self.broker_id}-groups", daemon=True
            ),
            threading.Thread(
                target=self.groups.run_publisher,
                args=(self._stop,),
                name=f"broker-{self.broker_id}-group-publisher",
                daemon=True,
            ),
            threading.Thread(
                target=log_manager.run, args=(self._stop,), name=f"broker-{self.broker_id}-log-manager", daemon=True
            ),
            threading.Thread(
                target=self.transactions.run, args=(self._stop,), name=f"broker-{self.broker_id}-txn-sweep", daemon=True
            ),
        ]
        for thread in self._threads:
            thread.start()
        self._election = ControllerElection(
            self.replicas.zk, self.broker_id, self.controller.activate, self.controller.deactivate
        )
        self._election.start()
        log.info(
            "broker %d started (log dir %s, metrics %s)", self.broker_id, self.config.log_dir, self.metrics_url or "off"
        )
        return self

    def stop(self) -> None:
        """Clean shutdown: resign the controller role, stop fetching and retention, deregister, disconnect."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self._election is not None:
            self._election.resign()
        self.controller.deactivate()
        for thread in self._threads:
            thread.join(10)
        for listener in self._listeners:
            listener.stop()
        self._network.stop()
        self._requests.close()
        if self._metrics_server is not None:
            self._metrics_server.close()
        self.appender.close()
        if self._registration is not None:
            self._registration.close()
        self.replicas.close()
        log.info("broker %d stopped", self.broker_id)

    def wait(self) -> None:
        self._stop.wait()

    @property
    def metrics_url(self) -> str | None:
        """Where the agent serves its Prometheus metrics (None: ``metrics.port`` -1, or not started)."""
        if self._metrics_server is None:
            return None
        host = metrics_host(self.config)
        if host in ("0.0.0.0", "::"):
            host = socket.gethostname()
        return f"http://{f'[{host}]' if ':' in host else host}:{self._metrics_server.port}/metrics"

    def _serve_metrics(self) -> MetricsServer | None:
        port = self.config.metrics_port
        if port < 0:
            return None
        host = metrics_host(self.config)
        try:
            return self.metrics.serve(host, port)
        except OSError as exc:
            raise ConfigError(
                f"Cannot serve metrics on {host}:{port} (metrics.port): {exc.strerror}; choose a free port, "
                "0 for one the OS picks, or -1 for no metrics endpoint"
            ) from exc

    # -- loops -----------------------------------------------------------------------------
    def _probe_once(self) -> None:
        outcome: list[BaseException | None] = []
        worker = threading.Thread(
            target=lambda: outcome.append(
                _try(probe_storage, self.config.log_dir, self.broker_id, StorageSettings(self.config.storage))
            ),
            daemon=True,
        )
        worker.start()
        worker.join(self.settings.probe_timeout_ms / 1000)
        error = outcome[0] if outcome else TimeoutError(f"no answer within {self.settings.probe_timeout_ms} ms")
        assert self._registration is not None
        if error is None:
            if not self.healthy:
                self._registration.register()
                log.info("broker %d: storage %s healthy; registered", self.broker_id, self.config.log_dir)
            self.healthy = True
        else:
            if self.healthy or self._registration.registered:
                log.error(
                    "broker %d: storage probe of %s failed (%s); deregistering",
                    self.broker_id,
                    self.config.log_dir,
                    error,
                )
                self._registration.deregister()
            self.healthy = False

    def _probe_loop(self) -> None:
        while not self._stop.wait(self.settings.probe_interval_ms / 1000):
            try:
                self._probe_once()
            except Exception as exc:  # noqa: BLE001 - ZooKeeper trouble: the next probe tries again
                log.warning("broker %d: probe round failed: %s", self.broker_id, exc)

    def _fetch_loop(self, fetcher: ReplicaFetcher) -> None:
        while not self._stop.is_set():
            if not self.healthy:
                self._stop.wait(0.1)
                continue
            stop_when_unhealthy = threading.Event()

            def watch(stop_when_unhealthy: threading.Event = stop_when_unhealthy) -> None:
                while not self._stop.is_set() and self.healthy:
                    self._stop.wait(0.1)
                stop_when_unhealthy.set()

            threading.Thread(target=watch, daemon=True).start()
            fetcher.run(stop_when_unhealthy)


def metrics_host(config: ClusterConfig) -> str:
    """The address the metrics endpoint binds: ``metrics.host``, else the first listener's host
    (an empty host, as in ``PLAINTEXT://:9092``, is every interface)."""
    if config.metrics_host is not None:
        return config.metrics_host or "0.0.0.0"
    return (config.listeners[0].host or "0.0.0.0") if config.listeners else "127.0.0.1"


def advertised_endpoints(advertised: tuple[Endpoint, ...], listeners: list[KafkaListener]) -> list[Endpoint]:
    """What clients are told to connect to, per listener name: the advertised endpoint of the
    same name (port 0 → the port bound), or the listener's own (empty host → this host's name)."""
    result = []
    by_name = {e.name: e for e in advertised}
    for listener in listeners:
        bound = listener.endpoint
        chosen = by_name.get(bound.name, bound)
        if chosen.host in ("0.0.0.0", "::"):
            raise ConfigError(
                f"advertised.listeners: {chosen} is not an address a client can connect to; advertise this "
                "broker's host name or IP (Kafka refuses 0.0.0.0 too)"
            )
        host = chosen.host or socket.gethostname()
        port = chosen.port or listener.port
        result.append(Endpoint(bound.name, host, port))
    unknown = sorted(set(by_name) - {listener.endpoint.name for listener in listeners})
    if unknown:
        raise ConfigError(f"advertised.listeners names {unknown} that are not in listeners; use the same names")
    return result


def _try(fn: object, *args: object) -> BaseException | None:
    try:
        fn(*args)  # type: ignore[operator]
        return None
    except BaseException as exc:  # noqa: BLE001 - reported by the caller
        return exc


def _pipelining(config: ClusterConfig) -> tuple[int, int]:
    """How many Produce requests, and how many of their bytes, a connection may have started
    unanswered (see the listener): on a store, two rounds' worth of bytes, since what a
    connection can have unanswered over a round's latency is its throughput."""
    if parse_location(config.log_dir).is_object_store:
        return STORE_PIPELINED_REQUESTS, 2 * config.store_round_max_bytes
    return DISK_PIPELINED_REQUESTS, DISK_PIPELINED_BYTES


def _round_bounds(config: ClusterConfig) -> RoundBounds | None:
    """Rounds on an object store are paced (each costs requests); on a disk they are not."""
    if not parse_location(config.log_dir).is_object_store:
        return None
    return RoundBounds(config.store_round_linger_ms, config.store_round_max_bytes, config.store_rounds_per_second)


def _watchers_of_every_writer(replicas: ReplicaManager, broker_id: int) -> AppendWatchers:
    """The broker's append watchers, told of its own appends by its appender and of every
    other writer's through the partitions' write leases (DESIGN §15)."""
    foreign = ForeignWrites(replicas.zk, broker_lease_owner(broker_id))

    def follow(topic: str, partition: int) -> bool:
        try:
            foreign.follow(topic, partition, lambda: watchers.appended(topic, [partition]))
        except SparklogError as exc:  # ZooKeeper away: fetches wait out max.wait meanwhile
            log.info("not following other writers of %s-%d yet: %s", topic, partition, exc)
            return False
        return True

    watchers = AppendWatchers(follow)
    return watchers
