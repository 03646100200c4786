"""Spark consumption by consumer group.

:func:`consume`: the group's next records of ``topics`` (committed offset, or the reset
policy, up to the high watermark; capped by ``maxOffsetsPerTrigger`` /
``maxRecordsPerPartition``) as a DataFrame with the Kafka source's columns (native read
path); :meth:`GroupBatch.commit` then records the end offsets (standalone commit to
``__consumer_offsets``): at-least-once, like a Kafka consumer committing after processing.
The range resolution here is shared with :mod:`sparklog.spark.exactly_once` (exactly-once).

Invariant: a group with live light-consumer members is refused (Spark runs commit as
standalone clients, generation -1).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sparklog.config import CLUSTER_KEYS
from sparklog.errors import ConfigError, GroupNotEmptyError, OffsetOutOfRangeError, TopicNotFoundError
from sparklog.model.offsets import EARLIEST, LATEST, parse_offsets_json
from sparklog.model.topic import TopicPartition
from sparklog.spark.option_names import positive_int_option
from sparklog.spark.options import connect_replicas, option_flag, session_options

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from sparklog.group.coordinator import GroupCoordinator

__all__ = [
    "GroupBatch",
    "Ranges",
    "advances",
    "commit_advances",
    "connect_group",
    "consume",
    "input_partitions",
    "read_ranges_df",
    "require_inactive_group",
    "resolve_ranges",
]

log = logging.getLogger("sparklog.spark")

Ranges = dict[TopicPartition, tuple[int, int]]
_OPTIONS = {
    "startingoffsets": "startingOffsets",
    "auto.offset.reset": "auto.offset.reset",
    "failondataloss": "failOnDataLoss",
    "maxoffsetspertrigger": "maxOffsetsPerTrigger",
    "maxrecordsperpartition": "maxRecordsPerPartition",
    "includeheaders": "includeHeaders",
}


# -- options and offset ranges -------------------------------------------------------------
@dataclass(frozen=True)
class _Settings:
    reset: str  # earliest | latest | none: where a partition without a committed offset starts
    explicit: dict[str, dict[int, int]]  # startingOffsets JSON (-2 earliest, -1 latest)
    fail_on_data_loss: bool
    max_total: int | None
    max_per_partition: int | None
    include_headers: bool


def _settings(options: Mapping[str, str]) -> _Settings:
    lowered = {k.lower(): str(v) for k, v in options.items()}
    for key in lowered:
        if key not in _OPTIONS and key not in CLUSTER_KEYS and key.removeprefix("sparklog.") not in CLUSTER_KEYS:
            raise ConfigError(
                f"Unknown option {key!r} for consume/consume_into; allowed: {', '.join(_OPTIONS.values())} "
                f"and the cluster settings ({', '.join(sorted(CLUSTER_KEYS))})"
            )
    named = {_OPTIONS[k]: v for k, v in lowered.items() if k in _OPTIONS}  # spelled as documented
    reset = lowered.get("auto.offset.reset", "earliest").strip().lower()
    if reset not in ("earliest", "latest", "none"):
        raise ConfigError(f"auto.offset.reset must be earliest, latest or none, got {reset!r}")
    starting = lowered.get("startingoffsets", "").strip()
    explicit: dict[str, dict[int, int]] = {}
    if starting.lower() in ("earliest", "latest"):
        reset = starting.lower()
    elif starting:
        explicit = parse_offsets_json(starting, "startingOffsets")
    return _Settings(
        reset,
        explicit,
        option_flag(lowered, "failondataloss", True),
        positive_int_option(named, "maxOffsetsPerTrigger"),
        positive_int_option(named, "maxRecordsPerPartition"),
        option_flag(lowered, "includeheaders", False),
    )


def input_partitions(groups: GroupCoordinator, group_id: str, topics: str | Iterable[str]) -> list[TopicPartition]:
    from sparklog.model.group_ids import validate_group_id
    from sparklog.model.topic import validate_topic_name

    validate_group_id(group_id)
    names = list(
        dict.fromkeys(t.strip() for t in (topics.split(",") if isinstance(topics, str) else topics) if t.strip())
    )
    if not names:
        raise ConfigError(f"Consuming with group {group_id}: no topics given")
    existing = set(groups.replicas.list_topics())
    for topic in names:
        if validate_topic_name(topic) not in existing:
            raise TopicNotFoundError(
                f"Topic {topic} does not exist (consuming with group {group_id}); create it or fix the name"
            )
    return [(t, p) for t in names for p in groups.replicas.partitions_of(t)]


def require_inactive_group(groups: GroupCoordinator, group_id: str) -> None:
    snapshot = groups.registry.snapshot(group_id)
    if snapshot.active:
        raise GroupNotEmptyError(
            f"Group {group_id} has live members (state {snapshot.state}): Spark group consumption commits as a "
            "standalone client (generation -1), which only an inactive group allows. Stop the group's consumers "
            "or use another group id."
        )


def resolve_ranges(
    groups: GroupCoordinator,
    group_id: str,
    partitions: list[TopicPartition],
    settings: _Settings,
    floor: Mapping[TopicPartition, int | None],
) -> Ranges:
    """Per partition ``[start, end)``: start = max(committed, ``floor``) or the reset policy,
    checked against log-start (``failOnDataLoss``); end = high watermark, then the caps."""
    from sparklog.spark.stream_reader import rate_limit

    committed = groups.committed(group_id, partitions)
    ranges: Ranges = {}
    for topic in dict.fromkeys(t for t, _ in partitions):
        for p, (log_start, hw) in sorted(groups.replicas.offsets(topic).items()):
            known = [v for v in (committed.get((topic, p)), floor.get((topic, p))) if v is not None]
            start = max(known) if known else _initial(group_id, topic, p, settings, log_start, hw)
            if start < log_start or start > hw:
                where = (
                    f"offsets {start}..{log_start - 1} of {topic}-{p} are no longer available (log-start {log_start})"
                    if start < log_start
                    else f"offset {start} of {topic}-{p} is beyond the high watermark {hw} (was the topic re-created?)"
                )
                if settings.fail_on_data_loss:
                    raise OffsetOutOfRangeError(
                        f"Group {group_id}: {where}. Set failOnDataLoss=false to continue from "
                        f"{'log-start' if start < log_start else 'the high watermark'}, or reset the group's offsets."
                    )
                log.warning("group %s: %s; continuing from %d", group_id, where, min(max(start, log_start), hw))
                start = min(max(start, log_start), hw)
            ranges[(topic, p)] = (start, hw)
    if settings.max_per_partition is not None:
        ranges = {tp: (s, min(e, s + settings.max_per_partition)) for tp, (s, e) in ranges.items()}
    if settings.max_total is not None:
        starts: dict[str, dict[int, int]] = {}
        ends: dict[str, dict[int, int]] = {}
        for (t, p), (s, e) in ranges.items():
            starts.setdefault(t, {})[p], ends.setdefault(t, {})[p] = s, e
        limited = rate_limit(starts, ends, settings.max_total)
        ranges = {(t, p): (s, limited[t][p]) for (t, p), (s, _e) in ranges.items()}
    return ranges


def _initial(group_id: str, topic: str, p: int, settings: _Settings, log_start: int, hw: int) -> int:
    explicit = settings.explicit.get(topic, {}).get(p)
    if explicit is not None and explicit >= 0:
        return explicit
    policy = {EARLIEST: "earliest", LATEST: "latest"}.get(explicit, settings.reset)  # type: ignore[arg-type]
    if policy == "none":
        raise OffsetOutOfRangeError(
            f"Group {group_id} has no committed offset for {topic}-{p} and auto.offset.reset=none; commit or reset "
            "the group's offsets first, or set startingOffsets / auto.offset.reset to earliest or latest"
        )
    return log_start if policy == "earliest" else hw


def advances(ranges: Ranges, before: Mapping[TopicPartition, int | None]) -> dict[TopicPartition, int]:
    """End offsets worth recording: where nothing was recorded yet or the end is further."""
    return {tp: end for tp, (_s, end) in ranges.items() if before.get(tp) is None or end > before[tp]}  # type: ignore[operator]


def commit_advances(groups: GroupCoordinator, group_id: str, ranges: Ranges) -> dict[TopicPartition, int]:
    """Commit the ends of ``ranges`` that move the group's offsets forward (a standalone
    commit, generation -1); returns what was committed. The exactly-once mirror's commit:
    it copies input offsets that only grow, so it never lowers what a member committed."""
    offsets = advances(ranges, groups.committed(group_id, list(ranges)))
    if offsets:
        groups.commit(group_id, dict(offsets))
    return offsets


def read_ranges_df(spark: SparkSession, groups: GroupCoordinator, ranges: Ranges, settings: _Settings) -> DataFrame:
    from sparklog.model.schema import SPARK_READ_DDL, SPARK_READ_DDL_WITH_HEADERS
    from sparklog.spark.native import read_topics

    live = {tp: r for tp, r in ranges.items() if r[1] > r[0]}
    if not live:
        return spark.createDataFrame([], SPARK_READ_DDL_WITH_HEADERS if settings.include_headers else SPARK_READ_DDL)
    assign: dict[str, list[int]] = {}
    bounds: tuple[dict[str, dict[str, int]], dict[str, dict[str, int]]] = ({}, {})
    for (t, p), (start, end) in sorted(live.items()):
        assign.setdefault(t, []).append(p)
        bounds[0].setdefault(t, {})[str(p)], bounds[1].setdefault(t, {})[str(p)] = start, end
    options = {
        "assign": json.dumps(assign),
        "startingOffsets": json.dumps(bounds[0]),
        "endingOffsets": json.dumps(bounds[1]),
        "failOnDataLoss": str(settings.fail_on_data_loss).lower(),
        "includeHeaders": str(settings.include_headers).lower(),
    }
    return read_topics(spark, options, groups.replicas)


def connect_group(
    spark: SparkSession, options: Mapping[str, Any]
) -> tuple[dict[str, str], _Settings, GroupCoordinator]:
    """The options, settings and a group coordinator on a new connection (close it with
    ``groups.replicas.close()``, or use ``with groups.replicas``)."""
    from sparklog.group.coordinator import GroupCoordinator

    opts = session_options(spark, **options)
    settings = _settings(opts)
    return opts, settings, GroupCoordinator(connect_replicas(opts))


# -- consume -------------------------------------------------------------------------------
@dataclass
class GroupBatch:
    """One group read: ``df`` (Kafka source columns) holds ``ranges`` = {(topic, p): [start, end)}."""

    group_id: str
    df: DataFrame
    ranges: Ranges
    _options: dict[str, str] = field(repr=False)
    committed: bool = False

    @property
    def records(self) -> int:
        return sum(end - start for start, end in self.ranges.values())

    def commit(self) -> dict[TopicPartition, int]:
        """Record the end offsets under the group (standalone commit to ``__consumer_offsets``),
        below the committed ones too: as in Kafka, a commit stores what it carries, so it
        wins over a commit or reset made since this batch was read. Returns what was
        committed (unchanged offsets are left out). Fails if the group got live members meanwhile."""
        from sparklog.group.coordinator import GroupCoordinator

        with connect_replicas(self._options) as replicas:
            groups = GroupCoordinator(replicas)
            require_inactive_group(groups, self.group_id)
            committed = groups.committed(self.group_id, list(self.ranges))
            offsets = {tp: end for tp, (_start, end) in self.ranges.items() if committed.get(tp) != end}
            if offsets:
                groups.commit(self.group_id, offsets)
        self.committed = True
        return offsets


def consume(spark: SparkSession, group_id: str, topics: str | Iterable[str], **options: Any) -> GroupBatch:
    """The group's next records of ``topics`` (a name, comma-separated names or a list).

    Options: ``startingOffsets`` (``earliest``/``latest``/JSON, for partitions the group has
    no offset for; default earliest), ``auto.offset.reset`` (earliest/latest/none, same role),
    ``failOnDataLoss`` (default true), ``maxOffsetsPerTrigger`` (total cap, split across
    partitions by backlog), ``maxRecordsPerPartition``, ``includeHeaders``, cluster settings.
    """
    opts, settings, groups = connect_group(spark, options)
    with groups.replicas:
        partitions = input_partitions(groups, group_id, topics)
        require_inactive_group(groups, group_id)
        ranges = resolve_ranges(groups, group_id, partitions, settings, {})
        df = read_ranges_df(spark, groups, ranges, settings)
    return GroupBatch(group_id, df, ranges, opts)
