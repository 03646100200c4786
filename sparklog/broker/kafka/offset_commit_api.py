"""OffsetCommit (key 8, v2..v9), OffsetFetch (key 9, v1..v9) and OffsetDelete (key 47, v0):
a group's committed offsets through the Kafka protocol (DESIGN §8, §14).

Only the group's coordinator answers — the leader of the group's ``__consumer_offsets``
partition (``BrokerGroups.check_coordinator``); any other broker answers NOT_COORDINATOR and
the client looks the coordinator up again. Offsets are stored in and read from that
partition's leader table through :class:`~sparklog.broker.groups.offset_log.OffsetLog`, the
same records and app transactions sparklog's own clients, the CLI, the ``consumer_lag`` view
and Spark read: one ``__consumer_offsets`` whoever commits.

Validation, as Kafka's classic group coordinator does it:

* generation -1 with an empty member id is a standalone commit (``assign()`` consumers, the
  admin client): accepted only while the group has no live members — neither members of the
  broker's coordinator nor members of sparklog's ZooKeeper membership (the light consumer):
  ``BrokerGroups.active`` — else UNKNOWN_MEMBER_ID.
  A standalone commit makes the group known to ``sparklog groups list`` (its znodes);
* any other commit comes from a member: ``BrokerGroups.check_member(group_id, member_id,
  generation, instance_id)`` decides (UnknownMemberError / IllegalGenerationError /
  FencedInstanceIdError / RebalanceInProgressError; a group nobody knows is
  GROUP_ID_NOT_FOUND (v9+) or ILLEGAL_GENERATION (older versions), as Kafka answers);
* per partition, before anything is written: the topic and partition exist
  (UNKNOWN_TOPIC_OR_PARTITION; also when the topic was deleted after this broker looked it
  up: the commit carries the topic's incarnation and the offsets log refuses a deleted one,
  DESIGN §8), metadata at most :data:`MAX_METADATA_BYTES` bytes (Kafka's
  ``offset.metadata.max.bytes``; OFFSET_METADATA_TOO_LARGE), offset not negative
  (INVALID_COMMIT_OFFSET_SIZE). A refused partition changes nothing; the others of the request
  are stored in one commit, with the committed leader epoch where the version carries one;
* storage errors are answered as Kafka's coordinator maps its append errors: leadership
  moved → NOT_COORDINATOR, too few in-sync replicas or a timeout → COORDINATOR_NOT_AVAILABLE.

Consumer-protocol groups (KIP-848; OffsetCommit v9 carries the member epoch as generation and
OffsetFetch v9 the member id and epoch): the member's current epoch is accepted, and its previous
one for partitions it still holds (a heartbeat response with its new epoch may not have reached
it); else STALE_MEMBER_EPOCH, or UNKNOWN_MEMBER_ID for a member not in the group.

OffsetFetch with ``require_stable`` (v7+, KIP-447; librdkafka's read_committed consumers set
it) answers UNSTABLE_OFFSET_COMMIT for partitions an open transaction holds offsets of
(TxnOffsetCommit, :func:`sparklog.broker.transactions.txn_offsets.unstable_partitions`), so
an exactly-once application resumes only from offsets whose transaction ended.
OffsetFetch answers -1 (and no error) for partitions without a committed offset; v2+ with no
topics means every partition the group has an offset for; v8+ fetches several groups, each
answered on its own (a group this broker does not coordinate: NOT_COORDINATOR for that group).

OffsetDelete tombstones the group's offsets of the given partitions, refusing partitions of
topics the group's live members subscribe to (GROUP_SUBSCRIBED_TO_TOPIC). The broker's
membership is asked through ``BrokerGroups.subscribed_topics(group_id)``; sparklog's
ZooKeeper members' subscriptions (explicit topics and patterns) are checked as well.
"""

from __future__ import annotations

import re
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from sparklog.broker.kafka.context import (
    METADATA_MAX_AGE_MS,
    NO_THROTTLE,
    Api,
    ApiRequest,
    BrokerContext,
    build,
    response_module,
)
from sparklog.broker.kafka.error_codes import error_code
from sparklog.broker.transactions.txn_offsets import unstable_partitions
from sparklog.errors import (
    FencedError,
    GroupIdNotFoundError,
    LeaderNotAvailableError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderError,
    SparklogError,
    StorageError,
    UnknownMemberError,
    UnknownTopicCommitError,
    ZooKeeperUnavailableError,
)
from sparklog.log.group_offsets import OffsetCommit
from sparklog.model.group_ids import validate_group_id
from sparklog.model.topic import TopicPartition, partitions_by_topic

__all__ = ["APIS", "MAX_METADATA_BYTES"]

OFFSET_COMMIT_KEY, OFFSET_FETCH_KEY, OFFSET_DELETE_KEY = 8, 9, 47
MAX_METADATA_BYTES = 4096  # Kafka's offset.metadata.max.bytes default
_NO_OFFSET = -1
_NO_EPOCH = -1


class OffsetCommitPartition(Protocol):
    @property
    def partition_index(self) -> int: ...
    @property
    def committed_offset(self) -> int: ...
    @property
    def committed_metadata(self) -> str | None: ...


class OffsetCommitTopic(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def partitions(self) -> tuple[OffsetCommitPartition, ...]: ...


class OffsetCommitBody(Protocol):
    """What the handler reads of an OffsetCommit request (kio's v2..v9 request classes)."""

    @property
    def group_id(self) -> str: ...
    @property
    def generation_id_or_member_epoch(self) -> int: ...
    @property
    def member_id(self) -> str: ...
    @property
    def topics(self) -> tuple[OffsetCommitTopic, ...]: ...


class OffsetFetchTopic(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def partition_indexes(self) -> tuple[int, ...]: ...


class OffsetFetchGroup(Protocol):
    """One group of an OffsetFetch v8+; ``member_id`` and ``member_epoch`` are v9's, read only there."""

    @property
    def group_id(self) -> str: ...
    @property
    def topics(self) -> tuple[OffsetFetchTopic, ...] | None: ...
    @property
    def member_id(self) -> str | None: ...
    @property
    def member_epoch(self) -> int: ...


class OffsetFetchBody(Protocol):
    """What the handler reads of an OffsetFetch request (kio's v1..v9 request classes).

    ``group_id`` and ``topics`` exist up to v7 and ``groups`` from v8 (several groups per
    request): each is read only in the versions that have it."""

    @property
    def group_id(self) -> str: ...
    @property
    def topics(self) -> tuple[OffsetFetchTopic, ...] | None: ...
    @property
    def groups(self) -> tuple[OffsetFetchGroup, ...]: ...


class OffsetDeletePartition(Protocol):
    @property
    def partition_index(self) -> int: ...


class OffsetDeleteTopic(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def partitions(self) -> tuple[OffsetDeletePartition, ...]: ...


class OffsetDeleteBody(Protocol):
    """What the handler reads of an OffsetDelete request (kio's v0 request class)."""

    @property
    def group_id(self) -> str: ...
    @property
    def topics(self) -> tuple[OffsetDeleteTopic, ...]: ...


def _code(exc: BaseException) -> ErrorCode:
    """Kafka's coordinator's mapping of storage errors (GroupMetadataManager: an offline log is
    NOT_COORDINATOR), then the table."""
    if isinstance(exc, NotLeaderError | FencedError | StorageError):
        return ErrorCode.not_coordinator
    if isinstance(
        exc,
        NotEnoughReplicasError
        | NotEnoughReplicasAfterAppendError
        | LeaderNotAvailableError
        | ZooKeeperUnavailableError
        | TimeoutError,
    ):
        return ErrorCode.coordinator_not_available
    return error_code(exc)


def _groups(broker: BrokerContext) -> Any:
    if broker.groups is None:
        raise SparklogError("this listener has no group coordinator")
    return broker.groups


# -- membership checks -------------------------------------------------------------------------
def _check_standalone(broker: BrokerContext, group_id: str) -> None:
    """A commit from outside the group (generation -1, no member id): only while it has no
    live members, as Kafka's coordinator; the group is then known to ``groups list``."""
    groups = _groups(broker)
    if groups.active(group_id):
        raise UnknownMemberError(
            f"Group {group_id} has live members: a commit with generation -1 and no member id is refused; "
            "commit as a member of the group, or stop its members first"
        )
    groups.record_group(group_id)


# -- OffsetCommit ------------------------------------------------------------------------------
def offset_commit(request: ApiRequest[OffsetCommitBody], broker: BrokerContext) -> Any:
    module = response_module(OFFSET_COMMIT_KEY, request.api_version)
    body = request.body
    group_id = str(body.group_id)
    generation = int(body.generation_id_or_member_epoch)
    member_id = str(body.member_id or "")
    instance_id = getattr(body, "group_instance_id", None)
    codes: dict[TopicPartition, ErrorCode] = {}
    commits: dict[TopicPartition, OffsetCommit] = {}
    order = [(str(t.name), int(p.partition_index)) for t in body.topics for p in t.partitions]
    try:
        validate_group_id(group_id)
        _groups(broker).check_coordinator(group_id)
    except Exception as exc:  # noqa: BLE001 - answered as Kafka error codes, nothing looked at further
        return _commit_response(module, order, dict.fromkeys(order, _code(exc)))
    for topic in body.topics:
        for part in topic.partitions:
            tp = (str(topic.name), int(part.partition_index))
            codes[tp], commit = _check_partition(broker, tp, part)
            if codes[tp] is ErrorCode.none and commit is not None:
                commits[tp] = commit
    try:
        if commits:
            if generation < 0 and not member_id:
                _check_standalone(broker, group_id)
            else:
                groups = _groups(broker)
                generation = groups.check_member(group_id, member_id, generation, instance_id, set(commits))
            refused = _store(broker, group_id, commits, generation, member_id)
            codes.update(dict.fromkeys(refused, ErrorCode.unknown_topic_or_partition))
    except Exception as exc:  # noqa: BLE001 - answered as Kafka error codes
        code = _code(exc)
        if code is ErrorCode.group_id_not_found and request.api_version < 9:
            code = ErrorCode.illegal_generation  # Kafka's answer before v9
        codes.update(dict.fromkeys(commits, code))
    return _commit_response(module, order, codes)


def _store(
    broker: BrokerContext,
    group_id: str,
    commits: dict[TopicPartition, OffsetCommit],
    generation: int,
    member_id: str,
) -> set[TopicPartition]:
    """Store ``commits``; returns the partitions refused because their topic was deleted. A
    refusal decided on metadata up to ``METADATA_MAX_AGE_MS`` old is tried once more on fresh
    metadata: the topic may have been re-created meanwhile (a new incarnation)."""
    offsets = _groups(broker).offsets
    known = broker.replicas.topic_incarnations({t for t, _ in commits}, METADATA_MAX_AGE_MS)
    for attempt in range(2):
        try:
            offsets.commit(group_id, commits, generation=generation, member_id=member_id, incarnations=known)
            return set()
        except UnknownTopicCommitError as exc:
            refused = set(exc.partitions)
        fresh = broker.replicas.topic_incarnations({t for t, _ in refused})
        if attempt or all(fresh.get(t) == known.get(t) for t, _ in refused):
            return refused
        commits = {tp: c for tp, c in commits.items() if tp in refused}
        known = fresh
    return refused


def _commit_response(module: Any, order: list[TopicPartition], codes: dict[TopicPartition, ErrorCode]) -> Any:
    topics = _topic_codes(module.OffsetCommitResponseTopic, module.OffsetCommitResponsePartition, order, codes)
    return build(module.OffsetCommitResponse, throttle_time=NO_THROTTLE, topics=topics)


def _topic_codes(
    topic_type: type, partition_type: type, order: list[TopicPartition], codes: dict[TopicPartition, ErrorCode]
) -> tuple[Any, ...]:
    """Kafka's nested topic → partition → error code answer, in request order."""
    return tuple(
        build(
            topic_type,
            name=topic,
            partitions=tuple(
                build(partition_type, partition_index=p, error_code=codes[(topic, p)]) for p in partitions
            ),
        )
        for topic, partitions in partitions_by_topic(order).items()
    )


def _check_partition(
    broker: BrokerContext, tp: TopicPartition, part: OffsetCommitPartition
) -> tuple[ErrorCode, OffsetCommit | None]:
    topic, partition = tp
    try:
        broker.replicas.check_partition(topic, partition, max_age_ms=METADATA_MAX_AGE_MS)
    except SparklogError:
        return ErrorCode.unknown_topic_or_partition, None
    metadata = part.committed_metadata or ""
    if len(metadata.encode()) > MAX_METADATA_BYTES:
        return ErrorCode.offset_metadata_too_large, None
    offset = int(part.committed_offset)
    if offset < 0:
        return ErrorCode.invalid_commit_offset_size, None
    return ErrorCode.none, OffsetCommit(offset, metadata, int(getattr(part, "committed_leader_epoch", _NO_EPOCH)))


# -- OffsetFetch -------------------------------------------------------------------------------
def offset_fetch(request: ApiRequest[OffsetFetchBody], broker: BrokerContext) -> Any:
    module = response_module(OFFSET_FETCH_KEY, request.api_version)
    body = request.body
    stable = bool(getattr(body, "require_stable", False))
    if request.api_version >= 8:
        answers = [
            _fetch_group(
                broker,
                str(g.group_id),
                _wanted(g.topics),
                module,
                grouped=True,
                require_stable=stable,
                member=(str(g.member_id), int(g.member_epoch)) if getattr(g, "member_id", None) else None,
            )
            for g in body.groups
        ]
        return build(module.OffsetFetchResponse, throttle_time=NO_THROTTLE, groups=tuple(answers))
    code, topics = _fetch_group(
        broker, str(body.group_id), _wanted(body.topics), module, grouped=False, require_stable=stable
    )
    if request.api_version < 2 and code is not ErrorCode.none:
        # v0/v1 have no group-level error: every requested partition carries it.
        topics = tuple(
            build(
                module.OffsetFetchResponseTopic,
                name=t.name,
                partitions=tuple(
                    build(
                        module.OffsetFetchResponsePartition,
                        partition_index=p.partition_index,
                        committed_offset=_NO_OFFSET,
                        metadata="",
                        error_code=code,
                    )
                    for p in t.partitions
                ),
            )
            for t in topics
        )
    return build(module.OffsetFetchResponse, throttle_time=NO_THROTTLE, topics=topics, error_code=code)


def _wanted(topics: tuple[OffsetFetchTopic, ...] | None) -> list[tuple[str, list[int]]] | None:
    if topics is None:
        return None
    return [(str(t.name), [int(p) for p in t.partition_indexes]) for t in topics]


def _fetch_group(
    broker: BrokerContext,
    group_id: str,
    wanted: list[tuple[str, list[int]]] | None,
    module: Any,
    *,
    grouped: bool,
    require_stable: bool = False,
    member: tuple[str, int] | None = None,
) -> Any:
    topic_type = module.OffsetFetchResponseTopics if grouped else module.OffsetFetchResponseTopic
    partition_type = module.OffsetFetchResponsePartitions if grouped else module.OffsetFetchResponsePartition
    code = ErrorCode.none
    committed: dict[TopicPartition, OffsetCommit] = {}
    unstable: set[TopicPartition] = set()
    try:
        validate_group_id(group_id)
        groups = _groups(broker)
        groups.check_coordinator(group_id)
        if member is not None:
            # v9 (KIP-848): a consumer-protocol member fetches with its member id and epoch.
            member_id, member_epoch = member
            asked = {(t, p) for t, ps in wanted or () for p in ps}
            groups.consumer.check_offsets(group_id, member_id, member_epoch, asked)
        if require_stable:
            unstable = unstable_partitions(broker.replicas.zk, group_id)
        if wanted is None:
            committed = groups.offsets.committed_all(group_id)
        else:
            committed = groups.offsets.committed(group_id, [(t, p) for t, ps in wanted for p in ps])
    except Exception as exc:  # noqa: BLE001 - answered as Kafka error codes
        code = _code(exc)
    if wanted is None:
        listing = list(partitions_by_topic(sorted(committed)).items())
    else:
        listing = wanted
    topics = tuple(
        build(
            topic_type,
            name=topic,
            partitions=tuple(
                build(
                    partition_type,
                    partition_index=p,
                    committed_offset=_NO_OFFSET if (topic, p) in unstable else _offset(committed.get((topic, p))),
                    committed_leader_epoch=_epoch(committed.get((topic, p))),
                    metadata=_metadata(committed.get((topic, p))),
                    error_code=ErrorCode.unstable_offset_commit if (topic, p) in unstable else ErrorCode.none,
                )
                for p in partitions
            ),
        )
        for topic, partitions in listing
    )
    if grouped:
        return build(module.OffsetFetchResponseGroup, group_id=group_id, topics=topics, error_code=code)
    return code, topics


def _offset(commit: OffsetCommit | None) -> int:
    return _NO_OFFSET if commit is None or commit.offset is None else commit.offset


def _epoch(commit: OffsetCommit | None) -> int:
    return _NO_EPOCH if commit is None else commit.leader_epoch


def _metadata(commit: OffsetCommit | None) -> str:
    return "" if commit is None else commit.metadata


# -- OffsetDelete ------------------------------------------------------------------------------
def offset_delete(request: ApiRequest[OffsetDeleteBody], broker: BrokerContext) -> Any:
    module = response_module(OFFSET_DELETE_KEY, request.api_version)
    body = request.body
    group_id = str(body.group_id)
    order = [(str(t.name), int(p.partition_index)) for t in body.topics for p in t.partitions]
    codes: dict[TopicPartition, ErrorCode] = dict.fromkeys(order, ErrorCode.none)
    top = ErrorCode.none
    try:
        validate_group_id(group_id)
        groups = _groups(broker)
        groups.check_coordinator(group_id)
        committed = groups.offsets.committed(group_id, order)
        if not committed and not groups.library.registry.exists(group_id) and groups.view(group_id) is None:
            raise GroupIdNotFoundError(f"Consumer group '{group_id}' does not exist.")
        subscribed = _subscribed_topics(broker, group_id)
        doomed: dict[TopicPartition, OffsetCommit] = {}
        for topic, partition in order:
            try:
                broker.replicas.check_partition(topic, partition, max_age_ms=METADATA_MAX_AGE_MS)
            except SparklogError:
                codes[(topic, partition)] = ErrorCode.unknown_topic_or_partition
                continue
            if topic in subscribed:
                codes[(topic, partition)] = ErrorCode.group_subscribed_to_topic
            elif (topic, partition) in committed:
                doomed[(topic, partition)] = OffsetCommit(None)
        if doomed:
            groups.offsets.commit(group_id, doomed)
    except Exception as exc:  # noqa: BLE001 - answered as Kafka error codes
        top = _code(exc)
        codes = dict.fromkeys(order, ErrorCode.none)
    topics = _topic_codes(module.OffsetDeleteResponseTopic, module.OffsetDeleteResponsePartition, order, codes)
    return build(module.OffsetDeleteResponse, error_code=top, throttle_time=NO_THROTTLE, topics=topics)


def _subscribed_topics(broker: BrokerContext, group_id: str) -> set[str]:
    """Topics the group's live members subscribe to: the broker's membership (when it has
    ``subscribed_topics``) and sparklog's ZooKeeper members (topics and patterns)."""
    groups = _groups(broker)
    subscribed = groups.subscribed_topics(group_id)
    snap = groups.library.registry.snapshot(group_id)
    members = [*snap.members.values(), *(d.member for d in snap.departed.values())]
    patterns = [re.compile(m.pattern) for m in members if m.pattern]
    for member in members:
        subscribed |= set(member.topics)
    if patterns:
        subscribed |= {t for t in broker.replicas.list_topics() if any(rx.fullmatch(t) for rx in patterns)}
    return subscribed


APIS = (
    Api(OFFSET_COMMIT_KEY, 2, 9, offset_commit),
    Api(OFFSET_FETCH_KEY, 1, 9, offset_fetch),
    Api(OFFSET_DELETE_KEY, 0, 0, offset_delete),
)
