"""Child-process entry points of the maintenance concurrency and kill tests (``spawn``).

* :func:`compaction_job` signals it is ready, runs one
  :func:`sparklog.maintenance.runner.run_compaction` after a start signal and reports each
  partition's status: the racing-jobs test.
* :func:`maintenance_until_killed` runs :func:`sparklog.maintenance.runner.run_maintenance`, one
  fsynced line per finished partition, and is SIGKILLed by the parent at some point. With
  ``spark_master`` it first starts its own Spark session (and becomes a process-group
  leader so the parent can kill the JVM and its Python workers with it); without, the
  rewrites run in this process (:func:`sparklog.log.compaction.run_in_process`) and the
  plan/commit driver code is the same as the Spark job's.
* :func:`consume_until_stopped` is a light consumer from earliest that logs every polled
  batch (partition -> [[offset, value], ...]) as one JSON line.
"""

from __future__ import annotations

import json
import os
import time
import traceback
from collections.abc import Mapping
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event, Semaphore
from pathlib import Path

import sparklog


def compaction_job(
    options: Mapping[str, str],
    topic: str,
    now_ms: int,
    ready: Semaphore,
    go: Event,
    results: Queue,
) -> None:
    """Releases ``ready`` once at the start line (or on failing before it: the parent then
    finds the traceback in ``results``), runs when ``go`` is set."""
    from sparklog.maintenance.runner import run_compaction

    at_start_line = False
    try:
        with sparklog.connect(options) as cluster:
            cluster.replicas.leader_table(topic).snapshot()  # open everything before the start line
            at_start_line = True
            ready.release()
            go.wait(60)
            done = run_compaction(cluster.replicas, None, [topic], now_ms=now_ms)
            results.put([(r.partition, r.status) for r in done])
    except BaseException:
        results.put(traceback.format_exc())
        if not at_start_line:
            ready.release()


def maintenance_until_killed(
    options: Mapping[str, str], topic: str, now_ms: int, progress_path: str, spark_master: str | None = None
) -> None:
    from sparklog.maintenance.runner import run_maintenance

    spark = None
    if spark_master is not None:
        os.setsid()
        from sparklog.spark import get_or_create_session

        spark = get_or_create_session(app_name="maintenance-kill", master=spark_master)
    fd = os.open(progress_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def progress(line: str) -> None:
        os.write(fd, (line + "\n").encode())
        os.fsync(fd)

    progress("started")
    with sparklog.connect(options) as cluster:
        run_maintenance(cluster.replicas, spark, [topic], now_ms=now_ms, progress=progress)
    progress("finished")
    if spark is not None:
        spark.stop()


def consume_until_stopped(
    options: Mapping[str, str], topic: str, log_path: str, stop_path: str, max_records: int
) -> None:
    """Poll from earliest; after ``stop_path`` appears, drain to the high watermarks and exit."""
    with sparklog.connect(options) as cluster, open(log_path, "w") as log:
        partitions = cluster.partitions_of(topic)
        consumer = cluster.consumer(None, auto_offset_reset="earliest")
        consumer.assign([(topic, p) for p in partitions])
        while True:
            stopping = Path(stop_path).exists()
            batch = consumer.poll_arrow(100, max_records=max_records)
            if batch.num_rows:
                line: dict[str, list[list[object]]] = {}
                for p, o, v in zip(
                    *(batch.column(c).to_pylist() for c in ("partition", "offset", "value")), strict=False
                ):
                    line.setdefault(str(p), []).append([o, v.decode("ascii")])
                log.write(json.dumps(line) + "\n")
            if stopping:
                ends = cluster.high_watermarks(topic)
                if all(consumer.position((topic, p)) >= ends[p] for p in partitions):
                    break
            time.sleep(0.01)  # poll pacing, not a wait
        consumer.close()
