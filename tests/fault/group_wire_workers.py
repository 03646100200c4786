"""A Kafka-client group member run as a separate process, so a test can kill it with -9."""

from __future__ import annotations

import sys
import time

from confluent_kafka import Consumer


def consume_and_commit(bootstrap: str, group: str, topic: str, out_path: str, session_timeout_ms: str) -> None:
    """Consume ``topic`` in ``group``, committing each record synchronously and then appending
    ``partition offset`` to ``out_path``: a line there is a record whose commit was acknowledged."""
    client = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": int(session_timeout_ms),
            "heartbeat.interval.ms": 200,
            "client.id": "doomed",
        }
    )
    client.subscribe([topic])
    with open(out_path, "a", encoding="utf-8") as out:
        while True:
            message = client.poll(0.1)
            if message is None or message.error() is not None:
                continue
            client.commit(message=message, asynchronous=False)
            out.write(f"{message.partition()} {message.offset()}\n")
            out.flush()
            time.sleep(0.02)  # leave records for the survivor


if __name__ == "__main__":
    consume_and_commit(*sys.argv[1:6])
