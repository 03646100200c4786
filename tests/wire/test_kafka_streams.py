"""Kafka Streams (Kafka 4.3.1's own library, the seeds' Streams API) on a sparklog broker: a word
count with ``processing.guarantee=exactly_once_v2`` (``tests/jvm/WordCount.java``, compiled by
``make venv`` against the jars it fetched). Streams creates its repartition
and compacted changelog topics itself; an instance killed -9 in the middle and restarted on an
empty state directory restores its counts from the changelog, and the committed output holds
every count exactly once."""

from __future__ import annotations

import collections
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer

import sparklog
from sparklog.testing import BrokerAgents, KafkaTools
from tests.helpers import wait_until
from tests.wire.conftest import create_led_topic

APPLICATION = "word-count"
LINES, COUNTS = "lines", "word-counts"
WORDS = ["kafka", "delta", "spark", "streams", "table", "log"]


class WordCountApp:
    """One instance of the word count: a ``java`` process, its output in a log file."""

    def __init__(self, bootstrap: str, state_dir: Path, log: Path) -> None:
        command = KafkaTools().command("WordCount", bootstrap, APPLICATION, LINES, COUNTS, str(state_dir))
        self.log = log
        with log.open("w") as out:
            self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)

    def running(self) -> bool:
        return "STATE RUNNING" in self.log.read_text()

    def stop(self, signum: int) -> None:
        self.process.send_signal(signum)
        self.process.wait(60)


@pytest.fixture
def apps(group_broker: BrokerAgents) -> Iterator[list[WordCountApp]]:
    started: list[WordCountApp] = []
    yield started
    for app in started:
        if app.process.poll() is None:
            app.stop(signal.SIGKILL)


def produce_lines(bootstrap: str, first: int, count: int) -> collections.Counter[str]:
    """``count`` lines of three words each; -> how often each word was sent."""
    sent: collections.Counter[str] = collections.Counter()
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20})
    for i in range(first, first + count):
        words = [WORDS[(i * k) % len(WORDS)] for k in (1, 2, 5)]
        sent.update(words)
        producer.produce(LINES, value=" ".join(words).encode(), key=str(i).encode())
    assert producer.flush(30) == 0
    return sent


class CommittedCounts:
    """The word count's committed output (read_committed), per word in output order."""

    def __init__(self, bootstrap: str) -> None:
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "word-count-check",
                "auto.offset.reset": "earliest",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
            }
        )
        self.consumer.subscribe([COUNTS])
        self.seen: dict[str, list[int]] = collections.defaultdict(list)

    def latest(self, word: str) -> int:
        return self.seen[word][-1] if self.seen[word] else 0

    def read_until(self, done: Callable[[], bool], what: str) -> None:
        def caught_up() -> bool:
            for message in self.consumer.consume(num_messages=1000, timeout=0.2):
                key, value = message.key(), message.value()
                assert message.error() is None and key is not None and value is not None, message.error()
                self.seen[key.decode()].append(int(value.decode()))
            return done()

        wait_until(caught_up, what, timeout_s=120, interval_s=0)

    def reached(self, counts: collections.Counter[str]) -> bool:
        return all(self.latest(w) == n for w, n in counts.items())


def test_word_count_exactly_once_across_a_kill(
    cluster: sparklog.Cluster, group_broker: BrokerAgents, apps: list[WordCountApp], tmp_path: Path
) -> None:
    bootstrap = group_broker.bootstrap_servers
    create_led_topic(cluster, group_broker, LINES, partitions=3)
    create_led_topic(cluster, group_broker, COUNTS, partitions=3)
    output = CommittedCounts(bootstrap)
    first = produce_lines(bootstrap, 0, 300)
    apps.append(WordCountApp(bootstrap, tmp_path / "state-1", tmp_path / "app-1.log"))
    output.read_until(lambda: output.reached(first), "the first 300 lines counted")
    sent = first + produce_lines(bootstrap, 300, 5000)
    # Killed while it works through the second batch: its open transaction is aborted.
    output.read_until(lambda: any(output.latest(w) > n for w, n in first.items()), "the second batch started")
    apps[0].stop(signal.SIGKILL)
    assert not output.reached(sent), "killed before the second batch was done"
    # A new instance on an empty state directory: the counts come back from the changelog.
    apps.append(WordCountApp(bootstrap, tmp_path / "state-2", tmp_path / "app-2.log"))
    output.read_until(lambda: output.reached(sent), f"every word counted: {dict(sent)}")
    output.consumer.close()
    for word, total in sent.items():
        assert output.seen[word] == list(range(1, total + 1)), f"{word}: every count from 1 to {total} exactly once"
    topics = cluster.list_topics()
    changelog = f"{APPLICATION}-word-counts-changelog"
    assert changelog in topics and f"{APPLICATION}-word-counts-repartition" in topics, topics
    assert cluster.topic_config(changelog)["cleanup.policy"] == "compact"
    assert apps[1].running()
