"""``sparklog topics``: create, list, describe, alter and delete topics (``kafka-topics``).

Output mirrors ``kafka-topics`` column for column: ``Created topic t.``, one name per
line for ``list``, and for ``describe`` a topic line
``Topic: t<TAB>TopicId: ..<TAB>PartitionCount: N<TAB>ReplicationFactor: N<TAB>Configs: k=v,..``
(overrides only, sorted) followed by one ``<TAB>Topic: t<TAB>Partition: p<TAB>Leader: l
<TAB>Replicas: a,b<TAB>Isr: a,b`` line per partition (a leaderless partition shows
``Leader: none``). ``alter`` and ``delete`` print nothing on success, as Kafka 3's tool does.
Metadata only: no Spark, no Delta reads.

``--topic`` of ``list``, ``describe``, ``alter`` and ``delete`` is Kafka's include list: topic
names and regular expressions separated by commas.

``create --replica-assignment 0:1:2,1:2:0`` places replicas explicitly (first = preferred
leader); as in ``kafka-topics`` it excludes ``--partitions`` and ``--replication-factor``.
``describe --under-replicated-partitions`` (ISR smaller than the replica list) and
``--unavailable-partitions`` (no leader, or a leader whose broker is not live) print only
the matching partition lines, without topic lines, as ``kafka-topics`` does. With no broker
agent live at all (the embedded one-broker mode, where clients write leaders' tables
directly) only a leader of -1 counts as unavailable.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sparklog.cli.options import UsageError, add_command, connect, key_value, select_topics
from sparklog.cli.output import add_output_option, comma_list, write_json, write_lines
from sparklog.model.topic import PartitionDescription

if TYPE_CHECKING:
    from sparklog.cluster import Cluster
    from sparklog.model.topic import TopicDescription

__all__ = ["PartitionFilter", "describe_lines", "description_json", "register"]

PartitionFilter = Callable[[PartitionDescription], bool]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    topics = subparsers.add_parser(
        "topics",
        help="create, list, describe, alter and delete topics",
        description="Topic administration (kafka-topics).",
    )
    actions = topics.add_subparsers(dest="action", metavar="ACTION", required=True)

    create = add_command(actions, "create", _create, "create a topic", config_flag=False)
    create.add_argument("--topic", required=True, help="name of the new topic")
    create.add_argument("--partitions", type=int, help="number of partitions (default 1)")
    create.add_argument("--replication-factor", type=int, help="replicas per partition (default 1)")
    create.add_argument(
        "--replica-assignment",
        metavar="BROKERS",
        help="explicit placement, partitions separated by ',' and each partition's brokers by ':' "
        "(first = preferred leader), e.g. 0:1:2,1:2:0; excludes --partitions and --replication-factor",
    )
    create.add_argument(
        "--config",
        dest="topic_configs",
        type=key_value,
        action="append",
        metavar="KEY=VALUE",
        help="a topic config override, e.g. retention.ms=86400000 (repeatable)",
    )
    create.add_argument("--if-not-exists", action="store_true", help="do nothing if the topic exists already")

    listing = add_command(actions, "list", _list, "list topic names, one per line")
    _add_selection_options(listing)
    add_output_option(listing)

    describe = add_command(
        actions, "describe", _describe, "describe topics: id, partitions, leaders, replicas, ISR, configs"
    )
    _add_selection_options(describe)
    filters = describe.add_mutually_exclusive_group()
    filters.add_argument(
        "--under-replicated-partitions",
        action="store_true",
        help="only partitions whose ISR is smaller than their replica list",
    )
    filters.add_argument(
        "--unavailable-partitions",
        action="store_true",
        help="only partitions without a leader, or whose leader's broker is not live",
    )
    add_output_option(describe)

    alter = add_command(actions, "alter", _alter, "increase the number of partitions of topics")
    alter.add_argument("--topic", required=True, help="the topics to alter: " + _TOPIC_HELP)
    alter.add_argument("--partitions", type=int, required=True, help="the new (higher) partition count")
    alter.add_argument("--if-exists", action="store_true", help="do nothing for topics that do not exist")

    delete = add_command(actions, "delete", _delete, "delete topics and their data")
    delete.add_argument("--topic", required=True, help="the topics to delete: " + _TOPIC_HELP)
    delete.add_argument("--if-exists", action="store_true", help="do nothing for topics that do not exist")


_TOPIC_HELP = "a topic name or a regular expression over names; a,b lists several"


def _add_selection_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--topic", help=_TOPIC_HELP + " (default: all)")
    parser.add_argument(
        "--exclude-internal", action="store_true", help="leave out internal topics (__consumer_offsets)"
    )


def describe_lines(description: TopicDescription, partition_filter: PartitionFilter | None = None) -> list[str]:
    """``kafka-topics --describe`` lines of one topic; with ``partition_filter`` (one of the
    report options) only the partition lines it keeps, and no topic line."""
    d = description
    configs = ",".join(f"{key}={value}" for key, value in sorted(d.configs.items()))
    lines = []
    if partition_filter is None:
        lines.append(
            f"Topic: {d.name}\tTopicId: {d.topic_id}\tPartitionCount: {d.partition_count}\t"
            f"ReplicationFactor: {d.replication_factor}\tConfigs: {configs}"
        )
    for p in d.partitions:
        if partition_filter is not None and not partition_filter(p):
            continue
        leader = p.leader if p.leader >= 0 else "none"  # Kafka's word for a leaderless partition
        lines.append(
            f"\tTopic: {d.name}\tPartition: {p.partition}\tLeader: {leader}\t"
            f"Replicas: {comma_list(p.replicas)}\tIsr: {comma_list(p.isr)}"
        )
    return lines


def description_json(description: TopicDescription, partition_filter: PartitionFilter | None = None) -> dict[str, Any]:
    d = description
    return {
        "topic": d.name,
        "topic_id": d.topic_id,
        "partition_count": d.partition_count,
        "replication_factor": d.replication_factor,
        "configs": dict(sorted(d.configs.items())),
        "partitions": [
            {
                "partition": p.partition,
                "leader": p.leader,
                "leader_epoch": p.leader_epoch,
                "replicas": list(p.replicas),
                "isr": list(p.isr),
            }
            for p in d.partitions
            if partition_filter is None or partition_filter(p)
        ],
    }


def _create(args: argparse.Namespace) -> int:
    from sparklog.admin.topics import parse_replica_assignment
    from sparklog.errors import TopicExistsError

    assignment = None
    if args.replica_assignment is not None:
        for option, value in (("partitions", args.partitions), ("replication-factor", args.replication_factor)):
            if value is not None:  # kafka-topics' CommandLineUtils.checkInvalidArgs wording
                raise UsageError(f'Option "[replica-assignment]" can\'t be used with option "[{option}]"')
        assignment = parse_replica_assignment(args.replica_assignment)
    configs = dict(args.topic_configs or [])
    partitions = 1 if args.partitions is None else args.partitions
    replication_factor = 1 if args.replication_factor is None else args.replication_factor
    with connect(args) as cluster:
        try:
            cluster.create_topic(args.topic, partitions, replication_factor, configs, replica_assignment=assignment)
        except TopicExistsError:
            if args.if_not_exists:
                return 0
            raise
    write_lines([f"Created topic {args.topic}."])
    return 0


def _list(args: argparse.Namespace) -> int:
    with connect(args) as cluster:
        topics = select_topics(cluster, args.topic, exclude_internal=args.exclude_internal, must_exist=False)
    if args.output == "json":
        write_json(topics)
    else:
        write_lines(topics)
    return 0


def _describe(args: argparse.Namespace) -> int:
    with connect(args) as cluster:
        topics = select_topics(cluster, args.topic, exclude_internal=args.exclude_internal)
        descriptions = [cluster.describe_topic(topic) for topic in topics]
        partition_filter = _partition_filter(cluster, args)
    if args.output == "json":
        documents = [description_json(d, partition_filter) for d in descriptions]
        # A report option lists matching partitions only: leave out topics with none.
        write_json([doc for doc in documents if partition_filter is None or doc["partitions"]])
    else:
        write_lines(line for d in descriptions for line in describe_lines(d, partition_filter))
    return 0


def _partition_filter(cluster: Cluster, args: argparse.Namespace) -> PartitionFilter | None:
    """The report option's predicate (kafka-topics' ``DescribeOptions``), or None for all."""
    if args.under_replicated_partitions:
        return lambda p: len(p.isr) < len(p.replicas)
    if args.unavailable_partitions:
        from sparklog.admin.brokers import live_brokers

        live = live_brokers(cluster.replicas)
        # No agent live at all: the agentless mode, where a recorded leader is served by its
        # clients (see the module docstring); otherwise Kafka's rule.
        return lambda p: p.leader < 0 or (bool(live) and p.leader not in live)
    return None


def _alter(args: argparse.Namespace) -> int:
    _for_each_topic(args, lambda cluster, topic: cluster.create_partitions(topic, args.partitions))
    return 0


def _delete(args: argparse.Namespace) -> int:
    _for_each_topic(args, lambda cluster, topic: cluster.delete_topic(topic))
    return 0


def _for_each_topic(args: argparse.Namespace, change: Callable[[Cluster, str], object]) -> None:
    """Apply ``change`` to every topic ``--topic`` selects (internal topics only by name, as
    kafka-topics does); ``--if-exists`` skips those that do not exist (or vanish meanwhile)."""
    from sparklog.errors import TopicNotFoundError

    with connect(args) as cluster:
        for topic in select_topics(cluster, args.topic, exclude_internal=True, must_exist=not args.if_exists):
            try:
                change(cluster, topic)
            except TopicNotFoundError:
                if not args.if_exists:
                    raise
