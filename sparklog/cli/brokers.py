"""Brokers from the shell: ``broker start`` (the agent, in the foreground or the home's
embedded one in the background), ``broker stop|status`` and ``brokers list``.

``broker start --id N --log-dir URI [--rack R]`` runs :class:`sparklog.broker.agent.BrokerAgent`
until SIGTERM or SIGINT, then stops cleanly (controller role resigned, replica fetcher
stopped, ``/brokers/ids/N`` deleted).

``broker start --embedded`` starts the embedded broker of ``--home`` in the background
unless it runs already (:mod:`sparklog.broker.embedded_broker`): id ``broker.id``, log dir
``log.dirs``, listeners ``listeners`` (default PLAINTEXT://127.0.0.1:9092) from the
cluster config, or ``--listeners``. A broker of the home already running is reused: with
``--listeners`` only if it listens there, without them whatever it listens on (a note on
stderr says when that is not the configured listeners). ``broker stop`` stops it, ``broker
status`` tells whether it runs (exit 0) or not (exit 3) and where it really listens (its own
registration, never whatever answers on the configured port). Output: ``Broker N is running at LISTENERS (pid P, log dir
D, log L, metrics URL)`` (no metrics part when ``metrics.port`` is -1), ``Broker N is not
running``, ``Stopped the embedded broker (pid P)``.

``brokers list`` prints every registered broker with its log dir, rack, whether its agent
is live and which one is the controller (``--output json`` for machines). None starts Spark.
"""

from __future__ import annotations

import argparse
import signal
from typing import TYPE_CHECKING, Any, TypeVar

from sparklog.cli.options import UsageError, add_command, cluster_config, connect
from sparklog.cli.output import (
    add_output_option,
    print_stderr,
    report_status,
    table_lines,
    write_json,
    write_lines,
)

if TYPE_CHECKING:
    from sparklog.broker.embedded_broker import EmbeddedBrokerStatus
    from sparklog.config import ClusterConfig

__all__ = ["register", "status_line"]

_LIST_HEADER = ["ID", "HOST", "RACK", "LOG-DIR", "STATE", "CONTROLLER"]
# The foreground agent's own options: None in the parser (defaults applied in _start) so that
# --embedded, which takes its settings from the config, can refuse them.
_AGENT_OPTIONS = (
    "broker_id",
    "log_dir",
    "rack",
    "replica_lag_time_max_ms",
    "auto_leader_rebalance_enable",
    "leader_imbalance_check_interval_seconds",
    "probe_interval_ms",
)
T = TypeVar("T")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    broker = subparsers.add_parser(
        "broker", help="run a broker agent, or the embedded one of --home (broker start|stop|status)"
    )
    actions = broker.add_subparsers(dest="action", metavar="ACTION", required=True)
    run = add_command(actions, "start", _start, "run the agent of one broker until SIGTERM", description=__doc__)
    run.add_argument(
        "--id", type=int, dest="broker_id", help="the broker id (an integer >= 0); required without --embedded"
    )
    run.add_argument("--log-dir", help="the broker's storage root (path or URI); required without --embedded")
    run.add_argument("--rack", help="rack (or availability zone) for rack-aware replica placement")
    run.add_argument(
        "--embedded",
        action="store_true",
        help="start the embedded broker of --home in the background (id, log dir, listeners from the config) "
        "unless it runs already",
    )
    run.add_argument(
        "--timeout-s", type=float, default=60.0, help="--embedded: how long to wait for it to be live (default 60)"
    )
    run.add_argument("--replica-lag-time-max-ms", type=int, help="ISR: max follower lag (default 10000)")
    run.add_argument("--auto-leader-rebalance-enable", choices=("true", "false"), help="default true")
    run.add_argument("--leader-imbalance-check-interval-seconds", type=float, help="default 300")
    run.add_argument("--probe-interval-ms", type=int, help="storage probe period (default 1000)")
    run.add_argument(
        "--listeners", help="Kafka-protocol listeners, NAME://host:port,... (default: the config's listeners)"
    )
    run.add_argument("--advertised-listeners", help="what clients are told to connect to (default: --listeners)")
    add_output_option(run)
    stop = add_command(actions, "stop", _stop, "stop the embedded broker of --home", description=__doc__)
    add_output_option(stop)
    status = add_command(
        actions, "status", _status, "tell whether the embedded broker of --home runs (exit 0) or not (exit 3)"
    )
    add_output_option(status)
    listing = subparsers.add_parser("brokers", help="list brokers (brokers list)")
    list_actions = listing.add_subparsers(dest="action", metavar="ACTION", required=True)
    add_output_option(add_command(list_actions, "list", _list, "registered brokers, live or not", description=__doc__))


def _with_listeners(args: argparse.Namespace, config: ClusterConfig) -> ClusterConfig:
    from dataclasses import replace

    from sparklog.config import parse_listeners

    if args.listeners is not None:
        listeners = parse_listeners("--listeners", args.listeners)
        given = config.given_keys | {"listeners"}
        config = replace(config, listeners=listeners, advertised_listeners=listeners, given_keys=given)
    if args.advertised_listeners is not None:
        config = replace(
            config,
            advertised_listeners=parse_listeners("--advertised-listeners", args.advertised_listeners),
            given_keys=config.given_keys | {"advertised.listeners"},
        )
    return config


def status_line(status: EmbeddedBrokerStatus) -> str:
    if not status.running:
        return f"Broker {status.broker_id} is not running"
    metrics = f", metrics {status.metrics_url}" if status.metrics_url else ""
    return (
        f"Broker {status.broker_id} is running at {','.join(status.listeners)} "
        f"(pid {status.pid}, log dir {status.log_dir}, log {status.log_file}{metrics})"
    )


def _start(args: argparse.Namespace) -> int:
    if args.embedded:
        return _start_embedded(args)
    from dataclasses import replace

    from sparklog.broker.agent import BrokerAgent, BrokerSettings, ControllerSettings
    from sparklog.errors import ConfigError

    if args.broker_id is None or args.log_dir is None:
        raise UsageError("--id and --log-dir are required (or --embedded: the home's broker in the background)")
    if args.broker_id < 0:
        raise ConfigError(f"--id must be >= 0, got {args.broker_id}")
    config = cluster_config(args)
    flagged = {"broker.id", "log.dirs"} | ({"broker.rack"} if args.rack else set())  # set as in a properties file
    config = replace(
        config,
        broker_id=args.broker_id,
        log_dir=args.log_dir,
        broker_rack=args.rack or None,
        given_keys=config.given_keys | flagged,
    )
    config = _with_listeners(args, config)
    settings = BrokerSettings(
        probe_interval_ms=_option(args.probe_interval_ms, 1_000),
        controller=ControllerSettings(
            replica_lag_time_max_ms=_option(args.replica_lag_time_max_ms, 10_000),
            auto_leader_rebalance_enable=_option(args.auto_leader_rebalance_enable, "true") == "true",
            leader_imbalance_check_interval_s=_option(args.leader_imbalance_check_interval_seconds, 300.0),
        ),
    )
    _log_warnings()
    agent = BrokerAgent(config, settings)
    # A signal during start() only asks for the stop: stopping a half-started agent from the
    # handler (which runs on this thread, inside start) would find its threads not started
    # yet, fail, and leave the broker registered until its ZooKeeper session expires.
    starting, stop_asked = [True], [False]

    def on_signal(_signum: int, _frame: Any) -> None:
        if starting[0]:
            stop_asked[0] = True
        else:
            agent.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    agent.start()
    starting[0] = False
    if stop_asked[0]:
        agent.stop()
        return 0
    metrics = f", metrics at {agent.metrics_url}" if agent.metrics_url else ""
    print_stderr(f"broker {config.broker_id} started (log dir {config.log_dir}{metrics}); SIGTERM or Ctrl-C stops it")
    agent.wait()
    return 0


def _option(value: T | None, default: T) -> T:
    return default if value is None else value


def _log_warnings() -> None:
    """Warnings and errors with a time and their logger, unless logging is configured already."""
    import logging

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def _start_embedded(args: argparse.Namespace) -> int:
    from sparklog.broker import embedded_broker

    given = [name for name in _AGENT_OPTIONS if getattr(args, name) is not None]
    if given:
        flags = " ".join("--id" if name == "broker_id" else "--" + name.replace("_", "-") for name in given)
        raise UsageError(
            f"--embedded takes the broker's settings from the config (broker.id, log.dirs, broker.rack): drop {flags}"
        )
    config = _with_listeners(args, cluster_config(args))
    # Without --listeners a running broker is reused whatever it listens on (the configured
    # port may be another program's); with them it must listen there.
    chosen = args.listeners is not None or args.advertised_listeners is not None
    status = embedded_broker.ensure_started(config, timeout_s=args.timeout_s, any_listeners=not chosen)
    configured = tuple(map(str, config.listeners))
    if status.listeners != configured:
        print_stderr(
            f"Note: the embedded broker runs with listeners {','.join(status.listeners)}, not the configured "
            f"{','.join(configured)}; `sparklog broker stop` and start it again to use the configuration"
        )
    return report_status(args, status, status_line(status))


def _status(args: argparse.Namespace) -> int:
    from sparklog.broker import embedded_broker

    status = embedded_broker.status(cluster_config(args))  # the running agent's own listeners
    return report_status(args, status, status_line(status))


def _stop(args: argparse.Namespace) -> int:
    from sparklog.broker import embedded_broker
    from sparklog.cli.zookeeper import stopped_line

    home = cluster_config(args).home
    pid = embedded_broker.recorded_pid(home)
    stopped = embedded_broker.stop(home)
    if args.output == "json":
        write_json({"stopped": stopped, "pid": pid if stopped else None})
    else:
        write_lines([stopped_line("the embedded broker", pid) if stopped else "The embedded broker is not running"])
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
