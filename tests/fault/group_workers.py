"""Child-process entry points of the consumer-group fault tests (started by ``spawn``).

A member process subscribes, polls, and writes what it saw to an append-only journal
(fsynced per poll, so a ``kill -9`` loses at most an incomplete last line):

    R <partition> <offset>        a record returned by poll
    A <generation> <p,p,...>      an assignment adopted (after the consume of its records)
    C ok|rejected <error> <json>  a commit attempt and its outcome

It commits after journaling each non-empty poll (at-least-once), right after being resumed
from SIGSTOP, and stops cleanly, with a final commit, when its stop file appears.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import sparklog
from sparklog.errors import GroupError, ZooKeeperUnavailableError


class Journal:
    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.pending: list[str] = []

    def add(self, line: str) -> None:
        self.pending.append(line + "\n")

    def flush(self) -> None:
        if self.pending:
            os.write(self.fd, "".join(self.pending).encode())
            os.fsync(self.fd)
            self.pending.clear()


def read_journal(path: str | os.PathLike[str]) -> list[list[str]]:
    text = Path(path).read_text() if Path(path).exists() else ""
    return [line.split(" ", 3) for line in text.split("\n")[:-1]]


def member(
    options: Mapping[str, str], topic: str, group: str, journal_path: str, stop_path: str, config: Mapping[str, Any]
) -> None:
    cluster = sparklog.connect(options)
    journal = Journal(journal_path)
    consumer = cluster.consumer(group, **{"enable_auto_commit": False, "auto_offset_reset": "earliest", **config})
    last_assignment: tuple[int, frozenset[tuple[str, int]]] | None = None
    # A member resumed after SIGSTOP commits what it holds at once, as an application's
    # commit timer would: that commit must be rejected (its session expired meanwhile).
    # It commits the offsets it last processed (its own record, as an application keeps one),
    # even if the consumer already noticed the lost session and dropped its partitions.
    resumed: list[int] = []
    held: dict[tuple[str, int], int] = {}
    signal.signal(signal.SIGCONT, lambda *_: resumed.append(1))
    consumer.subscribe([topic])
    try:
        while not os.path.exists(stop_path):
            if resumed and held:
                resumed.clear()
                commit(consumer, journal, held)
            records = consumer.poll(50, max_records=50)
            generation = consumer.group_metadata().generation
            current = (generation, frozenset(consumer.assignment()))
            if current != last_assignment and consumer.assignment():
                journal.add(f"A {generation} {','.join(str(p) for _t, p in sorted(current[1]))}")
                last_assignment = current
            for r in records:
                journal.add(f"R {r.partition} {r.offset}")
                held[(r.topic, r.partition)] = r.offset + 1
            journal.flush()
            if records:
                commit(consumer, journal)
        commit(consumer, journal)
    finally:
        consumer.close()
        cluster.close()


def commit(consumer: Any, journal: Journal, offsets: dict[tuple[str, int], int] | None = None) -> None:
    positions = offsets if offsets is not None else {tp: consumer.position(tp) for tp in consumer.assignment()}
    if not positions:
        return
    text = json.dumps({str(p): o for (_t, p), o in positions.items()})
    for _attempt in range(20):
        try:
            consumer.commit(positions)
            journal.add(f"C ok - {text}")
            break
        except GroupError as exc:
            journal.add(f"C rejected {type(exc).__name__} {text}")
            break
        except ZooKeeperUnavailableError:  # a resumed process: its session is being replaced
            time.sleep(0.25)
    journal.flush()


def produce_forever(options: Mapping[str, str], topic: str, stop_path: str, out_path: str) -> None:
    """Keep producing small batches until the stop file appears; write the total at the end."""
    cluster = sparklog.connect(options)
    sent = 0
    with cluster.producer(linger_ms=0) as producer:
        while not os.path.exists(stop_path):
            for _ in range(20):
                producer.send(topic, value=f"r{sent}".encode(), key=f"k{sent}".encode())
                sent += 1
            producer.flush()
            time.sleep(0.05)
    Path(out_path).write_text(str(sent))
    cluster.close()
