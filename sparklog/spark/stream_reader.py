"""Structured Streaming reads of topics: ``spark.readStream.format("sparklog")``.

Offsets are JSON ``{"topic": {"partition": next_offset}}``, exactly as Spark's Kafka source
writes them to the checkpoint: every record below ``next_offset`` of that partition was
handed to a micro-batch. Options are the Kafka source's (``subscribe``/``subscribePattern``/
``assign``, ``startingOffsets`` default ``latest``, ``startingTimestamp``...,
``maxOffsetsPerTrigger``, ``failOnDataLoss``, ``includeHeaders``, ``minPartitions``) plus
the connection options of the batch source and ``groupId``.

Invariants:

* a micro-batch never reads above the high watermark (ends come from the log-end app
  transactions of a committed snapshot, via ``ReplicaManager.high_watermarks``), and never more
  than ``maxOffsetsPerTrigger`` records (:func:`rate_limit` splits the cap over the
  partitions in proportion to their backlog, and the total is exact);
* a partition the query has not seen before (partition increase, a new topic matching
  ``subscribePattern``) starts at offset 0;
* a start below log-start (retention, ``delete_records``) fails the query with
  :class:`~sparklog.errors.OffsetOutOfRangeError` unless ``failOnDataLoss=false``, which
  skips to log-start. Offset resolution and file planning are the batch reader's
  (:func:`~sparklog.spark.reader.resolve_read_ranges`, :class:`SparklogBatchReader`): a
  micro-batch is the batch read of ``assign``/``startingOffsets``/``endingOffsets`` JSON.

Who calls what: Spark keeps one Python worker per query for ``initialOffset``,
``latestOffset``, ``partitions``, ``commit`` and ``stop`` (one instance, so it keeps a
``ReplicaManager`` open), and creates another instance whose pickled copies ``read`` in tasks;
``__init__`` therefore only parses options.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import CaseInsensitiveDict, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from sparklog.errors import ConfigError, OffsetOutOfRangeError, UnknownTopicCommitError
from sparklog.model.offsets import EARLIEST, LATEST, parse_offsets_json
from sparklog.spark.option_names import positive_int_option
from sparklog.spark.options import connect_replicas, option_flag, option_read_committed

# ``subscribed_topics`` (subscribe/subscribePattern/assign -> topics) is the batch reader's; reused,
# not copied, so both sources resolve a subscription alike.
from sparklog.spark.reader import SparklogBatchReader, resolve_read_ranges, subscribed_topics

if TYPE_CHECKING:
    from sparklog.runtime.replica_manager import ReplicaManager

__all__ = ["Offsets", "SparklogStreamReader", "offsets_from_json", "offsets_to_json", "rate_limit"]

log = logging.getLogger("sparklog.spark")

Offsets = dict[str, dict[int, int]]  # topic -> partition -> next offset
_BATCH_ONLY = ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp")
_UNSUPPORTED = ("minOffsetsPerTrigger", "maxTriggerDelay")
_SELECTION = {
    k.lower()
    for k in (
        "subscribe",
        "subscribePattern",
        "assign",
        "startingOffsets",
        "startingTimestamp",
        "startingOffsetsByTimestamp",
        "startingOffsetsByTimestampStrategy",
        *_BATCH_ONLY,
    )
}


def offsets_to_json(offsets: Offsets) -> dict[str, dict[str, int]]:
    """Canonical form (topics sorted, partitions in numeric order): equal offsets, equal JSON."""
    return {t: {str(p): offsets[t][p] for p in sorted(offsets[t])} for t in sorted(offsets)}


def offsets_from_json(raw: Mapping[str, object], what: str) -> Offsets:
    if not raw:
        return {}
    return parse_offsets_json(json.dumps(raw), what)


def rate_limit(starts: Offsets, ends: Offsets, limit: int) -> Offsets:
    """Lower ``ends`` so the batch holds at most ``limit`` records in total.

    Like Spark's Kafka source the cap is split in proportion to each partition's backlog,
    but exactly: every partition with a backlog first gets one record (the largest backlogs
    first when the cap is smaller than their number), the rest of the cap is shared by the
    largest-remainder method in integers. A partition missing from ``starts`` starts at 0.
    """
    backlog = {(t, p): e - starts.get(t, {}).get(p, 0) for t, parts in ends.items() for p, e in parts.items()}
    behind = {tp: n for tp, n in backlog.items() if n > 0}
    if sum(behind.values()) <= limit:
        return ends
    order = sorted(behind, key=lambda tp: (-behind[tp], tp))
    shares = {tp: 0 for tp in order}
    for tp in order[:limit]:
        shares[tp] = 1
    rest = limit - len(order)
    if rest > 0:
        remaining = {tp: behind[tp] - 1 for tp in order}
        total = sum(remaining.values())  # > rest, since the backlog exceeds the cap
        for tp in order:
            shares[tp] += rest * remaining[tp] // total
        leftover = limit - sum(shares.values())
        by_remainder = sorted(order, key=lambda tp: (-(rest * remaining[tp] % total), tp))
        for tp in by_remainder[:leftover]:
            shares[tp] += 1
    result = {t: dict(parts) for t, parts in ends.items()}
    for (t, p), n in shares.items():
        result[t][p] = starts.get(t, {}).get(p, 0) + n
    return result


class SparklogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: Mapping[str, str], include_headers: bool) -> None:
        self.options = CaseInsensitiveDict(dict(options))
        self.include_headers = include_headers
        for key in _BATCH_ONLY:
            if key in self.options:
                raise ConfigError(
                    f"Option {key} is not allowed for streaming queries (as in Spark's Kafka source); "
                    "use trigger(availableNow=True) to stop at the current end, or a batch read"
                )
        for key in _UNSUPPORTED:
            if key in self.options:
                raise ConfigError(
                    f"Option {key} is not supported by the sparklog stream source; use maxOffsetsPerTrigger"
                )
        self.fail_on_data_loss = option_flag(self.options, "failOnDataLoss", True)
        self.max_offsets = positive_int_option(self.options, "maxOffsetsPerTrigger", "a positive number of records")
        # Spark's Kafka source names a consumer group ``kafka.group.id``; sparklog's own name is groupId.
        self.group_id = self.options.get("groupId") or self.options.get("kafka.group.id") or None
        self._replicas: ReplicaManager | None = None
        self._target: Offsets | None = None  # Trigger.AvailableNow: nothing beyond these ends
        self._group_committed: dict[tuple[str, int], int] = {}

    def _connect(self) -> ReplicaManager:
        if self._replicas is None:
            self._replicas = connect_replicas(self.options)
        return self._replicas

    def __getstate__(self) -> dict[str, object]:
        return {**self.__dict__, "_replicas": None}  # a connection stays in its process

    # -- offsets -------------------------------------------------------------------------
    def initialOffset(self) -> dict[str, dict[str, int]]:
        """Resolve ``startingOffsets`` (or ``startingTimestamp``...) once, for a new query."""
        options = CaseInsensitiveDict(dict(self.options))
        by_timestamp = any(k.lower() in self.options for k in ("startingTimestamp", "startingOffsetsByTimestamp"))
        raw = str(self.options.get("startingOffsets", "latest")).strip()
        latest: set[tuple[str, int]] | None = set()  # None: every partition starts at latest
        if not by_timestamp and raw.lower() == "latest":
            options["startingoffsets"], latest = "earliest", None
        elif not by_timestamp and raw.lower() != "earliest":
            # The batch resolution refuses -1 (latest) as a start: resolve those as the range end.
            spec = parse_offsets_json(raw, "startingOffsets")
            latest = {(t, p) for t, parts in spec.items() for p, o in parts.items() if o == LATEST}
            options["startingoffsets"] = json.dumps(
                {t: {str(p): EARLIEST if o == LATEST else o for p, o in parts.items()} for t, parts in spec.items()}
            )
        ranges = resolve_read_ranges(self._connect(), options)
        initial = {
            t: {p: end if latest is None or (t, p) in latest else start for p, (start, end) in parts.items()}
            for t, parts in ranges.items()
        }
        return offsets_to_json(initial)

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadAllAvailable() if self.max_offsets is None else ReadMaxRows(self.max_offsets)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._high_watermarks()

    def reportLatestOffset(self) -> dict[str, dict[str, int]]:
        return offsets_to_json(self._high_watermarks())

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """The end of the next micro-batch: the high watermarks (the availableNow target),
        lowered to ``limit``. Cheap: one snapshot refresh and app-transaction lookups per topic."""
        starts = offsets_from_json(start, "stream start offset")
        self._commit_group(start)  # the batch ending at ``start`` is complete
        available = self._target if self._target is not None else self._high_watermarks()
        ends: Offsets = {}  # partitions no longer subscribed (or deleted) drop out, as in Kafka's source
        for topic, hws in available.items():
            for partition, hw in hws.items():
                begin = starts.get(topic, {}).get(partition, 0)
                if hw < begin:
                    self._data_loss(
                        f"The high watermark of {topic}-{partition} is {hw}, below the query's offset {begin}: "
                        "was the topic deleted and re-created?"
                    )
                ends.setdefault(topic, {})[partition] = hw
        if isinstance(limit, ReadMaxRows):
            ends = rate_limit(starts, ends, limit.max_rows)
        return start if ends == starts else offsets_to_json(ends)

    def _high_watermarks(self) -> Offsets:
        replicas = self._connect()
        result: Offsets = {}
        for topic, assigned in subscribed_topics(replicas, self.options).items():
            hws = replicas.high_watermarks(topic, read_committed=option_read_committed(self.options))
            if assigned is not None:
                unknown = sorted(set(assigned) - set(hws))
                if unknown:
                    raise OffsetOutOfRangeError(f"Topic {topic} has no partition(s) {unknown} (option assign)")
                hws = {p: hws[p] for p in assigned}
            result[topic] = hws
        return result

    def _data_loss(self, message: str) -> None:
        if self.fail_on_data_loss:
            raise OffsetOutOfRangeError(f"{message} Set failOnDataLoss=false to skip the lost offsets.")
        log.warning("%s Skipping (failOnDataLoss=false).", message)

    # -- planning and reading --------------------------------------------------------------
    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        """The batch read of ``[start, end)``: same clamping, data-loss rule and file slices."""
        starts = offsets_from_json(start, "stream start offset")
        ends = offsets_from_json(end, "stream end offset")
        wanted = {
            t: {p: (starts.get(t, {}).get(p, 0), e) for p, e in parts.items() if e > starts.get(t, {}).get(p, 0)}
            for t, parts in ends.items()
        }
        wanted = {t: parts for t, parts in wanted.items() if parts}
        if not wanted:
            return []
        options = {k: v for k, v in self.options.items() if k not in _SELECTION}
        options["assign"] = json.dumps({t: sorted(parts) for t, parts in wanted.items()})
        options["startingOffsets"] = json.dumps(
            {t: {str(p): s for p, (s, _e) in parts.items()} for t, parts in wanted.items()}
        )
        options["endingOffsets"] = json.dumps(
            {t: {str(p): e for p, (_s, e) in parts.items()} for t, parts in wanted.items()}
        )
        return list(SparklogBatchReader(options, self.include_headers).partitions())

    def read(self, partition: InputPartition) -> Iterator[object]:
        return SparklogBatchReader({}, self.include_headers).read(partition)

    # -- progress --------------------------------------------------------------------------
    def commit(self, end: dict[str, Any]) -> None:
        """Spark has processed everything below ``end``: see :meth:`_commit_group`."""
        self._commit_group(end)

    def _commit_group(self, processed: Mapping[str, object]) -> None:
        """With ``groupId``: store ``processed`` as the group's committed offsets (a standalone
        commit; the checkpoint stays the query's own source of truth).

        Spark calls ``commit(end)`` of a batch only when it plans the *next* batch, so the
        start handed to ``latestOffset`` (the end of the last completed batch) is committed
        too: an ``availableNow`` run leaves the group at its final offsets. Unchanged
        offsets are not committed again (``latestOffset`` runs on every trigger).
        """
        if self.group_id is None:
            return
        ends = offsets_from_json(processed, "stream offset")
        offsets = {(t, p): o for t, parts in ends.items() for p, o in parts.items()}
        if offsets and offsets != self._group_committed:
            from sparklog.group.coordinator import GroupCoordinator, OffsetCommit

            commits = {tp: OffsetCommit(offset, "spark structured streaming") for tp, offset in offsets.items()}
            try:
                GroupCoordinator(self._connect()).commit(self.group_id, commits)
            except UnknownTopicCommitError as exc:
                # A deleted topic drops out of the query as in Kafka's source, and its offsets
                # went from the group with it; the other topics' offsets were stored.
                log.info("stream of group %s: %s", self.group_id, exc)
            self._group_committed = offsets

    def stop(self) -> None:
        if self._replicas is not None:
            self._replicas.close()
            self._replicas = None
