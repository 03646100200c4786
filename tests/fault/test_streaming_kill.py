"""Exactly-once streaming produce across crashes: a streaming query copying topic A to topic B
in its own process (own JVM, own Python workers) is SIGKILLed twice at random points while it
runs, and restarted from the same checkpoint until A is copied. B must then hold every record
of A exactly once, with contiguous offsets.

A kill can land anywhere: while planning a micro-batch (leases taken, nothing written), while
tasks write segments, between the Delta commit and Spark's commit log (the restart replays
the batch and the sink must recognise it), or while releasing leases. The whole process group
(and anything it started in its session) dies, like a machine crash.

A new JVM's first micro-batch is slow, so all runs start (and warm up on a throwaway query)
at once and the next one is told to go the moment the previous one is killed.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import sparklog
from tests.helpers import assert_log_consistent, wait_for

RECORDS = 300
MAX_OFFSETS_PER_TRIGGER = 25  # 12 micro-batches for a full copy
KILL_AT = (0.2, 0.55)  # fraction of A copied to B before each kill (plus a random delay)
LEASE_MS = 3000  # a restart waits at most this long for the killed run's leases
REPO = Path(__file__).resolve().parents[2]


def session_pids(session_id: int) -> list[int]:
    """Every process of a session: the worker, its JVM and the Python workers the JVM started
    (PySpark's daemon moves its workers to a process group of their own, not out of the session)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[3]) == session_id:
            pids.append(int(entry.name))
    return pids


def kill_session(process: subprocess.Popen[bytes]) -> None:
    for pid in session_pids(process.pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    process.wait(30)


@dataclass
class Worker:
    """A worker process: warms up at once, copies A to B once its ``go`` file exists."""

    process: subprocess.Popen[bytes]
    ready: Path
    go: Path
    log: Path

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]


def start_worker(cluster: sparklog.Cluster, options: dict[str, str], tmp: Path, n: int) -> Worker:
    warm = f"warm-{n}"
    for topic in (warm, f"{warm}-out"):
        cluster.create_topic(topic, partitions=1)
    with cluster.producer() as producer:
        producer.send(warm, "warm-up").result()
    worker = Worker(None, tmp / f"ready-{n}", tmp / f"go-{n}", tmp / f"worker-{n}.log")  # type: ignore[arg-type]
    args = [
        sys.executable,
        "-m",
        "tests.fault.stream_worker",
        json.dumps(options),
        str(tmp / "checkpoint"),
        "a",
        "b",
        str(MAX_OFFSETS_PER_TRIGGER),
        warm,
        str(worker.ready),
        str(worker.go),
    ]
    with open(worker.log, "wb") as log:
        worker.process = subprocess.Popen(args, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    return worker


def copied(cluster: sparklog.Cluster) -> int:
    return sum(cluster.high_watermarks("b").values())


def test_streaming_copy_survives_kill9(
    cluster: sparklog.Cluster, cluster_options: dict[str, str], tmp_path: Path
) -> None:
    seed = int(os.environ.get("SPARKLOG_TEST_SEED", time.time_ns()))
    print(f"kill schedule seed: SPARKLOG_TEST_SEED={seed}")
    rng = random.Random(seed)
    cluster.create_topic("a", partitions=2)
    cluster.create_topic("b", partitions=3)
    values = [f"rec-{i}" for i in range(RECORDS)]
    with cluster.producer(linger_ms=50) as producer:
        for i, value in enumerate(values):
            producer.send("a", value, key=f"k{i % 17}")
    options = {**cluster_options, "spark.writer.lease.ms": str(LEASE_MS)}
    # Every run gets its own process; they all start (and warm up) now, run one after another.
    workers = [start_worker(cluster, options, tmp_path, n) for n in range(len(KILL_AT) + 1)]
    try:
        workers[0].go.touch()
        for fraction, worker, successor in zip(KILL_AT, workers, workers[1:], strict=False):
            target = int(RECORDS * fraction)
            wait_for(
                lambda: copied(cluster) >= target or worker.process.poll() is not None,
                240,
                f"B to reach {target} records",
                interval_s=0.1,
            )
            time.sleep(rng.uniform(0.0, 1.0))  # land anywhere inside a micro-batch
            at = copied(cluster)
            assert worker.process.poll() is None, f"worker exited before its kill ({at} copied):\n{worker.tail()}"
            kill_session(worker.process)
            print(f"killed a worker with {at} of {RECORDS} records in B")
            assert 0 < at < RECORDS, f"kill came too late: {at} records copied"
            successor.go.touch()
        final = workers[-1]
        assert final.process.wait(240) == 0, f"the last worker failed:\n{final.tail()}"
    finally:
        for worker in workers:
            if session_pids(worker.process.pid):
                kill_session(worker.process)
    records = assert_log_consistent(cluster, "b")
    counts = Counter((r.value or b"").decode() for r in records if r.value is not None)
    twice = {v: n for v, n in counts.items() if n > 1}
    assert not twice, f"{len(twice)} records of A copied more than once, e.g. {next(iter(twice.items()))}"
    missing = set(values) - set(counts)
    assert not missing, f"{len(missing)} records of A never reached B, e.g. {sorted(missing)[:3]}"
    assert len(records) == RECORDS
