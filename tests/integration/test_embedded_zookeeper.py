"""Integration tests of the embedded ZooKeeper: real JVMs, real sockets, real child processes."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from kazoo.client import KazooClient

from sparklog.errors import ZooKeeperUnavailableError
from sparklog.metadata import embedded
from tests.helpers import leaving_no_server, pids_naming, results_at_once

if TYPE_CHECKING:
    pass

pytestmark = pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="process checks read /proc (Linux)")


def _server_pids(home: Path) -> list[int]:
    return pids_naming(home / "zookeeper" / "zoo.cfg")


def _pid_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0] == "Z"  # a zombie of an exited child of ours


def _ruok(connect: str) -> bytes:
    host, port = connect.split(":")
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(b"ruok")
        return sock.recv(16)


def _kazoo(connect: str) -> KazooClient:
    client = KazooClient(hosts=connect, timeout=10.0)
    client.start(timeout=15)
    return client


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    with leaving_no_server(tmp_path / "home", embedded.stop, "zookeeper/zoo.cfg") as home:
        yield home


def test_find_zookeeper_jars() -> None:
    jars = embedded.find_zookeeper_jars()
    assert any(jars.glob("zookeeper-[0-9]*.jar"))
    assert any(jars.glob("zookeeper-jute-*.jar"))


def test_start_status_and_kazoo_roundtrip(home: Path) -> None:
    started = embedded.start(home)
    assert started.running and started.pid is not None and started.port is not None
    assert started.connect == f"127.0.0.1:{started.port}"
    state = json.loads((home / "zookeeper" / "server.json").read_text())
    assert (state["pid"], state["port"]) == (started.pid, started.port)
    assert isinstance(state["started_ms"], int)
    assert embedded.status(home) == started
    assert embedded.start(home) == started  # idempotent
    assert _ruok(started.connect) == b"imok"
    cfg = (home / "zookeeper" / "zoo.cfg").read_text()
    assert "clientPortAddress=127.0.0.1" in cfg and "admin.enableServer=false" in cfg
    assert "INFO" not in (home / "zookeeper" / "zookeeper.log").read_text()

    client = _kazoo(started.connect)
    try:
        client.create("/sparklog/probe", b"hello", makepath=True)
        data, _stat = client.get("/sparklog/probe")
        assert data == b"hello"
    finally:
        client.stop()
        client.close()


def test_ensure_started_reuses_the_running_server(home: Path) -> None:
    first = embedded.ensure_started(home)
    pid = embedded.status(home).pid
    assert embedded.ensure_started(home) == first
    assert embedded.ensure_started(str(home)) == first
    assert embedded.status(home).pid == pid
    assert _server_pids(home) == [pid]


def test_a_slow_server_is_not_replaced(home: Path) -> None:
    """A server that answers late (a loaded machine; here stopped for 3 s) is still the home's
    server: ensure_started waits for it instead of killing it and starting another."""
    first = embedded.ensure_started(home)
    pid = embedded.status(home).pid
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    resume = threading.Timer(3.0, os.kill, (pid, signal.SIGCONT))
    resume.start()
    try:
        assert embedded.ensure_started(home) == first
    finally:
        resume.join()
        os.kill(pid, signal.SIGCONT)
    assert embedded.status(home).pid == pid
    assert _server_pids(home) == [pid]


def test_concurrent_ensure_started_yields_one_server(home: Path) -> None:
    connects = results_at_once(embedded.ensure_started, (str(home),), 4, 60)
    assert len(set(connects)) == 1
    current = embedded.status(home)
    assert current.running and current.connect == connects[0]
    assert _server_pids(home) == [current.pid]


def test_server_outlives_the_process_that_started_it(home: Path) -> None:
    [connect] = results_at_once(embedded.ensure_started, (str(home),), 1, 60)

    current = embedded.status(home)
    assert current.running and current.connect == connect
    assert embedded.ensure_started(home) == connect
    assert _server_pids(home) == [current.pid]
    client = _kazoo(connect)
    try:
        assert client.exists("/zookeeper") is not None
    finally:
        client.stop()
        client.close()


def test_stop(home: Path) -> None:
    pid = embedded.start(home).pid
    assert pid is not None
    assert embedded.stop(home) is True
    current = embedded.status(home)
    assert not current.running and current.pid is None and current.connect is None
    assert _pid_gone(pid)
    assert not (home / "zookeeper" / "server.json").exists()
    assert embedded.stop(home) is False
    assert embedded.stop(home.parent / "never-started") is False


def test_stale_state_file_is_replaced(home: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    zk_dir = home / "zookeeper"
    zk_dir.mkdir(parents=True)
    state = zk_dir / "server.json"
    state.write_text(json.dumps({"pid": dead.pid, "port": 1, "started_ms": 0}))
    assert not embedded.status(home).running

    connect = embedded.ensure_started(home)
    current = embedded.status(home)
    assert current.running and current.connect == connect and current.pid != dead.pid
    assert json.loads(state.read_text())["pid"] == current.pid
    embedded.stop(home)

    # A recorded pid that is alive but not a ZooKeeper of this home (here: this very test
    # process) must be ignored, and certainly never signalled.
    state.write_text(json.dumps({"pid": os.getpid(), "port": 1, "started_ms": 0}))
    assert not embedded.status(home).running
    assert embedded.stop(home) is False
    state.write_text(json.dumps({"pid": os.getpid(), "port": 1, "started_ms": 0}))
    assert embedded.ensure_started(home) == embedded.status(home).connect
    assert embedded.status(home).pid != os.getpid()


def test_data_persists_across_restart(home: Path) -> None:
    client = _kazoo(embedded.ensure_started(home))
    try:
        client.create("/sparklog/persisted", b"kept", makepath=True)
    finally:
        client.stop()
        client.close()
    assert embedded.stop(home) is True

    client = _kazoo(embedded.ensure_started(home))
    try:
        data, _stat = client.get("/sparklog/persisted")
        assert data == b"kept"
    finally:
        client.stop()
        client.close()


def test_missing_java_is_reported(home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # an environment without any java on it
    with pytest.raises(ZooKeeperUnavailableError, match=r"Java 17\+ is needed"):
        embedded.start(home, timeout_s=5)
    assert not embedded.status(home).running
    assert _server_pids(home) == []


def test_start_times_out_when_the_lock_is_held(home: Path) -> None:
    (home / "zookeeper").mkdir(parents=True)
    with open(home / "zookeeper" / "start.lock", "a+b") as holder:  # a separate open file
        fcntl.flock(holder, fcntl.LOCK_EX)
        began = time.monotonic()
        with pytest.raises(ZooKeeperUnavailableError, match=r"start.lock"):
            embedded.start(home, timeout_s=0.5)
        assert time.monotonic() - began < 5
    assert _server_pids(home) == []
