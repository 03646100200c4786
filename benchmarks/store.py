"""Shared machinery of the cases on object storage, (v) and (w): moto's S3 server behind the
counting, latency-injecting proxy (:class:`sparklog.testing.store_proxy.StoreProxy`), raw
delta-rs commits on it (the baseline of both), and what a count of store requests means (commit
rounds, what they cost at S3 Standard list prices).

sparklog is imported inside the functions only: :mod:`benchmarks.run` imports every case
before it freezes the code under test.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sparklog.testing.store_proxy import StoreProxy

# S3 Standard list prices (us-east-1) per request, in US dollars: PUT, COPY, POST and LIST
# $0.005 per 1,000; GET, HEAD (and every other request) $0.0004 per 1,000; DELETE is free.
PRICE_PER_1000 = {"PUT": 0.005, "PUT_IF_ABSENT": 0.005, "POST": 0.005, "LIST": 0.005, "GET": 0.0004, "HEAD": 0.0004}
FREE = ("DELETE",)
PRICES_NOTE = (
    "S3 Standard list prices: PUT/POST/LIST $0.005 per 1,000 requests, GET/HEAD $0.0004 per 1,000, DELETE free"
)


@contextlib.contextmanager
def proxied_s3(directory: Path) -> Iterator[StoreProxy]:
    """moto's S3 server (a child process) behind a :class:`StoreProxy` (another), their logs
    under ``directory``. While the ``with`` lasts, the ``AWS_*`` variables of this process — and
    so of every broker, delta-rs writer or producer process it starts — point at the proxy."""
    from sparklog.testing.object_stores import MotoS3
    from sparklog.testing.store_proxy import StoreProxy

    saved = dict(os.environ)
    try:
        with MotoS3(directory / "moto") as moto, StoreProxy(directory / "proxy", moto) as proxy:
            os.environ.update(proxy.environ())
            yield proxy
    finally:
        os.environ.clear()
        os.environ.update(saved)


def new_bucket(proxy: StoreProxy, prefix: str) -> str:
    """A new bucket ``<prefix>-<random>`` on the proxy's store (created behind the proxy: not counted)."""
    bucket = f"{prefix}-{uuid.uuid4().hex[:8]}"
    proxy.upstream.create_bucket(bucket)
    return bucket


def landed_commits(counts: Mapping[str, int]) -> int:
    """Commit rounds in a proxy's ``counts``: conditional PUTs (``If-None-Match: *``, the
    creates of ``_delta_log`` commits) less the refused ones (412: another writer's commit
    took the version)."""
    return counts.get("PUT_IF_ABSENT", 0) - counts.get("PUT_IF_ABSENT 412", 0)


def request_cost(counts: Mapping[str, int]) -> float:
    """US dollars the requests of a proxy's ``counts`` cost at :data:`PRICE_PER_1000` (the
    kinds only: ``"<kind> <status>"`` and ``"fault …"`` entries are already in their kind)."""
    kinds = {k: v for k, v in counts.items() if " " not in k and k not in FREE}
    return sum(n * PRICE_PER_1000.get(kind, PRICE_PER_1000["GET"]) / 1000 for kind, n in kinds.items())


def _delta_rs_writer(uri: str, start: float, until: float, out: Any) -> None:
    import pyarrow as pa
    from deltalake import write_deltalake

    time.sleep(max(0.0, start - time.monotonic()))  # CLOCK_MONOTONIC: one clock for every process
    latencies: list[float] = []
    row = pa.table({"value": pa.array([b"v"], pa.binary())})
    while not latencies or time.monotonic() < until:  # at least one: the first writer creates the table
        started = time.monotonic()
        write_deltalake(uri, row, mode="append")
        latencies.append((time.monotonic() - started) * 1000)
    out.put(latencies)


def delta_rs_commits(proxy: StoreProxy, bucket_prefix: str, writers: int, duration_s: float) -> dict[str, Any]:
    """The baseline of (v) and (w): ``writers`` processes appending one one-row Parquet file
    each per commit with delta-rs (``write_deltalake(mode="append")``) to one new table on the
    proxy's store, through the proxy, for ``duration_s`` from a common start once every writer
    has started (the table is created first; neither is counted). -> ``{"acks": every commit's latency in ms, "counts": the proxy's counts over
    the timed commits, "seconds": duration_s}``."""
    uri = f"s3://{new_bucket(proxy, bucket_prefix)}/raw"
    spawn = multiprocessing.get_context("spawn")
    out = spawn.Queue()
    first = spawn.Process(target=_delta_rs_writer, args=(uri, 0.0, 0.0, out))  # creates the table
    first.start()
    out.get(timeout=120)
    first.join()
    start = time.monotonic() + 3.0  # the writers' interpreters started and deltalake imported by then
    processes = [
        spawn.Process(target=_delta_rs_writer, args=(uri, start, start + duration_s, out)) for _ in range(writers)
    ]
    for process in processes:
        process.start()
    time.sleep(max(0.0, start - time.monotonic()))
    proxy.reset()
    latencies = [x for _ in processes for x in out.get(timeout=duration_s + 120)]
    for process in processes:
        process.join()
    return {"acks": latencies, "counts": proxy.counts(), "seconds": duration_s}
