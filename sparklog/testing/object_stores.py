"""S3 servers on loopback for tests: moto's (honours conditional writes) and s3rver (npm;
ignores ``If-None-Match``, the store sparklog must refuse).

* :class:`MotoS3` — moto's S3 server (``ThreadedMotoServer``) in this process's threads;
  states: *stopped* → (``__enter__``) *serving* → (``__exit__``) *stopped*;
* :class:`S3rver` — ``s3rver`` as a child process (its log kept like the brokers'), from the
  ``node_modules`` the Makefile installs (:data:`S3RVER_SCRIPT`).

Both give :meth:`environ`: the ``AWS_*`` variables a sparklog process (or delta-rs, pyarrow)
needs to reach them, and :meth:`create_bucket`.
"""

from __future__ import annotations

import os
import shutil
import time
import urllib.error
import urllib.request
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType

from sparklog.testing.brokers import free_port
from sparklog.testing.processes import ChildProcesses

__all__ = ["S3RVER_SCRIPT", "MotoS3", "S3rver"]

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


class MotoS3:
    """moto's S3 server on 127.0.0.1 (a free port), for as long as the ``with`` lasts."""

    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer

        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)

    def __enter__(self) -> MotoS3:
        self._server.start()
        deadline = time.monotonic() + _START_TIMEOUT_S
        while True:  # start() returns before the socket listens
            try:
                with urllib.request.urlopen(f"{self.endpoint}/moto-api/", timeout=2) as response:
                    response.read()
                return self
            except (urllib.error.URLError, ConnectionError):
                if time.monotonic() > deadline:
                    raise AssertionError(f"moto's S3 server did not listen on {self.endpoint}") from None
                time.sleep(0.05)

    def __exit__(self, *exc: object) -> None:
        self._server.stop()

    def create_bucket(self, bucket: str) -> None:
        _create_bucket(self.endpoint, bucket)

    def environ(self) -> dict[str, str]:
        return _environ(self.endpoint, "testing", "testing")

    def settings(self) -> dict[str, str]:
        return _settings(self.environ())


class S3rver(ChildProcesses):
    """The npm ``s3rver`` on 127.0.0.1 (a free port), data under ``directory``."""

    _ID = 1

    def __init__(self, directory: Path) -> None:
        super().__init__()
        self.directory = directory
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"

    def describe(self, process_id: int) -> str:
        return f"s3rver on port {self.port}"

    def log_path(self, process_id: int) -> Path:
        return self.directory / "s3rver.log"

    def logs(self, process_ids: Iterable[int] | None = None) -> str:
        path = self.log_path(self._ID)
        tail = path.read_text(errors="replace").splitlines()[-30:] if path.exists() else []
        return "\n".join(f"  {line}" for line in tail)

    def __enter__(self) -> S3rver:
        node = shutil.which("node")
        if node is None or not S3RVER_SCRIPT.exists():
            raise AssertionError(f"s3rver is not installed ({S3RVER_SCRIPT}, node {node}): run `make venv`")
        data = self.directory / "data"
        data.mkdir(parents=True, exist_ok=True)
        command = [node, str(S3RVER_SCRIPT), "--directory", str(data), "--address", "127.0.0.1"]
        command += ["--port", str(self.port), "--silent"]
        self._spawn(self._ID, command, self.directory, dict(os.environ))

        def listening() -> bool:
            try:
                with urllib.request.urlopen(f"{self.endpoint}/", timeout=2) as response:
                    response.read()
                return True
            except urllib.error.HTTPError:
                return True  # it answered
            except (urllib.error.URLError, ConnectionError):
                return False

        self.wait_for(listening, _START_TIMEOUT_S, f"s3rver on {self.endpoint}", exited_is_failure=[self._ID])
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def create_bucket(self, bucket: str) -> None:
        _create_bucket(self.endpoint, bucket)

    def environ(self) -> dict[str, str]:
        # s3rver checks signatures against its one built-in key pair.
        return _environ(self.endpoint, "S3RVER", "S3RVER")

    def settings(self) -> dict[str, str]:
        return _settings(self.environ())
