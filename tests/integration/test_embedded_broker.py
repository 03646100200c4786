"""The embedded broker (``sparklog.broker.embedded_broker``): a real agent process per home,
reached by a real Kafka client (kcat), on a free port of the test's own instead of 9092 and
against the test's ZooKeeper chroot."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import sparklog
from sparklog.broker import embedded_broker
from sparklog.config import ClusterConfig, resolve_cluster_config
from sparklog.errors import BrokerNotAvailableError, ConfigError
from sparklog.metadata.broker_registration import live_broker_ids
from sparklog.testing.brokers import free_port
from sparklog.testing.metrics import scrape
from tests.helpers import leaving_no_server, pids_naming, results_at_once, wait_for

if TYPE_CHECKING:
    pass

pytestmark = pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="process checks read /proc (Linux)")

_TIMEOUT_S = 60.0


def _agent_pids(home: Path) -> list[int]:
    return pids_naming(home / "broker" / "broker.properties")


def _live_ids(config: ClusterConfig) -> list[int]:
    with sparklog.connect(config.to_options()) as cluster:
        return live_broker_ids(cluster.replicas.zk)


def _kcat_list(port: int) -> str:
    done = subprocess.run(
        ["kcat", "-b", f"127.0.0.1:{port}", "-L", "-m", "15"], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    with leaving_no_server(tmp_path / "home", embedded_broker.stop, "broker/broker.properties") as home:
        yield home


@pytest.fixture
def config(zk_connect: str, home: Path) -> ClusterConfig:
    settings = {
        "zookeeper.connect": zk_connect,
        "sparklog.home": str(home),
        "listeners": f"PLAINTEXT://127.0.0.1:{free_port()}",
        "zookeeper.session.timeout.ms": "3000",  # a killed agent's registration expires soon
    }
    return resolve_cluster_config(settings, environ={"SPARKLOG_CONF": os.devnull})


def _started_pid(options: dict[str, str]) -> int | None:
    """Runs in a spawned child: ensure the home's broker runs, return its pid."""
    return embedded_broker.ensure_started(resolve_cluster_config(options, environ={"SPARKLOG_CONF": os.devnull})).pid


def test_start_status_reuse_and_kcat_lists_it(config: ClusterConfig, home: Path) -> None:
    port = config.listeners[0].port
    with sparklog.connect(config.to_options()) as cluster:  # clients never start it themselves
        cluster.create_topic("greetings", partitions=2)
    assert not (home / "broker").exists()
    assert not embedded_broker.status(config).running

    started = embedded_broker.start(config)
    assert started.running and started.pid is not None
    assert (started.broker_id, started.listeners) == (0, (f"PLAINTEXT://127.0.0.1:{port}",))
    assert started.bootstrap_servers == f"127.0.0.1:{port}"
    assert Path(started.log_dir) == home.resolve() / "data"
    assert Path(started.log_file) == home.resolve() / "broker" / "broker.log"
    state = json.loads((home / "broker" / "server.json").read_text())
    assert (state["pid"], state["broker_id"], state["zookeeper"]) == (started.pid, 0, config.zookeeper_connect)
    assert state["listeners"] == [f"PLAINTEXT://127.0.0.1:{port}"]
    assert _agent_pids(home) == [started.pid]
    assert _live_ids(config) == [0]

    assert embedded_broker.status(config) == started
    assert embedded_broker.start(config) == started  # reused, not restarted
    assert embedded_broker.ensure_started(config) == started
    assert _agent_pids(home) == [started.pid]

    listing = _kcat_list(port)
    assert f"broker 0 at 127.0.0.1:{port} (controller)" in listing, listing
    assert 'topic "greetings" with 2 partitions' in listing, listing


def test_concurrent_starters_in_other_processes_get_one_agent(config: ClusterConfig, home: Path) -> None:
    pids = results_at_once(_started_pid, (config.to_options(),), 3, 120)
    assert len(set(pids)) == 1 and pids[0] is not None
    # The agent outlived the processes that started it, and this one reuses it.
    assert _agent_pids(home) == [pids[0]]
    assert embedded_broker.ensure_started(config).pid == pids[0]


def test_stop_is_a_clean_shutdown(config: ClusterConfig, home: Path) -> None:
    pid = embedded_broker.start(config).pid
    assert pid is not None
    assert embedded_broker.stop(home) is True
    assert _agent_pids(home) == []
    assert not (home / "broker" / "server.json").exists()
    current = embedded_broker.status(config)
    assert not current.running and current.pid is None
    assert _live_ids(config) == []  # deregistered at once, not after the session timeout
    assert embedded_broker.stop(home) is False
    assert embedded_broker.stop(home.parent / "never-started") is False


def test_a_stop_right_after_start_deregisters_every_time(config: ClusterConfig, home: Path) -> None:
    """``start`` returns once the agent is registered, while it may still be starting its
    controller election: a SIGTERM then must still shut it down cleanly (it once raised in
    the signal handler, died registered, and the registration outlived it for the session
    timeout)."""
    for attempt in range(3):
        assert embedded_broker.start(config).pid is not None
        assert embedded_broker.stop(home) is True
        assert _live_ids(config) == [], f"attempt {attempt}: still registered after a clean stop"
    log_text = (home / "broker" / "broker.log").read_text(errors="replace")
    assert "Traceback" not in log_text, log_text[-2000:]


def test_killed_agent_is_replaced_once_its_registration_expires(config: ClusterConfig, home: Path) -> None:
    first = embedded_broker.start(config).pid
    assert first is not None
    os.kill(first, signal.SIGKILL)
    wait_for(lambda: first not in _agent_pids(home), _TIMEOUT_S, "the killed agent gone")
    assert not embedded_broker.status(config).running
    # Its ephemeral registration outlives it for the session timeout: the start waits for it.
    second = embedded_broker.ensure_started(config)
    assert second.running and second.pid not in (None, first)
    assert _agent_pids(home) == [second.pid]
    assert f"broker 0 at 127.0.0.1:{config.listeners[0].port}" in _kcat_list(config.listeners[0].port)


def test_port_taken_by_another_process_is_a_clear_error(config: ClusterConfig, home: Path) -> None:
    port = config.listeners[0].port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as squatter:
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        with pytest.raises(BrokerNotAvailableError) as raised:
            embedded_broker.start(config, timeout_s=_TIMEOUT_S)
    message = str(raised.value)
    assert f"port {port} is taken by another process" in message, message
    assert "Address already in use" in message, message  # the agent's own line, from the log tail
    assert str(home.resolve() / "broker" / "broker.log") in message, message
    assert _agent_pids(home) == []
    assert not embedded_broker.status(config).running
    assert _live_ids(config) == []


def test_port_zero_is_refused(config: ClusterConfig, home: Path) -> None:
    zero = replace(config, listeners=(replace(config.listeners[0], port=0),))
    with pytest.raises(ConfigError, match="needs a fixed port"):
        embedded_broker.start(zero)
    assert _agent_pids(home) == []


def _cli(config: ClusterConfig, *args: str, expect: int = 0) -> subprocess.CompletedProcess[str]:
    properties = Path(config.home).parent / "cli.properties"
    properties.write_text(f"listeners={config.listeners[0]}\nzookeeper.session.timeout.ms=3000\n")
    command = [sys.executable, "-m", "sparklog.cli.main", *args]
    command += ["--zookeeper", str(config.zookeeper_connect), "--home", config.home, "--config", str(properties)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=Path(config.home).parent)
    context = f"sparklog {' '.join(args)} -> {done.returncode}\nstdout: {done.stdout}\nstderr: {done.stderr}"
    assert done.returncode == expect, context
    assert "Traceback" not in done.stderr, context
    return done


def test_cli_start_embedded_status_stop(config: ClusterConfig, home: Path) -> None:
    home.mkdir()
    port = config.listeners[0].port
    assert _cli(config, "broker", "status", expect=3).stdout == "Broker 0 is not running\n"
    started = _cli(config, "broker", "start", "--embedded").stdout
    [pid] = _agent_pids(home)
    log = home.resolve() / "broker" / "broker.log"
    data = home.resolve() / "data"
    metrics_url = embedded_broker.status(config).metrics_url  # a port the OS picked (metrics.port=0)
    assert metrics_url is not None and metrics_url.startswith("http://127.0.0.1:"), metrics_url
    assert scrape(metrics_url).value("kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert started == (
        f"Broker 0 is running at PLAINTEXT://127.0.0.1:{port} (pid {pid}, log dir {data}, log {log}, "
        f"metrics {metrics_url})\n"
    )
    assert _cli(config, "broker", "start", "--embedded").stdout == started  # reused
    assert _cli(config, "broker", "status").stdout == started
    as_json = json.loads(_cli(config, "broker", "status", "--output", "json").stdout)
    assert (as_json["running"], as_json["pid"], as_json["bootstrap_servers"]) == (True, pid, f"127.0.0.1:{port}")
    assert as_json["metrics_url"] == metrics_url
    refused = _cli(config, "broker", "start", "--embedded", "--id", "3", expect=2)
    assert "--embedded takes the broker's settings from the config" in refused.stderr and "--id" in refused.stderr
    assert _agent_pids(home) == [pid]

    assert _cli(config, "broker", "stop").stdout == f"Stopped the embedded broker (pid {pid})\n"
    assert _agent_pids(home) == []
    assert _cli(config, "broker", "stop").stdout == "The embedded broker is not running\n"
    assert _cli(config, "broker", "status", expect=3).stdout == "Broker 0 is not running\n"


def test_status_reports_the_listeners_the_broker_serves_not_a_foreign_port(config: ClusterConfig, home: Path) -> None:
    home.mkdir()
    configured = config.listeners[0].port
    other = free_port()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as foreign:
        foreign.bind(("127.0.0.1", configured))  # something else owns the configured port
        foreign.listen()
        started = _cli(config, "broker", "start", "--embedded", "--listeners", f"PLAINTEXT://127.0.0.1:{other}")
        [pid] = _agent_pids(home)
        serving = f"Broker 0 is running at PLAINTEXT://127.0.0.1:{other} (pid {pid}, "
        assert started.stdout.startswith(serving), started.stdout
        assert _cli(config, "broker", "status").stdout == started.stdout

        # Started again without --listeners: the configured port answers, but not as this broker.
        again = _cli(config, "broker", "start", "--embedded")
        assert again.stdout == started.stdout
        assert f"PLAINTEXT://127.0.0.1:{configured}" in again.stderr, again.stderr  # says the config differs
        assert _agent_pids(home) == [pid]
        status = embedded_broker.status(config)
        assert (status.running, status.pid, status.listeners) == (True, pid, (f"PLAINTEXT://127.0.0.1:{other}",))
        assert status.bootstrap_servers == f"127.0.0.1:{other}"
        assert f"broker 0 at 127.0.0.1:{other}" in _kcat_list(other)

    assert embedded_broker.stop(home)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as foreign:
        foreign.bind(("127.0.0.1", configured))
        foreign.listen()
        assert not embedded_broker.status(config).running
        assert _cli(config, "broker", "status", expect=3).stdout == "Broker 0 is not running\n"
