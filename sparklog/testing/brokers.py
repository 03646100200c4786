"""Real broker agents (``sparklog broker start`` processes) against a test's or a benchmark's
cluster.

:class:`BrokerAgents` runs agents as child processes, each with its own log dir under a base
dir, against a given ZooKeeper connect string (with the test's chroot) and ``sparklog.home``.
A test fails them the ways a real broker fails:

* :meth:`~BrokerAgents.kill` — SIGKILL: nothing is cleaned up, the ZooKeeper session times out;
* :meth:`~BrokerAgents.stop` — SIGTERM and wait: a clean shutdown (deregistered at once);
* :meth:`~BrokerAgents.pause` / :meth:`~BrokerAgents.resume` — SIGSTOP / SIGCONT: a hung
  process, whose session expires if it stays paused longer than the session timeout;
* :meth:`~BrokerAgents.start` — (re)start with the same id and log dir.

Liveness is what the cluster sees (``/brokers/ids``), not whether the process runs:
:meth:`~BrokerAgents.wait_live` / :meth:`~BrokerAgents.wait_not_live`,
:meth:`~BrokerAgents.controller`; :meth:`~BrokerAgents.metrics_url` is where an agent serves
its Prometheus metrics, from its registration (agents pick their metrics port through the OS
unless ``metrics.port`` is among the properties). Every agent's output (INFO logging included, appended
across restarts) is kept in ``<base>/broker-<id>.log``; :meth:`~BrokerAgents.logs` gathers
their tails so a failing assertion can show what the agents did. On exit (also when a test
fails) every agent still running is killed and reaped.

Agents read a properties file with ``zookeeper.session.timeout.ms`` (default 3000 ms, so a
killed agent is noticed within seconds) plus any extra properties.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import sparklog
from sparklog.metadata.broker_registration import live_broker_ids, live_brokers
from sparklog.metadata.controller_election import current_controller
from sparklog.testing.processes import ChildProcesses

__all__ = ["BrokerAgents", "free_port"]

# Runs `sparklog` like the console script, with INFO logging on stderr so the agent's log
# shows the controller's decisions (ISR changes, elections, reassignment steps).
_LAUNCHER = """\
import logging, runpy, sys
logging.basicConfig(level=getattr(logging, sys.argv.pop(1)), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
sys.argv = ["sparklog", *sys.argv[1:]]
runpy.run_module("sparklog.cli.main", run_name="__main__", alter_sys=True)
"""
_LOG_TAIL_LINES = 40


def free_port() -> int:
    """A TCP port nobody listens on now on 127.0.0.1 (the OS's pick for port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class BrokerAgents(ChildProcesses):
    """A set of broker agent processes for one test cluster; use as a context manager."""

    def __init__(
        self,
        zk_connect: str,
        home: Path,
        base_dir: Path,
        *,
        session_timeout_ms: int = 3_000,
        replica_lag_time_max_ms: int = 2_000,
        auto_leader_rebalance_enable: bool = False,
        leader_imbalance_check_interval_s: float | None = None,
        probe_interval_ms: int | None = None,
        racks: Mapping[int, str] | None = None,
        properties: Mapping[str, str] | None = None,
        log_level: str = "INFO",
        start_timeout_s: float = 30.0,
        log_store: str | None = None,
        shared_log_dir: bool = False,
    ) -> None:
        self.zk_connect = zk_connect
        self.log_store = log_store
        self.shared_log_dir = shared_log_dir
        self.home = Path(home)
        self.base_dir = Path(base_dir)
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.session_timeout_ms = session_timeout_ms
        self.start_timeout_s = start_timeout_s
        self._log_level = log_level
        self._racks = dict(racks or {})
        self._options = [
            "--replica-lag-time-max-ms",
            str(replica_lag_time_max_ms),
            "--auto-leader-rebalance-enable",
            "true" if auto_leader_rebalance_enable else "false",
        ]
        if leader_imbalance_check_interval_s is not None:
            self._options += ["--leader-imbalance-check-interval-seconds", str(leader_imbalance_check_interval_s)]
        if probe_interval_ms is not None:
            self._options += ["--probe-interval-ms", str(probe_interval_ms)]
        self.properties_file = self.base_dir / "broker.properties"
        settings = {"zookeeper.session.timeout.ms": str(session_timeout_ms), **(properties or {})}
        self.properties_file.write_text("".join(f"{k}={v}\n" for k, v in settings.items()), encoding="utf-8")
        self._ports: dict[int, int] = {}
        super().__init__()
        self._cluster: sparklog.Cluster | None = None

    def __enter__(self) -> BrokerAgents:
        return self

    def close(self) -> None:
        """Kill and reap every agent still running; close the observer's session."""
        super().close()
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None

    # -- where things are ------------------------------------------------------------------
    def log_dir(self, broker_id: int) -> Path:
        """Where ``broker_id``'s topic tables are when they are on the local disk."""
        return self.base_dir / f"broker-{broker_id}"

    def log_dir_uri(self, broker_id: int) -> str:
        """``broker_id``'s log dir: :meth:`log_dir`, or its prefix under ``log_store``, or with
        ``shared_log_dir`` ``log_store`` itself for every broker (shared storage: one table a
        topic)."""
        if self.log_store is None:
            return str(self.log_dir(broker_id))
        if self.shared_log_dir:
            return self.log_store
        return f"{self.log_store.rstrip('/')}/broker-{broker_id}"

    def log_path(self, broker_id: int) -> Path:
        return self.base_dir / f"broker-{broker_id}.log"

    def port(self, broker_id: int) -> int:
        """The Kafka-protocol port of ``broker_id``'s agent: a free port picked at its first
        start and kept across restarts, so a client's bootstrap list stays valid."""
        if broker_id not in self._ports:
            self._ports[broker_id] = free_port()
        return self._ports[broker_id]

    @property
    def bootstrap_servers(self) -> str:
        """``host:port,...`` of every agent started so far (Kafka clients' ``bootstrap.servers``)."""
        return ",".join(f"127.0.0.1:{port}" for _, port in sorted(self._ports.items()))

    def describe(self, broker_id: int) -> str:
        return f"broker {broker_id}'s agent"

    @property
    def cluster(self) -> sparklog.Cluster:
        """An observer client of the cluster (liveness, controller)."""
        if self._cluster is None:
            self._cluster = sparklog.connect({"zookeeper.connect": self.zk_connect, "sparklog.home": str(self.home)})
        return self._cluster

    # -- life cycle of agents ---------------------------------------------------------------
    def start(self, *broker_ids: int, wait: bool = True) -> None:
        """Start (or restart) the agents of ``broker_ids``; with ``wait``, return once all are live.

        A restarted id first waits for the ephemeral registration of its killed predecessor
        to expire: an agent refuses an id another live session holds."""
        for broker_id in broker_ids:
            if self.running(broker_id):
                raise AssertionError(
                    f"broker {broker_id}'s agent is already running (pid {self._processes[broker_id].pid})"
                )
        self.wait_not_live(broker_ids, timeout_s=self.session_timeout_ms / 1000 * 3 + 10)
        for broker_id in broker_ids:
            self._launch(broker_id)
        if wait:
            self.wait_live(broker_ids)

    def _launch(self, broker_id: int) -> None:
        command = [
            sys.executable,
            "-c",
            _LAUNCHER,
            self._log_level.upper(),
            "broker",
            "start",
            "--id",
            str(broker_id),
            "--log-dir",
            self.log_dir_uri(broker_id),
            "--zookeeper",
            self.zk_connect,
            "--home",
            str(self.home),
            "--config",
            str(self.properties_file),
            *self._options,
        ]
        if broker_id in self._racks:
            command += ["--rack", self._racks[broker_id]]
        command += ["--listeners", f"PLAINTEXT://127.0.0.1:{self.port(broker_id)}"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("SPARKLOG_")}
        # cwd: no stray conf/sparklog.properties of the repository is picked up.
        self._spawn(broker_id, command, self.base_dir, env)

    def stop(self, broker_id: int, timeout_s: float = 30.0) -> None:
        """SIGTERM the agent and wait for its clean shutdown (exit code 0)."""
        self._require_running(broker_id)
        self._signal(broker_id, signal.SIGTERM)
        code = self._reap(broker_id, timeout_s)
        if code is None:
            raise AssertionError(
                f"broker {broker_id}'s agent did not stop within {timeout_s} s of SIGTERM\n{self.logs([broker_id])}"
            )
        if code != 0:
            raise AssertionError(f"broker {broker_id}'s agent exited {code} after SIGTERM\n{self.logs([broker_id])}")

    # -- what the cluster sees ---------------------------------------------------------------
    def live(self) -> list[int]:
        """Broker ids registered live in ZooKeeper now."""
        return live_broker_ids(self.cluster.replicas.zk)

    def metrics_url(self, broker_id: int) -> str:
        """``http://host:port/metrics`` of ``broker_id``'s live agent (its registration's)."""
        record = live_brokers(self.cluster.replicas.zk).get(broker_id)
        if record is None or not record.metrics_url:
            state = "not live" if record is None else "live without a metrics endpoint (metrics.port=-1?)"
            raise AssertionError(f"broker {broker_id} is {state}\n{self.logs([broker_id])}")
        return record.metrics_url

    def controller(self) -> int | None:
        """The broker id holding ``/controller``, or None."""
        record = current_controller(self.cluster.replicas.zk)
        return None if record is None else record.broker_id

    def wait_live(self, broker_ids: Iterable[int], timeout_s: float | None = None) -> None:
        wanted = sorted(broker_ids)
        self.wait_for(
            lambda: set(wanted) <= set(self.live()),
            timeout_s or self.start_timeout_s,
            f"brokers {wanted} live",
            exited_is_failure=wanted,
        )

    def wait_not_live(self, broker_ids: Iterable[int], timeout_s: float | None = None) -> None:
        gone = sorted(broker_ids)
        self.wait_for(
            lambda: not set(gone) & set(self.live()),
            timeout_s or self.session_timeout_ms / 1000 * 3 + 10,
            f"brokers {gone} no longer live",
        )

    def wait_controller(self, timeout_s: float | None = None) -> int:
        self.wait_for(lambda: self.controller() is not None, timeout_s or self.start_timeout_s, "a controller")
        controller = self.controller()
        assert controller is not None
        return controller

    # -- diagnostics -----------------------------------------------------------------------
    def logs(self, broker_ids: Iterable[int] | None = None, lines: int = _LOG_TAIL_LINES) -> str:
        """The last ``lines`` lines of each agent's log (all agents ever started by default)."""
        if broker_ids is None:
            ids = sorted(int(p.stem.split("-")[1]) for p in self.base_dir.glob("broker-*.log"))
        else:
            ids = sorted(broker_ids)
        parts = []
        for broker_id in ids:
            path = self.log_path(broker_id)
            text = path.read_text(encoding="utf-8", errors="replace") if path.exists() else "(no log)"
            state = "running" if self.running(broker_id) else "not running"
            tail = "\n".join(text.splitlines()[-lines:])
            parts.append(f"----- broker {broker_id} ({state}), {path}:\n{tail}")
        return "\n".join(parts)
