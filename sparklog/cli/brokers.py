"""Brokers from the shell: ``broker start`` (the agent, in the foreground) and ``brokers list``.

``broker start --id N --log-dir URI [--rack R]`` runs :class:`sparklog.server.broker.BrokerAgent`
until SIGTERM or SIGINT, then stops cleanly (controller role resigned, replica fetcher
stopped, ``/brokers/ids/N`` deleted). ``brokers list`` prints every registered broker with
its log dir, rack, whether its agent is live and which one is the controller
(``--output json`` for machines). Neither starts Spark.
"""

from __future__ import annotations

import argparse
import signal
from typing import Any

from sparklog.cli.options import add_command, cluster_config, connect
from sparklog.cli.output import add_output_option, print_stderr, table_lines, write_json, write_lines

__all__ = ["register"]

_LIST_HEADER = ["ID", "HOST", "RACK", "LOG-DIR", "STATE", "CONTROLLER"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    broker = subparsers.add_parser("broker", help="run a broker agent (broker start ...)")
    actions = broker.add_subparsers(dest="action", metavar="ACTION", required=True)
    run = add_command(actions, "start", _start, "run the agent of one broker until SIGTERM", description=__doc__)
    run.add_argument("--id", type=int, required=True, dest="broker_id", help="the broker id (an integer >= 0)")
    run.add_argument("--log-dir", required=True, help="the broker's storage root (path or URI)")
    run.add_argument("--rack", help="rack (or availability zone) for rack-aware replica placement")
    run.add_argument(
        "--replica-lag-time-max-ms", type=int, default=10_000, help="ISR: max follower lag (default 10000)"
    )
    run.add_argument("--auto-leader-rebalance-enable", choices=("true", "false"), default="true")
    run.add_argument("--leader-imbalance-check-interval-seconds", type=float, default=300.0)
    run.add_argument("--probe-interval-ms", type=int, default=1_000, help="storage probe period (default 1000)")
    run.add_argument(
        "--listeners", help="Kafka-protocol listeners, NAME://host:port,... (default: the config's listeners)"
    )
    run.add_argument("--advertised-listeners", help="what clients are told to connect to (default: --listeners)")
    listing = subparsers.add_parser("brokers", help="list brokers (brokers list)")
    list_actions = listing.add_subparsers(dest="action", metavar="ACTION", required=True)
    add_output_option(add_command(list_actions, "list", _list, "registered brokers, live or not", description=__doc__))


def _start(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from sparklog.config import parse_listeners
    from sparklog.errors import ConfigError
    from sparklog.server.broker import BrokerAgent, BrokerSettings, ControllerSettings

    if args.broker_id < 0:
        raise ConfigError(f"--id must be >= 0, got {args.broker_id}")
    config = replace(
        cluster_config(args), broker_id=args.broker_id, log_dir=args.log_dir, broker_rack=args.rack or None
    )
    if args.listeners is not None:
        listeners = parse_listeners("--listeners", args.listeners)
        config = replace(config, listeners=listeners, advertised_listeners=listeners)
    if args.advertised_listeners is not None:
        config = replace(
            config, advertised_listeners=parse_listeners("--advertised-listeners", args.advertised_listeners)
        )
    settings = BrokerSettings(
        probe_interval_ms=args.probe_interval_ms,
        controller=ControllerSettings(
            replica_lag_time_max_ms=args.replica_lag_time_max_ms,
            auto_leader_rebalance_enable=args.auto_leader_rebalance_enable == "true",
            leader_imbalance_check_interval_s=args.leader_imbalance_check_interval_seconds,
        ),
    )
    agent = BrokerAgent(config, settings)

    def on_signal(_signum: int, _frame: Any) -> None:
        agent.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    agent.start()
    print_stderr(f"broker {args.broker_id} started (log dir {args.log_dir}); SIGTERM or Ctrl-C stops it")
    agent.wait()
    return 0


def _list(args: argparse.Namespace) -> int:
    from sparklog.admin.brokers import describe_brokers

    with connect(args) as cluster:
        brokers = describe_brokers(cluster.replicas)
    rows = [
        {
            "id": b.broker_id,
            "host": b.host,
            "rack": b.rack,
            "log_dir": b.log_dir,
            "state": "live" if b.live else "down",
            "controller": b.controller,
        }
        for b in brokers
    ]
    if args.output == "json":
        write_json(rows)
        return 0
    cells = [
        [
            str(r["id"]),
            str(r["host"] or "-"),
            str(r["rack"] or "-"),
            str(r["log_dir"]),
            str(r["state"]),
            "yes" if r["controller"] else "no",
        ]
        for r in rows
    ]
    widths = [max([len(h), *(len(row[i]) for row in cells)]) for i, h in enumerate(_LIST_HEADER[:-1])]
    write_lines(table_lines(_LIST_HEADER, cells, widths))
    return 0
