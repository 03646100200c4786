"""The test harness that ships with sparklog: real broker agents (``sparklog broker start``
processes) against a test's or a benchmark's cluster, and a real ZooKeeper ensemble
(:class:`~sparklog.metadata.ensemble.ZooKeeperEnsemble`, quorum peers that can be killed
and restarted) for ZooKeeper failovers.

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
:meth:`~BrokerAgents.controller`. Every agent's output (INFO logging included, appended
across restarts) is kept in ``<base>/broker-<id>.log``; :meth:`~BrokerAgents.logs` gathers
their tails so a failing assertion can show what the agents did. On exit (also when a test
fails) every agent still running is killed and reaped.

Agents read a properties file with ``zookeeper.session.timeout.ms`` (default 3000 ms, so a
killed agent is noticed within seconds) plus any extra properties.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import IO

import sparklog
from sparklog.metadata.broker_registration import live_broker_ids
from sparklog.metadata.controller_election import current_controller
from sparklog.metadata.ensemble import ZooKeeperEnsemble

__all__ = ["BrokerAgents", "ZooKeeperEnsemble"]

# Runs `sparklog` like the console script, with INFO logging on stderr so the agent's log
# shows the controller's decisions (ISR changes, elections, reassignment steps).
_LAUNCHER = """\
import logging, runpy, sys
logging.basicConfig(level=getattr(logging, sys.argv.pop(1)), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
sys.argv = ["sparklog", *sys.argv[1:]]
runpy.run_module("sparklog.cli.main", run_name="__main__", alter_sys=True)
"""
_LOG_TAIL_LINES = 40


class BrokerAgents:
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
    ) -> None:
        self.zk_connect = zk_connect
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
        self._processes: dict[int, subprocess.Popen[bytes]] = {}
        self._log_files: dict[int, IO[bytes]] = {}
        self._paused: set[int] = set()
        self._cluster: sparklog.Cluster | None = None

    # -- context manager -------------------------------------------------------------------
    def __enter__(self) -> BrokerAgents:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Kill and reap every agent still running; close the observer's session."""
        for broker_id in list(self._processes):
            self._signal(broker_id, signal.SIGKILL)
            self._reap(broker_id, 10)
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None

    # -- where things are ------------------------------------------------------------------
    def log_dir(self, broker_id: int) -> Path:
        return self.base_dir / f"broker-{broker_id}"

    def log_path(self, broker_id: int) -> Path:
        return self.base_dir / f"broker-{broker_id}.log"

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
        self._reap(broker_id, 0)  # an exited predecessor: forget it
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
            str(self.log_dir(broker_id)),
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
        env = {k: v for k, v in os.environ.items() if not k.startswith("SPARKLOG_")}
        log = open(self.log_path(broker_id), "ab")
        log.write(f"===== {time.strftime('%H:%M:%S')} starting broker {broker_id}\n".encode())
        log.flush()
        self._log_files[broker_id] = log
        # cwd: no stray conf/sparklog.properties of the repository is picked up.
        self._processes[broker_id] = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=self.base_dir, env=env
        )

    def kill(self, broker_id: int) -> None:
        """SIGKILL the agent: its registration lasts until its ZooKeeper session times out."""
        self._require_running(broker_id)
        self._signal(broker_id, signal.SIGKILL)
        self._reap(broker_id, 10)

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

    def pause(self, broker_id: int) -> None:
        """SIGSTOP: the agent hangs (no heartbeats, no fetches, no controller ticks)."""
        self._require_running(broker_id)
        self._signal(broker_id, signal.SIGSTOP)
        self._paused.add(broker_id)

    def resume(self, broker_id: int) -> None:
        self._require_running(broker_id)
        self._signal(broker_id, signal.SIGCONT)
        self._paused.discard(broker_id)

    def running(self, broker_id: int) -> bool:
        """Whether the agent's process exists (paused counts); not whether the cluster sees it."""
        process = self._processes.get(broker_id)
        return process is not None and process.poll() is None

    def pid(self, broker_id: int) -> int:
        self._require_running(broker_id)
        return self._processes[broker_id].pid

    def _require_running(self, broker_id: int) -> None:
        if not self.running(broker_id):
            raise AssertionError(f"broker {broker_id}'s agent is not running\n{self.logs([broker_id])}")

    def _signal(self, broker_id: int, signum: int) -> None:
        process = self._processes.get(broker_id)
        if process is None or process.poll() is not None:
            return
        if signum in (signal.SIGTERM, signal.SIGINT) and broker_id in self._paused:
            process.send_signal(signal.SIGCONT)  # a stopped process cannot handle SIGTERM
            self._paused.discard(broker_id)
        try:
            process.send_signal(signum)
        except ProcessLookupError:
            pass

    def _reap(self, broker_id: int, timeout_s: float) -> int | None:
        """Wait up to ``timeout_s`` for the process to exit; its exit code, or None if it runs on."""
        process = self._processes.get(broker_id)
        if process is None:
            return None
        try:
            code = process.wait(timeout_s) if timeout_s > 0 else process.poll()
        except subprocess.TimeoutExpired:
            return None
        if code is None:
            return None
        del self._processes[broker_id]
        self._paused.discard(broker_id)
        log = self._log_files.pop(broker_id, None)
        if log is not None:
            log.write(f"===== {time.strftime('%H:%M:%S')} broker {broker_id} exited {code}\n".encode())
            log.close()
        return code

    # -- what the cluster sees ---------------------------------------------------------------
    def live(self) -> list[int]:
        """Broker ids registered live in ZooKeeper now."""
        return live_broker_ids(self.cluster.replicas.zk)

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

    def wait_for(
        self, condition: Callable[[], bool], timeout_s: float, what: str, *, exited_is_failure: Iterable[int] = ()
    ) -> None:
        """Poll ``condition``; on timeout (or when an agent in ``exited_is_failure`` exits)
        fail with the agents' log tails."""
        watched = list(exited_is_failure)
        deadline = time.monotonic() + timeout_s
        while not condition():
            dead = [b for b in watched if b in self._processes and self._processes[b].poll() is not None]
            if dead:
                raise AssertionError(f"waiting for {what}: the agent of broker(s) {dead} exited\n{self.logs(dead)}")
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}\n{self.logs()}")
            time.sleep(0.05)

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
