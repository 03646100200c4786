"""Child processes a test fails the ways real servers fail: the part the broker-agent and the
ZooKeeper-ensemble harnesses share.

Each process has an integer id, a log file its output is appended to across restarts (with
a line at every start and exit), and these states: *not started* → (:meth:`_spawn`)
*running* ⇄ (:meth:`pause` / :meth:`resume`: SIGSTOP / SIGCONT) *paused* → (:meth:`kill`,
SIGKILL, or the subclass's clean stop) *exited* (reaped; may be started again). On
:meth:`close` (also when a test fails) every process still running is killed and reaped.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import IO

__all__ = ["ChildProcesses"]


class ChildProcesses:
    """Processes by id; subclasses name them (:meth:`describe`), say where their logs go
    (:meth:`log_path`) and summarise them for failure messages (:meth:`logs`)."""

    def __init__(self) -> None:
        self._processes: dict[int, subprocess.Popen[bytes]] = {}
        self._log_files: dict[int, IO[bytes]] = {}
        self._paused: set[int] = set()

    # -- what subclasses define ------------------------------------------------------------
    def describe(self, process_id: int) -> str:
        raise NotImplementedError

    def log_path(self, process_id: int) -> Path:
        raise NotImplementedError

    def logs(self, process_ids: Iterable[int] | None = None) -> str:
        raise NotImplementedError

    # -- context manager -------------------------------------------------------------------
    def __enter__(self) -> ChildProcesses:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Kill and reap every process still running."""
        for process_id in list(self._processes):
            self._signal(process_id, signal.SIGKILL)
            self._reap(process_id, 10)

    # -- life cycle ------------------------------------------------------------------------
    def _spawn(self, process_id: int, command: list[str], cwd: Path, env: Mapping[str, str] | None = None) -> int:
        """Start ``command``; returns where this start's output begins in the log."""
        self._reap(process_id, 0)  # an exited predecessor: forget it
        log = open(self.log_path(process_id), "ab")
        offset = log.tell()
        log.write(f"===== {time.strftime('%H:%M:%S')} starting {self.describe(process_id)}\n".encode())
        log.flush()
        self._log_files[process_id] = log
        self._processes[process_id] = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=cwd, env=env
        )
        return offset

    def kill(self, process_id: int) -> None:
        """SIGKILL the process and reap it: nothing of it is cleaned up."""
        self._require_running(process_id)
        self._signal(process_id, signal.SIGKILL)
        if self._reap(process_id, 10) is None:
            raise AssertionError(f"{self.describe(process_id)} survived SIGKILL for 10 s")

    def pause(self, process_id: int) -> None:
        """SIGSTOP: the process hangs (no replies, no heartbeats) until :meth:`resume`."""
        self._require_running(process_id)
        self._signal(process_id, signal.SIGSTOP)
        self._paused.add(process_id)

    def resume(self, process_id: int) -> None:
        self._require_running(process_id)
        self._signal(process_id, signal.SIGCONT)
        self._paused.discard(process_id)

    def wait_exited(self, process_id: int, timeout_s: float) -> int:
        """Wait for the process to exit by itself (e.g. refusing a bad config); its exit code.
        Fails with its log when it still runs after ``timeout_s``."""
        code = self._reap(process_id, timeout_s)
        if code is None:
            raise AssertionError(
                f"{self.describe(process_id)} still runs after {timeout_s:.0f} s\n{self.logs([process_id])}"
            )
        return code

    def running(self, process_id: int) -> bool:
        """Whether the process exists (paused counts), not whether it serves."""
        process = self._processes.get(process_id)
        return process is not None and process.poll() is None

    def pid(self, process_id: int) -> int:
        self._require_running(process_id)
        return self._processes[process_id].pid

    def _require_running(self, process_id: int) -> None:
        if not self.running(process_id):
            raise AssertionError(f"{self.describe(process_id)} is not running\n{self.logs([process_id])}")

    def _signal(self, process_id: int, signum: int) -> None:
        process = self._processes.get(process_id)
        if process is None or process.poll() is not None:
            return
        if signum in (signal.SIGTERM, signal.SIGINT) and process_id in self._paused:
            process.send_signal(signal.SIGCONT)  # a stopped process cannot handle SIGTERM
            self._paused.discard(process_id)
        try:
            process.send_signal(signum)
        except ProcessLookupError:
            pass

    def _reap(self, process_id: int, timeout_s: float) -> int | None:
        """Wait up to ``timeout_s`` for the process to exit; its exit code, or None if it runs on."""
        process = self._processes.get(process_id)
        if process is None:
            return None
        try:
            code = process.wait(timeout_s) if timeout_s > 0 else process.poll()
        except subprocess.TimeoutExpired:
            return None
        if code is None:
            return None
        del self._processes[process_id]
        self._paused.discard(process_id)
        log = self._log_files.pop(process_id, None)
        if log is not None:
            log.write(f"===== {time.strftime('%H:%M:%S')} {self.describe(process_id)} exited {code}\n".encode())
            log.close()
        return code

    def wait_for(
        self, condition: Callable[[], bool], timeout_s: float, what: str, *, exited_is_failure: Iterable[int] = ()
    ) -> None:
        """Poll ``condition``; on timeout (or when a process in ``exited_is_failure`` exits)
        fail with the processes' log tails."""
        watched = list(exited_is_failure)
        deadline = time.monotonic() + timeout_s
        while not condition():
            dead = [p for p in watched if p in self._processes and self._processes[p].poll() is not None]
            if dead:
                names = ", ".join(self.describe(p) for p in dead)
                raise AssertionError(f"waiting for {what}: {names} exited\n{self.logs(dead)}")
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}\n{self.logs()}")
            time.sleep(0.05)
