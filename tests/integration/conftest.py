"""Fixtures shared by the integration tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.test_cli import Cli


@pytest.fixture
def cli(zk_connect: str, sparklog_home: Path) -> Cli:
    """Runs ``sparklog`` against this test's cluster (its chroot and home)."""
    return Cli(zk_connect, sparklog_home)
