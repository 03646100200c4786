"""``sparklog groups``: list, describe, reset offsets of, and delete consumer groups
(``kafka-consumer-groups``).

Output mirrors ``kafka-consumer-groups`` column for column, with its widths: ``describe``
prints a blank line, then ``GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG
CONSUMER-ID HOST CLIENT-ID`` (``-`` where a value is missing), ``--members`` one row per
member (``--verbose`` adds ASSIGNMENT), ``--state`` the coordinator, assignment strategy,
state and member count. Notes such as "Consumer group 'g' has no active members." go to
stderr. ``reset-offsets`` is a dry run unless ``--execute``; it prints ``GROUP TOPIC
PARTITION NEW-OFFSET`` (or ``topic,partition,offset`` CSV with ``--export``, the input of
``--from-file``); an offset clamped into the log is reported on stderr in Kafka's words
(``WARN New offset (N) is higher than latest offset for topic partition t-p. Value will be
set to M``). ``--topic a,b`` names several topics, ``--topic t:0,1`` partitions of one.
Trailing blanks of Kafka's padded last columns are dropped. Metadata and Delta snapshots
only: no Spark.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from sparklog.cli.offsets import parse_partitions
from sparklog.cli.options import UsageError, add_command, connect, topic_names
from sparklog.cli.output import add_output_option, print_stderr, table_lines, write_json, write_lines
from sparklog.model.topic import partitions_by_topic

if TYPE_CHECKING:
    from sparklog.admin.groups import GroupDescription
    from sparklog.cluster import Cluster

__all__ = ["members_lines", "offsets_lines", "parse_group_states", "register", "reset_lines", "state_lines"]

MISSING = "-"
TopicArg = tuple[str, frozenset[int] | None]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    groups = subparsers.add_parser(
        "groups",
        help="list, describe, reset offsets of and delete consumer groups",
        description="Consumer group administration (kafka-consumer-groups).",
    )
    actions = groups.add_subparsers(dest="action", metavar="ACTION", required=True)

    listing = add_command(actions, "list", _list, "list consumer groups, one per line")
    listing.add_argument(
        "--state",
        nargs="?",
        const=frozenset(),
        type=parse_group_states,
        metavar="STATES",
        help="show each group's state; with a value (e.g. Stable,Empty) only groups in those states",
    )
    add_output_option(listing)

    describe = add_command(actions, "describe", _describe, "describe groups: offsets and lag, members or state")
    _add_group_selection(describe)
    views = describe.add_mutually_exclusive_group()
    views.add_argument("--offsets", action="store_true", help="per-partition offsets and lag (the default)")
    views.add_argument("--members", action="store_true", help="one row per member")
    views.add_argument("--state", action="store_true", help="coordinator, assignment strategy, state, #members")
    describe.add_argument("--verbose", action="store_true", help="with --members: add each member's assignment")
    add_output_option(describe)

    reset = add_command(actions, "reset-offsets", _reset, "reset the committed offsets of inactive groups")
    _add_group_selection(reset)
    scope = reset.add_mutually_exclusive_group()
    scope.add_argument("--topic", **_TOPIC_OPTION)
    scope.add_argument("--all-topics", action="store_true", help="every partition the group has an offset for")
    scenario = reset.add_mutually_exclusive_group(required=True)
    for flag, meta, kind, text in (
        ("--to-earliest", None, None, "the log start"),
        ("--to-latest", None, None, "the log end"),
        ("--to-current", None, None, "the committed offset (log end where none)"),
        ("--to-offset", "N", int, "offset N (clamped into the log)"),
        ("--shift-by", "N", int, "the committed offset plus N (may be negative; clamped)"),
        (
            "--to-datetime",
            "DATETIME",
            str,
            "the first offset at or after YYYY-MM-DDTHH:mm:SS.sss[zone] (UTC by default)",
        ),
        ("--by-duration", "DURATION", str, "the first offset at or after now minus an ISO-8601 duration, e.g. PT30M"),
        ("--from-file", "CSV", str, "offsets of a topic,partition,offset file (as --export writes)"),
    ):
        if kind is None:
            scenario.add_argument(flag, action=_Scenario, nargs=0, help=text)
        else:
            scenario.add_argument(flag, action=_Scenario, type=kind, metavar=meta, help=text)
    mode = reset.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="only show the new offsets (the default)")
    mode.add_argument("--execute", action="store_true", help="commit the new offsets")
    reset.add_argument("--export", action="store_true", help="print the plan as CSV for --from-file")
    add_output_option(reset)

    delete = add_command(actions, "delete", _delete, "delete inactive groups and their offsets")
    _add_group_selection(delete)

    delete_offsets = add_command(actions, "delete-offsets", _delete_offsets, "delete a group's offsets of topics")
    delete_offsets.add_argument("--group", required=True, help="the consumer group")
    delete_offsets.add_argument("--topic", required=True, **_TOPIC_OPTION)
    add_output_option(delete_offsets)


class _Scenario(argparse.Action):
    """Records which reset scenario was chosen, and its value, as ``args.scenario``."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        namespace.scenario = (self.dest.replace("_", "-"), None if values == [] else values)


def _add_group_selection(parser: argparse.ArgumentParser) -> None:
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--group", action="append", help="a consumer group (repeatable)")
    which.add_argument("--all-groups", action="store_true", help="every consumer group")


def parse_group_states(text: str) -> frozenset[str]:
    """argparse type of ``list --state Stable,Empty`` (case-insensitive, as Kafka's)."""
    from sparklog.admin.groups import GROUP_STATES

    by_name = {state.lower(): state for state in GROUP_STATES}
    states = [by_name.get(part.strip().lower()) for part in text.split(",")]
    if None in states:
        raise argparse.ArgumentTypeError(f"Invalid state list '{text}'. Valid states are: {', '.join(GROUP_STATES)}")
    return frozenset(s for s in states if s is not None)


def _topic_args(text: str) -> list[TopicArg]:
    """``t`` (all partitions), ``t:0,1,4-6`` (Kafka's ``--topic`` of reset/delete-offsets) or
    a list of whole topics ``a,b``."""
    topic, colon, partitions = text.partition(":")
    if colon:
        if not topic or "," in topic:
            raise argparse.ArgumentTypeError(f"expected TOPIC:PARTITIONS with one topic, got {text!r}")
        return [(topic, parse_partitions(partitions))]
    return [(name, None) for name in topic_names(text)]


_TOPIC_OPTION: dict[str, Any] = {
    "action": "extend",
    "type": _topic_args,
    "metavar": "TOPIC[:P,P]",
    "help": "a topic, some of its partitions (t:0,1) or several topics (a,b); repeatable",
}


def _selected_groups(cluster: Cluster, args: argparse.Namespace) -> list[str]:
    from sparklog.admin.groups import list_groups

    if args.all_groups:
        return [listing.group_id for listing in list_groups(cluster.groups)]
    return list(dict.fromkeys(args.group))


def _text(value: object) -> str:
    return MISSING if value is None else str(value)


def _width(values: Sequence[str], minimum: int = 15) -> int:
    return max([minimum, *map(len, values)])


def offsets_lines(d: GroupDescription) -> list[str]:
    rows = [
        [
            d.group_id,
            r.topic,
            str(r.partition),
            _text(r.current_offset),
            _text(r.log_end_offset),
            _text(r.lag),
            _text(r.consumer_id),
            _text(r.host),
            _text(r.client_id),
        ]
        for r in d.partitions
    ]
    if not rows:
        return []
    header = [
        "GROUP",
        "TOPIC",
        "PARTITION",
        "CURRENT-OFFSET",
        "LOG-END-OFFSET",
        "LAG",
        "CONSUMER-ID",
        "HOST",
        "CLIENT-ID",
    ]
    widths = [
        _width([r[0] for r in rows]),
        _width([r[1] for r in rows]),
        10,
        15,
        15,
        15,
        _width([r[6] for r in rows]),
        _width([r[7] for r in rows]),
    ]
    return ["", *table_lines(header, rows, widths)]


def _assignment(partitions: Sequence[tuple[str, int]]) -> str:
    grouped = partitions_by_topic(partitions)
    text = ", ".join(f"{t}({','.join(map(str, sorted(ps)))})" for t, ps in sorted(grouped.items()))
    return text or MISSING


def members_lines(d: GroupDescription, verbose: bool = False) -> list[str]:
    if not d.members:
        return []
    static = any(m.instance_id for m in d.members)
    header = ["GROUP", "CONSUMER-ID", *(["GROUP-INSTANCE-ID"] if static else []), "HOST", "CLIENT-ID", "#PARTITIONS"]
    rows = [
        [
            d.group_id,
            m.member_id,
            *([m.instance_id or ""] if static else []),
            m.host,
            m.client_id,
            str(len(m.partitions)),
            *([_assignment(m.partitions)] if verbose else []),
        ]
        for m in d.members
    ]
    widths = [_width([r[i] for r in rows], 17 if static and i == 2 else 15) for i in range(len(header) - 1)]
    if verbose:
        header.append("ASSIGNMENT")
        widths.append(15)
    return ["", *table_lines(header, rows, widths)]


def state_lines(d: GroupDescription) -> list[str]:
    coordinator = f"{d.coordinator_host}  ({d.coordinator})"
    row = [d.group_id, coordinator, d.protocol or MISSING, d.state, str(len(d.members))]
    header = ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"]
    return ["", *table_lines(header, [row], [_width([d.group_id]), _width([coordinator], 25), 20, 20])]


def reset_lines(plans: dict[str, list[tuple[str, int, int]]]) -> list[str]:
    rows = [[g, t, str(p), str(o)] for g, plan in plans.items() for t, p, o in plan]
    if not plans:
        return [""]
    widths = [_width(list(plans)), _width([r[1] for r in rows]), 10]
    return ["", *table_lines(["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], rows, widths)]


def _state_note(d: GroupDescription) -> str | None:
    from sparklog.admin.groups import COMPLETING, EMPTY, PREPARING

    if d.state == EMPTY:
        return f"\nConsumer group '{d.group_id}' has no active members."
    if d.state in (PREPARING, COMPLETING):
        return f"\nWarning: Consumer group '{d.group_id}' is rebalancing."
    return None


# -- handlers --------------------------------------------------------------------------------
def _list(args: argparse.Namespace) -> int:
    from sparklog.admin.groups import list_groups

    with connect(args) as cluster:
        listings = list_groups(cluster.groups, args.state or None)  # --state alone: every state
    if args.output == "json":
        write_json([{"group": g.group_id, "state": g.state} for g in listings])
    elif args.state is None:
        write_lines(g.group_id for g in listings)
    else:
        rows = [[g.group_id, g.state] for g in listings]
        write_lines(table_lines(["GROUP", "STATE"], rows, [_width([r[0] for r in rows]) + 10]))
    return 0


def _describe(args: argparse.Namespace) -> int:
    from sparklog.admin.groups import describe_group

    with connect(args) as cluster:
        descriptions = [describe_group(cluster.groups, g) for g in sorted(_selected_groups(cluster, args))]
    if args.output == "json":
        write_json([asdict(d) for d in descriptions])
        return 0
    for d in descriptions:
        note = _state_note(d)
        if note:
            print_stderr(note)
        if args.members:
            write_lines(members_lines(d, args.verbose))
        elif args.state:
            write_lines(state_lines(d))
        else:
            write_lines(offsets_lines(d))
    return 0


def _reset(args: argparse.Namespace) -> int:
    from sparklog.admin import groups as admin

    if args.export and args.output == "json":
        raise UsageError("--export prints CSV; it cannot be combined with --output json")
    kind, value = args.scenario
    if kind != "from-file" and not (args.topic or args.all_topics):
        raise UsageError("One of the reset scopes should be defined: --all-topics, --topic.")
    if kind == "from-file" and (args.topic or args.all_topics):
        raise UsageError("--from-file takes its partitions from the file; leave out --topic and --all-topics")
    topics = [t for t, ps in args.topic or () if ps is None]
    partitions = [(t, p) for t, ps in args.topic or () if ps is not None for p in sorted(ps)]
    with connect(args) as cluster:
        groups = _selected_groups(cluster, args)
        scenario = admin.reset_scenario(kind, value, group_ids=groups)
        plans = {
            g: admin.plan_group_reset(
                cluster.groups,
                g,
                scenario,
                topics=topics,
                partitions=partitions,
                all_topics=args.all_topics,
                warn=lambda warning: print_stderr(f"WARN {warning}"),  # Kafka logs these at WARN
            )
            for g in groups
        }  # every group is checked and planned before the first write
        if args.execute:
            for group_id, plan in plans.items():
                admin.apply_reset(cluster.groups, group_id, plan)
    if not (args.execute or args.dry_run):
        print_stderr(
            "WARN: No action will be performed as the --execute option is missing. "
            "Add --dry-run to say so explicitly, or --execute to commit the new offsets."
        )
    rows = {g: [(t, p, o) for (t, p), o in sorted(plan.items())] for g, plan in plans.items()}
    if args.output == "json":
        write_json(
            [{"group": g, "topic": t, "partition": p, "offset": o} for g, plan in rows.items() for t, p, o in plan]
        )
    elif args.export:
        with_group = bool(args.all_groups) or len(groups) != 1
        write_lines(
            [
                *(
                    ",".join(map(str, (g, t, p, o) if with_group else (t, p, o)))
                    for g, plan in rows.items()
                    for t, p, o in plan
                ),
                "",
            ]
        )
    else:
        write_lines(reset_lines(rows))
    return 0


def _delete(args: argparse.Namespace) -> int:
    from sparklog.admin.groups import delete_groups

    with connect(args) as cluster:
        deleted = delete_groups(cluster.groups, _selected_groups(cluster, args))
    names = ", ".join(f"'{g}'" for g in deleted)
    write_lines([f"Deletion of requested consumer groups ({names}) was successful."])
    return 0


def _delete_offsets(args: argparse.Namespace) -> int:
    from sparklog.admin.groups import delete_group_offsets

    selection: dict[str, set[int] | None] = {}
    for topic, partitions in args.topic:
        known = selection.get(topic, set())
        selection[topic] = None if partitions is None or known is None else known | partitions
    with connect(args) as cluster:
        done = delete_group_offsets(cluster.groups, args.group, selection)
    if args.output == "json":
        write_json([{"topic": t, "partition": p, "status": "Successful"} for t, p in done])
        return 0
    rows = [[t, str(p), "Successful"] for t, p in done]
    table = table_lines(["TOPIC", "PARTITION", "STATUS"], rows, [_width([r[0] for r in rows]), 10])
    write_lines([f"Request succeeded for deleting offsets from group {args.group}.", "", *table])
    return 0
