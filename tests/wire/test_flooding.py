"""A client flooding one connection with tiny Produce requests (DESIGN §15, backpressure):
the broker reads a connection's requests one at a time, answers each in order, loses and
doubles nothing, and its memory stays bounded however much the client has queued."""

from __future__ import annotations

import threading
from pathlib import Path

import sparklog
from sparklog.testing.brokers import BrokerAgents
from sparklog.testing.metrics import scrape
from tests.wire.conftest import create_led_topic
from tests.wire.raw import produce_answer, produce_frame, recv_frame

TOPIC = "flood"
REQUESTS = 10_000


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
    frames = [produce_frame(TOPIC, i, b"v%d" % i) for i in range(REQUESTS)]
    peak_rss = rss_before
    answers: list[tuple[int, int, int]] = []
    with socket.create_connection(("127.0.0.1", one_broker.port(1)), timeout=120) as sock:
        # Everything at once: the client never waits for an answer before sending on.
        sender = threading.Thread(target=sock.sendall, args=(b"".join(frames),), daemon=True)
        sender.start()
        while len(answers) < REQUESTS:
            answers.append(produce_answer(recv_frame(sock)))
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


def test_a_disk_brokers_connection_reads_sixteen_produce_requests_ahead(
    one_broker: BrokerAgents, cluster: sparklog.Cluster
) -> None:
    """400 one-record requests sent at once on one connection to a broker on a local disk:
    16 may be unanswered at a time, so each commit round carries at most 16 of them and at
    least 25 rounds are made. Reading 1,024 ahead they shared a few rounds, and a flooding
    librdkafka client's backlog came into the broker as one-record requests instead of being
    batched in the client's queue (case (n): half the records delivered)."""
    import socket

    requests = 400
    create_led_topic(cluster, one_broker, TOPIC, 1)
    with socket.create_connection(("127.0.0.1", one_broker.port(1)), timeout=60) as sock:
        sock.sendall(b"".join(produce_frame(TOPIC, i, b"d%d" % i) for i in range(requests)))
        answers = [produce_answer(recv_frame(sock)) for _ in range(requests)]
    assert [a[:2] for a in answers] == [(i, 0) for i in range(requests)], "answered in order, without errors"
    rounds = scrape(one_broker.metrics_url(1)).series("sparklog_commit_round_records_count")
    made = sum(count for labels, count in rounds.items() if dict(labels).get("topic") == TOPIC)
    assert made >= requests / 16, f"{made} commit rounds for {requests} requests: more than 16 read ahead"
