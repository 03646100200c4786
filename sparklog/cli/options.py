"""What every command shares: global options, the cluster connection, ``k=v`` parsing.

Cluster settings resolve in :func:`sparklog.config.resolve_cluster_config`'s order, with
the command line on top::

    --zookeeper / --home  >  SPARKLOG_HOME / SPARKLOG_ZOOKEEPER  >  --config FILE
    (else SPARKLOG_CONF, else conf/sparklog.properties)  >  defaults

Global options are accepted before the command (``sparklog --zookeeper h:2181 topics
list``) and after it (``sparklog topics list --zookeeper h:2181``); the later one wins.
``topics create --config k=v`` is a topic config as in ``kafka-topics``, so there the
properties file is given with ``--command-config FILE`` (accepted everywhere).

Command-line mistakes that need no cluster to detect raise :class:`UsageError` (exit 2,
like argparse); everything found by talking to the cluster is a ``SparklogError`` (exit 1).
Importing this module is cheap: it never imports pyspark, kazoo or deltalake itself.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from sparklog.errors import ConfigError, TopicNotFoundError
from sparklog.model.topic import validate_topic_name

if TYPE_CHECKING:
    from sparklog.cluster import Cluster
    from sparklog.config import ClusterConfig

__all__ = [
    "Handler",
    "UsageError",
    "add_command",
    "add_global_options",
    "bool_property",
    "cluster_config",
    "connect",
    "key_value",
    "parse_properties",
    "select_topics",
    "text_property",
    "topic_names",
]

Handler = Callable[[argparse.Namespace], int]


class UsageError(Exception):
    """A command-line mistake found after parsing (e.g. options that exclude each other)."""


def add_global_options(parser: argparse.ArgumentParser, *, top_level: bool, config_flag: bool = True) -> None:
    """Add the cluster options. Below the top level their default is SUPPRESS, so a value
    given before the command is not reset by the command's parser."""
    default = None if top_level else argparse.SUPPRESS
    group = parser.add_argument_group("cluster options")
    group.add_argument(
        "--zookeeper",
        "--bootstrap-server",
        dest="zookeeper",
        metavar="HOST:PORT[/CHROOT]",
        default=default,
        help="ZooKeeper connect string of the cluster (--bootstrap-server is an alias: "
        "sparklog clients find the cluster through ZooKeeper); default: the embedded server of --home",
    )
    group.add_argument("--home", metavar="DIR", default=default, help="sparklog.home (local state, default .sparklog)")
    config_names = ["--config", "--command-config"] if config_flag else ["--command-config"]
    group.add_argument(
        *config_names,
        dest="config_file",
        metavar="FILE",
        default=default,
        help="sparklog properties file (in place of SPARKLOG_CONF / conf/sparklog.properties)",
    )


def add_command(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    handler: Handler,
    help: str,
    *,
    description: str | None = None,
    config_flag: bool = True,
) -> argparse.ArgumentParser:
    """A command's parser carrying the global options and its handler."""
    parser = subparsers.add_parser(
        name,
        help=help,
        description=(description or help).replace("``", ""),  # module docstrings double as help
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_global_options(parser, top_level=False, config_flag=config_flag)
    parser.set_defaults(handler=handler, command_parser=parser)
    return parser


def cluster_config(args: argparse.Namespace) -> ClusterConfig:
    from sparklog.config import resolve_cluster_config

    environ: Mapping[str, str] = os.environ
    if getattr(args, "config_file", None):
        environ = {**os.environ, "SPARKLOG_CONF": args.config_file}
    settings = {"zookeeper.connect": getattr(args, "zookeeper", None), "sparklog.home": getattr(args, "home", None)}
    return resolve_cluster_config(settings, environ=environ)


def connect(args: argparse.Namespace) -> Cluster:
    """A cluster handle for the command's options; use it as a context manager."""
    from sparklog.cluster import Cluster

    return Cluster(cluster_config(args))


def key_value(text: str) -> tuple[str, str]:
    """argparse type of ``k=v`` options; the value may itself contain ``=``."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    return key.strip(), value


def parse_properties(
    pairs: Sequence[tuple[str, str]] | None, allowed: Mapping[str, str | None], what: str
) -> dict[str, str | None]:
    """``--property`` values over their defaults (None: unset); an unknown key is an error
    (a typo would otherwise be ignored silently)."""
    result = dict(allowed)
    for key, value in pairs or ():
        if key not in allowed:
            raise ConfigError(f"Unknown {what} property {key!r}. Allowed: {', '.join(sorted(allowed))}")
        result[key] = value
    return result


def bool_property(props: Mapping[str, str | None], key: str) -> bool:
    value = (props[key] or "").strip().lower()
    if value not in ("true", "false"):
        raise ConfigError(f"Invalid value {props[key]!r} for property {key}: allowed true or false")
    return value == "true"


def text_property(props: Mapping[str, str | None], key: str) -> str:
    """A separator-like property: must be set and non-empty (an empty separator splits nothing)."""
    value = props[key]
    if not value:
        raise ConfigError(f"Property {key} must not be empty")
    return value


def _is_topic_name(text: str) -> bool:
    try:
        validate_topic_name(text)
    except ValueError:
        return False
    return True


def topic_names(text: str) -> list[str]:
    """argparse type of a ``--topic`` naming topics: ``a`` or Kafka's list ``a,b``."""
    names = [part.strip() for part in text.split(",")]
    if not all(names):
        raise argparse.ArgumentTypeError(f"expected TOPIC or a list TOPIC,TOPIC..., got {text!r}")
    return names


def select_topics(
    cluster: Cluster, pattern: str | None, *, exclude_internal: bool = False, must_exist: bool = True
) -> list[str]:
    """Topics named by ``--topic``, sorted: all topics, or Kafka's include list — names and
    regular expressions separated by commas (``a,b.*`` is ``a|b.*`` in Kafka's tools).

    Kafka treats each item as a regex; a legal topic name is taken literally here (so ``a.b``
    does not also select ``aXb``) and anything else as a regex matched in full. With
    ``must_exist`` an exact name is returned unchecked (the caller's API call then raises the
    standard ``TopicNotFoundError``) and a regex matching nothing is an error; without it,
    names and regexes select only topics that exist.
    """
    if pattern is None:
        return cluster.list_topics(include_internal=not exclude_internal)
    items = [item.strip() for item in pattern.split(",") if item.strip()]
    if not items:
        raise UsageError(f"--topic {pattern!r} names no topic")
    topics = cluster.list_topics(include_internal=not exclude_internal)
    selected: set[str] = set()
    for item in items:
        if _is_topic_name(item):
            if must_exist or item in topics:
                selected.add(item)
            continue
        try:
            regex = re.compile(item)
        except re.error as exc:
            raise UsageError(
                f"--topic {item!r} is neither a topic name nor a valid regular expression: {exc}"
            ) from None
        matched = [t for t in topics if regex.fullmatch(t)]
        if must_exist and not matched:
            raise TopicNotFoundError(f"No topic matches the regular expression '{item}'")
        selected.update(matched)
    return sorted(selected)
