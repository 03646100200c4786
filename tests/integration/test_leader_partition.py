"""The leader side of a partition (sparklog/broker/partition.py) and the commit rounds
behind it, called directly — no listener, no socket — on a real ZooKeeper and real Delta
tables, with record batches built by kafka-python (a client nobody here wrote). Each test
states one of the module's invariants."""

from __future__ import annotations

import struct

import pytest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

import sparklog
from sparklog.broker.partition import LeaderPartitions
from sparklog.broker.pending_append import PendingAppend
from sparklog.broker.producer_state import ProducerStates
from sparklog.errors import (
    NotLeaderError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    RecordTooLargeError,
    StorageError,
    UnknownPartitionError,
)
from sparklog.model.kafka_batches import CorruptBatchError
from tests.helpers import wait_until
from tests.integration.conftest import LEADER_TOPIC as TOPIC

WAIT_S = 60.0


def batch(values: list[bytes], producer_id: int = -1, base_sequence: int = -1) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=producer_id,
        producer_epoch=0 if producer_id >= 0 else -1,
        base_sequence=base_sequence,
        batch_size=1 << 20,
    )
    for i, value in enumerate(values):
        builder.append(i, timestamp=1_700_000_000_000 + i, key=None, value=value, headers=[])
    return bytes(builder.build())


def values_of(data: bytes) -> list[tuple[int, bytes | None]]:
    """(offset, value) of every record in ``data``, a run of batches, as kafka-python reads them."""
    found = []
    position = 0
    while position < len(data):
        size = struct.unpack_from(">i", data, position + 8)[0] + 12
        for record in DefaultRecordBatch(data[position : position + size]):
            found.append((record.offset, record.value))
        position += size
    return found


def appended(leader: LeaderPartitions, partition: int, data: bytes) -> list[PendingAppend]:
    items = leader.get(TOPIC, partition).prepare_append(data, "all", 30_000)
    leader.appender.append(TOPIC, [i for i in items if not i.is_done and i.duplicate_of is None])
    for item in items:
        assert item.wait_done(WAIT_S), "the commit round did not answer"
        assert item.error is None, item.error
    return items


def test_a_batch_is_checked_committed_and_read_back_as_sent(leader: LeaderPartitions) -> None:
    [first] = appended(leader, 0, batch([b"a", b"b", b"c"]))
    [second] = appended(leader, 0, batch([b"d"]))
    assert (first.base_offset, second.base_offset) == (0, 3)
    read = leader.get(TOPIC, 0).read(0, 1 << 20, first=True, read_committed=False)
    assert values_of(read.records) == [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"d")]
    assert (read.high_watermark, read.log_start) == (4, 0)
    at_the_end = leader.get(TOPIC, 0).read(4, 1 << 20, first=True, read_committed=False)
    assert (at_the_end.records, at_the_end.high_watermark, at_the_end.replicating) == (b"", 4, False)


def test_what_left_the_tail_is_read_from_the_table_the_same(leader: LeaderPartitions) -> None:
    appended(leader, 1, batch([b"x", b"y"]))
    leader.get(TOPIC, 1).read(0, 1 << 20, first=True, read_committed=False)  # notes the log-start
    from_tail = leader.get(TOPIC, 1).read(1, 1 << 20, first=True, read_committed=False)
    leader.appender.tails.drop(TOPIC, 1)
    from_table = leader.get(TOPIC, 1).read(1, 1 << 20, first=True, read_committed=False)
    # The tail answers with the producer's whole batch (the client skips offsets below its
    # position); the table with the records from the offset on.
    assert values_of(from_tail.records) == [(0, b"x"), (1, b"y")]
    assert values_of(from_table.records) == [(1, b"y")]
    assert from_tail.high_watermark == from_table.high_watermark == 2


def test_the_first_partition_gets_a_batch_over_the_limit_and_the_others_nothing(leader: LeaderPartitions) -> None:
    appended(leader, 0, batch([b"v" * 1000]))
    assert values_of(leader.get(TOPIC, 0).read(0, 10, first=True, read_committed=False).records) == [(0, b"v" * 1000)]
    assert leader.get(TOPIC, 0).read(0, 0, first=False, read_committed=False).records == b""


def test_a_corrupt_batch_fails_its_partition_and_nothing_is_queued(leader: LeaderPartitions) -> None:
    data = bytearray(batch([b"a", b"b"]))
    data[-1] ^= 0xFF  # the CRC covers it
    with pytest.raises(CorruptBatchError):
        leader.get(TOPIC, 0).prepare_append(bytes(data), "all", 30_000)
    assert leader.get(TOPIC, 0).read(0, 1 << 20, first=True, read_committed=False).high_watermark == 0


def test_a_batch_over_max_message_bytes_is_refused_whole(cluster: sparklog.Cluster, leader: LeaderPartitions) -> None:
    cluster.alter_topic_config(TOPIC, {"max.message.bytes": "200"})
    with pytest.raises(RecordTooLargeError, match=r"max\.message\.bytes=200"):
        leader.get(TOPIC, 0).prepare_append(batch([b"small", b"v" * 300]), "all", 30_000)


def test_a_partition_led_elsewhere_or_missing_is_refused(leader: LeaderPartitions) -> None:
    elsewhere = LeaderPartitions(leader.replicas, leader.broker_id + 7, leader.appender, ProducerStates(), None)
    with pytest.raises(NotLeaderError, match=f"does not lead {TOPIC}-0"):
        elsewhere.get(TOPIC, 0)
    with pytest.raises(UnknownPartitionError):
        leader.get(TOPIC, 2)


def test_an_idempotent_batch_sent_again_is_answered_with_its_first_offsets(leader: LeaderPartitions) -> None:
    appended(leader, 0, batch([b"before"]))
    sent = batch([b"once", b"only"], producer_id=4242, base_sequence=0)
    [original] = appended(leader, 0, sent)
    [again] = leader.get(TOPIC, 0).prepare_append(sent, "all", 30_000)
    assert again.is_done and again.base_offset == original.base_offset == 1, "answered at once, not appended"
    read = leader.get(TOPIC, 0).read(0, 1 << 20, first=True, read_committed=False)
    assert [v for _, v in values_of(read.records)] == [b"before", b"once", b"only"]


def test_a_batch_behind_one_that_failed_is_refused_not_stored_after_a_gap(leader: LeaderPartitions) -> None:
    """A producer's second batch is accepted while its first is still being appended; the
    first then fails at the store. Storing the second would leave a gap in the producer's
    sequence (and the client re-sends it under a new epoch: stored twice), so its round
    refuses it with OUT_OF_ORDER_SEQUENCE_NUMBER, as Kafka's log does."""
    partition = leader.get(TOPIC, 1)
    [first] = partition.prepare_append(batch([b"first"], producer_id=77, base_sequence=0), "all", 30_000)
    [second] = partition.prepare_append(batch([b"second"], producer_id=77, base_sequence=1), "all", 30_000)
    assert second.follows is first, "accepted behind the first, still pending"
    first.finish(error=StorageError("the store lost the segment's PUT"))
    leader.appender.append(TOPIC, [second])
    assert second.wait_done(WAIT_S), "the commit round did not answer"
    assert isinstance(second.error, OutOfOrderSequenceError), second.error
    read = partition.read(0, 1 << 20, first=True, read_committed=False)
    assert values_of(read.records) == [], "nothing stored"


def test_offsets_outside_the_log_are_out_of_range(leader: LeaderPartitions) -> None:
    appended(leader, 1, batch([b"a"]))
    with pytest.raises(OffsetOutOfRangeError, match=rf"offset 5 of {TOPIC}-1 is outside 0\.\.1"):
        leader.get(TOPIC, 1).read(5, 1 << 20, first=True, read_committed=False)


def test_a_reader_at_the_tail_end_waits_while_a_commit_is_put_in_the_tail(
    cluster: sparklog.Cluster, leader: LeaderPartitions
) -> None:
    appended(leader, 0, batch([b"mine"]))
    tails = leader.appender.tails
    assert leader.get(TOPIC, 0).read(0, 1 << 20, first=True, read_committed=False).records  # notes the log-start
    # Another writer commits offset 1: the table has it, this leader's tail (ending at 1) not.
    with cluster.producer() as producer:
        producer.send(TOPIC, b"theirs", partition=0).result(WAIT_S)
    with tails.publishing(TOPIC, [0]):
        assert tails.is_publishing(TOPIC, 0) and not tails.is_publishing(TOPIC, 1)
        waiting = leader.get(TOPIC, 0).read(1, 1 << 20, first=True, read_committed=False)
        assert (waiting.records, waiting.high_watermark) == (b"", 2), "nothing yet: the tail is being filled"
    assert not tails.is_publishing(TOPIC, 0)
    read = leader.get(TOPIC, 0).read(1, 1 << 20, first=True, read_committed=False)
    assert values_of(read.records) == [(1, b"theirs")], "the table answers what no commit of this leader put"


def test_a_stale_log_start_is_refreshed_off_the_fetch_path(cluster: sparklog.Cluster, leader: LeaderPartitions) -> None:
    appended(leader, 1, batch([b"a", b"b", b"c"]))
    tails = leader.appender.tails
    leader.get(TOPIC, 1).read(0, 1 << 20, first=True, read_committed=False)
    assert tails.log_start_hint(TOPIC, 1) == (0, True)
    cluster.delete_records(TOPIC, {1: 2})  # another client moves the log-start: this leader is not told
    # Until the hint is stale the tail answers with the log-start it noted; then the reader
    # still answers from the tail at once, asks for a refresh in the background, and a later
    # read has the new one.
    wait_until(lambda: tails.log_start_hint(TOPIC, 1) == (0, False), "the noted log-start going stale")
    at_once = leader.get(TOPIC, 1).read(2, 1 << 20, first=True, read_committed=False)
    assert (at_once.log_start, values_of(at_once.records)[-1]) == (0, (2, b"c")), "answered from the tail"
    wait_until(
        lambda: leader.get(TOPIC, 1).read(2, 1 << 20, first=True, read_committed=False).log_start == 2,
        "the log-start refreshed after the hint went stale",
    )
    assert tails.log_start_hint(TOPIC, 1) == (2, True)


def test_a_leaders_first_append_loads_the_transaction_state_off_the_fetch_path(leader: LeaderPartitions) -> None:
    """A tail read needs the partition's last stable offset, so its transaction state: the
    first append has it loaded in the background, and the first consumer does not wait for
    the table to be read (on a store a delta-rs load per partition, one after another)."""
    epoch = leader.get(TOPIC, 0).state.leader_epoch
    assert not leader.appender.txns.is_loaded(TOPIC, 0, epoch)
    appended(leader, 0, batch([b"a"]))
    wait_until(lambda: leader.appender.txns.is_loaded(TOPIC, 0, epoch), "the state loaded without a read")
