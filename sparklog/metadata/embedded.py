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

The lock, state file, process recognition and stopping are :class:`sparklog.metadata.daemon.Daemon`'s,
shared with the embedded broker. POSIX only (``fcntl``). Importing is cheap: pyspark is
located, never imported.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from sparklog.errors import ZooKeeperUnavailableError
from sparklog.metadata.daemon import Daemon

__all__ = [
    "LOG4J2_PROPERTIES",
    "EmbeddedZooKeeperStatus",
    "ensure_started",
    "find_java",
    "find_zookeeper_jars",
    "four_letter_word",
    "in_spark_worker",
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
    daemon: Daemon  # root <home>/zookeeper, marker zoo.cfg, log zookeeper.log
    data: Path
    log4j: Path


def _layout(home: str | os.PathLike[str]) -> _Layout:
    daemon = Daemon.of(home, "zookeeper", "zoo.cfg", "zookeeper.log", "embedded ZooKeeper", ZooKeeperUnavailableError)
    return _Layout(daemon, daemon.root / "data", daemon.root / "log4j2.properties")


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


def _read_state(lay: _Layout) -> tuple[int, int] | None:
    state = lay.daemon.read_state()
    try:
        return (state["pid"], int(state["port"])) if state is not None else None
    except (KeyError, TypeError, ValueError):
        return None


# How long a server whose process lives gets to answer ruok before it is taken for hung and
# replaced: longer than the lock-free look (a loaded machine answers late; killing a healthy
# server would break every client of the cluster).
_HUNG_AFTER_S = 10.0


def status(home: str | os.PathLike[str], ruok_timeout_s: float = 1.0) -> EmbeddedZooKeeperStatus:
    """Report whether this home's server runs; read-only and lock-free."""
    lay = _layout(home)
    state = _read_state(lay)
    if state is not None and lay.daemon.alive(state[0]) and _ruok(state[1], ruok_timeout_s):
        return _running(lay, *state)
    return EmbeddedZooKeeperStatus(False, None, None, None, str(lay.data), str(lay.daemon.log))


def _running(lay: _Layout, pid: int, port: int) -> EmbeddedZooKeeperStatus:
    return EmbeddedZooKeeperStatus(True, pid, port, f"{_HOST}:{port}", str(lay.data), str(lay.daemon.log))


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
    lay.daemon.marker.write_text(
        f"tickTime=250\ninitLimit=10\nsyncLimit=5\ndataDir={lay.data}\n"
        f"clientPort={port}\nclientPortAddress={_HOST}\nmaxClientCnxns=0\n"
        "maxSessionTimeout=60000\nadmin.enableServer=false\n"
        "4lw.commands.whitelist=ruok,srvr,stat,mntr\n"
        "autopurge.snapRetainCount=3\nautopurge.purgeInterval=1\n"
    )
    lay.log4j.write_text(LOG4J2_PROPERTIES)


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


def start(home: str | os.PathLike[str], timeout_s: float = 60.0) -> EmbeddedZooKeeperStatus:
    """Start this home's server unless it runs already; return its status either way."""
    deadline = time.monotonic() + timeout_s
    lay = _layout(home)
    daemon = lay.daemon
    with daemon.locked(deadline):
        current = status(home, _HUNG_AFTER_S)
        if current.running:
            return current
        # Whatever still runs this zoo.cfg is hung or orphaned (its starter died before writing
        # server.json); two servers on one dataDir would corrupt it.
        daemon.kill_all(5.0)
        lay.data.mkdir(parents=True, exist_ok=True)
        java, jars = find_java(), find_zookeeper_jars()
        for _attempt in range(_BIND_ATTEMPTS):
            port = _free_port()
            _write_config(lay, port)
            cmd = server_command(java, jars, lay.log4j, _MAIN_CLASS, lay.daemon.marker)
            proc, offset = daemon.launch(cmd)
            if daemon.wait_ready(proc, functools.partial(_ruok, port, 0.5), deadline):
                daemon.write_state(proc.pid, port=port)
                # It just answered: asking again could time out on a loaded machine.
                started = _running(lay, proc.pid, port)
                _announce(home, started)
                return started
            if proc.poll() is None:
                daemon.kill(proc.pid, 2.0)
                reason = f"did not answer ruok on {_HOST}:{port} within {timeout_s:g}s"
            else:
                tail = daemon.log_tail(offset)
                # Someone took the port between our probe and the JVM's bind: try another.
                if "BindException" in tail or "Address already in use" in tail:
                    continue
                reason = f"exited with code {proc.returncode}"
            raise ZooKeeperUnavailableError(
                f"embedded ZooKeeper {reason}.\ncommand: {' '.join(cmd)}\n"
                f"last lines of {lay.daemon.log}:\n{daemon.log_tail(offset)}"
            )
        msg = f"embedded ZooKeeper failed to bind on {_HOST} {_BIND_ATTEMPTS} times; see {lay.daemon.log}"
        raise ZooKeeperUnavailableError(msg)


def _announce(home: str | os.PathLike[str], started: EmbeddedZooKeeperStatus) -> None:
    # A server that outlives its starter must never appear unannounced: a command run from an
    # unexpected directory would otherwise start a second, empty cluster without a word.
    print(
        f"sparklog: started an embedded ZooKeeper at {started.connect} (pid {started.pid}) for home "
        f"{Path(home).resolve()}; it keeps running (`sparklog zookeeper stop --home {Path(home).resolve()}` stops it)",
        file=sys.stderr,
        flush=True,
    )


def in_spark_worker() -> bool:
    """Whether this process is one of Spark's Python workers (pyspark's worker asserts the same
    variable): they plan and run data-source code, and must never start a server of their own."""
    return os.environ.get("SPARK_PYTHON_RUNTIME") == "PYTHON_WORKER"


def stop(home: str | os.PathLike[str], timeout_s: float = 15.0) -> bool:
    """Stop this home's server (SIGTERM, SIGKILL after ``timeout_s``); True if one was running."""
    daemon = _layout(home).daemon
    if not daemon.root.is_dir():
        return False
    with daemon.locked(time.monotonic() + timeout_s):
        return daemon.kill_all(timeout_s)
