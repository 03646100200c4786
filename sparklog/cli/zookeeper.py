"""``sparklog zookeeper start|stop|status``: the embedded ZooKeeper server of ``--home``.

The home is resolved like every other cluster setting (``--home`` > ``SPARKLOG_HOME`` >
properties file > ``.sparklog``). ``--zookeeper`` plays no part: these commands manage
the local embedded server only, never an external ensemble.

Output: ``ZooKeeper is running at 127.0.0.1:PORT (pid N, data DIR)`` or ``ZooKeeper is
not running``; ``stop`` prints ``Stopped ZooKeeper (pid N)``. Exit codes follow the LSB
init-script convention for ``status``: 0 running, 3 not running.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict
from typing import TYPE_CHECKING

from sparklog.cli.options import add_command, cluster_config
from sparklog.cli.output import add_output_option, write_json, write_lines

if TYPE_CHECKING:
    from sparklog.metadata.embedded import EmbeddedZooKeeperStatus

__all__ = ["EXIT_NOT_RUNNING", "register", "status_line"]

EXIT_NOT_RUNNING = 3


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
    if args.output == "json":
        write_json(asdict(status))
    else:
        write_lines([status_line(status)])
    return 0 if status.running else EXIT_NOT_RUNNING


def _start(args: argparse.Namespace) -> int:
    from sparklog.metadata import embedded

    return _report(args, embedded.start(_home(args), timeout_s=args.timeout_s))


def _status(args: argparse.Namespace) -> int:
    from sparklog.metadata import embedded

    return _report(args, embedded.status(_home(args)))


def _stop(args: argparse.Namespace) -> int:
    from sparklog.metadata import embedded

    home = _home(args)
    pid = embedded.status(home).pid  # stop() only says whether something ran
    stopped = embedded.stop(home)
    if args.output == "json":
        write_json({"stopped": stopped, "pid": pid if stopped else None})
    elif not stopped:
        write_lines(["ZooKeeper is not running"])
    else:
        write_lines([f"Stopped ZooKeeper (pid {pid})" if pid is not None else "Stopped ZooKeeper"])
    return 0
