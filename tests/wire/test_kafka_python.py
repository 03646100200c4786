"""kafka-python (a pure-Python Kafka client) against a real broker agent: its producer is
idempotent by default (InitProducerId + sequences), its consumer seeks and looks up offsets
by time."""

from __future__ import annotations

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

import sparklog
from sparklog.testing import BrokerAgents
from tests.helpers import BOTH_STORES
from tests.wire.conftest import create_led_topic

TOPIC = "wire-events"
BASE_MS = 1_700_000_000_000


@pytest.mark.parametrize("compression", [None, "gzip", "snappy", "lz4", "zstd"])
@BOTH_STORES
def test_idempotent_producer_and_consumer_with_seek_and_offsets_for_times(
    cluster: sparklog.Cluster, one_broker: BrokerAgents, compression: str | None
) -> None:
    create_led_topic(cluster, one_broker, TOPIC, partitions=2)
    producer = KafkaProducer(bootstrap_servers=one_broker.bootstrap_servers, compression_type=compression, linger_ms=5)
    futures = [
        producer.send(
            TOPIC,
            key=f"k{i % 5}".encode(),
            value=f"v{i}".encode(),
            headers=[("n", str(i).encode())],
            timestamp_ms=BASE_MS + 10 * i,
        )
        for i in range(200)
    ]
    producer.flush(30)
    metadata = [f.get(timeout=30) for f in futures]
    producer.close()
    for p in (0, 1):
        offsets = [m.offset for m in metadata if m.partition == p]
        assert offsets == list(range(len(offsets)))  # contiguous, in send order

    # the idempotent producer's last sequence is in the table (it survives a failover)
    stored = cluster.read(TOPIC)
    assert stored.num_rows == 200

    consumer = KafkaConsumer(bootstrap_servers=one_broker.bootstrap_servers, enable_auto_commit=False)
    partitions = [TopicPartition(TOPIC, p) for p in (0, 1)]
    consumer.assign(partitions)
    consumer.seek_to_beginning()
    seen = {}
    for _ in range(100):
        for records in consumer.poll(timeout_ms=500).values():
            for r in records:
                seen[(r.partition, r.offset)] = r
        if len(seen) >= 200:
            break
    assert len(seen) == 200
    for i, m in enumerate(metadata):
        r = seen[(m.partition, m.offset)]
        assert (r.key, r.value, r.timestamp, r.headers) == (
            f"k{i % 5}".encode(),
            f"v{i}".encode(),
            BASE_MS + 10 * i,
            [("n", str(i).encode())],
        )

    # offsets for times: the first record at or after the timestamp, per partition
    target = BASE_MS + 10 * 100
    found = consumer.offsets_for_times({tp: target for tp in partitions})
    for tp in partitions:
        expected = min(
            (m.offset for i, m in enumerate(metadata) if m.partition == tp.partition and BASE_MS + 10 * i >= target)
        )
        assert found[tp].offset == expected
    assert consumer.beginning_offsets(partitions) == dict.fromkeys(partitions, 0)
    ends = consumer.end_offsets(partitions)
    assert sum(ends.values()) == 200

    # seek into the middle and read on from there
    tp0 = partitions[0]
    consumer.assign([tp0])
    consumer.seek(tp0, 3)
    batch = consumer.poll(timeout_ms=5000, max_records=1)
    assert [r.offset for r in batch[tp0]] == [3]
    consumer.close()
