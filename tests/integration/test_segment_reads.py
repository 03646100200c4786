"""Reading segments for a Fetch: a byte budget decodes only the files it needs, files without
headers say so and skip the column, a range inside a file of many row groups decodes only its
row groups, and the file listing follows every commit and a re-created topic."""

from __future__ import annotations

import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

import sparklog
from sparklog.log.reader import read_ranges, read_segment_range
from sparklog.log.segment import NO_HEADERS
from sparklog.log.storage import LocalTableStorage
from sparklog.log.table import TopicTable
from sparklog.model.schema import FILE_SCHEMA

VALUE = b"v" * 1000


def produce_files(cluster: sparklog.Cluster, topic: str, files: int, records_per_file: int) -> None:
    """``files`` segments of partition 0, one flush each."""
    with cluster.producer() as producer:
        for _ in range(files):
            for _ in range(records_per_file):
                producer.send(topic, VALUE, partition=0)
            producer.flush()


def leader_table(cluster: sparklog.Cluster, topic: str) -> TopicTable:
    return cluster.replicas.leader_table(topic)


def test_a_byte_budget_reads_the_leading_files_only(cluster: sparklog.Cluster) -> None:
    cluster.create_topic("budget", partitions=1)
    produce_files(cluster, "budget", files=10, records_per_file=10)  # ~10 KB a file
    table = leader_table(cluster, "budget")
    dt = table.snapshot()
    assert len(table.files(dt)) == 10
    everything = read_ranges(table, dt, {0: (0, 100)})
    assert everything.column("offset").to_pylist() == list(range(100))

    budgeted = read_ranges(table, dt, {0: (0, 100)}, max_bytes=25_000)
    # three files hold the 25 KB asked for: the fourth is not decoded
    assert budgeted.column("offset").to_pylist() == list(range(30)), budgeted.num_rows
    from_the_middle = read_ranges(table, dt, {0: (45, 100)}, max_bytes=1)
    assert from_the_middle.column("offset").to_pylist() == list(range(45, 50))


def test_a_file_without_headers_is_marked_and_reads_back_null_headers(cluster: sparklog.Cluster) -> None:
    cluster.create_topic("marks", partitions=1)
    with cluster.producer() as producer:
        producer.send("marks", b"plain", partition=0)
        producer.flush()
        producer.send("marks", b"with", partition=0, headers=[("h", b"1")])
        producer.send("marks", b"without", partition=0)
        producer.flush()
    table = leader_table(cluster, "marks")
    dt = table.snapshot()
    plain, mixed = table.files(dt)
    marks = [pq.ParquetFile(table.full_path(e.path)).metadata.metadata or {} for e in (plain, mixed)]
    assert [set(NO_HEADERS) <= set(m) for m in marks] == [True, False]
    rows = read_ranges(table, dt, {0: (0, 3)})
    assert rows.column("headers").to_pylist() == [None, [{"key": "h", "value": b"1"}], None]
    assert rows.schema.field("headers").type == FILE_SCHEMA.field("headers").type


def test_a_range_inside_a_file_of_many_row_groups(tmp_path: Path) -> None:
    offsets = pa.array(range(100, 1100), pa.int64())
    rows = pa.table(
        {
            "offset": offsets,
            "timestamp": pa.array([1_700_000_000_000_000] * 1000, FILE_SCHEMA.field("timestamp").type),
            "timestampType": pa.array([0] * 1000, pa.int32()),
            "key": pa.nulls(1000, pa.binary()),
            "value": pa.array([b"%d" % i for i in range(1000)], pa.binary()),
            "headers": pa.nulls(1000, FILE_SCHEMA.field("headers").type),
        },
        schema=FILE_SCHEMA,
    )
    path = str(tmp_path / "many-groups.parquet")
    pq.write_table(rows, path, row_group_size=64, write_statistics=["offset", "timestamp"])
    assert pq.ParquetFile(path).metadata.num_row_groups == 16
    read = read_segment_range(
        LocalTableStorage(str(tmp_path)), "many-groups.parquet", 0, "t", 530, 700, include_headers=True
    )
    assert read.column("offset").to_pylist() == list(range(530, 700))
    assert read.column("value").to_pylist() == [b"%d" % (o - 100) for o in range(530, 700)]
    assert (
        read_segment_range(
            LocalTableStorage(str(tmp_path)), "many-groups.parquet", 0, "t", 2000, 3000, include_headers=False
        ).num_rows
        == 0
    )


def test_the_file_listing_follows_commits_and_a_recreated_topic(cluster: sparklog.Cluster) -> None:
    cluster.create_topic("relisted", partitions=1)
    produce_files(cluster, "relisted", files=3, records_per_file=2)
    table = leader_table(cluster, "relisted")
    assert [e.base_offset for e in table.files(table.snapshot())] == [0, 2, 4]
    produce_files(cluster, "relisted", files=1, records_per_file=2)
    assert [e.base_offset for e in table.files(table.snapshot())] == [0, 2, 4, 6]
    assert table.log_starts(table.snapshot()) == {0: 0}

    version = table.snapshot().version()

    cluster.delete_topic("relisted")
    cluster.create_topic("relisted", partitions=1)
    # as many commits as before: the new table reaches the version the old one was listed at
    produce_files(cluster, "relisted", files=4, records_per_file=1)
    assert table.snapshot().version() == version
    # the same object as before the deletion lists the new table, not the old one's files
    assert [e.base_offset for e in table.files(table.snapshot())] == [0, 1, 2, 3]
    again = leader_table(cluster, "relisted")
    assert [e.base_offset for e in again.files(again.snapshot())] == [0, 1, 2, 3]


def test_the_log_end_is_current_on_threads_with_an_old_snapshot_or_none(cluster: sparklog.Cluster) -> None:
    cluster.create_topic("ends", partitions=1)
    produce_files(cluster, "ends", files=1, records_per_file=2)
    table = leader_table(cluster, "ends")
    ends: dict[str, int] = {}

    def on_a_new_thread(name: str, take_snapshot: bool) -> None:
        if take_snapshot:
            table.snapshot()  # this thread's snapshot, left behind by the commits below
        ends[name] = table.current_log_end(0)

    old = threading.Thread(target=on_a_new_thread, args=("warm", True))
    old.start()
    old.join()
    assert table.current_log_end(0) == 2  # this thread's snapshot is at the first produce
    produce_files(cluster, "ends", files=3, records_per_file=1)
    for name, take_snapshot in (("none", False), ("fresh", True)):
        thread = threading.Thread(target=on_a_new_thread, args=(name, take_snapshot))
        thread.start()
        thread.join()
    assert table.current_log_end(0) == 5, "this thread's snapshot is three commits behind"
    assert ends == {"warm": 2, "none": 5, "fresh": 5}
