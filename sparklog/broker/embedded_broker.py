"""The embedded broker: one broker agent per ``sparklog.home``, started in the background the
way the embedded ZooKeeper is (:mod:`sparklog.metadata.embedded`), so Kafka clients reach a
single-machine sparklog at ``127.0.0.1:9092`` (DESIGN §14).

Invariants:

* One agent per ``home``: ``sparklog broker start`` with the home's config — id ``broker.id``,
  log dir ``log.dirs`` (default ``<home>/data``), ``listeners`` (default
  ``PLAINTEXT://127.0.0.1:9092``; a fixed port, 0 is refused), the config's ZooKeeper (the
  embedded one when ``zookeeper.connect`` is unset). Its files live under ``<home>/broker/``:
  ``broker.properties`` (the resolved config the agent runs with, written by the starter),
  ``server.json`` (``{"pid", "broker_id", "listeners", "zookeeper", "started_ms"}``),
  ``broker.log`` (the agent's stdout and stderr) and ``start.lock``. Its metrics endpoint
  (``metrics.port``, default 0: a port the OS picks) is reported from its registration.
* Starting and stopping hold an exclusive ``flock`` on ``start.lock``, so concurrent starters
  in any number of processes end up with exactly one agent.
* "Running" is judged on the agent itself, never on the caller's config: ``server.json``
  names a live pid whose command line names this home's ``broker.properties`` (the config that
  pid runs with: it is written only before a launch, after every earlier agent is stopped);
  that file's broker id is live in its ZooKeeper (``/brokers/ids/<id>``); its listeners
  accept TCP connections. ``server.json`` is written only once all hold. :func:`status`
  reports that agent's listeners and the endpoints it registered, so another program on the
  configured port is never taken for the broker.
* :func:`ensure_started` reuses a running agent of the config's broker id and ZooKeeper
  whatever its listeners (e.g. started with ``--listeners`` because the configured port was
  taken); :func:`start` also requires the config's listeners. Anything else of this home's
  (hung, orphaned, or configured otherwise) is stopped before a start.
* A start that fails raises :class:`~sparklog.errors.BrokerNotAvailableError` naming the
  listener port(s) and the tail of ``broker.log`` (e.g. the port is taken by another process);
  nothing of the attempt keeps running.
* The agent outlives the process that started it (own session, no inherited descriptors);
  only :func:`stop` ends it: SIGTERM (a clean shutdown, deregistered at once), SIGKILL after
  the timeout. Only processes whose command line names this home's ``broker.properties`` are
  ever signalled.
* Nothing starts it implicitly (not :func:`sparklog.connect`, not the CLI's other commands):
  ``make demo`` and ``sparklog broker start --embedded`` do; ``sparklog broker stop``,
  ``sparklog zookeeper stop`` and ``make clean`` stop it.

POSIX only, like the embedded ZooKeeper (the shared mechanics are
:class:`sparklog.metadata.daemon.Daemon`).
"""

from __future__ import annotations

import os
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from sparklog.config import ClusterConfig, Endpoint, parse_listeners, resolve_cluster_config
from sparklog.errors import BrokerNotAvailableError, ConfigError, CoordinationError
from sparklog.metadata import embedded
from sparklog.metadata.broker_registration import live_broker_ids, live_brokers
from sparklog.metadata.daemon import Daemon
from sparklog.metadata.session import ZkSession, resolve_connect
from sparklog.metadata.zkdata import BrokerRecord

__all__ = ["EmbeddedBrokerStatus", "ensure_started", "recorded_config", "recorded_pid", "start", "status", "stop"]

_STATUS_CONNECT_TIMEOUT_MS = 5_000
# Environment variables that would override the agent's broker.properties.
_CONFIG_ENV = ("SPARKLOG_HOME", "SPARKLOG_ZOOKEEPER", "SPARKLOG_CONF")


@dataclass(frozen=True)
class EmbeddedBrokerStatus:
    """The running agent's own settings; when none runs, the caller's config's."""

    running: bool
    pid: int | None
    broker_id: int
    listeners: tuple[str, ...]  # NAME://host:port the agent listens on
    bootstrap_servers: str  # host:port,... clients connect to (the endpoints the agent registered)
    log_dir: str
    log_file: str
    # Where it serves its Prometheus metrics (its registration's); None when it serves none.
    metrics_url: str | None = None


@dataclass(frozen=True)
class _Agent:
    """The home's running agent: the config it runs with, its pid and its live registration."""

    config: ClusterConfig
    pid: int
    registration: BrokerRecord

    def serves(self, config: ClusterConfig, any_listeners: bool) -> bool:
        """Whether it is the broker ``config`` asks for (listeners aside if ``any_listeners``)."""
        mine = self.config
        same = (mine.broker_id, mine.zookeeper_connect) == (config.broker_id, config.zookeeper_connect)
        return same and (any_listeners or mine.listeners == config.listeners)


def _daemon(home: str | os.PathLike[str]) -> Daemon:
    return Daemon.of(home, "broker", "broker.properties", "broker.log", "embedded broker", BrokerNotAvailableError)


def _ports(config: ClusterConfig) -> str:
    return ", ".join(str(endpoint.port) for endpoint in config.listeners)


def _check_listeners(config: ClusterConfig) -> None:
    if not config.listeners:
        raise ConfigError("listeners is empty: the embedded broker needs one, e.g. PLAINTEXT://127.0.0.1:9092")
    if any(endpoint.port == 0 for endpoint in config.listeners):
        raise ConfigError(
            f"listeners {','.join(map(str, config.listeners))}: the embedded broker needs a fixed port "
            "(clients find it there), not 0"
        )


def _accepts(endpoint: Endpoint, timeout_s: float = 1.0) -> bool:
    """Whether something accepts TCP connections at ``endpoint`` (a wildcard host: locally)."""
    host = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(endpoint.host, endpoint.host)
    try:
        with socket.create_connection((host, endpoint.port), timeout=timeout_s):
            return True
    except OSError:
        return False


def _listening(config: ClusterConfig) -> bool:
    return all(_accepts(endpoint) for endpoint in config.listeners)


def _live(zk: ZkSession, broker_id: int) -> bool:
    try:
        return broker_id in live_broker_ids(zk)
    except CoordinationError:  # ZooKeeper unreachable right now: not (yet) live
        return False


def _status_session(config: ClusterConfig) -> ZkSession | None:
    """A session on the config's ZooKeeper for a status check, never starting the embedded one."""
    if config.zookeeper_connect is None and not embedded.status(config.home).running:
        return None
    timeout_ms = min(config.zookeeper_connection_timeout_ms, _STATUS_CONNECT_TIMEOUT_MS)
    return ZkSession(resolve_connect(config), config.zookeeper_session_timeout_ms, timeout_ms)


def _status(config: ClusterConfig, agent: _Agent | None = None) -> EmbeddedBrokerStatus:
    if agent is not None:
        config = agent.config
        advertised = parse_listeners(
            f"the registration of broker {config.broker_id}", ",".join(agent.registration.endpoints)
        )
    else:
        advertised = config.advertised_listeners or config.listeners
    return EmbeddedBrokerStatus(
        running=agent is not None,
        pid=None if agent is None else agent.pid,
        broker_id=config.broker_id,
        listeners=tuple(map(str, config.listeners)),
        bootstrap_servers=",".join(f"{e.host or socket.gethostname()}:{e.port}" for e in advertised),
        log_dir=config.log_dir,
        log_file=str(_daemon(config.home).log),
        metrics_url=(agent.registration.metrics_url or None) if agent is not None else None,
    )


def _registration(config: ClusterConfig) -> BrokerRecord | None:
    """``config``'s broker's live registration in ``config``'s ZooKeeper, if any."""
    try:
        zk = _status_session(config)
        if zk is None:
            return None
        try:
            return live_brokers(zk).get(config.broker_id)
        finally:
            zk.close()
    except CoordinationError:  # ZooKeeper unreachable right now: not (yet) live
        return None


def _running_agent(home: str | os.PathLike[str]) -> _Agent | None:
    """The home's agent if it runs (see "Running" above)."""
    pid = _daemon(home).recorded_pid()
    config = recorded_config(home) if pid is not None else None
    if pid is None or config is None or not _listening(config):
        return None
    registration = _registration(config)
    return None if registration is None else _Agent(config, pid, registration)


def status(config: ClusterConfig) -> EmbeddedBrokerStatus:
    """The home's agent as it runs (see "Running" above), or ``config``'s broker not running;
    lock-free, and never starts anything (not even the embedded ZooKeeper)."""
    return _status(config, _running_agent(config.home))


def ensure_started(
    config: ClusterConfig, timeout_s: float = 60.0, *, any_listeners: bool = True
) -> EmbeddedBrokerStatus:
    """The home's running agent of ``config``'s broker id and ZooKeeper (with ``config``'s
    listeners unless ``any_listeners``), started if there is none."""
    agent = _running_agent(config.home)  # lock-free fast path for the common, already-running case
    if agent is not None and agent.serves(config, any_listeners):
        return _status(config, agent)
    return start(config, timeout_s, any_listeners=any_listeners)


def _write_properties(path: Path, config: ClusterConfig) -> None:
    lines = "".join(f"{key}={value}\n" for key, value in sorted(config.to_options().items()))
    tmp = path.with_suffix(".tmp")
    tmp.write_text("# written by sparklog.broker.embedded_broker: the embedded broker's settings\n" + lines)
    os.replace(tmp, path)


def _command(config: ClusterConfig, properties: Path) -> list[str]:
    command = [sys.executable, "-m", "sparklog.cli.main", "broker", "start"]
    command += ["--id", str(config.broker_id), "--log-dir", config.log_dir, "--command-config", str(properties)]
    return command + (["--rack", config.broker_rack] if config.broker_rack else [])


def _wait_released(zk: ZkSession, config: ClusterConfig, predecessor: bool, deadline: float) -> None:
    """Wait for the broker id to be free: a predecessor of ours killed without a clean
    shutdown keeps it until its session expires; anyone else's agent is an error at once."""
    while _live(zk, config.broker_id):
        if not predecessor or time.monotonic() >= deadline:
            raise BrokerNotAvailableError(
                f"broker {config.broker_id} is already live in ZooKeeper {zk.connect_string}, held by an agent "
                f"that is not the embedded broker of {config.home}: stop that agent, or set broker.id to another id"
            )
        time.sleep(0.1)


def _failure(config: ClusterConfig, reason: str, command: list[str], tail: str) -> BrokerNotAvailableError:
    listeners = ",".join(map(str, config.listeners))
    hint = ""
    if "Cannot listen on" in tail or "Address already in use" in tail:
        hint = (
            f"; port {_ports(config)} is taken by another process: stop it, or set listeners to a free port "
            "(listeners= in the properties file, or sparklog broker start --embedded --listeners ...)"
        )
    return BrokerNotAvailableError(
        f"embedded broker {config.broker_id} of {config.home} {reason} (listeners {listeners}, port "
        f"{_ports(config)}){hint}.\ncommand: {' '.join(command)}\n"
        f"last lines of {_daemon(config.home).log}:\n{tail}"
    )


def start(config: ClusterConfig, timeout_s: float = 60.0, *, any_listeners: bool = False) -> EmbeddedBrokerStatus:
    """Start the home's agent unless it runs already as ``config`` says (listeners aside if
    ``any_listeners``); return its status either way."""
    _check_listeners(config)
    deadline = time.monotonic() + timeout_s
    daemon = _daemon(config.home)
    with daemon.locked(deadline):
        agent = _running_agent(config.home)
        if agent is not None and agent.serves(config, any_listeners):
            return _status(config, agent)
        # Whatever of this home still runs is hung, orphaned or configured otherwise.
        predecessor = daemon.read_state() is not None
        predecessor = daemon.kill_all(15.0) or predecessor
        zk = ZkSession.from_config(config).start()  # starts the embedded ZooKeeper if that is the config's
        try:
            _wait_released(zk, config, predecessor, deadline)
            _write_properties(daemon.marker, config)
            command = _command(config, daemon.marker)
            env = {k: v for k, v in os.environ.items() if k not in _CONFIG_ENV}
            proc, offset = daemon.launch(command, env)
            ready = daemon.wait_ready(proc, lambda: _listening(config) and _live(zk, config.broker_id), deadline)
            registration = live_brokers(zk).get(config.broker_id) if ready else None
        finally:
            zk.close()
        if registration is not None:
            daemon.write_state(
                proc.pid,
                broker_id=config.broker_id,
                listeners=[str(e) for e in config.listeners],
                zookeeper=config.zookeeper_connect,
            )
            return _status(config, _Agent(config, proc.pid, registration))
        if proc.poll() is None:
            daemon.kill(proc.pid, 5.0)
            reason = f"was not live and listening within {timeout_s:g} s"
        else:
            reason = f"exited with code {proc.returncode}"
        raise _failure(config, reason, command, daemon.log_tail(offset))


def stop(home: str | os.PathLike[str], timeout_s: float = 30.0, *, only_on_embedded_zookeeper: bool = False) -> bool:
    """Stop the home's agent (SIGTERM, SIGKILL after ``timeout_s``); True if one was running.
    ``only_on_embedded_zookeeper``: leave an agent alone that was started against an external
    ``zookeeper.connect`` (what stopping the embedded ZooKeeper wants)."""
    daemon = _daemon(home)
    if not daemon.root.is_dir():
        return False
    state = daemon.read_state()
    if only_on_embedded_zookeeper and state is not None and state.get("zookeeper"):
        return False
    with daemon.locked(time.monotonic() + timeout_s):
        return daemon.kill_all(timeout_s)


def recorded_pid(home: str | os.PathLike[str]) -> int | None:
    """The pid of the home's agent as recorded at its start, if that process still runs."""
    return _daemon(home).recorded_pid()


def recorded_config(home: str | os.PathLike[str]) -> ClusterConfig | None:
    """The config the home's agent was last started with (its ``broker.properties``), if any:
    what to check the status of when the caller's own config may differ (e.g. ``--listeners``)."""
    properties = _daemon(home).marker
    if not properties.is_file():
        return None
    return resolve_cluster_config(environ={"SPARKLOG_CONF": str(properties)})
