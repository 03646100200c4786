"""``sparklog groups`` and ``sparklog consume --group`` as real subprocesses against a real
ZooKeeper and real Delta tables: Kafka's layouts byte for byte (the leading blank line, the
padding, ``-`` for missing values), notes on stderr, dry run versus execute, export and
import of a plan, refusals while a group is active, bad input, and that no ``groups``
command imports pyspark.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

import sparklog
from tests.integration.test_cli import Cli, assert_single_error
from tests.integration.test_groups_admin import fill, live_member

COMMITTED = {("orders", 0): 4, ("orders", 1): 7}


def row(*cells: object, widths: tuple[int, ...]) -> str:
    """Kafka's printf layout: each cell but the last left-aligned in its width, one space apart."""
    return " ".join([*(str(c).ljust(w) for c, w in zip(cells[:-1], widths, strict=False)), str(cells[-1])]).rstrip()


def test_describe_members_state_and_list_layouts(cli: Cli, cluster: sparklog.Cluster) -> None:
    fill(cluster, records=10)
    host = socket.gethostname()
    with live_member(cluster, "app", client_id="app-1") as consumer:
        consumer.commit({("orders", 0): 6, ("orders", 1): 10})
        member = cluster.describe_group("app").members[0].member_id
        cid = max(15, len(member))
        offsets = (15, 15, 10, 15, 15, 15, cid, 15)
        described = cli("groups", "describe", "--group", "app", forbid_pyspark=True)
        assert (
            described.stdout
            == "\n".join(
                [
                    "",
                    row(
                        "GROUP",
                        "TOPIC",
                        "PARTITION",
                        "CURRENT-OFFSET",
                        "LOG-END-OFFSET",
                        "LAG",
                        "CONSUMER-ID",
                        "HOST",
                        "CLIENT-ID",
                        widths=offsets,
                    ),
                    row("app", "orders", 0, 6, 10, 4, member, host, "app-1", widths=offsets),
                    row("app", "orders", 1, 10, 10, 0, member, host, "app-1", widths=offsets),
                ]
            )
            + "\n"
        )
        assert described.stderr == ""

        members = cli("groups", "describe", "--group", "app", "--members", "--verbose", forbid_pyspark=True)
        widths: tuple[int, ...] = (15, cid, 15, 15, 15)
        assert (
            members.stdout
            == "\n".join(
                [
                    "",
                    row("GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT", widths=widths),
                    row("app", member, host, "app-1", 2, "orders(0,1)", widths=widths),
                ]
            )
            + "\n"
        )

        state = cli("groups", "describe", "--group", "app", "--state", forbid_pyspark=True)
        coordinator = f"{host}  (0)"
        widths = (15, max(25, len(coordinator)), 20, 20)
        assert (
            state.stdout
            == "\n".join(
                [
                    "",
                    row("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS", widths=widths),
                    row("app", coordinator, "range", "Stable", 1, widths=widths),
                ]
            )
            + "\n"
        )

    cluster.commit_offsets("batch", COMMITTED)
    assert cli("groups", "list", forbid_pyspark=True).stdout == "app\nbatch\n"
    assert (
        cli("groups", "list", "--state").stdout
        == "\n".join(
            [
                row("GROUP", "STATE", widths=(25,)),
                row("app", "Empty", widths=(25,)),
                row("batch", "Empty", widths=(25,)),
            ]
        )
        + "\n"
    )
    assert cli("groups", "list", "--state", "stable").stdout == row("GROUP", "STATE", widths=(25,)) + "\n"

    empty = cli("groups", "describe", "--group", "app")
    assert empty.stderr == "\nConsumer group 'app' has no active members.\n"
    assert empty.stdout.splitlines()[2] == row(
        "app", "orders", 0, 6, 10, 4, "-", "-", "-", widths=(15, 15, 10, 15, 15, 15, 15, 15)
    )
    assert cli("groups", "describe", "--group", "app", "--members").stdout == ""

    [doc] = json.loads(cli("groups", "describe", "--group", "batch", "--output", "json").stdout)
    assert (doc["group_id"], doc["state"], doc["members"]) == ("batch", "Empty", [])
    assert [(p["partition"], p["current_offset"], p["log_end_offset"], p["lag"]) for p in doc["partitions"]] == [
        (0, 4, 10, 6),
        (1, 7, 10, 3),
    ]


def test_reset_offsets_dry_run_execute_export_and_from_file(
    cli: Cli, cluster: sparklog.Cluster, tmp_path: Path
) -> None:
    fill(cluster, records=10)
    cluster.commit_offsets("g", COMMITTED)
    widths = (15, 15, 10)
    header = row("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET", widths=widths)

    dry = cli("groups", "reset-offsets", "--group", "g", "--topic", "orders", "--to-earliest", forbid_pyspark=True)
    assert (
        dry.stdout
        == f"\n{header}\n{row('g', 'orders', 0, 0, widths=widths)}\n{row('g', 'orders', 1, 0, widths=widths)}\n"
    )
    assert dry.stderr.startswith("WARN: No action will be performed as the --execute option is missing.")
    explicit = cli("groups", "reset-offsets", "--group", "g", "--all-topics", "--shift-by", "-3", "--dry-run")
    assert (explicit.stdout.splitlines()[2:], explicit.stderr) == (
        [row("g", "orders", 0, 1, widths=widths), row("g", "orders", 1, 4, widths=widths)],
        "",
    )
    assert cluster.committed_offsets("g") == COMMITTED, "dry runs must not change offsets"

    export = cli("groups", "reset-offsets", "--group", "g", "--all-topics", "--to-current", "--export")
    assert export.stdout == "orders,0,4\norders,1,7\n\n"
    (tmp_path / "saved.csv").write_text(export.stdout)

    done = cli(
        "groups",
        "reset-offsets",
        "--group",
        "g",
        "--topic",
        "orders:1",
        "--to-datetime",
        "2024-01-01T00:00:00.000Z",
        "--execute",
    )
    assert done.stdout == f"\n{header}\n{row('g', 'orders', 1, 0, widths=widths)}\n"
    assert cluster.committed_offsets("g") == {("orders", 0): 4, ("orders", 1): 0}
    cli("groups", "reset-offsets", "--group", "g", "--topic", "orders:0", "--to-offset", "99", "--execute")
    assert cluster.committed_offsets("g") == {("orders", 0): 10, ("orders", 1): 0}

    back = cli(
        "groups",
        "reset-offsets",
        "--group",
        "g",
        "--from-file",
        str(tmp_path / "saved.csv"),
        "--execute",
        "--output",
        "json",
    )
    assert json.loads(back.stdout) == [
        {"group": "g", "topic": "orders", "partition": 0, "offset": 4},
        {"group": "g", "topic": "orders", "partition": 1, "offset": 7},
    ]
    assert cluster.committed_offsets("g") == COMMITTED


def test_reset_offsets_warns_where_it_clamps_as_kafka_does(cli: Cli, cluster: sparklog.Cluster) -> None:
    fill(cluster, records=10)
    cluster.delete_records("orders", {0: 3})
    cluster.commit_offsets("g", COMMITTED)
    low = cli("groups", "reset-offsets", "--group", "g", "--topic", "orders:0", "--to-offset", "1", "--dry-run")
    assert low.stdout.splitlines()[2] == row("g", "orders", 0, 3, widths=(15, 15, 10))
    assert low.stderr == (
        "WARN New offset (1) is lower than earliest offset for topic partition orders-0. Value will be set to 3\n"
    )
    high = cli("groups", "reset-offsets", "--group", "g", "--all-topics", "--shift-by", "5", "--dry-run")
    assert high.stderr == (
        "WARN New offset (12) is higher than latest offset for topic partition orders-1. Value will be set to 10\n"
    )
    inside = cli("groups", "reset-offsets", "--group", "g", "--all-topics", "--to-offset", "5", "--dry-run")
    assert inside.stderr == ""


def test_active_group_is_refused_and_unchanged(cli: Cli, cluster: sparklog.Cluster) -> None:
    fill(cluster, records=3)
    with live_member(cluster, "live") as consumer:
        consumer.commit({("orders", 0): 2, ("orders", 1): 1})
        before = cluster.committed_offsets("live")
        refused = cli(
            "groups", "reset-offsets", "--group", "live", "--all-topics", "--to-earliest", "--execute", expect=1
        )
        assert_single_error(
            refused, "Assignments can only be reset if the group 'live' is inactive, but the current state is Stable."
        )
        assert_single_error(
            cli("groups", "delete", "--group", "live", expect=1),
            "Deletion of some consumer groups failed: * Group 'live' could not be deleted due to: NON_EMPTY_GROUP",
        )
        assert_single_error(
            cli("groups", "delete-offsets", "--group", "live", "--topic", "orders", expect=1),
            "GROUP_SUBSCRIBED_TO_TOPIC",
        )
        assert cluster.committed_offsets("live") == before


def test_delete_offsets_and_delete(cli: Cli, cluster: sparklog.Cluster) -> None:
    fill(cluster, records=3)
    cluster.commit_offsets("g", {("orders", 0): 1, ("orders", 1): 2})
    cluster.commit_offsets("h", {("orders", 0): 3})
    deleted = cli("groups", "delete-offsets", "--group", "g", "--topic", "orders:1", forbid_pyspark=True)
    widths = (15, 10)
    assert (
        deleted.stdout
        == "\n".join(
            [
                "Request succeeded for deleting offsets from group g.",
                "",
                row("TOPIC", "PARTITION", "STATUS", widths=widths),
                row("orders", 1, "Successful", widths=widths),
            ]
        )
        + "\n"
    )
    assert cluster.committed_offsets("g") == {("orders", 0): 1}
    gone = cli("groups", "delete", "--group", "g", "--group", "h", forbid_pyspark=True)
    assert gone.stdout == "Deletion of requested consumer groups ('g', 'h') was successful.\n"
    assert cluster.list_groups() == []
    assert_single_error(cli("groups", "describe", "--group", "g", expect=1), "Consumer group 'g' does not exist.")


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("describe", "--group", "nope"), "Consumer group 'nope' does not exist."),
        (("describe", "--group", "bad group"), "Group id 'bad group' is illegal"),
        (("delete", "--group", "nope"), "could not be deleted due to: GROUP_ID_NOT_FOUND"),
        (("reset-offsets", "--group", "g", "--topic", "ghost", "--to-earliest"), "Topic 'ghost' does not exist"),
        (
            ("reset-offsets", "--group", "g", "--topic", "orders:5", "--to-latest"),
            'The partitions "orders-5" do not exist',
        ),
        (
            ("reset-offsets", "--group", "g", "--all-topics", "--to-datetime", "yesterday"),
            "Invalid datetime 'yesterday'",
        ),
        (("reset-offsets", "--group", "g", "--all-topics", "--by-duration", "1h"), "Invalid duration '1h'"),
        (("reset-offsets", "--group", "g", "--from-file", "BAD_CSV", "--execute"), "Reset plan line 1 'orders;0;1'"),
        (("delete-offsets", "--group", "g", "--topic", "ghost"), "Topic 'ghost' does not exist"),
    ],
)
def test_bad_input_is_one_error_line_and_changes_nothing(
    cli: Cli, cluster: sparklog.Cluster, tmp_path: Path, args: tuple[str, ...], fragment: str
) -> None:
    cluster.create_topic("orders", 2)
    cluster.commit_offsets("g", {("orders", 0): 0})
    (tmp_path / "bad.csv").write_text("orders;0;1\n")
    argv = [str(tmp_path / "bad.csv") if a == "BAD_CSV" else a for a in args]
    assert_single_error(cli("groups", *argv, expect=1), fragment)
    assert cluster.committed_offsets("g") == {("orders", 0): 0}


def test_usage_errors_exit_2(cli: Cli) -> None:
    for args in (
        ("reset-offsets", "--group", "g", "--all-topics"),  # no scenario
        ("reset-offsets", "--group", "g", "--all-topics", "--to-earliest", "--to-latest"),
        ("reset-offsets", "--group", "g", "--all-topics", "--to-earliest", "--dry-run", "--execute"),
        ("reset-offsets", "--group", "g", "--to-earliest"),  # no scope
        ("reset-offsets", "--group", "g", "--topic", "t:x", "--to-earliest"),
        ("reset-offsets", "--group", "g", "--all-topics", "--to-offset", "ten"),
        ("describe",),  # no group
        ("list", "--state", "Sleepy"),
    ):
        result = cli("groups", *args, expect=2, cluster_options=False)
        assert "usage: sparklog groups" in result.stderr, args
    consume = cli("consume", "--topic", "t", "--group", "g", "--partition", "0", expect=2, cluster_options=False)
    assert "Options group and partition cannot be specified together." in consume.stderr


def test_consume_as_a_group_member_commits(cli: Cli, cluster: sparklog.Cluster) -> None:
    fill(cluster, records=3)
    first = cli(
        "consume",
        "--topic",
        "orders",
        "--group",
        "readers",
        "--from-beginning",
        "--max-messages",
        "6",
        "--timeout-ms",
        "20000",
        forbid_pyspark=True,
    )
    assert sorted(first.stdout.splitlines()) == ["a0", "a1", "a2", "b0", "b1", "b2"]
    assert first.stderr == "Processed a total of 6 messages\n"
    lags = cli("groups", "describe", "--group", "readers", "--output", "json").stdout
    assert [(p["partition"], p["current_offset"], p["lag"]) for p in json.loads(lags)[0]["partitions"]] == [
        (0, 3, 0),
        (1, 3, 0),
    ]

    with cluster.producer(linger_ms=0) as producer:
        producer.send("orders", "a3", partition=0)
        producer.send("orders", "b3", partition=1)
    again = cli("consume", "--topic", "orders", "--group", "readers", "--max-messages", "1", "--timeout-ms", "20000")
    assert again.stdout in ("a3\n", "b3\n")
    assert sorted(-1 if r.lag is None else r.lag for r in cluster.describe_group("readers").partitions) == [
        0,
        1,
    ]  # the other record waits
