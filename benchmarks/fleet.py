"""Producer *processes* for the wire cases (m) and (n): several clients that do not share one
Python interpreter (and its GIL) with each other or with the benchmark.

A :class:`Fleet` spawns its processes once (``multiprocessing`` spawn: the benchmark process
runs Spark's JVM gateway and threads, which must not be forked) and reuses them for every
system and step of a case. Each job runs in two phases so set-up is never timed and every
process starts together: *prepare* (create the producer, connect, warm up) in every process,
then *go* with one start time (``time.monotonic_ns()``, one clock for every process of the
host). A process reports its own CPU time over the timed part (``time.process_time``: every
thread of the process, librdkafka's included), so a case can say what the clients cost.
"""

from __future__ import annotations

import multiprocessing
import time
import traceback
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from benchmarks.wire import FloodProducer, PacedProducer, record_pool

_START_MARGIN_NS = 100_000_000  # between "go" and the common start: every process has it by then
_TIMEOUT_S = 900.0


@dataclass(frozen=True)
class FloodJob:
    """Records ``first .. first+records-1`` of the pool, as fast as one producer goes."""

    bootstrap: str
    topic: str
    config: dict[str, Any]
    first: int
    records: int


@dataclass(frozen=True)
class PacedJob:
    """``count`` records, one every ``interval_ns`` from the start plus ``offset_ns``; then up to
    ``flush_s`` for the last delivery reports."""

    bootstrap: str
    topic: str
    config: dict[str, Any]
    interval_ns: float
    offset_ns: float
    count: int
    seed: int
    flush_s: float


def _prepare(job: FloodJob | PacedJob) -> FloodProducer | PacedProducer:
    if isinstance(job, FloodJob):
        return FloodProducer(job.bootstrap, job.topic, record_pool(), job.config)
    return PacedProducer(job.bootstrap, job.topic, job.config, job.seed)


def _go(job: FloodJob | PacedJob, client: FloodProducer | PacedProducer, start_ns: int) -> dict[str, Any]:
    while (wait := (start_ns - time.monotonic_ns()) / 1e9) > 0:
        time.sleep(wait)
    cpu = time.process_time()
    if isinstance(job, FloodJob) and isinstance(client, FloodProducer):
        flood = client.run(job.first, job.records)
        return {"end_ns": flood.end_ns, "cpu_s": time.process_time() - cpu, **flood.counters()}
    assert isinstance(job, PacedJob) and isinstance(client, PacedProducer)
    undelivered = client.run(start_ns + int(job.offset_ns), job.interval_ns, job.count, job.flush_s)
    return {
        "cpu_s": time.process_time() - cpu,
        "latencies": array("d", client.latencies_ms).tobytes(),
        "failed": len(client.failed) + undelivered,
        "errors": client.failed[:3],
        "last_report_ns": client.last_report_ns,
        "last_send_ns": client.last_send_ns,
    }


def _worker(conn: Any) -> None:
    """A fleet process: ``"up"`` once started; ``("prepare", job)`` → ``"ready"``; ``("go",
    start_ns)`` → the result; ``None`` ends it. A failure is sent back as ``("error", traceback)``."""
    job: FloodJob | PacedJob | None = None
    client: FloodProducer | PacedProducer | None = None
    conn.send("up")  # imports done: the fleet's start-up is over before anything is measured
    while (message := conn.recv()) is not None:
        try:
            kind, payload = message
            if kind == "prepare":
                job, client = payload, _prepare(payload)
                conn.send("ready")
            else:
                assert job is not None and client is not None
                try:
                    conn.send(_go(job, client, payload))
                finally:
                    # Closed now, not when collected: a producer left to the collector went on
                    # reconnecting to a broker stopped after its phase, through later phases.
                    client.producer.purge()
                    client.producer.close()
                    job = client = None
        except Exception:  # noqa: BLE001 - the parent raises it with the worker's traceback
            conn.send(("error", traceback.format_exc()))


class Fleet:
    """``size`` spawned producer processes; :meth:`run` gives jobs to the first ``len(jobs)``."""

    def __init__(self, size: int) -> None:
        context = multiprocessing.get_context("spawn")
        self._conns: list[Any] = []
        self._processes: list[Any] = []
        for i in range(size):
            parent, child = context.Pipe()
            process = context.Process(target=_worker, args=(child,), name=f"bench-producer-{i}", daemon=True)
            process.start()
            child.close()
            self._conns.append(parent)
            self._processes.append(process)
        # Wait until every process has started (on 2 cores, 64 interpreters importing take
        # seconds of CPU, which must not overlap the first system's measurement).
        self._collect(self._conns)

    @property
    def size(self) -> int:
        return len(self._conns)

    def run(self, jobs: Sequence[FloodJob | PacedJob]) -> tuple[int, list[dict[str, Any]]]:
        """Prepare every job in its process, then start them together; -> (the start time in
        ``monotonic_ns``, each process's result)."""
        if len(jobs) > self.size:
            raise ValueError(f"{len(jobs)} jobs for a fleet of {self.size} processes")
        conns = self._conns[: len(jobs)]
        for conn, job in zip(conns, jobs, strict=True):
            conn.send(("prepare", job))
        self._collect(conns)
        start_ns = time.monotonic_ns() + _START_MARGIN_NS
        for conn in conns:
            conn.send(("go", start_ns))
        return start_ns, self._collect(conns)

    def _collect(self, conns: Sequence[Any]) -> list[Any]:
        answers = []
        for i, conn in enumerate(conns):
            if not conn.poll(_TIMEOUT_S):
                raise AssertionError(f"producer process {i} did not answer within {_TIMEOUT_S:.0f} s")
            answer = conn.recv()
            if isinstance(answer, tuple) and answer[:1] == ("error",):
                raise AssertionError(f"producer process {i} failed:\n{answer[1]}")
            answers.append(answer)
        return answers

    def close(self) -> None:
        for conn in self._conns:
            try:
                conn.send(None)
            except OSError:
                pass
        for process in self._processes:
            process.join(10)
            if process.is_alive():
                process.terminate()
                process.join(5)

    def __enter__(self) -> Fleet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def latencies_of(results: Sequence[dict[str, Any]]) -> list[float]:
    """Every process's latencies (ms) of a paced run, as one list."""
    merged: list[float] = []
    for result in results:
        values = array("d")
        values.frombytes(result["latencies"])
        merged.extend(values)
    return merged
