"""Case (u): broker CPU per small Produce request: sparklog's broker agent and Apache Kafka's JVM.

What it measures: a raw Kafka client (one TCP connection, requests built here: Produce v3,
``acks=all``, one record batch of **1 record** — and then of **3 records** — of 100 random
bytes, keyless, uncompressed, no idempotence) sends 20,000 such requests (× ``--scale``, at
least 2,000), pipelined with up to 32 unanswered at a time (``linger.ms=0`` traffic from many
lone records: each request carries what one small produce call would), the partitions in turn
over the 6 of the topic. Every answer is checked (correlation id in order, error code 0).
Figures:

* the broker process's CPU time (user + system, ``/proc/<pid>/stat``, every thread) over the
  requests, less what the broker burns idle over the same wall time (measured for 2 s just
  before), ÷ the requests, in µs — both systems, the comparison with Kafka; it includes the
  commit rounds' work (files, fsync, the Delta commit) shared by the requests of a round.
  The raw figure without the idle correction, the idle rate and the requests per second are
  in the JSON;
* sparklog's own per-request CPU (issue 18 part 2: decode, checks, queueing, response), read
  from the broker's Prometheus endpoint: ``sparklog_request_cpu_seconds{request="Produce"}``
  (the thread CPU time of reading the request's frame, parsing, checking and queueing it,
  building, encoding and writing its answer), its ``_sum`` ÷ ``_count`` over the timed
  requests (scraped before and after), and its p50 / p99 over the last 1,024 of them. Kafka
  has no such figure; its column stays empty.

5,000 requests of each kind go first, untimed.

A raw client rather than librdkafka: at ``linger.ms=0`` librdkafka still batches whatever
queued while a request was in flight, so the records per request would depend on the broker's
speed; here every request carries exactly 1 (or 3) records whatever the broker does.

Systems (:mod:`benchmarks.wire`): sparklog's broker agent (the ``sparklog broker start``
process) and Apache Kafka (one KRaft node, the baseline; its figure includes the JIT compiler
and the garbage collector working in their own threads of the same process — the warm-up lets
the JIT compile the hot paths, but G1 and JIT threads still count, which is the JVM's real
cost), the same run, the order rotated by run. The mock has no broker process.

Target (issue 18): ≤ 50 µs of broker CPU per one-record request, applied to both figures.
"""

from __future__ import annotations

import random
import socket
import struct
import time
from typing import TYPE_CHECKING

from benchmarks.harness import BenchContext, CaseResult, Target
from benchmarks.wire import (
    BROKERS,
    PARTITIONS,
    VALUE_BYTES,
    Endpoint,
    Figures,
    compare,
    cpu_seconds,
    kafka_request,
    kafka_string,
    read_frame,
    systems_note,
    wire_metric,
)

if TYPE_CHECKING:  # the runner freezes sparklog's code before anything imports it
    from sparklog.testing.metrics import Scrape

CASE = "u"
TITLE = "broker CPU per small Produce request (raw client, pipelined, acks=all), sparklog vs Kafka"
TOPIC = "wire-cpu"
REQUESTS = 20_000
WARMUP = 5_000  # Kafka: enough calls for the JIT to compile the request path before the count
WINDOW = 32  # unanswered requests at most (sparklog reads up to 128 ahead per connection)
RECORDS_PER_REQUEST = (1, 3)
IDLE_SECONDS = 2.0
PRODUCE, PRODUCE_VERSION = 0, 3
ACKS_ALL = -1
TARGET_US = 50.0
REQUEST_CPU = "sparklog_request_cpu_seconds"  # the broker's per-request thread CPU (a summary)
_NOT_READY = {5, 6}  # LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER
_COUNTED_WAIT_S = 10.0  # a request is counted once its answer is written: just after the client read it


def record_batch(records: int, seed: int) -> bytes:
    """A v2 record batch of ``records`` keyless records of :data:`VALUE_BYTES` random bytes."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    rng = random.Random(seed)
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    now_ms = int(time.time() * 1000)
    for i in range(records):
        builder.append(i, timestamp=now_ms, key=None, value=rng.randbytes(VALUE_BYTES), headers=[])
    return bytes(builder.build())


def produce_body(topic: str, partition: int, batch: bytes) -> bytes:
    """Produce v3: no transactional id, acks, timeout, one topic with one partition's records."""
    return (
        struct.pack(">hhi", -1, ACKS_ALL, 30_000)
        + struct.pack(">i", 1)
        + kafka_string(topic)
        + struct.pack(">ii", 1, partition)
        + struct.pack(">i", len(batch))
        + batch
    )


def _error_code(frame: bytes, correlation_id: int) -> int:
    """topics[0].partitions[0].error_code of a Produce v3 answer, its correlation id checked."""
    got, _topics = struct.unpack_from(">ii", frame)
    name_len = struct.unpack_from(">h", frame, 8)[0]
    _partitions, _partition, error_code = struct.unpack_from(">iih", frame, 10 + name_len)
    if got != correlation_id:
        raise AssertionError(f"answer {got} (expected {correlation_id}): error code {error_code}")
    return int(error_code)


def _check_answer(frame: bytes, correlation_id: int) -> None:
    error_code = _error_code(frame, correlation_id)
    if error_code != 0:
        raise AssertionError(f"answer {correlation_id}: error code {error_code}")


def await_produce_accepted(bootstrap: str, topic: str, timeout_s: float = 30.0) -> None:
    """One Produce to each partition, again while the answer is NOT_LEADER_OR_FOLLOWER or
    LEADER_NOT_AVAILABLE: a Kafka broker names itself leader in Metadata a moment before its
    replica manager takes Produce requests, and the raw client does not retry as clients do."""
    host, port = bootstrap.rsplit(":", 1)
    deadline = time.monotonic() + timeout_s
    with socket.create_connection((host, int(port)), timeout=60) as sock, sock.makefile("rb") as stream:
        correlation_id = 0
        for partition in range(PARTITIONS):
            body = produce_body(topic, partition, record_batch(1, seed=partition))
            while True:
                correlation_id += 1
                sock.sendall(kafka_request(PRODUCE, PRODUCE_VERSION, correlation_id, body))
                error_code = _error_code(read_frame(stream), correlation_id)
                if error_code == 0:
                    break
                if error_code not in _NOT_READY or time.monotonic() > deadline:
                    raise AssertionError(f"{topic}-{partition}: Produce answered error code {error_code}")
                time.sleep(0.1)


def pipelined_produce(bootstrap: str, topic: str, records: int, requests: int, first_id: int = 0) -> float:
    """``requests`` Produce requests of ``records`` records each, up to :data:`WINDOW` unanswered;
    -> seconds from the first send to the last answer."""
    bodies = [produce_body(topic, p, record_batch(records, seed=p)) for p in range(PARTITIONS)]
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with sock.makefile("rb") as stream:
            started = time.perf_counter()
            sent = answered = 0
            while answered < requests:
                burst = min(requests - sent, WINDOW - (sent - answered))
                if burst:
                    ids = range(first_id + sent, first_id + sent + burst)
                    sock.sendall(
                        b"".join(kafka_request(PRODUCE, PRODUCE_VERSION, i, bodies[i % PARTITIONS]) for i in ids)
                    )
                    sent += burst
                _check_answer(read_frame(stream), first_id + answered)
                answered += 1
            return time.perf_counter() - started


def request_cpu_figures(before: Scrape, after: Scrape, records: int) -> Figures:
    """sparklog's own CPU per Produce request between two scrapes of its endpoint: the mean
    (``_sum`` ÷ ``_count`` of the requests in between) and the p50 / p99 of the last ones, µs."""
    requests = after.value(f"{REQUEST_CPU}_count", request="Produce") - before.value(
        f"{REQUEST_CPU}_count", request="Produce"
    )
    cpu_s = after.value(f"{REQUEST_CPU}_sum", request="Produce") - before.value(f"{REQUEST_CPU}_sum", request="Produce")
    return {
        f"request_cpu_us_{records}": cpu_s / requests * 1e6,
        f"request_cpu_p50_us_{records}": after.value(REQUEST_CPU, request="Produce", quantile="0.5") * 1e6,
        f"request_cpu_p99_us_{records}": after.value(REQUEST_CPU, request="Produce", quantile="0.99") * 1e6,
    }


def _scrape_counted(metrics_url: str, counted: float) -> Scrape:
    """A scrape once at least ``counted`` Produce requests are counted."""
    deadline = time.monotonic() + _COUNTED_WAIT_S
    while True:
        scraped = _scrape(metrics_url)
        if (scraped.get(f"{REQUEST_CPU}_count", request="Produce") or 0) >= counted:
            return scraped
        if time.monotonic() > deadline:
            raise AssertionError(f"{metrics_url}: fewer than {counted:.0f} Produce requests counted")
        time.sleep(0.05)


def _scrape(metrics_url: str) -> Scrape:
    from sparklog.testing.metrics import scrape  # imported late: see the TYPE_CHECKING block

    return scrape(metrics_url)


def measure(requests: int, endpoint: Endpoint) -> Figures:
    try:
        return _measure(requests, endpoint)
    except AssertionError as exc:  # a refused request: say which system refused it
        raise AssertionError(f"{endpoint.system}: {exc}") from exc


def _measure(requests: int, endpoint: Endpoint) -> Figures:
    assert endpoint.pid is not None
    figures: Figures = {}
    await_produce_accepted(endpoint.bootstrap_servers, endpoint.topic)
    for records in RECORDS_PER_REQUEST:
        pipelined_produce(endpoint.bootstrap_servers, endpoint.topic, records, WARMUP)
        idle_start = cpu_seconds(endpoint.pid)
        time.sleep(IDLE_SECONDS)
        idle_rate = (cpu_seconds(endpoint.pid) - idle_start) / IDLE_SECONDS
        # Scraped before the process CPU is read, so the scrape's own CPU stays out of it; the
        # idle wait let the warm-up's last requests be counted first.
        scraped = _scrape(endpoint.metrics_url) if endpoint.metrics_url else None
        before = cpu_seconds(endpoint.pid)
        seconds = pipelined_produce(endpoint.bootstrap_servers, endpoint.topic, records, requests, WARMUP)
        used = cpu_seconds(endpoint.pid) - before
        figures.update(
            {
                f"us_per_request_{records}": max(0.0, used - idle_rate * seconds) / requests * 1e6,
                f"raw_us_per_request_{records}": used / requests * 1e6,
                f"idle_cores_{records}": idle_rate,
                f"requests_per_s_{records}": requests / seconds,
            }
        )
        if endpoint.metrics_url is not None and scraped is not None:
            counted = (scraped.get(f"{REQUEST_CPU}_count", request="Produce") or 0) + requests
            figures.update(request_cpu_figures(scraped, _scrape_counted(endpoint.metrics_url, counted), records))
    return figures


def show(f: Figures) -> str:
    return ", ".join(
        f"{n} record(s): {f[f'us_per_request_{n}']:.0f} µs/request at {f[f'requests_per_s_{n}']:,.0f} req/s"
        + (f" ({f[f'request_cpu_us_{n}']:.0f} µs its own)" if f"request_cpu_us_{n}" in f else "")
        for n in RECORDS_PER_REQUEST
    )


def run(ctx: BenchContext) -> CaseResult:
    requests = ctx.scaled(REQUESTS, minimum=2_000)
    result = CaseResult(
        CASE,
        TITLE,
        __doc__ or "",
        params={
            "requests": requests,
            "warmup_requests": WARMUP,
            "window": WINDOW,
            "records_per_request": list(RECORDS_PER_REQUEST),
            "produce_version": PRODUCE_VERSION,
            "acks": "all",
            "idle_seconds": IDLE_SECONDS,
            "systems": systems_note(BROKERS),
        },
    )
    result.runs = compare(
        ctx,
        CASE,
        lambda endpoint, _run_no: measure(requests, endpoint),
        topic=TOPIC,
        systems=("sparklog", "kafka"),
        show=show,
    )
    target = [Target("value", "<=", TARGET_US, f"≤ {TARGET_US:g} µs")]
    rows: list[tuple[str, str, list[Target], bool]] = [
        ("us_per_request_1", "broker CPU per 1-record Produce request", target, False),
        ("request_cpu_us_1", "… sparklog's own per request (sparklog_request_cpu_seconds)", target, False),
        ("request_cpu_p99_us_1", "… its p99 (info)", [], False),
        ("us_per_request_3", "broker CPU per 3-record Produce request (info)", [], False),
        ("request_cpu_us_3", "… sparklog's own per request (info)", [], False),
        ("raw_us_per_request_1", "… 1 record, without the idle correction (info)", [], False),
        ("requests_per_s_1", "… 1-record requests answered per second (info)", [], True),
        ("requests_per_s_3", "… 3-record requests answered per second (info)", [], True),
    ]
    for key, name, targets, higher in rows:
        unit = "requests/s" if higher else "µs"
        result.metrics.append(wire_metric(CASE, result.runs, key, name, unit, targets, higher_is_better=higher))
    return result
