"""S3 servers on loopback for tests: moto's (honours conditional writes) and s3rver (npm;
ignores ``If-None-Match``, the store sparklog must refuse).

Both run as child processes (their logs kept like the brokers'); states: *stopped* →
(``__enter__``: started, then answering HTTP) *serving* → (``__exit__``, or a test's
:meth:`~sparklog.testing.processes.ChildProcesses.kill`) *stopped*.

* :class:`MotoS3` — moto's S3 server (``moto_server`` from PyPI). Not moto's in-process
  ``ThreadedMotoServer``: some delta-rs calls hold the GIL while they wait for the store
  (``DeltaTable.history`` with deltalake 1.6.6), and a server in the same process then never
  answers them;
* :class:`S3rver` — ``s3rver`` from the ``node_modules`` the Makefile installs
  (:data:`S3RVER_SCRIPT`).

Both give :meth:`environ`: the ``AWS_*`` variables a sparklog process (or delta-rs, pyarrow)
needs to reach them, :meth:`settings` (the same as ``storage.*`` settings) and
:meth:`create_bucket`.
"""

from __future__ import annotations

import os
import shutil
import sys
import urllib.error
import urllib.request
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import Self

from sparklog.testing.brokers import free_port
from sparklog.testing.processes import ChildProcesses

__all__ = ["S3RVER_SCRIPT", "MotoS3", "S3ServerProcess", "S3rver"]

# Installed by the Makefile (npm, pinned in package.json at the repository's root).
S3RVER_SCRIPT = Path(__file__).resolve().parents[2] / "node_modules" / "s3rver" / "bin" / "s3rver.js"
_REGION = "us-east-1"
_START_TIMEOUT_S = 30.0


def _create_bucket(endpoint: str, bucket: str) -> None:
    """PUT /<bucket> (path-style): neither test server checks the request's signature on it."""
    request = urllib.request.Request(f"{endpoint}/{bucket}", method="PUT", data=b"")
    with urllib.request.urlopen(request, timeout=10) as response:
        response.read()


def _environ(endpoint: str, key_id: str, secret: str) -> dict[str, str]:
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": key_id,
        "AWS_SECRET_ACCESS_KEY": secret,
        "AWS_REGION": _REGION,
        "AWS_ALLOW_HTTP": "true",
    }


def _settings(environ: dict[str, str]) -> dict[str, str]:
    """The same as ``storage.*`` settings (sparklog.properties, Cluster options)."""
    from sparklog.model.storage_location import STORAGE_SETTINGS

    return {key: environ[var] for key, var in STORAGE_SETTINGS.items() if var in environ}


class S3ServerProcess(ChildProcesses):
    """One S3 server process on 127.0.0.1 (a free port), its log and data under ``directory``."""

    _ID = 1
    name = "an S3 server"
    _key_id = _secret = "testing"

    def __init__(self, directory: Path) -> None:
        super().__init__()
        self.directory = Path(directory)
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"

    def _command(self) -> list[str]:
        raise NotImplementedError

    def _environment(self) -> dict[str, str]:
        return dict(os.environ)

    def describe(self, process_id: int) -> str:
        return f"{self.name} on port {self.port}"

    def log_path(self, process_id: int) -> Path:
        return self.directory / "server.log"

    def logs(self, process_ids: Iterable[int] | None = None) -> str:
        path = self.log_path(self._ID)
        tail = path.read_text(errors="replace").splitlines()[-30:] if path.exists() else []
        return "\n".join(f"  {line}" for line in tail)

    def __enter__(self) -> Self:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._spawn(self._ID, self._command(), self.directory, self._environment())

        def listening() -> bool:
            try:
                with urllib.request.urlopen(f"{self.endpoint}/", timeout=2) as response:
                    response.read()
                return True
            except urllib.error.HTTPError:
                return True  # it answered
            except (urllib.error.URLError, ConnectionError):
                return False

        self.wait_for(listening, _START_TIMEOUT_S, f"{self.name} on {self.endpoint}", exited_is_failure=[self._ID])
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def create_bucket(self, bucket: str) -> None:
        _create_bucket(self.endpoint, bucket)

    def environ(self) -> dict[str, str]:
        return _environ(self.endpoint, self._key_id, self._secret)

    def settings(self) -> dict[str, str]:
        return _settings(self.environ())


class MotoS3(S3ServerProcess):
    """moto's S3 server (it honours ``If-None-Match: *`` and ``If-Match``). With
    ``check_credentials`` it refuses every request's credentials (moto's IAM checks on, and no
    user created): the store of a wrong key pair."""

    name = "moto's S3 server"

    def __init__(self, directory: Path, *, check_credentials: bool = False) -> None:
        super().__init__(directory)
        self.check_credentials = check_credentials

    def _environment(self) -> dict[str, str]:
        if not self.check_credentials:
            return dict(os.environ)
        return {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "0"}

    def _command(self) -> list[str]:
        server = Path(sys.executable).with_name("moto_server")
        if not server.exists():
            raise AssertionError(f"moto's server is not installed ({server}): run `make venv`")
        return [str(server), "-H", "127.0.0.1", "-p", str(self.port)]


class S3rver(S3ServerProcess):
    """The npm ``s3rver`` (it ignores ``If-None-Match``), data under ``directory``."""

    name = "s3rver"
    _key_id = _secret = "S3RVER"  # s3rver checks signatures against its one built-in key pair

    def _command(self) -> list[str]:
        node = shutil.which("node")
        if node is None or not S3RVER_SCRIPT.exists():
            raise AssertionError(f"s3rver is not installed ({S3RVER_SCRIPT}, node {node}): run `make venv`")
        data = self.directory / "data"
        data.mkdir(parents=True, exist_ok=True)
        return [
            node,
            str(S3RVER_SCRIPT),
            "--directory",
            str(data),
            "--address",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--silent",
        ]
