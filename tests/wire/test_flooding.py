"""A client flooding one connection with tiny Produce requests (DESIGN §15, backpressure):
the broker reads a connection's requests one at a time, answers each in order, loses and
doubles nothing, and its memory stays bounded however much the client has queued."""

from __future__ import annotations

import struct
import threading
from pathlib import Path

from kafka.record.default_records import DefaultRecordBatchBuilder

import sparklog
from sparklog.testing.brokers import BrokerAgents
from tests.wire.conftest import create_led_topic
from tests.wire.raw import recv_frame

TOPIC = "flood"
REQUESTS = 10_000
PRODUCE_V3 = (0, 3)


def one_record_batch(value: bytes) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    builder.append(0, timestamp=None, key=None, value=value, headers=[])
    return bytes(builder.build())


def produce_frame(correlation_id: int, value: bytes) -> bytes:
    """A whole Produce v3 frame (acks=all, 30 s timeout) of one one-record batch to partition 0."""
    topic = TOPIC.encode()
    batch = one_record_batch(value)
    body = (
        struct.pack(">hhi", -1, -1, 30_000)
        + struct.pack(">ih", 1, len(topic))
        + topic
        + struct.pack(">iii", 1, 0, len(batch))
        + batch
    )
    header = struct.pack(">hhih", *PRODUCE_V3, correlation_id, 3) + b"raw"
    return struct.pack(">i", len(header) + len(body)) + header + body


def answer(frame: bytes) -> tuple[int, int, int]:
    """(correlation id, error code, base offset) of a one-partition Produce v3 response."""
    correlation_id, _topics, name_len = struct.unpack_from(">iih", frame)
    at = 10 + name_len
    _partitions, _partition, error_code, base_offset = struct.unpack_from(">iihq", frame, at)
    return correlation_id, error_code, base_offset


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


def test_ten_thousand_pipelined_one_record_produces(one_broker: BrokerAgents, cluster: sparklog.Cluster) -> None:
    import socket

    create_led_topic(cluster, one_broker, TOPIC, 1)
    pid = one_broker.pid(1)
    rss_before = rss_bytes(pid)
    frames = [produce_frame(i, b"v%d" % i) for i in range(REQUESTS)]
    peak_rss = rss_before
    answers: list[tuple[int, int, int]] = []
    with socket.create_connection(("127.0.0.1", one_broker.port(1)), timeout=120) as sock:
        # Everything at once: the client never waits for an answer before sending on.
        sender = threading.Thread(target=sock.sendall, args=(b"".join(frames),), daemon=True)
        sender.start()
        while len(answers) < REQUESTS:
            answers.append(answer(recv_frame(sock)))
            if len(answers) % 500 == 0:
                peak_rss = max(peak_rss, rss_bytes(pid))
        sender.join(30)
    assert not sender.is_alive()
    out_of_order = [(i, a[0]) for i, a in enumerate(answers) if a[0] != i][:5]
    assert out_of_order == [], f"answers out of request order (index, correlation id): {out_of_order}"
    failed = [a for a in answers if a[1] != 0][:5]
    assert failed == [], f"requests answered with an error (correlation id, code, offset): {failed}"
    # One record per request, one connection, in order: request i is stored at offset i.
    misplaced = [(i, a[2]) for i, a in enumerate(answers) if a[2] != i][:5]
    assert misplaced == [], f"base offsets out of request order (request, offset): {misplaced}"
    stored = cluster.read(TOPIC)
    values = dict(zip(stored.column("offset").to_pylist(), stored.column("value").to_pylist(), strict=True))
    assert len(values) == stored.num_rows == REQUESTS, f"{stored.num_rows} rows for {REQUESTS} requests"
    wrong = [(o, v) for o, v in sorted(values.items()) if v != b"v%d" % o][:5]
    assert wrong == [], f"records not stored once each at their request's offset: {wrong}"
    grown_mib = (peak_rss - rss_before) / 2**20
    assert grown_mib < 200, f"the broker grew {grown_mib:.0f} MiB while the client flooded it"
