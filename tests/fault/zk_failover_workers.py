"""Child-process entry points of the ZooKeeper failover test (started by ``spawn``).

Unlike the other fault workers these never swallow an error: every exception a send, poll
or commit raises is written to the child's error log, since the test's claim is that a
ZooKeeper failover within the session timeout is invisible to the application.

* producer: ``<ack log>`` lines ``<partition> <offset> <value>`` (fsynced per ack);
* consumer journal: ``R <partition> <offset>`` per record polled, ``C <json>`` per
  successful commit;
* error log (both): ``<operation> <exception type> <message>``.
"""

from __future__ import annotations

import json
import os
import traceback
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

import sparklog
from tests.fault.workers import AckLog

SEND_BATCH = 10  # records per round: SEND_BATCH single sends, then one send_arrow of SEND_BATCH rows


class ErrorLog:
    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def record(self, operation: str, exc: BaseException) -> None:
        message = " ".join(str(exc).split())  # one line per error
        os.write(self.fd, f"{operation} {type(exc).__name__} {message}\n".encode())
        os.fsync(self.fd)


def read_lines(path: str | os.PathLike[str]) -> list[str]:
    """Complete lines only: a line cut by a kill was never fully written."""
    text = open(path, encoding="utf-8").read() if os.path.exists(path) else ""
    return text.split("\n")[:-1]


def produce_through_failover(
    options: Mapping[str, str], topic: str, tag: str, acks: str, ack_path: str, error_path: str, stop_path: str
) -> None:
    """Send unique values (``<tag>-<n>``) until the stop file appears: rounds of single sends
    and one ``send_arrow`` request; log every ack and every error; close cleanly."""
    errors = ErrorLog(error_path)
    try:
        cluster = sparklog.connect(options)
        producer = cluster.producer(acks=acks, linger_ms=2)
        partitions = len(cluster.partitions_of(topic))
        log = AckLog(ack_path)
        n = 0
        while not os.path.exists(stop_path):
            values = [f"{tag}-{n + i}".encode() for i in range(SEND_BATCH)]
            futures = []
            for value in values:
                try:
                    futures.append((value, producer.send(topic, value)))
                except Exception as exc:
                    errors.record("send", exc)
            for value, future in futures:
                try:
                    meta = future.result()
                except Exception as exc:
                    errors.record("send", exc)
                    continue
                log.record(meta.partition, meta.offset, value)
            n += SEND_BATCH
            _send_arrow(
                producer, topic, partitions, [f"{tag}-{n + i}".encode() for i in range(SEND_BATCH)], log, errors
            )
            n += SEND_BATCH
        producer.close()
        cluster.close()
    except BaseException as exc:
        errors.record("producer", RuntimeError(traceback.format_exc()))
        raise SystemExit(1) from exc


def _send_arrow(producer: Any, topic: str, partitions: int, values: list[bytes], log: AckLog, errors: ErrorLog) -> None:
    """One request (one commit) with rows for every partition, each row's partition explicit."""
    targets = [i % partitions for i in range(len(values))]
    try:
        meta = producer.send_arrow(topic, pa.table({"value": values, "partition": pa.array(targets, pa.int32())}))
    except Exception as exc:
        errors.record("send_arrow", exc)
        return
    next_offset = {p: first for p, (first, _count) in meta.offsets.items()}
    for value, partition in zip(values, targets, strict=False):  # rows keep their order within a partition
        log.record(partition, next_offset[partition], value)
        next_offset[partition] += 1


def consume_through_failover(
    options: Mapping[str, str],
    topic: str,
    group: str,
    journal_path: str,
    error_path: str,
    stop_path: str,
    config: Mapping[str, Any],
) -> None:
    """Subscribe, poll and commit after each non-empty poll until the stop file appears, then
    commit once more and close. Errors are logged and the loop goes on."""
    errors = ErrorLog(error_path)
    journal = os.open(journal_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        cluster = sparklog.connect(options)
        consumer = cluster.consumer(group, enable_auto_commit=False, auto_offset_reset="earliest", **config)
        consumer.subscribe([topic])
        while True:
            stopping = os.path.exists(stop_path)
            try:
                records = consumer.poll(100, max_records=200)
            except Exception as exc:
                errors.record("poll", exc)
                continue
            lines = [f"R {r.partition} {r.offset}\n" for r in records]
            if records or stopping:
                try:
                    positions = {tp: consumer.position(tp) for tp in consumer.assignment()}
                    consumer.commit(positions)
                    lines.append(f"C {json.dumps({str(p): o for (_t, p), o in sorted(positions.items())})}\n")
                except Exception as exc:
                    errors.record("commit", exc)
            if lines:
                os.write(journal, "".join(lines).encode())
                os.fsync(journal)
            if stopping:
                break
        consumer.close()
        cluster.close()
    except BaseException as exc:
        errors.record("consumer", RuntimeError(traceback.format_exc()))
        raise SystemExit(1) from exc
