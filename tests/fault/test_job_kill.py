"""The spark-submit jobs across crashes: ``jobs/produce.py --stream`` on a growing directory
and ``jobs/consume.py --stream`` into a Delta table, each SIGKILLed (the whole process
session: spark-submit, its JVM, the Python driver and workers) while it runs on a
processing-time trigger, then restarted with ``--trigger available-now``. The topic must
then hold every source row exactly once, the Delta table every record exactly once, the
dead-letter table each malformed value (sent between the two jobs, mid-log) exactly once,
and the group's committed offsets must be the topic's ends."""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import sparklog
from tests.fault.test_streaming_kill import kill_session, session_pids
from tests.helpers import stored_records, wait_for
from tests.integration.test_jobs import job_env
from tests.integration.test_produce_consume_jobs import SCHEMA, context, job_command, write_rows
from tests.integration.test_spark_consume import delta_rows

FILE_ROWS = 50
FIRST_FILES, LATER_FILES = 12, 4  # files there at the first start, and added before the restart
TOTAL = (FIRST_FILES + LATER_FILES) * FILE_ROWS
BAD_VALUES = [f"malformed-{i}".encode() for i in range(5)]
_TIMEOUT_S = 600


def start(command: list[str], cluster_options: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen(
            command,
            env=job_env(cluster_options),
            cwd=log.parent,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def kill_when(process: subprocess.Popen[bytes], progress: Callable[[], int], target: int, log: Path, what: str) -> int:
    """SIGKILL the job's session once ``progress()`` reaches ``target``; returns where it was."""
    wait_for(lambda: progress() >= target or process.poll() is not None, _TIMEOUT_S, what, interval_s=0.2)
    at = progress()
    assert process.poll() is None, f"the job exited before its kill ({at} done):\n{log.read_text()[-4000:]}"
    kill_session(process)
    return at


def finish(command: list[str], cluster_options: dict[str, str], cwd: Path) -> None:
    done = subprocess.run(
        command, env=job_env(cluster_options), cwd=cwd, capture_output=True, text=True, timeout=_TIMEOUT_S, check=False
    )
    assert done.returncode == 0, context(done)


def test_streaming_jobs_killed_and_restarted_land_everything_exactly_once(
    cluster: sparklog.Cluster, cluster_options: dict[str, str], tmp_path: Path
) -> None:
    incoming = tmp_path / "incoming"
    for n in range(FIRST_FILES):
        write_rows(incoming / f"part-{n:03d}.json", range(n * FILE_ROWS, (n + 1) * FILE_ROWS))
    produce = ["--topic", "events", "--source", str(incoming), "--format", "json", "--create-partitions", "2"]
    produce += ["--stream", "--checkpoint", str(tmp_path / "checkpoint"), "--schema", SCHEMA]
    running = start(
        job_command("produce", [*produce, "--trigger", "1s", "--max-files-per-trigger", "1"]),
        cluster_options,
        tmp_path / "produce.log",
    )

    def produced() -> int:
        return sum(cluster.high_watermarks("events").values()) if "events" in cluster.list_topics() else 0

    try:
        at = kill_when(running, produced, 2 * FILE_ROWS, tmp_path / "produce.log", "two files produced")
    finally:
        if session_pids(running.pid):
            kill_session(running)
    assert 0 < at < FIRST_FILES * FILE_ROWS, f"the produce kill came too late: {at} records produced"
    with cluster.producer() as producer:  # values the consume job must dead-letter, mid-log
        for value in BAD_VALUES:
            producer.send("events", value).result()
    for n in range(FIRST_FILES, FIRST_FILES + LATER_FILES):  # the directory grows meanwhile
        write_rows(incoming / f"part-{n:03d}.json", range(n * FILE_ROWS, (n + 1) * FILE_ROWS))
    finish(job_command("produce", [*produce, "--trigger", "available-now"]), cluster_options, tmp_path)
    ids = Counter(
        json.loads(r.value or b"")["id"] for r in stored_records(cluster, "events") if r.value not in BAD_VALUES
    )
    assert ids == Counter(range(TOTAL)), f"not every row once: {[i for i, n in ids.items() if n > 1][:5]} twice"

    sink, dead = tmp_path / "lake" / "events", tmp_path / "lake" / "events-bad"
    consume = ["--topic", "events", "--group", "lake", "--sink", str(sink), "--value-format", "json"]
    consume += ["--schema", SCHEMA, "--dead-letter", str(dead), "--stream"]
    running = start(
        job_command("consume", [*consume, "--trigger", "1s", "--max-offsets-per-trigger", "150"]),
        cluster_options,
        tmp_path / "consume.log",
    )

    def consumed() -> int:
        return sum(cluster.committed_offsets("lake").values())

    try:
        at = kill_when(running, consumed, 300, tmp_path / "consume.log", "300 records landed")
    finally:
        if session_pids(running.pid):
            kill_session(running)
    assert 0 < at < TOTAL, f"the consume kill came too late: {at} records landed"
    finish(job_command("consume", [*consume, "--trigger", "available-now"]), cluster_options, tmp_path)
    rows = delta_rows(str(sink)).to_pylist()
    places = Counter((r["partition"], r["offset"]) for r in rows)
    assert len(places) == TOTAL and set(places.values()) == {1}, "every record landed exactly once"
    assert Counter(r["id"] for r in rows) == Counter(range(TOTAL))
    letters = delta_rows(str(dead)).to_pylist()
    assert Counter(r["value"] for r in letters) == Counter(BAD_VALUES), "every malformed value dead-lettered once"
    assert not places.keys() & {(r["partition"], r["offset"]) for r in letters}
    hw = cluster.high_watermarks("events")
    assert cluster.committed_offsets("lake") == {("events", p): end for p, end in hw.items()}
