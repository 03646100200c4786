"""``sparklog elect-leaders`` and ``sparklog reassign``: Kafka's ``kafka-leader-election`` and
``kafka-reassign-partitions``, as requests the controller executes (:mod:`sparklog.admin.partitions`).

What each command takes and prints is its help text (:data:`ELECT_DESCRIPTION`,
:data:`REASSIGN_DESCRIPTION`); the output mirrors Kafka's tools line for line, sorted by
topic and partition where Kafka's order is a hash set's.

Invariants: options, files and their JSON are checked before anything is written (bad JSON,
unknown topics, partitions or brokers: one ``Error:`` line, nothing changed; option
conflicts: a usage error, exit 2); Kafka's messages are kept where Kafka has one. No Spark.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sparklog.cli.options import UsageError, add_command, connect
from sparklog.cli.output import write_lines
from sparklog.errors import InvalidReplicaAssignmentError, SparklogError
from sparklog.model.topic import TopicPartition, validate_topic_name

__all__ = [
    "ELECT_DESCRIPTION",
    "REASSIGN_DESCRIPTION",
    "election_lines",
    "format_reassignment_json",
    "parse_election_json",
    "parse_reassignment_json",
    "parse_topics_to_move_json",
    "register",
]

ELECT_DESCRIPTION = """\
Elect preferred leaders (kafka-leader-election).

--election-type PREFERRED (or --preferred) with exactly one of --all-topic-partitions,
--topic T [--partition P] (every partition of T without --partition; Kafka requires it) or
--path-to-json-file F ({"partitions": [{"topic": "t", "partition": 0}, ...]}) prints:

    Successfully completed leader election (PREFERRED) for partitions t-0, t-1
    Valid replica already elected for partitions t-2
    Error completing leader election (PREFERRED) for partition: t-3: <reason>

and, if any partition failed, exits 1 with "Error: N replica(s) could not be elected".
With --all-topic-partitions, partitions already led by their preferred replica are left
out, as Kafka's controller does. UNCLEAN is refused: the controller has no request path
for it (it elects an out-of-sync replica only by itself, when no in-sync replica is live,
for topics with unclean.leader.election.enable=true). Needs a running controller
(sparklog broker start).
"""

REASSIGN_DESCRIPTION = """\
Move partition replicas between brokers (kafka-reassign-partitions); exactly one action:

--generate --topics-to-move-json-file F --broker-list 1,2,3
    F: {"topics": [{"topic": "t"}], "version": 1}. Prints "Current partition replica
    assignment" and "Proposed partition reassignment configuration", each followed by a
    reassignment JSON. Writes nothing.
--execute --reassignment-json-file F
    F: {"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [1, 2, 3]}]}
    ("log_dirs", if given, must be "any": a broker has one log dir). Prints the current
    assignment of those partitions (save it to roll back), hands the plan to the controller
    and prints "Successfully started partition reassignment(s) for t-0,...".
--verify --reassignment-json-file F
    Prints "Status of partition reassignment:" and per partition "Reassignment of partition
    t-0 is complete." or "... is still in progress." (no replication throttles exist, so
    Kafka's throttle-clearing lines never appear).
"""

ELECTION_TYPES = ("PREFERRED", "UNCLEAN")
_ANY_LOG_DIR = "any"
_ACTIONS = ("generate", "execute", "verify")
# Per action: the file options it requires, and the options it does not take.
_REQUIRED = {
    "generate": ("topics_to_move_json_file", "broker_list"),
    "execute": ("reassignment_json_file",),
    "verify": ("reassignment_json_file",),
}
_REASSIGN_OPTIONS = ("topics_to_move_json_file", "broker_list", "reassignment_json_file")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    elect = add_command(
        subparsers,
        "elect-leaders",
        _elect,
        "elect preferred leaders (kafka-leader-election)",
        description=ELECT_DESCRIPTION,
    )
    elect.add_argument(
        "--election-type", type=_election_type, metavar="TYPE", help="PREFERRED (UNCLEAN is not supported on request)"
    )
    elect.add_argument("--preferred", action="store_true", help="shorthand for --election-type PREFERRED")
    elect.add_argument("--all-topic-partitions", action="store_true", help="every partition of every topic")
    elect.add_argument("--topic", help="the topic whose partitions to elect for")
    elect.add_argument("--partition", type=int, help="one partition of --topic (default: all of them)")
    elect.add_argument(
        "--path-to-json-file", metavar="FILE", help='partitions as {"partitions": [{"topic": "t", "partition": 0}]}'
    )

    reassign = add_command(
        subparsers,
        "reassign",
        _reassign,
        "move partition replicas between brokers (kafka-reassign-partitions)",
        description=REASSIGN_DESCRIPTION,
    )
    actions = reassign.add_mutually_exclusive_group(required=True)
    actions.add_argument(
        "--generate", action="store_true", help="propose an assignment of some topics over some brokers"
    )
    actions.add_argument("--execute", action="store_true", help="start the reassignment of a plan")
    actions.add_argument("--verify", action="store_true", help="tell whether the reassignment of a plan is complete")
    reassign.add_argument(
        "--topics-to-move-json-file", metavar="FILE", help='with --generate: {"topics": [{"topic": "t"}], "version": 1}'
    )
    reassign.add_argument(
        "--broker-list", type=_broker_list, metavar="IDS", help="with --generate: the brokers to assign to, e.g. 1,2,3"
    )
    reassign.add_argument(
        "--reassignment-json-file",
        metavar="FILE",
        help='with --execute/--verify: {"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [1, 2]}]}',
    )


# -- option values -------------------------------------------------------------------------
def _election_type(text: str) -> str:
    value = text.strip().upper()
    if value not in ELECTION_TYPES:
        raise argparse.ArgumentTypeError(f"invalid election type {text!r}: choose {' or '.join(ELECTION_TYPES)}")
    return value


def _broker_list(text: str) -> list[int]:
    tokens = [token.strip() for token in text.split(",")]
    bad = [token for token in tokens if not (token.isascii() and token.isdigit())]
    if bad:
        raise argparse.ArgumentTypeError(f"expected broker ids separated by commas (e.g. 1,2,3), got {text!r}")
    ids = [int(token) for token in tokens]
    duplicates = sorted({b for b in ids if ids.count(b) > 1})
    if duplicates:
        raise argparse.ArgumentTypeError(f"Broker list contains duplicate entries: {','.join(map(str, duplicates))}")
    return ids


def _tp(tp: TopicPartition) -> str:
    return f"{tp[0]}-{tp[1]}"


# -- JSON files ----------------------------------------------------------------------------
def _read_file(path: str, option: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise SparklogError(f"Cannot read {option} {path}: {reason}") from None


def _json_object(text: str, source: str, error: type[SparklogError] = SparklogError) -> dict[str, Any]:
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(f"{source} is not valid JSON: {exc}") from None
    if not isinstance(document, dict):
        raise error(f"{source} must hold a JSON object, got {type(document).__name__}")
    return document


def _check_version(document: Mapping[str, Any], source: str, error: type[SparklogError]) -> None:
    version = document.get("version", 1)
    if version != 1 or isinstance(version, bool):
        raise error(f"Not supported version field value {version!r} in {source}: only version 1 exists")


def _entries(
    document: Mapping[str, Any], key: str, source: str, example: str, error: type[SparklogError]
) -> list[dict[str, Any]]:
    entries = document.get(key)
    if not isinstance(entries, list):
        missing = "is missing from" if key not in document else "is not a list in"
        raise error(f'The "{key}" field {missing} {source}; expected e.g. {example}')
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise error(f'{source}: entry {index} of "{key}" must be a JSON object, got {json.dumps(entry)}')
    return entries


def _topic_field(entry: Mapping[str, Any], where: str, error: type[SparklogError]) -> str:
    topic = entry.get("topic")
    if not isinstance(topic, str):
        raise error(f'{where}: "topic" must be a topic name (a string), got {json.dumps(topic)}')
    try:
        return validate_topic_name(topic)
    except ValueError as exc:
        raise error(f"{where}: {exc}") from None


def _id_field(value: Any, what: str, where: str, error: type[SparklogError]) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise error(f"{where}: {what} must be a non-negative integer, got {json.dumps(value)}")
    return value


def _duplicates(items: Sequence[Any]) -> list[Any]:
    seen: set[Any] = set()
    repeated: list[Any] = []
    for item in items:
        if item in seen and item not in repeated:
            repeated.append(item)
        seen.add(item)
    return repeated


def parse_election_json(text: str, source: str) -> list[TopicPartition]:
    """Partitions of a ``--path-to-json-file`` (``{"partitions": [{"topic", "partition"}]}``)."""
    document = _json_object(text, source)
    if "partitions" not in document:
        raise SparklogError(f'Replica election data is missing "partitions" field ({source})')
    entries = _entries(
        document, "partitions", source, '{"partitions": [{"topic": "t", "partition": 0}]}', SparklogError
    )
    partitions = []
    for index, entry in enumerate(entries):
        where = f"{source}, partition entry {index}"
        topic = _topic_field(entry, where, SparklogError)
        partitions.append((topic, _id_field(entry.get("partition"), '"partition"', where, SparklogError)))
    duplicates = _duplicates(partitions)
    if duplicates:
        raise SparklogError(f"Replica election data contains duplicate partitions: {', '.join(map(_tp, duplicates))}")
    return sorted(partitions)


def parse_topics_to_move_json(text: str, source: str) -> list[str]:
    """Topic names of a ``--topics-to-move-json-file`` (``{"topics": [{"topic": "t"}], "version": 1}``)."""
    document = _json_object(text, source)
    _check_version(document, source, SparklogError)
    entries = _entries(document, "topics", source, '{"topics": [{"topic": "t"}], "version": 1}', SparklogError)
    topics = [_topic_field(entry, f"{source}, topic entry {i}", SparklogError) for i, entry in enumerate(entries)]
    if not topics:
        raise SparklogError(f'{source} names no topics; expected e.g. {{"topics": [{{"topic": "t"}}], "version": 1}}')
    duplicates = _duplicates(topics)
    if duplicates:
        raise SparklogError(f"List of topics to reassign contains duplicate entries: {','.join(duplicates)}")
    return topics


def parse_reassignment_json(text: str, source: str) -> dict[TopicPartition, list[int]]:
    """The target replicas per partition of a ``--reassignment-json-file`` (Kafka's checks)."""
    error = InvalidReplicaAssignmentError
    document = _json_object(text, source, error)
    _check_version(document, source, error)
    example = '{"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [1, 2, 3]}]}'
    entries = _entries(document, "partitions", source, example, error)
    if not entries:
        raise error(f"Partition reassignment list cannot be empty ({source})")
    plan: list[tuple[TopicPartition, list[int]]] = []
    for index, entry in enumerate(entries):
        where = f"{source}, partition entry {index}"
        tp = (_topic_field(entry, where, error), _id_field(entry.get("partition"), '"partition"', where, error))
        replicas = entry.get("replicas")
        if not isinstance(replicas, list):
            raise error(f'{where} ({_tp(tp)}): "replicas" must be a list of broker ids, got {json.dumps(replicas)}')
        if not replicas:
            raise error(f"Partition replica list cannot be empty ({_tp(tp)} in {source})")
        replicas = [_id_field(r, 'each of "replicas" (a broker id)', f"{where} ({_tp(tp)})", error) for r in replicas]
        _check_log_dirs(entry, tp, replicas, where, error)
        plan.append((tp, replicas))
    duplicates = _duplicates([tp for tp, _ in plan])
    if duplicates:
        raise error(f"Partition reassignment contains duplicate topic partitions: {','.join(map(_tp, duplicates))}")
    repeated = [(tp, _duplicates(replicas)) for tp, replicas in plan if _duplicates(replicas)]
    if repeated:
        detail = ". ".join(f"{_tp(tp)} contains multiple entries for {','.join(map(str, ids))}" for tp, ids in repeated)
        raise error(f"Partition replica lists may not contain duplicate entries: {detail}")
    return dict(sorted(plan))


def _check_log_dirs(
    entry: Mapping[str, Any], tp: TopicPartition, replicas: list[int], where: str, error: type[SparklogError]
) -> None:
    log_dirs = entry.get("log_dirs")
    if log_dirs is None:
        return
    if not isinstance(log_dirs, list) or len(log_dirs) != len(replicas):
        raise error(
            f"Size of replicas list {replicas} is different from size of log dirs list {json.dumps(log_dirs)} "
            f"for partition {_tp(tp)} ({where})"
        )
    if any(d != _ANY_LOG_DIR for d in log_dirs):
        raise error(
            f"{where} ({_tp(tp)}): log_dirs {json.dumps(log_dirs)} name log dirs; a sparklog broker has exactly one "
            f'log dir, so each entry must be "{_ANY_LOG_DIR}" (or leave log_dirs out)'
        )


def format_reassignment_json(assignment: Mapping[TopicPartition, Sequence[int]]) -> str:
    """Kafka's ``formatAsReassignmentJson``: compact, partitions sorted, ``log_dirs`` all "any"."""
    partitions = [
        {"topic": t, "partition": p, "replicas": list(r), "log_dirs": [_ANY_LOG_DIR] * len(r)}
        for (t, p), r in sorted(assignment.items())
    ]
    return json.dumps({"version": 1, "partitions": partitions}, separators=(",", ":"))


# -- elect-leaders -------------------------------------------------------------------------
def election_lines(
    election_type: str, outcome: Mapping[TopicPartition, str], *, report_already: bool = True
) -> list[str]:
    """Kafka's ``LeaderElectionCommand`` output for per-partition outcomes (``elected``,
    ``already`` or the reason of a failure); partitions in topic-partition order."""
    ordered = sorted(outcome.items())
    elected = [tp for tp, result in ordered if result == "elected"]
    already = [tp for tp, result in ordered if result == "already"]
    lines = []
    if elected:
        lines.append(
            f"Successfully completed leader election ({election_type}) for partitions {', '.join(map(_tp, elected))}"
        )
    if already and report_already:
        lines.append(f"Valid replica already elected for partitions {', '.join(map(_tp, already))}")
    lines += [
        f"Error completing leader election ({election_type}) for partition: {_tp(tp)}: {result}"
        for tp, result in ordered
        if result not in ("elected", "already")
    ]
    return lines


def _check_election_options(args: argparse.Namespace) -> str:
    """The election type, after kafka-leader-election's option rules."""
    if args.preferred and args.election_type not in (None, "PREFERRED"):
        raise UsageError(f"--preferred contradicts --election-type {args.election_type}")
    election_type = "PREFERRED" if args.preferred else args.election_type
    if election_type is None:
        raise UsageError("Missing required option(s): election-type (or --preferred)")
    scopes = [args.topic is not None, args.all_topic_partitions, args.path_to_json_file is not None]
    if sum(scopes) != 1:
        raise UsageError(
            "One and only one of the following options is required: topic, all-topic-partitions, path-to-json-file"
        )
    if args.partition is not None and args.topic is None:
        raise UsageError("Option partition is only allowed if topic is used")
    if args.partition is not None and args.partition < 0:
        raise UsageError(f"--partition must be >= 0, got {args.partition}")
    return election_type


def _elect(args: argparse.Namespace) -> int:
    from sparklog.admin.partitions import elect_preferred_leaders

    election_type = _check_election_options(args)
    if election_type == "UNCLEAN":
        raise SparklogError(
            "Unclean leader election on request is not supported: the controller elects an out-of-sync replica only "
            "by itself, when no in-sync replica is live, for topics with unclean.leader.election.enable=true "
            "(sparklog configs alter --topic T --add-config unclean.leader.election.enable=true)"
        )
    partitions: list[TopicPartition] | None = None
    if args.path_to_json_file is not None:
        path = args.path_to_json_file
        partitions = parse_election_json(_read_file(path, "--path-to-json-file"), path)
    if args.topic is not None:
        validate_topic_name(args.topic)
    with connect(args) as cluster:
        if args.topic is not None:
            chosen = cluster.partitions_of(args.topic) if args.partition is None else [args.partition]
            partitions = [(args.topic, p) for p in chosen]
        if partitions == []:
            return 0  # an empty list in the file: nothing to elect
        outcome = elect_preferred_leaders(cluster.replicas, partitions)
    write_lines(election_lines(election_type, outcome, report_already=not args.all_topic_partitions))
    failed = sum(1 for result in outcome.values() if result not in ("elected", "already"))
    if failed:
        raise SparklogError(f"{failed} replica(s) could not be elected")
    return 0


# -- reassign ------------------------------------------------------------------------------
def _check_reassign_options(args: argparse.Namespace) -> str:
    """The action, after kafka-reassign-partitions' rules on required and permitted options."""
    action = next(a for a in _ACTIONS if getattr(args, a))
    for name in _REQUIRED[action]:
        if getattr(args, name) is None:
            raise UsageError(f'Missing required argument "[{name.replace("_", "-")}]"')
    for name in _REASSIGN_OPTIONS:
        if name not in _REQUIRED[action] and getattr(args, name) is not None:
            raise UsageError(f'Option "[{name.replace("_", "-")}]" can\'t be used with action "[{action}]"')
    return action


def _reassign(args: argparse.Namespace) -> int:
    action = _check_reassign_options(args)
    if action == "generate":
        path = args.topics_to_move_json_file
        topics = parse_topics_to_move_json(_read_file(path, "--topics-to-move-json-file"), path)
        return _generate(args, topics)
    path = args.reassignment_json_file
    target = parse_reassignment_json(_read_file(path, "--reassignment-json-file"), path)
    return _execute(args, target) if action == "execute" else _verify(args, target)


def _generate(args: argparse.Namespace, topics: list[str]) -> int:
    from sparklog.admin.partitions import generate_reassignment

    with connect(args) as cluster:
        current, proposed = generate_reassignment(cluster.replicas, topics, args.broker_list)
    write_lines(
        [
            "Current partition replica assignment",
            format_reassignment_json(current),
            "",
            "Proposed partition reassignment configuration",
            format_reassignment_json(proposed),
        ]
    )
    return 0


def _execute(args: argparse.Namespace, target: dict[TopicPartition, list[int]]) -> int:
    from sparklog.admin.partitions import execute_reassignment

    with connect(args) as cluster:
        previous = execute_reassignment(cluster.replicas, target)
    plural = "" if len(target) == 1 else "s"
    write_lines(
        [
            "Current partition replica assignment",
            "",
            format_reassignment_json(previous),
            "",
            "Save this to use as the --reassignment-json-file option during rollback",
            f"Successfully started partition reassignment{plural} for {','.join(map(_tp, sorted(target)))}",
        ]
    )
    return 0


def _verify(args: argparse.Namespace, target: dict[TopicPartition, list[int]]) -> int:
    from sparklog.admin.partitions import current_assignment, pending_reassignments, verify_reassignment

    with connect(args) as cluster:
        done = verify_reassignment(cluster.replicas, target)
        pending = pending_reassignments(cluster.replicas)
        current = current_assignment(cluster.replicas, {t for t, _ in target})
    write_lines(["Status of partition reassignment:", *_status_lines(target, done, pending, current)])
    return 0


def _status_lines(
    target: Mapping[TopicPartition, Sequence[int]],
    done: Mapping[TopicPartition, bool],
    pending: Iterable[TopicPartition],
    current: Mapping[TopicPartition, Sequence[int]],
) -> list[str]:
    """Kafka's ``partitionReassignmentStatesToString``."""
    active = set(pending)
    lines = []
    for tp, replicas in sorted(target.items()):
        now = list(current.get(tp, []))
        if done[tp] or (tp not in active and now == list(replicas)):
            lines.append(f"Reassignment of partition {_tp(tp)} is complete.")
        elif tp in active:
            lines.append(f"Reassignment of partition {_tp(tp)} is still in progress.")
        else:
            lines.append(
                f"There is no active reassignment of partition {_tp(tp)}, but replica set is "
                f"{','.join(map(str, now))} rather than {','.join(map(str, replicas))}."
            )
    return lines
