"""`make venv` (and so `make test` and `.ci/run`) puts Debian's `kcat` on PATH
(`scripts/ensure-kcat.sh`): the Kafka-protocol tests use it as a real Kafka client."""

from __future__ import annotations

import shutil
import subprocess


def test_kcat_is_on_path_and_runs() -> None:
    kcat = shutil.which("kcat")
    assert kcat, "kcat is not on PATH: run `make venv` (scripts/ensure-kcat.sh installs Debian's kcat)"
    done = subprocess.run([kcat, "-V"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "librdkafka" in done.stdout + done.stderr, done.stdout + done.stderr
