"""Partition admin from the shell against real broker agents: ``topics create
--replica-assignment``, ``topics describe --under-replicated-partitions`` /
``--unavailable-partitions``, ``elect-leaders`` and ``reassign``.

Each command is checked for Kafka's output, for the end state of the cluster (leaders,
replicas, ISR) and for the data: every acknowledged record is readable exactly once, with
contiguous offsets, also after failovers; a replica a reassignment adds holds the leader's
records, and one it removes holds none of the partition (and keeps holding none). Bad input gives one ``Error:`` line (or a usage error, exit 2) and changes nothing.

The agents are separate processes (:class:`sparklog.testing.BrokerAgents`) with a 3 s ZooKeeper
session, a 2 s replica lag limit and no automatic leader rebalance: a killed agent is noticed
within seconds and leaders move only when the test makes them.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import sparklog
from sparklog.broker.controller.admin_requests import DROP_DELAY_S
from sparklog.log.reader import read_ranges
from sparklog.model.topic import PartitionDescription
from sparklog.testing import BrokerAgents
from tests.helpers import assert_log_consistent, assert_unchanged
from tests.integration.test_cli import Cli

_STATE_TIMEOUT_S = 30.0
_REMOVED_REPLICA_GRACE_S = 2.5  # > the fetchers' assignment refresh period (1 s)


@pytest.fixture
def cli(zk_connect: str, sparklog_home: Path) -> Cli:
    return Cli(zk_connect, sparklog_home)


@pytest.fixture
def agents(zk_connect: str, sparklog_home: Path, tmp_path: Path) -> Iterator[BrokerAgents]:
    with BrokerAgents(zk_connect, sparklog_home, tmp_path / "brokers", replica_lag_time_max_ms=2_000) as running:
        yield running


# -- helpers -------------------------------------------------------------------------------
def partitions(cluster: sparklog.Cluster, topic: str) -> dict[int, PartitionDescription]:
    return {p.partition: p for p in cluster.describe_topic(topic).partitions}


def wait_partitions(
    agents: BrokerAgents,
    cluster: sparklog.Cluster,
    topic: str,
    condition: Callable[[dict[int, PartitionDescription]], bool],
    what: str,
) -> dict[int, PartitionDescription]:
    """Wait until ``condition`` holds for the topic's partition states; fail with them and the agents' logs."""
    try:
        agents.wait_for(lambda: condition(partitions(cluster, topic)), _STATE_TIMEOUT_S, what)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\nlast states of {topic}: {sorted(partitions(cluster, topic).items())}") from None
    return partitions(cluster, topic)


def produce(cluster: sparklog.Cluster, topic: str, values: Sequence[bytes], partition_count: int) -> list[bytes]:
    """Send with acks=all, record i to partition i % partition_count; the acknowledged values."""
    with cluster.producer(acks="all", linger_ms=0) as producer:
        futures = [producer.send(topic, value, partition=i % partition_count) for i, value in enumerate(values)]
        for future in futures:
            future.result(timeout=60)
    return list(values)


def assert_exactly_once(cluster: sparklog.Cluster, topic: str, acked: Sequence[bytes]) -> None:
    """Offsets contiguous per partition, every acknowledged value stored once, nothing else."""
    stored = Counter(r.value for r in assert_log_consistent(cluster, topic))
    missing = [v for v in acked if stored[v] == 0]
    assert not missing, f"{len(missing)} acknowledged records lost, e.g. {missing[:3]}"
    twice = [v for v, n in stored.items() if n > 1]
    assert not twice, f"{len(twice)} records stored more than once, e.g. {twice[:3]}"
    unknown = set(stored) - set(acked)
    assert not unknown, f"records nobody produced: {sorted(unknown, key=repr)[:3]}"


def replica_records(cluster: sparklog.Cluster, topic: str, broker: int, partition: int) -> list[tuple[int, bytes]]:
    """What broker ``broker``'s own table holds for the partition (offset, value)."""
    table = cluster.replicas.replica_table(topic, broker)
    dt = table.snapshot()
    got = read_ranges(table, dt, {partition: (0, table.log_end(dt, partition))}, include_headers=False)
    return list(zip(got.column("offset").to_pylist(), got.column("value").to_pylist(), strict=False))


def leader_records(cluster: sparklog.Cluster, topic: str, partition: int) -> list[tuple[int, bytes]]:
    table = cluster.read(topic, include_headers=False)
    rows = zip(
        table.column("partition").to_pylist(),
        table.column("offset").to_pylist(),
        table.column("value").to_pylist(),
        strict=False,
    )
    return sorted((o, v) for p, o, v in rows if p == partition)


def run_side_by_side(cli: Cli, commands: Sequence[Sequence[str]]) -> list[str]:
    """Independent read-only commands at once (keeps the file fast); their stdouts."""
    with ThreadPoolExecutor(max_workers=len(commands)) as pool:
        return [result.stdout for result in pool.map(lambda args: cli(*args), commands)]


def line(topic: str, p: int, leader: int | str, replicas: str, isr: str) -> str:
    return f"\tTopic: {topic}\tPartition: {p}\tLeader: {leader}\tReplicas: {replicas}\tIsr: {isr}"


def write_json(path: Path, document: object) -> str:
    path.write_text(json.dumps(document), encoding="utf-8")
    return str(path)


# -- create, describe filters, preferred election ------------------------------------------
def test_replica_assignment_describe_filters_and_preferred_election(
    cli: Cli, cluster: sparklog.Cluster, agents: BrokerAgents
) -> None:
    agents.start(1, 2, 3)
    created = cli(
        "topics",
        "create",
        "--topic",
        "t",
        "--replica-assignment",
        "1:2:3,2:3:1,3:1:2",
        "--config",
        "min.insync.replicas=2",
        forbid_pyspark=True,
    )
    assert created.stdout == "Created topic t.\n"
    cluster.create_topic("pair", replica_assignment={0: [2, 3]})
    acked = produce(cluster, "t", [b"before-%d" % i for i in range(30)], 3)
    described, under, unavailable = run_side_by_side(
        cli,
        [
            ("topics", "describe", "--topic", "t"),
            ("topics", "describe", "--under-replicated-partitions"),
            ("topics", "describe", "--unavailable-partitions"),
        ],
    )
    assert described.splitlines()[1:] == [
        line("t", 0, 1, "1,2,3", "1,2,3"),
        line("t", 1, 2, "2,3,1", "2,3,1"),
        line("t", 2, 3, "3,1,2", "3,1,2"),
    ]
    assert under == unavailable == ""

    # kill -9 the preferred leader of t-0: leadership moves, the ISR shrinks.
    agents.kill(1)
    wait_partitions(
        agents,
        cluster,
        "t",
        lambda ps: all(1 not in p.isr and p.leader != 1 for p in ps.values()),
        "broker 1 out of every ISR of t",
    )
    under, unavailable = run_side_by_side(
        cli,
        [
            ("topics", "describe", "--under-replicated-partitions"),
            ("topics", "describe", "--unavailable-partitions"),
        ],
    )
    rows = under.splitlines()
    assert len(rows) == 3 and not any("TopicId" in row for row in rows), rows  # partition lines only
    for p, (row, replicas) in enumerate(zip(rows, ("1,2,3", "2,3,1", "3,1,2"), strict=False)):
        assert re.fullmatch(rf"\tTopic: t\tPartition: {p}\tLeader: [23]\tReplicas: {replicas}\tIsr: (2,3|3,2)", row), (
            row
        )
    assert unavailable == ""
    acked += produce(cluster, "t", [b"degraded-%d" % i for i in range(30)], 3)

    # Back, caught up, in sync: the preferred election moves t-0 home, and only t-0.
    agents.start(1)
    wait_partitions(
        agents, cluster, "t", lambda ps: all(1 in p.isr for p in ps.values()), "broker 1 back in every ISR of t"
    )
    assert cli("topics", "describe", "--under-replicated-partitions").stdout == ""
    assert partitions(cluster, "t")[0].leader in (2, 3)
    elected = cli("elect-leaders", "--election-type", "preferred", "--all-topic-partitions", forbid_pyspark=True)
    assert elected.stdout == "Successfully completed leader election (PREFERRED) for partitions t-0\n"
    assert {p: d.leader for p, d in partitions(cluster, "t").items()} == {0: 1, 1: 2, 2: 3}
    again = cli("elect-leaders", "--preferred", "--topic", "t")
    assert again.stdout == "Valid replica already elected for partitions t-0, t-1, t-2\n"
    acked += produce(cluster, "t", [b"after-%d" % i for i in range(30)], 3)
    assert_exactly_once(cluster, "t", acked)

    # Every replica of pair down: its partition is offline (leader none); t fails over to 1.
    agents.kill(2)
    agents.kill(3)
    wait_partitions(agents, cluster, "pair", lambda ps: ps[0].leader == -1, "pair-0 offline")
    wait_partitions(agents, cluster, "t", lambda ps: all(p.leader == 1 for p in ps.values()), "broker 1 leading t")
    unavailable = cli("topics", "describe", "--unavailable-partitions").stdout
    assert re.fullmatch(r"\tTopic: pair\tPartition: 0\tLeader: none\tReplicas: 2,3\tIsr: [0-9,]*\n", unavailable), (
        unavailable
    )
    failed = cli("elect-leaders", "--preferred", "--topic", "pair", "--partition", "0", expect=1)
    assert (
        failed.stdout
        == "Error completing leader election (PREFERRED) for partition: pair-0: preferred replica 2 is not live\n"
    )
    assert failed.stderr == "Error: 1 replica(s) could not be elected\n"
    assert_exactly_once(cluster, "t", acked)


# -- bad input -----------------------------------------------------------------------------
def _bad_input_cases(tmp_path: Path) -> list[tuple[tuple[str, ...], int, str]]:
    """(arguments, exit code, fragment of the error); files are written here."""

    def file(name: str, content: object) -> str:
        path = tmp_path / name
        path.write_text(content if isinstance(content, str) else json.dumps(content), encoding="utf-8")
        return str(path)

    plan = lambda *entries: {"version": 1, "partitions": list(entries)}  # noqa: E731
    entry = lambda topic="t", partition=0, replicas=(1, 2, 3), **extra: {  # noqa: E731
        "topic": topic,
        "partition": partition,
        "replicas": list(replicas),
        **extra,
    }
    topics = file("topics.json", {"topics": [{"topic": "t"}], "version": 1})
    good_plan = file("good.json", plan(entry(replicas=(3, 2, 1))))
    create = ("topics", "create", "--topic", "new")
    generate = ("reassign", "--generate", "--topics-to-move-json-file")
    execute = ("reassign", "--execute", "--reassignment-json-file")
    return [
        # topics create --replica-assignment / describe filters
        (
            (*create, "--replica-assignment", "1:2:3", "--partitions", "1"),
            2,
            'Option "[replica-assignment]" can\'t be used with option "[partitions]"',
        ),
        (
            (*create, "--replica-assignment", "1:2:3", "--replication-factor", "3"),
            2,
            'Option "[replica-assignment]" can\'t be used with option "[replication-factor]"',
        ),
        ((*create, "--replica-assignment", "1:x"), 1, "'x' in '1:x' is not a broker id"),
        ((*create, "--replica-assignment", "1:1"), 1, "may not contain duplicate entries"),
        ((*create, "--replica-assignment", "1:2,3"), 1, "different replication factor"),
        ((*create, "--replica-assignment", "1:9"), 1, "not available: [9]"),
        ((*create, "--replica-assignment", ""), 1, "The replica assignment is empty"),
        (
            ("topics", "describe", "--under-replicated-partitions", "--unavailable-partitions"),
            2,
            "not allowed with argument",
        ),
        # elect-leaders
        (("elect-leaders", "--all-topic-partitions"), 2, "Missing required option(s): election-type"),
        (("elect-leaders", "--preferred"), 2, "One and only one of the following options is required"),
        (("elect-leaders", "--preferred", "--topic", "t", "--all-topic-partitions"), 2, "One and only one"),
        (
            ("elect-leaders", "--preferred", "--all-topic-partitions", "--partition", "0"),
            2,
            "Option partition is only allowed if topic is used",
        ),
        (
            ("elect-leaders", "--election-type", "sideways", "--all-topic-partitions"),
            2,
            "invalid election type 'sideways'",
        ),
        (
            ("elect-leaders", "--preferred", "--election-type", "unclean", "--all-topic-partitions"),
            2,
            "--preferred contradicts",
        ),
        (
            ("elect-leaders", "--election-type", "UNCLEAN", "--all-topic-partitions"),
            1,
            "Unclean leader election on request is not supported",
        ),
        (("elect-leaders", "--preferred", "--topic", "nope"), 1, "Topic 'nope' does not exist"),
        (("elect-leaders", "--preferred", "--topic", "t", "--partition", "7"), 1, "Topic t has no partition 7"),
        (("elect-leaders", "--preferred", "--topic", "t"), 1, "No controller is running"),
        (("elect-leaders", "--preferred", "--path-to-json-file", file("e1.json", "{not json")), 1, "is not valid JSON"),
        (
            ("elect-leaders", "--preferred", "--path-to-json-file", file("e2.json", {"topics": []})),
            1,
            'Replica election data is missing "partitions" field',
        ),
        (
            (
                "elect-leaders",
                "--preferred",
                "--path-to-json-file",
                file("e3.json", {"partitions": [{"topic": "t", "partition": 0}, {"topic": "t", "partition": 0}]}),
            ),
            1,
            "Replica election data contains duplicate partitions: t-0",
        ),
        (
            ("elect-leaders", "--preferred", "--path-to-json-file", file("e4.json", {"partitions": [{"topic": "t"}]})),
            1,
            '"partition" must be a non-negative integer',
        ),
        (
            ("elect-leaders", "--preferred", "--path-to-json-file", str(tmp_path / "missing.json")),
            1,
            "Cannot read --path-to-json-file",
        ),
        # reassign: options
        (
            ("reassign", "--reassignment-json-file", good_plan),
            2,
            "one of the arguments --generate --execute --verify is required",
        ),
        (
            ("reassign", "--generate", "--execute", "--reassignment-json-file", good_plan),
            2,
            "not allowed with argument",
        ),
        ((*generate, topics), 2, 'Missing required argument "[broker-list]"'),
        (
            (*execute, good_plan, "--broker-list", "1"),
            2,
            'Option "[broker-list]" can\'t be used with action "[execute]"',
        ),
        ((*generate, topics, "--broker-list", "1,1"), 2, "Broker list contains duplicate entries: 1"),
        ((*generate, topics, "--broker-list", "1,a"), 2, "expected broker ids separated by commas"),
        # reassign --generate: files, topics, brokers
        (
            (*generate, file("g1.json", {"topics": [{"topic": "nope"}], "version": 1}), "--broker-list", "1,2,3"),
            1,
            "Topic 'nope' does not exist",
        ),
        ((*generate, topics, "--broker-list", "1,2,9"), 1, "Unknown broker id(s) [9]"),
        (
            (*generate, file("g2.json", {"topics": [{"topic": "t"}], "version": 2}), "--broker-list", "1,2,3"),
            1,
            "Not supported version field value 2",
        ),
        (
            (*generate, file("g3.json", {"topics": [{"topic": "t"}, {"topic": "t"}]}), "--broker-list", "1,2,3"),
            1,
            "List of topics to reassign contains duplicate entries: t",
        ),
        ((*generate, file("g4.json", {"topics": [{"topic": "a/b"}]}), "--broker-list", "1,2,3"), 1, "a/b"),
        (
            (*generate, file("g5.json", {"version": 1}), "--broker-list", "1,2,3"),
            1,
            'The "topics" field is missing from',
        ),
        # reassign --execute / --verify: plans
        ((*execute, file("x1.json", "[1, 2")), 1, "is not valid JSON"),
        ((*execute, file("x2.json", plan())), 1, "Partition reassignment list cannot be empty"),
        ((*execute, file("x3.json", plan(entry(replicas=(1, 2, 9))))), 1, "not available: [9]"),
        ((*execute, file("x4.json", plan(entry(topic="nope")))), 1, "Topic 'nope' does not exist"),
        ((*execute, file("x5.json", plan(entry(partition=5)))), 1, "Topic t has no partition 5"),
        (
            (*execute, file("x6.json", plan(entry(replicas=(1, 1, 2))))),
            1,
            "Partition replica lists may not contain duplicate entries: t-0 contains multiple entries for 1",
        ),
        (
            (*execute, file("x7.json", plan(entry(), entry()))),
            1,
            "Partition reassignment contains duplicate topic partitions: t-0",
        ),
        ((*execute, file("x8.json", plan(entry(replicas=())))), 1, "Partition replica list cannot be empty"),
        ((*execute, file("x9.json", plan(entry(log_dirs=["/d", "any", "any"])))), 1, "exactly one log dir"),
        ((*execute, file("x10.json", plan(entry(log_dirs=["any"])))), 1, "is different from size of log dirs list"),
        (
            (*execute, file("x11.json", plan(entry(replicas=("1", 2, 3))))),
            1,
            'each of "replicas" (a broker id) must be a non-negative integer',
        ),
        ((*execute, good_plan), 1, "No controller is running"),
        (
            ("reassign", "--verify", "--reassignment-json-file", file("v1.json", {"version": 1, "partitions": {}})),
            1,
            'The "partitions" field is not a list',
        ),
    ]


def run_in_process(
    args: Sequence[str], zk_connect: str, home: Path, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str, str]:
    """``sparklog ARGS`` through :func:`sparklog.cli.main.main` in this process (same parser,
    handlers and exit-code mapping as the console script, without a process start each)."""
    from sparklog.cli.main import main

    try:
        code = main([*args, "--zookeeper", zk_connect, "--home", str(home)])
    except SystemExit as exc:  # argparse's usage errors
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_bad_input_one_error_line_and_nothing_changed(
    cluster: sparklog.Cluster,
    zk_connect: str,
    sparklog_home: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No agent runs (the checks come before any request to the controller, and its absence
    is an error of its own); brokers 1..3 are registered, their storage under home."""
    monkeypatch.chdir(sparklog_home)  # no conf/sparklog.properties of the repository
    for broker in (1, 2, 3):
        cluster.replicas.metadata.register_broker(broker, str(sparklog_home / f"broker-{broker}"), None)
    cluster.create_topic("t", replica_assignment={0: [1, 2, 3]})
    (tmp_path / "inputs").mkdir()
    cases = _bad_input_cases(tmp_path / "inputs")
    with assert_unchanged(cluster, sparklog_home):
        for args, expected_code, fragment in cases:
            code, out, err = run_in_process(args, zk_connect, sparklog_home, capsys)
            context = f"sparklog {' '.join(args)} -> {code}\nstdout: {out}\nstderr: {err}"
            assert code == expected_code and out == "" and "Traceback" not in err, context
            lines = err.splitlines()
            if code == 1:
                assert len(lines) == 1 and lines[0].startswith("Error: ") and fragment in lines[0], context
            else:
                assert lines[0].startswith("usage: sparklog ") and fragment in lines[-1], context
        # Without agents every recorded leader is served: nothing is reported unavailable.
        assert run_in_process(
            ["topics", "describe", "--unavailable-partitions"], zk_connect, sparklog_home, capsys
        ) == (0, "", "")


# -- reassignment --------------------------------------------------------------------------
def test_reassignment_generate_execute_verify(
    cli: Cli, cluster: sparklog.Cluster, agents: BrokerAgents, tmp_path: Path
) -> None:
    agents.start(1, 2, 3, 4)
    cli("topics", "create", "--topic", "m", "--replica-assignment", "1:2:3,2:3:1")
    acked = produce(cluster, "m", [b"before-%d" % i for i in range(40)], 2)

    topics_file = write_json(tmp_path / "topics.json", {"topics": [{"topic": "m"}], "version": 1})
    generated = cli(
        "reassign",
        "--generate",
        "--topics-to-move-json-file",
        topics_file,
        "--broker-list",
        "1,2,4",
        forbid_pyspark=True,
    ).stdout.splitlines()
    assert generated[0] == "Current partition replica assignment"
    assert generated[1] == (
        '{"version":1,"partitions":[{"topic":"m","partition":0,"replicas":[1,2,3],"log_dirs":["any","any","any"]},'
        '{"topic":"m","partition":1,"replicas":[2,3,1],"log_dirs":["any","any","any"]}]}'
    )
    assert generated[2:4] == ["", "Proposed partition reassignment configuration"] and len(generated) == 5
    proposal = json.loads(generated[4])
    assert [(e["topic"], e["partition"]) for e in proposal["partitions"]] == [("m", 0), ("m", 1)]
    assert all(sorted(e["replicas"]) == [1, 2, 4] and e["log_dirs"] == ["any"] * 3 for e in proposal["partitions"])
    assert cluster.describe_topic("m").partitions[0].replicas == (1, 2, 3)  # --generate writes nothing

    # m-0 keeps its leader, m-1's leader (2) leaves: the new replica 4 takes over.
    plan = {
        "version": 1,
        "partitions": [
            {"topic": "m", "partition": 0, "replicas": [1, 2, 4]},
            {"topic": "m", "partition": 1, "replicas": [4, 3, 1]},
        ],
    }
    plan_file = write_json(tmp_path / "plan.json", plan)
    stop = threading.Event()
    during: list[bytes] = []
    errors: list[BaseException] = []

    def keep_producing() -> None:
        try:
            with cluster.producer(acks="all", linger_ms=0) as producer:
                i = 0
                while not stop.is_set():
                    value = b"during-%d" % i
                    producer.send("m", value, partition=i % 2).result(timeout=60)
                    during.append(value)
                    i += 1
        except BaseException as exc:
            errors.append(exc)

    producer_thread = threading.Thread(target=keep_producing, daemon=True)
    producer_thread.start()
    try:
        executed = cli("reassign", "--execute", "--reassignment-json-file", plan_file, forbid_pyspark=True).stdout
        rollback = (
            '{"version":1,"partitions":[{"topic":"m","partition":0,"replicas":[1,2,3],"log_dirs":["any","any","any"]},'
            '{"topic":"m","partition":1,"replicas":[2,3,1],"log_dirs":["any","any","any"]}]}'
        )
        assert executed == (
            f"Current partition replica assignment\n\n{rollback}\n\n"
            "Save this to use as the --reassignment-json-file option during rollback\n"
            "Successfully started partition reassignments for m-0,m-1\n"
        )
        first = cli("reassign", "--verify", "--reassignment-json-file", plan_file).stdout.splitlines()
        assert first[0] == "Status of partition reassignment:" and len(first) == 3
        for p, row in enumerate(first[1:]):
            assert row in (
                f"Reassignment of partition m-{p} is complete.",
                f"Reassignment of partition m-{p} is still in progress.",
            ), row
        complete = "Status of partition reassignment:\nReassignment of partition m-0 is complete.\nReassignment of partition m-1 is complete.\n"
        agents.wait_for(
            lambda: cli("reassign", "--verify", "--reassignment-json-file", plan_file).stdout == complete,
            _STATE_TIMEOUT_S,
            "the reassignment to complete",
        )
    finally:
        stop.set()
        producer_thread.join(90)
    assert not errors, f"producing during the reassignment failed: {errors[0]!r}\n{agents.logs()}"
    assert during, "nothing was produced during the reassignment"
    acked += during
    acked += produce(cluster, "m", [b"after-%d" % i for i in range(20)], 2)

    final = wait_partitions(
        agents,
        cluster,
        "m",
        lambda ps: all(set(p.isr) == set(p.replicas) for p in ps.values()),
        "every new replica in sync",
    )
    assert (final[0].replicas, final[0].leader) == ((1, 2, 4), 1)
    assert (final[1].replicas, final[1].leader) == ((4, 3, 1), 4)
    described = cli("topics", "describe", "--topic", "m").stdout.splitlines()
    assert re.fullmatch(r"\tTopic: m\tPartition: 0\tLeader: 1\tReplicas: 1,2,4\tIsr: [124],[124],[124]", described[1])
    assert re.fullmatch(r"\tTopic: m\tPartition: 1\tLeader: 4\tReplicas: 4,3,1\tIsr: [134],[134],[134]", described[2])
    assert_exactly_once(cluster, "m", acked)
    # The new replica on broker 4 holds exactly what the leader has.
    for partition in (0, 1):
        assert replica_records(cluster, "m", 4, partition) == leader_records(cluster, "m", partition)


def test_reassignment_empties_the_removed_replicas(
    cli: Cli, cluster: sparklog.Cluster, agents: BrokerAgents, tmp_path: Path
) -> None:
    """A broker a reassignment removes keeps none of the partition, also after its fetcher's
    next look at the assignment (it must not copy the partition back from the leader). Two
    partitions leave two different brokers: two independent chances to catch a stale fetcher."""
    agents.start(1, 2, 3)
    cluster.create_topic("r", replica_assignment={0: [1, 2], 1: [2, 3]})
    acked = produce(cluster, "r", [b"r-%d" % i for i in range(20)], 2)
    plan = {
        "version": 1,
        "partitions": [
            {"topic": "r", "partition": 0, "replicas": [1, 3]},
            {"topic": "r", "partition": 1, "replicas": [2, 1]},
        ],
    }
    plan_file = write_json(tmp_path / "plan.json", plan)
    cli("reassign", "--execute", "--reassignment-json-file", plan_file)
    complete = "Status of partition reassignment:\nReassignment of partition r-0 is complete.\nReassignment of partition r-1 is complete.\n"
    agents.wait_for(
        lambda: cli("reassign", "--verify", "--reassignment-json-file", plan_file).stdout == complete,
        _STATE_TIMEOUT_S,
        "the reassignment to complete",
    )
    completed_at = time.monotonic()
    for added, partition in ((3, 0), (1, 1)):
        assert replica_records(cluster, "r", added, partition) == leader_records(cluster, "r", partition)
    assert_exactly_once(cluster, "r", acked)

    def kept() -> dict[str, int]:
        found = {}
        for removed, partition in ((2, 0), (3, 1)):
            table = cluster.replicas.replica_table("r", removed)
            files = table.files(table.snapshot(), {partition})
            if files:
                found[f"broker {removed} holds r-{partition} up to offset {max(f.last_offset for f in files)}"] = (
                    removed
                )
        return found

    # Emptied DROP_DELAY_S after completion; then no fetcher copies them back.
    agents.wait_for(lambda: not kept(), DROP_DELAY_S + 15, "the removed replicas emptied")
    # Nothing to wait for: no fetcher may copy them back, which takes letting each fetcher
    # refresh its assignment (not observable from here) within the grace period.
    time.sleep(max(0.0, completed_at + DROP_DELAY_S + _REMOVED_REPLICA_GRACE_S - time.monotonic()))
    assert not kept(), (
        f"{_REMOVED_REPLICA_GRACE_S} s after they were emptied, removed replicas hold data again: "
        f"{'; '.join(kept())}\n{agents.logs()}"
    )


def test_reassignment_completes_across_a_controller_kill(
    cli: Cli, cluster: sparklog.Cluster, agents: BrokerAgents, tmp_path: Path
) -> None:
    """The reassignment lives in ZooKeeper, not in the controller: killing the controller's
    agent right after ``--execute`` (and bringing it back) still ends with the new replicas,
    every record once, and the added replicas identical to their leaders."""
    agents.start(1, 2, 3, 4)
    cluster.create_topic("k", replica_assignment={0: [1, 2], 1: [2, 3]})
    acked = produce(cluster, "k", [b"k-%d" % i for i in range(30)], 2)
    plan = {
        "version": 1,
        "partitions": [
            {"topic": "k", "partition": 0, "replicas": [3, 4]},
            {"topic": "k", "partition": 1, "replicas": [4, 1]},
        ],
    }
    plan_file = write_json(tmp_path / "plan.json", plan)
    controller = agents.wait_controller()
    cli("reassign", "--execute", "--reassignment-json-file", plan_file)
    agents.kill(controller)
    agents.wait_for(lambda: agents.controller() not in (None, controller), _STATE_TIMEOUT_S, "another controller")
    agents.start(controller)
    complete = "Status of partition reassignment:\nReassignment of partition k-0 is complete.\nReassignment of partition k-1 is complete.\n"
    agents.wait_for(
        lambda: cli("reassign", "--verify", "--reassignment-json-file", plan_file).stdout == complete,
        _STATE_TIMEOUT_S * 2,
        "the reassignment to complete after the controller's kill",
    )
    acked += produce(cluster, "k", [b"after-%d" % i for i in range(10)], 2)
    final = wait_partitions(
        agents,
        cluster,
        "k",
        lambda ps: all(set(p.isr) == set(p.replicas) for p in ps.values()),
        "every new replica in sync",
    )
    assert (final[0].replicas, final[1].replicas) == ((3, 4), (4, 1))
    assert_exactly_once(cluster, "k", acked)
    for broker, partition in ((3, 0), (4, 0), (4, 1), (1, 1)):
        assert replica_records(cluster, "k", broker, partition) == leader_records(cluster, "k", partition), (
            broker,
            partition,
        )
