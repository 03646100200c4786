"""``sparklog configs``: describe and alter topic config overrides (``kafka-configs``).

``describe`` prints Kafka's layout: ``Dynamic configs for topic t are:`` then one line
``  k=v sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:k=v}`` per override (``--all``:
``All configs for topic t are:`` and every effective config, defaults as
``DEFAULT_CONFIG``). ``alter`` takes Kafka's ``--add-config k=v,k2=[a,b]`` (brackets
protect commas inside a value) and ``--delete-config k,k2``, applies both in one
compare-and-set of the topic's config znode and prints
``Completed updating config for topic t.``. Only ``--entity-type topics`` exists;
``--topic t`` is a shorthand for ``--entity-type topics --entity-name t``.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sparklog.cli.options import UsageError, add_command, connect, select_topics
from sparklog.cli.output import add_output_option, write_json, write_lines

if TYPE_CHECKING:
    from sparklog.cluster import Cluster

__all__ = ["config_entries", "parse_add_config", "register"]

_DYNAMIC = "DYNAMIC_TOPIC_CONFIG"
_DEFAULT = "DEFAULT_CONFIG"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    configs = subparsers.add_parser(
        "configs", help="describe and alter topic configs", description="Topic config administration (kafka-configs)."
    )
    actions = configs.add_subparsers(dest="action", metavar="ACTION", required=True)

    describe = add_command(actions, "describe", _describe, "show a topic's config overrides (or all configs)")
    _add_entity_options(describe)
    describe.add_argument("--all", action="store_true", help="every effective config, defaults included")
    add_output_option(describe)

    alter = add_command(actions, "alter", _alter, "set and/or remove config overrides of a topic")
    _add_entity_options(alter)
    alter.add_argument(
        "--add-config",
        action="append",
        metavar="K=V[,K2=V2]",
        help="overrides to set; put a value containing commas in brackets: cleanup.policy=[compact,delete]",
    )
    alter.add_argument("--delete-config", action="append", metavar="K[,K2]", help="overrides to remove")


def _add_entity_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--entity-type", choices=["topics"], help="the kind of entity (only topics)")
    parser.add_argument("--entity-name", help="the topic name")
    parser.add_argument("--topic", help="shorthand for --entity-type topics --entity-name TOPIC")


def _entity_name(args: argparse.Namespace) -> str | None:
    if args.topic is not None and args.entity_name is not None and args.topic != args.entity_name:
        raise UsageError("--topic and --entity-name name different topics")
    name = args.topic if args.topic is not None else args.entity_name
    if name is not None and args.topic is None and args.entity_type is None:
        raise UsageError("--entity-name needs --entity-type topics")
    return name


def _split_top_level(text: str) -> list[str]:
    """Split on commas outside ``[...]``, as kafka-configs does."""
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text:
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
            continue
        depth += {"[": 1, "]": -1}.get(char, 0)
        current.append(char)
    parts.append("".join(current))
    return parts


def parse_add_config(text: str) -> dict[str, str]:
    """``a=1,b=[x,y]`` -> ``{"a": "1", "b": "x,y"}``."""
    result = {}
    for pair in _split_top_level(text):
        key, sep, value = pair.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            raise UsageError(f'Invalid entity config {pair!r}: all configs to be added must be in the format "key=val"')
        if value.startswith("[") and value.endswith("]"):
            value = value[1:-1]
        result[key] = value
    return result


def _text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def config_entries(
    overrides: Mapping[str, str], effective: Mapping[str, Any] | None
) -> list[tuple[str, str, list[tuple[str, str]]]]:
    """``(key, value, synonyms)`` rows; ``effective`` given means ``--all``.

    Synonyms are ``(source, value)`` pairs, most specific first, as Kafka lists them.
    """
    from sparklog.config import TOPIC_CONFIGS

    rows = []
    for key in sorted(effective if effective is not None else overrides):
        synonyms = []
        if key in overrides:
            synonyms.append((_DYNAMIC, overrides[key]))
        if effective is not None:
            synonyms.append((_DEFAULT, _text(TOPIC_CONFIGS[key].default)))
        rows.append((key, synonyms[0][1], synonyms))
    return rows


def _entries_of(cluster: Cluster, topic: str, all_configs: bool) -> list[tuple[str, str, list[tuple[str, str]]]]:
    overrides = cluster.describe_topic(topic).configs
    return config_entries(overrides, cluster.topic_config(topic) if all_configs else None)


def _describe(args: argparse.Namespace) -> int:
    name = _entity_name(args)
    with connect(args) as cluster:
        topics = [name] if name is not None else select_topics(cluster, None)
        described = [(topic, _entries_of(cluster, topic, args.all)) for topic in topics]
    if args.output == "json":
        write_json(
            [
                {
                    "topic": topic,
                    "configs": [
                        {
                            "name": key,
                            "value": value,
                            "source": synonyms[0][0],
                            "sensitive": False,
                            "synonyms": [{"source": s, "value": v} for s, v in synonyms],
                        }
                        for key, value, synonyms in rows
                    ],
                }
                for topic, rows in described
            ]
        )
        return 0
    lines = []
    for topic, rows in described:
        lines.append(f"{'All' if args.all else 'Dynamic'} configs for topic {topic} are:")
        for key, value, synonyms in rows:
            listed = ", ".join(f"{source}:{key}={v}" for source, v in synonyms)
            lines.append(f"  {key}={value} sensitive=false synonyms={{{listed}}}")
    write_lines(lines)
    return 0


def _alter(args: argparse.Namespace) -> int:
    name = _entity_name(args)
    if name is None:
        raise UsageError("an entity name must be given: --entity-type topics --entity-name TOPIC, or --topic TOPIC")
    if not args.add_config and not args.delete_config:
        raise UsageError("At least one of --add-config or --delete-config must be specified")
    updates: dict[str, str] = {}
    for text in args.add_config or ():
        updates.update(parse_add_config(text))
    removals = [key.strip() for text in args.delete_config or () for key in text.split(",") if key.strip()]
    with connect(args) as cluster:
        cluster.alter_topic_config(name, set=updates, delete=removals)
    write_lines([f"Completed updating config for topic {name}."])
    return 0
