"""A real ZooKeeper ensemble for fault tests: quorum peers run from the jars the ``pyspark``
wheel ships, as the embedded single server is (:mod:`sparklog.metadata.embedded`).

Each server is a ``java ... org.apache.zookeeper.server.quorum.QuorumPeerMain <zoo.cfg>``
process on loopback ports picked by the kernel, with its own ``dataDir`` and ``myid`` under
``<base>/zk-<id>/``; its output (WARN and above) goes to ``<base>/zk-<id>.log``, appended
across restarts. A test fails servers the way a real ensemble fails:

* :meth:`ZooKeeperEnsemble.kill` — SIGKILL: the peer vanishes, its clients are dropped and, if
  it led, the survivors elect a new leader (clients reconnect to them within their session
  timeout, keeping their sessions);
* :meth:`ZooKeeperEnsemble.pause` / :meth:`~ZooKeeperEnsemble.resume` — SIGSTOP / SIGCONT: a
  hung peer. Its clients' requests hang; a hung leader is deposed once its followers miss it
  for ``sync_limit_ms``, and rejoins as a follower when resumed;
* :meth:`ZooKeeperEnsemble.start` — (re)start with the same id, ports and data: it rejoins as
  a follower.

Roles come from the ``srvr`` four-letter word (``Mode: leader``/``follower``); a server in the
middle of an election answers that it is not serving. ``cons`` tells which server a client
session is connected to (:meth:`~ZooKeeperEnsemble.server_of_session`), so a test can hang
exactly the server a request is in flight at. :meth:`~ZooKeeperEnsemble.wait_leader`
and :meth:`~ZooKeeperEnsemble.wait_serving` poll them. On exit (also when a test fails) every
server still running is killed and reaped.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Iterable
from pathlib import Path

from sparklog.errors import ZooKeeperUnavailableError
from sparklog.metadata.embedded import (
    LOG4J2_PROPERTIES,
    find_java,
    find_zookeeper_jars,
    four_letter_word,
    server_command,
)
from sparklog.testing.processes import ChildProcesses

__all__ = ["ZooKeeperEnsemble"]

_HOST = "127.0.0.1"
_MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
_PORT_ATTEMPTS = 3
_LOG_TAIL_LINES = 30
_MODE = re.compile(r"^Mode: (\w+)", re.MULTILINE)
_SESSION = re.compile(r"\bsid=0x([0-9a-fA-F]+)")


def _free_ports(count: int) -> list[int]:
    # All bound at once so they differ; free again once closed. A racer may still take one
    # before the JVM binds: start() notices the BindException and picks new ones.
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind((_HOST, 0))
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _all_stopped(tasks: Path) -> bool:
    states = []
    for stat in tasks.glob("*/stat"):
        try:
            states.append(stat.read_text().rsplit(")", 1)[1].split()[0])
        except (OSError, IndexError):
            continue  # a thread that just ended
    return all(state in ("T", "t") for state in states)


class ZooKeeperEnsemble(ChildProcesses):
    """``servers`` quorum peers (ids 1..servers) on loopback; use as a context manager."""

    def __init__(
        self,
        base_dir: str | Path,
        servers: int = 3,
        *,
        tick_time_ms: int = 500,
        sync_limit_ms: int = 3_000,
        start_timeout_s: float = 90.0,
    ) -> None:
        if servers < 1:
            raise ValueError(f"an ensemble needs at least one server, not {servers}")
        self.base_dir = Path(base_dir).resolve()
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.server_ids = list(range(1, servers + 1))
        self.tick_time_ms = tick_time_ms
        self.sync_limit_ms = sync_limit_ms
        self.start_timeout_s = start_timeout_s
        self._java, self._jars = find_java(), find_zookeeper_jars()
        self._log4j = self.base_dir / "log4j2.properties"
        self._log4j.write_text(LOG4J2_PROPERTIES)
        self._ports: dict[int, tuple[int, int, int]] = {}  # id -> (client, quorum, election)
        super().__init__()

    def __enter__(self) -> ZooKeeperEnsemble:
        return self

    # -- where things are ------------------------------------------------------------------
    @property
    def connect(self) -> str:
        """``host:port,...`` of every server (append a chroot for ``zookeeper.connect``)."""
        if not self._ports:
            raise ZooKeeperUnavailableError(f"the ensemble under {self.base_dir} was never started")
        return ",".join(f"{_HOST}:{self.client_port(s)}" for s in self.server_ids)

    def client_port(self, server_id: int) -> int:
        return self._ports[server_id][0]

    def server_dir(self, server_id: int) -> Path:
        return self.base_dir / f"zk-{server_id}"

    def log_path(self, server_id: int) -> Path:
        return self.base_dir / f"zk-{server_id}.log"

    # -- life cycle --------------------------------------------------------------------------
    def start(self, *server_ids: int, wait: bool = True) -> None:
        """Start (or restart) ``server_ids`` (default: all, the first time picking the ports);
        with ``wait``, return once each serves as leader or follower."""
        ids = list(server_ids) or list(self.server_ids)
        for server_id in ids:
            if server_id not in self.server_ids:
                raise ValueError(f"server {server_id} is not part of this ensemble {self.server_ids}")
            if self.running(server_id):
                raise AssertionError(f"ZooKeeper server {server_id} is already running (pid {self.pid(server_id)})")
        if self._ports:
            for server_id in ids:
                self._launch(server_id)
            if wait:
                self.wait_serving(ids)
            return
        for _attempt in range(_PORT_ATTEMPTS):
            ports = _free_ports(3 * len(self.server_ids))
            self._ports = {s: tuple(ports[3 * i : 3 * i + 3]) for i, s in enumerate(self.server_ids)}  # type: ignore[misc]
            for server_id in self.server_ids:
                self._write_config(server_id)
            offsets = {s: self._launch(s) for s in ids}
            try:
                if wait:
                    self.wait_serving(ids)
                return
            except AssertionError:
                bind_failed = any("Address already in use" in self._log_since(s, o) for s, o in offsets.items())
                if not bind_failed:
                    raise
                self.close()  # someone took a port between our probe and the JVM's bind
        raise ZooKeeperUnavailableError(
            f"ZooKeeper ensemble under {self.base_dir}: failed to bind {_PORT_ATTEMPTS} times"
        )

    def _write_config(self, server_id: int) -> None:
        data = self.server_dir(server_id) / "data"
        data.mkdir(parents=True, exist_ok=True)
        (data / "myid").write_text(f"{server_id}\n")
        client, _quorum, _election = self._ports[server_id]
        peers = "".join(f"server.{s}={_HOST}:{q}:{e}\n" for s, (_c, q, e) in sorted(self._ports.items()))
        tick = self.tick_time_ms
        # initLimit/syncLimit are in ticks. A follower's sync needs time on a loaded test machine
        # (10 s); syncLimit is how long a hung leader goes unnoticed. An election after a kill
        # takes about a second either way.
        (self.server_dir(server_id) / "zoo.cfg").write_text(
            f"tickTime={tick}\ninitLimit={max(10, 10_000 // tick)}\nsyncLimit={max(2, self.sync_limit_ms // tick)}\n"
            f"dataDir={data}\nclientPort={client}\nclientPortAddress={_HOST}\nmaxClientCnxns=0\n"
            "maxSessionTimeout=60000\nadmin.enableServer=false\n4lw.commands.whitelist=ruok,srvr,stat,mntr,cons\n"
            "autopurge.snapRetainCount=3\nautopurge.purgeInterval=1\n" + peers
        )

    def _launch(self, server_id: int) -> int:
        """Start the server's JVM; returns where this start's output begins in its log."""
        cfg = self.server_dir(server_id) / "zoo.cfg"
        command = server_command(self._java, self._jars, self._log4j, _MAIN_CLASS, cfg)
        return self._spawn(server_id, command, self.server_dir(server_id))

    def describe(self, server_id: int) -> str:
        return f"ZooKeeper server {server_id}"

    def pause(self, server_id: int) -> None:
        """SIGSTOP: the server hangs (no replies, no pings to its peers). Returns once every
        thread of the JVM has stopped, so nothing sent to it afterwards is processed."""
        super().pause(server_id)
        tasks = Path(f"/proc/{self.pid(server_id)}/task")
        if tasks.is_dir():  # Linux: the signal is delivered asynchronously, thread by thread
            self.wait_for(lambda: _all_stopped(tasks), 10, f"ZooKeeper server {server_id} to stop")

    # -- roles ---------------------------------------------------------------------------------
    def mode(self, server_id: int) -> str | None:
        """``"leader"`` or ``"follower"`` while the server serves; None when it is down, paused
        or electing."""
        if not self.running(server_id) or server_id in self._paused:
            return None
        reply = four_letter_word(self.client_port(server_id), "srvr", 1.0)
        found = _MODE.search(reply or "")
        return found.group(1) if found else None

    def leader(self) -> int | None:
        """The id of the server that says it leads, or None (an election is running)."""
        leaders = [s for s in self.server_ids if self.mode(s) == "leader"]
        return leaders[0] if len(leaders) == 1 else None

    def server_of_session(self, session_id: int) -> int | None:
        """The id of the (running, not paused) server that client session ``session_id`` is
        connected to, from the ``cons`` four-letter word; None if none lists it."""
        for server_id in self.server_ids:
            if self.running(server_id) and server_id not in self._paused:
                reply = four_letter_word(self.client_port(server_id), "cons", 1.0) or ""
                if session_id in {int(sid, 16) for sid in _SESSION.findall(reply)}:
                    return server_id
        return None

    def wait_serving(self, server_ids: Iterable[int] | None = None, timeout_s: float | None = None) -> None:
        """Wait until each of ``server_ids`` (default: the running ones) serves as leader or follower."""
        wanted = sorted(server_ids) if server_ids is not None else [s for s in self.server_ids if self.running(s)]
        self.wait_for(
            lambda: all(self.mode(s) in ("leader", "follower") for s in wanted),
            timeout_s or self.start_timeout_s,
            f"ZooKeeper servers {wanted} serving",
            exited_is_failure=wanted,
        )

    def wait_leader(self, timeout_s: float | None = None, *, other_than: Iterable[int] = ()) -> int:
        """Wait for an elected leader (not one of ``other_than``, e.g. the one just killed)."""
        excluded = set(other_than)
        found: list[int] = []

        def elected() -> bool:
            leader = self.leader()
            found[:] = [leader] if leader is not None and leader not in excluded else []
            return bool(found)

        self.wait_for(elected, timeout_s or self.start_timeout_s, f"a ZooKeeper leader other than {sorted(excluded)}")
        return found[0]

    # -- diagnostics -----------------------------------------------------------------------------
    def _log_since(self, server_id: int, offset: int) -> str:
        try:
            with open(self.log_path(server_id), "rb") as fh:
                fh.seek(offset)
                return fh.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def logs(self, server_ids: Iterable[int] | None = None, lines: int = _LOG_TAIL_LINES) -> str:
        """The last ``lines`` lines of each server's log."""
        parts = []
        for server_id in sorted(server_ids) if server_ids is not None else self.server_ids:
            tail = "\n".join(self._log_since(server_id, 0).splitlines()[-lines:])
            running = "paused" if server_id in self._paused else "running"
            state = self.mode(server_id) or (running if self.running(server_id) else "not running")
            parts.append(f"----- ZooKeeper server {server_id} ({state}), {self.log_path(server_id)}:\n{tail}")
        return "\n".join(parts)
