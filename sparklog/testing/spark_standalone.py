"""A Spark standalone cluster on loopback: one master and some workers, from the jars and
scripts the ``pyspark`` wheel ships (``bin/spark-class``), each a child process.

States (per process, as :class:`~sparklog.testing.processes.ChildProcesses`): the master is
process 0, workers 1..n. :meth:`SparkStandalone.__enter__` starts the master, then the
workers, and returns once the master reports every worker ALIVE (its JSON status page);
:attr:`master_url` is what ``spark-submit --master`` takes. Workers keep their work dirs
(executor logs) under the cluster's directory, so a failing test can show them.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import Self

from sparklog.testing.brokers import free_port
from sparklog.testing.processes import ChildProcesses

__all__ = ["SparkStandalone"]

_MASTER = 0
_START_TIMEOUT_S = 90.0


def _spark_class() -> Path:
    import pyspark

    script = Path(pyspark.__file__).parent / "bin" / "spark-class"
    if not script.exists():
        raise AssertionError(f"pyspark ships no {script}: run `make venv`")
    return script


class SparkStandalone(ChildProcesses):
    """A master and ``workers`` workers (``cores`` cores and ``memory`` each) on 127.0.0.1."""

    def __init__(self, directory: Path, workers: int = 2, cores: int = 1, memory: str = "1g") -> None:
        super().__init__()
        self.directory = Path(directory)
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.port = free_port()
        self.webui_port = free_port()
        self.master_url = f"spark://127.0.0.1:{self.port}"

    def describe(self, process_id: int) -> str:
        return "the Spark master" if process_id == _MASTER else f"Spark worker {process_id}"

    def log_path(self, process_id: int) -> Path:
        return self.directory / ("master.log" if process_id == _MASTER else f"worker-{process_id}.log")

    def logs(self, process_ids: Iterable[int] | None = None) -> str:
        ids = list(process_ids) if process_ids is not None else range(self.workers + 1)
        lines: list[str] = []
        for process_id in ids:
            path = self.log_path(process_id)
            tail = path.read_text(errors="replace").splitlines()[-20:] if path.exists() else []
            lines += [f"--- {self.describe(process_id)} ({path})", *(f"  {line}" for line in tail)]
        return "\n".join(lines)

    def _environment(self) -> dict[str, str]:
        # No store variables of the test's: what executors need must travel with their tasks,
        # as on machines that never had the driver's environment.
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        # Executors' Python workers run this interpreter (it has sparklog installed).
        env.setdefault("PYSPARK_PYTHON", sys.executable)
        env["SPARK_LOG_DIR"] = str(self.directory)
        env["SPARK_NO_DAEMONIZE"] = "1"
        return env

    def status(self) -> dict[str, object]:
        """The master's status page as JSON (workers, applications)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.webui_port}/json/", timeout=5) as response:
            return dict(json.loads(response.read()))

    def alive_workers(self) -> int:
        try:
            workers = self.status().get("workers", [])
        except (urllib.error.URLError, ConnectionError, TimeoutError, json.JSONDecodeError):
            return 0
        return (
            sum(1 for w in workers if isinstance(w, dict) and w.get("state") == "ALIVE")
            if isinstance(workers, list)
            else 0
        )

    def __enter__(self) -> Self:
        self.directory.mkdir(parents=True, exist_ok=True)
        spark_class, env = str(_spark_class()), self._environment()
        master = [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1"]
        self._spawn(
            _MASTER, [*master, "--port", str(self.port), "--webui-port", str(self.webui_port)], self.directory, env
        )
        for worker in range(1, self.workers + 1):
            work_dir = self.directory / f"work-{worker}"
            work_dir.mkdir(exist_ok=True)
            command = [
                spark_class,
                "org.apache.spark.deploy.worker.Worker",
                "--host",
                "127.0.0.1",
                "--cores",
                str(self.cores),
                "--memory",
                self.memory,
                "--work-dir",
                str(work_dir),
                "--webui-port",
                str(free_port()),
                self.master_url,
            ]
            self._spawn(worker, command, self.directory, env)
        self.wait_for(
            lambda: self.alive_workers() == self.workers,
            _START_TIMEOUT_S,
            f"{self.workers} Spark workers registered with {self.master_url}",
            exited_is_failure=range(self.workers + 1),
        )
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
