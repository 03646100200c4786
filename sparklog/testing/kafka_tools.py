"""Apache Kafka's own command-line tools, run from its jars against sparklog's brokers.

``make venv`` fetches Kafka's tools, clients and Streams (``jvm/kafka/pom.xml``) from Maven
Central once, into ``<venv>/kafka-clients-jars/``; nothing downloads here. Each tool runs as
Kafka's scripts run it (``bin/kafka-topics.sh`` is ``kafka-run-class.sh`` with the tool's main
class): one ``java`` process with the jars on its classpath and log4j2 logging errors only,
its standard output and error returned.

States: none. A :class:`KafkaTools` is the jar directory and a ``java``; every call starts a
process and waits for it, killing it at the timeout.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from sparklog.metadata.embedded import find_java

__all__ = ["KAFKA39_JARS", "KAFKA_JARS", "KAFKA_TOOLS", "TEST_CLASSES", "KafkaTools", "KafkaToolsMissing", "ToolRun"]

# The scripts of Kafka's bin/ directory and the main classes they run (Kafka 4.x).
KAFKA_TOOLS = {
    "kafka-topics": "org.apache.kafka.tools.TopicCommand",
    "kafka-consumer-groups": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "kafka-console-producer": "org.apache.kafka.tools.ConsoleProducer",
    "kafka-console-consumer": "org.apache.kafka.tools.consumer.ConsoleConsumer",
    "kafka-producer-perf-test": "org.apache.kafka.tools.ProducerPerformance",
    "kafka-consumer-perf-test": "org.apache.kafka.tools.ConsumerPerformance",
    "kafka-get-offsets": "org.apache.kafka.tools.GetOffsetShell",
    "kafka-log-dirs": "org.apache.kafka.tools.LogDirsCommand",
    "kafka-delete-records": "org.apache.kafka.tools.DeleteRecordsCommand",
    "kafka-leader-election": "org.apache.kafka.tools.LeaderElectionCommand",
    "kafka-reassign-partitions": "org.apache.kafka.tools.reassign.ReassignPartitionsCommand",
}


class KafkaToolsMissing(RuntimeError):
    """Kafka's jars are not where ``make venv`` puts them."""


@dataclass(frozen=True)
class ToolRun:
    """A finished tool: its exit code and what it printed."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str

    def check(self) -> ToolRun:
        """This run, if it exited 0; else an error showing the command and its output."""
        if self.returncode != 0:
            raise AssertionError(
                f"{' '.join(self.args)} exited {self.returncode}\nstdout:\n{self.stdout}\nstderr:\n{self.stderr}"
            )
        return self


# Where ``make venv`` puts Kafka's jars (4.x and the 3.9 line) and the tests' compiled Java programs.
KAFKA_JARS = "kafka-clients-jars"
KAFKA39_JARS = "kafka39-clients-jars"
TEST_CLASSES = "jvm-test-classes"


class KafkaTools:
    """Kafka's tools from the jars in ``jar_dir`` (default: the environment's 4.x jars, from
    ``make venv``; ``Path(sys.prefix) / KAFKA39_JARS`` for the 3.9 line), with the tests' Java
    programs (``tests/jvm``, compiled by ``make venv`` into ``<venv>/jvm-test-classes``) on the
    classpath when they were built."""

    def __init__(self, jar_dir: Path | None = None) -> None:
        self.jar_dir = jar_dir if jar_dir is not None else Path(sys.prefix) / KAFKA_JARS
        if not any(self.jar_dir.glob("kafka-tools-*.jar")):
            raise KafkaToolsMissing(
                f"no kafka-tools jar in {self.jar_dir}: Kafka's tools come from Maven Central at install time; "
                "run `make venv`"
            )
        self.java = find_java()
        self.classes_dir = Path(sys.prefix) / TEST_CLASSES

    def version(self) -> str:
        """The version of the kafka-clients jar, e.g. "3.9.2"."""
        jar = next(self.jar_dir.glob("kafka-clients-*.jar"))
        return jar.name.removeprefix("kafka-clients-").removesuffix(".jar")

    def command(self, main_class: str, *args: str, heap_mb: int = 256) -> list[str]:
        """The ``java`` command line of ``main_class`` (a class of Kafka's jars or of the tests'
        programs) with ``args``."""
        classpath = [str(self.jar_dir / "*")]
        if self.classes_dir.is_dir():
            classpath.append(str(self.classes_dir))
        return [
            self.java,
            f"-Xmx{heap_mb}m",
            "-cp",
            os.pathsep.join(classpath),
            main_class,
            *args,
        ]

    def run(self, tool: str, *args: str, input: str | None = None, timeout_s: float = 120.0) -> ToolRun:
        """Run ``tool`` (a name of :data:`KAFKA_TOOLS`, or a main class) with ``args`` to its end."""
        command = self.command(KAFKA_TOOLS.get(tool, tool), *args)
        done = subprocess.run(command, input=input, capture_output=True, text=True, timeout=timeout_s, check=False)
        return ToolRun(command, done.returncode, done.stdout, done.stderr)
