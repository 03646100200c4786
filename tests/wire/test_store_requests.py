"""What a broker asks of its store (DESIGN §16), counted by a proxy in front of moto: a
commit round costs one PUT per new segment and one conditional PUT of the commit, never a
LIST, GET or HEAD (the leader trusts its own record of the table while it holds the
partition's write lease); an idle broker makes no requests at all."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from collections.abc import Callable

import obstore
from confluent_kafka import Consumer, Producer, TopicPartition

import sparklog
from sparklog.broker.kafka.listener import DISK_PIPELINED_BYTES
from sparklog.log.checkpoints import STORE_CHECKPOINT_INTERVAL
from sparklog.log.object_store import open_store
from sparklog.model.storage_location import StorageSettings, parse_location
from sparklog.testing import BrokerAgents
from sparklog.testing.metrics import scrape
from sparklog.testing.object_stores import MotoS3
from sparklog.testing.store_proxy import StoreProxy
from tests.helpers import in_threads, wait_until
from tests.wire.conftest import create_led_topic
from tests.wire.raw import produce_answer, produce_frame, recv_frame

TOPIC = "counted"
IDLE_WINDOW_S = 5.0  # a measurement window, not a wait for a condition


def send_one_at_a_time(bootstrap: str, count: int, partitions: int = 1) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    for i in range(count):
        producer.produce(TOPIC, value=b"v%d" % i, partition=i % partitions)
        assert producer.flush(30) == 0


def newest_commit(agents: BrokerAgents, moto_s3: MotoS3) -> tuple[int, int]:
    """The newest commit of the topic's table and the version ``_last_checkpoint`` names (-1:
    none), read on moto itself (not through the proxy, which would count the requests).
    delta-rs writes ``_last_checkpoint`` last, after the checkpoint's file."""
    assert agents.log_store is not None
    table = parse_location(agents.log_store).child("topics", TOPIC)
    store = open_store(table, StorageSettings.from_config(moto_s3.settings()))
    names = [str(meta["path"]) for batch in obstore.list(store, "_delta_log/") for meta in batch]
    commits = [int(n.rsplit("/", 1)[1][:20]) for n in names if n.endswith(".json")]
    if not any(n.endswith("/_last_checkpoint") for n in names):
        return max(commits), -1
    last = json.loads(bytes(obstore.get(store, "_delta_log/_last_checkpoint").bytes()))
    return max(commits), int(last["version"])


def clear_of_checkpoints(agents: BrokerAgents, moto_s3: MotoS3, rounds: int) -> None:
    """Produce (one record a round) until the table's next ``rounds`` versions hold no
    checkpoint, and wait for the checkpoint before them: delta-rs writes those in the
    background (it reads the log since the last one again), which a count of what rounds
    cost must leave out."""
    assert rounds < STORE_CHECKPOINT_INTERVAL
    version, _ = newest_commit(agents, moto_s3)
    due = (version // STORE_CHECKPOINT_INTERVAL + 1) * STORE_CHECKPOINT_INTERVAL
    if version + rounds >= due:
        send_one_at_a_time(agents.bootstrap_servers, due - version)
        wait_until(lambda: newest_commit(agents, moto_s3)[1] >= due, f"the checkpoint at version {due}")


def counted_by_broker(agents: BrokerAgents) -> dict[str, float]:
    """The broker's own ``sparklog_store_requests_total`` by kind."""
    series = scrape(agents.metrics_url(1)).series("sparklog_store_requests_total")
    return {dict(labels)["kind"]: value for labels, value in series.items()}


def test_a_commit_round_is_two_puts_and_no_list(
    cluster: sparklog.Cluster, counted_broker: BrokerAgents, proxy: StoreProxy, moto_s3: MotoS3
) -> None:
    create_led_topic(cluster, counted_broker, TOPIC, partitions=1)
    send_one_at_a_time(counted_broker.bootstrap_servers, 3)  # the table and the leader warmed up
    rounds = 15
    clear_of_checkpoints(counted_broker, moto_s3, rounds)
    proxy.reset()
    before = counted_by_broker(counted_broker)
    send_one_at_a_time(counted_broker.bootstrap_servers, rounds)
    counts = proxy.counts()
    after = counted_by_broker(counted_broker)
    reported = {kind: int(after[kind] - before.get(kind, 0)) for kind in after if after[kind] > before.get(kind, 0)}
    assert reported == counts, f"the broker's metrics {reported} != the proxy's count {counts}"
    print(f"store requests for {rounds} one-record rounds: {counts}")
    assert counts.get("LIST", 0) == 0, counts
    assert counts.get("PUT", 0) == rounds, f"one segment PUT a round: {counts}"
    assert counts.get("PUT_IF_ABSENT", 0) == rounds, f"one conditional PUT of the commit a round: {counts}"
    assert counts.get("GET", 0) == 0, f"the leader knows its own commits: nothing read back {counts}"
    assert counts.keys() == {"PUT", "PUT_IF_ABSENT"}, f"nothing probed before a commit: {counts}"


def test_a_leaders_checkpoint_reads_each_commit_once(
    cluster: sparklog.Cluster, counted_broker: BrokerAgents, proxy: StoreProxy, moto_s3: MotoS3
) -> None:
    """Every 20 commits the broker checkpoints its table on a local copy of the log: once
    the copy holds a checkpoint, the next fetches each of the 20 commits once (delta-rs's own
    read each about four times) and no LIST, checks ``_last_checkpoint`` is still the one it
    uploaded (a HEAD), and uploads the checkpoint and ``_last_checkpoint`` (whose PUT answers
    its stamp: no HEAD after the upload, so the upload is the checkpoint's last request)."""
    create_led_topic(cluster, counted_broker, TOPIC, partitions=1)
    send_one_at_a_time(counted_broker.bootstrap_servers, 3)
    version, _ = newest_commit(counted_broker, moto_s3)
    first = (version // STORE_CHECKPOINT_INTERVAL + 1) * STORE_CHECKPOINT_INTERVAL
    send_one_at_a_time(counted_broker.bootstrap_servers, first - version)
    wait_until(lambda: newest_commit(counted_broker, moto_s3)[1] == first, f"the checkpoint at version {first}")
    proxy.reset()
    send_one_at_a_time(counted_broker.bootstrap_servers, STORE_CHECKPOINT_INTERVAL)
    second = first + STORE_CHECKPOINT_INTERVAL
    wait_until(lambda: newest_commit(counted_broker, moto_s3)[1] == second, f"the checkpoint at version {second}")
    counts = proxy.counts()
    rounds = STORE_CHECKPOINT_INTERVAL
    assert counts == {"PUT": rounds + 2, "PUT_IF_ABSENT": rounds, "GET": rounds, "HEAD": 1}, counts


def test_an_idle_broker_makes_no_store_requests(
    cluster: sparklog.Cluster, counted_broker: BrokerAgents, proxy: StoreProxy
) -> None:
    create_led_topic(cluster, counted_broker, TOPIC, partitions=2)
    send_one_at_a_time(counted_broker.bootstrap_servers, 5)
    proxy.reset()
    time.sleep(IDLE_WINDOW_S)
    assert proxy.counts() == {}, "requests while idle"


def test_concurrent_rounds_of_several_partitions_read_nothing_back(
    cluster: sparklog.Cluster, counted_broker: BrokerAgents, proxy: StoreProxy, moto_s3: MotoS3
) -> None:
    partitions, sends = 4, 4
    create_led_topic(cluster, counted_broker, TOPIC, partitions=partitions)
    send_one_at_a_time(counted_broker.bootstrap_servers, 2 * partitions, partitions)  # every lease taken
    clear_of_checkpoints(counted_broker, moto_s3, partitions * sends)
    proxy.reset()

    def produce(partition: int) -> None:
        producer = Producer({"bootstrap.servers": counted_broker.bootstrap_servers, "acks": "all", "linger.ms": 0})
        for i in range(sends):
            producer.produce(TOPIC, value=b"v%d" % i, partition=partition)
            assert producer.flush(30) == 0

    in_threads(produce, partitions)
    counts = proxy.counts()
    print(f"store requests for {partitions} × {sends} concurrent one-record sends: {counts}")
    assert counts.keys() == {"PUT", "PUT_IF_ABSENT"}, f"nothing read, probed or refused: {counts}"


def test_an_idle_consumer_makes_no_store_requests(
    cluster: sparklog.Cluster, counted_broker: BrokerAgents, proxy: StoreProxy
) -> None:
    """A consumer at the end of an idle topic keeps fetching (long polls the broker holds
    until an append wakes them): none of that reaches the store."""
    create_led_topic(cluster, counted_broker, TOPIC, partitions=2)
    send_one_at_a_time(counted_broker.bootstrap_servers, 4, partitions=2)
    consumer = Consumer(
        {
            "bootstrap.servers": counted_broker.bootstrap_servers,
            "group.id": "idle-reader",
            "enable.auto.commit": False,  # an idle consumer's commits would be writes of its own
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 100,
        }
    )
    try:
        consumer.subscribe([TOPIC])
        got: list[bytes] = []

        def all_four() -> bool:
            got.extend(m.value() or b"" for m in consumer.consume(10, 0.2))
            return len(got) >= 4

        wait_until(all_four, "the 4 records")
        consumer.commit(asynchronous=False)
        proxy.reset()
        deadline = time.monotonic() + IDLE_WINDOW_S
        while time.monotonic() < deadline:
            assert not consumer.consume(10, 0.2), "nothing was produced"
    finally:
        consumer.close()
    assert proxy.counts() == {}, "requests while the consumer idled"


# -- pacing: linger, size and the broker's budget of rounds (sparklog/broker/round_pacing.py) --
StartBrokers = Callable[..., contextlib.AbstractContextManager[BrokerAgents]]


def send_together(bootstrap: str, producers: int, value: bytes) -> None:
    """``producers`` producers (connected, the topic's metadata known) send one record each
    at the same moment and wait for its acknowledgement."""
    clients = [Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0}) for _ in range(producers)]
    for client in clients:
        client.produce(TOPIC, value=b"warm-up", partition=0)
        assert client.flush(30) == 0
    ready = threading.Barrier(producers)

    def send(index: int) -> None:
        ready.wait(30)
        clients[index].produce(TOPIC, value=value, partition=0)
        assert clients[index].flush(30) == 0

    in_threads(send, producers)


def high_watermark(bootstrap: str, partition: int) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks"})
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(TOPIC, partition), timeout=30)[1])
    finally:
        consumer.close()


def test_rounds_linger_so_requests_arriving_together_share_one(
    cluster: sparklog.Cluster, counted_brokers: StartBrokers, proxy: StoreProxy
) -> None:
    with counted_brokers({"store.round.linger.ms": "1000", "store.rounds.per.second": "0"}) as agents:
        create_led_topic(cluster, agents, TOPIC, partitions=1)
        send_one_at_a_time(agents.bootstrap_servers, 1)
        proxy.reset()
        started_s = time.monotonic()
        send_one_at_a_time(agents.bootstrap_servers, 1)
        assert time.monotonic() - started_s >= 1.0, "a lone request's round waits the linger"
        proxy.reset()
        send_together(agents.bootstrap_servers, 6, b"together")
        commits = proxy.counts().get("PUT_IF_ABSENT", 0)
    # The warm-up records come one round each (ack awaited); the 6 sent together are one round.
    assert commits == 6 + 1, f"6 warm-up rounds and one round for 6 requests sent together: {commits} commits"


def test_one_connections_pipelined_requests_share_rounds(
    cluster: sparklog.Cluster, counted_brokers: StartBrokers, proxy: StoreProxy
) -> None:
    """A client at linger.ms=0 sends a request per record without waiting: its backlog is a
    run of tiny requests in the socket. The broker reads far enough ahead that they share a
    lingering round; read 16 at a time they made 25 rounds of a store's latency each."""
    requests = 400
    with counted_brokers({"store.round.linger.ms": "300", "store.rounds.per.second": "0"}) as agents:
        create_led_topic(cluster, agents, TOPIC, partitions=1)
        send_one_at_a_time(agents.bootstrap_servers, 1)
        proxy.reset()
        with socket.create_connection(("127.0.0.1", agents.port(1)), timeout=60) as sock:
            sock.sendall(b"".join(produce_frame(TOPIC, i, b"p%d" % i) for i in range(requests)))
            answers = [produce_answer(recv_frame(sock)) for _ in range(requests)]
        commits = proxy.counts().get("PUT_IF_ABSENT", 0)
    assert [a[:2] for a in answers] == [(i, 0) for i in range(requests)], "answered in order, without errors"
    assert [a[2] for a in answers] == list(range(1, requests + 1)), "stored in request order"
    assert commits <= 2, f"{requests} requests sent at once took {commits} rounds"


def test_one_connection_may_have_more_than_a_disks_bytes_unanswered_on_a_store(
    cluster: sparklog.Cluster, counted_brokers: StartBrokers, proxy: StoreProxy
) -> None:
    """A bulk producer's throughput on a store is its unanswered bytes over a round's
    latency. Twelve requests of 900 KB sent at once (more than a disk's 8 MiB per
    connection) are all read within one long linger and share one round."""
    requests = 12
    values = [os.urandom(900_000) for _ in range(requests)]
    assert sum(map(len, values)) > DISK_PIPELINED_BYTES
    with counted_brokers({"store.round.linger.ms": "2000", "store.rounds.per.second": "0"}) as agents:
        create_led_topic(cluster, agents, TOPIC, partitions=1)
        send_one_at_a_time(agents.bootstrap_servers, 1)
        proxy.reset()
        with socket.create_connection(("127.0.0.1", agents.port(1)), timeout=60) as sock:
            sock.sendall(b"".join(produce_frame(TOPIC, i, value) for i, value in enumerate(values)))
            answers = [produce_answer(recv_frame(sock)) for _ in range(requests)]
        commits = proxy.counts().get("PUT_IF_ABSENT", 0)
    assert [a[:2] for a in answers] == [(i, 0) for i in range(requests)], "answered in order, without errors"
    assert commits == 1, f"{requests} requests of 900 KB sent at once took {commits} rounds"


def test_a_round_holds_at_most_round_max_bytes(
    cluster: sparklog.Cluster, counted_brokers: StartBrokers, proxy: StoreProxy
) -> None:
    """Six requests of 3 KB arrive within one long linger; with rounds of at most 4 KB each
    is a round of its own (without the bound they would share one)."""
    properties = {"store.round.linger.ms": "1000", "store.round.max.bytes": "4096", "store.rounds.per.second": "0"}
    with counted_brokers(properties) as agents:
        create_led_topic(cluster, agents, TOPIC, partitions=1)
        send_together(agents.bootstrap_servers, 6, b"x" * 3000)
        proxy.reset()
        send_together(agents.bootstrap_servers, 6, b"y" * 3000)
        counts = proxy.counts()
    assert counts.get("PUT_IF_ABSENT", 0) == 6 + 6, f"6 warm-up rounds and one round per 3 KB request: {counts}"


def test_a_broker_starts_at_most_its_budget_of_rounds_a_second(
    cluster: sparklog.Cluster, counted_brokers: StartBrokers, proxy: StoreProxy
) -> None:
    """Eight producers sending one record at a time for a few seconds could make a round of
    each request (about 40 a second on moto); the broker's budget of 10 a second holds,
    and every record is acknowledged (rounds carry more of them instead)."""
    rounds_per_second = 10
    properties = {"store.round.linger.ms": "0", "store.rounds.per.second": str(rounds_per_second)}
    producers, window_s = 8, 3.0
    with counted_brokers(properties) as agents:
        create_led_topic(cluster, agents, TOPIC, partitions=2)
        send_one_at_a_time(agents.bootstrap_servers, 2, partitions=2)
        acknowledged = [0] * producers
        proxy.reset()
        started_s = time.monotonic()

        def produce(index: int) -> None:
            producer = Producer({"bootstrap.servers": agents.bootstrap_servers, "acks": "all", "linger.ms": 0})
            while time.monotonic() - started_s < window_s:
                producer.produce(TOPIC, value=b"r", partition=index % 2)
                assert producer.flush(30) == 0
                acknowledged[index] += 1

        in_threads(produce, producers)
        elapsed_s = time.monotonic() - started_s
        commits = proxy.counts().get("PUT_IF_ABSENT", 0)
        stored = sum(high_watermark(agents.bootstrap_servers, p) for p in (0, 1)) - 2
    budget = rounds_per_second * elapsed_s + 1
    print(f"{commits} rounds in {elapsed_s:.1f} s for {sum(acknowledged)} records (budget {budget:.0f})")
    assert commits <= budget, f"{commits} rounds in {elapsed_s:.1f} s: over the budget of {rounds_per_second}/s"
    assert sum(acknowledged) > commits, "rounds carry several requests when the budget holds them back"
    assert stored == sum(acknowledged), f"{stored} records stored, {sum(acknowledged)} acknowledged"
