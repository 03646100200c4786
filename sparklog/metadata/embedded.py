"""Embedded single-node ZooKeeper, run from the jars the ``pyspark`` wheel already ships.

A new user needs nothing but a JDK: ``org.apache.zookeeper.server.ZooKeeperServerMain`` is
started with ``java -cp '<pyspark>/jars/*'``. Nothing is ever downloaded.

Invariants:

* One server per ``home``. Its state lives under ``<home>/zookeeper/``: ``zoo.cfg``, ``data/``,
  ``server.json`` (``{"pid", "port", "started_ms"}``), ``zookeeper.log`` (the JVM's stdout and
  stderr, WARN and above only), ``log4j2.properties`` and ``start.lock``.
* Starting and stopping hold an exclusive ``flock`` on ``start.lock``, so concurrent callers in
  any number of processes end up with exactly one server and the same connect string.
* ``server.json`` is written (atomically) only once the server answers ``ruok``. "Running"
  means: it exists, its pid is alive and runs this home's ``zoo.cfg``, and ``ruok`` answers.
* The server listens on 127.0.0.1 only and outlives the process that started it (own session,
  no inherited descriptors) so later processes reuse it; only :func:`stop` ends it.
* Only processes whose command line names this home's ``zoo.cfg`` are ever signalled.

POSIX only (``fcntl``). Importing is cheap: pyspark is located, never imported.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from sparklog import clock
from sparklog.errors import ZooKeeperUnavailableError

__all__ = [
    "LOG4J2_PROPERTIES",
    "EmbeddedZooKeeperStatus",
    "ensure_started",
    "find_java",
    "find_zookeeper_jars",
    "four_letter_word",
    "server_command",
    "start",
    "status",
    "stop",
]

_HOST = "127.0.0.1"
_MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
_BIND_ATTEMPTS = 3
_NO_JAVA = (
    "Java 17+ is needed to run the embedded ZooKeeper: install a JDK (e.g. apt-get install "
    "openjdk-17-jre-headless) or set zookeeper.connect to an external ensemble"
)
# Log4j2 writes to stdout, which is already redirected to zookeeper.log: one writer per file.
# ServerCnxn is muted because a readiness probe arriving before the database has loaded makes
# it log a harmless NullPointerException stack trace. Shared with the test ensemble
# (:mod:`sparklog.testing.zookeeper`).
LOG4J2_PROPERTIES = """\
status = error
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = %d{ISO8601} %-5p [%t] %c{1}: %m%n
rootLogger.level = warn
rootLogger.appenderRef.out.ref = out
logger.probe.name = org.apache.zookeeper.server.ServerCnxn
logger.probe.level = fatal
"""

# Servers this process launched. Polling their Popen reaps them; otherwise a stopped server
# lingers as a zombie whose pid still looks alive to os.kill(pid, 0).
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


@dataclass(frozen=True)
class EmbeddedZooKeeperStatus:
    running: bool
    pid: int | None
    port: int | None
    connect: str | None  # "127.0.0.1:<port>" when running
    data_dir: str
    log_file: str


@dataclass(frozen=True)
class _Layout:
    root: Path
    cfg: Path
    data: Path
    state: Path
    log: Path
    log4j: Path
    lock: Path


def _layout(home: str | os.PathLike[str]) -> _Layout:
    # Resolved so every caller, whatever its cwd or symlinks, names the same zoo.cfg path:
    # that path is how a server process is recognised as this home's.
    root = Path(home).expanduser().resolve() / "zookeeper"
    names = ("zoo.cfg", "data", "server.json", "zookeeper.log", "log4j2.properties", "start.lock")
    return _Layout(root, *(root / name for name in names))


def find_zookeeper_jars() -> Path:
    """Return the pyspark ``jars`` directory holding ``zookeeper-*.jar`` and its dependencies."""
    spec = importlib.util.find_spec("pyspark")
    for location in (spec.submodule_search_locations or []) if spec else []:
        jars = Path(location) / "jars"
        if any(jars.glob("zookeeper-[0-9]*.jar")):
            return jars
    raise ZooKeeperUnavailableError(
        "no zookeeper-*.jar found in the pyspark package's jars/ directory: install pyspark "
        "(which ships ZooKeeper) or set zookeeper.connect to an external ensemble"
    )


def find_java() -> str:
    """The ``java`` of ``JAVA_HOME``, else the one on ``PATH``."""
    java_home = os.environ.get("JAVA_HOME")
    candidate = os.path.join(java_home, "bin", "java") if java_home else ""
    if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
        return candidate
    if found := shutil.which("java"):
        return found
    raise ZooKeeperUnavailableError(_NO_JAVA)


def four_letter_word(port: int, word: str, timeout_s: float = 1.0) -> str | None:
    """The server's whole reply to ``word`` (``ruok``, ``srvr``...) on 127.0.0.1; None if unreachable."""
    try:
        with socket.create_connection((_HOST, port), timeout=timeout_s) as sock:
            sock.sendall(word.encode("ascii"))
            reply = b""
            while chunk := sock.recv(4096):  # the server closes the connection after replying
                reply += chunk
            return reply.decode("utf-8", "replace")
    except OSError:
        return None


def _ruok(port: int, timeout_s: float = 1.0) -> bool:
    return four_letter_word(port, "ruok", timeout_s) == "imok"


def _runs_cfg(pid: int, cfg: Path) -> bool | None:
    """Whether ``pid``'s argv names ``cfg`` (False for zombies); None when procfs cannot tell."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except FileNotFoundError:
        return False if os.path.isdir("/proc/self") else None
    except OSError:
        return None
    return str(cfg).encode() in argv


def _alive(pid: int, cfg: Path) -> bool:
    """True if ``pid`` is a live server of this home; a reused pid does not count."""
    child = _CHILDREN.get(pid)
    if child is not None and child.poll() is not None:
        del _CHILDREN[pid]
        return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):  # PermissionError: another user's process
        return False
    return _runs_cfg(pid, cfg) is not False  # without procfs, trust the recorded pid


def _read_state(lay: _Layout) -> tuple[int, int] | None:
    try:
        raw = json.loads(lay.state.read_text())
        return int(raw["pid"]), int(raw["port"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _server_pids(lay: _Layout) -> set[int]:
    """Live servers of this home: the recorded one plus orphans of starters that died early."""
    state = _read_state(lay)
    pids = {state[0]} if state is not None and _alive(state[0], lay.cfg) else set()
    if os.path.isdir("/proc"):  # elsewhere only server.json can tell
        found = (int(name) for name in os.listdir("/proc") if name.isdigit())
        # A positive procfs match is required: this set decides whom to kill.
        pids.update(pid for pid in found if _runs_cfg(pid, lay.cfg) and _alive(pid, lay.cfg))
    return pids


def _kill(pid: int, cfg: Path, timeout_s: float) -> None:
    for sig, wait_s in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, 5.0)):
        if not _alive(pid, cfg):
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and _alive(pid, cfg):
            time.sleep(0.05)


@contextlib.contextmanager
def _locked(lay: _Layout, deadline: float) -> Iterator[None]:
    # open() gives a non-inheritable descriptor and Popen closes fds: the long-lived java child
    # must never hold this lock, or no later caller could take it.
    with open(lay.lock, "a+b") as fh:
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    msg = f"timed out waiting for {lay.lock}: another process holds it"
                    raise ZooKeeperUnavailableError(msg) from None
                time.sleep(0.05)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def status(home: str | os.PathLike[str]) -> EmbeddedZooKeeperStatus:
    """Report whether this home's server runs; read-only and lock-free."""
    lay = _layout(home)
    state = _read_state(lay)
    if state is not None and _alive(state[0], lay.cfg) and _ruok(state[1]):
        pid, port = state
        connect = f"{_HOST}:{port}"
        return EmbeddedZooKeeperStatus(True, pid, port, connect, str(lay.data), str(lay.log))
    return EmbeddedZooKeeperStatus(False, None, None, None, str(lay.data), str(lay.log))


def ensure_started(home: str | os.PathLike[str], timeout_s: float = 60.0) -> str:
    """Return ``"127.0.0.1:<port>"`` of this home's server, starting it if needed."""
    current = status(home)  # lock-free fast path for the common, already-running case
    if current.connect is None:
        current = start(home, timeout_s)
    assert current.connect is not None
    return current.connect


def _free_port() -> int:
    # The kernel picks; the port is free again once closed. A racer may still take it before the
    # JVM binds, which start() detects and retries.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((_HOST, 0))
        return int(sock.getsockname()[1])


def _write_config(lay: _Layout, port: int) -> None:
    lay.cfg.write_text(
        f"tickTime=250\ninitLimit=10\nsyncLimit=5\ndataDir={lay.data}\n"
        f"clientPort={port}\nclientPortAddress={_HOST}\nmaxClientCnxns=0\n"
        "maxSessionTimeout=60000\nadmin.enableServer=false\n"
        "4lw.commands.whitelist=ruok,srvr,stat,mntr\n"
        "autopurge.snapRetainCount=3\nautopurge.purgeInterval=1\n"
    )
    lay.log4j.write_text(LOG4J2_PROPERTIES)


def _log_tail(lay: _Layout, offset: int, lines: int = 20) -> str:
    try:
        with open(lay.log, "rb") as fh:
            fh.seek(offset)
            return "\n".join(fh.read().decode("utf-8", "replace").splitlines()[-lines:])
    except OSError as exc:
        return f"(cannot read log: {exc})"


def server_command(java: str, jars: Path, log4j: Path, main_class: str, cfg: Path) -> list[str]:
    """The JVM command line of one ZooKeeper server (standalone or quorum peer) from ``jars``."""
    return [
        java,
        "-Xmx256m",
        "-XX:+UseSerialGC",
        "-Djava.net.preferIPv4Stack=true",
        "-Dzookeeper.admin.enableServer=false",
        f"-Dlog4j2.configurationFile={log4j}",
        "-Dzookeeper.jmx.log4j.disable=true",
        "-cp",
        f"{jars}/*",
        main_class,
        str(cfg),
    ]


def _launch(lay: _Layout, java: str, jars: Path) -> tuple[subprocess.Popen[bytes], list[str], int]:
    cmd = server_command(java, jars, lay.log4j, _MAIN_CLASS, lay.cfg)
    with open(lay.log, "ab") as log:
        offset = log.tell()
        log.write(f"--- {time.strftime('%Y-%m-%dT%H:%M:%S')} starting: {' '.join(cmd)}\n".encode())
        log.flush()
        # A new session keeps the terminal's SIGINT/SIGHUP away: the server must outlive us.
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            close_fds=True,
            start_new_session=True,
            cwd=lay.root,
        )
    _CHILDREN[proc.pid] = proc
    return proc, cmd, offset


def start(home: str | os.PathLike[str], timeout_s: float = 60.0) -> EmbeddedZooKeeperStatus:
    """Start this home's server unless it runs already; return its status either way."""
    deadline = time.monotonic() + timeout_s
    lay = _layout(home)
    lay.data.mkdir(parents=True, exist_ok=True)
    with _locked(lay, deadline):
        current = status(home)
        if current.running:
            return current
        # Whatever still runs this zoo.cfg is hung or orphaned (its starter died before writing
        # server.json); two servers on one dataDir would corrupt it.
        for pid in _server_pids(lay):
            _kill(pid, lay.cfg, 5.0)
        lay.state.unlink(missing_ok=True)
        java, jars = find_java(), find_zookeeper_jars()
        for _attempt in range(_BIND_ATTEMPTS):
            port = _free_port()
            _write_config(lay, port)
            proc, cmd, offset = _launch(lay, java, jars)
            try:
                while proc.poll() is None and time.monotonic() < deadline:
                    if _ruok(port, 0.5) and proc.poll() is None:
                        # Via rename, so a lock-free status() never reads half a file.
                        started_ms = clock.now_ms()
                        state = {"pid": proc.pid, "port": port, "started_ms": started_ms}
                        lay.state.with_suffix(".tmp").write_text(json.dumps(state))
                        os.replace(lay.state.with_suffix(".tmp"), lay.state)
                        return status(home)
                    time.sleep(0.1)
            except BaseException:  # e.g. KeyboardInterrupt: leave no orphan behind
                _kill(proc.pid, lay.cfg, 2.0)
                raise
            if proc.poll() is None:
                _kill(proc.pid, lay.cfg, 2.0)
                reason = f"did not answer ruok on {_HOST}:{port} within {timeout_s:g}s"
            else:
                _CHILDREN.pop(proc.pid, None)
                tail = _log_tail(lay, offset)
                # Someone took the port between our probe and the JVM's bind: try another.
                if "BindException" in tail or "Address already in use" in tail:
                    continue
                reason = f"exited with code {proc.returncode}"
            raise ZooKeeperUnavailableError(
                f"embedded ZooKeeper {reason}.\ncommand: {' '.join(cmd)}\n"
                f"last lines of {lay.log}:\n{_log_tail(lay, offset)}"
            )
        msg = f"embedded ZooKeeper failed to bind on {_HOST} {_BIND_ATTEMPTS} times; see {lay.log}"
        raise ZooKeeperUnavailableError(msg)


def stop(home: str | os.PathLike[str], timeout_s: float = 15.0) -> bool:
    """Stop this home's server (SIGTERM, SIGKILL after ``timeout_s``); True if one was running."""
    lay = _layout(home)
    if not lay.root.is_dir():
        return False
    with _locked(lay, time.monotonic() + timeout_s):
        pids = _server_pids(lay)
        for pid in pids:
            _kill(pid, lay.cfg, timeout_s)
        lay.state.unlink(missing_ok=True)
        return bool(pids)
