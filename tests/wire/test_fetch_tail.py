"""Fetch from the leader's in-memory tail (DESIGN §14): a consumer at the end of the log gets
the batches the producers sent, byte for byte but for the base offset and leader epoch, with
no segment read; older data (not in the tail, e.g. after a restart) is re-encoded from the
segments with the same records. Long polls wake on the next commit."""

from __future__ import annotations

import datetime
import struct
import threading
import time

from kafka.record.default_records import DefaultRecordBatch
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.types import TopicName
from kio.static.primitive import i32, i32Timedelta, i64

import sparklog
from sparklog.testing import BrokerAgents
from tests.helpers import BOTH_STORES
from tests.wire.conftest import create_led_topic, wait_until
from tests.wire.raw import call
from tests.wire.test_wire_bad_input import batch, produce_request

TOPIC = "wire-bad"  # the produce helpers' topic
LZ4 = 3


def fetch(port: int, offset: int, max_wait_ms: int = 0, min_bytes: int = 1) -> tuple[int, int, bytes]:
    request = FetchRequest(
        max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=max_wait_ms)),
        min_bytes=i32(min_bytes),
        topics=(
            FetchTopic(
                topic=TopicName(TOPIC),
                partitions=(
                    FetchPartition(partition=i32(0), fetch_offset=i64(offset), partition_max_bytes=i32(1 << 20)),
                ),
            ),
        ),
        forgotten_topics_data=(),
    )
    data = call(port, request).responses[0].partitions[0]
    assert data.error_code == ErrorCode.none, data.error_code
    return data.high_watermark, data.log_start_offset, bytes(data.records or b"")


def records_of(data: bytes) -> list[tuple[int, bytes | None]]:
    out = []
    position = 0
    while position < len(data):
        length = struct.unpack_from(">i", data, position + 8)[0] + 12
        out += [(r.offset, r.value) for r in DefaultRecordBatch(data[position : position + length])]
        position += length
    return out


@BOTH_STORES
def test_the_tail_serves_the_producers_batches_and_restarts_fall_back_to_segments(
    cluster: sparklog.Cluster, one_broker: BrokerAgents
) -> None:
    create_led_topic(cluster, one_broker, TOPIC, partitions=1)
    port = one_broker.port(1)
    sent = [bytes(batch([f"a{i}".encode() for i in range(5)], codec=LZ4)), bytes(batch([b"b0", b"b1"], codec=LZ4))]
    for data in sent:
        assert call(port, produce_request({0: data})).responses[0].partition_responses[0].error_code == ErrorCode.none
    # the first fetch notes log-start from the table; the next ones are served from memory
    fetch(port, 0)
    high_watermark, log_start, data = fetch(port, 5)
    assert (high_watermark, log_start) == (7, 0)
    expected = bytearray(sent[1])
    struct.pack_into(">q", expected, 0, 5)
    struct.pack_into(">i", expected, 12, cluster.describe_topic(TOPIC).partitions[0].leader_epoch)
    assert data == bytes(expected)  # still lz4, as sent: not re-encoded from a segment
    assert records_of(data) == [(5, b"b0"), (6, b"b1")]

    one_broker.stop(1)
    one_broker.start(1)
    wait_until(lambda: cluster.describe_topic(TOPIC).partitions[0].leader == 1, "broker 1 leads again")
    _hw, _start, again = fetch(one_broker.port(1), 0)
    assert again != sent[0]  # re-encoded from the segment
    assert records_of(again) == [(i, f"a{i}".encode()) for i in range(5)] + [(5, b"b0"), (6, b"b1")]


@BOTH_STORES
def test_a_long_poll_at_the_end_wakes_on_the_next_commit(cluster: sparklog.Cluster, one_broker: BrokerAgents) -> None:
    create_led_topic(cluster, one_broker, TOPIC, partitions=1)
    port = one_broker.port(1)
    call(port, produce_request({0: bytes(batch([b"first"]))}))
    fetch(port, 0)
    answers: list[tuple[float, tuple[int, int, bytes]]] = []

    def poll() -> None:
        began = time.monotonic()
        result = fetch(port, 1, max_wait_ms=20_000)
        answers.append((time.monotonic() - began, result))

    poller = threading.Thread(target=poll)
    poller.start()
    call(port, produce_request({0: bytes(batch([b"second"]))}))
    poller.join(30)
    waited, (high_watermark, _start, data) = answers[0]
    assert high_watermark == 2 and records_of(data) == [(1, b"second")]
    assert waited < 10, f"the long poll waited {waited:.1f} s for a commit that came at once"
