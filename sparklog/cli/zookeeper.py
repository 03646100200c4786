"""``sparklog zookeeper start|stop|status``: the embedded ZooKeeper server of ``--home``.

The home is resolved like every other cluster setting (``--home`` > ``SPARKLOG_HOME`` >
properties file > ``.sparklog``). ``--zookeeper`` plays no part: these commands manage
the local embedded server only, never an external ensemble.

Output: ``ZooKeeper is running at 127.0.0.1:PORT (pid N, data DIR)`` or ``ZooKeeper is
not running``; ``stop`` prints ``Stopped ZooKeeper (pid N)``. Exit codes follow the LSB
init-script convention for ``status``: 0 running, 3 not running.

``stop`` first stops the home's embedded broker (``sparklog broker start --embedded``,
:mod:`sparklog.broker.embedded_broker`) when it runs against this ZooKeeper: a broker whose
ZooKeeper is gone can serve nobody, and the next start picks another port for ZooKeeper.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from sparklog.cli.options import add_command, cluster_config
from sparklog.cli.output import add_output_option, report_status, write_json, write_lines

if TYPE_CHECKING:
    from sparklog.metadata.embedded import EmbeddedZooKeeperStatus

__all__ = ["register", "status_line", "stopped_line"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    zookeeper = subparsers.add_parser(
        "zookeeper",
        help="start, stop or check the embedded ZooKeeper of --home",
        description="Manage the embedded single-node ZooKeeper (run from the jars pyspark ships).",
    )
    actions = zookeeper.add_subparsers(dest="action", metavar="ACTION", required=True)
    start = add_command(actions, "start", _start, "start the server unless it runs already")
    start.add_argument("--timeout-s", type=float, default=60.0, help="how long to wait for it to answer (default 60)")
    add_output_option(start)
    stop = add_command(actions, "stop", _stop, "stop the server")
    add_output_option(stop)
    status = add_command(actions, "status", _status, "tell whether the server runs (exit 0) or not (exit 3)")
    add_output_option(status)


def status_line(status: EmbeddedZooKeeperStatus) -> str:
    if not status.running:
        return "ZooKeeper is not running"
    return f"ZooKeeper is running at {status.connect} (pid {status.pid}, data {status.data_dir})"


def _home(args: argparse.Namespace) -> str:
    return cluster_config(args).home


def _report(args: argparse.Namespace, status: EmbeddedZooKeeperStatus) -> int:
    return report_status(args, status, status_line(status))


def _start(args: argparse.Namespace) -> int:
    from sparklog.metadata import embedded

    return _report(args, embedded.start(_home(args), timeout_s=args.timeout_s))


def _status(args: argparse.Namespace) -> int:
    from sparklog.metadata import embedded

    return _report(args, embedded.status(_home(args)))


def _stop(args: argparse.Namespace) -> int:
    from sparklog.broker import embedded_broker
    from sparklog.metadata import embedded

    home = _home(args)
    broker_pid = embedded_broker.recorded_pid(home)
    broker_stopped = embedded_broker.stop(home, only_on_embedded_zookeeper=True)
    pid = embedded.status(home).pid  # stop() only says whether something ran
    stopped = embedded.stop(home)
    if args.output == "json":
        write_json({"stopped": stopped, "pid": pid if stopped else None, "broker_stopped": broker_stopped})
        return 0
    if broker_stopped:
        write_lines([stopped_line("the embedded broker", broker_pid)])
    write_lines([stopped_line("ZooKeeper", pid) if stopped else "ZooKeeper is not running"])
    return 0


def stopped_line(what: str, pid: int | None) -> str:
    return f"Stopped {what} (pid {pid})" if pid is not None else f"Stopped {what}"
