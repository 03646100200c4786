"""Kafka Streams (Kafka 4.3.1's own library, the seeds' Streams API) on a sparklog broker, with
``processing.guarantee=exactly_once_v2``: a word count (``tests/jvm/WordCount.java``) and a
windowed aggregation of a stream joined with a table (``tests/jvm/RegionClicks.java``), both
compiled by ``make venv`` against the jars it fetched. Streams creates its repartition and
changelog topics itself; an instance killed -9 in the middle and restarted on an empty state
directory restores its state from the changelogs, and the committed output holds every result
exactly once."""

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
CLICKS_APPLICATION = "region-clicks"
CLICKS, USERS, REGION_COUNTS = "clicks", "users", "region-counts"
REGIONS = {f"user-{u}": ("north", "south", "east")[u % 3] for u in range(8)}
WINDOW_MS = 10_000
CLICKS_START_MS = 1_800_000_000_000  # a window boundary


class StreamsApp:
    """One instance of a Streams application of ``tests/jvm`` (``main_class`` with ``args``, then
    its state directory): a ``java`` process, its output in a log file."""

    def __init__(self, main_class: str, args: tuple[str, ...], state_dir: Path, log: Path) -> None:
        command = KafkaTools().command(main_class, *args, str(state_dir))
        self.log = log
        with log.open("w") as out:
            self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)

    def running(self) -> bool:
        return "STATE RUNNING" in self.log.read_text()

    def stop(self, signum: int) -> None:
        self.process.send_signal(signum)
        self.process.wait(60)


@pytest.fixture
def apps(group_broker: BrokerAgents) -> Iterator[list[StreamsApp]]:
    started: list[StreamsApp] = []
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
    """A counting application's committed output (read_committed): the counts of each key in
    output order."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"{topic}-check",
                "auto.offset.reset": "earliest",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
            }
        )
        self.consumer.subscribe([topic])
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

    def check_exactly_once(self, sent: collections.Counter[str]) -> None:
        """Every count of every key from 1 to its total, each once, in order; no other key."""
        self.consumer.close()
        for key, total in sent.items():
            assert self.seen[key] == list(range(1, total + 1)), f"{key}: every count from 1 to {total} exactly once"
        assert set(self.seen) == set(sent), sorted(set(self.seen) - set(sent))


def run_across_a_kill(
    main_class: str,
    args: tuple[str, ...],
    apps: list[StreamsApp],
    tmp_path: Path,
    produce: Callable[[int, int], collections.Counter[str]],
) -> collections.Counter[str]:
    """The Streams application ``main_class`` (``args``: bootstrap, application id, its topics,
    the output last) on counted input in two batches (300, then 5,000 items from
    ``produce(first, count)``), killed -9 while it works through the second and started again on
    an empty state directory; -> what was sent, once the committed output holds every count of
    it exactly once."""
    output = CommittedCounts(args[0], args[-1])

    def start(name: str) -> StreamsApp:
        return StreamsApp(main_class, args, tmp_path / f"state-{name}", tmp_path / f"app-{name}.log")

    first = produce(0, 300)
    apps.append(start("1"))
    output.read_until(lambda: output.reached(first), "the first batch counted")
    sent = first + produce(300, 5000)
    # Killed while it works through the second batch: its open transaction is aborted.
    output.read_until(lambda: any(output.latest(k) > first[k] for k in list(output.seen)), "the second batch started")
    apps[0].stop(signal.SIGKILL)
    assert not output.reached(sent), "killed before the second batch was done"
    # A new instance on an empty state directory: its state comes back from the changelogs.
    apps.append(start("2"))
    output.read_until(lambda: output.reached(sent), f"every result: {dict(sent)}")
    output.check_exactly_once(sent)
    # The first instance may have committed the whole batch just before its kill, so the output
    # can be complete while the second is still starting: wait for it to come up on the changelogs.
    wait_until(apps[1].running, "the restarted instance running", timeout_s=120)
    return sent


def test_word_count_exactly_once_across_a_kill(
    cluster: sparklog.Cluster, group_broker: BrokerAgents, apps: list[StreamsApp], tmp_path: Path
) -> None:
    bootstrap = group_broker.bootstrap_servers
    create_led_topic(cluster, group_broker, LINES, partitions=3)
    create_led_topic(cluster, group_broker, COUNTS, partitions=3)
    args = (bootstrap, APPLICATION, LINES, COUNTS)
    run_across_a_kill("WordCount", args, apps, tmp_path, lambda first, count: produce_lines(bootstrap, first, count))
    topics = cluster.list_topics()
    changelog = f"{APPLICATION}-word-counts-changelog"
    assert changelog in topics and f"{APPLICATION}-word-counts-repartition" in topics, topics
    assert cluster.topic_config(changelog)["cleanup.policy"] == "compact"


def produce_clicks(bootstrap: str, first: int, count: int) -> collections.Counter[str]:
    """``count`` clicks of the users in turn, 100 per 10 s window of event time; -> the expected
    final count per ``<region>@<window start>``."""
    expected: collections.Counter[str] = collections.Counter()
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20})
    users = sorted(REGIONS)
    for i in range(first, first + count):
        user, timestamp_ms = users[i % len(users)], CLICKS_START_MS + i * (WINDOW_MS // 100)
        expected[f"{REGIONS[user]}@{timestamp_ms - timestamp_ms % WINDOW_MS}"] += 1
        producer.produce(CLICKS, key=user.encode(), value=f"/page/{i}".encode(), timestamp=timestamp_ms)
    assert producer.flush(30) == 0
    return expected


def test_windowed_aggregation_joined_with_a_table_exactly_once_across_a_kill(
    cluster: sparklog.Cluster, group_broker: BrokerAgents, apps: list[StreamsApp], tmp_path: Path
) -> None:
    bootstrap = group_broker.bootstrap_servers
    # A stream-table join needs its inputs co-partitioned: same partition count, same producer.
    for topic in (CLICKS, USERS, REGION_COUNTS):
        create_led_topic(cluster, group_broker, topic, partitions=2)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for user, region in REGIONS.items():
        producer.produce(USERS, key=user.encode(), value=region.encode(), timestamp=CLICKS_START_MS - 60_000)
    assert producer.flush(30) == 0
    args = (bootstrap, CLICKS_APPLICATION, CLICKS, USERS, REGION_COUNTS)
    run_across_a_kill(
        "RegionClicks", args, apps, tmp_path, lambda first, count: produce_clicks(bootstrap, first, count)
    )
    topics = cluster.list_topics()
    prefix = CLICKS_APPLICATION
    assert f"{prefix}-region-counts-repartition" in topics, topics
    assert cluster.topic_config(f"{prefix}-region-counts-changelog")["cleanup.policy"] == "compact,delete"
    assert cluster.topic_config(f"{prefix}-user-regions-changelog")["cleanup.policy"] == "compact"
