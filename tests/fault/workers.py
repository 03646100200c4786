"""Child-process entry points of the fault and concurrency tests (started by ``spawn``).

Each function is top level so a spawned child can import it. Children talk back through
files (append-only, fsynced: they survive ``kill -9``) or multiprocessing queues.
"""

from __future__ import annotations

import json
import os
import traceback
from collections.abc import Mapping
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier, Event
from pathlib import Path
from typing import Any

import sparklog
from sparklog.errors import SparklogError

ACK_FORMAT = "{partition} {offset} {value}\n"


# -- ack logs ------------------------------------------------------------------------------
class AckLog:
    """Append-only record of acknowledged sends; each line is on disk before the next send."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def record(self, partition: int, offset: int, value: bytes) -> None:
        line = ACK_FORMAT.format(partition=partition, offset=offset, value=value.decode("ascii"))
        os.write(self.fd, line.encode("ascii"))
        os.fsync(self.fd)


def read_ack_log(path: str | os.PathLike[str]) -> list[tuple[int, int, bytes]]:
    """Complete lines of an ack log; a line cut by ``kill -9`` was never a full ack record."""
    text = Path(path).read_bytes().decode("ascii") if Path(path).exists() else ""
    result = []
    for line in text.split("\n")[:-1]:  # the text after the last newline is incomplete
        partition, offset, value = line.split(" ")
        result.append((int(partition), int(offset), value.encode("ascii")))
    return result


# -- producers -----------------------------------------------------------------------------
def produce_batches(
    options: Mapping[str, str], topic: str, worker: int, batches: int, per_batch: int, out_path: str, start: Event
) -> None:
    """Produce ``batches`` x ``per_batch`` unique values, one flush per batch; write the acks as JSON."""
    cluster = sparklog.connect(options)
    acks: list[tuple[int, int, str]] = []
    try:
        with cluster.producer(linger_ms=60_000, batch_size=1 << 30, acks="all", writer_lease_ms=5000) as producer:
            cluster.describe_topic(topic)  # connect before the start line
            start.wait(60)
            for b in range(batches):
                values = [f"w{worker}-b{b}-r{i}" for i in range(per_batch)]
                # Odd batches go to one partition (by key), even ones round-robin over all of
                # them: requests contend both for single partitions and for whole sets of them.
                key = f"w{worker}-b{b}".encode() if b % 2 else None
                futures = [producer.send(topic, v.encode(), key=key) for v in values]
                producer.flush()
                for value, future in zip(values, futures, strict=False):
                    meta = future.result()
                    acks.append((meta.partition, meta.offset, value))
    finally:
        Path(out_path).write_text(json.dumps(acks))
        cluster.close()


def produce_until_killed(
    options: Mapping[str, str],
    topic: str,
    tag: str,
    ack_path: str,
    ready_path: str,
    lease_ms: int,
    limit: int | None = None,
) -> None:
    """Produce small batches with acks=all forever (or ``limit`` records), logging each ack;
    every other batch is one keyed ``send_arrow`` request.

    A failed send (e.g. fenced after a long pause) is not acknowledged and not logged; the
    loop goes on. ``ready_path`` appears once the producer is about to send.
    """
    cluster = sparklog.connect(options)
    producer = cluster.producer(acks="all", linger_ms=0, writer_lease_ms=lease_ms, max_block_ms=60_000)
    partitions = len(cluster.partitions_of(topic))
    log = AckLog(ack_path)
    Path(ready_path).touch()
    sent = 0
    while limit is None or sent < limit:
        if (sent // ARROW_BATCH) % 2:
            _send_arrow_batch(producer, topic, partitions, f"{tag}-a{sent}", log)
        else:
            values = [f"{tag}-{sent + i}".encode() for i in range(ARROW_BATCH)]
            futures = [(v, producer.send(topic, v)) for v in values]
            for value, future in futures:
                try:
                    meta = future.result()
                except SparklogError:
                    continue
                log.record(meta.partition, meta.offset, value)
        sent += ARROW_BATCH
    producer.close()
    cluster.close()


ARROW_BATCH = 5


def arrow_batch_id(value: bytes) -> str | None:
    """``<tag>-a<n>-<row>`` values come from one ``send_arrow`` call: its id is ``<tag>-a<n>``."""
    head, _, _row = value.decode("ascii").rpartition("-")
    return head if "-a" in head else None


def _send_arrow_batch(producer: Any, topic: str, partitions: int, batch_id: str, log: AckLog) -> None:
    """One keyed ``send_arrow`` request (one commit over several partitions), acks logged per row."""
    import pyarrow as pa

    from sparklog.model.records import partition_for_key

    values = [f"{batch_id}-{i}".encode() for i in range(ARROW_BATCH)]
    keys = [b"k%d" % i for i in range(ARROW_BATCH)]
    try:
        meta = producer.send_arrow(topic, pa.table({"key": keys, "value": values}))
    except SparklogError:
        return
    next_offset = {p: first for p, (first, _count) in meta.offsets.items()}
    for key, value in zip(keys, values, strict=False):  # rows keep their order within a partition
        p = partition_for_key(key, partitions)
        log.record(p, next_offset[p], value)
        next_offset[p] += 1


# -- zombie writer -------------------------------------------------------------------------
def zombie_writer(
    options: Mapping[str, str],
    topic: str,
    lease_ms: int,
    snapshot_before_pause: bool,
    alive_path: str,
    ready: Event,
    go: Event,
    results: Queue,
) -> None:
    """Take partition 0's lease, (maybe) snapshot and write a segment, then wait to be paused.

    After ``go`` it tries to finish the append as a writer that slept through losing its
    lease would: commit on its old snapshot, then retry through ``append`` with its old
    epoch. Reports ``{"epoch", "commit", "append"}`` (outcome names) on ``results``.
    """
    from sparklog.log.append import append
    from sparklog.log.segment import write_segment
    from sparklog.log.table import CommitConflict, end_app_id, fence_app_id
    from sparklog.metadata.lease import WriterLease
    from tests.helpers import segment_batch

    report: dict[str, Any] = {}
    try:
        cluster = sparklog.connect(options)
        table = cluster.replicas.leader_table(topic)
        lease = WriterLease(cluster.replicas.zk, topic, 0, "zombie", lease_ms)
        grant = lease.acquire(10_000, table.fence_epoch(table.snapshot(), 0))
        report["epoch"] = grant.epoch
        # An ephemeral znode of this session: the parent sees it vanish when the session expires.
        cluster.replicas.zk.client.create(alive_path, b"", ephemeral=True, makepath=True)
        batch = segment_batch([b"zombie-%d" % i for i in range(5)])
        dt = segment = None
        if snapshot_before_pause:
            dt = table.snapshot()
            segment = write_segment(table.storage, 0, table.log_end(dt, 0), batch)
        ready.set()
        go.wait(60)  # the parent SIGSTOPs us while we wait here
        if dt is not None and segment is not None:
            transactions = {fence_app_id(0): grant.epoch, end_app_id(0): segment.last_offset + 1}
            try:
                table.commit(dt, [segment], transactions, {"writer": "zombie"})
                report["commit"] = "committed"
            except CommitConflict:
                report["commit"] = "CommitConflict"
        try:
            result = append(table, {0: grant.epoch}, {0: batch})
            report["append"] = f"appended at {result.base_offsets}"
        except SparklogError as exc:
            report["append"] = type(exc).__name__
            report["append_message"] = str(exc)
    except BaseException:
        report["error"] = traceback.format_exc()
    results.put(report)


# -- idempotence -------------------------------------------------------------------------
def idempotent_appends(
    options: Mapping[str, str],
    topic: str,
    producer_id: str,
    rounds: int,
    barrier: Barrier,
    results: Queue,
) -> None:
    """For each round: wait at the barrier with the rival process, then append the round's
    batch with the shared producer id and sequence. Reports (round, duplicate, base offsets)."""
    from sparklog.log.append import append
    from tests.helpers import segment_batch

    try:
        cluster = sparklog.connect(options)
        table = cluster.replicas.leader_table(topic)
        table.snapshot()  # open the table before the race
        for r in range(1, rounds + 1):
            batch = segment_batch([b"r%d-%d" % (r, i) for i in range(3)])
            barrier.wait(30)
            result = append(table, {0: 1, 1: 1}, {0: batch, 1: batch}, producer_id=producer_id, sequence=r)
            results.put((r, result.duplicate, result.base_offsets))
        cluster.close()
    except BaseException:
        results.put(("error", traceback.format_exc(), None))
