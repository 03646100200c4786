"""`make demo`: sparklog end to end on this machine.

Starts (or reuses) the embedded ZooKeeper and the embedded broker (Kafka clients reach it at
the config's ``listeners``, default ``127.0.0.1:9092``; both keep running afterwards), creates
topic ``demo-events`` (6 partitions), produces synthetic click events with the Spark producer
(``SPARKLOG_DEMO_RECORDS``, default 1,000,000), then shows per-partition counts from SQL,
replays partition 0 from offset 1000 and from a timestamp, sends 10 records with the light
producer and reads them back with the console consumer, sends 10 more with a Kafka client
(confluent-kafka) through the broker and reads them back with kcat (sparklog's console
consumer when kcat is not on PATH), and prints a summary. Re-running starts from a fresh
``demo-events`` topic.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime
from typing import Any

import sparklog
from sparklog.broker import embedded_broker
from sparklog.errors import BrokerNotAvailableError, TopicNotFoundError

TOPIC = "demo-events"
PARTITIONS = 6
KAFKA_RECORDS = 10


def step(message: str) -> None:
    print(f"\n== {message}", flush=True)


def console_consumer(partition: int, first: int, count: int) -> list[str]:
    """``sparklog consume`` reading ``count`` records of ``partition`` from offset ``first``."""
    return [
        *(sys.executable, "-m", "sparklog.cli.main", "consume", "--topic", TOPIC, "--partition", str(partition)),
        *("--offset", str(first), "--max-messages", str(count), "--timeout-ms", "10000"),
        *("--property", "print.key=true", "--property", "print.offset=true"),
    ]


def run_shown(command: list[str], shown: list[str]) -> int:
    """Run ``command``, printed first as the user would type it (``shown``)."""
    print("$ " + " ".join(shown), flush=True)
    return subprocess.run(command, check=False).returncode


def kafka_client_step(bootstrap: str) -> int:
    """Produce with confluent-kafka through the broker, read back with kcat (or sparklog)."""
    try:
        from confluent_kafka import Producer
    except ImportError:
        print("confluent-kafka is not installed (pip install confluent-kafka): skipping this step")
        return 0
    # murmur2_random: keys go where Kafka's Java client (and sparklog's producers) put them.
    config = {"bootstrap.servers": bootstrap, "partitioner": "murmur2_random", "enable.idempotence": True}
    producer = Producer(config)
    reports: list[tuple[int, int]] = []
    errors: list[str] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            reports.append((msg.partition(), msg.offset()))
            print(
                f"delivered key={msg.key().decode()} to {msg.topic()} partition {msg.partition()} offset {msg.offset()}"
            )

    for i in range(KAFKA_RECORDS):
        value = f'{{"event_id": "kafka-{i}", "action": "click"}}'
        producer.produce(TOPIC, value=value, key="kafka-user", on_delivery=delivered)
    left = producer.flush(30)
    if left or errors:
        print(f"Kafka producer: {left} records undelivered, errors: {errors}", file=sys.stderr)
        return 1
    partition, first = min(reports)
    print(
        f"Sent {KAFKA_RECORDS} records with confluent-kafka to {TOPIC}-{partition}, offsets {first}..{max(reports)[1]}"
    )
    if shutil.which("kcat"):
        fmt = "partition %p offset %o key %k: %s\\n"  # kcat turns the two characters \n into a newline
        kcat = ["kcat", "-b", bootstrap, "-C", "-t", TOPIC, "-p", str(partition), "-o", str(first)]
        kcat += ["-c", str(KAFKA_RECORDS), "-e", "-q", "-f"]
        code = run_shown([*kcat, fmt], [*kcat, f"'{fmt}'"])
    else:
        print("kcat is not on PATH (apt-get install kcat): reading them with sparklog's console consumer")
        command = console_consumer(partition, first, KAFKA_RECORDS)
        code = run_shown(command, ["sparklog", *command[3:]])
    if code != 0:
        print(f"The consumer failed with exit code {code}", file=sys.stderr)
    return code


def main() -> int:
    records = int(os.environ.get("SPARKLOG_DEMO_RECORDS", "1000000"))
    cluster = sparklog.connect()
    step(f"sparklog home {cluster.config.home}; ZooKeeper {cluster.replicas.zk.connect_string}")
    try:
        broker: embedded_broker.EmbeddedBrokerStatus | None = embedded_broker.ensure_started(cluster.config)
    except BrokerNotAvailableError as exc:
        broker = None
        print(f"The embedded broker did not start, so the Kafka client step is skipped: {exc}", file=sys.stderr)
    if broker is not None:
        print(
            f"Embedded broker {broker.broker_id} (sparklog broker start --embedded) serves Kafka clients at "
            f"{broker.bootstrap_servers} (pid {broker.pid}, log {broker.log_file})"
        )
    try:
        cluster.delete_topic(TOPIC)
    except TopicNotFoundError:
        pass
    cluster.create_topic(TOPIC, partitions=PARTITIONS)
    print(f"Created topic {TOPIC} with {PARTITIONS} partitions")

    step("Starting Spark (local mode)")
    from pyspark.sql import functions as F

    from sparklog.spark import get_or_create_session, produce, register_topics

    spark = get_or_create_session(app_name="sparklog-demo")
    start_ms = int(time.time() * 1000) - 3_600_000  # events spread over the last hour
    pages = F.array(*[F.lit(p) for p in ("/", "/search", "/product", "/cart", "/checkout", "/help")])
    events = (
        spark.range(records, numPartitions=4)
        .select(
            F.format_string("user-%d", (F.col("id") * 7919) % 5000).alias("key"),
            F.to_json(
                F.struct(
                    F.col("id").alias("event_id"),
                    F.format_string("user-%d", (F.col("id") * 7919) % 5000).alias("user"),
                    F.element_at(pages, (F.col("id") % 6 + 1).cast("int")).alias("page"),
                    F.when(F.col("id") % 10 == 0, "purchase").otherwise("click").alias("action"),
                )
            ).alias("value"),
            (F.lit(start_ms) + F.floor(F.col("id") * 3_600_000 / records)).alias("ts_ms"),
        )
        .select("key", "value", F.timestamp_millis("ts_ms").alias("timestamp"))
    )
    events.cache().count()  # generate once, so the produce timing is the produce alone

    step(f"Producing {records:,} click events with the Spark producer")
    began = time.perf_counter()
    result = produce(events, TOPIC)
    seconds = time.perf_counter() - began
    rate = result.records / seconds if seconds else 0.0
    print(f"Produced {result.records:,} records in one Delta commit in {seconds:.1f} s ({rate:,.0f} records/s)")
    events.unpersist()

    step("Records per partition (SQL over the topic)")
    register_topics(spark)
    spark.sql(
        f"SELECT partition, count(*) AS records, min(offset) AS first_offset, max(offset) AS last_offset "
        f"FROM `{TOPIC}` GROUP BY partition ORDER BY partition"
    ).show()

    step("Replay of partition 0 from offset 1000 (5 records)")
    replay = (
        spark.read.format("sparklog")
        .option("assign", f'{{"{TOPIC}":[0]}}')
        .option("startingOffsets", f'{{"{TOPIC}":{{"0":1000}}}}')
        .option("endingOffsets", f'{{"{TOPIC}":{{"0":1005}}}}')
        .load()
    )
    replay.selectExpr(
        "partition", "offset", "timestamp", "CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value"
    ).show(truncate=False)

    middle_ms = start_ms + 1_800_000
    middle = datetime.fromtimestamp(middle_ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")
    step(f"Replay of partition 0 from timestamp {middle} UTC (5 records)")
    by_time = (
        spark.read.format("sparklog")
        .option("assign", f'{{"{TOPIC}":[0]}}')
        .option("startingTimestamp", str(middle_ms))
        .load()
        .orderBy("offset")
        .limit(5)
    )
    by_time.selectExpr("partition", "offset", "timestamp", "CAST(value AS STRING) AS value").show(truncate=False)

    step("10 records with the light producer, read back with the console consumer")
    with cluster.producer(acks="all") as producer:
        sent = [
            producer.send(TOPIC, f'{{"event_id": "light-{i}", "action": "click"}}', key="light-user") for i in range(10)
        ]
        metadata = [f.result() for f in sent]
    partition, first = metadata[0].partition, metadata[0].offset
    print(f"Sent 10 records to {TOPIC}-{partition}, offsets {first}..{metadata[-1].offset}")
    command = console_consumer(partition, first, 10)
    code = run_shown(command, ["sparklog", *command[3:]])
    if code != 0:
        print(f"Console consumer failed with exit code {code}", file=sys.stderr)
        return 1

    if broker is not None:
        step(
            f"{KAFKA_RECORDS} records with a Kafka client (confluent-kafka) through the broker at {broker.bootstrap_servers}"
        )
        if kafka_client_step(broker.bootstrap_servers) != 0:
            return 1

    step("Summary")
    offsets = cluster.partition_offsets(TOPIC)
    total = sum(hw - start for start, hw in offsets.values())
    print(f"Topic {TOPIC}: {total:,} records in {len(offsets)} partitions")
    for p, (start, hw) in offsets.items():
        print(f"  partition {p}: offsets {start}..{hw - 1} ({hw - start:,} records)")
    print(f"Spark produce throughput: {rate:,.0f} records/s ({result.records:,} records, {seconds:.1f} s)")
    if broker is not None:
        print(
            f"The embedded broker keeps running; list the cluster with a Kafka client:\n  kcat -b {broker.bootstrap_servers} -L"
        )
        print("Stop it and ZooKeeper with `make zookeeper-stop` (or .venv/bin/sparklog zookeeper stop).")
    spark.stop()
    cluster.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
