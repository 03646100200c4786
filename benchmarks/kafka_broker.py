"""Apache Kafka itself, the baseline of the Kafka-wire benchmarks: one KRaft node that is both
broker and controller, on loopback, in a scratch directory, for as long as a ``with`` lasts.

The jars come from Maven Central through ``benchmarks/kafka/pom.xml`` (``make kafka-jars``, which
``make bench`` runs once): nothing is downloaded here. Start-up is what Kafka's scripts do —
``kafka-storage format`` (``kafka.tools.StorageTool``) with a fresh cluster id and the static
controller quorum of this one node, then ``kafka-server-start`` (``kafka.Kafka
server.properties``) with the start script's JVM settings (1 GiB heap, G1) — and the broker is
ready when a client's Metadata request is answered. Durability stays Kafka's default: appends
go to the page cache, nothing is fsynced per request (``log.flush.interval.messages`` unset);
sparklog's acks=all commits are fsynced.
"""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
JARS_ENV = "SPARKLOG_BENCH_KAFKA_JARS"  # another directory of the same jars, if set
DEFAULT_JARS = REPO / ".venv" / "kafka-jars"
MAKE_TARGET = "make kafka-jars"
NODE_ID = 1
# kafka-server-start.sh's KAFKA_HEAP_OPTS and kafka-run-class.sh's KAFKA_JVM_PERFORMANCE_OPTS:
# the settings a Kafka broker gets when started the usual way.
JVM_OPTIONS = (
    "-Xms1G",
    "-Xmx1G",
    "-server",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-Djava.awt.headless=true",
)
# Warnings and errors only, to a file (shown when the broker fails to start).
LOG4J2 = """status = error
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d %p [%c{{1}}] %m%n
rootLogger.level = WARN
rootLogger.appenderRef.file.ref = FILE
"""
READY_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 20.0


class KafkaJarsMissing(RuntimeError):
    """Apache Kafka's jars are not where ``make kafka-jars`` puts them."""


def kafka_jars() -> Path:
    """The directory of Kafka's jars; :class:`KafkaJarsMissing` naming the make target if absent."""
    jars = Path(os.environ.get(JARS_ENV) or DEFAULT_JARS)
    if not any(jars.glob("kafka_2.13-*.jar")):
        raise KafkaJarsMissing(
            f"Apache Kafka's jars are not in {jars}: run `{MAKE_TARGET}` (or `make bench`) once to fetch them "
            "with Maven (benchmarks/kafka/pom.xml); benchmarks never download"
        )
    return jars


def kafka_version(jars: Path | None = None) -> str:
    """The version of the ``kafka_2.13`` jar (e.g. ``4.4.0``)."""
    [jar] = sorted((jars or kafka_jars()).glob("kafka_2.13-*.jar"))[:1]
    return jar.name.removeprefix("kafka_2.13-").removesuffix(".jar")


def _java() -> str:
    java = shutil.which("java")
    if java is None:
        raise KafkaJarsMissing(f"no `java` on PATH to run Apache Kafka: run `{MAKE_TARGET}`")
    return java


def free_port() -> int:
    """A loopback port nothing listens on now (the broker binds it a moment later)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cluster_id() -> str:
    """A random cluster id as ``kafka-storage random-uuid`` prints it (22 base64url characters)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


def server_properties(log_dirs: Path, port: int, controller_port: int, extra: dict[str, str]) -> dict[str, str]:
    """One node, broker and controller, loopback listeners; the internal topics with one replica
    (one broker); ``extra`` (the case's broker settings, e.g. ``group.initial.rebalance.delay.ms``)
    last."""
    return {
        "process.roles": "broker,controller",
        "node.id": str(NODE_ID),
        "controller.quorum.voters": f"{NODE_ID}@127.0.0.1:{controller_port}",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(log_dirs),
        "num.partitions": "6",
        "offsets.topic.replication.factor": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        **extra,
    }


@dataclass(frozen=True)
class KafkaBroker:
    """A running Kafka node: where clients connect, its JVM's pid, its log, its version."""

    bootstrap_servers: str
    pid: int
    log: Path
    version: str

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


def _write_properties(path: Path, properties: dict[str, str]) -> None:
    path.write_text("".join(f"{k}={v}\n" for k, v in properties.items()), encoding="utf-8")


def _format_storage(java: str, classpath: str, config: Path, log4j: Path) -> None:
    """``kafka-storage format -t <random id> -c server.properties`` (static quorum: no --standalone)."""
    command = [java, "-cp", classpath, f"-Dlog4j2.configurationFile={log4j}", "kafka.tools.StorageTool"]
    done = subprocess.run(
        [*command, "format", "-t", cluster_id(), "-c", str(config)], capture_output=True, text=True, timeout=120
    )
    if done.returncode != 0:
        raise RuntimeError(f"kafka-storage format failed ({done.returncode}): {done.stdout}{done.stderr}")


def _wait_ready(process: subprocess.Popen[bytes], broker: KafkaBroker, timeout_s: float) -> None:
    """Until a Metadata request is answered with this node as a broker."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers, "log_level": 0})
    deadline = time.monotonic() + timeout_s
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"Kafka exited with {process.returncode} while starting:\n{broker.log_tail()}")
        with contextlib.suppress(Exception):
            if NODE_ID in admin.list_topics(timeout=2).brokers:
                return
        if time.monotonic() > deadline:
            raise RuntimeError(f"Kafka did not answer within {timeout_s:.0f} s:\n{broker.log_tail()}")
        time.sleep(0.2)


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM (Kafka's controlled shutdown), SIGKILL if it takes longer than STOP_TIMEOUT_S."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)


@contextlib.contextmanager
def kafka_broker(work_dir: Path, properties: dict[str, str] | None = None) -> Iterator[KafkaBroker]:
    """Format and start a one-node Kafka under ``work_dir`` (created; its data stays there), stop it after."""
    jars = kafka_jars()
    java = _java()
    classpath = str(jars / "*")
    work_dir.mkdir(parents=True, exist_ok=True)
    port, controller_port = free_port(), free_port()
    config, log4j, log = work_dir / "server.properties", work_dir / "log4j2.properties", work_dir / "kafka.log"
    _write_properties(config, server_properties(work_dir / "data", port, controller_port, properties or {}))
    log4j.write_text(LOG4J2.format(log=log), encoding="utf-8")
    _format_storage(java, classpath, config, log4j)
    with open(work_dir / "stdout.log", "wb") as stdout:
        process = subprocess.Popen(
            [java, *JVM_OPTIONS, f"-Dlog4j2.configurationFile={log4j}", "-cp", classpath, "kafka.Kafka", str(config)],
            stdout=stdout,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C of the benchmark reaches us, not the JVM, first
        )
    broker = KafkaBroker(f"127.0.0.1:{port}", process.pid, log, kafka_version(jars))
    try:
        _wait_ready(process, broker, READY_TIMEOUT_S)
        yield broker
    finally:
        _stop(process)


def create_topic(bootstrap: str, topic: str, partitions: int, timeout_s: float = 60.0) -> None:
    """CreateTopics (replication factor 1), then until Metadata shows every partition with a leader."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    futures = admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=timeout_s)
    futures[topic].result(timeout_s)
    deadline = time.monotonic() + timeout_s
    while True:
        found = admin.list_topics(topic, timeout=10).topics.get(topic)
        if found is not None and found.error is None and len(found.partitions) == partitions:
            if all(p.leader == NODE_ID for p in found.partitions.values()):
                return
        if time.monotonic() > deadline:
            raise AssertionError(f"{topic}: {partitions} partitions with a leader not seen within {timeout_s:.0f} s")
        time.sleep(0.05)
