"""Client access to partition logs: list offsets, read records, delete records (DeleteRecords).

Each call resolves the partitions' leader tables and offsets through the
:class:`~sparklog.runtime.replica_manager.ReplicaManager` (log-start of the leader, high
watermark over the ISR), so nothing above the high watermark or below log-start is ever
returned (invariants 5 and 8), and offsets outside ``[log_start, high_watermark]`` raise
``OffsetOutOfRangeError`` naming the valid range.
"""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa

from sparklog.config import read_committed
from sparklog.errors import OffsetOutOfRangeError
from sparklog.log.reader import offset_for_timestamp, read_ranges
from sparklog.model.offsets import OffsetSpec, parse_offset_spec
from sparklog.model.topic import validate_topic_name
from sparklog.retries import DELTA_COMMIT
from sparklog.runtime.replica_manager import ReplicaManager

__all__ = ["delete_records", "list_offsets", "read"]


def list_offsets(replicas: ReplicaManager, topic: str, spec: OffsetSpec | str = "latest") -> dict[int, int]:
    """Per partition: earliest, latest, or the first offset with timestamp >= ``spec`` ms.

    For a timestamp after every record the answer is -1 (Kafka's "no such offset").
    """
    parsed = parse_offset_spec(spec)
    if parsed == "latest":
        return replicas.high_watermarks(topic)
    offsets = replicas.offsets(topic)
    if parsed == "earliest":
        return {p: o.log_start for p, o in offsets.items()}
    result = {}
    for table, parts in replicas.leader_tables(topic):
        dt = table.snapshot()
        for p in parts:
            found = offset_for_timestamp(table, dt, p, int(parsed))
            result[p] = -1 if found is None or found >= offsets[p].high_watermark else found
    return dict(sorted(result.items()))


def delete_records(replicas: ReplicaManager, topic: str, before: Mapping[int, int]) -> dict[int, int]:
    """Kafka's ``deleteRecords``: per partition, records below the offset given disappear
    (log-start moves there; files wholly below are removed from the table, metadata only);
    returns the new log-start offsets. An offset above the high watermark is an error."""
    from sparklog.log.plans import delete_records_plan

    partitions = replicas.partitions_of(topic)
    for partition in before:
        replicas.check_partition(topic, partition, partitions)
    for partition, offset in sorted(before.items()):
        table = replicas.leader_table(topic, partition)
        for _attempt in DELTA_COMMIT:
            dt = table.snapshot()
            end = min(table.log_end(dt, partition), replicas.high_watermarks(topic, [partition])[partition])
            start = table.log_starts(dt).get(partition, end)
            if offset < 0 or offset > end:
                raise OffsetOutOfRangeError(
                    f"Cannot delete records of {topic}-{partition} below {offset}: valid offsets are "
                    f"{start}..{end} (log-start..high watermark)"
                )
            plan = delete_records_plan(
                table.files(dt, {partition}), partition=partition, log_start=start, log_end=end, before_offset=offset
            )
            if plan.new_log_start <= start and not plan.removed:
                break
            if table.advance_log_starts({partition: plan.new_log_start}, list(plan.removed), "DELETE RECORDS"):
                break
        else:
            raise DELTA_COMMIT.exhausted(
                f"DeleteRecords on {topic}-{partition} below offset {offset}",
                "nothing was deleted; retry when the concurrent writers or maintenance are done",
            )
    after = replicas.offsets(topic)
    return {p: after[p].log_start for p in before}


def read(
    replicas: ReplicaManager,
    topic: str,
    partition: int | None = None,
    start_offset: int | None = None,
    end_offset: int | None = None,
    include_headers: bool = True,
    isolation_level: str = "read_committed",
) -> pa.Table:
    """Committed records of ``topic`` (one partition or all) in ``[start, end)`` as Arrow.

    Defaults: from log-start to the high watermark — to the last stable offset, without
    aborted records, for ``isolation_level="read_committed"`` (the default; Kafka
    transactions, docs/transactions.md). An explicit start outside
    ``[log_start, high_watermark]`` raises ``OffsetOutOfRangeError``.
    """
    committed = read_committed(isolation_level)
    validate_topic_name(topic)
    partitions = replicas.partitions_of(topic)
    if partition is not None:
        replicas.check_partition(topic, partition, partitions)
        partitions = [partition]
    ranges: dict[int, tuple[int, int]] = {}
    stable = replicas.offsets(topic, partitions, read_committed=committed)
    for p, (start, end) in replicas.offsets(topic, partitions).items():
        lo = start if start_offset is None else start_offset
        if lo < start or lo > end:
            raise OffsetOutOfRangeError(
                f"Offset {lo} is out of range for {topic}-{p}: valid offsets are {start}..{end} "
                "(log-start..high watermark); seek to one of them"
            )
        stop = stable[p].high_watermark
        hi = stop if end_offset is None else min(end_offset, stop)
        ranges[p] = (lo, max(lo, hi))
    pieces = [
        read_ranges(table, table.snapshot(), {p: ranges[p] for p in parts}, include_headers, read_committed=committed)
        for table, parts in replicas.leader_tables(topic, partitions)
    ]
    if len(pieces) == 1:
        return pieces[0]
    return pa.concat_tables(pieces).sort_by([("partition", "ascending"), ("offset", "ascending")])
