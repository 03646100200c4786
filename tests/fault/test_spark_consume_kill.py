"""Exactly-once across crashes: a ``consume_into`` driver killed with SIGKILL at random moments.

A child process (its own local Spark session) runs ``consume_into`` in a loop, a small cap
per run, from a pre-filled input topic to an output topic (or a Delta table). The parent
kills the child's whole process group (driver, JVM, Python workers: the Delta commit runs
in one of them) at a random moment after each child finished at least one run, restarts it,
and finally lets one run to the end. Every input value must then be in the output exactly
once, and the output topic's offsets must be contiguous. Killed runs leave unreleased
leases (expire after ``spark.writer.lease.ms``), uncommitted files and maybe a commit
whose ``__consumer_offsets`` mirror never happened behind.

Budget: every restart costs a Spark start in the child (~10 s idle, much more on a loaded
machine): all children start (and warm up) at once and wait for their turn; the topic test
kills 5 times and the Delta test 3 times
(``SPARKLOG_CONSUME_KILLS`` overrides both; ``SPARKLOG_TEST_SEED`` replays a schedule).
"""

from __future__ import annotations

import os
import random
import signal
import statistics
import time
from collections import Counter
from multiprocessing.process import BaseProcess
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

import sparklog
from sparklog.log.delta_sink import DeltaSink, input_app_id
from tests.fault.spark_consume_worker import WARMUP_TOPIC, consume_into_loop, finished_runs
from tests.helpers import assert_log_consistent, spawn_context, wait_for

RECORDS = 20_000
PARTITIONS = 4
CAP = 1_500  # records per run: ~14 runs for the whole input (topic test; 5 kills)
DELTA_CAP = 2_000  # ~10 runs (Delta test; 3 kills)
LEASE_MS = 2_000
GROUP = "exactly-once"
INPUT = "clicks"


def prefill(cluster: sparklog.Cluster) -> list[str]:
    cluster.create_topic(INPUT, partitions=PARTITIONS)
    cluster.create_topic(WARMUP_TOPIC, partitions=1)
    with cluster.producer() as producer:
        producer.send(WARMUP_TOPIC, value=b"warm-up")
    values = [f"v{i:05d}" for i in range(RECORDS)]
    with cluster.producer() as producer:
        for start in range(0, RECORDS, 2_000):
            chunk = values[start : start + 2_000]
            partitions = pa.array([i % PARTITIONS for i in range(start, start + len(chunk))], pa.int32())
            producer.send_arrow(INPUT, pa.table({"value": [v.encode() for v in chunk], "partition": partitions}))
    return values


def kill_group(process: BaseProcess) -> None:
    """SIGKILL the child's process group (it called setsid), i.e. the whole driver host."""
    if process.pid is None or process.exitcode is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.join(20)


def run_with_kills(
    options: dict[str, str], tmp: Path, kills: int, cap: int, output_topic: str | None, output_path: str | None
) -> None:
    seed = int(os.environ.get("SPARKLOG_TEST_SEED", time.time_ns()))
    print(f"kill schedule seed: SPARKLOG_TEST_SEED={seed}")  # shown with a failure, to replay it
    rng = random.Random(seed)
    runs_path = tmp / "runs.log"
    ctx = spawn_context()
    children: list[BaseProcess] = []

    def start(run_cap: int, n: int) -> BaseProcess:
        if output_topic:
            warmup_output = f"{WARMUP_TOPIC}-out-{n}"
            with sparklog.connect(options) as cluster:
                cluster.create_topic(warmup_output, partitions=1)
        else:
            warmup_output = str(tmp / f"{WARMUP_TOPIC}-out-{n}")
        args = (
            options,
            GROUP,
            INPUT,
            output_topic,
            output_path,
            run_cap,
            str(runs_path),
            str(tmp / f"go-{n}"),
            warmup_output,
        )
        child = ctx.Process(target=consume_into_loop, args=args)
        child.start()
        children.append(child)
        return child

    try:
        # Every child starts (Spark, a warm-up run) now and waits for its go file; they run one
        # after another; the last one consumes the rest in one run (its recovery is what counts).
        waiting = [start(cap if n < kills else RECORDS, n) for n in range(kills + 1)]
        for k in range(kills):
            before = len(finished_runs(runs_path))
            child = waiting[k]
            (tmp / f"go-{k}").touch()
            wait_for(
                lambda: len(finished_runs(runs_path)) > before or child.exitcode is not None,
                400,
                f"child {k}'s first run",
            )
            assert child.exitcode is None, f"child {k} exited on its own (exit {child.exitcode}) before it was killed"
            runs = finished_runs(runs_path)
            assert runs[-1][0] > 0, (
                f"child {k} caught up before kill {k} (runs: {runs}): lower the cap or raise RECORDS"
            )
            # Somewhere inside the next run (planning, tasks, commit, mirror): a run takes about
            # the median time of the runs so far (all warm), whatever the machine's load.
            run_s = statistics.median(seconds for _records, seconds, _index in runs)
            time.sleep(rng.uniform(0.0, 1.1 * run_s))
            kill_group(child)
            assert child.exitcode == -signal.SIGKILL, f"child {k} ended with {child.exitcode} instead of being killed"
        final = waiting[kills]
        (tmp / f"go-{kills}").touch()
        final.join(900)
        assert final.exitcode == 0, f"the run after {kills} kills failed (exit {final.exitcode})"
    finally:
        for child in children:
            kill_group(child)
    per_run = [records for records, _seconds, _index in finished_runs(runs_path)]
    print(
        f"{len(per_run)} finished runs, {sum(per_run)} records, {kills} kills; runs (records, s, index): {finished_runs(runs_path)}"
    )
    assert per_run[-1] == 0 and sum(per_run) <= RECORDS


def assert_offsets_stored(cluster: sparklog.Cluster, stored: dict[str, int | None]) -> None:
    hw = cluster.high_watermarks(INPUT)
    assert stored == {input_app_id(GROUP, INPUT, p): o for p, o in hw.items()}, "the output holds the input end offsets"
    assert cluster.committed_offsets(GROUP, [INPUT]) == {(INPUT, p): o for p, o in hw.items()}, "mirror caught up"


def kills(default: int) -> int:
    return int(os.environ.get("SPARKLOG_CONSUME_KILLS", default))


def test_consume_into_topic_survives_kill9(
    cluster: sparklog.Cluster, cluster_options: dict[str, str], tmp_path: Path
) -> None:
    values = prefill(cluster)
    cluster.create_topic("mirrored", partitions=3)
    options = {**cluster_options, "spark.writer.lease.ms": str(LEASE_MS)}
    run_with_kills(options, tmp_path, kills(5), CAP, "mirrored", None)
    records = assert_log_consistent(cluster, "mirrored")  # contiguous output offsets
    counts = Counter((r.value or b"").decode() for r in records)
    assert counts == Counter(values), (
        f"{sum(1 for n in counts.values() if n > 1)} values duplicated, {len(set(values) - set(counts))} missing"
    )
    table = cluster.replicas.leader_table("mirrored")
    dt = table.snapshot()
    assert_offsets_stored(
        cluster,
        {
            input_app_id(GROUP, INPUT, p): table.app_version(dt, input_app_id(GROUP, INPUT, p))
            for p in range(PARTITIONS)
        },
    )


def test_consume_into_delta_survives_kill9(
    cluster: sparklog.Cluster, cluster_options: dict[str, str], tmp_path: Path
) -> None:
    values = prefill(cluster)
    path = str(tmp_path / "lake" / "clicks")
    run_with_kills(cluster_options, tmp_path, kills(3), DELTA_CAP, None, path)
    sink = DeltaSink(path)
    rows = pa.concat_tables([pq.read_table(os.path.join(sink.root, p)) for p in sorted(sink.live_paths())])
    counts = Counter(rows.column("value").to_pylist())
    assert counts == Counter(values), (
        f"{sum(1 for n in counts.values() if n > 1)} values duplicated, {len(set(values) - set(counts))} missing"
    )
    positions = Counter(zip(rows.column("partition").to_pylist(), rows.column("offset").to_pylist(), strict=False))
    assert len(positions) == RECORDS and max(positions.values()) == 1
    assert_offsets_stored(cluster, sink.app_versions(input_app_id(GROUP, INPUT, p) for p in range(PARTITIONS)))
