"""Batch reads of topics through the Python Data Source API (Spark's Kafka source options).

Planning (``partitions()``, one Python worker on the driver side) resolves topics and
per-partition offset ranges against one committed Delta snapshot per topic, clamps them
to ``[log-start, high watermark)`` and picks the files whose stats overlap; each input
partition is one file (or one offset slice of a file, for ``minPartitions``). Tasks only
open the files they were given: they need no ZooKeeper and no driver state.

Isolation (``kafka.isolation.level`` or ``isolation.level``; docs/transactions.md):
read_committed, the default, ends every range at the partition's last stable offset and
gives each slice the partition's aborted runs to leave out; read_uncommitted reads to the
high watermark. Transactions' control rows are never returned.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyspark.sql.datasource import CaseInsensitiveDict, DataSourceReader, InputPartition

from sparklog.errors import ConfigError, InvalidOffsetSpecError, OffsetOutOfRangeError, TopicNotFoundError
from sparklog.model.offsets import EARLIEST, LATEST, parse_assign_json, parse_offsets_json
from sparklog.model.topic import is_internal
from sparklog.spark.option_names import positive_int_option
from sparklog.spark.options import connect_replicas, option_flag, option_read_committed

if TYPE_CHECKING:
    from sparklog.runtime.replica_manager import ReplicaManager

__all__ = ["SegmentSlice", "SparklogBatchReader", "resolve_read_ranges", "subscribed_topics"]

log = logging.getLogger("sparklog.spark")


@dataclass(frozen=True)
class SegmentSlice(InputPartition):
    root: str  # the table's (a local directory or a store URI)
    path: str  # the segment's, relative to the table
    topic: str
    partition: int
    start: int
    end: int
    include_headers: bool
    aborted: tuple[tuple[int, int], ...]
    storage: tuple[tuple[str, str], ...]  # the cluster's storage.* settings (StorageSettings.values)

    def __init__(
        self,
        root: str,
        path: str,
        topic: str,
        partition: int,
        start: int,
        end: int,
        include_headers: bool,
        aborted: tuple[tuple[int, int], ...] = (),
        storage: tuple[tuple[str, str], ...] = (),
    ) -> None:
        object.__setattr__(self, "root", root)
        object.__setattr__(self, "path", path)
        object.__setattr__(self, "topic", topic)
        object.__setattr__(self, "partition", partition)
        object.__setattr__(self, "start", start)
        object.__setattr__(self, "end", end)
        object.__setattr__(self, "include_headers", include_headers)
        object.__setattr__(self, "aborted", aborted)
        object.__setattr__(self, "storage", storage)
        object.__setattr__(self, "value", None)


def subscribed_topics(replicas: ReplicaManager, options: Mapping[str, str]) -> dict[str, list[int] | None]:
    """topic -> explicit partitions (assign) or None (all), per subscribe/subscribePattern/assign."""
    given = [k for k in ("subscribe", "subscribePattern", "assign") if options.get(k)]
    if len(given) != 1:
        raise ConfigError(
            "Exactly one of the options 'subscribe', 'subscribePattern' or 'assign' must be given"
            + (f" (got {', '.join(given)})" if given else "")
        )
    kind = given[0]
    value = str(options[kind])
    if kind == "subscribe":
        topics = [t.strip() for t in value.split(",") if t.strip()]
        existing = set(replicas.list_topics())
        missing = [t for t in topics if t not in existing]
        if missing:
            raise TopicNotFoundError(f"Subscribed topic(s) {missing} do not exist")
        return {t: None for t in topics}
    if kind == "subscribePattern":
        try:
            pattern = re.compile(value)
        except re.error as exc:
            raise ConfigError(f"subscribePattern {value!r} is not a valid regular expression: {exc}") from exc
        return {t: None for t in [t for t in replicas.list_topics() if not is_internal(t)] if pattern.fullmatch(t)}
    return dict(parse_assign_json(value))


def _by_timestamp(
    replicas: ReplicaManager, topic: str, partitions: list[int], spec: Mapping[int, int]
) -> dict[int, int | None]:
    from sparklog.log.reader import offset_for_timestamp

    result: dict[int, int | None] = {}
    for table, parts in replicas.leader_tables(topic, [p for p in partitions if p in spec]):
        dt = table.snapshot()
        result.update({p: offset_for_timestamp(table, dt, p, spec[p]) for p in parts})
    return result


def _bound(
    options: Mapping[str, str], side: str, replicas: ReplicaManager, topic: str, partitions: list[int]
) -> dict[int, int]:
    """Offsets per partition for ``starting``/``ending`` (-2 earliest, -1 latest)."""
    by_ts_json = options.get(f"{side}OffsetsByTimestamp")
    global_ts = options.get(f"{side}Timestamp")
    default = EARLIEST if side == "starting" else LATEST
    if by_ts_json or global_ts:
        if by_ts_json:
            spec = parse_offsets_json(by_ts_json, f"{side}OffsetsByTimestamp").get(topic, {})
        else:
            try:
                spec = {p: int(str(global_ts)) for p in partitions}
            except ValueError:
                raise InvalidOffsetSpecError(
                    f"{side}Timestamp must be milliseconds since the epoch, got {global_ts!r}"
                ) from None
        found = _by_timestamp(replicas, topic, partitions, spec)
        result: dict[int, int] = {}
        strategy = str(options.get("startingOffsetsByTimestampStrategy", "error")).lower()
        for p in partitions:
            if p not in spec:
                result[p] = default
            elif (offset := found[p]) is not None:
                result[p] = offset
            elif side == "ending" or strategy == "latest":
                result[p] = LATEST
            else:
                raise OffsetOutOfRangeError(
                    f"No offset of {topic}-{p} has a timestamp >= {spec[p]}; set "
                    "startingOffsetsByTimestampStrategy=latest to start at the end instead"
                )
        return result
    raw = str(options.get(f"{side}Offsets", "earliest" if side == "starting" else "latest")).strip()
    if raw.lower() in ("earliest", "latest"):
        keyword = EARLIEST if raw.lower() == "earliest" else LATEST
        if (side, keyword) == ("starting", LATEST) or (side, keyword) == ("ending", EARLIEST):
            raise ConfigError(f"{side}Offsets={raw} is not allowed for batch queries")
        return {p: keyword for p in partitions}
    explicit = parse_offsets_json(raw, f"{side}Offsets").get(topic)
    if explicit is None or set(explicit) != set(partitions):
        raise InvalidOffsetSpecError(
            f"{side}Offsets must name every partition of topic {topic} ({partitions}), got {raw}; "
            "use -2 for earliest and -1 for latest"
        )
    forbidden = LATEST if side == "starting" else EARLIEST
    if forbidden in explicit.values():
        raise InvalidOffsetSpecError(f"{side}Offsets {raw}: {forbidden} is not allowed for batch queries")
    return dict(explicit)


def resolve_read_ranges(replicas: ReplicaManager, options: Mapping[str, str]) -> dict[str, dict[int, tuple[int, int]]]:
    """topic -> partition -> [start, end) clamped to log-start and the high watermark (the
    last stable offset for read_committed)."""
    fail_on_data_loss = option_flag(options, "failOnDataLoss", True)
    committed = option_read_committed(options)
    result: dict[str, dict[int, tuple[int, int]]] = {}
    for topic, assigned in subscribed_topics(replicas, options).items():
        offsets = replicas.offsets(topic, read_committed=committed)
        partitions = assigned if assigned is not None else sorted(offsets)
        unknown = [p for p in partitions if p not in offsets]
        if unknown:
            raise OffsetOutOfRangeError(f"Topic {topic} has no partition(s) {unknown}")
        starts = _bound(options, "starting", replicas, topic, partitions)
        ends = _bound(options, "ending", replicas, topic, partitions)
        ranges = {}
        for p in partitions:
            log_start, hw = offsets[p]
            start = {EARLIEST: log_start, LATEST: hw}.get(starts[p], starts[p])
            end = {EARLIEST: log_start, LATEST: hw}.get(ends[p], ends[p])
            if start < log_start:
                if fail_on_data_loss:
                    raise OffsetOutOfRangeError(
                        f"Offsets {start}..{log_start - 1} of {topic}-{p} are no longer available "
                        f"(log-start is {log_start}). Set failOnDataLoss=false to read from log-start."
                    )
                log.warning(
                    "%s-%d: offsets %d..%d were removed; reading from %d", topic, p, start, log_start - 1, log_start
                )
                start = log_start
            if start > min(end, hw):
                # Spark's Kafka source fails here too: an empty answer would hide the mistake.
                raise OffsetOutOfRangeError(
                    f"{topic}-{p}: the starting offset {start} is after the ending offset {min(end, hw)} "
                    f"(log-start {log_start}, end of the readable log {hw}); check startingOffsets / "
                    "startingTimestamp and endingOffsets"
                )
            ranges[p] = (start, min(end, hw))
        result[topic] = ranges
    return result


class SparklogBatchReader(DataSourceReader):
    def __init__(self, options: Mapping[str, str], include_headers: bool) -> None:
        # SQL's OPTIONS (...) lower-cases keys: look options up case-insensitively.
        self.options = CaseInsensitiveDict(dict(options))
        self.include_headers = include_headers

    def partitions(self) -> list[SegmentSlice]:
        from sparklog.log.reader import files_for_ranges
        from sparklog.log.txn_log import aborted_ranges

        committed = option_read_committed(self.options)
        with connect_replicas(self.options) as replicas:
            slices: list[SegmentSlice] = []
            for topic, ranges in resolve_read_ranges(replicas, self.options).items():
                for table, parts in replicas.leader_tables(topic, ranges):
                    led = {p: ranges[p] for p in parts}
                    dt = table.snapshot()
                    aborted = {p: tuple(aborted_ranges(dt, p)) if committed else () for p in led}
                    for entry in files_for_ranges(table, dt, led):
                        lo, hi = (
                            max(led[entry.partition][0], entry.base_offset),
                            min(led[entry.partition][1], entry.last_offset + 1),
                        )
                        slices.append(
                            SegmentSlice(
                                table.root,
                                entry.path,
                                topic,
                                entry.partition,
                                lo,
                                hi,
                                self.include_headers,
                                aborted[entry.partition],
                                replicas.config.storage,
                            )
                        )
        return _split_for_min_partitions(slices, positive_int_option(self.options, "minPartitions") or 0)

    def read(self, partition: InputPartition) -> Iterator[object]:
        from sparklog.log.reader import read_segment_range
        from sparklog.log.storage import table_storage
        from sparklog.model.storage_location import StorageSettings

        if not isinstance(partition, SegmentSlice):
            return  # Spark plans one placeholder partition when partitions() is empty
        table = read_segment_range(
            table_storage(partition.root, StorageSettings(partition.storage)),
            partition.path,
            partition.partition,
            partition.topic,
            partition.start,
            partition.end,
            partition.include_headers,
            partition.aborted,
        )
        yield from table.to_batches(max_chunksize=65536)


def _split_for_min_partitions(slices: list[SegmentSlice], min_partitions: int) -> list[SegmentSlice]:
    """Cut the largest offset slices in halves until there are ``min_partitions`` of them."""
    if min_partitions <= len(slices) or not slices:
        return slices
    result = list(slices)
    while len(result) < min_partitions:
        result.sort(key=lambda s: s.end - s.start)
        widest = result[-1]
        if widest.end - widest.start < 2:
            break
        mid = (widest.start + widest.end) // 2
        result[-1:] = [
            SegmentSlice(
                widest.root,
                widest.path,
                widest.topic,
                widest.partition,
                widest.start,
                mid,
                widest.include_headers,
                widest.aborted,
                widest.storage,
            ),
            SegmentSlice(
                widest.root,
                widest.path,
                widest.topic,
                widest.partition,
                mid,
                widest.end,
                widest.include_headers,
                widest.aborted,
                widest.storage,
            ),
        ]
    result.sort(key=lambda s: (s.topic, s.partition, s.start))
    return result
