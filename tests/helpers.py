"""Shared test helpers: log-invariant checks, cluster-state snapshots, batch builders.

Every ``assert_*`` helper names what broke and where (first gap, first duplicate, the
record that moved), so a failing invariant test explains itself.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.context import SpawnContext
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pyarrow as pa
import pytest
from confluent_kafka import Message

from sparklog.cluster import Cluster
from sparklog.metadata.zkdata import GroupStateRecord
from sparklog.model.batches import normalise_input

if TYPE_CHECKING:
    from pyspark.sql.streaming import DataStreamWriter

# A test (or module, as ``pytestmark``) that runs twice: topic tables on a local log dir and
# on an s3:// log dir on moto (the ``log_store`` fixture of tests/conftest.py).
BOTH_STORES = pytest.mark.parametrize("log_store", ["local", "s3"], indirect=True)


def spawn_context() -> SpawnContext:
    """Child processes always start by spawn: deltalake panics in forked children."""
    return multiprocessing.get_context("spawn")


def in_threads(target: Callable[[int], object], count: int) -> None:
    """``target(0) .. target(count - 1)`` at once, a thread each; the first error raised in
    any of them is raised here once all have ended."""
    errors: list[BaseException] = []

    def run(index: int) -> None:
        try:
            target(index)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def consumed(message: Message) -> tuple[int, int, bytes]:
    """``(partition, offset, value)`` of a record a confluent-kafka consumer returned: its types
    leave them optional, unset only on error events (which callers check first) and tombstones
    (which these tests never consume)."""
    partition, offset, value = message.partition(), message.offset(), message.value()
    assert partition is not None and offset is not None and value is not None, message.error()
    return partition, offset, value


def group_state(cluster: Cluster, group_id: str) -> GroupStateRecord:
    """The group's state record in ZooKeeper (the group must have one)."""
    record, _version = cluster.groups.registry.state_record(group_id)
    assert record is not None, f"group {group_id} has no state record"
    return record


def send_signal(process: BaseProcess, signum: int) -> None:
    """``kill -<signum>`` a started child process."""
    assert process.pid is not None, f"{process.name} was never started"
    os.kill(process.pid, signum)


P = TypeVar("P", bound=BaseProcess)


@contextmanager
def reaping(processes: list[P]) -> Iterator[list[P]]:
    """On the way out (also when a test fails), SIGKILL and reap any child still running, so
    no producer outlives its test. ``processes`` may grow inside the block."""
    try:
        yield processes
    finally:
        for process in processes:
            if process.pid is not None and process.exitcode is None:
                try:
                    os.kill(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                process.join(10)


# -- log invariants ------------------------------------------------------------------------
@dataclass(frozen=True)
class Ack:
    """An acknowledged record as a producer saw it."""

    partition: int
    offset: int
    value: bytes


@dataclass(frozen=True)
class StoredRecord:
    partition: int
    offset: int
    value: bytes | None


def assert_contiguous(offsets: Sequence[int], partition: int, start: int = 0) -> None:
    """``offsets`` (any order) are exactly ``start .. start + len - 1``: no duplicate, no gap."""
    ordered = sorted(offsets)
    counts = Counter(ordered)
    duplicates = sorted(o for o, n in counts.items() if n > 1)
    assert not duplicates, (
        f"partition {partition}: duplicate offsets, first {duplicates[0]} (stored {counts[duplicates[0]]}x); "
        f"{len(duplicates)} offsets duplicated in total"
    )
    for expected, actual in enumerate(ordered, start):
        assert actual == expected, (
            f"partition {partition}: offsets not contiguous from {start}: expected {expected}, found {actual} "
            f"(first gap {expected}..{actual - 1}); {len(ordered)} offsets, max {ordered[-1]}"
        )


def stored_records(cluster: Cluster, topic: str) -> list[StoredRecord]:
    """Every committed record of ``topic`` (log-start to high watermark), via ``Cluster.read``."""
    table = cluster.read(topic, include_headers=False)
    return [
        StoredRecord(p, o, v)
        for p, o, v in zip(
            table.column("partition").to_pylist(),
            table.column("offset").to_pylist(),
            table.column("value").to_pylist(),
            strict=False,
        )
    ]


def by_partition(records: Iterable[StoredRecord]) -> dict[int, list[StoredRecord]]:
    result: dict[int, list[StoredRecord]] = {}
    for record in records:
        result.setdefault(record.partition, []).append(record)
    return result


def assert_log_consistent(cluster: Cluster, topic: str, expected_log_start: int | None = 0) -> list[StoredRecord]:
    """Invariant 1 over the whole topic: per partition, offsets are contiguous from log-start
    to the high watermark, and the high watermark equals the number of stored records.
    Without retention the log starts at ``expected_log_start`` = 0 (None: don't check)."""
    records = stored_records(cluster, topic)
    grouped = by_partition(records)
    offsets = cluster.partition_offsets(topic)
    for partition, (log_start, high_watermark) in offsets.items():
        if expected_log_start is not None:
            assert log_start == expected_log_start, (
                f"partition {partition}: log starts at {log_start}, expected {expected_log_start}"
            )
        stored = [r.offset for r in grouped.get(partition, [])]
        assert_contiguous(stored, partition, start=log_start)
        assert log_start + len(stored) == high_watermark, (
            f"partition {partition}: high watermark {high_watermark} but {len(stored)} records from log-start {log_start}"
        )
    unknown = set(grouped) - set(offsets)
    assert not unknown, f"records stored in partitions {sorted(unknown)} the topic does not have"
    return records


def assert_values_unique(records: Iterable[StoredRecord]) -> None:
    places: dict[bytes | None, list[tuple[int, int]]] = {}
    for r in records:
        places.setdefault(r.value, []).append((r.partition, r.offset))
    twice = sorted((sorted(at), v) for v, at in places.items() if len(at) > 1)
    shown = "; ".join(f"{v!r} at (partition, offset) {at}" for at, v in twice[:5])
    assert not twice, f"{len(twice)} values stored more than once, the first: {shown}"


def assert_acks_stored(records: Iterable[StoredRecord], acks: Iterable[Ack]) -> None:
    """Every acknowledged record is stored exactly at its acknowledged (partition, offset)."""
    at = {(r.partition, r.offset): r.value for r in records}
    where: dict[bytes | None, list[tuple[int, int]]] = {}
    for (partition, offset), value in at.items():
        where.setdefault(value, []).append((partition, offset))
    # (ack, what is stored at its offset, where its value is stored)
    missing: list[tuple[Ack, bytes | None, list[tuple[int, int]] | None]] = []
    moved: list[tuple[Ack, bytes | None, list[tuple[int, int]] | None]] = []
    count = 0
    for ack in acks:
        count += 1
        stored = at.get((ack.partition, ack.offset))
        if stored != ack.value:
            (missing if ack.value not in where else moved).append((ack, stored, where.get(ack.value)))
    assert not missing and not moved, (
        f"of {count} acknowledged records, {len(missing)} are missing and {len(moved)} are stored elsewhere; "
        f"first: {(missing or moved)[0][0]} -> found {(missing or moved)[0][1]!r} at its offset, "
        f"value stored at {(missing or moved)[0][2]}"
    )


def assert_acks_unique(acks: Sequence[Ack]) -> None:
    """No two acknowledgements name the same (partition, offset) or the same value."""
    positions = Counter((a.partition, a.offset) for a in acks)
    shared = [p for p, n in positions.items() if n > 1]
    assert not shared, f"{len(shared)} (partition, offset) pairs acknowledged twice, e.g. {shared[0]}"
    values = Counter(a.value for a in acks)
    again = [v for v, n in values.items() if n > 1]
    assert not again, f"{len(again)} values acknowledged twice, e.g. {again[0]!r}"


# -- "changes nothing" ---------------------------------------------------------------------
@dataclass(frozen=True)
class ClusterState:
    znodes: dict[str, tuple[bytes, int]]  # path -> (data, data version), relative to the chroot
    files: dict[str, int]  # path under sparklog.home -> size

    def diff(self, other: ClusterState) -> list[str]:
        lines = []
        for kind, mine, theirs in (("znode", self.znodes, other.znodes), ("file", self.files, other.files)):
            lines += [f"+ {kind} {p}" for p in sorted(set(theirs) - set(mine))]
            lines += [f"- {kind} {p}" for p in sorted(set(mine) - set(theirs))]
            lines += [f"~ {kind} {p}" for p in sorted(set(mine) & set(theirs)) if mine[p] != theirs[p]]
        return lines


def cluster_state(cluster: Cluster, home: Path) -> ClusterState:
    """Every znode under the cluster's chroot and every file under ``home`` (except ZooKeeper's own)."""
    client = cluster.replicas.zk.client
    znodes: dict[str, tuple[bytes, int]] = {}
    stack = ["/"]
    while stack:
        path = stack.pop()
        data, stat = client.get(path)
        znodes[path] = (data, stat.version)
        for child in client.get_children(path):
            stack.append(path.rstrip("/") + "/" + child)
    files = {}
    for root, _dirs, names in os.walk(home):
        for name in names:
            full = Path(root, name)
            files[str(full.relative_to(home))] = full.stat().st_size
    return ClusterState(znodes, files)


def topic_dirs(home: Path) -> list[str]:
    root = home / "data" / "topics"
    return sorted(p.name for p in root.iterdir()) if root.is_dir() else []


@contextmanager
def assert_unchanged(cluster: Cluster, home: Path) -> Iterator[None]:
    """The block changes no znode, no file, no topic (DESIGN invariant 10)."""
    before_topics = cluster.list_topics()
    before = cluster_state(cluster, home)
    yield
    assert cluster.list_topics() == before_topics, f"topics changed: {before_topics} -> {cluster.list_topics()}"
    changes = before.diff(cluster_state(cluster, home))
    assert not changes, "the failed call changed the cluster:\n" + "\n".join(changes[:20])


# -- building input ------------------------------------------------------------------------
def segment_batch(values: Sequence[bytes], keys: Sequence[bytes | None] | None = None) -> pa.Table:
    """Records in the shape :func:`sparklog.log.append.append` takes (no offsets)."""
    columns: dict[str, pa.Array] = {"value": pa.array(list(values), pa.binary())}
    if keys is not None:
        columns["key"] = pa.array(list(keys), pa.binary())
    table, _partitions = normalise_input(pa.table(columns), 1, "unused", 1 << 30)
    return table


def wait_until(condition: Callable[[], Any], what: str, timeout_s: float = 30.0, interval_s: float = 0.05) -> Any:
    """Poll ``condition`` until it returns something true, and return that."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(interval_s)


def wait_for(condition: Callable[[], bool], timeout_s: float, what: str, interval_s: float = 0.02) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(interval_s)


def pids_naming(path: Path) -> list[int]:
    """Live processes whose command line names ``path`` (resolved): a background server of a
    home (``zoo.cfg``, ``broker.properties``), found independently of the code under test."""
    marker = str(path.resolve()).encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if marker in argv:  # zombies have an empty cmdline, so they never match
            pids.append(int(entry.name))
    return pids


def _at_once(barrier: Any, out: Any, target: Callable[..., object], args: tuple[Any, ...]) -> None:
    barrier.wait(timeout=30)
    out.put(target(*args))


def results_at_once(
    target: Callable[..., object], args: tuple[Any, ...], processes: int, timeout_s: float
) -> list[Any]:
    """Call ``target(*args)`` in ``processes`` spawned children at the same moment (a barrier)
    and return what each returned; every child must exit cleanly."""
    ctx = spawn_context()
    barrier = ctx.Barrier(processes)
    out = ctx.Queue()
    children = [ctx.Process(target=_at_once, args=(barrier, out, target, args)) for _ in range(processes)]
    for child in children:
        child.start()
    try:
        results = [out.get(timeout=timeout_s) for _ in children]
    finally:
        for child in children:
            child.join(timeout=30)
    assert all(child.exitcode == 0 for child in children), [child.exitcode for child in children]
    return results


@contextmanager
def leaving_no_server(home: Path, stop: Callable[[Path], object], marker: str) -> Iterator[Path]:
    """``home`` for a test of a background server of it: on the way out the server is stopped
    with ``stop`` and whatever still names ``home / marker`` is killed (never leak one)."""
    try:
        yield home
    finally:
        stop(home)
        for pid in pids_naming(home / marker):
            os.kill(pid, signal.SIGKILL)


def partition_counts(records: Iterable[StoredRecord]) -> dict[int, int]:
    return dict(sorted(Counter(r.partition for r in records).items()))


def values_at(records: Iterable[StoredRecord], partition: int) -> list[bytes | None]:
    return [r.value for r in sorted((r for r in records if r.partition == partition), key=lambda r: r.offset)]


# ``python -c NO_PYSPARK <module> args...`` runs ``module`` as ``python -m`` would (argv[0] its
# name), then fails with exit code 99 if it imported pyspark: metadata commands and job
# argument checks must not start Spark.
NO_PYSPARK = """\
import runpy, sys
module = sys.argv.pop(1)
sys.argv[0] = module
try:
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    code = 0
except SystemExit as exc:
    code = exc.code
if "pyspark" in sys.modules:
    sys.stderr.write("pyspark was imported\\n")
    code = 99
sys.exit(code)
"""


def run_available_now(writer: DataStreamWriter, checkpoint: Path, timeout_s: int = 120) -> None:
    """Run a streaming query over what its sources hold now (``availableNow``) to its end,
    checkpointed in ``checkpoint``; fail with the query's own error."""
    query = writer.option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
    finished = query.awaitTermination(timeout_s)
    assert query.exception() is None, f"the streaming query failed: {query.exception()}"
    assert finished, f"the streaming query was still running after {timeout_s} s"
