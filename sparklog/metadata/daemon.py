"""A detached background server of one ``sparklog.home``: what the embedded ZooKeeper
(:mod:`sparklog.metadata.embedded`) and the embedded broker
(:mod:`sparklog.broker.embedded_broker`) share.

A :class:`Daemon` is a directory ``<home>/<name>/`` holding:

* a **marker** file (``zoo.cfg``, ``broker.properties``) whose absolute path is on the server's
  command line: that path is how a process is recognised as this home's server, so a reused
  pid, a zombie or another home's server never counts and is never signalled;
* ``server.json``, the started server's state (its ``pid`` plus what the caller records),
  written atomically (via rename) so a lock-free reader never sees half a file;
* the server's log (its stdout and stderr), with a header line at every start;
* ``start.lock``, held (``flock``, exclusive) by starters and stoppers so concurrent callers in
  any number of processes agree on one server.

Servers are launched in a session of their own with no inherited descriptors (the lock's
included), so they outlive the process that started them and ignore its terminal's signals.
POSIX only (``fcntl``); without procfs only ``server.json`` tells which process is the server.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparklog import clock
from sparklog.errors import SparklogError

__all__ = ["Daemon"]

# Servers this process launched. Polling their Popen reaps them; otherwise a stopped server
# lingers as a zombie whose pid still looks alive to os.kill(pid, 0).
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


@dataclass(frozen=True)
class Daemon:
    """Where one home's server keeps its files, and how it is started, found and stopped."""

    root: Path
    marker: Path
    log: Path
    what: str  # e.g. "embedded ZooKeeper", for messages
    error: type[SparklogError]  # what start-up failures raise

    @classmethod
    def of(
        cls, home: str | os.PathLike[str], name: str, marker: str, log: str, what: str, error: type[SparklogError]
    ) -> Daemon:
        # Resolved so every caller, whatever its cwd or symlinks, names the same marker path.
        root = Path(home).expanduser().resolve() / name
        return cls(root, root / marker, root / log, what, error)

    @property
    def state(self) -> Path:
        return self.root / "server.json"

    @property
    def lock(self) -> Path:
        return self.root / "start.lock"

    # -- which process is the server --------------------------------------------------------
    def runs_marker(self, pid: int) -> bool | None:
        """Whether ``pid``'s argv names the marker (False for zombies); None when procfs cannot tell."""
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except FileNotFoundError:
            return False if os.path.isdir("/proc/self") else None
        except OSError:
            return None
        return str(self.marker).encode() in argv

    def alive(self, pid: int) -> bool:
        """True if ``pid`` is a live server of this home; a reused pid does not count."""
        child = _CHILDREN.get(pid)
        if child is not None and child.poll() is not None:
            del _CHILDREN[pid]
            return False
        try:
            os.kill(pid, 0)
        except (ProcessLookupError, PermissionError):  # PermissionError: another user's process
            return False
        return self.runs_marker(pid) is not False  # without procfs, trust the recorded pid

    def read_state(self) -> dict[str, Any] | None:
        """``server.json`` as written by :meth:`write_state` (it always has an int ``pid``), or None."""
        try:
            raw = json.loads(self.state.read_text())
            return {**raw, "pid": int(raw["pid"])} if isinstance(raw, dict) else None
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def write_state(self, pid: int, **fields: Any) -> None:
        """Record a started server: ``{"pid", "started_ms", **fields}``, atomically."""
        tmp = self.state.with_suffix(".tmp")
        tmp.write_text(json.dumps({"pid": pid, "started_ms": clock.now_ms(), **fields}))
        os.replace(tmp, self.state)

    def recorded_pid(self) -> int | None:
        """The pid in ``server.json`` if it is a live server of this home."""
        state = self.read_state()
        return state["pid"] if state is not None and self.alive(state["pid"]) else None

    def pids(self) -> set[int]:
        """Live servers of this home: the recorded one plus orphans of starters that died early."""
        recorded = self.recorded_pid()
        pids = {recorded} if recorded is not None else set()
        if os.path.isdir("/proc"):  # elsewhere only server.json can tell
            found = (int(name) for name in os.listdir("/proc") if name.isdigit())
            # A positive procfs match is required: this set decides whom to kill.
            pids.update(pid for pid in found if self.runs_marker(pid) and self.alive(pid))
        return pids

    # -- stopping ---------------------------------------------------------------------------
    def kill(self, pid: int, timeout_s: float) -> None:
        """SIGTERM ``pid``, SIGKILL it after ``timeout_s``; only ever a server of this home."""
        for sig, wait_s in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, 5.0)):
            if not self.alive(pid):
                return
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline and self.alive(pid):
                time.sleep(0.05)

    def kill_all(self, timeout_s: float) -> bool:
        """Stop every server of this home and forget its state; True if one was running.
        Call with the lock held."""
        pids = self.pids()
        for pid in pids:
            self.kill(pid, timeout_s)
        self.state.unlink(missing_ok=True)
        return bool(pids)

    @contextlib.contextmanager
    def locked(self, deadline: float) -> Iterator[None]:
        """Hold ``start.lock`` (waiting until ``deadline``, a ``time.monotonic()`` value)."""
        self.root.mkdir(parents=True, exist_ok=True)
        # open() gives a non-inheritable descriptor and Popen closes fds: the long-lived child
        # must never hold this lock, or no later caller could take it.
        with open(self.lock, "a+b") as fh:
            while True:
                try:
                    fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        msg = f"timed out waiting for {self.lock} ({self.what}): another process holds it"
                        raise self.error(msg) from None
                    time.sleep(0.05)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    # -- starting ---------------------------------------------------------------------------
    def launch(self, cmd: list[str], env: Mapping[str, str] | None = None) -> tuple[subprocess.Popen[bytes], int]:
        """Start ``cmd`` detached, output appended to the log; returns it and where its output begins."""
        with open(self.log, "ab") as log:
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
                cwd=self.root,
                env=None if env is None else dict(env),
            )
        _CHILDREN[proc.pid] = proc
        return proc, offset

    def wait_ready(self, proc: subprocess.Popen[bytes], ready: Callable[[], bool], deadline: float) -> bool:
        """Poll ``ready`` until it holds while ``proc`` runs (True), or ``proc`` exits or
        ``deadline`` passes (False; an exited ``proc`` is reaped). An interrupt kills ``proc``."""
        try:
            while proc.poll() is None and time.monotonic() < deadline:
                if ready() and proc.poll() is None:
                    return True
                time.sleep(0.1)
        except BaseException:  # e.g. KeyboardInterrupt: leave no orphan behind
            self.kill(proc.pid, 2.0)
            raise
        if proc.poll() is not None:
            _CHILDREN.pop(proc.pid, None)
        return False

    def log_tail(self, offset: int, lines: int = 20) -> str:
        """The last ``lines`` lines written to the log from ``offset`` on."""
        try:
            with open(self.log, "rb") as fh:
                fh.seek(offset)
                return "\n".join(fh.read().decode("utf-8", "replace").splitlines()[-lines:])
        except OSError as exc:
            return f"(cannot read log: {exc})"
